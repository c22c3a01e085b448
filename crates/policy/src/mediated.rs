//! The guards evaluated on a well-formed action — trajectory, mediated system calls,
//! data flow — computed once, here, for both the monitor (which records them) and the
//! verifier (which recomputes and compares them).

use std::collections::{BTreeSet, HashMap};

use knox_types::Action;
use knox_types::apm::{Authorization, ExpectedCall};
use knox_types::digest::Digest;
use knox_types::payload::{CheckDetail, CheckPayload, GuardKind};
use serde_json::Value;

use crate::auth;
use crate::dataflow::{self, Tainted};
use crate::manifest::ToolEntry;
use crate::trajectory::{self, RegexCache};

/// Per-run memo: compiled constraint patterns, and `needs − Auth` per tool (Auth is fixed
/// for a run).
#[derive(Debug, Default)]
pub struct Caches {
    regexes: RegexCache,
    missing: HashMap<String, BTreeSet<String>>,
}

/// What one agent has seen, as these guards need it.
#[derive(Clone, Copy)]
pub struct AgentView<'a> {
    /// `e_j`, when the trajectory has one at the pointer.
    pub expected: Option<&'a ExpectedCall>,
    /// Output of the agent's executed trajectory call `k`.
    pub outputs: &'a dyn Fn(u32) -> Option<Value>,
    /// Untrusted outputs the agent received.
    pub tainted: &'a [Tainted<'a>],
    /// The prompt's task instructions.
    pub prompt: &'a [&'a str],
    /// The trajectory check when the caller decided it (the tolerant mode's automaton);
    /// `None`: `action` is compared with `expected`.
    pub trajectory: Option<&'a trajectory::Outcome>,
}

impl std::fmt::Debug for AgentView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentView")
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

/// The trajectory, syscall and (for tools with sinks) data-flow checks of `action`,
/// in evaluation order.
pub fn checks(
    entry: &ToolEntry,
    action: &Action,
    action_hash: &Digest,
    auth: &Authorization,
    view: AgentView<'_>,
    caches: &mut Caches,
) -> Vec<CheckPayload> {
    let t = match view.trajectory {
        Some(t) => t.clone(),
        None => trajectory::check(
            view.expected,
            action,
            action_hash,
            view.outputs,
            &mut caches.regexes,
        ),
    };
    let mut out = vec![CheckPayload {
        guard: GuardKind::Trajectory,
        passed: t.matched,
        detail: CheckDetail::Trajectory {
            mode: t.mode.into(),
            params: t.params,
            reason: t.reason,
        },
    }];
    let missing = caches
        .missing
        .entry(entry.name.clone())
        .or_insert_with(|| auth::missing(&entry.needs, auth))
        .clone();
    out.push(CheckPayload {
        guard: GuardKind::Syscall,
        passed: missing.is_empty(),
        detail: CheckDetail::Syscall {
            toolkit: entry.toolkit.clone(),
            needs: entry.needs_hash,
            missing,
        },
    });
    if !entry.annotations.sinks.is_empty() {
        let sinks = dataflow::check(
            &entry.annotations.sinks,
            action,
            view.expected,
            view.prompt,
            view.tainted,
        );
        out.push(CheckPayload {
            guard: GuardKind::DataFlow,
            passed: dataflow::passes(&sinks),
            detail: CheckDetail::DataFlow { sinks },
        });
    }
    out
}

/// Why a failed check blocks, in words for the `block_reason` (`position` is the
/// trajectory pointer); `None` for a passed check.
pub fn block_reason(check: &CheckPayload, position: u32) -> Option<String> {
    if check.passed {
        return None;
    }
    Some(match &check.detail {
        CheckDetail::Trajectory { reason, .. } => {
            format!(
                "off trajectory at position {position}: {}",
                reason.as_deref().unwrap_or("mismatch")
            )
        }
        CheckDetail::Syscall { missing, .. } => {
            let list: Vec<&str> = missing.iter().map(String::as_str).take(8).collect();
            format!("needs outside Auth: {}", list.join(", "))
        }
        CheckDetail::DataFlow { sinks } => {
            match sinks.iter().find(|c| c.source.is_some() && !c.authorized) {
                Some(bad) => format!(
                    "untrusted value in sink `{}` (from tool_output node {})",
                    bad.param,
                    bad.source.unwrap_or_default()
                ),
                None => "untrusted value in a sink".into(),
            }
        }
        CheckDetail::Regulation { policies, .. } => {
            format!("non-compliant: {}", policies.join(", "))
        }
        CheckDetail::Input { error } => format!(
            "malformed proposal: {}",
            error.as_deref().unwrap_or_default()
        ),
        CheckDetail::Stop { .. } => "interrupted".into(),
    })
}
