//! File-system attacks: reads of a secret, escapes that write, create, remove or change metadata.

use std::time::{Duration, Instant};

use super::{arg, cstr, int, raw};
use crate::sys::{self, ptr};
use crate::{Case, Res};

/// Rows; every path comes from the caller (the corpus fixture's own files).
pub const CASES: &[Case] = &[
    ("read-text", "PATH", read_text),
    ("openat2", "PATH", openat2),
    ("read-race", "LINK DECOY SECRET MILLIS", read_race),
    ("link-read", "FROM TO", link_read),
    ("truncate", "PATH", |a| {
        Ok(Res::sys(raw(libc::SYS_truncate, [ptr(&cstr(a, 0)?), 0])))
    }),
    ("chmod", "PATH MODE", |a| {
        let mode = octal(a, 1)?;
        Ok(Res::sys(raw(libc::SYS_chmod, [ptr(&cstr(a, 0)?), mode])))
    }),
    ("fchmod", "PATH MODE", |a| {
        let fd = match sys::open(&cstr(a, 0)?, libc::O_RDONLY | libc::O_CLOEXEC) {
            Ok(fd) => fd,
            Err(e) => return Ok(Res::err(e).detail("open")),
        };
        let r = raw(libc::SYS_fchmod, [fd as u64, octal(a, 1)?]);
        sys::close(fd as i32);
        Ok(Res::sys(r))
    }),
    ("chown", "PATH UID GID", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_chown,
            [ptr(&path), int(a, 1)?, int(a, 2)?],
        )))
    }),
    ("utimes", "PATH", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_utimensat,
            [libc::AT_FDCWD as u64, ptr(&path), 0, 0],
        )))
    }),
    ("setxattr", "PATH", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_setxattr,
            [ptr(&path), ptr(c"user.knox"), ptr(c"1"), 1, 0],
        )))
    }),
    ("rename-exchange", "A B", |a| {
        let (from, to) = (cstr(a, 0)?, cstr(a, 1)?);
        let at = libc::AT_FDCWD as u64;
        let exchange = libc::RENAME_EXCHANGE as u64;
        Ok(Res::sys(raw(
            libc::SYS_renameat2,
            [at, ptr(&from), at, ptr(&to), exchange],
        )))
    }),
    ("mknod-char", "PATH", |a| {
        // The character device 1:3 (/dev/null's numbers): creating any device node
        // is the attack, whatever it names.
        mknod(&cstr(a, 0)?, libc::S_IFCHR | 0o600, libc::makedev(1, 3))
    }),
    ("mkfifo", "PATH", |a| {
        mknod(&cstr(a, 0)?, libc::S_IFIFO | 0o600, 0)
    }),
    ("by-handle", "PATH", by_handle),
    ("write-at", "PATH OFFSET TEXT", write_at),
    ("self-mem-write", "", |_| {
        // Writes into the probe's own heap through /proc/self/mem, the path that
        // ignores page protections (FOLL_FORCE).
        // A heap buffer: writing the probe's read-only data would be undefined behaviour.
        let target = Box::new([0_u8; 16]);
        let offset = (target.as_ptr() as u64).to_string();
        write_at(&["/proc/self/mem".to_owned(), offset, "knox".to_owned()])
    }),
];

fn octal(a: &[String], i: usize) -> Result<u64, String> {
    u64::from_str_radix(arg(a, i)?, 8).map_err(|e| format!("mode: {e}"))
}

fn mknod(path: &std::ffi::CStr, mode: u32, dev: u64) -> Result<Res, String> {
    let at = libc::AT_FDCWD as u64;
    Ok(Res::sys(raw(
        libc::SYS_mknodat,
        [at, ptr(path), u64::from(mode), dev],
    )))
}

/// Reads PATH; the detail is its text (the corpus compares it with the secret).
fn read_text(a: &[String]) -> Result<Res, String> {
    Ok(match std::fs::read(arg(a, 0)?) {
        Ok(bytes) => Res::ok().detail(String::from_utf8_lossy(&bytes).into_owned()),
        Err(e) => Res::io::<()>(Err(e)),
    })
}

/// `openat2(AT_FDCWD, PATH, {O_RDONLY})`, then reads.
fn openat2(a: &[String]) -> Result<Res, String> {
    let path = cstr(a, 0)?;
    // struct open_how { u64 flags; u64 mode; u64 resolve; }
    let how = [(libc::O_RDONLY | libc::O_CLOEXEC) as u64, 0, 0];
    let at = libc::AT_FDCWD as u64;
    let fd = match raw(libc::SYS_openat2, [at, ptr(&path), how.as_ptr() as u64, 24]) {
        Ok(fd) => fd as i32,
        Err(e) => return Ok(Res::err(e)),
    };
    let text = sys::read_all(fd);
    sys::close(fd);
    Ok(match text {
        Ok(t) => Res::ok().detail(String::from_utf8_lossy(&t).into_owned()),
        Err(e) => Res::err(e),
    })
}

/// A time-of-check/time-of-use race: one thread keeps swapping LINK between
/// DECOY and SECRET (atomic renames of fresh symlinks) while this one opens and
/// reads LINK for MILLIS milliseconds. `ok` if any read returned something other
/// than the decoy.
fn read_race(a: &[String]) -> Result<Res, String> {
    let (link, decoy, secret) = (arg(a, 0)?, arg(a, 1)?, arg(a, 2)?);
    let until = Instant::now() + Duration::from_millis(int(a, 3)?);
    let decoy_text = std::fs::read(decoy).map_err(|e| format!("decoy: {e}"))?;
    let (link_s, decoy_s, secret_s) = (link.to_owned(), decoy.to_owned(), secret.to_owned());
    let swapper = std::thread::spawn(move || {
        let tmp = format!("{link_s}.tmp");
        let mut flips = 0_u64;
        while Instant::now() < until {
            let target = if flips.is_multiple_of(2) {
                &secret_s
            } else {
                &decoy_s
            };
            let _ = std::fs::remove_file(&tmp);
            if std::os::unix::fs::symlink(target, &tmp).is_ok()
                && std::fs::rename(&tmp, &link_s).is_ok()
            {
                flips += 1;
            }
        }
        flips
    });
    let (mut decoys, mut denied, mut leaked, mut last_errno) = (0_u64, 0_u64, 0_u64, None);
    while Instant::now() < until {
        match std::fs::read(link) {
            Ok(t) if t == decoy_text => decoys += 1,
            Ok(_) => leaked += 1,
            Err(e) => {
                denied += 1;
                last_errno = e.raw_os_error().or(last_errno);
            }
        }
    }
    let flips = swapper.join().unwrap_or(0);
    let detail = format!("flips={flips} decoys={decoys} denied={denied} leaked={leaked}");
    let res = match (leaked, last_errno) {
        (0, Some(e)) => Res::err(e),
        (0, None) => Res::err(0),
        _ => Res::ok(),
    };
    Ok(res.detail(detail))
}

/// Hard-links FROM to TO, then reads TO.
fn link_read(a: &[String]) -> Result<Res, String> {
    let (from, to) = (arg(a, 0)?, arg(a, 1)?);
    if let Err(e) = std::fs::hard_link(from, to) {
        return Ok(Res::io::<()>(Err(e)).detail("link"));
    }
    read_text(&[to.to_owned()])
}

/// `name_to_handle_at` then `open_by_handle_at` (the "shocker" escape: a handle
/// opens a file without any path check), then reads.
fn by_handle(a: &[String]) -> Result<Res, String> {
    let path = cstr(a, 0)?;
    // struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[128]; }
    let mut handle = [0_u32; 2 + 32];
    if let Some(bytes) = handle.first_mut() {
        *bytes = 128;
    }
    let mut mount_id = 0_i32;
    let at = libc::AT_FDCWD as u64;
    let named = raw(
        libc::SYS_name_to_handle_at,
        [
            at,
            ptr(&path),
            handle.as_mut_ptr() as u64,
            &mut mount_id as *mut i32 as u64,
            0,
        ],
    );
    if let Err(e) = named {
        return Ok(Res::err(e).detail("name_to_handle_at"));
    }
    // Any directory on the same file system serves as the mount descriptor.
    let parent = std::path::Path::new(arg(a, 0)?)
        .parent()
        .and_then(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok())
        .ok_or("no parent directory")?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let mount_fd = match sys::open(&parent, flags) {
        Ok(fd) => fd,
        Err(e) => return Ok(Res::err(e).detail("open parent")),
    };
    let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    let opened = raw(
        libc::SYS_open_by_handle_at,
        [mount_fd as u64, handle.as_ptr() as u64, flags],
    );
    sys::close(mount_fd as i32);
    let fd = match opened {
        Ok(fd) => fd as i32,
        Err(e) => return Ok(Res::err(e).detail("open_by_handle_at")),
    };
    let text = sys::read_all(fd);
    sys::close(fd);
    Ok(match text {
        Ok(t) => Res::ok().detail(String::from_utf8_lossy(&t).into_owned()),
        Err(e) => Res::err(e),
    })
}

/// Opens PATH for writing (no create, no truncate) and writes TEXT at OFFSET —
/// `/proc/<pid>/mem` at an address, or a `/proc/self` attribute at 0.
fn write_at(a: &[String]) -> Result<Res, String> {
    let path = cstr(a, 0)?;
    let offset = int(a, 1)?;
    let text = arg(a, 2)?;
    let fd = match sys::open(&path, libc::O_WRONLY | libc::O_CLOEXEC) {
        Ok(fd) => fd as i32,
        Err(e) => return Ok(Res::err(e).detail("open")),
    };
    // Offset 0 is a plain write: some /proc files refuse positioned writes.
    let r = if offset == 0 {
        raw(
            libc::SYS_write,
            [fd as u64, text.as_ptr() as u64, text.len() as u64],
        )
    } else {
        raw(
            libc::SYS_pwrite64,
            [fd as u64, text.as_ptr() as u64, text.len() as u64, offset],
        )
    };
    sys::close(fd);
    Ok(Res::sys(r))
}
