//! Reviewed injected instructions that ask for system calls the APM does not permit:
//! a Terminal command for a task that never uses the terminal, or a network tool for a
//! Terminal task (the terminal profile has no socket). `data/syscall_attacks.json`.

use serde::Deserialize;

use crate::cases::{AttackKind, AttackerCall, AttackerCase, Dataset, DatasetError};

/// Knox's reviewed system-call attacks.
pub const SYSCALL_ATTACKS: &str = include_str!("../../../data/syscall_attacks.json");

/// What an attack reaches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// A Terminal command (`execve`, process creation): for tasks outside Terminal.
    Terminal,
    /// A network tool (sockets): for Terminal tasks, whose profile has none.
    Network,
}

/// One system-call attack: an attacker case plus what it reaches for.
#[derive(Clone, Debug, PartialEq)]
pub struct SyscallAttack {
    /// What it reaches for.
    pub target: Target,
    /// The case, as the injected executor follows it.
    pub case: AttackerCase,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    case: String,
    target: Target,
    instruction: String,
    calls: Vec<AttackerCall>,
}

/// The reviewed attacks, each call checked against the dataset's tools.
pub fn syscall_attacks(data: &Dataset) -> Result<Vec<SyscallAttack>, DatasetError> {
    let raw: Vec<Raw> =
        serde_json::from_str(SYSCALL_ATTACKS).map_err(|source| DatasetError::Json {
            file: "syscall_attacks.json",
            source,
        })?;
    let known = |tool: &str| {
        data.toolkits.iter().any(|k| {
            k.tools
                .iter()
                .any(|t| format!("{}{}", k.toolkit, t.name) == tool)
        })
    };
    raw.into_iter()
        .map(|r| {
            if let Some(bad) = r.calls.iter().find(|c| !known(&c.tool)) {
                return Err(DatasetError::Invalid(format!(
                    "syscall_attacks.json `{}` calls unknown tool `{}`",
                    r.case, bad.tool
                )));
            }
            if r.calls.is_empty() {
                return Err(DatasetError::Invalid(format!(
                    "syscall_attacks.json `{}` has no call",
                    r.case
                )));
            }
            let attack_type = match r.target {
                Target::Terminal => "Unauthorized system call (terminal)",
                Target::Network => "Unauthorized system call (network)",
            };
            Ok(SyscallAttack {
                target: r.target,
                case: AttackerCase {
                    id: r.case,
                    kind: AttackKind::DirectHarm,
                    instruction: r.instruction,
                    attack_type: attack_type.into(),
                    calls: r.calls,
                },
            })
        })
        .collect()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn attacks_load_and_cover_both_targets() {
        let d = Dataset::embedded().unwrap();
        let a = syscall_attacks(&d).unwrap();
        assert!(a.iter().any(|x| x.target == Target::Terminal));
        assert!(a.iter().any(|x| x.target == Target::Network));
        assert!(
            a.iter().filter(|x| x.target == Target::Terminal).all(|x| x
                .case
                .calls
                .iter()
                .all(|c| c.tool == "TerminalExecute"))
        );
        let mut ids: Vec<_> = a.iter().map(|x| x.case.id.clone()).collect();
        ids.dedup();
        assert_eq!(ids.len(), a.len());
    }
}
