//! Process and memory caps through a pool of cgroups (v1 or v2), reused across spawns.
//!
//! Each `Sandbox` owns a pool directory nested under the cgroup this process is in
//! (so every limit that applies to the caller still applies to its tools), inside
//! one Knox-owned parent there, `knox/`: v1 uses the `pids` and `memory`
//! hierarchies side by side, v2 one directory with both controllers enabled. A
//! pool is named after its owner, `knox-sandbox-<pid>-<start time>-<n>`, so that
//! a later pool can tell a dead owner's leftovers (the owner was SIGKILLed) and
//! reclaim them: kill what is left in them, remove them. A slot is leased for one spawn; on return everything left in
//! it is killed and it is verified empty before it is leased again. Creating a
//! cgroup costs milliseconds, reusing one almost nothing. Dropping the pool kills
//! what is left and removes every directory it made.

use std::cell::Cell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sys;

/// Which cgroup interface enforces the caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// Separate `pids` and `memory` hierarchies.
    V1,
    /// The unified hierarchy.
    V2,
}

/// Why the cgroup pool could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Neither a v2 hierarchy with `pids` and `memory`, nor both v1 hierarchies, is mounted.
    #[error("no cgroup hierarchy with the `pids` and `memory` controllers is mounted")]
    NotFound,
    /// A cgroup file could not be read or written.
    #[error("cgroup `{path}`: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A slot still had processes after being killed.
    #[error("cgroup `{path}` is not empty after kill")]
    NotEmpty {
        /// The slot directory.
        path: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where each controller's pool lives.
#[derive(Debug, Clone)]
enum Layout {
    V1 { pids: PathBuf, memory: PathBuf },
    V2 { base: PathBuf },
}

/// One mounted cgroup hierarchy from `/proc/self/mountinfo`.
#[derive(Debug)]
struct Mount {
    point: PathBuf,
    v2: bool,
    options: Vec<String>,
}

fn mounts() -> io::Result<Vec<Mount>> {
    let text = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_mount).collect())
}

fn parse_mount(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let point = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let options = right.nth(1)?.split(',').map(str::to_owned).collect();
    let v2 = match fstype {
        "cgroup2" => true,
        "cgroup" => false,
        _ => return None,
    };
    Some(Mount {
        point: PathBuf::from(unescape_octal(point)),
        v2,
        options,
    })
}

fn unescape_octal(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// This process's cgroup path in the hierarchy named by `key` (`""` for v2, else a controller).
fn own_path(key: &str) -> io::Result<Option<String>> {
    let text = fs::read_to_string("/proc/self/cgroup")?;
    Ok(text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if key.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == key)
        };
        matches.then(|| path.to_owned())
    }))
}

fn join_under(point: &Path, cgroup_path: &str) -> PathBuf {
    point.join(cgroup_path.trim_start_matches('/'))
}

fn detect(parent: Option<&Path>) -> Result<(CgroupVersion, Vec<PathBuf>), CgroupError> {
    let mounts = mounts().map_err(io_err(Path::new("/proc/self/mountinfo")))?;
    if let Some(m) = mounts.iter().find(|m| m.v2) {
        let own = own_path("").map_err(io_err(Path::new("/proc/self/cgroup")))?;
        let dir = match parent {
            Some(p) => p.to_path_buf(),
            None => join_under(&m.point, own.as_deref().unwrap_or("/")),
        };
        let controllers = fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        let has = |c| controllers.split_whitespace().any(|x| x == c);
        if has("pids") && has("memory") {
            return Ok((CgroupVersion::V2, vec![dir]));
        }
    }
    let v1 = |controller: &str| -> Option<PathBuf> {
        let m = mounts
            .iter()
            .find(|m| !m.v2 && m.options.iter().any(|o| o == controller))?;
        let own = own_path(controller).ok().flatten()?;
        Some(join_under(&m.point, &own))
    };
    match (v1("pids"), v1("memory")) {
        (Some(pids), Some(memory)) => Ok((CgroupVersion::V1, vec![pids, memory])),
        _ => Err(CgroupError::NotFound),
    }
}

/// The directory of this process's own cgroup that holds the `pids` controller
/// (the v1 `pids` hierarchy, or the v2 unified one), if any.
pub fn own_pids_dir() -> Option<PathBuf> {
    detect(None).ok()?.1.into_iter().next()
}

/// The processes in cgroup `dir`.
fn procs_of(dir: &Path) -> Vec<i32> {
    let text = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Kills every process in cgroup `dir` and waits (briefly) until it is empty.
fn kill_cgroup(dir: &Path, v2: bool) -> Result<(), CgroupError> {
    for round in 0..400 {
        let pids = procs_of(dir);
        if pids.is_empty() {
            return Ok(());
        }
        if v2 && round == 0 {
            // Linux ≥ 5.14: one write kills the whole tree, forks included
            // (fails harmlessly on older kernels; the loop still kills by pid).
            let _ = fs::write(dir.join("cgroup.kill"), "1");
        }
        for pid in pids {
            let _ = sys::kill(pid, sys::signal::KILL);
        }
        std::thread::sleep(Duration::from_micros(if round < 20 { 100 } else { 5_000 }));
    }
    Err(CgroupError::NotEmpty {
        path: dir.to_path_buf(),
    })
}

/// The Knox-owned cgroup every pool is created in, under the caller's cgroup.
pub(crate) const KNOX_PARENT: &str = "knox";
/// Prefix of a pool's name; the owner's pid and start time follow.
const POOL_PREFIX: &str = "knox-sandbox-";

/// The process that made a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    /// Start time in clock ticks after boot (`/proc/<pid>/stat` field 22); absent
    /// in the names of pools made before it was recorded.
    start: Option<u64>,
}

/// `knox-sandbox-<pid>-<start>-<n>`, or the older `knox-sandbox-<pid>-<n>`.
fn pool_owner(name: &str) -> Option<Owner> {
    let parts: Vec<u64> = name
        .strip_prefix(POOL_PREFIX)?
        .split('-')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    match parts.as_slice() {
        [pid, _] => Some(Owner {
            pid: u32::try_from(*pid).ok()?,
            start: None,
        }),
        [pid, start, _] => Some(Owner {
            pid: u32::try_from(*pid).ok()?,
            start: Some(*start),
        }),
        _ => None,
    }
}

/// State and start time of process `pid` (`"self"` for this one), from `/proc`.
fn process_stat(pid: &str) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: fields start
    // after the last `)`, at field 3 (state); the start time is field 22.
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// Whether the owner of a pool still runs: its pid names a live process (not a
/// zombie) that started when the pool's name says (not a reused pid). A pool
/// named without a start time counts as alive while its pid is.
fn owner_alive(owner: Owner) -> bool {
    match process_stat(&owner.pid.to_string()) {
        None => false,
        Some(('Z' | 'X' | 'x', _)) => false,
        Some((_, start)) => owner.start.is_none_or(|s| s == start),
    }
}

/// Kills what is left in every pool under `dir` whose owner is dead and removes
/// it (its slots first); returns the pools removed. Pools of live owners, and
/// anything not named like a pool, are left alone. Concurrent reclaimers are
/// harmless: a directory already gone is skipped.
fn reclaim(dir: &Path, v2: bool) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name.to_str().and_then(pool_owner) else {
            continue;
        };
        if owner_alive(owner) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let pool = entry.path();
        let slots = fs::read_dir(&pool)
            .map(|e| {
                e.flatten()
                    .filter(|s| s.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|s| s.path())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        for slot in &slots {
            let _ = kill_cgroup(slot, v2);
            let _ = fs::remove_dir(slot);
        }
        let _ = kill_cgroup(&pool, v2);
        if fs::remove_dir(&pool).is_ok() {
            removed.push(pool);
        }
    }
    removed
}

fn write_file(path: &Path, text: &str) -> Result<(), CgroupError> {
    fs::write(path, text).map_err(io_err(path))
}

/// A cgroup (one directory per hierarchy) that one confined process tree at a time uses.
#[derive(Debug)]
pub(crate) struct Slot {
    dirs: Vec<PathBuf>,
    procs: Vec<File>,
    /// Whether this is a v2 cgroup (`cgroup.kill` may exist).
    v2: bool,
    /// `(pids.max, memory limit)` last written, so a reused slot skips rewriting them.
    limits: Option<(u32, u64)>,
    /// Event counters when the slot was last emptied, if known.
    counters: Option<Counters>,
}

impl Slot {
    fn create(dirs: Vec<PathBuf>, v2: bool) -> Result<Self, CgroupError> {
        for dir in &dirs {
            match fs::create_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(io_err(dir)(e)),
                _ => {}
            }
        }
        let procs = dirs
            .iter()
            .map(|d| {
                let path = d.join("cgroup.procs");
                OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(io_err(&path))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            dirs,
            procs,
            v2,
            limits: None,
            counters: None,
        })
    }

    /// Opened `cgroup.procs` files; writing `0` to each moves the writer in.
    pub(crate) fn procs(&self) -> &[File] {
        &self.procs
    }

    fn first(&self) -> &Path {
        self.dirs
            .first()
            .map_or(Path::new("/nonexistent"), PathBuf::as_path)
    }

    /// Kills every process in the slot and waits (briefly) until it is empty.
    pub(crate) fn kill_all(&self) -> Result<(), CgroupError> {
        kill_cgroup(self.first(), self.v2)
    }

    /// Closes the slot's files and removes its directories (they must be empty).
    fn remove(self) {
        drop(self.procs);
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

#[derive(Debug)]
struct PoolInner {
    version: CgroupVersion,
    layout: Layout,
    free: Mutex<Vec<Slot>>,
    next: AtomicUsize,
    capacity: usize,
    /// Dead owners' pools removed when this one was made.
    reclaimed: Vec<PathBuf>,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if let Ok(free) = self.free.get_mut() {
            for slot in free.drain(..) {
                let _ = slot.kill_all();
                slot.remove();
            }
        }
        let bases = match &self.layout {
            Layout::V1 { pids, memory } => [Some(pids), Some(memory)],
            Layout::V2 { base } => [Some(base), None],
        };
        for base in bases.into_iter().flatten() {
            let _ = fs::remove_dir(base);
        }
    }
}

/// Pre-created cgroups, leased one per spawn.
#[derive(Debug, Clone)]
pub(crate) struct CgroupPool {
    inner: Arc<PoolInner>,
}

static INSTANCE: AtomicUsize = AtomicUsize::new(0);

impl CgroupPool {
    /// Creates the pool directory under this process's cgroup (or `parent` for v2)
    /// and `prefill` slots.
    pub(crate) fn new(
        parent: Option<&Path>,
        prefill: usize,
        capacity: usize,
    ) -> Result<Self, CgroupError> {
        let (version, parents) = detect(parent)?;
        let v2 = version == CgroupVersion::V2;
        let knox: Vec<PathBuf> = parents.iter().map(|p| p.join(KNOX_PARENT)).collect();
        for (parent, dir) in parents.iter().zip(&knox) {
            match fs::create_dir(dir) {
                Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(io_err(dir)(e)),
                _ => {}
            }
            if v2 {
                enable_v2_controllers(parent)?;
                enable_v2_controllers(dir)?;
            }
        }
        // Leftovers of owners that died without dropping their pool: in the
        // Knox parent, and directly under the caller's cgroup (where pools were
        // made before the Knox parent existed).
        let reclaimed = knox
            .iter()
            .chain(&parents)
            .flat_map(|dir| reclaim(dir, v2))
            .collect();
        let start = process_stat("self").map_or(0, |(_, start)| start);
        let name = format!(
            "{POOL_PREFIX}{}-{start}-{}",
            std::process::id(),
            INSTANCE.fetch_add(1, Ordering::Relaxed)
        );
        let bases: Vec<PathBuf> = knox.iter().map(|p| p.join(&name)).collect();
        for base in &bases {
            fs::create_dir(base).map_err(io_err(base))?;
        }
        let layout = match (version, bases.as_slice()) {
            (CgroupVersion::V1, [pids, memory]) => Layout::V1 {
                pids: pids.clone(),
                memory: memory.clone(),
            },
            (CgroupVersion::V2, [base]) => Layout::V2 { base: base.clone() },
            _ => return Err(CgroupError::NotFound),
        };
        let inner = PoolInner {
            version,
            layout,
            free: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            capacity,
            reclaimed,
        };
        let pool = Self {
            inner: Arc::new(inner),
        };
        if let Layout::V2 { base } = &pool.inner.layout {
            enable_v2_controllers(base)?;
        }
        let slots = (0..prefill)
            .map(|_| pool.create_slot())
            .collect::<Result<Vec<_>, _>>()?;
        pool.lock_free().extend(slots);
        Ok(pool)
    }

    /// Dead owners' pools this one removed when it was made.
    pub(crate) fn reclaimed(&self) -> &[PathBuf] {
        &self.inner.reclaimed
    }

    /// The interface in use.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.inner.version
    }

    /// The pool directories (one per hierarchy).
    pub(crate) fn dirs(&self) -> Vec<PathBuf> {
        match &self.inner.layout {
            Layout::V1 { pids, memory } => vec![pids.clone(), memory.clone()],
            Layout::V2 { base } => vec![base.clone()],
        }
    }

    fn lock_free(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.inner
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn create_slot(&self) -> Result<Slot, CgroupError> {
        let n = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let leaf = format!("s{n}");
        let dirs = match &self.inner.layout {
            Layout::V1 { pids, memory } => vec![pids.join(&leaf), memory.join(&leaf)],
            Layout::V2 { base } => vec![base.join(&leaf)],
        };
        Slot::create(dirs, self.inner.version == CgroupVersion::V2)
    }

    /// Leases an empty slot with the given caps, creating one when none is free.
    pub(crate) fn lease(&self, max_processes: u32, max_memory: u64) -> Result<Lease, CgroupError> {
        // Free slots were verified empty when given back.
        let reused = self.lock_free().pop();
        let slot = match reused {
            Some(slot) => slot,
            None => self.create_slot()?,
        };
        let cached = slot.counters;
        let mut lease = Lease {
            pool: self.clone(),
            slot: Some(slot),
            before: Counters::default(),
            emptied: Cell::new(false),
            after: Cell::new(None),
        };
        if lease.slot().limits != Some((max_processes, max_memory)) {
            lease.set_limits(max_processes, max_memory)?;
            if let Some(slot) = lease.slot.as_mut() {
                slot.limits = Some((max_processes, max_memory));
            }
        }
        lease.before = cached.unwrap_or_else(|| lease.counters());
        Ok(lease)
    }

    fn give_back(&self, slot: Slot, emptied: bool) {
        if emptied || slot.kill_all().is_ok() {
            let mut free = self.lock_free();
            if free.len() < self.inner.capacity {
                free.push(slot);
                return;
            }
        }
        slot.remove();
    }
}

fn enable_v2_controllers(dir: &Path) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    let current = fs::read_to_string(&path).map_err(io_err(&path))?;
    if current.split_whitespace().any(|c| c == "pids")
        && current.split_whitespace().any(|c| c == "memory")
    {
        return Ok(());
    }
    // Fails with EBUSY when `dir` has processes of its own (the "no internal
    // processes" rule): run Knox in a delegated cgroup and pass it as the parent.
    OpenOptions::new()
        .write(true)
        .open(&path)
        .and_then(|mut f| f.write_all(b"+pids +memory"))
        .map_err(io_err(&path))
}

/// Event counters read before and after a run, to attribute a kill to a cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    /// Forks refused at `pids.max`.
    pub(crate) pids_max: u64,
    /// Processes killed by the memory cgroup's OOM killer.
    pub(crate) oom_kills: u64,
}

fn counter(path: &Path, key: &str) -> u64 {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0)
}

/// One leased slot; returned to the pool (emptied) when dropped.
#[derive(Debug)]
pub(crate) struct Lease {
    pool: CgroupPool,
    slot: Option<Slot>,
    before: Counters,
    /// Set once `kill_all` found the slot empty after the run: nothing can enter
    /// an empty slot but through its leaseholder, so it goes back without a recheck.
    emptied: Cell<bool>,
    /// Counters read by `hits`: the next lease's baseline, saving two reads.
    after: Cell<Option<Counters>>,
}

impl Lease {
    fn slot(&self) -> &Slot {
        // Only `Drop` takes the slot out.
        #[expect(clippy::unwrap_used, reason = "the slot is present until drop")]
        self.slot.as_ref().unwrap()
    }

    /// The slot's opened `cgroup.procs` files.
    pub(crate) fn procs(&self) -> &[File] {
        self.slot().procs()
    }

    /// Kills every process in the slot.
    pub(crate) fn kill_all(&self) -> Result<(), CgroupError> {
        let done = self.slot().kill_all();
        self.emptied.set(done.is_ok());
        done
    }

    /// Cap hits since the lease began.
    pub(crate) fn hits(&self) -> Counters {
        let now = self.counters();
        self.after.set(Some(now));
        Counters {
            pids_max: now.pids_max.saturating_sub(self.before.pids_max),
            oom_kills: now.oom_kills.saturating_sub(self.before.oom_kills),
        }
    }

    fn dirs(&self) -> (&Path, &Path) {
        let dirs = &self.slot().dirs;
        let first = self.slot().first();
        (first, dirs.get(1).map_or(first, PathBuf::as_path))
    }

    /// The slot's event counters now.
    pub(crate) fn counters(&self) -> Counters {
        let (pids, memory) = self.dirs();
        let oom_file = match self.pool.version() {
            CgroupVersion::V1 => memory.join("memory.oom_control"),
            CgroupVersion::V2 => memory.join("memory.events"),
        };
        Counters {
            pids_max: counter(&pids.join("pids.events"), "max "),
            oom_kills: counter(&oom_file, "oom_kill "),
        }
    }

    fn set_limits(&self, max_processes: u32, max_memory: u64) -> Result<(), CgroupError> {
        let (pids, memory) = self.dirs();
        write_file(&pids.join("pids.max"), &max_processes.to_string())?;
        match self.pool.version() {
            CgroupVersion::V2 => {
                write_file(&memory.join("memory.max"), &max_memory.to_string())?;
                let swap = memory.join("memory.swap.max");
                if swap.exists() {
                    write_file(&swap, "0")?;
                }
            }
            CgroupVersion::V1 => {
                // memsw (memory + swap) must stay >= the memory limit at every step.
                let memsw = memory.join("memory.memsw.limit_in_bytes");
                let has_memsw = memsw.exists();
                if has_memsw {
                    write_file(&memsw, "-1")?;
                }
                write_file(
                    &memory.join("memory.limit_in_bytes"),
                    &max_memory.to_string(),
                )?;
                if has_memsw {
                    write_file(&memsw, &max_memory.to_string())?;
                }
            }
        }
        Ok(())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(mut slot) = self.slot.take() {
            // Counters read before the slot was emptied may miss a last OOM kill.
            slot.counters = self.after.get().filter(|_| self.emptied.get());
            self.pool.give_back(slot, self.emptied.get());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse() {
        let v1 = "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids";
        let m = parse_mount(v1);
        assert!(
            m.as_ref()
                .is_some_and(|m| !m.v2 && m.options.iter().any(|o| o == "pids")),
            "{m:?}"
        );
        let v2 = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw";
        assert!(
            parse_mount(v2).is_some_and(|m| m.v2 && m.point == Path::new("/sys/fs/cgroup/unified"))
        );
        assert!(parse_mount("22 1 0:5 / /proc rw - proc proc rw").is_none());
    }

    #[test]
    fn pool_names_give_their_owner() {
        let owner = |pid, start| Some(Owner { pid, start });
        assert_eq!(pool_owner("knox-sandbox-42-9000-3"), owner(42, Some(9000)));
        assert_eq!(pool_owner("knox-sandbox-42-0"), owner(42, None));
        for other in [
            "knox-sandbox-42",
            "knox-sandbox-a-1",
            "knox-sandbox-1-2-3-4",
            "knox",
            "s0",
            "knox-sandbox--1-2",
        ] {
            assert_eq!(pool_owner(other), None, "{other}");
        }
    }

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let pid = std::process::id();
        let start = process_stat("self").map(|(_, s)| s);
        assert!(start.is_some());
        assert!(owner_alive(Owner { pid, start }));
        assert!(owner_alive(Owner { pid, start: None }));
        let other = start.map(|s| s + 1);
        assert!(!owner_alive(Owner { pid, start: other }));
    }

    #[test]
    fn counters_parse_v1_and_v2_formats() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let f = dir.path().join("c");
        fs::write(&f, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")?;
        assert_eq!(counter(&f, "oom_kill "), 3);
        fs::write(&f, "low 0\nhigh 0\nmax 5\noom 1\noom_kill 2\n")?;
        assert_eq!(counter(&f, "max "), 5);
        Ok(())
    }
}
