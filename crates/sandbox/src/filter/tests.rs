//! The compiled program against a plain-Rust reference decision, run by the
//! test interpreter on random inputs for random allowlists.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::bpf::interp::{SeccompData, run};

const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;

/// What the filter must decide, written out without [`rules`] or the assembler.
fn reference(allowed: &BTreeSet<String>, fallbacks: Fallbacks, d: &SeccompData) -> u32 {
    if d.arch != AUDIT_ARCH_X86_64 || d.nr >= 0x4000_0000 {
        return ret::KILL_PROCESS;
    }
    let Some(name) = i32::try_from(d.nr).ok().and_then(syscall_name) else {
        return ret::USER_NOTIF;
    };
    if name == "clone3" {
        return ret::ERRNO | 38;
    }
    let listed = allowed.contains(&name) || SANDBOX_INTERNAL.contains(&name.as_str());
    let signals = [
        "kill",
        "tkill",
        "tgkill",
        "rt_sigqueueinfo",
        "rt_tgsigqueueinfo",
        "pidfd_send_signal",
    ];
    if !listed
        || MEDIATED.contains(&name.as_str())
        || name == "openat2"
        || (fallbacks.truncate && name == "truncate")
        || (fallbacks.scope && signals.contains(&name.as_str()))
    {
        return ret::USER_NOTIF;
    }
    let [a0, a1, a2, a3, _, _] = d.args;
    let set_id = |mode: u64| mode & 0o6000 != 0;
    let creates = |flags: u64| flags & 0o100 != 0 || flags & 0o2000_0000 != 0;
    let namespaces = 0x7e02_0000_u64;
    let ok = match name.as_str() {
        "clone" => a0 & namespaces == 0,
        "socket" => [(1, 0), (2, 0), (2, 6), (10, 0), (10, 6)].contains(&(a0, a2)) && a1 & 0xf == 1,
        "socketpair" => a0 == 1 && matches!(a1 & 0xf, 1 | 5),
        "sendto" | "sendmmsg" => a3 & 0x2000_0000 == 0,
        "sendmsg" => a2 & 0x2000_0000 == 0,
        "prlimit64" => a0 == 0,
        "open" | "openat" => {
            let (flags, mode) = if name == "open" { (a1, a2) } else { (a2, a3) };
            let truncates_read_only = flags & 0o1000 != 0 && !matches!(flags & 3, 1 | 2);
            let makes_set_id = creates(flags) && set_id(mode);
            let notified = makes_set_id || (fallbacks.truncate && truncates_read_only);
            !notified
        }
        "chmod" | "fchmod" | "creat" | "mknod" => !set_id(a1),
        "fchmodat" | "fchmodat2" | "mknodat" => !set_id(a2),
        "fcntl" if fallbacks.scope => !matches!(a1 as u32, 8 | 15),
        "ioctl" if fallbacks.scope => !matches!(a1 as u32, 0x8901 | 0x8902),
        _ => true,
    };
    if ok { ret::ALLOW } else { ret::USER_NOTIF }
}

/// Names every allowlist draws from: the argument-checked and special calls, and
/// a spread of ordinary ones.
const POOL: [&str; 41] = [
    "open",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "creat",
    "mknod",
    "mknodat",
    "openat",
    "openat2",
    "truncate",
    "fcntl",
    "ioctl",
    "kill",
    "tgkill",
    "pidfd_send_signal",
    "read",
    "write",
    "openat",
    "close",
    "mmap",
    "clone",
    "clone3",
    "socket",
    "socketpair",
    "sendto",
    "sendmsg",
    "sendmmsg",
    "prlimit64",
    "execve",
    "execveat",
    "connect",
    "bind",
    "exit_group",
    "ptrace",
    "mount",
    "getpid",
    "futex",
    "rt_sigreturn",
    "file_setattr",
    "io_uring_setup",
];

fn allowlist() -> impl Strategy<Value = BTreeSet<String>> {
    let pool = proptest::sample::subsequence(POOL.to_vec(), 0..=POOL.len());
    // Plus random valid numbers, for trees of every size and shape.
    let extra = proptest::collection::vec(0_i32..470, 0..300);
    (pool, extra).prop_map(|(pool, extra)| {
        pool.into_iter()
            .map(str::to_owned)
            .chain(extra.into_iter().filter_map(syscall_name))
            .collect()
    })
}

fn number() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => proptest::sample::select(POOL.to_vec())
            .prop_map(|n| syscall_number(n).and_then(|n| u32::try_from(n).ok()).unwrap_or(0)),
        4 => 0_u32..480,
        1 => 0x4000_0000_u32..0x4000_0200,
        1 => any::<u32>(),
    ]
}

fn arch() -> impl Strategy<Value = u32> {
    prop_oneof![
        8 => Just(AUDIT_ARCH_X86_64),
        1 => prop_oneof![Just(AUDIT_ARCH_I386), Just(AUDIT_ARCH_AARCH64)],
        1 => any::<u32>(),
    ]
}

fn arg() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0_u64..12,
        1 => proptest::sample::select(vec![
            0x2000_0000_u64,
            0x1000_0000,
            0x0001_0000_0000,
            0x0002_0000_0001,
            0x8_0001,
            0x80_0001,
            0x1_0000_0002,
            0x4000_0011,
            u64::MAX,
            0o1000,
            0o1001,
            0o1002,
            0o1003,
            0o101_000,
            8,
            15,
            0x8901,
            0x8902,
            0x1_0000_8901,
            0xffff_ffff_0000_0008,
            0o100,
            0o1101,
            0o2020_0002,
            0o4755,
            0o2755,
            0o6000,
            0x1_0000_0644,
        ]),
        2 => any::<u64>(),
        // Small values with random high halves: the halves must both be compared.
        1 => (0_u64..12, any::<u32>()).prop_map(|(lo, hi)| lo | (u64::from(hi) << 32)),
    ]
}

fn input() -> impl Strategy<Value = SeccompData> {
    (
        number(),
        arch(),
        any::<u64>(),
        proptest::array::uniform6(arg()),
    )
        .prop_map(|(nr, arch, ip, args)| SeccompData { nr, arch, ip, args })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn program_decides_as_the_reference(
        allowed in allowlist(),
        inputs in proptest::collection::vec(input(), 1..32),
        leaf in 1_usize..9,
        truncate in any::<bool>(),
        scope in any::<bool>(),
    ) {
        let fallbacks = Fallbacks { truncate, scope };
        let program = build(&rules(&allowed, fallbacks).map_err(|e| TestCaseError::fail(e.to_string()))?, leaf)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for d in &inputs {
            let (action, _) = run(program.instructions(), d).map_err(TestCaseError::fail)?;
            prop_assert_eq!(action, reference(&allowed, fallbacks, d), "input {:?}", d);
        }
    }
}

fn x86(nr: &str, args: [u64; 6]) -> SeccompData {
    SeccompData {
        nr: syscall_number(nr)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX),
        arch: AUDIT_ARCH_X86_64,
        ip: 0,
        args,
    }
}

fn decide(allowed: &BTreeSet<String>, d: &SeccompData) -> Result<u32, String> {
    let program = program(allowed, Fallbacks::default()).map_err(|e| e.to_string())?;
    Ok(run(program.instructions(), d)?.0)
}

fn terminal() -> Result<BTreeSet<String>, String> {
    crate::policy::SandboxPolicy::for_families(&[crate::Family::Terminal], "/tmp")
        .map(|p| p.syscalls)
        .map_err(|e| e.to_string())
}

#[test]
fn names_and_numbers_agree() {
    assert_eq!(syscall_number("ptrace"), Some(101));
    assert_eq!(syscall_name(165).as_deref(), Some("mount"));
    assert_eq!(syscall_number("landlock_restrict_self"), Some(446));
    assert_eq!(syscall_number("no_such_call"), None);
    assert_eq!(syscall_name(-1), None);
}

#[test]
fn unknown_names_are_refused() {
    let allowed: BTreeSet<String> = ["read", "no_such_call"].map(String::from).into();
    assert!(matches!(
        program(&allowed, Fallbacks::default()),
        Err(FilterError::UnknownSyscall(n)) if n == "no_such_call"
    ));
}

#[test]
fn fixed_cases() -> Result<(), String> {
    let allowed: BTreeSet<String> = ["read", "clone", "socket", "execve", "prlimit64"]
        .map(String::from)
        .into();
    let cases = [
        (x86("read", [0; 6]), ret::ALLOW),
        (x86("write", [0; 6]), ret::ALLOW), // SANDBOX_INTERNAL
        (x86("ptrace", [0; 6]), ret::USER_NOTIF),
        (x86("execve", [0; 6]), ret::USER_NOTIF), // mediated
        (x86("clone3", [0; 6]), ret::ERRNO | 38),
        (x86("clone", [0x11, 0, 0, 0, 0, 0]), ret::ALLOW),
        (x86("clone", [0x1000_0011, 0, 0, 0, 0, 0]), ret::USER_NOTIF),
        (x86("socket", [2, 1, 0, 0, 0, 0]), ret::ALLOW),
        (x86("socket", [2, 0x8_0801, 6, 0, 0, 0]), ret::ALLOW),
        (x86("socket", [2, 2, 0, 0, 0, 0]), ret::USER_NOTIF), // UDP
        (x86("socket", [2, 1, 262, 0, 0, 0]), ret::USER_NOTIF), // MPTCP
        (
            x86("socket", [0x1_0000_0002, 1, 0, 0, 0, 0]),
            ret::USER_NOTIF,
        ),
        (x86("prlimit64", [0, 7, 0, 0, 0, 0]), ret::ALLOW),
        (x86("prlimit64", [1, 7, 0, 0, 0, 0]), ret::USER_NOTIF),
    ];
    for (d, expected) in cases {
        assert_eq!(decide(&allowed, &d)?, expected, "{d:?}");
    }
    let mut x32 = x86("read", [0; 6]);
    x32.nr |= X32_SYSCALL_BIT;
    assert_eq!(decide(&allowed, &x32)?, ret::KILL_PROCESS);
    let i386 = SeccompData {
        arch: AUDIT_ARCH_I386,
        ..x86("read", [0; 6])
    };
    assert_eq!(decide(&allowed, &i386)?, ret::KILL_PROCESS);
    Ok(())
}

#[test]
fn fallbacks_check_truncation_and_signal_owners() -> Result<(), String> {
    let allowed: BTreeSet<String> = ["openat", "truncate", "fcntl", "kill"]
        .map(String::from)
        .into();
    let both = Fallbacks {
        truncate: true,
        scope: true,
    };
    let program = program(&allowed, both).map_err(|e| e.to_string())?;
    let run1 = |d: SeccompData| run(program.instructions(), &d).map(|r| r.0);
    assert_eq!(
        run1(x86("openat", [0, 0, 0o1000, 0, 0, 0]))?,
        ret::USER_NOTIF
    );
    assert_eq!(run1(x86("openat", [0, 0, 0o1001, 0, 0, 0]))?, ret::ALLOW);
    assert_eq!(run1(x86("openat", [0, 0, 0o100, 0, 0, 0]))?, ret::ALLOW);
    assert_eq!(run1(x86("truncate", [0; 6]))?, ret::USER_NOTIF);
    assert_eq!(run1(x86("kill", [0; 6]))?, ret::USER_NOTIF);
    assert_eq!(run1(x86("fcntl", [3, 8, 0, 0, 0, 0]))?, ret::USER_NOTIF);
    // The high half of an `int` command is ignored by the kernel, so here too.
    assert_eq!(
        run1(x86("fcntl", [3, 0x7_0000_0008, 0, 0, 0, 0]))?,
        ret::USER_NOTIF
    );
    assert_eq!(run1(x86("fcntl", [3, 1, 0, 0, 0, 0]))?, ret::ALLOW);
    // Without fallbacks, all of them are plain allows.
    assert_eq!(
        decide(&allowed, &x86("openat", [0, 0, 0o1000, 0, 0, 0]))?,
        ret::ALLOW
    );
    assert_eq!(decide(&allowed, &x86("kill", [0; 6]))?, ret::ALLOW);
    Ok(())
}

#[test]
fn no_call_gives_a_file_a_set_id_bit() -> Result<(), String> {
    let allowed: BTreeSet<String> = ["open", "openat", "openat2", "chmod", "fchmodat", "mknodat"]
        .map(String::from)
        .into();
    let (creat, rdwr, tmpfile) = (0o101, 0o2, 0o2020_0002);
    let cases = [
        (x86("openat", [0, 0, creat, 0o644, 0, 0]), ret::ALLOW),
        (x86("openat", [0, 0, creat, 0o4755, 0, 0]), ret::USER_NOTIF),
        (
            x86("openat", [0, 0, tmpfile, 0o2755, 0, 0]),
            ret::USER_NOTIF,
        ),
        // Without O_CREAT the mode register is not read by the kernel, nor here.
        (x86("openat", [0, 0, rdwr, 0o4755, 0, 0]), ret::ALLOW),
        (x86("open", [0, creat, 0o6755, 0, 0, 0]), ret::USER_NOTIF),
        (x86("chmod", [0, 0o755, 0, 0, 0, 0]), ret::ALLOW),
        (x86("chmod", [0, 0o4755, 0, 0, 0, 0]), ret::USER_NOTIF),
        (x86("fchmodat", [0, 0, 0o2711, 0, 0, 0]), ret::USER_NOTIF),
        (
            x86("mknodat", [0, 0, 0o10_0000 | 0o4755, 0, 0, 0]),
            ret::USER_NOTIF,
        ),
        // Listed or not, `openat2`'s `struct open_how` cannot be read: notified.
        (x86("openat2", [0; 6]), ret::USER_NOTIF),
    ];
    for (d, expected) in cases {
        assert_eq!(decide(&allowed, &d)?, expected, "{d:?}");
    }
    Ok(())
}

#[test]
fn disassembly_shows_the_checks() -> Result<(), String> {
    let allowed: BTreeSet<String> = ["read", "clone", "socket"].map(String::from).into();
    let text = disassemble(&allowed, Fallbacks::default()).map_err(|e| e.to_string())?;
    assert!(text.starts_with("0000: ld   [arch]\n"), "{text}");
    assert!(text.contains("jeq  #0xc000003e"), "{text}");
    assert!(text.contains("jge  #0x40000000"), "{text}");
    assert!(text.contains("ret  KILL_PROCESS"), "{text}");
    assert!(text.contains("ret  USER_NOTIF"), "{text}");
    assert!(text.contains("ret  ERRNO(38)"), "{text}");
    assert!(text.contains("; clone3"), "{text}");
    assert!(text.contains("ld   [args[0].hi]"), "{text}");
    Ok(())
}

/// The whole x86_64 table in one filter compiles within the kernel's limit, its
/// jumps past 255 instructions going through trampolines, and decides right.
#[test]
fn large_programs_stay_correct() -> Result<(), String> {
    let everything: BTreeSet<String> = (0..470).filter_map(syscall_name).collect();
    let program = build(
        &rules(&everything, Fallbacks::default()).map_err(|e| e.to_string())?,
        1,
    )
    .map_err(|e| e.to_string())?;
    assert!(program.instructions().len() > 256);
    for name in &everything {
        let d = x86(name, [0; 6]);
        let (action, _) = run(program.instructions(), &d)?;
        assert_eq!(
            action,
            reference(&everything, Fallbacks::default(), &d),
            "{name}"
        );
    }
    Ok(())
}

/// Instructions executed for an allowed call of the `terminal` profile, per leaf
/// size (`LEAF`): printed for the README, and the chosen size must not be worse
/// than a plain chain by number.
#[test]
fn leaf_size_cost() -> Result<(), String> {
    let allowed = terminal()?;
    let rules = rules(&allowed, Fallbacks::default()).map_err(|e| e.to_string())?;
    let mut cost = Vec::new();
    for leaf in [1, 2, 4, 8, 16, usize::MAX] {
        let program = build(&rules, leaf).map_err(|e| e.to_string())?;
        let (mut total, mut worst) = (0, 0);
        for nr in rules.keys() {
            let d = SeccompData {
                nr: *nr,
                arch: AUDIT_ARCH_X86_64,
                ip: 0,
                args: [0; 6],
            };
            let steps = run(program.instructions(), &d)?.1;
            total += steps;
            worst = worst.max(steps);
        }
        let mean = total as f64 / rules.len() as f64;
        println!(
            "leaf {leaf:>20}: {} instructions, mean {mean:.1} executed, worst {worst}",
            program.instructions().len()
        );
        cost.push((leaf, mean));
    }
    let chosen = cost.iter().find(|(l, _)| *l == LEAF).map(|c| c.1);
    let chain = cost.last().map(|c| c.1);
    assert!(chosen < chain, "{cost:?}");
    Ok(())
}
