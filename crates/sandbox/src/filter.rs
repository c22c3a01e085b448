//! Compiles a policy's syscall allowlist into a seccomp-BPF program whose default is user notification.

//!
//! The program is built here, in plain Rust (no libseccomp): an architecture
//! check, the x32 check, then a binary search tree over the numbers of the calls
//! the policy lists (see [`compile`] for the leaves), with the argument checks of
//! [`rules`] compiled as comparisons of the two 32-bit halves of each argument.

use std::collections::{BTreeMap, BTreeSet};

use syscalls::x86_64::Sysno;

use crate::bpf::{self, Assembler, Insn, Node, data, ret};
use crate::sys;

/// System calls that always reach the supervisor, even when the policy lists them,
/// so that their denials are recorded with decoded arguments. The supervisor lets
/// an authorized call continue (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`) — safe here only
/// because Landlock enforces the same rule in the kernel after the check (the
/// argument memory can change between the check and the call; Landlock's cannot).
pub const MEDIATED: [&str; 4] = ["execve", "execveat", "connect", "bind"];

/// System calls the child makes between installing the filter and `execve`:
/// reporting the listener fd, and reporting an `execve` failure before exiting.
/// Allowed whatever the policy says; every tool needs them anyway.
pub const SANDBOX_INTERNAL: [&str; 2] = ["write", "exit_group"];

/// `clone` flags that create namespaces; `clone` with any of them is denied.
const CLONE_NAMESPACE_FLAGS: u64 = 0x0002_0000 // CLONE_NEWNS
    | 0x0200_0000 // CLONE_NEWCGROUP
    | 0x0400_0000 // CLONE_NEWUTS
    | 0x0800_0000 // CLONE_NEWIPC
    | 0x1000_0000 // CLONE_NEWUSER
    | 0x2000_0000 // CLONE_NEWPID
    | 0x4000_0000; // CLONE_NEWNET

const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const SOCK_SEQPACKET: u64 = 5;
const SOCK_STREAM: u64 = 1;
const IPPROTO_TCP: u64 = 6;
const MSG_FASTOPEN: u64 = 0x2000_0000;
const SOCK_TYPE_MASK: u64 = 0xf;
const S_ISUID: u64 = 0o4000;
const S_ISGID: u64 = 0o2000;
const O_CREAT: u64 = 0o100;
/// `__O_TMPFILE` (`O_TMPFILE` is it with `O_DIRECTORY`): creates an unnamed file.
const O_TMPFILE_BIT: u64 = 0o2000_0000;
const ENOSYS: u16 = 38;
/// `AUDIT_ARCH_X86_64` (`EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`).
pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// System call numbers with this bit set are the x32 ABI's.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// Calls per leaf of the search tree: a leaf is a chain of `jeq`s. Measured with
/// the interpreter on the `terminal` profile (see the README): 4 gives the
/// fewest instructions executed on average for an allowed call.
const LEAF: usize = 4;

/// Signal-sending calls: notified when Landlock cannot scope signals (ABI < 6),
/// so that the supervisor lets only signals to the tool's own process through.
pub const SIGNAL_CALLS: [&str; 6] = [
    "kill",
    "tkill",
    "tgkill",
    "rt_sigqueueinfo",
    "rt_tgsigqueueinfo",
    "pidfd_send_signal",
];

const O_ACCMODE: u64 = 3;
const O_WRONLY: u64 = 1;
const O_RDWR: u64 = 2;
const O_TRUNC: u64 = 0o1000;
const F_SETOWN: u64 = 8;
const F_SETOWN_EX: u64 = 15;
const FIOSETOWN: u64 = 0x8901;
const SIOCSPGRP: u64 = 0x8902;
/// `int`/`unsigned int` arguments: the kernel ignores the high half, so a check
/// that denies must ignore it too.
const LOW: u64 = 0xffff_ffff;

/// What the filter enforces because Landlock (at the ABI in use) cannot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Fallbacks {
    /// ABI < 3 (no `Truncate`): `truncate` and `openat2` are notified, and
    /// `open`/`openat` with `O_TRUNC` only allowed with write access (which
    /// Landlock checks).
    pub truncate: bool,
    /// ABI < 6 (no scoping): [`SIGNAL_CALLS`] are notified (the supervisor lets
    /// signals to the tool's own process continue), and setting the owner of a
    /// file for `SIGIO` (`F_SETOWN`, `F_SETOWN_EX`, `FIOSETOWN`, `SIOCSPGRP`) is
    /// notified and denied.
    pub scope: bool,
}

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// A name is not an x86_64 system call.
    #[error("unknown system call `{0}`")]
    UnknownSyscall(String),
    /// The program is longer than the kernel accepts.
    #[error(transparent)]
    TooLong(#[from] bpf::TooLong),
}

/// The x86_64 number of a system call name (table of the `syscalls` crate,
/// generated from the kernel's `syscall_64.tbl`).
pub fn syscall_number(name: &str) -> Option<i32> {
    name.parse::<Sysno>().ok().map(|s| s.id())
}

/// The x86_64 name of a system call number.
pub fn syscall_name(nr: i32) -> Option<String> {
    let nr = usize::try_from(nr).ok()?;
    Sysno::new(nr).map(|s| s.name().to_owned())
}

/// One argument check: `(args[arg] & mask) == value`, on all 64 bits (libseccomp's
/// `SCMP_CMP_MASKED_EQ`; `SCMP_CMP_EQ` is a full mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgCheck {
    /// Argument index, 0..=5.
    pub arg: u8,
    /// Bits compared.
    pub mask: u64,
    /// Value they must have.
    pub value: u64,
}

impl ArgCheck {
    const fn equal(arg: u8, value: u64) -> Self {
        Self {
            arg,
            mask: u64::MAX,
            value,
        }
    }

    const fn masked(arg: u8, mask: u64, value: u64) -> Self {
        Self { arg, mask, value }
    }
}

/// What the filter does with one listed system call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Allowed whatever its arguments.
    Allow,
    /// Allowed when every check of at least one clause holds; notified otherwise.
    AllowIf(Vec<Vec<ArgCheck>>),
    /// Notified when every check of at least one clause holds; allowed otherwise.
    DenyIf(Vec<Vec<ArgCheck>>),
    /// Notified when every check of some `deny` clause holds; otherwise allowed when
    /// every check of some `allow` clause holds, notified when none does.
    DenyIfElseAllowIf {
        /// Clauses that notify.
        deny: Vec<Vec<ArgCheck>>,
        /// Clauses that allow what no `deny` clause notified.
        allow: Vec<Vec<ArgCheck>>,
    },
    /// Fails with this errno, unrecorded.
    Errno(u16),
}

/// The rule of every system call the filter does not simply notify, by number:
///
/// - default action (not in the map): user notification (the supervisor records
///   and answers `EPERM`);
/// - listed calls: allow, except [`MEDIATED`] ones (notified) and these argument-checked ones:
///   `clone` without namespace flags, `socket` for stream sockets only (`AF_UNIX`, TCP
///   over IPv4/IPv6, protocol 0 or TCP: no datagram can be sent to an address no rule
///   covers, no MPTCP or SCTP socket escapes Landlock's TCP rules), `sendto`,
///   `sendmsg` and `sendmmsg` without `MSG_FASTOPEN` (a connect no one checks),
///   `prlimit64` on the caller itself; the calls that set a file's mode (`chmod`,
///   `fchmod`, `fchmodat`, `fchmodat2`, `creat`, `mknod`, `mknodat`, and `open`/`openat`
///   creating a file) only without the set-user-id and set-group-id bits (see
///   [`set_id_modes`]);
/// - `clone3`: `ENOSYS`, so the C library falls back to `clone`, whose flags a filter can read;
/// - `openat2`: notified whatever the policy lists: its flags and mode lie in a
///   structure no filter can read.
///
/// With [`Fallbacks`], some calls Landlock would check are notified or argument-checked instead.
pub fn rules(
    allowed: &BTreeSet<String>,
    fallbacks: Fallbacks,
) -> Result<BTreeMap<u32, Rule>, FilterError> {
    let mut rules = BTreeMap::new();
    for name in allowed.iter().map(String::as_str).chain(SANDBOX_INTERNAL) {
        let nr = lookup(name)?;
        let notified = MEDIATED.contains(&name)
            || matches!(name, "clone3" | "openat2")
            || (fallbacks.truncate && name == "truncate")
            || (fallbacks.scope && SIGNAL_CALLS.contains(&name));
        if notified {
            continue;
        }
        rules.insert(nr, rule(name, fallbacks));
    }
    rules.insert(lookup("clone3")?, Rule::Errno(ENOSYS));
    Ok(rules)
}

fn lookup(name: &str) -> Result<u32, FilterError> {
    syscall_number(name)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| FilterError::UnknownSyscall(name.to_owned()))
}

/// Clauses that hold when argument `mode` carries the set-user-id or the
/// set-group-id bit, each joined with `also` (a file is created, for `open`).
///
/// A confined tool never makes a set-id file: where it writes through an idmapped
/// mount ([`crate::idmap`]), what it creates is owned on disk by the directory's
/// owner (root, or a user), and a set-id bit there would hand that identity to
/// whoever runs the file outside the sandbox; elsewhere it would hand out the
/// tools' own identity. A `mode_t` is 32 bits; the masks read only its low half.
fn set_id_modes(mode: u8, also: &[ArgCheck]) -> Vec<Vec<ArgCheck>> {
    [S_ISUID, S_ISGID]
        .map(|bit| {
            also.iter()
                .copied()
                .chain([ArgCheck::masked(mode, bit, bit)])
                .collect()
        })
        .into()
}

fn rule(name: &str, fallbacks: Fallbacks) -> Rule {
    match name {
        "open" | "openat" => {
            let (flags, mode) = if name == "open" { (1, 2) } else { (2, 3) };
            // The mode counts only when a file is created (it is garbage otherwise).
            let deny = [O_CREAT, O_TMPFILE_BIT]
                .into_iter()
                .flat_map(|creates| {
                    set_id_modes(mode, &[ArgCheck::masked(flags, creates, creates)])
                })
                .collect();
            if !fallbacks.truncate {
                return Rule::DenyIf(deny);
            }
            // Before ABI 3, Landlock does not check `O_TRUNC` on a file opened
            // read-only: only truncation with write access (checked) is allowed.
            let access = O_TRUNC | O_ACCMODE;
            Rule::DenyIfElseAllowIf {
                deny,
                allow: vec![
                    vec![ArgCheck::masked(flags, O_TRUNC, 0)],
                    vec![ArgCheck::masked(flags, access, O_TRUNC | O_WRONLY)],
                    vec![ArgCheck::masked(flags, access, O_TRUNC | O_RDWR)],
                ],
            }
        }
        "chmod" | "fchmod" | "creat" | "mknod" => Rule::DenyIf(set_id_modes(1, &[])),
        "fchmodat" | "fchmodat2" | "mknodat" => Rule::DenyIf(set_id_modes(2, &[])),
        "fcntl" if fallbacks.scope => Rule::DenyIf(vec![
            vec![ArgCheck::masked(1, LOW, F_SETOWN)],
            vec![ArgCheck::masked(1, LOW, F_SETOWN_EX)],
        ]),
        "ioctl" if fallbacks.scope => Rule::DenyIf(vec![
            vec![ArgCheck::masked(1, LOW, FIOSETOWN)],
            vec![ArgCheck::masked(1, LOW, SIOCSPGRP)],
        ]),
        "clone" => Rule::AllowIf(vec![vec![ArgCheck::masked(0, CLONE_NAMESPACE_FLAGS, 0)]]),
        "socket" => {
            // The protocol is checked too: `IPPROTO_MPTCP` (and SCTP) stream sockets
            // are not TCP to Landlock, which then does not check their ports.
            let stream = ArgCheck::masked(1, SOCK_TYPE_MASK, SOCK_STREAM);
            let clauses = [
                (AF_UNIX, 0),
                (AF_INET, 0),
                (AF_INET, IPPROTO_TCP),
                (AF_INET6, 0),
                (AF_INET6, IPPROTO_TCP),
            ]
            .map(|(domain, protocol)| {
                vec![
                    ArgCheck::equal(0, domain),
                    stream,
                    ArgCheck::equal(2, protocol),
                ]
            });
            Rule::AllowIf(clauses.into())
        }
        // A connected pair within the process (asyncio's self-pipe; Rust's and glibc's
        // process spawning pass descriptors over a sequenced-packet pair): UNIX stream
        // or sequenced-packet pairs only, both connection-oriented, so no datagram
        // socket can `sendto` a pathname socket (`/dev/log`), which Landlock does not
        // check before ABI 9.
        "socketpair" => Rule::AllowIf(
            [SOCK_STREAM, SOCK_SEQPACKET]
                .map(|ty| {
                    vec![
                        ArgCheck::equal(0, AF_UNIX),
                        ArgCheck::masked(1, SOCK_TYPE_MASK, ty),
                    ]
                })
                .into(),
        ),
        "sendto" | "sendmsg" | "sendmmsg" => {
            // TCP Fast Open connects inside `sendto`/`sendmsg`, where neither the
            // supervisor nor Landlock (ABI 7) checks the port: such a send is
            // notified (denied and recorded) instead.
            let flags_arg = if name == "sendmsg" { 2 } else { 3 };
            Rule::AllowIf(vec![vec![ArgCheck::masked(flags_arg, MSG_FASTOPEN, 0)]])
        }
        // Only its own limits: a tool running as uid 0 without capabilities
        // could otherwise lower the limits of any other uid-0 process.
        "prlimit64" => Rule::AllowIf(vec![vec![ArgCheck::equal(0, 0)]]),
        _ => Rule::Allow,
    }
}

/// A compiled seccomp program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
}

impl Program {
    /// The instructions, first first.
    pub fn instructions(&self) -> &[Insn] {
        &self.insns
    }

    /// One line per instruction, with absolute jump targets and the names of the
    /// system calls compared, for review and tests.
    pub fn disassemble(&self) -> String {
        bpf::disassemble(&self.insns, |nr| {
            i32::try_from(nr).ok().and_then(syscall_name)
        })
    }
}

/// Builds the program for `allowed` (the [`rules`], plus: architecture other than
/// x86_64, and x32 numbers (bit `0x40000000`), kill the process). The numbers
/// with a rule are looked up in a binary search tree of `jge` whose leaves are
/// chains of at most [`LEAF`] `jeq`: about 9 instructions for a call of a
/// 200-call profile instead of up to 200 in a list.
pub fn program(allowed: &BTreeSet<String>, fallbacks: Fallbacks) -> Result<Program, FilterError> {
    build(&rules(allowed, fallbacks)?, LEAF)
}

fn build(rules: &BTreeMap<u32, Rule>, leaf: usize) -> Result<Program, FilterError> {
    let mut asm = Assembler::default();
    let notify = asm.ret(ret::USER_NOTIF);
    let allow = asm.ret(ret::ALLOW);
    let kill = asm.ret(ret::KILL_PROCESS);
    let mut errno: BTreeMap<u16, Node> = BTreeMap::new();
    let mut entries = Vec::with_capacity(rules.len());
    for (&nr, rule) in rules {
        let node = match rule {
            Rule::Allow => allow,
            Rule::Errno(e) => *errno
                .entry(*e)
                .or_insert_with(|| asm.ret(ret::ERRNO | u32::from(*e))),
            Rule::AllowIf(clauses) => clauses_to(&mut asm, clauses, allow, notify),
            Rule::DenyIf(clauses) => clauses_to(&mut asm, clauses, notify, allow),
            Rule::DenyIfElseAllowIf {
                deny,
                allow: clauses,
            } => {
                let otherwise = clauses_to(&mut asm, clauses, allow, notify);
                clauses_to(&mut asm, deny, notify, otherwise)
            }
        };
        entries.push((nr, node));
    }
    let tree = search_tree(&mut asm, &entries, notify, leaf.max(1));
    let x32 = asm.jump(bpf::JMP_JGE_K, X32_SYSCALL_BIT, kill, tree);
    let load_nr = asm.stmt(bpf::LD_W_ABS, data::NR, x32);
    let arch = asm.jump(bpf::JMP_JEQ_K, AUDIT_ARCH_X86_64, load_nr, kill);
    let entry = asm.stmt(bpf::LD_W_ABS, data::ARCH, arch);
    Ok(Program {
        insns: asm.finish(entry)?,
    })
}

/// Goes to `matched` if every check of some clause holds, else to `otherwise`.
fn clauses_to(
    asm: &mut Assembler,
    clauses: &[Vec<ArgCheck>],
    matched: Node,
    otherwise: Node,
) -> Node {
    clauses.iter().rev().fold(otherwise, |fail, clause| {
        clause
            .iter()
            .rev()
            .fold(matched, |pass, check| arg_check(asm, *check, pass, fail))
    })
}

/// `(arg & mask) == value` on both 32-bit halves; goes on to `pass` or `fail`.
fn arg_check(asm: &mut Assembler, check: ArgCheck, pass: Node, fail: Node) -> Node {
    if check.value & !check.mask != 0 {
        return fail; // can never hold
    }
    let halves = [
        (
            data::arg_lo(check.arg),
            check.mask as u32,
            check.value as u32,
        ),
        (
            data::arg_hi(check.arg),
            (check.mask >> 32) as u32,
            (check.value >> 32) as u32,
        ),
    ];
    // Emitted backwards: the low half is checked after the high half.
    halves
        .into_iter()
        .fold(pass, |next, (offset, mask, value)| {
            if mask == 0 {
                return next;
            }
            let mut node = asm.jump(bpf::JMP_JEQ_K, value, next, fail);
            if mask != u32::MAX {
                node = asm.stmt(bpf::ALU_AND_K, mask, node);
            }
            asm.stmt(bpf::LD_W_ABS, offset, node)
        })
}

/// Dispatches on the syscall number (in the accumulator) to each entry's node;
/// numbers with no entry go to `default`.
fn search_tree(asm: &mut Assembler, entries: &[(u32, Node)], default: Node, leaf: usize) -> Node {
    if entries.len() <= leaf {
        return entries.iter().rev().fold(default, |next, &(nr, node)| {
            asm.jump(bpf::JMP_JEQ_K, nr, node, next)
        });
    }
    let (low, high) = entries.split_at(entries.len() / 2);
    let Some(&(pivot, _)) = high.first() else {
        return default;
    };
    let right = search_tree(asm, high, default, leaf);
    let left = search_tree(asm, low, default, leaf);
    asm.jump(bpf::JMP_JGE_K, pivot, right, left)
}

/// The program for `allowed`, ready to install.
pub(crate) fn compile(
    allowed: &BTreeSet<String>,
    fallbacks: Fallbacks,
) -> Result<sys::BpfProgram, FilterError> {
    Ok(sys::BpfProgram::new(
        program(allowed, fallbacks)?.instructions(),
    ))
}

/// The filter's disassembly ([`Program::disassemble`]), for review and for tests.
pub fn disassemble(
    allowed: &BTreeSet<String>,
    fallbacks: Fallbacks,
) -> Result<String, FilterError> {
    Ok(program(allowed, fallbacks)?.disassemble())
}

#[cfg(test)]
mod tests;
