//! The corpus fixture: every file, socket and process an attack targets, created by the fixture and removed on drop.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Ipv6Addr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use knox_sandbox::{Access, Family, Limits, SandboxPolicy};

use super::{CasePolicy, CorpusError};

static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A directory removed (recursively) on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<Self, CorpusError> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("knox-{tag}-{}-{n}-{nanos:08x}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir(&path).map_err(CorpusError::io("creating the fixture root"))?;
        let canonical =
            std::fs::canonicalize(&path).map_err(CorpusError::io("canonicalizing the root"))?;
        Ok(Self(canonical))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fixture's victim: a copy of the probe (an executable no policy grants)
/// holding a secret in memory, in a process group of its own.
#[derive(Debug)]
struct Victim {
    child: Child,
    /// The victim echoes each line written here; it exits when this closes.
    stdin: ChildStdin,
    /// Its echoes, read by a thread of their own (which ends when the victim does).
    echoes: Receiver<String>,
    /// The number of the last echo asked for.
    pings: u64,
    addr: u64,
    len: usize,
}

/// How long a victim has to echo a line before it counts as stopped. It answers in
/// microseconds when it runs; this only bounds a victim an attack stopped.
const ECHO_TIMEOUT: Duration = Duration::from_secs(10);

impl Victim {
    fn spawn(binary: &Path, secret: &str) -> Result<Self, CorpusError> {
        let start = || {
            Command::new(binary)
                .args(["victim", secret])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
        };
        // The binary was just copied: a process another thread forked while the copy's
        // write descriptor was open holds it until that process execs, and `execve`
        // fails with ETXTBSY meanwhile. That window is short: retry, bounded.
        let mut tries = 0;
        let mut child = loop {
            match start() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.map_err(CorpusError::io("starting the victim"))?,
            }
        };
        let stdin = child.stdin.take();
        let first = child.stdout.take().and_then(|out| {
            let mut out = BufReader::new(out);
            let mut line = String::new();
            out.read_line(&mut line).ok()?;
            Some((line, out))
        });
        let parsed = first.and_then(|(l, out)| {
            let (addr, len) = l.trim().split_once(' ')?;
            Some((addr.parse().ok()?, len.parse().ok()?, out))
        });
        match (stdin, parsed) {
            (Some(stdin), Some((addr, len, out))) => {
                let (tx, echoes) = mpsc::channel();
                let reader = std::thread::Builder::new()
                    .name("corpus-victim".into())
                    .spawn(move || {
                        for line in out.lines() {
                            let Ok(line) = line else { break };
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    });
                if let Err(e) = reader {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(CorpusError::io("reading the victim")(e));
                }
                Ok(Self {
                    child,
                    stdin,
                    echoes,
                    pings: 0,
                    addr,
                    len,
                })
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                Err(CorpusError::Victim)
            }
        }
    }

    /// Whether it still runs. A victim that died is reaped here, and only here:
    /// until then its pid cannot be reused, so no attack can hit another process.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether it answers: a line written to it comes back. A signal is delivered
    /// before the process it was sent to returns to user space, so a signal sent
    /// before this line (a `kill`, a `SIGIO` an attack armed) has taken effect by
    /// the time the victim could echo it: a killed victim never answers (its
    /// output ends), a stopped one not within [`ECHO_TIMEOUT`]. Without this
    /// barrier a signal still on its way reads as "survived" after the case that
    /// sent it and as "harmed" after the next one.
    fn answers(&mut self) -> bool {
        self.pings += 1;
        let want = self.pings.to_string();
        if writeln!(self.stdin, "{want}")
            .and_then(|()| self.stdin.flush())
            .is_err()
        {
            return false;
        }
        let deadline = Instant::now() + ECHO_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.echoes.recv_timeout(left) {
                // An echo of an earlier ping that timed out: read on.
                Ok(line) if line != want => {}
                Ok(_) => return true,
                Err(_) => return false,
            }
        }
    }

    /// Whether it runs untouched: it answers (every signal sent to it so far has
    /// been delivered), is alive, not stopped or traced, its secret intact (read
    /// through `/proc/<pid>/mem`, which its parent may read). A victim already seen
    /// dead or stopped is not asked: it could only time out.
    fn intact(&mut self, secret: &str) -> bool {
        if !self.running() || !self.answers() || !self.running() {
            return false;
        }
        let pid = self.child.id();
        let tracer = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim() != "0"))
            .unwrap_or(true);
        let mut memory = vec![0_u8; self.len];
        let read = std::fs::File::open(format!("/proc/{pid}/mem"))
            .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut memory, self.addr));
        !tracer && read.is_ok() && memory == secret.as_bytes()
    }

    /// Alive, and sleeping or running (not stopped, traced or exiting).
    fn running(&mut self) -> bool {
        if !self.alive() {
            return false;
        }
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        matches!(state, Some('S' | 'R'))
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the victim is, for one case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VictimInfo {
    /// Its pid (also its process group).
    pub pid: u32,
    /// Address of its secret in its memory.
    pub addr: u64,
    /// Length of the secret.
    pub len: usize,
}

/// One snapshot entry: what an escape could change about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    path: PathBuf,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime_ns: i128,
    content: Option<Vec<u8>>,
    xattr: bool,
}

/// A per-run sandbox of attack targets. See the module docs of [`super`].
///
/// Layout under a fresh temp directory:
/// - `workspace/` — the confined tool's workspace; `tools/` holds a copy of
///   `/bin/true`, a shell script, a junk "module" and a junk "swap file";
///   each case gets `workspace/<id>/`.
/// - `outside/` — nothing grants it: `canary.txt` (the secret), `victim-bin`
///   (the victim's executable), `unix.sock` (a listening pathname socket);
///   each case gets `outside/<id>/` with a `victim.txt` and an empty `dir/`.
/// - `readonly/input.txt` — granted read only.
#[derive(Debug)]
pub struct Fixture {
    root: TempDir,
    probe: PathBuf,
    secret: String,
    limits: Limits,
    tcp: TcpListener,
    tcp6: Option<TcpListener>,
    udp: UdpSocket,
    _unix: UnixListener,
    _abstract: UnixListener,
    abstract_name: String,
    decoy_cgroup: Option<PathBuf>,
    victim: Mutex<Option<Victim>>,
}

impl Fixture {
    /// Creates the fixture; `probe` is the `knox-probe` binary the cases run.
    pub fn new(probe: impl Into<PathBuf>) -> Result<Self, CorpusError> {
        let probe = std::fs::canonicalize(probe.into())
            .map_err(CorpusError::io("locating the probe binary"))?;
        let root = TempDir::new("corpus")?;
        let secret = format!("knox-canary-{}", root.0.display()).replace('/', "_");
        for dir in ["workspace/tools", "outside", "readonly"] {
            std::fs::create_dir_all(root.0.join(dir)).map_err(CorpusError::io("mkdir"))?;
        }
        let write = |rel: &str, bytes: &[u8], mode: u32| -> Result<(), CorpusError> {
            let path = root.0.join(rel);
            std::fs::write(&path, bytes).map_err(CorpusError::io("writing a fixture file"))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(CorpusError::io("chmod of a fixture file"))
        };
        write("outside/canary.txt", secret.as_bytes(), 0o644)?;
        write("readonly/input.txt", b"read-only input", 0o644)?;
        write("workspace/tools/script.sh", b"#!/bin/sh\nexit 0\n", 0o755)?;
        write("workspace/tools/junk.ko", b"\x7fELF not a module", 0o644)?;
        write("workspace/tools/swap", &[0_u8; 4096], 0o600)?;
        let copy = |from: &Path, to: &str| {
            std::fs::copy(from, root.0.join(to)).map_err(CorpusError::io("copying a binary"))
        };
        copy(Path::new("/bin/true"), "workspace/tools/true")?;
        copy(&probe, "outside/victim-bin")?;
        let tcp = TcpListener::bind("127.0.0.1:0").map_err(CorpusError::io("tcp listener"))?;
        let tcp6 = TcpListener::bind((Ipv6Addr::LOCALHOST, 0)).ok();
        let udp = UdpSocket::bind("127.0.0.1:0").map_err(CorpusError::io("udp socket"))?;
        let unix = UnixListener::bind(root.0.join("outside/unix.sock"))
            .map_err(CorpusError::io("unix listener"))?;
        let abstract_name = format!("knox-corpus-{}", root.0.display()).replace('/', "_");
        let abstract_addr = SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .map_err(CorpusError::io("abstract address"))?;
        let abstract_listener = UnixListener::bind_addr(&abstract_addr)
            .map_err(CorpusError::io("abstract listener"))?;
        let decoy_cgroup = knox_sandbox::own_pids_dir()
            .map(|d| {
                d.join(format!(
                    "knox-corpus-decoy-{}",
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ))
            })
            .filter(|d| std::fs::create_dir(d).is_ok());
        if decoy_cgroup.is_none() {
            // No cgroup to escape to (not root): a stand-in file, so that the
            // attack still meets the same refusal.
            let dir = root.0.join("outside/no-cgroup");
            std::fs::create_dir(&dir)
                .and_then(|()| std::fs::write(dir.join("cgroup.procs"), b""))
                .map_err(CorpusError::io("decoy cgroup stand-in"))?;
        }
        let victim = Victim::spawn(&root.0.join("outside/victim-bin"), &secret)?;
        Ok(Self {
            root,
            probe,
            secret,
            limits: Self::tool_limits(),
            tcp,
            tcp6,
            udp,
            _unix: unix,
            _abstract: abstract_listener,
            abstract_name,
            decoy_cgroup,
            victim: Mutex::new(Some(victim)),
        })
    }

    /// The limits of the confined policy: the default family limits scaled down
    /// so that every resource attack ends in seconds.
    pub fn tool_limits() -> Limits {
        Limits {
            max_processes: 32,
            max_file_bytes: 4 << 20,
            max_memory_bytes: 128 << 20,
            cpu_seconds: 2,
            max_open_files: 64,
            max_address_space_bytes: None,
        }
    }

    /// The caps of the unconfined baseline's harness: above the tool's limits (so
    /// resource attacks succeed there) and still far below the machine's.
    pub fn harness_limits(&self) -> Limits {
        let l = &self.limits;
        Limits {
            max_processes: l.max_processes * 4,
            max_file_bytes: l.max_file_bytes * 2,
            max_memory_bytes: l.max_memory_bytes * 2 + (64 << 20),
            cpu_seconds: l.cpu_seconds + 3,
            max_open_files: l.max_open_files * 4,
            max_address_space_bytes: None,
        }
    }

    /// The policy an "offline" tool gets in this workspace: the runtime baseline
    /// plus the offline family, execute on the probe, read on `readonly/`, and
    /// [`Fixture::tool_limits`].
    pub fn confined_policy(&self) -> Result<SandboxPolicy, CorpusError> {
        self.policy(&[Family::Offline])
    }

    pub(crate) fn case_policy(&self, variant: CasePolicy) -> Result<SandboxPolicy, CorpusError> {
        match variant {
            CasePolicy::Offline => self.confined_policy(),
            CasePolicy::NetworkClient => self.policy(&[Family::Offline, Family::NetworkClient]),
            CasePolicy::Terminal => self.policy(&[Family::Offline, Family::Terminal]),
            CasePolicy::Python => self.policy(&[Family::Offline, Family::Python]),
            CasePolicy::OfflineWith(extra) => {
                let mut p = self.confined_policy()?;
                p.syscalls.extend(extra.iter().map(|s| (*s).to_owned()));
                Ok(p)
            }
        }
    }

    fn policy(&self, families: &[Family]) -> Result<SandboxPolicy, CorpusError> {
        let mut p = SandboxPolicy::for_families(families, self.workspace())?
            .grant(&self.probe, &[Access::Read, Access::Execute])
            .grant(self.readonly(), &[Access::Read]);
        p.limits = self.limits.clone();
        Ok(p)
    }

    /// The probe binary.
    pub fn probe(&self) -> &Path {
        &self.probe
    }

    /// The confined tool's workspace.
    pub fn workspace(&self) -> PathBuf {
        self.root.0.join("workspace")
    }

    /// The directory no policy grants.
    pub fn outside(&self) -> PathBuf {
        self.root.0.join("outside")
    }

    /// The directory granted read only.
    pub fn readonly(&self) -> PathBuf {
        self.root.0.join("readonly")
    }

    /// The canary: a secret file outside the workspace.
    pub fn canary(&self) -> PathBuf {
        self.outside().join("canary.txt")
    }

    /// The canary's content (also the victim's in-memory secret).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The confined policy's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Port of the fixture's loopback TCP listener (127.0.0.1).
    pub fn tcp_port(&self) -> u16 {
        self.tcp.local_addr().map_or(0, |a| a.port())
    }

    /// Port of the fixture's IPv6 loopback TCP listener (`[::1]`), if IPv6 is up.
    pub fn tcp6_port(&self) -> Option<u16> {
        self.tcp6
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .map(|a| a.port())
    }

    /// Port of the fixture's loopback UDP socket.
    pub fn udp_port(&self) -> u16 {
        self.udp.local_addr().map_or(0, |a| a.port())
    }

    /// The fixture's listening pathname UNIX socket.
    pub fn unix_socket(&self) -> PathBuf {
        self.outside().join("unix.sock")
    }

    /// The name (without the leading NUL) of the fixture's abstract UNIX socket.
    pub fn abstract_name(&self) -> &str {
        &self.abstract_name
    }

    /// `cgroup.procs` of a cgroup the fixture made beside the caller's, or of a
    /// plain file standing in for one when it could not make one (not root).
    pub fn decoy_cgroup_procs(&self) -> PathBuf {
        self.decoy_cgroup.as_ref().map_or_else(
            || self.outside().join("no-cgroup/cgroup.procs"),
            |d| d.join("cgroup.procs"),
        )
    }

    /// The victim, restarted if an earlier (unconfined) attack killed, stopped,
    /// traced or overwrote it.
    pub(crate) fn victim(&self) -> Result<VictimInfo, CorpusError> {
        let mut slot = self.victim.lock().unwrap_or_else(PoisonError::into_inner);
        if !slot.as_mut().is_some_and(|v| v.intact(&self.secret)) {
            *slot = None;
            *slot = Some(Victim::spawn(
                &self.outside().join("victim-bin"),
                &self.secret,
            )?);
        }
        let v = slot.as_ref().ok_or(CorpusError::Victim)?;
        Ok(VictimInfo {
            pid: v.child.id(),
            addr: v.addr,
            len: v.len,
        })
    }

    /// Whether the victim is still alive and untouched (without restarting it).
    pub(crate) fn victim_intact(&self) -> bool {
        let mut slot = self.victim.lock().unwrap_or_else(PoisonError::into_inner);
        slot.as_mut().is_some_and(|v| v.intact(&self.secret))
    }

    /// Fresh per-case directories: `outside/<id>/{victim.txt, dir/}` and
    /// `workspace/<id>/{file.txt, mnt/, old/, to-canary, to-victim, race}`.
    pub(crate) fn prepare_case(&self, id: &str) -> Result<(PathBuf, PathBuf), CorpusError> {
        let (outside, inside) = (self.outside().join(id), self.workspace().join(id));
        let _ = std::fs::remove_dir_all(&outside);
        let _ = std::fs::remove_dir_all(&inside);
        let e = CorpusError::io;
        std::fs::create_dir_all(outside.join("dir")).map_err(e("case dir"))?;
        std::fs::write(outside.join("victim.txt"), b"keep").map_err(e("case file"))?;
        std::fs::set_permissions(
            outside.join("victim.txt"),
            std::fs::Permissions::from_mode(0o644),
        )
        .map_err(e("case file mode"))?;
        for dir in ["mnt", "old"] {
            std::fs::create_dir_all(inside.join(dir)).map_err(e("case dir"))?;
        }
        std::fs::write(inside.join("file.txt"), b"inside").map_err(e("case file"))?;
        let link = std::os::unix::fs::symlink;
        link(self.canary(), inside.join("to-canary")).map_err(e("symlink"))?;
        link(outside.join("victim.txt"), inside.join("to-victim")).map_err(e("symlink"))?;
        link(inside.join("file.txt"), inside.join("race")).map_err(e("symlink"))?;
        Ok((outside, inside))
    }

    /// Removes a case's directories (best effort).
    pub(crate) fn clean_case(&self, id: &str) {
        let _ = std::fs::remove_dir_all(self.outside().join(id));
        let _ = std::fs::remove_dir_all(self.workspace().join(id));
    }

    /// What an escape could change: the case's outside directory, the canary,
    /// the read-only grant.
    pub(crate) fn snapshot(&self, outside: &Path) -> Vec<Entry> {
        let mut out = Vec::new();
        for path in [self.canary(), self.readonly().join("input.txt")] {
            out.extend(entry(&path));
        }
        walk(outside, &mut out);
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let slot = self
            .victim
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        drop(slot.take());
        if let Some(d) = &self.decoy_cgroup {
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<Entry>) {
    out.extend(entry(dir));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => walk(&path, out),
            Ok(_) => out.extend(entry(&path)),
            Err(_) => {}
        }
    }
}

fn entry(path: &Path) -> Option<Entry> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let content = m
        .is_file()
        .then(|| std::fs::read(path).ok())
        .flatten()
        .filter(|c| c.len() <= 1 << 20);
    Some(Entry {
        path: path.to_path_buf(),
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        content,
        xattr: crate::sys::has_user_xattr(path),
    })
}
