//! Decodes the pointer arguments of a notified system call by reading the target's memory.
//!
//! The target is stopped inside the system call while the supervisor reads, but its
//! other threads are not: what is read is what the memory held at that moment,
//! which is why the supervisor validates the notification id afterwards and why
//! decisions that let a call continue rely on Landlock, not on these bytes.

use std::fmt::Write as _;
use std::fs::File;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

/// Longest path read from a target (`PATH_MAX`).
const PATH_MAX: usize = 4096;
const PAGE: u64 = 4096;
/// `AT_FDCWD` as the kernel sees it in a 64-bit argument register (an `int`).
const AT_FDCWD: i32 = -100;
/// Longest socket address read (`sizeof(struct sockaddr_storage)`).
const SOCKADDR_MAX: u64 = 128;

/// A process whose memory and file table the supervisor may inspect.
#[derive(Debug)]
pub(crate) struct Target {
    pid: u32,
    mem: Option<File>,
}

impl Target {
    /// Opens `/proc/<pid>/mem` (permitted: the supervisor's process is the target's ancestor).
    pub(crate) fn open(pid: u32) -> Self {
        Self {
            pid,
            mem: File::open(format!("/proc/{pid}/mem")).ok(),
        }
    }

    /// Reads a NUL-terminated string of at most [`PATH_MAX`] bytes, page by page
    /// so that a string ending just before an unmapped page is still read.
    pub(crate) fn read_cstr(&self, addr: u64) -> Option<Vec<u8>> {
        let mem = self.mem.as_ref()?;
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < PATH_MAX {
            let chunk = usize::try_from(PAGE - at % PAGE)
                .ok()?
                .min(PATH_MAX - out.len());
            let mut buf = vec![0_u8; chunk];
            let n = mem.read_at(&mut buf, at).ok().filter(|n| *n > 0)?;
            let got = buf.get(..n)?;
            if let Some(end) = got.iter().position(|b| *b == 0) {
                out.extend_from_slice(got.get(..end)?);
                return Some(out);
            }
            out.extend_from_slice(got);
            at = at.checked_add(n as u64)?;
        }
        None
    }

    /// Reads exactly `len` bytes.
    pub(crate) fn read_bytes(&self, addr: u64, len: u64) -> Option<Vec<u8>> {
        let mut buf = vec![0_u8; usize::try_from(len).ok()?];
        self.mem.as_ref()?.read_exact_at(&mut buf, addr).ok()?;
        Some(buf)
    }

    fn link(&self, what: &str) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/{}/{what}", self.pid)).ok()
    }

    /// Absolute form of a path argument: relative paths are joined to the target's
    /// working directory or to the directory `dirfd` names (lexically; not canonicalized).
    pub(crate) fn absolute(&self, dirfd: Option<u64>, raw: &[u8]) -> PathBuf {
        let path = Path::new(std::ffi::OsStr::from_bytes(raw));
        if path.is_absolute() {
            return path.to_path_buf();
        }
        let dirfd = dirfd.map(|fd| fd as i32).filter(|fd| *fd != AT_FDCWD);
        let base = match dirfd {
            Some(fd) => self.link(&format!("fd/{fd}")),
            None => self.link("cwd"),
        };
        base.map_or_else(|| path.to_path_buf(), |b| b.join(path))
    }

    /// A path argument at `addr`, made absolute and seen as the target sees it.
    pub(crate) fn path(&self, dirfd: Option<u64>, addr: u64) -> Option<PathBuf> {
        Some(self.own_view(self.absolute(dirfd, &self.read_cstr(addr)?)))
    }

    /// Rewrites `/proc/self` and `/proc/thread-self` to the target's own entries:
    /// resolved in the supervisor they would name the supervisor (its executable,
    /// descriptors and root), not the process that made the call.
    pub(crate) fn own_view(&self, path: PathBuf) -> PathBuf {
        let rest = |prefix: &str| path.strip_prefix(prefix).ok().map(Path::to_path_buf);
        let pid = self.pid;
        if let Some(rest) = rest("/proc/self") {
            return Path::new(&format!("/proc/{pid}")).join(rest);
        }
        if let Some(rest) = rest("/proc/thread-self") {
            return Path::new(&format!("/proc/{pid}/task/{pid}")).join(rest);
        }
        path
    }

    /// A socket address argument.
    /// The socket address at `addr` as read (at most 128 bytes), and decoded: the
    /// bytes a supervisor-made call uses are the bytes that were checked.
    pub(crate) fn sockaddr_raw(&self, addr: u64, len: u64) -> Option<(Vec<u8>, SockAddr)> {
        if addr == 0 || len < 2 {
            return None;
        }
        let bytes = self.read_bytes(addr, len.min(SOCKADDR_MAX))?;
        let parsed = SockAddr::parse(&bytes);
        Some((bytes, parsed))
    }

    /// The thread group (process) of the target thread.
    pub(crate) fn tgid(&self) -> Option<i32> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The target thread's id.
    pub(crate) fn tid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn sockaddr(&self, addr: u64, len: u64) -> Option<SockAddr> {
        if addr == 0 || len < 2 {
            return None;
        }
        Some(SockAddr::parse(
            &self.read_bytes(addr, len.min(SOCKADDR_MAX))?,
        ))
    }
}

/// `N` bytes of `b` starting at `at`, if present.
fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// A decoded socket address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SockAddr {
    /// IPv4 address and port.
    V4(Ipv4Addr, u16),
    /// IPv6 address and port.
    V6(Ipv6Addr, u16),
    /// UNIX socket path (`@`-prefixed when abstract).
    Unix(String),
    /// Any other family.
    Other(u16),
}

impl SockAddr {
    /// Parses `struct sockaddr_*` bytes (family in native order, port in network order).
    pub(crate) fn parse(b: &[u8]) -> Self {
        let family = array(b, 0).map_or(0, u16::from_ne_bytes);
        let port = || array(b, 2).map_or(0, u16::from_be_bytes);
        match family {
            2 => match array::<4>(b, 4) {
                Some(a) => SockAddr::V4(Ipv4Addr::from(a), port()),
                None => SockAddr::Other(family),
            },
            10 => match array::<16>(b, 8) {
                Some(a) => SockAddr::V6(Ipv6Addr::from(a), port()),
                None => SockAddr::Other(family),
            },
            1 => {
                let path = b.get(2..).unwrap_or_default();
                let text = match path.split_first() {
                    Some((0, name)) => format!("@{}", String::from_utf8_lossy(name)),
                    _ => {
                        let end = path.iter().position(|c| *c == 0).unwrap_or(path.len());
                        String::from_utf8_lossy(path.get(..end).unwrap_or_default()).into_owned()
                    }
                };
                SockAddr::Unix(text)
            }
            other => SockAddr::Other(other),
        }
    }

    /// TCP/UDP port, for IP families.
    pub(crate) fn port(&self) -> Option<u16> {
        match self {
            SockAddr::V4(_, p) | SockAddr::V6(_, p) => Some(*p),
            _ => None,
        }
    }
}

impl std::fmt::Display for SockAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SockAddr::V4(a, p) => write!(f, "{a}:{p}"),
            SockAddr::V6(a, p) => write!(f, "[{a}]:{p}"),
            SockAddr::Unix(path) => write!(f, "unix:{path}"),
            SockAddr::Other(family) => write!(f, "family {family}"),
        }
    }
}

/// How one argument is shown.
#[derive(Debug, Clone, Copy)]
enum Arg {
    /// A path string at argument `i`.
    Path(&'static str, usize),
    /// A string that is not a path, at argument `i`.
    Str(&'static str, usize),
    /// A path at argument `path` relative to the directory fd at argument `dirfd`.
    PathAt(&'static str, usize, usize),
    /// A socket address at argument `addr` of length argument `len`.
    Addr(usize, usize),
    /// A signed integer.
    Int(&'static str, usize),
    /// Flags or a constant, in hex.
    Hex(&'static str, usize),
}

/// The arguments worth showing for a system call, by name. A table: one row per call.
fn shape(name: &str) -> &'static [Arg] {
    use Arg::*;
    match name {
        "open" | "creat" | "truncate" | "chdir" | "chroot" | "rmdir" | "unlink" | "mkdir"
        | "mknod" | "chmod" | "chown" | "lchown" | "access" | "stat" | "lstat" | "readlink"
        | "umount2" | "swapon" | "swapoff" | "acct" | "execve" | "uselib" | "statfs" => {
            &[Path("path", 0)]
        }
        "openat" | "openat2" | "mkdirat" | "unlinkat" | "mknodat" | "fchmodat" | "fchownat"
        | "faccessat" | "faccessat2" | "newfstatat" | "readlinkat" | "utimensat" | "statx"
        | "execveat" | "name_to_handle_at" | "open_tree" | "fsconfig" => &[PathAt("path", 0, 1)],
        "rename" | "link" => &[Path("from", 0), Path("to", 1)],
        "symlink" => &[Path("target", 0), Path("link", 1)],
        "renameat" | "renameat2" | "linkat" => &[PathAt("from", 0, 1), PathAt("to", 2, 3)],
        "symlinkat" => &[Path("target", 0), PathAt("link", 1, 2)],
        "mount" => &[
            Str("source", 0),
            Path("target", 1),
            Str("fstype", 2),
            Hex("flags", 3),
        ],
        "pivot_root" => &[Path("new_root", 0), Path("put_old", 1)],
        "connect" | "bind" => &[Addr(1, 2)],
        "sendto" => &[Addr(4, 5)],
        "socket" | "socketpair" => &[Int("domain", 0), Hex("type", 1), Int("protocol", 2)],
        "kill" | "tkill" => &[Int("pid", 0), Int("signal", 1)],
        "tgkill" => &[Int("tgid", 0), Int("tid", 1), Int("signal", 2)],
        "ptrace" => &[Int("request", 0), Int("pid", 1)],
        "clone" | "unshare" => &[Hex("flags", 0)],
        "setns" => &[Int("fd", 0), Hex("nstype", 1)],
        "setuid" | "setgid" | "setfsuid" | "setfsgid" => &[Int("id", 0)],
        "setreuid" | "setregid" => &[Int("real", 0), Int("effective", 1)],
        "setresuid" | "setresgid" => &[Int("real", 0), Int("effective", 1), Int("saved", 2)],
        "personality" => &[Hex("persona", 0)],
        "bpf" | "keyctl" | "prctl" => &[Int("op", 0)],
        "perf_event_open" => &[Int("pid", 1), Int("cpu", 2)],
        "io_uring_setup" => &[Int("entries", 0)],
        "userfaultfd" => &[Hex("flags", 0)],
        "init_module" => &[Int("len", 1)],
        "finit_module" => &[Int("fd", 0)],
        "process_vm_readv" | "process_vm_writev" | "pidfd_open" => &[Int("pid", 0)],
        _ => &[],
    }
}

/// A one-line rendering of the interesting arguments, or `None` if the call has none
/// or nothing could be read.
pub(crate) fn describe(target: &Target, name: &str, args: &[u64; 6]) -> Option<String> {
    let arg = |i: usize| args.get(i).copied().unwrap_or(0);
    let mut out = String::new();
    for a in shape(name) {
        let sep = if out.is_empty() { "" } else { ", " };
        let _ = match *a {
            Arg::Path(label, i) => match target.path(None, arg(i)) {
                Some(p) => write!(out, "{sep}{label}={:?}", p.as_os_str()),
                None => continue,
            },
            Arg::Str(label, i) => match target.read_cstr(arg(i)).filter(|_| arg(i) != 0) {
                Some(b) => write!(out, "{sep}{label}={:?}", String::from_utf8_lossy(&b)),
                None => continue,
            },
            Arg::PathAt(label, d, i) => match target.path(Some(arg(d)), arg(i)) {
                Some(p) => write!(out, "{sep}{label}={:?}", p.as_os_str()),
                None => continue,
            },
            Arg::Addr(a, l) => match target.sockaddr(arg(a), arg(l)) {
                Some(addr) => write!(out, "{sep}addr={addr}"),
                None => continue,
            },
            Arg::Int(label, i) => write!(out, "{sep}{label}={}", arg(i) as i64 as i32),
            Arg::Hex(label, i) => write!(out, "{sep}{label}={:#x}", arg(i)),
        };
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn concat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn sockaddr_in_decodes() {
        let b = concat(&[
            &2_u16.to_ne_bytes(),
            &8080_u16.to_be_bytes(),
            &[127, 0, 0, 1],
            &[0; 8],
        ]);
        assert_eq!(SockAddr::parse(&b).to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn sockaddr_in6_and_unix_decode() {
        let b = concat(&[
            &10_u16.to_ne_bytes(),
            &443_u16.to_be_bytes(),
            &[0; 4],
            &Ipv6Addr::LOCALHOST.octets(),
            &[0; 4],
        ]);
        assert_eq!(SockAddr::parse(&b).to_string(), "[::1]:443");
        let mut u = 1_u16.to_ne_bytes().to_vec();
        u.extend_from_slice(b"/run/x.sock\0junk");
        assert_eq!(SockAddr::parse(&u).to_string(), "unix:/run/x.sock");
        let mut a = 1_u16.to_ne_bytes().to_vec();
        a.extend_from_slice(b"\0hidden");
        assert_eq!(SockAddr::parse(&a).to_string(), "unix:@hidden");
    }

    #[test]
    fn truncated_sockaddr_is_not_misread() {
        assert_eq!(SockAddr::parse(&2_u16.to_ne_bytes()), SockAddr::Other(2));
        assert_eq!(SockAddr::parse(&[]), SockAddr::Other(0));
    }

    #[test]
    fn own_memory_reads_back() {
        let me = Target::open(std::process::id());
        let text = c"/some/path";
        let got = me.read_cstr(text.as_ptr() as u64);
        assert_eq!(got.as_deref(), Some(&b"/some/path"[..]));
        let rel = me.absolute(None, b"rel/file");
        assert!(rel.is_absolute() && rel.ends_with("rel/file"));
    }

    #[test]
    fn proc_self_means_the_target() {
        let target = Target { pid: 42, mem: None };
        assert_eq!(
            target.own_view(PathBuf::from("/proc/self/exe")),
            Path::new("/proc/42/exe")
        );
        assert_eq!(
            target.own_view(PathBuf::from("/proc/thread-self/root/bin/sh")),
            Path::new("/proc/42/task/42/root/bin/sh")
        );
        assert_eq!(
            target.own_view(PathBuf::from("/proc/selfish")),
            Path::new("/proc/selfish")
        );
    }
}
