//! The probe's case table: one row per attack, grouped by what the attack targets.
//!
//! The first table holds the original cases; the corpus added one table per
//! target (`files`, `net`, `procs`, `kernel`), all searched by [`find`].

mod files;
mod kernel;
mod net;
mod procs;

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::{Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use crate::sys;
use crate::{Case, Res};

/// Every table, in order.
pub fn tables() -> [&'static [Case]; 5] {
    [CASES, files::CASES, net::CASES, procs::CASES, kernel::CASES]
}

/// The row named `name`.
pub fn find(name: &str) -> Option<&'static Case> {
    tables()
        .into_iter()
        .flat_map(|t| t.iter())
        .find(|(n, _, _)| *n == name)
}

/// Every case, by name. Keep rows sorted by group; names are the tests' vocabulary.
pub const CASES: &[Case] = &[
    // — baseline —
    ("true", "", |_| Ok(Res::ok())),
    ("echo", "WORDS...", echo),
    ("stdout-raw", "HEX", |a| {
        // Bytes straight to fd 1, around any framing: a worker breaking its protocol.
        let hex = arg(a, 0)?;
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
                    .ok_or_else(|| format!("bad hex at {i}"))
            })
            .collect::<Result<Vec<u8>, String>>()?;
        Ok(Res::sys(sys::write_all(1, &bytes)))
    }),
    // — file system —
    ("read", "PATH", |a| Ok(Res::io(fs::read(arg(a, 0)?)))),
    ("write", "PATH", |a| {
        Ok(Res::io(fs::write(arg(a, 0)?, b"knox")))
    }),
    ("append", "PATH", |a| {
        Ok(Res::io(OpenOptions::new().append(true).open(arg(a, 0)?)))
    }),
    ("create", "PATH", |a| {
        Ok(Res::io(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(arg(a, 0)?),
        ))
    }),
    ("unlink", "PATH", |a| {
        Ok(Res::io(fs::remove_file(arg(a, 0)?)))
    }),
    ("mkdir", "PATH", |a| Ok(Res::io(fs::create_dir(arg(a, 0)?)))),
    ("rmdir", "PATH", |a| Ok(Res::io(fs::remove_dir(arg(a, 0)?)))),
    ("rename", "FROM TO", |a| {
        Ok(Res::io(fs::rename(arg(a, 0)?, arg(a, 1)?)))
    }),
    ("link", "FROM TO", |a| {
        Ok(Res::io(fs::hard_link(arg(a, 0)?, arg(a, 1)?)))
    }),
    ("symlink", "TARGET LINK", |a| {
        Ok(Res::io(std::os::unix::fs::symlink(arg(a, 0)?, arg(a, 1)?)))
    }),
    ("list", "DIR", |a| Ok(Res::io(fs::read_dir(arg(a, 0)?)))),
    ("proc-self-write", "", |_| {
        Ok(Res::io(fs::write("/proc/self/comm", b"knox-probe")))
    }),
    // — network —
    ("connect", "PORT", |a| {
        Ok(Res::io(TcpStream::connect(("127.0.0.1", port(a)?))))
    }),
    ("connect6", "PORT", |a| {
        Ok(Res::io(TcpStream::connect((Ipv6Addr::LOCALHOST, port(a)?))))
    }),
    ("bind", "PORT", |a| {
        Ok(Res::io(TcpListener::bind(("127.0.0.1", port(a)?))))
    }),
    ("udp-send", "PORT", udp_send),
    ("unix-connect", "PATH", |a| {
        Ok(Res::io(std::os::unix::net::UnixStream::connect(arg(a, 0)?)))
    }),
    ("socket-udp", "", |_| {
        Ok(Res::sys(sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)))
    }),
    ("socket-raw", "", |_| {
        Ok(Res::sys(sys::socket(
            libc::AF_INET,
            libc::SOCK_RAW,
            libc::IPPROTO_ICMP,
        )))
    }),
    ("socket-inet6", "", |_| {
        Ok(Res::sys(sys::socket(libc::AF_INET6, libc::SOCK_STREAM, 0)))
    }),
    ("socket-netlink", "", |_| {
        Ok(Res::sys(sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, 0)))
    }),
    ("socket-packet", "", |_| {
        Ok(Res::sys(sys::socket(libc::AF_PACKET, libc::SOCK_RAW, 0)))
    }),
    // — processes —
    ("exec", "PATH [ARGS...]", exec),
    ("fork-bomb", "COUNT", fork_bomb),
    ("fork-then-spin", "COUNT SECONDS [TOKEN]", fork_then_spin),
    ("thread-bomb", "COUNT", thread_bomb),
    ("kill", "PID SIGNAL", |a| {
        Ok(Res::sys(raw(libc::SYS_kill, [int(a, 0)?, int(a, 1)?])))
    }),
    ("prlimit-other", "PID", |a| {
        Ok(Res::sys(raw(
            libc::SYS_prlimit64,
            [int(a, 0)?, libc::RLIMIT_NOFILE as u64, 0, 0],
        )))
    }),
    ("prlimit-self", "", |_| {
        Ok(Res::sys(raw(
            libc::SYS_prlimit64,
            [0, libc::RLIMIT_NOFILE as u64, 0, 0],
        )))
    }),
    ("ptrace-attach", "PID", |a| {
        Ok(Res::sys(raw(
            libc::SYS_ptrace,
            [libc::PTRACE_ATTACH.into(), int(a, 0)?],
        )))
    }),
    // — resources —
    ("file-size-bomb", "PATH BYTES", file_size_bomb),
    ("memory-bomb", "MIB", memory_bomb),
    ("cpu-spin", "SECONDS", cpu_spin),
    ("fd-exhaust", "COUNT", fd_exhaust),
    // — privileged operations, in forms that cannot take effect —
    ("mount", "DIR", |a| {
        Ok(Res::sys(sys::mount(
            c"none",
            &cstr(a, 0)?,
            c"knox-no-such-fs",
        )))
    }),
    ("umount", "DIR", |a| Ok(Res::sys(sys::umount(&cstr(a, 0)?)))),
    ("unshare", "", |_| {
        Ok(Res::sys(raw(
            libc::SYS_unshare,
            [libc::CLONE_NEWUSER as u64],
        )))
    }),
    ("clone-newns", "", |_| {
        Ok(Res::sys(sys::fork_with_flags(libc::CLONE_NEWNS as u64)))
    }),
    ("setns", "", |_| {
        Ok(Res::sys(raw(libc::SYS_setns, [u64::MAX, 0])))
    }),
    ("chroot", "DIR", |a| {
        Ok(Res::io(std::os::unix::fs::chroot(arg(a, 0)?)))
    }),
    ("setuid", "UID", |a| {
        Ok(Res::sys(raw(libc::SYS_setuid, [int(a, 0)?])))
    }),
    ("capset", "", |_| Ok(Res::sys(sys::capset_empty()))),
    ("capget", "", |_| {
        Ok(sys::capget().map_or_else(Res::err, |c| Res::ok().detail(c)))
    }),
    ("keyctl", "", |_| {
        Ok(Res::sys(raw(libc::SYS_keyctl, [0, (-3_i64) as u64, 0])))
    }),
    ("bpf", "", |_| {
        Ok(Res::sys(raw(libc::SYS_bpf, [9999, 0, 0])))
    }),
    ("perf-event-open", "", |_| {
        Ok(Res::sys(raw(
            libc::SYS_perf_event_open,
            [0, 0, u64::MAX, u64::MAX, 0],
        )))
    }),
    ("io-uring-setup", "", |_| {
        Ok(Res::sys(raw(libc::SYS_io_uring_setup, [0, 0])))
    }),
    ("userfaultfd", "", |_| {
        Ok(Res::sys(raw(
            libc::SYS_userfaultfd,
            [libc::O_CLOEXEC as u64],
        )))
    }),
    ("personality", "", |_| {
        Ok(Res::sys(raw(libc::SYS_personality, [0xffff_ffff])))
    }),
    ("init-module", "", |_| {
        Ok(Res::sys(sys::init_module(b"\x7fNOT-AN-ELF-MODULE", c"")))
    }),
    ("x32-getpid", "", |_| {
        Ok(Res::sys(raw(0x4000_0000 | libc::SYS_getpid, [])))
    }),
];

pub(crate) fn arg(a: &[String], i: usize) -> Result<&str, String> {
    a.get(i)
        .map(String::as_str)
        .ok_or_else(|| format!("missing argument {}", i + 1))
}

pub(crate) fn int(a: &[String], i: usize) -> Result<u64, String> {
    let v: i64 = arg(a, i)?
        .parse()
        .map_err(|e| format!("argument {}: {e}", i + 1))?;
    Ok(v as u64)
}

pub(crate) fn port(a: &[String]) -> Result<u16, String> {
    arg(a, 0)?.parse().map_err(|e| format!("port: {e}"))
}

pub(crate) fn cstr(a: &[String], i: usize) -> Result<CString, String> {
    CString::new(arg(a, i)?).map_err(|e| e.to_string())
}

pub(crate) fn raw<const N: usize>(nr: i64, args: [u64; N]) -> sys::Sys {
    let mut all = [0_u64; 6];
    for (slot, v) in all.iter_mut().zip(args) {
        *slot = v;
    }
    sys::syscall6(nr, all)
}

fn echo(a: &[String]) -> Result<Res, String> {
    Ok(Res::ok().detail(a.join(" ")))
}

fn udp_send(a: &[String]) -> Result<Res, String> {
    let target = SocketAddr::from(([127, 0, 0, 1], port(a)?));
    Ok(Res::io(
        UdpSocket::bind("127.0.0.1:0").and_then(|s| s.send_to(b"knox", target)),
    ))
}

fn exec(a: &[String]) -> Result<Res, String> {
    let program = arg(a, 0)?;
    let out = std::process::Command::new(program)
        .args(a.get(1..).unwrap_or_default())
        .output();
    Ok(match out {
        Ok(o) => Res::ok().detail(format!(
            "status={:?} stdout={}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).trim()
        )),
        Err(e) => Res::io::<()>(Err(e)),
    })
}

/// Forks up to COUNT children that wait on a pipe; reports how many forks succeeded.
fn fork_bomb(a: &[String]) -> Result<Res, String> {
    let count = int(a, 0)?.min(2000);
    let (hold_r, hold_w) = sys::pipe().map_err(|e| format!("pipe: errno {e}"))?;
    let mut made = 0_u64;
    let mut failure = None;
    while made < count {
        match sys::fork_holding(hold_r, hold_w) {
            Ok(_) => made += 1,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    sys::close(hold_w);
    sys::close(hold_r);
    for _ in 0..made {
        let _ = sys::wait_any();
    }
    let res = failure.map_or_else(Res::ok, Res::err);
    Ok(res.detail(format!("forked={made}")))
}

/// Forks COUNT children that pause forever, then spins for SECONDS: only killing
/// the whole tree (the cgroup) removes the children. TOKEN only marks the command line.
fn fork_then_spin(a: &[String]) -> Result<Res, String> {
    let count = int(a, 0)?.min(64);
    for _ in 0..count {
        if let Err(e) = sys::fork_pausing() {
            return Ok(Res::err(e));
        }
    }
    cpu_spin(a.get(1..).unwrap_or_default())
}

/// Starts up to COUNT parked threads; reports how many started.
fn thread_bomb(a: &[String]) -> Result<Res, String> {
    let count = int(a, 0)?.min(5000);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let mut handles = Vec::new();
    let mut failure = None;
    for _ in 0..count {
        let rx = std::sync::Arc::clone(&rx);
        let spawned = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let _ = rx.lock().map(|r| r.recv());
            });
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => {
                failure = Some(e.raw_os_error().unwrap_or(-1));
                break;
            }
        }
    }
    let started = handles.len();
    drop(tx);
    for h in handles {
        let _ = h.join();
    }
    let res = failure.map_or_else(Res::ok, Res::err);
    Ok(res.detail(format!("threads={started}")))
}

/// Writes BYTES to PATH in 64 KiB chunks; stops at the first error.
pub(crate) fn file_size_bomb(a: &[String]) -> Result<Res, String> {
    let bytes = int(a, 1)?;
    let mut file = match fs::File::create(arg(a, 0)?) {
        Ok(f) => f,
        Err(e) => return Ok(Res::io::<()>(Err(e))),
    };
    let chunk = vec![0x6b_u8; 64 * 1024];
    let mut written = 0_u64;
    while written < bytes {
        match file.write(&chunk) {
            Ok(n) => written += n as u64,
            Err(e) => return Ok(Res::io::<()>(Err(e)).detail(format!("written={written}"))),
        }
    }
    Ok(Res::ok().detail(format!("written={written}")))
}

/// Allocates and touches MIB mebibytes, one at a time.
fn memory_bomb(a: &[String]) -> Result<Res, String> {
    let mib = int(a, 0)?;
    let mut held: Vec<Vec<u8>> = Vec::new();
    for _ in 0..mib {
        let mut block = Vec::new();
        if block.try_reserve_exact(1 << 20).is_err() {
            return Ok(Res::err(libc::ENOMEM).detail(format!("mib={}", held.len())));
        }
        block.resize(1 << 20, 1_u8);
        held.push(block);
    }
    let sum: u64 = held
        .iter()
        .map(|b| u64::from(b.last().copied().unwrap_or(0)))
        .sum();
    Ok(Res::ok().detail(format!("mib={sum}")))
}

/// Spins on the CPU for up to SECONDS of wall-clock time.
pub(crate) fn cpu_spin(a: &[String]) -> Result<Res, String> {
    let until = Instant::now() + Duration::from_secs(int(a, 0)?);
    let mut x = 0_u64;
    while Instant::now() < until {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    Ok(Res::ok().detail(format!("x={}", x % 10)))
}

/// Duplicates stdout until COUNT descriptors or an error.
fn fd_exhaust(a: &[String]) -> Result<Res, String> {
    let count = int(a, 0)?.min(1 << 20);
    let mut fds = Vec::new();
    let mut failure = None;
    while (fds.len() as u64) < count {
        match sys::dup(1) {
            Ok(fd) => fds.push(fd),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let opened = fds.len();
    for fd in fds {
        sys::close(fd as i32);
    }
    let res = failure.map_or_else(Res::ok, Res::err);
    Ok(res.detail(format!("opened={opened}")))
}
