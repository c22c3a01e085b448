//! Landlock's audit records (ABI ≥ 7) read back into the evidence.
//!
//! With `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` the kernel writes one
//! `AUDIT_LANDLOCK_ACCESS` (1423) record per denial of the executed tool, an
//! `AUDIT_LANDLOCK_DOMAIN` (1424) record the first time a domain denies (with the
//! pid that called `landlock_restrict_self`: the spawned child), and, inside a
//! system call, the `AUDIT_SYSCALL` (1300) record of that call — all under one
//! event serial. Landlock writes nothing while the kernel's audit is disabled
//! (`audit_enabled` = 0, the default without auditd or `audit=1`).
//!
//! One [`Tap`] per process reads the kernel's read-only multicast group
//! (`AUDIT_NLGRP_READLOG`: `CAP_AUDIT_READ`, beside auditd, which keeps its own
//! unicast stream) on a thread of its own, assembles each event, and hands every
//! Landlock denial whose domain belongs to a registered run to that run as a
//! [`DeniedSyscall`] with [`DeniedSyscall::landlock`] set — through the same
//! channel and report as the supervisor's seccomp denials.
//!
//! Records arrive after the call that caused them (the kernel's `kauditd`
//! thread sends them), so a run's records are complete only after a barrier:
//! the tap writes an `AUDIT_USER` message after the run and waits until it comes
//! back through the same queue, behind every record the run caused. What can go
//! missing is counted, never guessed: the kernel's `lost` counter (backlog or
//! rate limit) moving during the run, the reader's socket overflowing
//! (`ENOBUFS`), a barrier that does not come back.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::filter::syscall_name;
use crate::supervisor::{DeniedSyscall, MAX_RECORDED};
use crate::sys::{self, Readiness};

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;
const AUDIT_USER: u16 = 1005;
const AUDIT_SYSCALL: u16 = 1300;
const AUDIT_EOE: u16 = 1320;
/// `AUDIT_LANDLOCK_ACCESS`: one denial.
pub const AUDIT_LANDLOCK_ACCESS: u16 = 1423;
/// `AUDIT_LANDLOCK_DOMAIN`: a domain's creator (first denial) or its end.
pub const AUDIT_LANDLOCK_DOMAIN: u16 = 1424;
const AUDIT_NLGRP_READLOG: u32 = 1;
const AUDIT_STATUS_ENABLED: u32 = 1;
const AUDIT_STATUS_BACKLOG_LIMIT: u32 = 0x10;
const HEADER: usize = 16;
/// How long a barrier may take to come back before the run's records are
/// declared incomplete (the kernel's queue is normally drained in microseconds).
const BARRIER_WAIT: Duration = Duration::from_secs(5);
/// When a barrier not yet back makes the tap ask whether audit is still on.
const BARRIER_ASK: Duration = Duration::from_millis(20);
/// Events kept while waiting for their end-of-event record; past it the oldest
/// is assembled as it is.
const MAX_PENDING: usize = 4096;
/// How often the reader checks whether the process still wants it (never: the
/// tap lives as long as the process), i.e. the poll period.
const POLL_MS: i32 = 500;
/// Receive buffer of the reader's socket.
const RECEIVE_BUFFER: i32 = 32 << 20;

/// Why Landlock's records cannot be read here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// The kernel's audit is disabled: Landlock writes no record.
    #[error(
        "the kernel's audit is disabled (audit_enabled=0): Landlock writes no record; a host \
         decision: `auditctl -e 1`, `audit=1` at boot, or knox_sandbox::audit::enable_kernel_audit"
    )]
    Disabled,
    /// A netlink step failed; the kernel's answer.
    #[error("kernel audit netlink: {what}: {errno}")]
    Netlink {
        /// What was being done.
        what: &'static str,
        /// The kernel's answer (`EPERM` without `CAP_AUDIT_READ`/`CAP_AUDIT_CONTROL` or
        /// outside the initial user and pid namespaces).
        errno: String,
    },
}

fn netlink(what: &'static str) -> impl FnOnce(std::io::Error) -> AuditError {
    move |e| AuditError::Netlink {
        what,
        errno: e.to_string(),
    }
}

/// The kernel's audit status (`AUDIT_GET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditStatus {
    /// 0 disabled, 1 enabled, 2 enabled and locked.
    pub enabled: u32,
    /// Pid of the registered audit daemon (0: none).
    pub daemon_pid: u32,
    /// Records per second allowed (0: no limit).
    pub rate_limit: u32,
    /// Records queued at most before new ones are dropped.
    pub backlog_limit: u32,
    /// Records the kernel dropped since boot (backlog, rate limit, memory).
    pub lost: u32,
    /// Records queued now.
    pub backlog: u32,
}

/// Whether Landlock's records of one run were all read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    /// Landlock denials read for the run.
    pub records: u64,
    /// Denials read but not stored past [`MAX_RECORDED`].
    pub dropped: u64,
    /// Records the kernel dropped (any process's) while the run lasted.
    pub kernel_lost: u64,
    /// Times the reader's socket overflowed while the run lasted (records of
    /// any process lost, possibly the run's).
    pub reader_overruns: u64,
    /// Whether the barrier after the run came back (every record the run caused
    /// was read, unless the kernel or the reader lost it).
    pub barrier: bool,
}

impl AuditReport {
    /// Nothing lost, barrier seen: every Landlock denial of the run is in the evidence.
    pub fn complete(&self) -> bool {
        self.barrier && self.kernel_lost == 0 && self.reader_overruns == 0 && self.dropped == 0
    }
}

/// One Landlock denial, from its `AUDIT_LANDLOCK_ACCESS` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockDenial {
    /// The denying domain's id (hexadecimal, as the kernel logs it).
    pub domain: String,
    /// What was missing: `fs.read_file`, `net.connect_tcp`, `scope.signal`, …
    pub blockers: Vec<String>,
    /// The rest of the record: the object (`path=… dev=… ino=…`, `opid=…`, …).
    pub object: String,
    /// The event's serial number in the kernel's audit stream.
    pub serial: u64,
}

/// The kernel's audit status.
pub fn status() -> Result<AuditStatus, AuditError> {
    let control = Control::open()?;
    control.status()
}

/// Enables the kernel's audit (`AUDIT_SET`, `enabled=1`) if it is disabled, so
/// that Landlock writes its records — a decision for the whole host (every
/// audit consumer sees it; with no audit daemon the kernel log receives the
/// records, rate-limited). Knox never calls this by itself. Returns the status
/// from before, so that a caller can put it back ([`set_kernel_audit`]). Needs
/// `CAP_AUDIT_CONTROL` in the initial user and pid namespaces.
pub fn enable_kernel_audit() -> Result<AuditStatus, AuditError> {
    set_kernel_audit(true)
}

/// Sets the kernel's audit on or off (`AUDIT_SET`; a locked setting, `enabled=2`,
/// is left alone and the kernel refuses the change); returns the status from before.
pub fn set_kernel_audit(on: bool) -> Result<AuditStatus, AuditError> {
    let control = Control::open()?;
    let before = control.status()?;
    if (before.enabled != 0) == on {
        return Ok(before);
    }
    let mut body = [0_u8; 40];
    put_u32(&mut body, 0, AUDIT_STATUS_ENABLED);
    put_u32(&mut body, 4, u32::from(on));
    control.request(AUDIT_SET, &body, "AUDIT_SET enabled")?;
    Ok(before)
}

/// Sets how many records the kernel queues before it drops new ones (the
/// default, 64, is quickly exceeded by a tool looping on a denied call while no
/// audit daemon drains the queue: the kernel then prints each record to its log,
/// rate-limited); returns the status from before. A host decision, like
/// [`enable_kernel_audit`].
pub fn set_backlog_limit(records: u32) -> Result<AuditStatus, AuditError> {
    let control = Control::open()?;
    let before = control.status()?;
    let mut body = [0_u8; 40];
    put_u32(&mut body, 0, AUDIT_STATUS_BACKLOG_LIMIT);
    put_u32(&mut body, 20, records);
    control.request(AUDIT_SET, &body, "AUDIT_SET backlog_limit")?;
    Ok(before)
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    if let Some(slot) = buf.get_mut(at..at + 4) {
        slot.copy_from_slice(&v.to_ne_bytes());
    }
}

fn get_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes: [u8; 4] = buf.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(bytes))
}

fn get_u16(buf: &[u8], at: usize) -> Option<u16> {
    let bytes: [u8; 2] = buf.get(at..at + 2)?.try_into().ok()?;
    Some(u16::from_ne_bytes(bytes))
}

/// A socket for requests to the kernel, one request at a time.
struct Control {
    socket: Mutex<(File, u32)>,
}

impl Control {
    fn open() -> Result<Self, AuditError> {
        let fd = sys::audit_socket(0).map_err(netlink("socket(NETLINK_AUDIT)"))?;
        Ok(Self {
            socket: Mutex::new((File::from(fd), 0)),
        })
    }

    /// Sends one message and returns the reply of type `want` (or the ack's
    /// payload when `want` is `None`).
    fn exchange(
        &self,
        kind: u16,
        body: &[u8],
        want: Option<u16>,
        what: &'static str,
    ) -> Result<Vec<u8>, AuditError> {
        let mut guard = self.socket.lock().unwrap_or_else(PoisonError::into_inner);
        let (file, seq) = &mut *guard;
        *seq = seq.wrapping_add(1);
        let flags = NLM_F_REQUEST | if want.is_none() { NLM_F_ACK } else { 0 };
        let len = u32::try_from(HEADER + body.len()).unwrap_or(u32::MAX);
        let mut msg = Vec::with_capacity(HEADER + body.len());
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&seq.to_ne_bytes());
        msg.extend_from_slice(&0_u32.to_ne_bytes());
        msg.extend_from_slice(body);
        file.write_all(&msg).map_err(netlink(what))?;
        let mut buf = vec![0_u8; 8192];
        loop {
            let n = file.read(&mut buf).map_err(netlink(what))?;
            let reply = buf.get(..n).unwrap_or_default();
            let (Some(rtype), Some(rseq)) = (get_u16(reply, 4), get_u32(reply, 8)) else {
                continue;
            };
            if rseq != *seq {
                continue;
            }
            if rtype == NLMSG_ERROR {
                let errno = get_u32(reply, HEADER).map_or(0, |e| e as i32);
                if errno != 0 {
                    return Err(AuditError::Netlink {
                        what,
                        errno: std::io::Error::from_raw_os_error(-errno).to_string(),
                    });
                }
                if want.is_none() {
                    return Ok(Vec::new());
                }
                continue;
            }
            if Some(rtype) == want {
                return Ok(reply.get(HEADER..).unwrap_or_default().to_vec());
            }
        }
    }

    fn request(&self, kind: u16, body: &[u8], what: &'static str) -> Result<(), AuditError> {
        self.exchange(kind, body, None, what).map(drop)
    }

    fn status(&self) -> Result<AuditStatus, AuditError> {
        let body = self.exchange(AUDIT_GET, &[], Some(AUDIT_GET), "AUDIT_GET")?;
        let field = |i: usize| get_u32(&body, i * 4).unwrap_or(0);
        // struct audit_status: mask, enabled, failure, pid, rate_limit,
        // backlog_limit, lost, backlog, …
        Ok(AuditStatus {
            enabled: field(1),
            daemon_pid: field(3),
            rate_limit: field(4),
            backlog_limit: field(5),
            lost: field(6),
            backlog: field(7),
        })
    }
}

/// One audit record: its type, event serial and `key=value` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) kind: u16,
    pub(crate) serial: u64,
    pub(crate) text: String,
}

impl Record {
    /// Parses one multicast message: a netlink header and
    /// `audit(SECONDS.MILLIS:SERIAL): FIELDS`.
    pub(crate) fn parse(msg: &[u8]) -> Option<Self> {
        let kind = get_u16(msg, 4)?;
        let body = msg.get(HEADER..)?;
        let body = String::from_utf8_lossy(body);
        let body = body.trim_end_matches('\0');
        let rest = body.strip_prefix("audit(")?;
        let (stamp, text) = rest.split_once("): ")?;
        let serial = stamp.rsplit_once(':')?.1.parse().ok()?;
        Some(Self {
            kind,
            serial,
            text: text.trim_end().to_owned(),
        })
    }

    /// The value of `key` (quotes removed; the kernel hex-encodes values with
    /// spaces or quotes, which are returned as logged).
    pub(crate) fn field(&self, key: &str) -> Option<&str> {
        fields(&self.text).find(|(k, _)| *k == key).map(|(_, v)| v)
    }
}

/// The `key=value` pairs of a record, values unquoted.
fn fields(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.split(' ').filter_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        Some((k, v.trim_matches('"')))
    })
}

fn hex_u64(v: &str) -> Option<u64> {
    u64::from_str_radix(v, 16).ok()
}

/// The records of one event still arriving.
#[derive(Debug, Default)]
struct Event {
    access: Vec<Record>,
    /// `pid`, `syscall`, `a0`..`a3` of the `AUDIT_SYSCALL` record.
    syscall: Option<(u32, i32, [u64; 6])>,
}

/// A run whose denials the tap collects.
#[derive(Debug)]
struct RunEntry {
    sink: Option<Sender<DeniedSyscall>>,
    denied: Vec<DeniedSyscall>,
    dropped: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Registered runs by the pid that created their Landlock domain.
    runs: HashMap<u32, RunEntry>,
    /// Domains whose creator is a registered run.
    domains: HashMap<u64, u32>,
    /// Events by serial, until their end.
    pending: BTreeMap<u64, Event>,
    /// Barrier tokens seen.
    barriers: Vec<u64>,
}

/// The process's reader of the kernel's audit stream.
#[derive(Debug)]
pub(crate) struct Tap {
    control: Control,
    state: Mutex<State>,
    seen: Condvar,
    overruns: AtomicU64,
    next_barrier: AtomicU64,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

static TAP: Mutex<Option<Arc<Tap>>> = Mutex::new(None);

/// The process's tap, started on first use while the kernel's audit is enabled.
pub(crate) fn tap() -> Result<Arc<Tap>, AuditError> {
    let mut slot = TAP.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(tap) = slot.as_ref() {
        // The host may have turned audit off since: then nothing is written.
        if tap.control.status()?.enabled == 0 {
            return Err(AuditError::Disabled);
        }
        return Ok(Arc::clone(tap));
    }
    let control = Control::open()?;
    if control.status()?.enabled == 0 {
        return Err(AuditError::Disabled);
    }
    let reader =
        sys::audit_socket(AUDIT_NLGRP_READLOG).map_err(netlink("bind(AUDIT_NLGRP_READLOG)"))?;
    // Best effort: a smaller buffer only makes overruns (counted) likelier.
    let _ = sys::set_receive_buffer(reader.as_fd(), RECEIVE_BUFFER);
    let tap = Arc::new(Tap {
        control,
        state: Mutex::new(State::default()),
        seen: Condvar::new(),
        overruns: AtomicU64::new(0),
        next_barrier: AtomicU64::new(1),
    });
    let weak = Arc::downgrade(&tap);
    std::thread::Builder::new()
        .name("knox-audit".into())
        .spawn(move || read_loop(&File::from(reader), &weak))
        .map_err(netlink("starting the audit reader"))?;
    *slot = Some(Arc::clone(&tap));
    Ok(tap)
}

/// The process's tap if it was started (no request to the kernel).
pub(crate) fn running() -> Option<Arc<Tap>> {
    TAP.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(Arc::clone)
}

/// The tap for a policy at Landlock ABI `abi`, if its denials are to be read:
/// requested (`audit`), ABI ≥ 7, and the kernel's audit enabled and readable
/// here; otherwise `None`, with the reason in `notes` when it was wanted.
pub(crate) fn for_abi(audit: bool, abi: u8, notes: &mut Vec<String>) -> Option<Arc<Tap>> {
    if !audit || abi < 7 {
        return None;
    }
    match tap() {
        Ok(tap) => Some(tap),
        Err(e) => {
            notes.push(format!(
                "Landlock's denials are not read into the evidence (errno stand-ins only): {e}"
            ));
            None
        }
    }
}

fn read_loop(reader: &File, tap: &std::sync::Weak<Tap>) {
    let mut buf = vec![0_u8; 64 * 1024];
    let mut reader = reader;
    loop {
        match sys::poll_in(reader.as_fd(), POLL_MS) {
            Ok(Readiness::Ready) => {}
            Ok(Readiness::Timeout) => {
                if tap.strong_count() == 0 {
                    return;
                }
                continue;
            }
            _ => return,
        }
        let Some(tap) = tap.upgrade() else {
            return;
        };
        match reader.read(&mut buf) {
            Ok(n) => {
                let msg = buf.get(..n).unwrap_or_default();
                // Only what the tap uses is parsed (PROCTITLE, PATH, CWD, … are not).
                let wanted = matches!(
                    get_u16(msg, 4),
                    Some(
                        AUDIT_LANDLOCK_ACCESS
                            | AUDIT_LANDLOCK_DOMAIN
                            | AUDIT_SYSCALL
                            | AUDIT_EOE
                            | AUDIT_USER
                    )
                );
                if let Some(record) = Some(msg).filter(|_| wanted).and_then(Record::parse) {
                    tap.take(record);
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                tap.overruns.fetch_add(1, Ordering::AcqRel);
                // A barrier waiting now may have been among the lost records.
                tap.seen.notify_all();
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

impl Tap {
    /// The kernel's count of audit records lost (backlog full or rate limit), when
    /// it can be read.
    pub(crate) fn lost(&self) -> Option<u32> {
        self.control.status().map(|s| s.lost).ok()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Files one record of the stream.
    fn take(&self, record: Record) {
        let mut state = self.lock();
        match record.kind {
            AUDIT_LANDLOCK_ACCESS => {
                state
                    .pending
                    .entry(record.serial)
                    .or_default()
                    .access
                    .push(record);
            }
            AUDIT_LANDLOCK_DOMAIN => {
                let domain = record.field("domain").and_then(hex_u64);
                match (domain, record.field("status")) {
                    (Some(domain), Some("allocated")) => {
                        let pid = record.field("pid").and_then(|p| p.parse().ok());
                        if let Some(pid) = pid.filter(|p| state.runs.contains_key(p)) {
                            state.domains.insert(domain, pid);
                        }
                    }
                    (Some(domain), Some("deallocated")) => {
                        state.domains.remove(&domain);
                    }
                    _ => {}
                }
            }
            AUDIT_SYSCALL => {
                if let Some(event) = state.pending.get_mut(&record.serial) {
                    event.syscall = syscall_of(&record);
                }
            }
            AUDIT_EOE => {
                if let Some(event) = state.pending.remove(&record.serial) {
                    deliver(&mut state, event);
                }
            }
            AUDIT_USER => {
                let token = record
                    .text
                    .split_once("knox-landlock-barrier=")
                    .and_then(|(_, t)| t.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|t| t.parse().ok());
                if let Some(token) = token {
                    // Everything queued before the barrier has arrived: events
                    // with no end-of-event record (outside a system call) are
                    // complete too.
                    let events = std::mem::take(&mut state.pending);
                    for (_, event) in events {
                        deliver(&mut state, event);
                    }
                    state.barriers.push(token);
                    self.seen.notify_all();
                }
            }
            _ => {}
        }
        while state.pending.len() > MAX_PENDING {
            let Some((_, event)) = state.pending.pop_first() else {
                break;
            };
            deliver(&mut state, event);
        }
    }

    /// Registers the run whose child is `pid` (before it executes the tool).
    pub(crate) fn attach(&self, pid: u32, sink: Option<Sender<DeniedSyscall>>) -> AuditRun {
        let lost = self.control.status().map(|s| s.lost).ok();
        self.lock().runs.insert(
            pid,
            RunEntry {
                sink,
                denied: Vec::new(),
                dropped: 0,
            },
        );
        AuditRun {
            pid,
            lost_at_start: lost,
            overruns_at_start: self.overruns.load(Ordering::Acquire),
        }
    }

    /// Waits until every record queued before now has been read (`false`: the
    /// barrier could not be sent or did not come back in time).
    pub(crate) fn barrier(&self) -> bool {
        let token = self.next_barrier.fetch_add(1, Ordering::AcqRel);
        let overruns = self.overruns.load(Ordering::Acquire);
        let text = format!("knox-landlock-barrier={token}\0");
        if self
            .control
            .request(AUDIT_USER, text.as_bytes(), "AUDIT_USER barrier")
            .is_err()
        {
            return false;
        }
        let start = Instant::now();
        let deadline = start + BARRIER_WAIT;
        let mut asked = false;
        let mut state = self.lock();
        loop {
            if let Some(i) = state.barriers.iter().position(|t| *t == token) {
                state.barriers.swap_remove(i);
                return true;
            }
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            // Records were lost meanwhile (the barrier perhaps among them): the
            // run is incomplete whatever comes back.
            if left.is_zero() || self.overruns.load(Ordering::Acquire) != overruns {
                return false;
            }
            // Not back quickly: with audit off the kernel acknowledges the
            // message and drops it. Asked once, late, because `AUDIT_GET`'s
            // reply costs the kernel a thread (about 90 µs here).
            if !asked && now.duration_since(start) >= BARRIER_ASK {
                asked = true;
                drop(state);
                if self.control.status().map_or(true, |s| s.enabled == 0) {
                    return false;
                }
                state = self.lock();
                continue;
            }
            let wait = if asked {
                left
            } else {
                BARRIER_ASK.saturating_sub(now.duration_since(start))
            };
            state = match self.seen.wait_timeout(state, wait) {
                Ok((s, _)) => s,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

/// Files an assembled event's Landlock denials with their runs.
fn deliver(state: &mut State, event: Event) {
    for access in event.access {
        let Some(domain_hex) = access.field("domain").map(str::to_owned) else {
            continue;
        };
        let Some(pid) = hex_u64(&domain_hex).and_then(|d| state.domains.get(&d).copied()) else {
            continue;
        };
        let Some(run) = state.runs.get_mut(&pid) else {
            continue;
        };
        let denied = to_denied(&access, domain_hex, event.syscall, pid);
        if let Some(sink) = &run.sink {
            let _ = sink.send(denied.clone());
        }
        if run.denied.len() < MAX_RECORDED {
            run.denied.push(denied);
        } else {
            run.dropped += 1;
        }
    }
}

fn syscall_of(record: &Record) -> Option<(u32, i32, [u64; 6])> {
    let pid = record.field("pid")?.parse().ok()?;
    let nr = record.field("syscall")?.parse().ok()?;
    let mut args = [0_u64; 6];
    for (slot, key) in args.iter_mut().zip(["a0", "a1", "a2", "a3"]) {
        *slot = record.field(key).and_then(hex_u64).unwrap_or(0);
    }
    Some((pid, nr, args))
}

/// A Landlock denial as a denied call: the system call from the event's
/// `AUDIT_SYSCALL` record when there is one (only `a0`..`a3` are logged), else
/// number -1 named `landlock` and the domain creator's pid.
fn to_denied(
    access: &Record,
    domain: String,
    syscall: Option<(u32, i32, [u64; 6])>,
    creator: u32,
) -> DeniedSyscall {
    let blockers: Vec<String> = access
        .field("blockers")
        .map(|b| b.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let object = fields(&access.text)
        .filter(|(k, _)| *k != "domain" && *k != "blockers")
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    let (pid, nr, args) = syscall.unwrap_or((creator, -1, [0; 6]));
    let name = if nr < 0 {
        "landlock".to_owned()
    } else {
        syscall_name(nr).unwrap_or_else(|| format!("nr:{nr}"))
    };
    DeniedSyscall {
        pid,
        nr,
        name,
        args,
        decoded: Some(format!("landlock {}: {object}", blockers.join(","))),
        landlock: Some(LandlockDenial {
            domain,
            blockers,
            object,
            serial: access.serial,
        }),
    }
}

/// One registered run; [`AuditRun::finish`] collects its denials.
#[derive(Debug)]
pub(crate) struct AuditRun {
    pid: u32,
    lost_at_start: Option<u32>,
    overruns_at_start: u64,
}

impl AuditRun {
    /// After the run's processes are gone (or between a worker's requests):
    /// waits for the barrier and takes the denials read so far.
    pub(crate) fn collect(&self, tap: &Tap) -> (Vec<DeniedSyscall>, AuditReport) {
        let barrier = tap.barrier();
        let lost_now = tap.control.status().map(|s| s.lost).ok();
        let kernel_lost = match (self.lost_at_start, lost_now) {
            (Some(a), Some(b)) => u64::from(b.wrapping_sub(a)),
            // Unknown: counted as one loss rather than none.
            _ => 1,
        };
        let reader_overruns = tap
            .overruns
            .load(Ordering::Acquire)
            .saturating_sub(self.overruns_at_start);
        let mut state = tap.lock();
        let (denied, dropped) = match state.runs.get_mut(&self.pid) {
            Some(run) => (
                std::mem::take(&mut run.denied),
                std::mem::take(&mut run.dropped),
            ),
            None => (Vec::new(), 0),
        };
        let report = AuditReport {
            records: u64::try_from(denied.len()).unwrap_or(u64::MAX) + dropped,
            dropped,
            kernel_lost,
            reader_overruns,
            barrier,
        };
        (denied, report)
    }

    /// Collects the last denials and unregisters the run.
    pub(crate) fn finish(self, tap: &Tap) -> (Vec<DeniedSyscall>, AuditReport) {
        let collected = self.collect(tap);
        let mut state = tap.lock();
        state.runs.remove(&self.pid);
        state.domains.retain(|_, pid| *pid != self.pid);
        collected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, text: &str) -> Vec<u8> {
        let mut m = Vec::new();
        let len = u32::try_from(HEADER + text.len()).unwrap_or(0);
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(text.as_bytes());
        m
    }

    fn tap() -> Result<Tap, AuditError> {
        Ok(Tap {
            control: Control::open()?,
            state: Mutex::new(State::default()),
            seen: Condvar::new(),
            overruns: AtomicU64::new(0),
            next_barrier: AtomicU64::new(1),
        })
    }

    const ACCESS: &str = "audit(1796130376.301:146): domain=1b2f7f606 blockers=fs.read_file path=\"/etc/hostname\" dev=\"vda\" ino=611";
    const DOMAIN: &str = "audit(1796130376.301:146): domain=1b2f7f606 status=allocated mode=enforcing pid=8935 uid=0 exe=\"/usr/bin/python3\" comm=\"python3\"";
    const SYSCALL: &str = "audit(1796130376.301:146): arch=c000003e syscall=257 success=no exit=-13 a0=ffffff9c a1=7f1ba8e5bdd0 a2=80000 a3=0 items=0 ppid=8892 pid=8936 auid=4294967295 uid=0 comm=\"python3\" key=(null)";
    const EOE: &str = "audit(1796130376.301:146): ";

    #[test]
    fn records_parse_as_the_kernel_writes_them() {
        let r = Record::parse(&msg(AUDIT_LANDLOCK_ACCESS, ACCESS));
        let r = r.as_ref();
        assert_eq!(r.map(|r| (r.kind, r.serial)), Some((1423, 146)));
        assert_eq!(r.and_then(|r| r.field("path")), Some("/etc/hostname"));
        assert_eq!(r.and_then(|r| r.field("blockers")), Some("fs.read_file"));
        assert_eq!(
            Record::parse(&msg(AUDIT_EOE, EOE)).map(|r| r.serial),
            Some(146)
        );
        assert_eq!(Record::parse(b"short"), None);
        assert_eq!(Record::parse(&msg(1300, "no stamp here")), None);
    }

    /// The access record arrives before its domain record (as on 6.18); the
    /// event is assembled at its end and given to the run that created the
    /// domain, with the system call of its `AUDIT_SYSCALL` record; another
    /// process's domain is ignored.
    #[test]
    fn an_event_is_assembled_and_attributed_by_domain() -> Result<(), AuditError> {
        let tap = tap()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let run = tap.attach(8935, Some(tx));
        for (kind, text) in [
            (AUDIT_LANDLOCK_ACCESS, ACCESS),
            (AUDIT_LANDLOCK_DOMAIN, DOMAIN),
            (AUDIT_SYSCALL, SYSCALL),
            (AUDIT_EOE, EOE),
            // Another domain, created by a process that is not a run.
            (
                AUDIT_LANDLOCK_ACCESS,
                "audit(1.2:147): domain=77 blockers=fs.write_file path=\"/x\"",
            ),
            (
                AUDIT_LANDLOCK_DOMAIN,
                "audit(1.2:147): domain=77 status=allocated mode=enforcing pid=1 uid=0",
            ),
            (AUDIT_EOE, "audit(1.2:147): "),
            // A second denial of the run's domain, no domain record this time.
            (
                AUDIT_LANDLOCK_ACCESS,
                "audit(1.2:148): domain=1b2f7f606 blockers=scope.signal opid=1 ocomm=\"init\"",
            ),
            (AUDIT_EOE, "audit(1.2:148): "),
        ] {
            let record = Record::parse(&msg(kind, text));
            assert!(record.is_some(), "{text}");
            if let Some(r) = record {
                tap.take(r);
            }
        }
        let streamed: Vec<DeniedSyscall> = rx.try_iter().collect();
        assert_eq!(streamed.len(), 2, "{streamed:?}");
        let first = streamed.first();
        assert_eq!(
            first.map(|d| (d.pid, d.nr, d.name.as_str())),
            Some((8936, 257, "openat"))
        );
        assert_eq!(first.map(|d| d.args[0]), Some(0xffff_ff9c));
        let landlock = first.and_then(|d| d.landlock.as_ref());
        assert_eq!(
            landlock.map(|l| l.blockers.clone()),
            Some(vec!["fs.read_file".to_owned()])
        );
        assert_eq!(
            landlock.map(|l| l.object.as_str()),
            Some("path=/etc/hostname dev=vda ino=611")
        );
        let second = streamed.get(1);
        assert_eq!(
            second.map(|d| (d.pid, d.nr, d.name.as_str())),
            Some((8935, -1, "landlock"))
        );
        let state = tap.lock();
        assert_eq!(state.runs.get(&8935).map(|r| r.denied.len()), Some(2));
        assert!(state.pending.is_empty());
        drop(state);
        let (collected, _) = (run.pid, ());
        assert_eq!(collected, 8935);
        Ok(())
    }
}
