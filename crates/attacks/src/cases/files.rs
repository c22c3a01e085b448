//! File-system attacks: reading the canary, escaping the workspace with writes and metadata changes.

use super::super::{Case, CaseContext, Success, arg};
use super::{EACCES, case, credentials, denied, landlock};

const READ: &str = "fs-read";
const WRITE: &str = "fs-write";

/// Reads of the canary and writes outside the workspace.
pub(super) fn cases() -> Vec<Case> {
    let mut out = reads();
    out.extend(writes());
    out.extend(metadata());
    out
}

fn leak(
    id: &'static str,
    description: &'static str,
    probe: &'static str,
    args: fn(&CaseContext<'_>) -> Vec<String>,
    expected: super::Expected,
) -> Case {
    case(id, READ, description, probe, args, expected).succeeds_if(Success::Leak)
}

fn reads() -> Vec<Case> {
    vec![
        leak(
            "read-canary",
            "read the canary outside the workspace",
            "read-text",
            |c| vec![c.canary()],
            landlock(EACCES),
        ),
        leak(
            "read-canary-openat2",
            "read the canary with openat2",
            "openat2",
            |c| vec![c.canary()],
            denied("openat2"),
        ),
        leak(
            "read-canary-dotdot",
            "read the canary by `..` from the workspace",
            "read-text",
            |_| vec!["../outside/canary.txt".to_owned()],
            landlock(EACCES),
        ),
        leak(
            "read-canary-symlink",
            "read the canary through a symlink in the workspace",
            "read-text",
            |c| vec![c.ins("to-canary")],
            landlock(EACCES),
        ),
        leak(
            "read-canary-hardlink",
            "hard-link the canary into the workspace, then read it",
            "link-read",
            |c| vec![c.canary(), c.ins("hard")],
            landlock(super::EXDEV),
        ),
        leak(
            "read-canary-proc-self-root",
            "read the canary through /proc/self/root",
            "read-text",
            |c| vec![format!("/proc/self/root{}", c.canary())],
            landlock(EACCES),
        ),
        leak(
            "read-canary-proc-victim-root",
            "read the canary through the victim's /proc/<pid>/root",
            "read-text",
            |c| vec![format!("/proc/{}/root{}", c.victim.pid, c.canary())],
            credentials(EACCES),
        ),
        case(
            "read-canary-symlink-race",
            READ,
            "swap a workspace symlink between a decoy and the canary while reading it (TOCTOU)",
            "read-race",
            |c| {
                vec![
                    c.ins("race"),
                    c.ins("file.txt"),
                    c.canary(),
                    "500".to_owned(),
                ]
            },
            landlock(EACCES),
        ),
        leak(
            "read-canary-by-handle",
            "open the canary by file handle (open_by_handle_at, the \"shocker\" escape)",
            "by-handle",
            |c| vec![c.canary()],
            denied("name_to_handle_at"),
        ),
        case(
            "list-outside-dir",
            READ,
            "list the directory outside the workspace",
            "list",
            |c| vec![arg(&c.fixture.outside())],
            landlock(EACCES),
        ),
        case(
            "read-victim-environ",
            READ,
            "read the victim's environment from /proc",
            "read-text",
            |c| vec![format!("/proc/{}/environ", c.victim.pid)],
            landlock(EACCES),
        ),
    ]
}

fn writes() -> Vec<Case> {
    let w = |id, description, probe, args: fn(&CaseContext<'_>) -> Vec<String>| {
        case(id, WRITE, description, probe, args, landlock(EACCES))
    };
    vec![
        w(
            "write-outside",
            "overwrite a file outside the workspace",
            "write",
            |c| vec![c.out("victim.txt")],
        ),
        w(
            "append-outside",
            "open a file outside the workspace for appending",
            "append",
            |c| vec![c.out("victim.txt")],
        ),
        w(
            "create-outside",
            "create a file outside the workspace",
            "create",
            |c| vec![c.out("new.txt")],
        ),
        w(
            "truncate-outside",
            "truncate a file outside the workspace",
            "truncate",
            |c| vec![c.out("victim.txt")],
        ),
        case(
            "rename-out-of-outside",
            WRITE,
            "move a file from outside into the workspace",
            "rename",
            |c| vec![c.out("victim.txt"), c.ins("stolen.txt")],
            landlock(EACCES),
        ),
        w(
            "rename-over-outside",
            "replace a file outside the workspace by renaming over it",
            "rename",
            |c| vec![c.ins("file.txt"), c.out("victim.txt")],
        ),
        case(
            "rename-exchange-outside",
            WRITE,
            "swap a workspace file with one outside (RENAME_EXCHANGE)",
            "rename-exchange",
            |c| vec![c.ins("file.txt"), c.out("victim.txt")],
            landlock(EACCES),
        ),
        w(
            "unlink-outside",
            "delete a file outside the workspace",
            "unlink",
            |c| vec![c.out("victim.txt")],
        ),
        w(
            "link-into-outside",
            "hard-link a workspace file into the outside directory",
            "link",
            |c| vec![c.ins("file.txt"), c.out("linked")],
        ),
        w(
            "symlink-outside",
            "create a symlink outside the workspace",
            "symlink",
            |c| vec![c.ins("file.txt"), c.out("sym")],
        ),
        w(
            "mkdir-outside",
            "create a directory outside the workspace",
            "mkdir",
            |c| vec![c.out("newdir")],
        ),
        w(
            "rmdir-outside",
            "remove a directory outside the workspace",
            "rmdir",
            |c| vec![c.out("dir")],
        ),
        w(
            "write-through-symlink",
            "write outside through a symlink in the workspace",
            "write",
            |c| vec![c.ins("to-victim")],
        ),
        w(
            "write-dotdot",
            "write outside by `..` from the workspace",
            "write",
            |c| vec![format!("../outside/{}/victim.txt", c.id)],
        ),
        w(
            "write-readonly-grant",
            "write a file under a read-only grant",
            "write",
            |c| vec![arg(&c.fixture.readonly().join("input.txt"))],
        ),
        w(
            "write-proc-self-mem",
            "write the probe's own memory through /proc/self/mem (ignores page protections)",
            "self-mem-write",
            |_| Vec::new(),
        ),
        w(
            "write-proc-self-attr",
            "set the probe's LSM label through /proc/self/attr/current",
            "write-at",
            |_| {
                vec![
                    "/proc/self/attr/current".into(),
                    "0".into(),
                    "unconfined".into(),
                ]
            },
        ),
        w(
            "write-proc-self-oom-score-adj",
            "make the probe immune to the OOM killer (oom_score_adj -1000)",
            "write-at",
            |_| {
                vec![
                    "/proc/self/oom_score_adj".into(),
                    "0".into(),
                    "-1000".into(),
                ]
            },
        ),
        w(
            "write-proc-self-setgroups",
            "write /proc/self/setgroups",
            "write-at",
            |_| vec!["/proc/self/setgroups".into(), "0".into(), "deny".into()],
        )
        .harmless("written from the initial user namespace, where the kernel refuses it (EPERM)"),
        w(
            "write-victim-proc-mem",
            "overwrite the victim's secret through /proc/<pid>/mem",
            "write-at",
            |c| {
                vec![
                    format!("/proc/{}/mem", c.victim.pid),
                    c.victim.addr.to_string(),
                    "pwned".into(),
                ]
            },
        ),
        w(
            "cgroup-escape",
            "move the probe into another cgroup (out of its caps) by writing cgroup.procs",
            "write-at",
            |c| vec![arg(&c.fixture.decoy_cgroup_procs()), "0".into(), "0".into()],
        ),
    ]
}

fn metadata() -> Vec<Case> {
    vec![
        case(
            "chmod-outside",
            WRITE,
            "make a file outside the workspace world-writable (Landlock does not check chmod)",
            "chmod",
            |c| vec![c.out("victim.txt"), "666".into()],
            denied("chmod"),
        ),
        case(
            "fchmod-readonly-grant",
            WRITE,
            "chmod a file opened under a read-only grant",
            "fchmod",
            |c| vec![arg(&c.fixture.readonly().join("input.txt")), "666".into()],
            denied("fchmod"),
        ),
        case(
            "setuid-bit-in-workspace",
            WRITE,
            "set the set-uid bit on a workspace file the tool (uid 0) owns",
            "chmod",
            |c| vec![c.ins("file.txt"), "4755".into()],
            denied("chmod"),
        ),
        case(
            "chown-outside",
            WRITE,
            "change the owner of a file outside the workspace",
            "chown",
            |c| vec![c.out("victim.txt"), "65534".into(), "65534".into()],
            denied("chown"),
        ),
        case(
            "utimes-outside",
            WRITE,
            "reset the times of a file outside the workspace (Landlock does not check it)",
            "utimes",
            |c| vec![c.out("victim.txt")],
            denied("utimensat"),
        ),
        case(
            "setxattr-outside",
            WRITE,
            "set an extended attribute on a file outside the workspace",
            "setxattr",
            |c| vec![c.out("victim.txt")],
            denied("setxattr"),
        ),
        case(
            "mknod-device",
            WRITE,
            "create a character device node in the workspace",
            "mknod-char",
            |c| vec![c.ins("dev")],
            denied("mknodat"),
        ),
        case(
            "mkfifo-outside",
            WRITE,
            "create a FIFO outside the workspace",
            "mkfifo",
            |c| vec![c.out("fifo")],
            denied("mknodat"),
        ),
    ]
}
