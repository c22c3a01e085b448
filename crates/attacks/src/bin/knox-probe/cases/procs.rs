//! Process attacks: the fixture's victim (trace, read, write, signal), escaping the tree, executing what is not granted.

use std::io::Write as _;
use std::time::{Duration, Instant};

use super::{arg, cstr, file_size_bomb, int, raw};
use crate::sys::{self, ptr};
use crate::{Case, Res};

/// Rows; PID is always the corpus fixture's own victim process.
pub const CASES: &[Case] = &[
    ("ptrace", "attach|seize PID", ptrace),
    ("vm-read", "PID ADDR LEN", |a| {
        let len = usize::try_from(int(a, 2)?.min(4096)).map_err(|e| e.to_string())?;
        Ok(match sys::vm_read(int(a, 0)? as i32, int(a, 1)?, len) {
            Ok(bytes) => Res::ok().detail(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) => Res::err(e),
        })
    }),
    ("vm-write", "PID ADDR TEXT", |a| {
        let text = arg(a, 2)?;
        Ok(Res::sys(sys::vm_write(
            int(a, 0)? as i32,
            int(a, 1)?,
            text.as_bytes(),
        )))
    }),
    ("tgkill", "PID SIGNAL", |a| {
        let pid = int(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_tgkill, [pid, pid, int(a, 1)?])))
    }),
    ("tkill", "PID SIGNAL", |a| {
        Ok(Res::sys(raw(libc::SYS_tkill, [int(a, 0)?, int(a, 1)?])))
    }),
    ("pidfd-kill", "PID SIGNAL", |a| {
        let pidfd = match raw(libc::SYS_pidfd_open, [int(a, 0)?, 0]) {
            Ok(fd) => fd,
            Err(e) => return Ok(Res::err(e).detail("pidfd_open")),
        };
        let r = raw(
            libc::SYS_pidfd_send_signal,
            [pidfd as u64, int(a, 1)?, 0, 0],
        );
        sys::close(pidfd as i32);
        Ok(Res::sys(r))
    }),
    ("sigqueue", "PID SIGNAL", |a| {
        // siginfo_t: si_signo, si_errno, si_code = SI_QUEUE (-1), then zeros.
        let mut info = [0_i32; 32];
        let signal = int(a, 1)? as i32;
        for (slot, v) in info.iter_mut().zip([signal, 0, -1]) {
            *slot = v;
        }
        Ok(Res::sys(raw(
            libc::SYS_rt_sigqueueinfo,
            [int(a, 0)?, u64::from(signal as u32), info.as_ptr() as u64],
        )))
    }),
    ("sigio", "PID", sigio),
    ("prlimit-set", "PID", |a| {
        let limit = [64_u64, 64];
        Ok(Res::sys(raw(
            libc::SYS_prlimit64,
            [
                int(a, 0)?,
                libc::RLIMIT_NOFILE as u64,
                limit.as_ptr() as u64,
                0,
            ],
        )))
    }),
    ("setpriority", "PID NICE", |a| {
        Ok(Res::sys(raw(
            libc::SYS_setpriority,
            [libc::PRIO_PROCESS as u64, int(a, 0)?, int(a, 1)?],
        )))
    }),
    ("sched-fifo", "", |_| {
        let param = [1_i32];
        Ok(Res::sys(raw(
            libc::SYS_sched_setscheduler,
            [0, libc::SCHED_FIFO as u64, param.as_ptr() as u64],
        )))
    }),
    ("setsid", "", |_| Ok(Res::sys(sys::fork_setsid()))),
    ("clone-flags", "FLAGS", |a| {
        Ok(Res::sys(sys::fork_with_flags(hex(a, 0)?)))
    }),
    ("clone3", "FLAGS", |a| {
        Ok(Res::sys(sys::clone3_with_flags(hex(a, 0)?)))
    }),
    ("memfd-exec", "SOURCE", memfd_exec),
    ("execveat", "DIR NAME", |a| {
        let (dir, name) = (cstr(a, 0)?, cstr(a, 1)?);
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let dirfd = match sys::open(&dir, flags) {
            Ok(fd) => fd as i32,
            Err(e) => return Ok(Res::err(e).detail("open")),
        };
        let r = sys::fork_attempt(|| sys::execveat(dirfd, &name, &name, 0));
        sys::close(dirfd);
        Ok(exec_result(r))
    }),
    ("exec-fd", "PATH", |a| {
        let path = cstr(a, 0)?;
        let fd = match sys::open(&path, libc::O_PATH | libc::O_CLOEXEC) {
            Ok(fd) => fd as i32,
            Err(e) => return Ok(Res::err(e).detail("open")),
        };
        let r = sys::fork_attempt(|| sys::execveat(fd, c"", &path, libc::AT_EMPTY_PATH));
        sys::close(fd);
        Ok(exec_result(r))
    }),
    ("cpu-burn", "SECONDS", cpu_burn),
    ("file-size-bomb-sigxfsz", "PATH BYTES", |a| {
        if let Err(e) = sys::default_sigxfsz() {
            return Ok(Res::err(e).detail("signal"));
        }
        file_size_bomb(a)
    }),
];

/// `fcntl` command choosing the signal SIGIO delivers (not in the `libc` crate).
const F_SETSIG: u64 = 10;

fn hex(a: &[String], i: usize) -> Result<u64, String> {
    let s = arg(a, i)?;
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("flags: {e}"))
}

fn exec_result(r: sys::Sys) -> Res {
    match r {
        Ok(status) => Res::ok().detail(format!("status={status}")),
        Err(e) => Res::err(e),
    }
}

/// PTRACE_ATTACH (then waits for the stop and detaches) or PTRACE_SEIZE (then
/// detaches when the probe exits): either way the victim runs on afterwards.
fn ptrace(a: &[String]) -> Result<Res, String> {
    let pid = int(a, 1)?;
    let request = match arg(a, 0)? {
        "attach" => libc::PTRACE_ATTACH,
        "seize" => libc::PTRACE_SEIZE,
        other => return Err(format!("request `{other}`")),
    };
    let r = raw(libc::SYS_ptrace, [u64::from(request), pid, 0, 0]);
    if r.is_ok() && request == libc::PTRACE_ATTACH {
        let _ = sys::wait_traced(pid as i32);
        let _ = raw(
            libc::SYS_ptrace,
            [u64::from(libc::PTRACE_DETACH), pid, 0, 0],
        );
    }
    Ok(Res::sys(r))
}

/// Asks the kernel to signal PID (SIGTERM) through SIGIO on a pipe this probe owns:
/// `F_SETOWN` names the victim, `F_SETSIG` the signal, a write triggers it. No call
/// fails when a layer refuses the delivery — only the victim's survival tells.
fn sigio(a: &[String]) -> Result<Res, String> {
    let pid = int(a, 0)?;
    let (r, w) = sys::pipe().map_err(|e| format!("pipe: errno {e}"))?;
    let rfd = r as u64;
    let steps = [
        raw(libc::SYS_fcntl, [rfd, libc::F_SETOWN as u64, pid]),
        raw(libc::SYS_fcntl, [rfd, F_SETSIG, libc::SIGTERM as u64]),
        raw(
            libc::SYS_fcntl,
            [
                rfd,
                libc::F_SETFL as u64,
                (libc::O_ASYNC | libc::O_NONBLOCK) as u64,
            ],
        ),
        sys::write_all(w, b"x"),
    ];
    sys::close(w);
    sys::close(r);
    Ok(match steps.into_iter().find_map(Result::err) {
        Some(e) => Res::err(e),
        None => Res::ok().detail("sigio armed and triggered"),
    })
}

/// Copies SOURCE into a `memfd` and executes it with `execveat(fd, "", AT_EMPTY_PATH)`.
fn memfd_exec(a: &[String]) -> Result<Res, String> {
    let bytes = std::fs::read(arg(a, 0)?).map_err(|e| format!("source: {e}"))?;
    let fd = match raw(
        libc::SYS_memfd_create,
        [ptr(c"knox"), libc::MFD_CLOEXEC as u64],
    ) {
        Ok(fd) => fd as i32,
        Err(e) => return Ok(Res::err(e).detail("memfd_create")),
    };
    if let Err(e) = sys::write_all(fd, &bytes) {
        sys::close(fd);
        return Ok(Res::err(e).detail("write"));
    }
    let r = sys::fork_attempt(|| sys::execveat(fd, c"", c"memfd", libc::AT_EMPTY_PATH));
    sys::close(fd);
    Ok(exec_result(r))
}

/// Burns CPU until this process has used SECONDS of it (or ten times that in wall time).
fn cpu_burn(a: &[String]) -> Result<Res, String> {
    let want = Duration::from_secs(int(a, 0)?);
    let give_up = Instant::now() + want * 10 + Duration::from_secs(5);
    let mut x = 0_u64;
    while sys::cpu_time() < want && Instant::now() < give_up {
        for _ in 0..100_000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
    }
    let used = sys::cpu_time();
    let _ = std::io::stderr().write_all(format!("{}", x % 2).as_bytes());
    let res = if used >= want { Res::ok() } else { Res::err(0) };
    Ok(res.detail(format!("cpu_ms={}", used.as_millis())))
}
