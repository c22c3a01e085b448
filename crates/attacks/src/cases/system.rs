//! Namespace, mount, identity, kernel, foreign-ABI and resource attacks.

use super::super::{Cap, Case, CaseContext, Expected, Layer, LimitOf};
use super::{
    EACCES, EBADF, EFBIG, EINVAL, EISDIR, EMFILE, ENOENT, ENOEXEC, SIGSYS, capped, case, denied,
    exceeds, landlock, past_permission, v,
};

/// Every namespace flag, mounts, identity changes, kernel interfaces, foreign ABIs, resources.
pub(super) fn cases() -> Vec<Case> {
    let mut out = namespaces();
    out.extend(privilege());
    out.extend(kernel());
    out.extend(arch());
    out.extend(resources());
    out
}

fn namespaces() -> Vec<Case> {
    const NS: &str = "namespace";
    let unshare = |id, description, flags: fn(&CaseContext<'_>) -> Vec<String>| {
        case(
            id,
            NS,
            description,
            "unshare-flags",
            flags,
            denied("unshare"),
        )
    };
    vec![
        unshare("unshare-mount", "unshare a mount namespace", |_| {
            v(["20000"])
        }),
        unshare("unshare-uts", "unshare a UTS namespace", |_| v(["4000000"])),
        unshare("unshare-ipc", "unshare an IPC namespace", |_| {
            v(["8000000"])
        }),
        unshare("unshare-net", "unshare a network namespace", |_| {
            v(["40000000"])
        }),
        unshare("unshare-pid", "unshare a pid namespace", |_| {
            v(["20000000"])
        }),
        unshare(
            "unshare-user",
            "unshare a user namespace (root inside it)",
            |_| v(["10000000"]),
        ),
        unshare("unshare-cgroup", "unshare a cgroup namespace", |_| {
            v(["2000000"])
        }),
        unshare("unshare-time", "unshare a time namespace", |_| v(["80"])),
        case(
            "setns-victim-mnt",
            NS,
            "join the victim's (the host's) mount namespace",
            "setns-path",
            |c| vec![format!("/proc/{}/ns/mnt", c.victim.pid), "20000".into()],
            denied("setns"),
        ),
        case(
            "setns-victim-net",
            NS,
            "join the victim's network namespace",
            "setns-path",
            |c| vec![format!("/proc/{}/ns/net", c.victim.pid), "40000000".into()],
            denied("setns"),
        ),
        case(
            "setns-victim-pidfd",
            NS,
            "join the victim's UTS namespace through a pidfd",
            "setns-pid",
            |c| vec![c.pid(), "4000000".into()],
            denied("pidfd_open"),
        ),
        case(
            "chroot",
            NS,
            "chroot into the workspace",
            "chroot",
            |c| vec![c.ins("")],
            denied("chroot"),
        ),
        case(
            "pivot-root",
            NS,
            "pivot_root into the workspace",
            "pivot-root",
            |c| vec![c.ins("mnt"), c.ins("mnt/old")],
            denied("pivot_root"),
        )
        .succeeds_if(past_permission(&[EINVAL, ENOENT])),
        case(
            "mount-tmpfs",
            NS,
            "mount a tmpfs on a workspace directory",
            "mount-tmpfs",
            |c| vec![c.ins("mnt")],
            denied("mount"),
        ),
        case(
            "mount-bind-outside",
            NS,
            "bind-mount the outside directory into the workspace",
            "mount-bind",
            |c| vec![c.out("dir"), c.ins("mnt")],
            denied("mount"),
        ),
        case(
            "umount",
            NS,
            "unmount a workspace directory",
            "umount",
            |c| vec![c.ins("mnt")],
            denied("umount2"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "fsopen",
            NS,
            "open a file-system context (new mount API)",
            "fsopen",
            |_| v(["tmpfs"]),
            denied("fsopen"),
        ),
        case(
            "open-tree",
            NS,
            "clone a mount of the outside directory (new mount API)",
            "open-tree",
            |c| vec![c.out("dir")],
            denied("open_tree"),
        ),
    ]
}

fn privilege() -> Vec<Case> {
    const PRIV: &str = "privilege";
    let id = |id, description, probe, syscall| {
        case(
            id,
            PRIV,
            description,
            probe,
            |_| v(["65534"]),
            denied(syscall),
        )
    };
    vec![
        id("setuid", "change the user id", "setuid", "setuid"),
        id("setgid", "change the group id", "setgid", "setgid"),
        id(
            "setgroups",
            "change the supplementary groups",
            "setgroups",
            "setgroups",
        ),
        id(
            "setresuid",
            "change real, effective and saved user ids",
            "setresuid",
            "setresuid",
        ),
        id(
            "setresgid",
            "change real, effective and saved group ids",
            "setresgid",
            "setresgid",
        ),
        id(
            "setreuid",
            "change real and effective user ids",
            "setreuid",
            "setreuid",
        ),
        id(
            "setfsuid",
            "change the file-system user id",
            "setfsuid",
            "setfsuid",
        ),
        case(
            PRIV_CAPSET,
            PRIV,
            "set the capability sets",
            "capset",
            |_| Vec::new(),
            denied("capset"),
        ),
        case(
            "prctl-dumpable",
            PRIV,
            "make the probe dumpable (traceable by others)",
            "prctl",
            |_| v(["4", "1", "0"]),
            denied("prctl"),
        ),
        case(
            "prctl-securebits",
            PRIV,
            "clear the securebits (root gets capabilities back on exec)",
            "prctl",
            |_| v(["28", "0", "0"]),
            denied("prctl"),
        ),
        case(
            "prctl-child-subreaper",
            PRIV,
            "become a subreaper (adopt orphans that escape the tree)",
            "prctl",
            |_| v(["36", "1", "0"]),
            denied("prctl"),
        ),
        case(
            "prctl-set-mm-exe",
            PRIV,
            "replace /proc/self/exe (PR_SET_MM_EXE_FILE)",
            "prctl",
            |_| v(["35", "13", "-1"]),
            denied("prctl"),
        )
        .succeeds_if(past_permission(&[EBADF])),
        case(
            "prctl-ambient-raise",
            PRIV,
            "raise CAP_SYS_ADMIN into the ambient set",
            "prctl",
            |_| v(["47", "2", "21"]),
            denied("prctl"),
        )
        .harmless("CAP_SYS_ADMIN is not in the inheritable set, so the kernel refuses it (EPERM)"),
        case(
            "personality-no-aslr",
            PRIV,
            "disable address-space randomization (ADDR_NO_RANDOMIZE)",
            "personality-set",
            |_| v(["40000"]),
            denied("personality"),
        ),
        case(
            "iopl",
            PRIV,
            "raise the I/O privilege level",
            "iopl",
            |_| v(["3"]),
            denied("iopl"),
        ),
        case(
            "ioperm",
            PRIV,
            "get access to I/O port 0x80",
            "ioperm",
            |_| v(["128", "1"]),
            denied("ioperm"),
        ),
    ]
}

const PRIV_CAPSET: &str = "capset";

fn kernel() -> Vec<Case> {
    const K: &str = "kernel";
    let none = |_: &CaseContext<'_>| Vec::new();
    vec![
        case(
            "init-module",
            K,
            "load a kernel module (an invalid image)",
            "init-module",
            none,
            denied("init_module"),
        )
        .succeeds_if(past_permission(&[ENOEXEC, EINVAL])),
        case(
            "finit-module",
            K,
            "load a kernel module from a file (a junk one)",
            "finit-module",
            |c| vec![c.tool("junk.ko")],
            denied("finit_module"),
        )
        .succeeds_if(past_permission(&[ENOEXEC, EINVAL])),
        case(
            "delete-module",
            K,
            "unload a kernel module (one that does not exist)",
            "delete-module",
            |_| v(["knox_no_such_module"]),
            denied("delete_module"),
        )
        .succeeds_if(past_permission(&[ENOENT])),
        case(
            "kexec-load",
            K,
            "load a new kernel to boot (17 segments: one too many)",
            "kexec-load",
            none,
            denied("kexec_load"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "kexec-file-load",
            K,
            "load a new kernel from a file (undefined flag)",
            "kexec-file-load",
            none,
            denied("kexec_file_load"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "bpf-map-create",
            K,
            "create a BPF map",
            "bpf-map",
            none,
            denied("bpf"),
        ),
        case(
            "perf-event-open",
            K,
            "open a perf event (a software clock on the probe)",
            "perf-sw",
            none,
            denied("perf_event_open"),
        ),
        case(
            "keyctl",
            K,
            "query the session keyring",
            "keyctl",
            none,
            denied("keyctl"),
        ),
        case(
            "add-key",
            K,
            "add a key to the probe's keyring",
            "add-key",
            none,
            denied("add_key"),
        ),
        case(
            "request-key",
            K,
            "request a key (with upcall support)",
            "request-key",
            none,
            denied("request_key"),
        )
        .harmless("the key does not exist and no upcall is named: ENOKEY"),
        case(
            "io-uring-setup",
            K,
            "set up an io_uring (asynchronous calls no filter sees)",
            "io-uring",
            none,
            denied("io_uring_setup"),
        ),
        case(
            "userfaultfd",
            K,
            "create a userfaultfd (a race-widening primitive)",
            "userfaultfd",
            none,
            denied("userfaultfd"),
        ),
        case(
            "fanotify-init",
            K,
            "start a file-system-wide fanotify watch",
            "fanotify",
            none,
            denied("fanotify_init"),
        ),
        case(
            "reboot",
            K,
            "reboot (with a wrong magic number)",
            "reboot-bad-magic",
            none,
            denied("reboot"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "swapon",
            K,
            "enable swap on a workspace file (no swap signature)",
            "swapon",
            |c| vec![c.tool("swap")],
            denied("swapon"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "swapoff",
            K,
            "disable swap on a workspace file (not a swap area)",
            "swapoff",
            |c| vec![c.tool("swap")],
            denied("swapoff"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "syslog-read",
            K,
            "read the kernel log",
            "syslog-read",
            none,
            denied("syslog"),
        ),
        case(
            "acct",
            K,
            "turn on process accounting (into a directory: refused)",
            "acct",
            |c| vec![c.ins("")],
            denied("acct"),
        )
        .succeeds_if(past_permission(&[EISDIR])),
        case(
            "quotactl",
            K,
            "query disk quotas of a device",
            "quotactl",
            |_| v(["/dev/knox-no-such-device"]),
            denied("quotactl"),
        )
        .harmless("the device does not exist: ENOENT"),
        case(
            "clock-settime",
            K,
            "set the real-time clock (invalid nanoseconds)",
            "clock-settime-invalid",
            none,
            denied("clock_settime"),
        )
        .harmless("2e9 nanoseconds is invalid: EINVAL, checked before the privilege"),
        case(
            "settimeofday",
            K,
            "set the time of day (invalid microseconds)",
            "settimeofday-invalid",
            none,
            denied("settimeofday"),
        )
        .harmless("2e6 microseconds is invalid: EINVAL, checked before the privilege"),
        case(
            "adjtimex",
            K,
            "tune the clock (an out-of-range tick)",
            "adjtimex-invalid",
            none,
            denied("adjtimex"),
        )
        .succeeds_if(past_permission(&[EINVAL])),
        case(
            "sethostname",
            K,
            "set the host name (the baseline's own UTS namespace)",
            "sethostname",
            |_| v(["knox-probe"]),
            denied("sethostname"),
        ),
        case(
            "setdomainname",
            K,
            "set the NIS domain name (the baseline's own UTS namespace)",
            "setdomainname",
            |_| v(["knox-probe"]),
            denied("setdomainname"),
        ),
        case(
            "vhangup",
            K,
            "hang up the controlling terminal",
            "vhangup",
            none,
            denied("vhangup"),
        )
        .unsafe_unconfined("it would hang up the terminal of whoever runs the tests"),
        case(
            "tiocsti",
            K,
            "inject input into the controlling terminal (TIOCSTI)",
            "tiocsti",
            none,
            landlock(EACCES),
        )
        .unsafe_unconfined("it would type into the terminal of whoever runs the tests"),
        case(
            "unknown-syscall",
            K,
            "a system call number no kernel has yet",
            "syscall-nr",
            |_| v(["1000"]),
            denied("nr:1000"),
        )
        .harmless("the kernel has no call 1000: ENOSYS"),
    ]
}

fn arch() -> Vec<Case> {
    const ARCH: &str = "arch";
    let killed = Expected::Killed { signal: SIGSYS };
    vec![
        case(
            "x32-getpid",
            ARCH,
            "getpid through the x32 ABI (number | 0x40000000)",
            "x32",
            |_| v(["39", "0", "0", "0"]),
            killed,
        ),
        case(
            "x32-socket",
            ARCH,
            "socket through the x32 ABI",
            "x32",
            |_| v(["41", "2", "1", "0"]),
            killed,
        ),
        case(
            "i386-getpid",
            ARCH,
            "getpid through int 0x80 (i386 numbers, unchecked by an x86_64 list)",
            "int80",
            |_| v(["20", "0", "0", "0"]),
            killed,
        ),
        case(
            "i386-setuid32",
            ARCH,
            "setuid32 through int 0x80",
            "int80",
            |_| v(["213", "65534", "0", "0"]),
            killed,
        ),
        case(
            "i386-socket",
            ARCH,
            "socket through int 0x80",
            "int80",
            |_| v(["359", "2", "1", "0"]),
            killed,
        ),
    ]
}

fn resources() -> Vec<Case> {
    const RES: &str = "resource";
    vec![
        case(
            "fork-bomb",
            RES,
            "fork twice the process cap",
            "fork-bomb",
            |c| vec![(c.fixture.limits().max_processes * 2).to_string()],
            capped(Cap::Processes),
        )
        .succeeds_if(exceeds("forked", LimitOf::Processes)),
        case(
            "thread-bomb",
            RES,
            "start twice the process cap in threads",
            "thread-bomb",
            |c| vec![(c.fixture.limits().max_processes * 2).to_string()],
            capped(Cap::Processes),
        )
        .succeeds_if(exceeds("threads", LimitOf::Processes)),
        case(
            "file-size-bomb",
            RES,
            "write a file 1 MiB past the file-size cap",
            "file-size-bomb",
            |c| {
                vec![
                    c.ins("big"),
                    (c.fixture.limits().max_file_bytes + (1 << 20)).to_string(),
                ]
            },
            Expected::Refused {
                errno: EFBIG,
                layer: Layer::Rlimit,
            },
        )
        .succeeds_if(exceeds("written", LimitOf::FileBytes)),
        case(
            "file-size-bomb-sigxfsz",
            RES,
            "the same with SIGXFSZ's default action restored",
            "file-size-bomb-sigxfsz",
            |c| {
                vec![
                    c.ins("big"),
                    (c.fixture.limits().max_file_bytes + (1 << 20)).to_string(),
                ]
            },
            capped(Cap::FileSize),
        )
        .succeeds_if(exceeds("written", LimitOf::FileBytes)),
        case(
            "memory-bomb",
            RES,
            "touch 32 MiB more than the memory cap",
            "memory-bomb",
            |c| vec![((c.fixture.limits().max_memory_bytes >> 20) + 32).to_string()],
            capped(Cap::Memory),
        )
        .succeeds_if(exceeds("mib", LimitOf::MemoryMib)),
        case(
            "cpu-burn",
            RES,
            "burn one CPU second more than the cap",
            "cpu-burn",
            |c| vec![(c.fixture.limits().cpu_seconds + 1).to_string()],
            capped(Cap::CpuTime),
        )
        .succeeds_if(exceeds("cpu_ms", LimitOf::CpuMillis)),
        case(
            "fd-exhaust",
            RES,
            "open twice the descriptor cap",
            "fd-exhaust",
            |c| vec![(c.fixture.limits().max_open_files * 2).to_string()],
            Expected::Refused {
                errno: EMFILE,
                layer: Layer::Rlimit,
            },
        )
        .succeeds_if(exceeds("opened", LimitOf::OpenFiles)),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::cases;

    #[test]
    fn ids_are_unique_and_the_corpus_is_large_enough() {
        let all = cases();
        let mut ids: Vec<_> = all.iter().map(|c| c.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), all.len(), "duplicate case ids");
        assert!(all.len() >= 100, "{} cases", all.len());
    }
}
