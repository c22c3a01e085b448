//! Process attacks on the fixture's victim, and ways out of the tool's process tree.

use super::super::{Case, CaseContext, CasePolicy, Expected, Layer, Success};
use super::{ENOSYS, EPERM, case, denied, landlock, v};

const PROC: &str = "process";

/// Tracing, reading, writing and signalling the victim; new sessions and namespaces by clone.
pub(super) fn cases() -> Vec<Case> {
    let p = |id, description, probe, args: fn(&CaseContext<'_>) -> Vec<String>, expected| {
        case(id, PROC, description, probe, args, expected)
    };
    vec![
        p(
            "ptrace-attach-victim",
            "PTRACE_ATTACH to the victim",
            "ptrace",
            |c| vec!["attach".into(), c.pid()],
            denied("ptrace"),
        ),
        p(
            "ptrace-seize-victim",
            "PTRACE_SEIZE the victim",
            "ptrace",
            |c| vec!["seize".into(), c.pid()],
            denied("ptrace"),
        ),
        p(
            "vm-readv-victim",
            "read the victim's secret with process_vm_readv",
            "vm-read",
            |c| vec![c.pid(), c.victim.addr.to_string(), c.victim.len.to_string()],
            denied("process_vm_readv"),
        )
        .succeeds_if(Success::Leak),
        p(
            "vm-writev-victim",
            "overwrite the victim's secret with process_vm_writev",
            "vm-write",
            |c| vec![c.pid(), c.victim.addr.to_string(), "pwned".into()],
            denied("process_vm_writev"),
        ),
        p(
            "kill-victim",
            "SIGKILL the victim (offline tools have no kill)",
            "kill",
            |c| vec![c.pid(), "9".into()],
            denied("kill"),
        ),
        p(
            "kill-victim-terminal",
            "SIGKILL the victim from a terminal tool, which may kill",
            "kill",
            |c| vec![c.pid(), "9".into()],
            landlock(EPERM),
        )
        .under(CasePolicy::Terminal),
        p(
            "kill-victim-group",
            "SIGKILL the victim's process group",
            "kill",
            |c| vec![format!("-{}", c.victim.pid), "9".into()],
            denied("kill"),
        ),
        p(
            "tgkill-victim",
            "SIGKILL the victim with tgkill (every tool may tgkill itself)",
            "tgkill",
            |c| vec![c.pid(), "9".into()],
            landlock(EPERM),
        ),
        p(
            "tkill-victim",
            "SIGKILL the victim with tkill",
            "tkill",
            |c| vec![c.pid(), "9".into()],
            denied("tkill"),
        ),
        p(
            "pidfd-signal-victim",
            "SIGKILL the victim through a pidfd",
            "pidfd-kill",
            |c| vec![c.pid(), "9".into()],
            denied("pidfd_open"),
        ),
        p(
            "sigqueue-victim",
            "queue SIGUSR1 (fatal by default) to the victim",
            "sigqueue",
            |c| vec![c.pid(), "10".into()],
            denied("rt_sigqueueinfo"),
        ),
        p(
            "sigio-victim",
            "make the kernel send the victim SIGTERM through F_SETOWN/F_SETSIG on a pipe",
            "sigio",
            |c| vec![c.pid()],
            Expected::Contained {
                layer: Layer::Landlock,
                check: "the victim survives",
            },
        )
        .succeeds_if(Success::FixtureOnly),
        p(
            "prlimit-victim",
            "lower the victim's descriptor limit",
            "prlimit-set",
            |c| vec![c.pid()],
            denied("prlimit64"),
        ),
        p(
            "renice-victim",
            "change the victim's scheduling priority",
            "setpriority",
            |c| vec![c.pid(), "19".into()],
            denied("setpriority"),
        ),
        p(
            "sched-fifo",
            "make the probe a real-time task (starves the machine when it spins)",
            "sched-fifo",
            |_| Vec::new(),
            denied("sched_setscheduler"),
        ),
        p(
            "setsid-escape",
            "start a new session, out of the process group the sandbox kills",
            "setsid",
            |_| Vec::new(),
            denied("setsid"),
        ),
        p(
            "clone-newuser",
            "clone into a new user namespace",
            "clone-flags",
            |_| v(["10000000"]),
            denied("clone"),
        ),
        p(
            "clone-newpid",
            "clone into a new pid namespace",
            "clone-flags",
            |_| v(["20000000"]),
            denied("clone"),
        ),
        p(
            "clone-newnet",
            "clone into a new network namespace",
            "clone-flags",
            |_| v(["40000000"]),
            denied("clone"),
        ),
        p(
            "clone3-newns",
            "clone3 (whose flags a filter cannot read) into a new mount namespace",
            "clone3",
            |_| v(["20000"]),
            Expected::Refused {
                errno: ENOSYS,
                layer: Layer::Filter,
            },
        ),
    ]
}
