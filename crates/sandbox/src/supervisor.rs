//! The user-notification supervisor: records every denied system call and answers it.

use std::collections::BTreeSet;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;

use serde::{Deserialize, Serialize};

use crate::decode::{SockAddr, Target, describe};
use crate::filter::{MEDIATED, SIGNAL_CALLS, syscall_name};
use crate::sys::{self, Answer, Readiness, SocketCall};

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
    /// Set when Landlock denied the call (read from its audit record, ABI ≥ 7):
    /// the supervisor did not see it, the kernel refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock: Option<crate::audit::LandlockDenial>,
}

/// What the supervisor lets continue among the [`MEDIATED`] calls (and, before
/// Landlock ABI 6, the [`SIGNAL_CALLS`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Mediation {
    /// Mediated and signal calls the policy lists (others are denied outright).
    pub(crate) listed: BTreeSet<&'static str>,
    /// Canonical roots under which `execve` may continue.
    pub(crate) exec_roots: Vec<PathBuf>,
    /// TCP ports `connect` may reach.
    pub(crate) connect_ports: BTreeSet<u16>,
    /// TCP ports `bind` may use.
    pub(crate) bind_ports: BTreeSet<u16>,
    /// Landlock ABI < 4: an authorized TCP `connect`/`bind` is made by the
    /// supervisor on a duplicate of the tool's socket (no Landlock check after a
    /// `CONTINUE` would catch a swapped address).
    pub(crate) tcp_by_supervisor: bool,
    /// Landlock ABI < 6: no scoping, so abstract UNIX `connect` is denied and
    /// signals reach only the tool's own process.
    pub(crate) scope_by_supervisor: bool,
}

/// What the supervisor does with one notification.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    /// Let the call run (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
    Continue,
    /// Make the call itself on a duplicate of the tool's socket `fd`, with the
    /// address bytes that were checked.
    Perform {
        call: SocketCall,
        fd: i32,
        addr: Vec<u8>,
    },
    /// Record it and answer `EPERM`.
    Deny,
}

impl Mediation {
    /// What to do with a notified call the policy may allow.
    fn decide(&self, name: &str, target: &Target, args: &[u64; 6]) -> Decision {
        if !self.listed.contains(name) {
            return Decision::Deny;
        }
        let allow = |ok: bool| {
            if ok {
                Decision::Continue
            } else {
                Decision::Deny
            }
        };
        match name {
            "execve" => allow(self.exec_allowed(target.path(None, args[0]))),
            "execveat" => allow(self.exec_allowed(target.path(Some(args[0]), args[1]))),
            "connect" | "bind" => self.socket(name, target, args),
            _ if SIGNAL_CALLS.contains(&name) => allow(own_process(name, target, args)),
            _ => Decision::Deny,
        }
    }

    fn socket(&self, name: &str, target: &Target, args: &[u64; 6]) -> Decision {
        let Some((bytes, addr)) = target.sockaddr_raw(args[1], args[2]) else {
            return Decision::Deny;
        };
        let (call, ports) = if name == "connect" {
            (SocketCall::Connect, &self.connect_ports)
        } else {
            (SocketCall::Bind, &self.bind_ports)
        };
        let allowed = match (&addr, call) {
            // Landlock (ABI < 9) does not check `connect` on a pathname UNIX socket,
            // so letting one continue would rest on a path the tool can swap after
            // this check (a daemon's socket, such as Docker's, is a way out).
            // Abstract names: Landlock's scope (ABI 6) confines them to the sandbox;
            // without it, none is reachable.
            (SockAddr::Unix(path), SocketCall::Connect) => {
                path.starts_with('@') && !self.scope_by_supervisor
            }
            // Binding a UNIX socket creates a file (Landlock checks `MakeSock`
            // beneath a create grant); abstract names are scoped.
            (SockAddr::Unix(_), SocketCall::Bind) => true,
            (a, _) => a.port().is_some_and(|p| ports.contains(&p)),
        };
        let tcp = !matches!(addr, SockAddr::Unix(_));
        match (allowed, tcp && self.tcp_by_supervisor) {
            (false, _) => Decision::Deny,
            (true, false) => Decision::Continue,
            (true, true) => Decision::Perform {
                call,
                // An `int` descriptor: the kernel reads the low 32 bits.
                fd: args[0] as u32 as i32,
                addr: bytes,
            },
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
}

/// Whether a signal call targets the caller's own process (before Landlock ABI 6
/// nothing else is safe: the caller is stopped in the call, so its pid cannot be
/// reused, and `tgkill` checks that the thread belongs to that process).
fn own_process(name: &str, target: &Target, args: &[u64; 6]) -> bool {
    let Some(tgid) = target.tgid() else {
        return false;
    };
    // `pid_t` arguments: the kernel reads the low 32 bits.
    let first = args[0] as u32 as i32;
    match name {
        "kill" | "rt_sigqueueinfo" | "tgkill" | "rt_tgsigqueueinfo" => first == tgid,
        "tkill" => u32::try_from(first).is_ok_and(|t| t == target.tid()),
        _ => false,
    }
}

/// Makes the tool's authorized `connect`/`bind` on a duplicate of its socket
/// (`pidfd_getfd`), with the address bytes that were checked, and gives the tool
/// the result. `None`: the target is gone (no answer is possible).
fn perform(
    listener: std::os::fd::BorrowedFd<'_>,
    id: u64,
    target: &Target,
    call: SocketCall,
    sock: i32,
    addr: &[u8],
) -> Option<Answer> {
    const EBADF: i32 = 9;
    let duplicate = target
        .tgid()
        .and_then(|tgid| sys::pidfd_open(tgid).ok())
        .map(|pidfd| sys::pidfd_getfd(pidfd.as_fd(), sock));
    // Validated after the pid was used: the pidfd names the process that was
    // stopped in this call, not one that reused its pid.
    if !sys::notif_id_valid(listener, id) {
        return None;
    }
    let answer = match duplicate {
        Some(Ok(dup)) => match sys::socket_call(dup.as_fd(), call, addr) {
            Ok(()) => Answer::Value(0),
            Err(errno) => Answer::Errno(errno),
        },
        Some(Err(e)) => Answer::Errno(e.raw_os_error().unwrap_or(EBADF)),
        None => Answer::Errno(EBADF),
    };
    Some(answer)
}

/// What the supervisor hands back when it ends.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Recorded denials, in arrival order.
    pub(crate) denied: Vec<DeniedSyscall>,
    /// Denials past [`MAX_RECORDED`].
    pub(crate) dropped: u64,
    /// Landlock's audit records of the run, when they were read (ABI ≥ 7).
    pub(crate) audit: Option<crate::audit::AuditReport>,
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
    let notified_by_policy =
        MEDIATED.contains(&name.as_str()) || SIGNAL_CALLS.contains(&name.as_str());
    let decision = if notified_by_policy {
        mediation.decide(&name, &target, &args)
    } else {
        Decision::Deny
    };
    let decoded = if decision == Decision::Deny {
        describe(&target, &name, &args)
    } else {
        None
    };
    match decision {
        Decision::Continue => {
            // The id check after reading: if the target died (and its pid was
            // reused), what was read may belong to another process.
            if sys::notif_id_valid(fd, req.id) {
                let _ = sys::notif_send(fd, req.id, Answer::Continue);
            }
            return;
        }
        Decision::Perform {
            call,
            fd: sock,
            addr,
        } => {
            // On its own thread: a blocking `connect` to an unanswering host would
            // otherwise hold up every other notification (and the stop check). The
            // threads are bounded by the tool's threads stopped in such calls.
            let id = req.id;
            let spawned = listener.try_clone().and_then(|listener| {
                std::thread::Builder::new()
                    .name("knox-sock".into())
                    .spawn(move || {
                        let fd = listener.as_fd();
                        if let Some(answer) = perform(fd, id, &target, call, sock, &addr) {
                            let _ = sys::notif_send(fd, id, answer);
                        }
                    })
            });
            if spawned.is_err() {
                const EAGAIN: i32 = 11;
                let _ = sys::notif_send(fd, id, Answer::Errno(EAGAIN));
            }
            return;
        }
        Decision::Deny => {}
    }
    // The id check after reading: if the target died (and its pid was reused),
    // the bytes read may belong to another process, so they are dropped.
    let valid = sys::notif_id_valid(fd, req.id);
    let event = DeniedSyscall {
        pid: req.pid,
        nr,
        name,
        args,
        decoded: decoded.filter(|_| valid),
        landlock: None,
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
