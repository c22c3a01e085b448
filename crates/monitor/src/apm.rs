//! Deriving and attesting the APM: `(p, C, R, stop) ↦ (T, Γ)`.

use std::collections::BTreeSet;

use knox_attest::TeeKey;
use knox_policy::{ToolkitManifest, auth};
use knox_types::apm::{
    APM_VERSION, AgentPlan, Apm, ApmInputs, ExpectedCall, Guards, PlanningFailure, RegulationSpec,
    StopPolicy, TaskPlan, Topology, TopologyKind,
};
use knox_types::bundle::{ApmAttestation, ApmStatement};
use knox_types::canon::CanonError;
use knox_types::digest::{Digest, tag};
use serde::{Deserialize, Serialize};

use crate::planner::{Plan, PlanError, Planner, Prompt, task_id};

/// The regulations `R` in force for a prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regulations {
    /// Names (`GDPR`, `HIPAA`).
    pub names: Vec<String>,
    /// Hash of the policy set deciding them, when configured.
    pub policy_hash: Option<Digest>,
    /// Recipient directory, consents, senders and purposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<knox_types::regulation::RegulationContext>,
}

impl Regulations {
    /// `names` decided by `norms`, with `context`.
    pub fn decided_by(
        names: Vec<String>,
        norms: &knox_regulation::Norms,
        context: knox_types::regulation::RegulationContext,
    ) -> Self {
        Self {
            names,
            policy_hash: Some(norms.hash()),
            context: Some(context),
        }
    }
}

/// Why no APM was produced.
#[derive(Debug, thiserror::Error)]
pub enum ApmError {
    /// The planner failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The topology does not fit the prompt.
    #[error(
        "topology {kind:?} ({tasks} tasks, {agents} agents) does not fit a prompt of {got} tasks"
    )]
    Topology {
        /// Kind.
        kind: TopologyKind,
        /// Tasks the topology expects.
        tasks: u32,
        /// Agents.
        agents: u32,
        /// Tasks in the prompt.
        got: usize,
    },
    /// Hashing failed.
    #[error(transparent)]
    Canon(#[from] CanonError),
}

/// Agent id of sub-agent `i`.
pub fn agent_id(i: u32) -> String {
    format!("agent-{i}")
}

/// Plans `prompt` and derives its APM for `topology`. A planner failure is an error
/// here; [`derive_or_refuse`] turns it into an APM that records it.
pub fn derive(
    prompt: &Prompt,
    manifest: &ToolkitManifest,
    regulations: &Regulations,
    stop: &StopPolicy,
    planner: &dyn Planner,
    topology: Topology,
) -> Result<Apm, ApmError> {
    let plan = planner.plan(prompt, manifest, regulations, stop)?;
    from_plan(prompt, manifest, regulations, stop, plan, topology)
}

/// Plans `prompt` and derives its APM; when the planner fails, the APM that records
/// the failure and permits nothing ([`refusal`]), so the run can still end in signed
/// evidence of why nothing ran. Other errors (a topology that does not fit the
/// prompt, hashing) remain errors.
pub fn derive_or_refuse(
    prompt: &Prompt,
    manifest: &ToolkitManifest,
    regulations: &Regulations,
    stop: &StopPolicy,
    planner: &dyn Planner,
    topology: Topology,
) -> Result<Apm, ApmError> {
    match derive(prompt, manifest, regulations, stop, planner, topology) {
        Err(ApmError::Plan(e)) => refusal(prompt, manifest, regulations, stop, topology, &e),
        other => other,
    }
}

/// The APM of a prompt whose planning failed with `error`: the prompt's tasks, the
/// sub-agents they would have gone to, every trajectory empty, `Auth` with no toolkit,
/// and the failure recorded in [`Apm::planning`].
pub fn refusal(
    prompt: &Prompt,
    manifest: &ToolkitManifest,
    regulations: &Regulations,
    stop: &StopPolicy,
    topology: Topology,
    error: &PlanError,
) -> Result<Apm, ApmError> {
    let empty = Plan {
        tasks: vec![Vec::new(); prompt.tasks.len()],
    };
    let mut apm = from_plan(prompt, manifest, regulations, stop, empty, topology)?;
    apm.planning = Some(PlanningFailure {
        reason: error.to_string(),
    });
    Ok(apm)
}

/// Derives the APM from an existing plan.
pub fn from_plan(
    prompt: &Prompt,
    manifest: &ToolkitManifest,
    regulations: &Regulations,
    stop: &StopPolicy,
    plan: Plan,
    topology: Topology,
) -> Result<Apm, ApmError> {
    let fits = topology.tasks as usize == prompt.tasks.len()
        && plan.tasks.len() == prompt.tasks.len()
        && topology.agents >= 1
        && topology.agents <= topology.tasks.max(1)
        && (topology.agents == 1 || topology.kind == TopologyKind::MtMa);
    if !fits {
        return Err(ApmError::Topology {
            kind: topology.kind,
            tasks: topology.tasks,
            agents: topology.agents,
            got: prompt.tasks.len(),
        });
    }
    let toolkits: BTreeSet<&str> = plan
        .tasks
        .iter()
        .flatten()
        .filter_map(|e| manifest.tool(&e.tool))
        .map(|t| t.toolkit.as_str())
        .collect();
    let authorization = auth::authorization(manifest, toolkits);
    let agents = assign(&plan, topology);
    let tasks = prompt
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| TaskPlan {
            id: task_id(i),
            instruction: t.clone(),
        })
        .collect();
    Ok(Apm {
        version: APM_VERSION,
        inputs: ApmInputs {
            prompt: Digest::of_json(tag::PROMPT, prompt)?,
            manifest: manifest.hash(),
            regulations: Digest::of_json(tag::REGULATIONS, regulations)?,
            stop: Digest::of_json(tag::STOP, stop)?,
        },
        topology,
        tasks,
        agents,
        guards: Guards {
            stop: stop.clone(),
            syscall: authorization,
            regulation: RegulationSpec {
                regulations: regulations.names.clone(),
                policy_hash: regulations.policy_hash,
                context: regulations.context.clone(),
            },
        },
        planning: None,
    })
}

/// Distributes tasks over agents (task `i` to agent `i mod m`) and orders each agent's
/// trajectory: tasks one after the other, or round-robin by position when interleaved.
fn assign(plan: &Plan, topology: Topology) -> Vec<AgentPlan> {
    let m = topology.agents.max(1);
    (0..m)
        .map(|a| {
            let mine: Vec<(u32, &Vec<ExpectedCall>)> = plan
                .tasks
                .iter()
                .enumerate()
                .filter(|(i, _)| task_id(*i) % m == a)
                .map(|(i, calls)| (task_id(i), calls))
                .collect();
            let trajectory = if topology.kind == TopologyKind::MtSaInt {
                interleave(mine.iter().map(|(_, c)| c.as_slice()))
            } else {
                mine.iter().flat_map(|(_, c)| c.iter().cloned()).collect()
            };
            AgentPlan {
                id: agent_id(a),
                tasks: mine.iter().map(|(i, _)| *i).collect(),
                trajectory,
            }
        })
        .collect()
}

/// Round-robin: first call of each task, then the second of each, …
fn interleave<'a>(tasks: impl Iterator<Item = &'a [ExpectedCall]> + Clone) -> Vec<ExpectedCall> {
    let longest = tasks.clone().map(<[ExpectedCall]>::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|k| tasks.clone().filter_map(move |t| t.get(k).cloned()))
        .collect()
}

/// Signs the binding of the APM hash (`apm_hash = H(apm)`) to its inputs.
pub fn attest(apm: &Apm, apm_hash: Digest, key: &TeeKey) -> Result<ApmAttestation, CanonError> {
    let statement = ApmStatement {
        apm_hash,
        inputs: apm.inputs.clone(),
    };
    let envelope = knox_attest::dsse::sign(key, &statement.to_statement()?)?;
    Ok(ApmAttestation {
        statement,
        envelope,
    })
}
