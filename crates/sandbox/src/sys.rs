//! Every libc call of the crate, each `unsafe` block with its safety argument.
//!
//! The one long function here, [`child_after_clone`], runs between `clone` and
//! `execve` in a child that shares the memory of a possibly multithreaded parent
//! (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does; the calling thread sleeps until
//! the child has executed or died). There only async-signal-safe raw system calls
//! are allowed: no allocation (another thread may hold the allocator's lock, and
//! the heap is the parent's), no formatting, no `std::io::Error`, no writes to
//! shared memory. Everything it uses — C strings, pointer arrays, the BPF program,
//! the Landlock ruleset fd, the opened `cgroup.procs` files, the uid/gid map text —
//! is built by [`spawn_child`] before the clone, and the child reports its pid, its
//! listener fd and any failure as pairs of integers on a pipe. All signals stay
//! blocked until every disposition is back to its default, so no parent handler
//! ever runs in the child.
//!
//! Every child is cloned by one thread that lives as long as the process
//! ([`spawn_child_for_life`]) and asks for `SIGKILL` when its parent dies
//! (`PR_SET_PDEATHSIG`): the kernel sends it when the thread that cloned the child
//! ends, so a confined tool — an MCP server that never reads the end of its input,
//! say — cannot outlive a Knox process killed with SIGKILL.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;
use std::time::Duration;

/// A classic-BPF program ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
pub(crate) struct BpfProgram {
    filter: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for BpfProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BpfProgram")
            .field("instructions", &self.filter.len())
            .finish()
    }
}

impl BpfProgram {
    /// The kernel's `struct sock_filter` array for `program` (its length was checked
    /// against `BPF_MAXINSNS` when it was assembled; the kernel checks again).
    pub(crate) fn new(program: &[crate::bpf::Insn]) -> Self {
        let filter = program
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        Self { filter }
    }

    /// Number of instructions.
    pub(crate) fn len(&self) -> usize {
        self.filter.len()
    }
}

/// One seccomp user notification (`struct seccomp_notif`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Notification {
    /// Cookie for the answer and for [`notif_id_valid`].
    pub(crate) id: u64,
    /// Thread that made the call, in the listener's pid namespace.
    pub(crate) pid: u32,
    /// System call number.
    pub(crate) nr: i32,
    /// Argument registers.
    pub(crate) args: [u64; 6],
}

/// How the supervisor answers a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the call run in the kernel (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
    Continue,
    /// Fail it with this (positive) errno.
    Errno(i32),
    /// Return this value without running it (the supervisor made the call).
    Value(i64),
}

/// Which socket call [`socket_call`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SocketCall {
    /// `connect(2)`.
    Connect,
    /// `bind(2)`.
    Bind,
}

/// `connect` or `bind` of `sock` to the raw socket address `addr`; the errno on failure.
pub(crate) fn socket_call(sock: BorrowedFd<'_>, call: SocketCall, addr: &[u8]) -> Result<(), i32> {
    let len = libc::socklen_t::try_from(addr.len()).map_err(|_| libc::EINVAL)?;
    let ptr = addr.as_ptr().cast::<libc::sockaddr>();
    // SAFETY: `ptr` points at `len` readable bytes that outlive the call; the
    // kernel copies the address in (no alignment is required of the buffer).
    let r = unsafe {
        match call {
            SocketCall::Connect => libc::connect(sock.as_raw_fd(), ptr, len),
            SocketCall::Bind => libc::bind(sock.as_raw_fd(), ptr, len),
        }
    };
    // EINTR (a connect interrupted) goes back to the tool, as the kernel would
    // answer it: the connection goes on and the tool's retry sees `EALREADY`.
    if r == 0 { Ok(()) } else { Err(errno()) }
}

/// Receives the next notification (`SECCOMP_IOCTL_NOTIF_RECV`); `ENOENT` when the
/// target died between `poll` and this call.
pub(crate) fn notif_recv(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: all-zero is a valid `seccomp_notif`, and the kernel requires it zeroed.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `req` is a valid, writable `seccomp_notif` that outlives the call,
        // the size the request code encodes.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV,
                &mut req as *mut libc::seccomp_notif,
            )
        };
        if r >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    Ok(Notification {
        id: req.id,
        pid: req.pid,
        nr: req.data.nr,
        args: req.data.args,
    })
}

/// Whether the target of notification `id` is still waiting in that call
/// (`SECCOMP_IOCTL_NOTIF_ID_VALID`): if so, its pid still names it.
pub(crate) fn notif_id_valid(listener: BorrowedFd<'_>, id: u64) -> bool {
    // SAFETY: the kernel reads one u64 through the pointer, valid for the call.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id as *const u64,
        )
    };
    r == 0
}

/// Answers notification `id` (`SECCOMP_IOCTL_NOTIF_SEND`).
pub(crate) fn notif_send(listener: BorrowedFd<'_>, id: u64, answer: Answer) -> io::Result<()> {
    let (val, error, flags) = match answer {
        Answer::Continue => (0, 0, libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32),
        Answer::Errno(e) => (0, -e, 0),
        Answer::Value(v) => (v, 0, 0),
    };
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: `resp` is a valid `seccomp_notif_resp` that outlives the call.
    let r = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    cvt(r).map(drop)
}

fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        c_int::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))
    }
}

/// Takes ownership of a file descriptor a system call just returned.
fn owned(fd: c_int) -> OwnedFd {
    // SAFETY: callers pass a descriptor the kernel just created for this process
    // and that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The Landlock ABI version of the running kernel, or `None` without Landlock.
pub(crate) fn landlock_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute, size 0 and the VERSION flag the call reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            ptr::null::<c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).ok().filter(|v| *v > 0)
}

/// A pidfd for a child this process has not yet reaped.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments.
    let fd = cvt_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(owned(fd))
}

/// Duplicates descriptor `fd` of the process behind `pidfd` into this process.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: plain integer arguments; `pidfd` is a live descriptor.
    let got = cvt_long(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })?;
    Ok(owned(got))
}

/// What [`poll_in`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Data (or a notification, or an exit) is ready.
    Ready,
    /// The other side is gone and nothing is left to read.
    Hangup,
    /// The timeout passed.
    Timeout,
}

/// Waits until `fd` is readable, hung up, or `timeout_ms` passes.
pub(crate) fn poll_in(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<Readiness> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one valid pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(match n {
            0 => Readiness::Timeout,
            _ if pfd.revents & libc::POLLIN != 0 => Readiness::Ready,
            _ => Readiness::Hangup,
        });
    }
}

/// Waits (without timeout) until at least one of `fds` is readable or hung up;
/// returns which. `None` entries are skipped.
pub(crate) fn poll_many(fds: &[Option<BorrowedFd<'_>>]) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.map_or(-1, |f| f.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let n = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `pfds` is a valid array of `n` pollfds that lives across the call;
        // negative fds are ignored by the kernel.
        if unsafe { libc::poll(pfds.as_mut_ptr(), n, -1) } >= 0 {
            return Ok(pfds.iter().map(|p| p.revents != 0).collect());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Poll events, re-exported so that callers need no libc.
pub(crate) mod poll {
    /// Readable (or a pidfd whose process exited).
    pub(crate) const IN: i16 = libc::POLLIN;
    /// Writable.
    pub(crate) const OUT: i16 = libc::POLLOUT;
}

/// Waits up to `timeout_ms` (-1: forever) until one of `fds` has one of its
/// events, or hung up or failed; returns each descriptor's `revents` (all zero on timeout).
pub(crate) fn poll_set(fds: &[(BorrowedFd<'_>, i16)], timeout_ms: i32) -> io::Result<Vec<i16>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, events)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: *events,
            revents: 0,
        })
        .collect();
    let n = libc::nfds_t::try_from(pfds.len())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: `pfds` is a valid array of `n` pollfds that lives across the call.
        if unsafe { libc::poll(pfds.as_mut_ptr(), n, timeout_ms) } >= 0 {
            return Ok(pfds.iter().map(|p| p.revents).collect());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Sets `O_NONBLOCK` on `fd` (reads and writes then fail with `WouldBlock` instead of waiting).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: integer arguments on a live descriptor.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: integer arguments on a live descriptor.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }).map(drop)
}

/// How a reaped child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// `exit(code)`.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

/// Reaps `pid`, blocking until it exits; returns how it ended and its CPU time (user + system).
pub(crate) fn reap_blocking(pid: i32) -> io::Result<(Exit, Duration)> {
    let mut status: c_int = 0;
    // SAFETY: all-zero is a valid `rusage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid out-pointers for the duration of the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        let exit = if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        };
        return Ok((exit, timeval(usage.ru_utime) + timeval(usage.ru_stime)));
    }
}

fn timeval(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(micros.into())
}

/// Sends `sig` to process `pid` (or, negative, to process group `-pid`); `ESRCH` is not an error.
pub(crate) fn kill(pid: i32, sig: c_int) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    match cvt(unsafe { libc::kill(pid, sig) }) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        other => other.map(drop),
    }
}

/// Effective user id of this process.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// Effective group id of this process.
pub(crate) fn getegid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::getegid() }
}

/// `SIGKILL`, `SIGXCPU`, `SIGXFSZ`, `SIGSYS` numbers, for decoding exits.
pub(crate) mod signal {
    /// `SIGKILL`.
    pub(crate) const KILL: i32 = libc::SIGKILL;
    /// `SIGXCPU`.
    pub(crate) const XCPU: i32 = libc::SIGXCPU;
    /// `SIGXFSZ`.
    pub(crate) const XFSZ: i32 = libc::SIGXFSZ;
}

/// A resource limit the child sets on itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// `RLIMIT_CPU`.
    Cpu,
    /// `RLIMIT_FSIZE`.
    FileSize,
    /// `RLIMIT_AS`.
    AddressSpace,
    /// `RLIMIT_NOFILE`.
    OpenFiles,
    /// `RLIMIT_NPROC`.
    Processes,
    /// `RLIMIT_CORE`.
    Core,
}

impl Resource {
    fn raw(self) -> libc::__rlimit_resource_t {
        match self {
            Resource::Cpu => libc::RLIMIT_CPU,
            Resource::FileSize => libc::RLIMIT_FSIZE,
            Resource::AddressSpace => libc::RLIMIT_AS,
            Resource::OpenFiles => libc::RLIMIT_NOFILE,
            Resource::Processes => libc::RLIMIT_NPROC,
            Resource::Core => libc::RLIMIT_CORE,
        }
    }
}

/// One `setrlimit` the child performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rlimit {
    /// Which limit.
    pub(crate) resource: Resource,
    /// Soft limit.
    pub(crate) soft: u64,
    /// Hard limit.
    pub(crate) hard: u64,
}

/// Where in the child setup a step failed; sent to the parent with `errno`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ChildStep {
    /// Rearranging file descriptors.
    Descriptors = 1,
    /// `setpgid`.
    ProcessGroup = 2,
    /// Writing to `cgroup.procs`.
    Cgroup = 3,
    /// `unshare(CLONE_NEWUSER)` and the id maps.
    UserNamespace = 4,
    /// `setrlimit`.
    Rlimit = 5,
    /// Signal mask and dispositions.
    Signals = 6,
    /// Dropping capabilities.
    Capabilities = 7,
    /// `chdir` to the workspace.
    Chdir = 8,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 9,
    /// `landlock_restrict_self`.
    Landlock = 10,
    /// Installing the seccomp filter.
    Seccomp = 11,
    /// `execve`.
    Exec = 12,
    /// `unshare` of the harness namespaces, or making its mounts private
    /// (the dangerous limits-only baseline only).
    Namespaces = 13,
    /// `setgroups`, `setresgid`, `setresuid` to the tool's unprivileged identity.
    Identity = 14,
    /// `PR_SET_PDEATHSIG`, or the parent died before it was set.
    ParentDeath = 15,
    /// `unshare(CLONE_NEWNS)` and attaching the idmapped mounts of granted paths.
    Mounts = 16,
}

impl ChildStep {
    const ALL: [ChildStep; 16] = [
        ChildStep::Descriptors,
        ChildStep::ProcessGroup,
        ChildStep::Cgroup,
        ChildStep::UserNamespace,
        ChildStep::Rlimit,
        ChildStep::Signals,
        ChildStep::Capabilities,
        ChildStep::Chdir,
        ChildStep::NoNewPrivs,
        ChildStep::Landlock,
        ChildStep::Seccomp,
        ChildStep::Exec,
        ChildStep::Namespaces,
        ChildStep::Identity,
        ChildStep::ParentDeath,
        ChildStep::Mounts,
    ];

    /// The step a report code names.
    pub(crate) fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|s| *s as u32 == code)
    }
}

/// Report tag for "this is the seccomp listener fd number" (not a failure).
pub(crate) const REPORT_LISTENER: u32 = 0xffff;
/// Report tag for "this is my pid" (the first report).
pub(crate) const REPORT_PID: u32 = 0xfffe;

/// Decodes one 8-byte report from the child: (tag or step, value).
pub(crate) fn decode_report(bytes: [u8; 8]) -> (u32, i32) {
    let [a, b, c, d, e, f, g, h] = bytes;
    (
        u32::from_ne_bytes([a, b, c, d]),
        i32::from_ne_bytes([e, f, g, h]),
    )
}

/// uid/gid maps written after `unshare(CLONE_NEWUSER)` (non-root callers).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserNamespaceMaps<'a> {
    /// Contents for `/proc/self/uid_map`.
    pub(crate) uid_map: &'a [u8],
    /// Contents for `/proc/self/gid_map`.
    pub(crate) gid_map: &'a [u8],
}

/// A detached mount tree the child attaches over `target` in its own mount namespace.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MountAt<'a> {
    /// The tree, from [`idmapped_tree`].
    pub(crate) tree: BorrowedFd<'a>,
    /// Absolute path it is attached over.
    pub(crate) target: &'a CStr,
}

/// Everything the child needs, borrowed from state the parent keeps alive across the clone.
#[derive(Debug)]
pub(crate) struct ChildSpec<'a> {
    /// Absolute path of the program.
    pub(crate) program: &'a CStr,
    /// Arguments, `argv[0]` first.
    pub(crate) argv: &'a [CString],
    /// Environment entries `KEY=VALUE`.
    pub(crate) envp: &'a [CString],
    /// Working directory.
    pub(crate) cwd: &'a CStr,
    /// Becomes fd 0.
    pub(crate) stdin: BorrowedFd<'a>,
    /// Becomes fd 1.
    pub(crate) stdout: BorrowedFd<'a>,
    /// Becomes fd 2.
    pub(crate) stderr: BorrowedFd<'a>,
    /// Write end of the report pipe.
    pub(crate) report: BorrowedFd<'a>,
    /// The Landlock ruleset (created and filled in the parent); `None` only for
    /// the dangerous limits-only baseline.
    pub(crate) landlock: Option<BorrowedFd<'a>>,
    /// `landlock_restrict_self` flags.
    pub(crate) landlock_flags: u32,
    /// Opened `cgroup.procs` files to join (0, 1 or 2).
    pub(crate) cgroup_procs: &'a [BorrowedFd<'a>],
    /// Limits to set.
    pub(crate) rlimits: &'a [Rlimit],
    /// Drop every capability (root callers and user namespaces).
    pub(crate) drop_capabilities: bool,
    /// `(uid, gid)` the tool runs as (root callers): no supplementary groups.
    /// The child then executes the program through `program_fd`, so that
    /// directories above it need not be searchable by that uid.
    pub(crate) identity: Option<(u32, u32)>,
    /// The program's descriptor, executed instead of `program` when present: opened
    /// `O_PATH` before the clone for `identity`, or given by the caller (`spawn_fd`).
    pub(crate) program_fd: Option<BorrowedFd<'a>>,
    /// New user namespace and its maps, for non-root callers.
    pub(crate) user_namespace: Option<UserNamespaceMaps<'a>>,
    /// The seccomp program; `None` only for the dangerous limits-only baseline
    /// (then no listener is reported and nothing is mediated).
    pub(crate) filter: Option<&'a BpfProgram>,
    /// Namespaces to unshare (after the user namespace, before the rlimits);
    /// with `CLONE_NEWNS`, every mount is made private first. Non-zero only for
    /// the dangerous limits-only baseline, whose privileged calls must not reach
    /// the host's mount table, host name or IPC objects.
    pub(crate) namespaces: c_int,
    /// Idmapped mounts to attach, in order, in a new mount namespace whose mounts
    /// are made private first (root callers; see [`crate::idmap`]). The first step
    /// of the child, while the parent's descriptors are still open in it.
    pub(crate) mounts: &'a [MountAt<'a>],
}

/// Child fd numbers after rearrangement: 0–2 stdio, then these.
const CHILD_REPORT_FD: c_int = 3;
const CHILD_LANDLOCK_FD: c_int = 4;
const CHILD_CGROUP_FD: c_int = 5;
const MAX_CGROUP_FDS: usize = 2;
/// The program opened `O_PATH`, after the cgroup slots (see [`PROGRAM_BY_FD`]).
const CHILD_PROGRAM_FD: usize = 5 + MAX_CGROUP_FDS;
/// `execve` of the program through its descriptor at [`CHILD_PROGRAM_FD`]: the
/// magic link is followed without searching the directories above the file.
const PROGRAM_BY_FD: &CStr = c"/proc/self/fd/7";
const MAX_RLIMITS: usize = 8;
/// Slots: stdin, stdout, stderr, report, landlock, cgroup × 2, program.
const FD_SLOTS: usize = 6 + MAX_CGROUP_FDS;

/// The spec lowered to raw values, built before the clone; the child only reads it.
struct Lowered<'a> {
    spec: &'a ChildSpec<'a>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    fds: [c_int; FD_SLOTS],
    high_fd: c_int,
    rlimits: [(libc::__rlimit_resource_t, libc::rlimit); MAX_RLIMITS],
    rlimit_count: usize,
    prog: libc::sock_fprog,
    /// This process's pid: the child's parent, until it dies.
    parent: libc::pid_t,
}

/// Stack of the cloned child until `execve`; the setup code is shallow.
const CHILD_STACK: usize = 96 * 1024;

/// Clones a child that confines itself as `spec` says and then executes the program.
/// Returns the child's pid once it has executed or died; its pid, listener fd and
/// setup failures arrive on `spec.report` (see [`decode_report`]). Someone must be
/// serving the listener by then: the child's `execve` is a mediated call.
pub(crate) fn spawn_child(spec: &ChildSpec<'_>) -> io::Result<i32> {
    let invalid = |what| io::Error::new(io::ErrorKind::InvalidInput, what);
    if spec.cgroup_procs.len() > MAX_CGROUP_FDS || spec.rlimits.len() > MAX_RLIMITS {
        return Err(invalid("too many cgroups or rlimits"));
    }
    let mut fds = [-1; FD_SLOTS];
    let listed = [
        Some(spec.stdin),
        Some(spec.stdout),
        Some(spec.stderr),
        Some(spec.report),
        spec.landlock,
    ];
    let cgroups = spec.cgroup_procs.iter().copied().map(Some);
    for (slot, fd) in fds.iter_mut().zip(listed.into_iter().chain(cgroups)) {
        *slot = fd.map_or(-1, |f| f.as_raw_fd());
    }
    if let (Some(slot), Some(fd)) = (fds.get_mut(CHILD_PROGRAM_FD), spec.program_fd) {
        *slot = fd.as_raw_fd();
    }
    let high_fd = fds
        .iter()
        .copied()
        .max()
        .unwrap_or(2)
        .max(FD_SLOTS as c_int)
        + 1;
    let mut rlimits = [(
        0,
        libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        },
    ); MAX_RLIMITS];
    for (slot, r) in rlimits.iter_mut().zip(spec.rlimits) {
        *slot = (
            r.resource.raw(),
            libc::rlimit {
                rlim_cur: r.soft,
                rlim_max: r.hard,
            },
        );
    }
    let nul_terminated = |v: &[CString]| {
        v.iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(ptr::null()))
            .collect::<Vec<_>>()
    };
    let instructions = spec.filter.map_or(&[][..], |f| f.filter.as_slice());
    let len = u16::try_from(instructions.len()).map_err(|_| invalid("bpf program too long"))?;
    let lowered = Lowered {
        spec,
        argv: nul_terminated(spec.argv),
        envp: nul_terminated(spec.envp),
        fds,
        high_fd,
        rlimits,
        rlimit_count: spec.rlimits.len(),
        // The kernel only reads through this pointer (`struct sock_fprog` is not const-correct).
        prog: libc::sock_fprog {
            len,
            filter: instructions.as_ptr().cast_mut(),
        },
        parent: libc::pid_t::try_from(std::process::id()).map_err(|_| invalid("pid"))?,
    };
    let mut stack = vec![0_u8; CHILD_STACK];
    let top = stack.as_mut_ptr_range().end;
    // The x86_64 ABI wants a 16-byte aligned stack; round the top down.
    let top = top.wrapping_sub(top as usize % 16).cast::<c_void>();
    let arg = ptr::from_ref(&lowered).cast_mut().cast::<c_void>();
    let old_mask = block_all_signals()?;
    // SAFETY: `child_entry` runs on `stack`, which outlives the call because
    // CLONE_VFORK suspends this thread until the child has executed or exited;
    // `lowered` (behind `arg`) lives in this frame for the same span. The child
    // keeps to async-signal-safe system calls and never returns (see module docs).
    let pid = unsafe {
        libc::clone(
            child_entry,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        )
    };
    let cloned = cvt(pid);
    restore_signals(&old_mask);
    drop(stack);
    cloned
}

/// A pointer to the caller's [`ChildSpec`], handed to the spawner thread.
struct SpecPtr(*const c_void);

// SAFETY: the spec behind the pointer is only read, by the spawner thread, while
// the thread that owns it waits for the result (see `spawn_child_for_life`).
unsafe impl Send for SpecPtr {}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// [`spawn_child`] on the process's spawner thread, which is never ended: the
/// child's parent-death signal (set in [`child_after_clone`]) follows the thread
/// that cloned it, so a child cloned by a caller's thread — a session thread, an
/// agent's scoped thread — would be killed when that thread ends, while one cloned
/// here is killed only when the process dies. Clones are serialised (each one lasts
/// until the child has executed).
pub(crate) fn spawn_child_for_life(spec: &ChildSpec<'_>) -> io::Result<i32> {
    static SPAWNER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<SpawnJob>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::channel::<SpawnJob>();
            std::thread::Builder::new()
                .name("knox-spawn".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
        .ok_or_else(|| io::Error::other("no spawner thread"))?;
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
    let spec_ptr = SpecPtr(ptr::from_ref(spec).cast());
    let job: SpawnJob = Box::new(move || {
        let p = spec_ptr;
        // SAFETY: `spec` lives in the frame of the thread that sent this job, which
        // waits below until the job has sent its result (or was dropped unrun, or
        // unwound: then `done_tx` is gone and the wait ends); it is only read.
        let spec = unsafe { &*p.0.cast::<ChildSpec<'_>>() };
        let _ = done_tx.send(spawn_child(spec));
    });
    spawner
        .send(job)
        .map_err(|_| io::Error::other("the spawner thread has ended"))?;
    done_rx
        .recv()
        .unwrap_or_else(|_| Err(io::Error::other("the spawner thread failed")))
}

fn block_all_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: all-zero sigsets are valid to initialize; both live across the calls.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        match libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) {
            0 => Ok(old),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: `old` is the mask `block_all_signals` saved.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, ptr::null_mut()) };
}

extern "C" fn child_entry(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Lowered` that `spawn_child` passed; it outlives the
    // child's use of it (CLONE_VFORK) and is only read.
    let lowered = unsafe { &*arg.cast::<Lowered<'_>>() };
    child_after_clone(lowered)
}

fn errno() -> c_int {
    // SAFETY: `__errno_location` returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Writes one 8-byte report; the pipe write is atomic (≤ `PIPE_BUF`).
fn report(fd: c_int, tag: u32, value: i32) {
    let mut buf = [0_u8; 8];
    let (tag_bytes, value_bytes) = buf.split_at_mut(4);
    tag_bytes.copy_from_slice(&tag.to_ne_bytes());
    value_bytes.copy_from_slice(&value.to_ne_bytes());
    // SAFETY: `buf` is 8 readable bytes; a failed write only loses the report.
    unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
}

fn fail(report_fd: c_int, step: ChildStep) -> ! {
    report(report_fd, step as u32, errno());
    // SAFETY: `_exit` skips atexit handlers and stdio flushing, as a child sharing
    // the parent's memory must.
    unsafe { libc::_exit(127) }
}

/// The child between `clone` and `execve`. A table of steps in the order the design
/// prescribes; each failure is reported and ends the child with status 127.
fn child_after_clone(p: &Lowered<'_>) -> ! {
    let original_report = p.fds.get(3).copied().unwrap_or(-1);
    // SAFETY: no arguments; the raw call avoids any C library pid cache.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) };
    report(
        original_report,
        REPORT_PID,
        i32::try_from(pid).unwrap_or(-1),
    );
    if !reset_dispositions() {
        fail(original_report, ChildStep::Signals);
    }
    if !p.spec.mounts.is_empty() && !attach_mounts(p.spec.mounts) {
        fail(original_report, ChildStep::Mounts);
    }
    if arrange_descriptors(p).is_err() {
        fail(original_report, ChildStep::Descriptors);
    }
    let step = |ok: bool, step: ChildStep| {
        if !ok {
            fail(CHILD_REPORT_FD, step)
        }
    };
    // SAFETY: `setpgid(0, 0)` only changes this process's group.
    step(unsafe { libc::setpgid(0, 0) } == 0, ChildStep::ProcessGroup);
    step(join_cgroups(p), ChildStep::Cgroup);
    if let Some(maps) = p.spec.user_namespace {
        step(enter_user_namespace(maps), ChildStep::UserNamespace);
    }
    if p.spec.namespaces != 0 {
        step(enter_namespaces(p.spec.namespaces), ChildStep::Namespaces);
    }
    step(set_rlimits(p), ChildStep::Rlimit);
    // Before the identity change: the directories above the workspace need not
    // be searchable by the tool's uid.
    // SAFETY: `cwd` is a valid NUL-terminated string built before the clone.
    step(
        unsafe { libc::chdir(p.spec.cwd.as_ptr()) } == 0,
        ChildStep::Chdir,
    );
    if p.spec.drop_capabilities || p.spec.identity.is_some() {
        // Securebits and the bounding set need CAP_SETPCAP, the identity change
        // CAP_SETUID and CAP_SETGID: in that order, then every set is cleared.
        step(lock_securebits_and_bounding_set(), ChildStep::Capabilities);
        if let Some((uid, gid)) = p.spec.identity {
            step(change_identity(uid, gid), ChildStep::Identity);
        }
        step(clear_capabilities(), ChildStep::Capabilities);
    }
    // After every change of credentials, which clears it: SIGKILL when the thread
    // that cloned this child ends — the process's spawner thread, so when the
    // process dies. Had it died already, this child is an orphan: it ends.
    // SAFETY: prctl and getppid with integer arguments only.
    step(
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } == 0
            && unsafe { libc::syscall(libc::SYS_getppid) } == libc::c_long::from(p.parent),
        ChildStep::ParentDeath,
    );
    // SAFETY: prctl with integer arguments only.
    step(
        unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } == 0,
        ChildStep::NoNewPrivs,
    );
    if p.spec.landlock.is_some() {
        // SAFETY: integer arguments; fd 4 is the Landlock ruleset placed by `arrange_descriptors`.
        let restricted = unsafe {
            libc::syscall(
                libc::SYS_landlock_restrict_self,
                CHILD_LANDLOCK_FD,
                p.spec.landlock_flags,
            )
        };
        step(restricted == 0, ChildStep::Landlock);
    }
    // Every disposition is the default (or SIGXFSZ ignored): unblocking is safe now.
    step(unblock_signals(), ChildStep::Signals);
    if p.spec.filter.is_some() {
        // SAFETY: `prog` points at the filter vector, alive in the (shared) parent memory.
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &p.prog as *const libc::sock_fprog,
            )
        };
        step(listener >= 0, ChildStep::Seccomp);
        // The listener is close-on-exec (the kernel creates it so), so the tool never holds it.
        report(
            CHILD_REPORT_FD,
            REPORT_LISTENER,
            i32::try_from(listener).unwrap_or(-1),
        );
    }
    // A program descriptor (the root caller's `O_PATH` open, or a descriptor the
    // caller opened and hashed: `Sandbox::spawn_fd`) is executed as such.
    let program = match p.spec.program_fd {
        Some(_) => PROGRAM_BY_FD,
        None => p.spec.program,
    };
    // SAFETY: program, argv and envp are NUL-terminated strings and NULL-terminated
    // pointer arrays built before the clone; on success this call does not return.
    unsafe { libc::execve(program.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr()) };
    fail(CHILD_REPORT_FD, ChildStep::Exec)
}

/// Moves every inherited descriptor the child needs to fixed low numbers and closes the rest.
fn arrange_descriptors(p: &Lowered<'_>) -> Result<(), ()> {
    // First copy each above every target so no `dup2` clobbers a source still needed.
    let mut high = [-1; FD_SLOTS];
    for (h, &fd) in high.iter_mut().zip(&p.fds) {
        if fd >= 0 {
            // SAFETY: integer arguments on a descriptor inherited from the parent.
            *h = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, p.high_fd) };
            if *h < 0 {
                return Err(());
            }
        }
    }
    for (target, &h) in (0..).zip(&high) {
        if h < 0 {
            // An unused slot: whatever the parent had at this number must not
            // reach the tool (close_range below starts after the slots).
            // SAFETY: closing a descriptor number in this child; EBADF is harmless.
            unsafe { libc::close(target) };
            continue;
        }
        // stdio must survive exec; the others must not.
        let flags = if target < CHILD_REPORT_FD {
            0
        } else {
            libc::O_CLOEXEC
        };
        // SAFETY: integer arguments; `target` is below `high_fd`, so distinct from `h`.
        if unsafe { libc::dup3(h, target, flags) } < 0 {
            return Err(());
        }
    }
    let first_free = FD_SLOTS as libc::c_uint;
    // SAFETY: integer arguments; closes every descriptor from `first_free` up.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, first_free, libc::c_uint::MAX, 0) };
    if closed == 0 { Ok(()) } else { Err(()) }
}

fn join_cgroups(p: &Lowered<'_>) -> bool {
    // Writing "0" to `cgroup.procs` moves the writing process (v1 and v2 alike),
    // so the child needs no formatted pid.
    (0..p.spec.cgroup_procs.len()).all(|i| {
        let fd = CHILD_CGROUP_FD + i as c_int;
        // SAFETY: one readable byte; `fd` is an opened `cgroup.procs`.
        let ok = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) } == 1;
        // SAFETY: closing a descriptor this child owns.
        unsafe { libc::close(fd) };
        ok
    })
}

fn write_file(path: &CStr, text: &[u8]) -> bool {
    // SAFETY: `path` is NUL-terminated; flags are valid.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `text` is readable for its length; `fd` was just opened.
    let n = unsafe { libc::write(fd, text.as_ptr().cast(), text.len()) };
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(fd) };
    usize::try_from(n).is_ok_and(|n| n == text.len())
}

fn enter_user_namespace(maps: UserNamespaceMaps<'_>) -> bool {
    // SAFETY: integer argument.
    let unshared = unsafe { libc::unshare(libc::CLONE_NEWUSER) } == 0;
    unshared
        && write_file(c"/proc/self/setgroups", b"deny")
        && write_file(c"/proc/self/uid_map", maps.uid_map)
        && write_file(c"/proc/self/gid_map", maps.gid_map)
}

/// `unshare(flags)`; with `CLONE_NEWNS`, then makes every mount private so that
/// nothing mounted in the new namespace propagates back to the host's.
fn enter_namespaces(flags: c_int) -> bool {
    // SAFETY: integer argument.
    if unsafe { libc::unshare(flags) } != 0 {
        return false;
    }
    if flags & libc::CLONE_NEWNS == 0 {
        return true;
    }
    // SAFETY: static NUL-terminated target; NULL source, type and data are
    // accepted for a propagation change.
    unsafe {
        libc::mount(
            ptr::null(),
            c"/".as_ptr(),
            ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            ptr::null(),
        ) == 0
    }
}

/// `MOVE_MOUNT_F_EMPTY_PATH` (`<linux/mount.h>`): the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// `OPEN_TREE_CLONE` (`<linux/mount.h>`): a detached copy of the mount tree.
const OPEN_TREE_CLONE: libc::c_uint = 0x1;
/// `MOUNT_ATTR_IDMAP` (`<linux/mount.h>`).
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` (`<linux/mount.h>`, `MOUNT_ATTR_SIZE_VER0`).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// In a new mount namespace whose mounts are all private, attaches each tree over
/// its target.
fn attach_mounts(mounts: &[MountAt<'_>]) -> bool {
    enter_namespaces(libc::CLONE_NEWNS)
        && mounts.iter().all(|m| {
            // SAFETY: `tree` is a descriptor of this child's (copied) table, the
            // paths are NUL-terminated strings built before the clone.
            unsafe {
                libc::syscall(
                    libc::SYS_move_mount,
                    m.tree.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    m.target.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ) == 0
            }
        })
}

/// A detached copy of the mounts at and beneath `path` (`open_tree` with
/// `OPEN_TREE_CLONE | AT_RECURSIVE`), idmapped through the user namespace `userns`
/// (`mount_setattr` with `MOUNT_ATTR_IDMAP`). Attached by [`MountAt`] in a child.
pub(crate) fn idmapped_tree(path: &CStr, userns: &OwnedFd) -> io::Result<OwnedFd> {
    // A granted path replaced by a symbolic link since the policy was prepared (its
    // rules were made on the canonical path) is not followed: the mount fails instead.
    let flags = OPEN_TREE_CLONE
        | libc::O_CLOEXEC as libc::c_uint
        | libc::AT_RECURSIVE as libc::c_uint
        | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint;
    // SAFETY: `path` is NUL-terminated; integer flags.
    let tree = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    let tree = owned(cvt_long(tree)?);
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: u64::try_from(userns.as_raw_fd())
            .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
    };
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed; the path is
    // the empty string with `AT_EMPTY_PATH`, so the descriptor itself is changed.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    cvt_long(set)?;
    Ok(tree)
}

/// A user namespace whose maps are `uid_map` and `gid_map`, held by its
/// descriptor. A child is created in it (a raw `clone` with `CLONE_NEWUSER` and no
/// `CLONE_VM`, as `fork` does) and waits on a pipe while this process, which
/// holds `CAP_SETUID` and `CAP_SETGID`, writes its maps and opens
/// `/proc/PID/ns/user`; then the pipe closes and the child exits (it also exits
/// should this process die first: the pipe closes with it).
pub(crate) fn user_namespace(uid_map: &[u8], gid_map: &[u8]) -> io::Result<OwnedFd> {
    let (read_end, write_end) = std::io::pipe()?;
    let (waiting, held) = (read_end.as_raw_fd(), write_end.as_raw_fd());
    let flags = libc::c_ulong::try_from(libc::CLONE_NEWUSER | libc::SIGCHLD)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: without CLONE_VM and with a null stack this is `fork`: the child runs
    // on a copy of this thread's stack and memory. It makes only async-signal-safe
    // system calls (`read`, `_exit`) and never returns into Rust code that could
    // take a lock another thread held at the clone.
    let pid = unsafe { libc::syscall(libc::SYS_clone, flags, 0_usize, 0_usize, 0_usize, 0_usize) };
    if pid == 0 {
        let mut byte = 0_u8;
        // SAFETY: closes this child's copy of the write end (so that the parent's
        // close is the end of file), then reads one byte into a writable byte.
        unsafe {
            libc::close(held);
            libc::read(waiting, (&raw mut byte).cast(), 1);
            libc::_exit(0)
        }
    }
    let pid = cvt_long(pid)?;
    drop(read_end);
    let opened = (|| {
        let map = |name: &str, text: &[u8]| std::fs::write(format!("/proc/{pid}/{name}"), text);
        map("uid_map", uid_map)?;
        map("gid_map", gid_map)?;
        std::fs::File::open(format!("/proc/{pid}/ns/user")).map(OwnedFd::from)
    })();
    drop(write_end);
    // SAFETY: waits for the child created above; a null status pointer is allowed.
    unsafe { libc::waitpid(pid, ptr::null_mut(), 0) };
    opened
}

fn set_rlimits(p: &Lowered<'_>) -> bool {
    p.rlimits
        .iter()
        .take(p.rlimit_count)
        .all(|(resource, limit)| {
            // SAFETY: `limit` is a valid rlimit for the duration of the call.
            unsafe { libc::setrlimit(*resource, limit) == 0 }
        })
}

/// Resets every classic signal's disposition to the default — the parent's handlers
/// must never run in a child sharing its memory, and Rust ignores `SIGPIPE` — then
/// ignores `SIGXFSZ`, so that writing past `RLIMIT_FSIZE` fails with `EFBIG`
/// instead of killing the tool. Signals are still blocked here.
fn reset_dispositions() -> bool {
    // 1..=31: the classic signals; 32 and 33 belong to the C library.
    for sig in 1..=31 {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            // SAFETY: setting a default disposition has no memory effects; errors
            // (signals the kernel reserves) are harmless.
            unsafe { libc::signal(sig, libc::SIG_DFL) };
        }
    }
    // SAFETY: SIG_IGN for a catchable signal.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) != libc::SIG_ERR }
}

/// Unblocks every signal (the tool starts with an empty mask).
fn unblock_signals() -> bool {
    // SAFETY: `set` is a valid sigset_t on this stack frame.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, ptr::null_mut()) == 0
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// First half of the capability drop (needs `CAP_SETPCAP`): `SECBIT_NOROOT`
/// (locked) so that executing as root grants none, no raising of ambient
/// capabilities (locked), and an empty bounding set (one `PR_CAPBSET_DROP` per
/// capability up to the kernel's last, about 45 µs) so that nothing — not even
/// a file capability, were `no_new_privs` ever lifted — can add one back.
fn lock_securebits_and_bounding_set() -> bool {
    const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
    const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
    const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
    const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;
    let bits = SECBIT_NOROOT
        | SECBIT_NOROOT_LOCKED
        | SECBIT_NO_CAP_AMBIENT_RAISE
        | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits, 0, 0, 0) } != 0 {
        return false;
    }
    // Capabilities are numbered from 0; the first number past the kernel's last
    // one fails with EINVAL (64 bounds the loop: the sets are 64 bits wide).
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            return errno() == libc::EINVAL && cap > 0;
        }
    }
    true
}

/// Becomes `uid`/`gid` for good: no supplementary groups, then real, effective
/// and saved group and user ids. Raw system calls: the C library's wrappers
/// would signal every thread of the parent this child shares its memory with
/// (to change their ids too). Leaving uid 0 clears the permitted and effective
/// capabilities (no `SECBIT_KEEP_CAPS`).
fn change_identity(uid: u32, gid: u32) -> bool {
    let (uid, gid) = (libc::c_long::from(uid), libc::c_long::from(gid));
    // SAFETY: a zero-length list with a NULL pointer; integer arguments.
    if unsafe { libc::syscall(libc::SYS_setgroups, 0, ptr::null::<libc::gid_t>()) } != 0 {
        return false;
    }
    // SAFETY: integer arguments.
    if unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) } != 0 {
        return false;
    }
    // SAFETY: integer arguments.
    unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0 }
}

/// Second half of the capability drop: no ambient capabilities, and the
/// effective, permitted and inheritable sets empty (dropping needs no privilege).
fn clear_capabilities() -> bool {
    const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl with integer arguments.
    let ambient = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) == 0
    };
    let header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: version-3 capset reads one header and two data structs, both valid here.
    let cleared = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) == 0 };
    ambient && cleared
}

/// A `NETLINK_AUDIT` socket bound to `groups`: 0 for requests to the kernel
/// (`AUDIT_GET`, `AUDIT_SET`, `AUDIT_USER`), `AUDIT_NLGRP_READLOG` (1) to read
/// every record the kernel logs, read-only (`CAP_AUDIT_READ`), beside auditd.
pub(crate) fn audit_socket(groups: u32) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_AUDIT,
        )
    })?;
    let fd = owned(fd);
    // SAFETY: `sockaddr_nl` is plain integers, for which all-zero bytes are valid.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = groups;
    let len = std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t;
    // SAFETY: `addr` is a valid `sockaddr_nl` of `len` bytes that outlives the call.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(&addr).cast::<libc::sockaddr>(),
            len,
        )
    })?;
    Ok(fd)
}

/// Sets a socket's receive buffer to `bytes`: `SO_RCVBUFFORCE` (past
/// `rmem_max`, with `CAP_NET_ADMIN`), else `SO_RCVBUF`.
pub(crate) fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: c_int) -> io::Result<()> {
    let len = std::mem::size_of::<c_int>() as libc::socklen_t;
    for option in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `bytes` is a live `c_int` of `len` bytes; `fd` is a live descriptor.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                ptr::from_ref(&bytes).cast::<c_void>(),
                len,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

/// Whether `path` carries a POSIX access ACL (`system.posix_acl_access`).
pub(crate) fn has_access_acl(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(p) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: both strings are NUL-terminated and live across the call; a NULL buffer
    // of size 0 asks only for the attribute's size.
    let n = unsafe {
        libc::getxattr(
            p.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n > 0
}
