//! The clone and the child's setup report: from a prepared policy to a tool past `execve`.
//!
//! The child is created like `posix_spawn` does it, `clone(CLONE_VM | CLONE_VFORK)`:
//! no page tables are copied and the calling thread sleeps until the child has
//! executed the tool (or died). Because the tool's own `execve` is a mediated call,
//! the supervisor thread must already be serving before the clone: it starts first,
//! reads the child's pid and listener fd from the report pipe, takes the listener
//! with `pidfd_getfd`, hands the pidfd back to the spawning thread, and serves.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};

use crate::cgroup::Lease;
use crate::spawn::{PreparedPolicy, SandboxError, io};
use crate::supervisor::{self, DeniedSyscall};
use crate::sys::{self, ChildStep, Rlimit, UserNamespaceMaps};
use crate::workers::{Pending, Workers};

/// Everything borrowed for one clone.
pub(crate) struct Launch<'a> {
    pub(crate) program: &'a CString,
    pub(crate) argv: &'a [CString],
    pub(crate) envp: &'a [CString],
    pub(crate) rlimits: &'a [Rlimit],
    pub(crate) lease: Option<&'a Lease>,
    /// `(uid, gid)` the tool runs as; then it is executed through `program_fd`.
    pub(crate) identity: Option<(u32, u32)>,
    pub(crate) program_fd: Option<BorrowedFd<'a>>,
    /// Idmapped mounts the child attaches first (see [`crate::idmap`]).
    pub(crate) mounts: &'a [crate::idmap::Mount],
}

/// A child past `execve`, with its supervisor running.
pub(crate) struct Started {
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    /// `None` for the dangerous limits-only baseline (nothing to supervise).
    pub(crate) supervisor: Option<Pending<supervisor::Report>>,
    pub(crate) events: Receiver<DeniedSyscall>,
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) stdin: File,
    pub(crate) stdout: File,
    pub(crate) stderr: File,
}

/// What the supervisor thread hands the spawning thread after the handshake:
/// the pidfd and the report pipe (whose end of file means `execve` succeeded),
/// or the failure report and the pipe.
type Handshake = Result<(OwnedFd, std::io::PipeReader), Option<(u32, i32)>>;

impl Launch<'_> {
    pub(crate) fn start(
        &self,
        prepared: &PreparedPolicy,
        workers: &Workers,
        user_namespace: Option<UserNamespaceMaps<'_>>,
        drop_capabilities: bool,
    ) -> Result<Started, SandboxError> {
        let (stdin_r, stdin_w) = std::io::pipe().map_err(io("pipe"))?;
        let (stdout_r, stdout_w) = std::io::pipe().map_err(io("pipe"))?;
        let (stderr_r, stderr_w) = std::io::pipe().map_err(io("pipe"))?;
        let (report_r, report_w) = std::io::pipe().map_err(io("pipe"))?;
        let (handshake_tx, handshake_rx) = mpsc::sync_channel(1);
        let (events_tx, events) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (mediation, flag) = (Arc::clone(&prepared.mediation), Arc::clone(&stop));
        let (audit, audit_tx) = (prepared.audit.clone(), events_tx.clone());
        let supervisor = workers
            .run("knox-supervisor", move || {
                let Some((listener, pid)) = handshake(report_r, &handshake_tx) else {
                    return supervisor::Report::default();
                };
                // Registered before the tool is executed (its `execve` waits for
                // this thread), so that no Landlock record of it can be missed.
                let run = audit.as_ref().map(|t| t.attach(pid, Some(audit_tx)));
                let mut report = supervisor::run(listener, mediation, Some(events_tx), flag);
                if let (Some(tap), Some(run)) = (audit, run) {
                    let (denied, audited) = run.finish(&tap);
                    report.denied.extend(denied);
                    report.audit = Some(audited);
                }
                report
            })
            .map_err(io("starting the supervisor"))?;
        let cgroup_procs: Vec<BorrowedFd<'_>> = self
            .lease
            .map(|l| l.procs().iter().map(AsFd::as_fd).collect())
            .unwrap_or_default();
        let mounts: Vec<sys::MountAt<'_>> = self
            .mounts
            .iter()
            .map(|m| sys::MountAt {
                tree: m.tree.as_fd(),
                target: &m.target,
            })
            .collect();
        let spec = sys::ChildSpec {
            program: self.program,
            argv: self.argv,
            envp: self.envp,
            cwd: &prepared.workspace,
            stdin: stdin_r.as_fd(),
            stdout: stdout_w.as_fd(),
            stderr: stderr_w.as_fd(),
            report: report_w.as_fd(),
            landlock: Some(prepared.ruleset.fd.as_fd()),
            landlock_flags: prepared.ruleset.restrict_flags,
            cgroup_procs: &cgroup_procs,
            rlimits: self.rlimits,
            drop_capabilities,
            identity: self.identity,
            program_fd: self.program_fd,
            user_namespace,
            filter: Some(&prepared.filter),
            namespaces: 0,
            mounts: &mounts,
        };
        // Returns once the child has executed the tool or died. If the clone fails,
        // dropping `report_w` below ends the supervisor's handshake with end of file.
        let spawned = sys::spawn_child_for_life(&spec);
        drop((stdin_r, stdout_w, stderr_w, report_w));
        let pid = spawned.map_err(io("clone"))?;
        let (pidfd, mut report) = match handshake_rx.recv() {
            Ok(Ok(ok)) => ok,
            Ok(Err(failure)) => return Err(setup_failure(pid, failure)),
            Err(_) => return Err(setup_failure(pid, None)),
        };
        if let Some(failure) = read_report(&mut report)? {
            let err = setup_failure(pid, Some(failure));
            let _ = supervisor.join();
            return Err(err);
        }
        Ok(Started {
            pid,
            pidfd,
            supervisor: Some(supervisor),
            events,
            stop,
            stdin: File::from(OwnedFd::from(stdin_w)),
            stdout: File::from(OwnedFd::from(stdout_r)),
            stderr: File::from(OwnedFd::from(stderr_r)),
        })
    }
}

impl Launch<'_> {
    /// DANGEROUS: starts the program with cgroup, rlimits and `namespaces` only —
    /// no Landlock, no seccomp, no capability drop. For the attack corpus's
    /// unconfined baseline, which must show what the kernel layers prevent.
    pub(crate) fn dangerous_start_limits_only(
        &self,
        cwd: &CString,
        user_namespace: Option<UserNamespaceMaps<'_>>,
        namespaces: i32,
    ) -> Result<Started, SandboxError> {
        let (stdin_r, stdin_w) = std::io::pipe().map_err(io("pipe"))?;
        let (stdout_r, stdout_w) = std::io::pipe().map_err(io("pipe"))?;
        let (stderr_r, stderr_w) = std::io::pipe().map_err(io("pipe"))?;
        let (mut report_r, report_w) = std::io::pipe().map_err(io("pipe"))?;
        let cgroup_procs: Vec<BorrowedFd<'_>> = self
            .lease
            .map(|l| l.procs().iter().map(AsFd::as_fd).collect())
            .unwrap_or_default();
        let spec = sys::ChildSpec {
            program: self.program,
            argv: self.argv,
            envp: self.envp,
            cwd,
            stdin: stdin_r.as_fd(),
            stdout: stdout_w.as_fd(),
            stderr: stderr_w.as_fd(),
            report: report_w.as_fd(),
            landlock: None,
            landlock_flags: 0,
            cgroup_procs: &cgroup_procs,
            rlimits: self.rlimits,
            drop_capabilities: false,
            identity: None,
            program_fd: None,
            user_namespace,
            filter: None,
            namespaces,
            mounts: &[],
        };
        // Nothing is mediated, so no supervisor: the clone returns once the
        // program runs (or the child died), and the pipe holds the whole report.
        let spawned = sys::spawn_child_for_life(&spec);
        drop((stdin_r, stdout_w, stderr_w, report_w));
        let pid = spawned.map_err(io("clone"))?;
        match read_report(&mut report_r)? {
            Some((sys::REPORT_PID, _)) => {}
            other => return Err(setup_failure(pid, other)),
        }
        if let Some(failure) = read_report(&mut report_r)? {
            return Err(setup_failure(pid, Some(failure)));
        }
        let pidfd = sys::pidfd_open(pid).map_err(io("pidfd_open"))?;
        let (_, events) = mpsc::channel();
        Ok(Started {
            pid,
            pidfd,
            supervisor: None,
            events,
            stop: Arc::new(AtomicBool::new(true)),
            stdin: File::from(OwnedFd::from(stdin_w)),
            stdout: File::from(OwnedFd::from(stdout_r)),
            stderr: File::from(OwnedFd::from(stderr_r)),
        })
    }
}

/// The supervisor's side of the setup: pid report, then listener report.
/// Returns the listener to serve, or `None` after handing a failure over. A
/// child whose listener cannot be taken is killed: it would otherwise wait
/// forever in its mediated `execve`, and the spawning thread with it.
fn handshake(
    mut report: std::io::PipeReader,
    tx: &mpsc::SyncSender<Handshake>,
) -> Option<(OwnedFd, u32)> {
    let first = read_report(&mut report).ok().flatten();
    let Some((sys::REPORT_PID, pid)) = first else {
        let _ = tx.send(Err(first));
        return None;
    };
    let second = read_report(&mut report).ok().flatten();
    let taken = match second {
        Some((sys::REPORT_LISTENER, fd)) => sys::pidfd_open(pid)
            .and_then(|pidfd| Ok((sys::pidfd_getfd(pidfd.as_fd(), fd)?, pidfd)))
            .ok(),
        _ => None,
    };
    match taken {
        Some((listener, pidfd)) => {
            let _ = tx.send(Ok((pidfd, report)));
            Some((listener, pid.unsigned_abs()))
        }
        None => {
            if second.is_some_and(|(tag, _)| tag == sys::REPORT_LISTENER) {
                let _ = sys::kill(pid, sys::signal::KILL);
            }
            let _ = tx.send(Err(second));
            None
        }
    }
}

/// Reads one 8-byte report; `None` at end of file.
pub(crate) fn read_report(r: &mut impl Read) -> Result<Option<(u32, i32)>, SandboxError> {
    let mut buf = [0_u8; 8];
    match r.read_exact(&mut buf) {
        Ok(()) => Ok(Some(sys::decode_report(buf))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(io("reading the child report")(e)),
    }
}

/// Kills and reaps a child whose setup failed; turns its report into an error.
pub(crate) fn setup_failure(pid: i32, report: Option<(u32, i32)>) -> SandboxError {
    let _ = sys::kill(pid, sys::signal::KILL);
    let _ = sys::reap_blocking(pid);
    match report.and_then(|(code, errno)| Some((ChildStep::from_code(code)?, errno))) {
        Some((step, errno)) => SandboxError::ChildSetup {
            step,
            source: std::io::Error::from_raw_os_error(errno),
        },
        None => SandboxError::Protocol("child exited without a usable report"),
    }
}
