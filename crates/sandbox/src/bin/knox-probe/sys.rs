//! The probe's only libc module: raw system calls the attack cases make, each returning `errno` on failure.
//!
//! Every call here is made in a form that cannot take effect outside the probe
//! even when the kernel lets it through: invalid images, nonexistent file systems,
//! bad descriptors, or changes that only affect the probe process itself.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_long};

/// `Ok(return value)` or `Err(errno)`.
pub type Sys = Result<i64, i32>;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(ret: c_long) -> Sys {
    if ret < 0 { Err(errno()) } else { Ok(ret) }
}

/// A raw system call with up to six integer arguments.
pub fn syscall6(nr: c_long, a: [u64; 6]) -> Sys {
    // SAFETY: callers pass only integers or pointers to memory they own that
    // outlives the call; no call made through here writes to caller memory
    // except through such pointers.
    check(unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) })
}

/// `socket(domain, type, protocol)`; the descriptor is closed at once.
pub fn socket(domain: i32, ty: i32, protocol: i32) -> Sys {
    // SAFETY: integer arguments.
    let fd = check(unsafe { libc::socket(domain, ty, protocol) }.into())?;
    // SAFETY: closing the descriptor just created.
    unsafe { libc::close(fd as i32) };
    Ok(fd)
}

/// `mount(source, target, fstype, 0, NULL)`.
pub fn mount(source: &CStr, target: &CStr, fstype: &CStr) -> Sys {
    // SAFETY: NUL-terminated strings that outlive the call; NULL data.
    check(
        unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            )
        }
        .into(),
    )
}

/// `umount2(target, 0)`.
pub fn umount(target: &CStr) -> Sys {
    // SAFETY: NUL-terminated string that outlives the call.
    check(unsafe { libc::umount2(target.as_ptr(), 0) }.into())
}

/// `init_module(image, len, params)`.
pub fn init_module(image: &[u8], params: &CStr) -> Sys {
    let a = [
        image.as_ptr() as u64,
        image.len() as u64,
        params.as_ptr() as u64,
        0,
        0,
        0,
    ];
    syscall6(libc::SYS_init_module, a)
}

/// `capset` with version 3 and all sets empty (affects only the probe).
pub fn capset_empty() -> Sys {
    let header: [u32; 2] = [0x2008_0522, 0];
    let data = [0_u32; 6];
    syscall6(
        libc::SYS_capset,
        [header.as_ptr() as u64, data.as_ptr() as u64, 0, 0, 0, 0],
    )
}

/// `capget` of the probe itself: `"effective=.. permitted=.. inheritable=.."` in hex.
pub fn capget() -> Result<String, i32> {
    let header: [u32; 2] = [0x2008_0522, 0];
    let mut data = [0_u32; 6];
    let a = [header.as_ptr() as u64, data.as_mut_ptr() as u64, 0, 0, 0, 0];
    syscall6(libc::SYS_capget, a)?;
    let [e0, p0, i0, e1, p1, i1] = data;
    let wide = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(format!(
        "effective={:#x} permitted={:#x} inheritable={:#x}",
        wide(e0, e1),
        wide(p0, p1),
        wide(i0, i1)
    ))
}

/// `fork`; in the child, closes `writer` and blocks reading `hold` until end of
/// file (when the parent closes its `writer`), then exits.
pub fn fork_holding(hold: i32, writer: i32) -> Sys {
    // SAFETY: the probe is single-threaded when it forks; the child only calls
    // `read` and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut b = [0_u8; 1];
        // SAFETY: one writable byte; `_exit` never returns.
        unsafe {
            libc::close(writer);
            while libc::read(hold, b.as_mut_ptr().cast(), 1) > 0 {}
            libc::_exit(0)
        }
    }
    check(pid.into())
}

/// Raw `clone(flags | SIGCHLD)` like `fork`; the child exits at once, the parent reaps it.
pub fn fork_with_flags(flags: u64) -> Sys {
    let r = syscall6(
        libc::SYS_clone,
        [flags | libc::SIGCHLD as u64, 0, 0, 0, 0, 0],
    );
    if r == Ok(0) {
        // SAFETY: in the child: leave without running any of the parent's code.
        unsafe { libc::_exit(0) }
    }
    if r.is_ok() {
        let _ = wait_any();
    }
    r
}

/// `fork`; the child pauses until a signal kills it.
pub fn fork_pausing() -> Sys {
    // SAFETY: the probe is single-threaded when it forks; the child only calls `pause`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        loop {
            // SAFETY: `pause` has no arguments.
            unsafe { libc::pause() };
        }
    }
    check(pid.into())
}

/// Reaps any child.
pub fn wait_any() -> Sys {
    // SAFETY: NULL status pointer is allowed.
    check(unsafe { libc::wait(std::ptr::null_mut()) }.into())
}

/// `pipe2(O_CLOEXEC)`.
pub fn pipe() -> Result<(i32, i32), i32> {
    let mut fds = [0_i32; 2];
    // SAFETY: `fds` has room for two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }.into())?;
    Ok((fds[0], fds[1]))
}

/// `close(fd)`.
pub fn close(fd: i32) {
    // SAFETY: closing a descriptor the probe owns.
    unsafe { libc::close(fd) };
}

/// `dup(fd)`.
pub fn dup(fd: i32) -> Sys {
    // SAFETY: integer argument.
    check(unsafe { libc::dup(fd) }.into())
}
