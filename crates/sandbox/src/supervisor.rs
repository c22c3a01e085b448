//! The user-notification supervisor: records every denied system call and answers it.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use serde::{Deserialize, Serialize};

use crate::decode::{SockAddr, Target, describe};
use crate::filter::{MEDIATED, syscall_name};
use crate::sys::{self, Answer, Readiness};

/// Most denials kept per run; past it they are counted, not stored (a tool spinning
/// on a denied call must not exhaust the supervisor's memory).
pub const MAX_RECORDED: usize = 10_000;
const EPERM: i32 = 1;
/// How often the supervisor checks for a stop request while idle.
const POLL_MS: i32 = 50;

/// One system call the kernel stopped and the supervisor denied with `EPERM`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeniedSyscall {
    /// Process (thread-group member) that made the call, in the supervisor's pid namespace.
    pub pid: u32,
    /// x86_64 system call number.
    pub nr: i32,
    /// System call name (`"nr:<n>"` if the table has no such number).
    pub name: String,
    /// Raw argument registers.
    pub args: [u64; 6],
    /// Pointer arguments read from the target (paths made absolute, socket
    /// addresses as `ip:port`); `None` if nothing could be read or the target
    /// vanished before its notification was validated.
    pub decoded: Option<String>,
}

/// What the supervisor lets continue among the [`MEDIATED`] calls.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mediation {
    /// Mediated calls the policy lists (others are denied outright).
    pub(crate) listed: BTreeSet<&'static str>,
    /// Canonical roots under which `execve` may continue.
    pub(crate) exec_roots: Vec<PathBuf>,
    /// TCP ports `connect` may reach.
    pub(crate) connect_ports: BTreeSet<u16>,
    /// TCP ports `bind` may use.
    pub(crate) bind_ports: BTreeSet<u16>,
}

impl Mediation {
    /// Whether a mediated call may continue (to Landlock, which decides again).
    fn allows(&self, name: &str, target: &Target, args: &[u64; 6]) -> bool {
        if !self.listed.contains(name) {
            return false;
        }
        match name {
            "execve" => self.exec_allowed(target.path(None, args[0])),
            "execveat" => self.exec_allowed(target.path(Some(args[0]), args[1])),
            "connect" => {
                Self::connect_allowed(target.sockaddr(args[1], args[2]), &self.connect_ports)
            }
            "bind" => Self::bind_allowed(target.sockaddr(args[1], args[2]), &self.bind_ports),
            _ => false,
        }
    }

    fn exec_allowed(&self, path: Option<PathBuf>) -> bool {
        let Some(canonical) = path.and_then(|p| std::fs::canonicalize(p).ok()) else {
            return false;
        };
        self.exec_roots
            .iter()
            .any(|root| canonical.starts_with(root))
    }

    /// TCP: the port must be listed (Landlock enforces it again). Abstract UNIX
    /// sockets: Landlock's scope confines them to the sandbox. Pathname UNIX
    /// sockets: always denied — Landlock (ABI < 9) does not check `connect` on
    /// them, so letting one continue would rest on a path the tool can swap
    /// after this check (a daemon's socket, such as Docker's, is a way out).
    fn connect_allowed(addr: Option<SockAddr>, ports: &BTreeSet<u16>) -> bool {
        match addr {
            Some(SockAddr::Unix(path)) => path.starts_with('@'),
            Some(a) => a.port().is_some_and(|p| ports.contains(&p)),
            None => false,
        }
    }

    /// TCP: the port must be listed. UNIX: binding creates a socket file, which
    /// Landlock checks (`MakeSock` beneath a create grant); abstract names are scoped.
    fn bind_allowed(addr: Option<SockAddr>, ports: &BTreeSet<u16>) -> bool {
        match addr {
            Some(SockAddr::Unix(_)) => true,
            Some(a) => a.port().is_some_and(|p| ports.contains(&p)),
            None => false,
        }
    }
}

/// What the supervisor hands back when it ends.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Recorded denials, in arrival order.
    pub(crate) denied: Vec<DeniedSyscall>,
    /// Denials past [`MAX_RECORDED`].
    pub(crate) dropped: u64,
}

/// Serves notifications on `listener` until every process using the filter is gone
/// (the listener hangs up) or `stop` is set.
pub(crate) fn run(
    listener: OwnedFd,
    mediation: Arc<Mediation>,
    sink: Option<Sender<DeniedSyscall>>,
    stop: Arc<AtomicBool>,
) -> Report {
    let mut report = Report::default();
    loop {
        match sys::poll_in(listener.as_fd(), POLL_MS) {
            Ok(Readiness::Ready) => serve_one(&listener, &mediation, sink.as_ref(), &mut report),
            Ok(Readiness::Timeout) if !stop.load(Ordering::Acquire) => {}
            _ => return report,
        }
    }
}

fn serve_one(
    listener: &OwnedFd,
    mediation: &Mediation,
    sink: Option<&Sender<DeniedSyscall>>,
    report: &mut Report,
) {
    let fd = listener.as_fd();

    // ENOENT: the target died between poll and receive.
    let Ok(req) = sys::notif_recv(fd) else {
        return;
    };
    let nr = req.nr;
    let name = syscall_name(nr).unwrap_or_else(|| format!("nr:{nr}"));
    let args = req.args;
    let target = Target::open(req.pid);
    let allow = MEDIATED.contains(&name.as_str()) && mediation.allows(&name, &target, &args);
    let decoded = if allow {
        None
    } else {
        describe(&target, &name, &args)
    };
    // The id check after reading: if the target died (and its pid was reused),
    // the bytes read may belong to another process, so they are dropped.
    let valid = sys::notif_id_valid(fd, req.id);
    if allow && valid {
        let _ = sys::notif_send(fd, req.id, Answer::Continue);
        return;
    }
    let event = DeniedSyscall {
        pid: req.pid,
        nr,
        name,
        args,
        decoded: decoded.filter(|_| valid),
    };
    // Queued before the answer: the target stays stopped in the call until then,
    // so anything it does afterwards (a worker's response) comes after the event.
    if let Some(sink) = sink {
        let _ = sink.send(event.clone());
    }
    if valid {
        let _ = sys::notif_send(fd, req.id, Answer::Errno(EPERM));
    }
    if report.denied.len() < MAX_RECORDED {
        report.denied.push(event);
    } else {
        report.dropped += 1;
    }
}
