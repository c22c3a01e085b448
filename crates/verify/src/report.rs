//! The verifier's result: an outcome, the steps that led to it, and what the run did.

use std::fmt::{self, Write as _};

use serde::Serialize;

/// The three outcomes of the design, plus a refusal when the verifier cannot vouch for
/// the evidence's origin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Complete and untampered.
    Complete,
    /// Internally consistent but unfinished (no summary signature): accepted only as an
    /// integrity-checked prefix.
    Prefix,
    /// Tampered: the first offending node (when one can be named) and why.
    Tampered {
        /// Sequence number of the first offending node.
        node: Option<u64>,
        /// What is wrong.
        reason: String,
    },
    /// Consistent, but not accepted: the platform evidence or the policy inputs are not
    /// ones this verifier accepts.
    Refused {
        /// Why.
        reason: String,
    },
}

impl Outcome {
    /// Process exit code for this outcome (documented in `knox verify --help`).
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Complete => 0,
            Self::Tampered { .. } => 1,
            Self::Prefix => 2,
            Self::Refused { .. } => 3,
        }
    }

    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Prefix => "prefix",
            Self::Tampered { .. } => "tampered",
            Self::Refused { .. } => "refused",
        }
    }
}

/// One verification step (the paper's five, plus signatures).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// Step name.
    pub name: &'static str,
    /// `pass`, `fail`, `skipped` or `refused`.
    pub result: &'static str,
    /// What was found.
    pub detail: String,
}

/// A blocked action as the evidence records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockedAction {
    /// `tool_call` node.
    pub node: u64,
    /// Agent.
    pub agent: String,
    /// Tool, when the proposal named one.
    pub tool: Option<String>,
    /// Guard that blocked.
    pub guard: String,
    /// Reason.
    pub reason: String,
}

/// The verifier's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Outcome.
    pub outcome: Outcome,
    /// Run identifier.
    pub run_id: String,
    /// Platform evidence mode.
    pub platform: knox_types::bundle::PlatformMode,
    /// Whether hardware vouches for the signing key.
    pub hardware_backed: bool,
    /// Steps.
    pub steps: Vec<Step>,
    /// Nodes checked.
    pub nodes: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Executed actions.
    pub executed: u64,
    /// Blocked actions.
    pub blocked: Vec<BlockedAction>,
    /// Interrupts, as `agent: cause`.
    pub interrupts: Vec<String>,
    /// Disclosures whose regulation verdict was `not_applicable` (manual review).
    pub flagged_for_review: u64,
    /// How many bits the run's free choices in the tolerant trajectory mode carried at
    /// most (which step, repeat or order each call took where several were enabled),
    /// summed over its agents: `log2` of the product of the recorded `options`, rounded
    /// up, as the replay recomputed them. Absent when no call had a choice (or none was
    /// counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choice_bits: Option<u32>,
    /// Models, as `role=name (weights hash or none)`.
    pub models: Vec<String>,
    /// For a journal: how many nodes, from the first, a signed checkpoint authenticates
    /// (nodes `0..K`; the rest is an unauthenticated tail). 0 when no checkpoint was
    /// written (or verified), and for journals before version 3, which have none; absent
    /// for a bundle, whose signed summary covers every node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authenticated: Option<u64>,
    /// For a bundle of format v3 whose signature verified: its place in its key's chain
    /// of runs, for a reader of many bundles to find the runs left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_chain: Option<ChainLink>,
    /// The nonces (hex) of the approval tokens the run used: one per allowed call whose
    /// contract check accepted a token. A token is accepted once across runs: a reader
    /// of many bundles finds a reuse by a nonce in two of them (`knox verify A B …`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<String>,
    /// Things a reader should know that do not change the outcome.
    pub warnings: Vec<String>,
}

/// A verified run's place in its key's chain of runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChainLink {
    /// The id of the in-TEE key that signed the run: `H("knox/key", public key)`, hex.
    pub key: String,
    /// Its number in the key's chain (0 for the key's first sealed run).
    pub seq: u64,
    /// The previous run's seal digest (for run 0, the chain's start).
    pub prev: knox_types::Digest,
    /// This run's seal digest: what the key's next run names as `prev`.
    pub seal: knox_types::Digest,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "run {}: {}",
            self.run_id,
            self.outcome.name().to_uppercase()
        );
        match &self.outcome {
            Outcome::Tampered {
                node: Some(n),
                reason,
            } => {
                let _ = writeln!(s, "  first offending node: {n}: {reason}");
            }
            Outcome::Tampered { node: None, reason } | Outcome::Refused { reason } => {
                let _ = writeln!(s, "  {reason}");
            }
            _ => {}
        }
        let hw = if self.hardware_backed {
            "hardware-backed"
        } else {
            "NOT hardware-backed"
        };
        let _ = writeln!(s, "  platform evidence: {} ({hw})", self.platform);
        for st in &self.steps {
            let _ = writeln!(s, "  [{:<7}] {}: {}", st.result, st.name, st.detail);
        }
        let _ = writeln!(
            s,
            "  {} nodes, {} tool calls, {} executed, {} blocked, {} interrupts, {} flagged for review",
            self.nodes,
            self.tool_calls,
            self.executed,
            self.blocked.len(),
            self.interrupts.len(),
            self.flagged_for_review
        );
        if let Some(bits) = self.choice_bits {
            let _ = writeln!(
                s,
                "  free choices: at most {bits} bits (the tolerant trajectory's order and repeats)"
            );
        }
        match self.authenticated {
            Some(0) => {
                let _ = writeln!(
                    s,
                    "  authenticated: none of the {} nodes (no checkpoint signs any)",
                    self.nodes
                );
            }
            Some(k) => {
                let _ = writeln!(
                    s,
                    "  authenticated: {k} of the {} nodes (0..{k}, signed by a checkpoint); nodes {k}..{} ({}) an unauthenticated tail",
                    self.nodes,
                    self.nodes,
                    self.nodes.saturating_sub(k)
                );
            }
            None => {}
        }
        for b in &self.blocked {
            let tool = b.tool.as_deref().unwrap_or("<malformed>");
            let _ = writeln!(
                s,
                "  blocked node {} ({}, {}): {} — {}",
                b.node, b.agent, tool, b.guard, b.reason
            );
        }
        for i in &self.interrupts {
            let _ = writeln!(s, "  interrupt: {i}");
        }
        for m in &self.models {
            let _ = writeln!(s, "  model: {m}");
        }
        for w in &self.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
        f.write_str(&s)
    }
}
