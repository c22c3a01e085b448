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

/// The address of a C string, as a system call argument.
pub fn ptr(s: &CStr) -> u64 {
    s.as_ptr() as u64
}

/// `openat(AT_FDCWD, path, flags, 0o600)`.
pub fn open(path: &CStr, flags: i32) -> Sys {
    syscall6(
        libc::SYS_openat,
        [libc::AT_FDCWD as u64, ptr(path), flags as u64, 0o600, 0, 0],
    )
}

/// Reads `fd` to its end (at most 1 MiB); the descriptor stays open.
pub fn read_all(fd: i32) -> Result<Vec<u8>, i32> {
    let mut out = Vec::new();
    let mut buf = [0_u8; 4096];
    while out.len() < 1 << 20 {
        // SAFETY: `buf` is writable for its length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            0 => break,
            n if n < 0 => return Err(errno()),
            n => out.extend_from_slice(buf.get(..n as usize).unwrap_or_default()),
        }
    }
    Ok(out)
}

/// Writes all of `bytes` to `fd`.
pub fn write_all(fd: i32, bytes: &[u8]) -> Sys {
    let mut at = 0;
    while let Some(rest) = bytes.get(at..).filter(|r| !r.is_empty()) {
        // SAFETY: `rest` is readable for its length.
        let n = check(unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) } as c_long)?;
        at += n as usize;
    }
    Ok(at as i64)
}

/// Forks; the child runs `attempt` (which should `execve` or fail) and, if it
/// returns, reports its errno on a close-on-exec pipe and exits 127. Returns the
/// child's exit status if it executed, or the errno the attempt failed with.
pub fn fork_attempt(attempt: impl FnOnce() -> Sys) -> Sys {
    let (r, w) = pipe()?;
    // SAFETY: the probe forks while single-threaded (cases that start threads join
    // them first); the child only makes raw system calls before `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        close(r);
        let err = attempt().err().unwrap_or(0);
        let bytes = err.to_ne_bytes();
        // SAFETY: 4 readable bytes; `_exit` never returns.
        unsafe {
            libc::write(w, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    }
    close(w);
    if pid < 0 {
        close(r);
        return Err(errno());
    }
    let report = read_all(r);
    close(r);
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    match report
        .ok()
        .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
    {
        Some(e) => Err(i32::from_ne_bytes(e)),
        None => Ok(i64::from(libc::WEXITSTATUS(status))),
    }
}

/// `execveat(dirfd, path, [argv0], [], flags)`.
pub fn execveat(dirfd: i32, path: &CStr, argv0: &CStr, flags: i32) -> Sys {
    let argv = [argv0.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    syscall6(
        libc::SYS_execveat,
        [
            dirfd as u64,
            ptr(path),
            argv.as_ptr() as u64,
            envp.as_ptr() as u64,
            flags as u64,
            0,
        ],
    )
}

/// An i386 system call through `int 0x80` (IA-32 emulation), integer arguments only.
pub fn int80(nr: u32, a: u32, b: u32, c: u32) -> Sys {
    let ret: i32;
    // SAFETY: `int 0x80` takes the call number in eax and arguments in ebx, ecx,
    // edx, returns in eax, and preserves every other register except r8–r11,
    // which are declared clobbered; rbx (reserved by LLVM) is swapped in and out
    // around the call. Only integer arguments are passed, so no memory is touched.
    unsafe {
        std::arch::asm!(
            "xchg {b}, rbx",
            "int 0x80",
            "xchg {b}, rbx",
            b = inout(reg) u64::from(a) => _,
            inlateout("eax") nr as i32 => ret,
            in("ecx") b,
            in("edx") c,
            out("r8") _,
            out("r9") _,
            out("r10") _,
            out("r11") _,
        );
    }
    if ret < 0 {
        Err(-ret)
    } else {
        Ok(i64::from(ret))
    }
}

/// Restores the default disposition of `SIGXFSZ` (the sandbox ignores it).
pub fn default_sigxfsz() -> Sys {
    // SAFETY: setting a default disposition has no memory effects.
    let old = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_DFL) };
    if old == libc::SIG_ERR {
        Err(errno())
    } else {
        Ok(0)
    }
}

/// CPU time this process has used.
pub fn cpu_time() -> std::time::Duration {
    // SAFETY: all-zero is a valid timespec; it lives across the call.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `process_vm_readv` of `len` bytes at `addr` in `pid`.
pub fn vm_read(pid: i32, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0_u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `buf`, writable for `len` bytes; the remote
    // address is only read by the kernel in the other process.
    let n = check(unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) } as c_long)?;
    buf.truncate(n as usize);
    Ok(buf)
}

/// `process_vm_writev` of `bytes` at `addr` in `pid`.
pub fn vm_write(pid: i32, addr: u64, bytes: &[u8]) -> Sys {
    let local = libc::iovec {
        iov_base: bytes.as_ptr().cast_mut().cast(),
        iov_len: bytes.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: `local` describes `bytes`, which the kernel only reads.
    check(unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) } as c_long)
}

/// `waitpid(pid, __WALL)`: for a tracee that is not a child.
pub fn wait_traced(pid: i32) -> Sys {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    check(unsafe { libc::waitpid(pid, &mut status, libc::__WALL) }.into())
}

/// Raw `clone3` with `flags` (a fork: no shared memory); the child exits at once,
/// the parent reaps it.
pub fn clone3_with_flags(flags: u64) -> Sys {
    // struct clone_args, version 0: flags, pidfd, child_tid, parent_tid,
    // exit_signal, stack, stack_size, tls.
    let args = [flags, 0, 0, 0, libc::SIGCHLD as u64, 0, 0, 0];
    let r = syscall6(libc::SYS_clone3, [args.as_ptr() as u64, 64, 0, 0, 0, 0]);
    if r == Ok(0) {
        // SAFETY: in the child: leave without running any of the parent's code.
        unsafe { libc::_exit(0) }
    }
    if r.is_ok() {
        let _ = wait_any();
    }
    r
}

/// Forks a child that calls `setsid` and exits 0 if it succeeded, 100 + errno otherwise.
pub fn fork_setsid() -> Sys {
    // SAFETY: the probe forks while single-threaded; the child makes raw calls only.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let r = syscall6(libc::SYS_setsid, [0; 6]);
        let code = r.map_or_else(|e| 100 + e.min(100), |_| 0);
        // SAFETY: `_exit` never returns.
        unsafe { libc::_exit(code) }
    }
    if pid < 0 {
        return Err(errno());
    }
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    match libc::WEXITSTATUS(status) {
        0 => Ok(0),
        code => Err(code - 100),
    }
}
