//! Classic BPF for seccomp, in plain Rust: the instructions a filter uses, an
//! assembler that lays a program out backwards (so every jump is forward and its
//! distance known when it is emitted, with `ja` trampolines for the jumps past
//! 255 instructions that `jt`/`jf` cannot encode), and a disassembler for review.
//! A small interpreter (tests only) runs programs on `seccomp_data` inputs.

use std::fmt::Write as _;

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

// Opcode parts (`linux/bpf_common.h`).
const LD: u16 = 0x00;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const W: u16 = 0x00;
const ABS: u16 = 0x20;
const AND: u16 = 0x50;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JGE: u16 = 0x30;
const JSET: u16 = 0x40;
const K: u16 = 0x00;

/// `ld [k]`: load the 32-bit word at offset `k` of `seccomp_data`.
pub const LD_W_ABS: u16 = LD | W | ABS;
/// `and #k`.
pub const ALU_AND_K: u16 = ALU | AND | K;
/// `ja +k`.
pub const JMP_JA: u16 = JMP | JA;
/// `jeq #k, jt, jf`.
pub const JMP_JEQ_K: u16 = JMP | JEQ | K;
/// `jgt #k, jt, jf`.
pub const JMP_JGT_K: u16 = JMP | JGT | K;
/// `jge #k, jt, jf`.
pub const JMP_JGE_K: u16 = JMP | JGE | K;
/// `jset #k, jt, jf`.
pub const JMP_JSET_K: u16 = JMP | JSET | K;
/// `ret #k`.
pub const RET_K: u16 = RET | K;

/// Seccomp return values (`linux/seccomp.h`).
pub mod ret {
    /// Kill the whole process (`SIGSYS`).
    pub const KILL_PROCESS: u32 = 0x8000_0000;
    /// Fail with the errno in the low 16 bits.
    pub const ERRNO: u32 = 0x0005_0000;
    /// Notify the user-space listener.
    pub const USER_NOTIF: u32 = 0x7fc0_0000;
    /// Allow.
    pub const ALLOW: u32 = 0x7fff_0000;
}

/// Offsets in `struct seccomp_data`.
pub mod data {
    /// `nr` (int).
    pub const NR: u32 = 0;
    /// `arch` (u32).
    pub const ARCH: u32 = 4;
    /// Low 32 bits of argument `i` (little-endian x86_64).
    pub const fn arg_lo(i: u8) -> u32 {
        16 + 8 * i as u32
    }
    /// High 32 bits of argument `i`.
    pub const fn arg_hi(i: u8) -> u32 {
        arg_lo(i) + 4
    }
}

/// One classic-BPF instruction (`struct sock_filter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Instructions skipped when a conditional jump is taken.
    pub jt: u8,
    /// Instructions skipped when it is not.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

/// A position in a program being assembled, counted from its end (the first
/// instruction emitted is the last one of the program).
pub(crate) type Node = usize;

/// Why a program could not be assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the seccomp program needs {0} instructions; the kernel accepts at most 4096")]
pub struct TooLong(pub usize);

/// Assembles a program backwards: each emitting call takes the nodes it continues
/// to (already emitted) and returns its own node.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    /// Instructions in reverse order: index 0 is the program's last instruction.
    reversed: Vec<Insn>,
}

impl Assembler {
    /// The node of the next instruction emitted.
    fn here(&self) -> Node {
        self.reversed.len()
    }

    fn push(&mut self, insn: Insn) -> Node {
        self.reversed.push(insn);
        self.reversed.len() - 1
    }

    /// Instructions skipped by a jump placed at `here()` to reach `target`.
    fn distance(&self, target: Node) -> usize {
        self.here().saturating_sub(target).saturating_sub(1)
    }

    /// `ret #k`.
    pub(crate) fn ret(&mut self, k: u32) -> Node {
        self.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k,
        })
    }

    /// An unconditional jump to `target` (nothing if `target` is next anyway).
    pub(crate) fn goto(&mut self, target: Node) -> Node {
        let distance = self.distance(target);
        if distance == 0 {
            return target;
        }
        self.push(Insn {
            code: JMP_JA,
            jt: 0,
            jf: 0,
            k: u32::try_from(distance).unwrap_or(u32::MAX),
        })
    }

    /// A non-jump instruction followed by `next`.
    pub(crate) fn stmt(&mut self, code: u16, k: u32, next: Node) -> Node {
        self.goto(next);
        self.push(Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        })
    }

    /// A conditional jump; a target further than 255 instructions is reached
    /// through a `ja` emitted just before it.
    pub(crate) fn jump(&mut self, code: u16, k: u32, jt: Node, jf: Node) -> Node {
        if jt == jf {
            return self.goto(jt);
        }
        // The instruction will be at `here()` plus the trampolines emitted now.
        let near = |asm: &Self, target: Node, extra: usize| {
            asm.distance(target).saturating_add(extra) <= usize::from(u8::MAX)
        };
        let jf = if near(self, jf, 1) {
            jf
        } else {
            self.force_ja(jf)
        };
        let jt = if near(self, jt, 0) {
            jt
        } else {
            self.force_ja(jt)
        };
        let offset = |asm: &Self, t: Node| u8::try_from(asm.distance(t)).unwrap_or(u8::MAX);
        let insn = Insn {
            code,
            jt: offset(self, jt),
            jf: offset(self, jf),
            k,
        };
        self.push(insn)
    }

    /// A `ja` to `target`, or a copy of it when it is a `ret` (one instruction
    /// fewer executed).
    fn force_ja(&mut self, target: Node) -> Node {
        if let Some(insn) = self.reversed.get(target).filter(|i| i.code == RET_K) {
            let copy = *insn;
            return self.push(copy);
        }
        let distance = self.distance(target);
        self.push(Insn {
            code: JMP_JA,
            jt: 0,
            jf: 0,
            k: u32::try_from(distance).unwrap_or(u32::MAX),
        })
    }

    /// The program, first instruction first; `entry` must be the last node emitted.
    pub(crate) fn finish(mut self, entry: Node) -> Result<Vec<Insn>, TooLong> {
        self.goto(entry);
        if self.reversed.len() > MAX_INSNS {
            return Err(TooLong(self.reversed.len()));
        }
        self.reversed.reverse();
        Ok(self.reversed)
    }
}

/// A readable listing, one instruction a line with absolute jump targets;
/// `name` names the constant of a comparison made on the syscall number.
pub fn disassemble(program: &[Insn], name: impl Fn(u32) -> Option<String>) -> String {
    let mut out = String::new();
    let mut loaded = None;
    for (line, insn) in program.iter().enumerate() {
        let target = |skip: u32| line.saturating_add(1).saturating_add(skip as usize);
        let text = match insn.code {
            LD_W_ABS => {
                loaded = Some(insn.k);
                format!("ld   {}", field(insn.k))
            }
            ALU_AND_K => format!("and  #{:#x}", insn.k),
            JMP_JA => format!("ja   {:04}", target(insn.k)),
            JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K | JMP_JSET_K => {
                let op = match insn.code {
                    JMP_JEQ_K => "jeq ",
                    JMP_JGT_K => "jgt ",
                    JMP_JGE_K => "jge ",
                    _ => "jset",
                };
                let mut s = format!(
                    "{op} #{:#x}  true {:04}  false {:04}",
                    insn.k,
                    target(insn.jt.into()),
                    target(insn.jf.into())
                );
                if loaded == Some(data::NR)
                    && let Some(n) = name(insn.k)
                {
                    let _ = write!(s, "  ; {n}");
                }
                s
            }
            RET_K => format!("ret  {}", action(insn.k)),
            other => format!("?    code {other:#06x} k {:#x}", insn.k),
        };
        let _ = writeln!(out, "{line:04}: {text}");
    }
    out
}

fn field(offset: u32) -> String {
    match offset {
        data::NR => "[nr]".to_owned(),
        data::ARCH => "[arch]".to_owned(),
        o if (16..64).contains(&o) => {
            let half = if (o - 16) % 8 == 0 { "lo" } else { "hi" };
            format!("[args[{}].{half}]", (o - 16) / 8)
        }
        o => format!("[{o}]"),
    }
}

fn action(k: u32) -> String {
    match k & 0xffff_0000 {
        ret::KILL_PROCESS => "KILL_PROCESS".to_owned(),
        ret::USER_NOTIF => "USER_NOTIF".to_owned(),
        ret::ALLOW => "ALLOW".to_owned(),
        ret::ERRNO => format!("ERRNO({})", k & 0xffff),
        _ => format!("{k:#x}"),
    }
}

/// A classic-BPF interpreter for seccomp programs, for tests: checks what the
/// kernel's verifier checks for the instructions used here (forward jumps inside
/// the program, aligned loads inside `seccomp_data`, ending in `ret`).
#[cfg(test)]
pub(crate) mod interp {
    use super::*;

    /// The input a filter sees.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) struct SeccompData {
        pub(crate) nr: u32,
        pub(crate) arch: u32,
        pub(crate) ip: u64,
        pub(crate) args: [u64; 6],
    }

    impl SeccompData {
        fn word(&self, offset: u32) -> Option<u32> {
            let split = |v: u64, hi: bool| if hi { (v >> 32) as u32 } else { v as u32 };
            match offset {
                0 => Some(self.nr),
                4 => Some(self.arch),
                8 | 12 => Some(split(self.ip, offset == 12)),
                16..64 if offset.is_multiple_of(4) => {
                    let i = ((offset - 16) / 8) as usize;
                    self.args.get(i).map(|a| split(*a, offset % 8 == 4))
                }
                _ => None,
            }
        }
    }

    /// The returned action and the number of instructions executed.
    pub(crate) fn run(program: &[Insn], input: &SeccompData) -> Result<(u32, usize), String> {
        if program.is_empty() || program.len() > MAX_INSNS {
            return Err(format!("program length {}", program.len()));
        }
        let mut pc = 0_usize;
        let mut a = 0_u32;
        let mut steps = 0_usize;
        loop {
            let insn = program
                .get(pc)
                .ok_or_else(|| format!("fell off the end at {pc}"))?;
            steps += 1;
            let next = pc + 1;
            pc = match insn.code {
                LD_W_ABS => {
                    a = input
                        .word(insn.k)
                        .ok_or_else(|| format!("bad load offset {} at {pc}", insn.k))?;
                    next
                }
                ALU_AND_K => {
                    a &= insn.k;
                    next
                }
                JMP_JA => next + insn.k as usize,
                JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K | JMP_JSET_K => {
                    let taken = match insn.code {
                        JMP_JEQ_K => a == insn.k,
                        JMP_JGT_K => a > insn.k,
                        JMP_JGE_K => a >= insn.k,
                        _ => a & insn.k != 0,
                    };
                    next + usize::from(if taken { insn.jt } else { insn.jf })
                }
                RET_K => return Ok((insn.k, steps)),
                other => return Err(format!("unsupported opcode {other:#x} at {pc}")),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::interp::{SeccompData, run};
    use super::*;

    fn input(nr: u32) -> SeccompData {
        SeccompData {
            nr,
            arch: 0,
            ip: 0,
            args: [0; 6],
        }
    }

    #[test]
    fn far_targets_go_through_trampolines() -> Result<(), String> {
        let mut asm = Assembler::default();
        let seven = asm.ret(7);
        // Not a `ret`, which would be copied instead of jumped to.
        let far = asm.stmt(ALU_AND_K, u32::MAX, seven);
        // 300 instructions between the jump and its `true` target.
        let mut next = asm.ret(1);
        for _ in 0..300 {
            next = asm.stmt(ALU_AND_K, u32::MAX, next);
        }
        let jump = asm.jump(JMP_JEQ_K, 5, far, next);
        let entry = asm.stmt(LD_W_ABS, data::NR, jump);
        let program = asm.finish(entry).map_err(|e| e.to_string())?;
        assert!(program.iter().any(|i| i.code == JMP_JA), "no trampoline");
        assert_eq!(run(&program, &input(5))?.0, 7);
        assert_eq!(run(&program, &input(6))?.0, 1);
        Ok(())
    }

    #[test]
    fn too_long_is_refused() {
        let mut asm = Assembler::default();
        let mut next = asm.ret(0);
        for _ in 0..MAX_INSNS {
            next = asm.stmt(ALU_AND_K, 1, next);
        }
        assert_eq!(asm.finish(next), Err(TooLong(MAX_INSNS + 1)));
    }

    #[test]
    fn interpreter_rejects_what_the_kernel_would() {
        let bad_load = [
            Insn {
                code: LD_W_ABS,
                jt: 0,
                jf: 0,
                k: 64,
            },
            Insn {
                code: RET_K,
                jt: 0,
                jf: 0,
                k: 0,
            },
        ];
        assert!(run(&bad_load, &input(0)).is_err());
        let off_the_end = [Insn {
            code: JMP_JA,
            jt: 0,
            jf: 0,
            k: 3,
        }];
        assert!(run(&off_the_end, &input(0)).is_err());
    }

    #[test]
    fn disassembly_names_fields_targets_and_actions() {
        let mut asm = Assembler::default();
        let kill = asm.ret(ret::KILL_PROCESS);
        let errno = asm.ret(ret::ERRNO | 38);
        let jump = asm.jump(JMP_JEQ_K, 435, errno, kill);
        let entry = asm.stmt(LD_W_ABS, data::NR, jump);
        let program = asm.finish(entry).unwrap_or_default();
        let text = disassemble(&program, |k| (k == 435).then(|| "clone3".to_owned()));
        assert_eq!(
            text,
            "0000: ld   [nr]\n\
             0001: jeq  #0x1b3  true 0002  false 0003  ; clone3\n\
             0002: ret  ERRNO(38)\n\
             0003: ret  KILL_PROCESS\n"
        );
    }
}
