//! Privileged and kernel-facing attacks: namespaces, mounts, identity, modules, time, keys, foreign ABIs.
//!
//! Each is made in a form that cannot take effect outside the probe even when
//! nothing stops it: an invalid image, magic number or time value, a name that
//! does not exist, or a change to the probe's own process (its identity, its
//! namespaces — the corpus runs the unconfined baseline in private mount, UTS and
//! IPC namespaces, so `mount` and `sethostname` succeed only there).

use super::{arg, cstr, int, raw};
use crate::sys::{self, ptr};
use crate::{Case, Res};

/// Rows.
pub const CASES: &[Case] = &[
    // — namespaces and mounts —
    ("unshare-flags", "FLAGS", |a| {
        Ok(Res::sys(raw(libc::SYS_unshare, [hex(a, 0)?])))
    }),
    ("setns-path", "PATH NSTYPE", |a| {
        // The descriptor is opened first; if that is refused, setns is still tried
        // (with -1) so that every layer meets the attempt.
        let fd = sys::open(&cstr(a, 0)?, libc::O_RDONLY | libc::O_CLOEXEC).unwrap_or(-1);
        let r = raw(libc::SYS_setns, [fd as u64, hex(a, 1)?]);
        if fd >= 0 {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    ("setns-pid", "PID NSTYPE", |a| {
        let fd = match raw(libc::SYS_pidfd_open, [int(a, 0)?, 0]) {
            Ok(fd) => fd,
            Err(e) => return Ok(Res::err(e).detail("pidfd_open")),
        };
        let r = raw(libc::SYS_setns, [fd as u64, hex(a, 1)?]);
        sys::close(fd as i32);
        Ok(Res::sys(r))
    }),
    ("pivot-root", "NEW OLD", |a| {
        let (new, old) = (cstr(a, 0)?, cstr(a, 1)?);
        Ok(Res::sys(raw(libc::SYS_pivot_root, [ptr(&new), ptr(&old)])))
    }),
    ("mount-tmpfs", "TARGET", |a| {
        let target = cstr(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_mount,
            [
                ptr(c"knox"),
                ptr(&target),
                ptr(c"tmpfs"),
                0,
                ptr(c"size=1m"),
            ],
        )))
    }),
    ("mount-bind", "SOURCE TARGET", |a| {
        let (source, target) = (cstr(a, 0)?, cstr(a, 1)?);
        Ok(Res::sys(raw(
            libc::SYS_mount,
            [ptr(&source), ptr(&target), 0, libc::MS_BIND, 0],
        )))
    }),
    ("fsopen", "FSTYPE", |a| {
        let fstype = cstr(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_fsopen, [ptr(&fstype), 1])))
    }),
    ("open-tree", "PATH", |a| {
        let path = cstr(a, 0)?;
        // OPEN_TREE_CLONE (1) | OPEN_TREE_CLOEXEC: a detached copy, freed on close.
        let flags = 1 | libc::O_CLOEXEC as u64;
        Ok(Res::sys(raw(
            libc::SYS_open_tree,
            [libc::AT_FDCWD as u64, ptr(&path), flags],
        )))
    }),
    // — identity and process attributes —
    ("setgid", "GID", |a| {
        Ok(Res::sys(raw(libc::SYS_setgid, [int(a, 0)?])))
    }),
    ("setgroups", "GID", |a| {
        let groups = [int(a, 0)? as u32];
        Ok(Res::sys(raw(
            libc::SYS_setgroups,
            [1, groups.as_ptr() as u64],
        )))
    }),
    ("setresuid", "UID", |a| {
        let id = int(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_setresuid, [id, id, id])))
    }),
    ("setresgid", "GID", |a| {
        let id = int(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_setresgid, [id, id, id])))
    }),
    ("setreuid", "UID", |a| {
        let id = int(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_setreuid, [id, id])))
    }),
    ("setfsuid", "UID", |a| {
        // setfsuid never fails: it returns the previous id. Asking again tells
        // whether the change took.
        let id = int(a, 0)?;
        let _ = raw(libc::SYS_setfsuid, [id]);
        Ok(match raw(libc::SYS_setfsuid, [u64::from(u32::MAX)]) {
            Ok(now) if now as u64 == id => Res::ok(),
            Ok(now) => Res::err(libc::EPERM).detail(format!("fsuid={now}")),
            Err(e) => Res::err(e),
        })
    }),
    ("prctl", "OPTION ARG2 ARG3", |a| {
        Ok(Res::sys(raw(
            libc::SYS_prctl,
            [int(a, 0)?, int(a, 1)?, int(a, 2)?, 0, 0],
        )))
    }),
    ("personality-set", "PERSONA", |a| {
        let persona = hex(a, 0)?;
        Ok(match raw(libc::SYS_personality, [persona]) {
            // personality returns the previous persona; ask again to see the change.
            Ok(_) => match raw(libc::SYS_personality, [0xffff_ffff]) {
                Ok(now) if now as u64 == persona => Res::ok(),
                Ok(now) => Res::err(libc::EPERM).detail(format!("persona={now:#x}")),
                Err(e) => Res::err(e),
            },
            Err(e) => Res::err(e),
        })
    }),
    ("iopl", "LEVEL", |a| {
        Ok(Res::sys(raw(libc::SYS_iopl, [int(a, 0)?])))
    }),
    ("ioperm", "FROM NUM", |a| {
        Ok(Res::sys(raw(libc::SYS_ioperm, [int(a, 0)?, int(a, 1)?, 1])))
    }),
    // — kernel: modules, kexec, BPF, perf, keys, io_uring —
    ("finit-module", "PATH", |a| {
        let fd = sys::open(&cstr(a, 0)?, libc::O_RDONLY | libc::O_CLOEXEC).unwrap_or(-1);
        let r = raw(libc::SYS_finit_module, [fd as u64, ptr(c""), 0]);
        if fd >= 0 {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    ("delete-module", "NAME", |a| {
        let name = cstr(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_delete_module,
            [ptr(&name), libc::O_NONBLOCK as u64],
        )))
    }),
    ("kexec-load", "", |_| {
        // 17 segments is one more than KEXEC_SEGMENT_MAX: rejected right after the
        // permission check, before anything is loaded or unloaded.
        Ok(Res::sys(raw(libc::SYS_kexec_load, [0, 17, 0, 0])))
    }),
    ("kexec-file-load", "", |_| {
        // An undefined flag: rejected right after the permission check.
        let bad_flags = 1_u64 << 31;
        let none = u64::MAX;
        Ok(Res::sys(raw(
            libc::SYS_kexec_file_load,
            [none, none, 0, 0, bad_flags],
        )))
    }),
    ("bpf-map", "", |_| {
        // union bpf_attr for BPF_MAP_CREATE: an array map of one 4-byte value.
        let attr = [
            2_u32, 4, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let r = raw(libc::SYS_bpf, [0, attr.as_ptr() as u64, 80]);
        if let Ok(fd) = r {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    ("perf-sw", "", |_| {
        // struct perf_event_attr: type PERF_TYPE_SOFTWARE, size, config
        // PERF_COUNT_SW_CPU_CLOCK, on this process, any CPU.
        let mut attr = [0_u32; 32];
        for (slot, v) in attr.iter_mut().zip([1_u32, 128]) {
            *slot = v;
        }
        let any = u64::MAX;
        let r = raw(
            libc::SYS_perf_event_open,
            [attr.as_ptr() as u64, 0, any, any, 0],
        );
        if let Ok(fd) = r {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    ("add-key", "", |_| {
        // A user key on the probe's own process keyring (gone when it exits).
        let process_keyring = (-2_i64) as u64;
        Ok(Res::sys(raw(
            libc::SYS_add_key,
            [
                ptr(c"user"),
                ptr(c"knox-probe"),
                ptr(c"x"),
                1,
                process_keyring,
            ],
        )))
    }),
    ("request-key", "", |_| {
        Ok(Res::sys(raw(
            libc::SYS_request_key,
            [ptr(c"user"), ptr(c"knox-no-such-key"), 0, 0],
        )))
    }),
    ("io-uring", "", |_| {
        let params = [0_u32; 30];
        let r = raw(libc::SYS_io_uring_setup, [1, params.as_ptr() as u64]);
        if let Ok(fd) = r {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    ("fanotify", "", |_| {
        let r = raw(libc::SYS_fanotify_init, [0, libc::O_RDONLY as u64]);
        if let Ok(fd) = r {
            sys::close(fd as i32);
        }
        Ok(Res::sys(r))
    }),
    // — machine state, in forms that cannot change it —
    ("reboot-bad-magic", "", |_| {
        // Wrong magic: refused right after the capability check.
        Ok(Res::sys(raw(libc::SYS_reboot, [0xdead, 0, 0x0123_4567, 0])))
    }),
    ("swapon", "PATH", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_swapon, [ptr(&path), 0])))
    }),
    ("swapoff", "PATH", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_swapoff, [ptr(&path)])))
    }),
    ("syslog-read", "", |_| {
        let mut buf = vec![0_u8; 4096];
        let read_all = 3;
        let r = raw(
            libc::SYS_syslog,
            [read_all, buf.as_mut_ptr() as u64, buf.len() as u64],
        );
        Ok(match r {
            Ok(n) => Res::ok().detail(format!("bytes={n}")),
            Err(e) => Res::err(e),
        })
    }),
    ("acct", "PATH", |a| {
        let path = cstr(a, 0)?;
        Ok(Res::sys(raw(libc::SYS_acct, [ptr(&path)])))
    }),
    ("quotactl", "DEVICE", |a| {
        let device = cstr(a, 0)?;
        let mut buf = [0_u64; 16];
        let getquota = 0x0080_0007_u64 << 8; // QCMD(Q_GETQUOTA, USRQUOTA)
        Ok(Res::sys(raw(
            libc::SYS_quotactl,
            [getquota, ptr(&device), 0, buf.as_mut_ptr() as u64],
        )))
    }),
    ("clock-settime-invalid", "", |_| {
        let ts = [0_i64, 2_000_000_000];
        Ok(Res::sys(raw(
            libc::SYS_clock_settime,
            [libc::CLOCK_REALTIME as u64, ts.as_ptr() as u64],
        )))
    }),
    ("settimeofday-invalid", "", |_| {
        let tv = [0_i64, 2_000_000];
        Ok(Res::sys(raw(
            libc::SYS_settimeofday,
            [tv.as_ptr() as u64, 0],
        )))
    }),
    ("adjtimex-invalid", "", |_| {
        // struct timex with modes = ADJ_TICK and tick = 1: out of range, refused
        // right after the capability check.
        let mut timex = [0_i64; 26];
        if let Some(modes) = timex.first_mut() {
            *modes = 0x4000;
        }
        if let Some(tick) = timex.get_mut(11) {
            *tick = 1;
        }
        Ok(Res::sys(raw(
            libc::SYS_adjtimex,
            [timex.as_mut_ptr() as u64],
        )))
    }),
    ("sethostname", "NAME", |a| {
        let name = arg(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_sethostname,
            [name.as_ptr() as u64, name.len() as u64],
        )))
    }),
    ("setdomainname", "NAME", |a| {
        let name = arg(a, 0)?;
        Ok(Res::sys(raw(
            libc::SYS_setdomainname,
            [name.as_ptr() as u64, name.len() as u64],
        )))
    }),
    ("vhangup", "", |_| Ok(Res::sys(raw(libc::SYS_vhangup, [])))),
    ("tiocsti", "", |_| {
        let fd = match sys::open(c"/dev/tty", libc::O_RDWR | libc::O_CLOEXEC) {
            Ok(fd) => fd,
            Err(e) => return Ok(Res::err(e).detail("open /dev/tty")),
        };
        let byte = b" ";
        let r = raw(
            libc::SYS_ioctl,
            [fd as u64, libc::TIOCSTI, byte.as_ptr() as u64],
        );
        sys::close(fd as i32);
        Ok(Res::sys(r))
    }),
    ("syscall-nr", "NR", |a| {
        Ok(Res::sys(raw(int(a, 0)? as i64, [])))
    }),
    // — foreign ABIs —
    ("x32", "NR A0 A1 A2", |a| {
        let nr = 0x4000_0000 | int(a, 0)? as i64;
        Ok(Res::sys(raw(nr, [int(a, 1)?, int(a, 2)?, int(a, 3)?])))
    }),
    ("int80", "NR A0 A1 A2", |a| {
        let n = |i| int(a, i).map(|v| v as u32);
        Ok(Res::sys(sys::int80(n(0)?, n(1)?, n(2)?, n(3)?)))
    }),
];

fn hex(a: &[String], i: usize) -> Result<u64, String> {
    let s = arg(a, i)?;
    u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("hex: {e}"))
}
