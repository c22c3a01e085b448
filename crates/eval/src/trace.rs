//! What happened to each flow of a bundle, read from its evidence: every proposal the
//! wrapper recorded is paired with the `tool_call` node the monitor committed for it
//! (the k-th proposal of an agent is its k-th `tool_call`), and its outcome — allowed,
//! blocked with the guards whose checks failed, or interrupted — is taken from that
//! node and its children.

use std::collections::HashMap;

use knox_harness::Origin;
use knox_types::aeg::{Node, NodeKind};
use knox_types::bundle::Bundle;
use knox_types::payload::{CheckDetail, CheckPayload, InterruptPayload};
use serde::Serialize;

use crate::EvalError;
use crate::scenario::AgentLog;

/// What the monitor did with one proposal, according to the evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    /// Allowed (and executed).
    Allowed,
    /// Blocked.
    Blocked,
    /// Interrupted by the stop guard.
    Interrupted {
        /// What fired (`action_cap`, `budget`, `timeout`, `signal`).
        cause: String,
    },
}

/// One proposal of a flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProposalTrace {
    /// Which planned call of the flow it is; `None` for a deviation.
    pub planned: Option<usize>,
    /// `plan`, `injection` or `model`.
    pub origin: &'static str,
    /// The proposed tool.
    pub tool: Option<String>,
    /// The outcome.
    pub outcome: Outcome,
    /// Guards whose checks failed (`trajectory`, `syscall`, `data_flow`, …).
    pub failed: Vec<String>,
    /// The proposed tool's toolkit, as the system-call check recorded it.
    pub toolkit: Option<String>,
    /// The regulation check's verdict and deciding policies, when one was recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regulation: Option<(String, Vec<String>)>,
    /// The `tool_call` node.
    pub node: u64,
}

impl ProposalTrace {
    /// Whether the check of `guard` failed on it.
    pub fn failed(&self, guard: &str) -> bool {
        self.failed.iter().any(|g| g == guard)
    }
}

/// Everything that happened to one flow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlowTrace {
    /// Its proposals, in order.
    pub proposals: Vec<ProposalTrace>,
    /// Its agent was interrupted before the flow proposed anything.
    pub stopped_before: bool,
    /// Its agent was interrupted at some point of the run.
    pub agent_interrupted: bool,
    /// The toolkits the bundle's APM authorizes (those its tasks' planned calls use).
    pub authorized: Vec<String>,
}

fn origin_name(o: Origin) -> &'static str {
    o.name()
}

/// Pairs the wrapper's `logs` with the bundle's evidence; one trace per flow (`flows`
/// flows, in task order).
pub fn traces(
    bundle: &Bundle,
    flows: usize,
    logs: &[AgentLog],
) -> Result<Vec<FlowTrace>, EvalError> {
    let mut children: HashMap<u64, Vec<&Node>> = HashMap::new();
    let mut calls: HashMap<&str, Vec<&Node>> = HashMap::new();
    for n in &bundle.nodes {
        if let Some(p) = n.parent {
            children.entry(p).or_default().push(n);
        }
        if n.kind == NodeKind::ToolCall {
            calls.entry(n.agent.as_str()).or_default().push(n);
        }
    }
    let instruction = |task: &u32| {
        bundle
            .apm
            .tasks
            .iter()
            .find(|t| t.id == *task)
            .map(|t| t.instruction.as_str())
    };
    let mut out = vec![
        FlowTrace {
            authorized: bundle.apm.guards.syscall.toolkits.iter().cloned().collect(),
            ..FlowTrace::default()
        };
        flows
    ];
    for log in logs {
        let agent = bundle
            .apm
            .agents
            .iter()
            .find(|a| {
                a.tasks.iter().map(instruction).collect::<Vec<_>>()
                    == log
                        .instructions
                        .iter()
                        .map(|s| Some(s.as_str()))
                        .collect::<Vec<_>>()
            })
            .ok_or_else(|| {
                EvalError::Invalid(format!(
                    "{}: no APM agent has the tasks {:?}",
                    bundle.run_id, log.instructions
                ))
            })?;
        let nodes = calls.get(agent.id.as_str()).map_or(&[][..], Vec::as_slice);
        if nodes.len() != log.proposals.len() {
            return Err(EvalError::Invalid(format!(
                "{} {}: {} proposals but {} tool_call nodes",
                bundle.run_id,
                agent.id,
                log.proposals.len(),
                nodes.len()
            )));
        }
        let mut interrupted = false;
        for (p, node) in log.proposals.iter().zip(nodes) {
            let (outcome, failed, toolkit, regulation) = outcome(node, &children);
            interrupted |= matches!(outcome, Outcome::Interrupted { .. });
            let Some(t) = p.flow.and_then(|f| out.get_mut(f)) else {
                continue;
            };
            t.proposals.push(ProposalTrace {
                planned: p.planned,
                origin: origin_name(p.origin),
                tool: p.tool.clone(),
                outcome,
                failed,
                toolkit,
                regulation,
                node: node.seq,
            });
        }
        if interrupted {
            let tasks: Vec<usize> = log
                .instructions
                .iter()
                .filter_map(|i| bundle.apm.tasks.iter().position(|t| t.instruction == *i))
                .collect();
            for i in tasks {
                if let Some(t) = out.get_mut(i) {
                    t.stopped_before |= t.proposals.is_empty();
                    t.agent_interrupted = true;
                }
            }
        }
    }
    Ok(out)
}

/// What one `tool_call` node's children say: outcome, failed guards, toolkit, and the
/// regulation verdict with its deciding policies.
type CallOutcome = (
    Outcome,
    Vec<String>,
    Option<String>,
    Option<(String, Vec<String>)>,
);

fn outcome(call: &Node, children: &HashMap<u64, Vec<&Node>>) -> CallOutcome {
    let checks: Vec<&Node> = children
        .get(&call.seq)
        .map(|c| {
            c.iter()
                .copied()
                .filter(|n| n.kind == NodeKind::Check)
                .collect()
        })
        .unwrap_or_default();
    let typed: Vec<&CheckPayload> = checks.iter().filter_map(|c| c.payload.check()).collect();
    let failed: Vec<String> = typed
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.guard.as_str().to_string())
        .collect();
    let toolkit = typed.iter().find_map(|c| match &c.detail {
        CheckDetail::Syscall { toolkit, .. } => Some(toolkit.clone()),
        _ => None,
    });
    let regulation = typed.iter().find_map(|c| match &c.detail {
        CheckDetail::Regulation {
            verdict, policies, ..
        } => Some((verdict.to_string(), policies.clone())),
        _ => None,
    });
    let interrupt = checks
        .iter()
        .filter_map(|c| children.get(&c.seq))
        .flatten()
        .find(|n| n.kind == NodeKind::Interrupt);
    let outcome = match interrupt {
        Some(i) => Outcome::Interrupted {
            cause: i
                .payload
                .get::<InterruptPayload>()
                .map_or_else(|_| "unknown".to_string(), |p| p.cause.as_str().to_string()),
        },
        None if call.allowed => Outcome::Allowed,
        None => Outcome::Blocked,
    };
    (outcome, failed, toolkit, regulation)
}
