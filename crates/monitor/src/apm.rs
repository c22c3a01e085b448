//! Deriving and attesting the APM: `(p, C, R, stop) ↦ (T, Γ)`.

use std::collections::{BTreeSet, HashMap};

use crate::key::MonitorKey;
use knox_agent::{Plan, PlanError, PlanRequest, Planner, Prompt, Regulations, task_id};
use knox_policy::{ToolkitManifest, auth};
use knox_types::apm::{
    APM_VERSION, AgentPlan, Apm, ApmInputs, Closed, ExpectedCall, Guards, PlanningFailure,
    RegulationSpec, StopPolicy, TaskPlan, Topology, TopologyKind, TrajectoryMode,
};
use knox_types::bundle::{ApmAttestation, ApmStatement};
use knox_types::canon::CanonError;
use knox_types::digest::{Digest, tag};

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

/// Plans `prompt` and derives its APM for `topology`. When the planner fails (or plans
/// a bad data link), the APM is the [`refusal`] that records why and permits nothing,
/// so the run still ends in signed evidence; other errors (a topology that does not fit
/// the prompt, hashing) remain errors.
pub fn derive(
    prompt: &Prompt,
    manifest: &ToolkitManifest,
    regulations: &Regulations,
    stop: &StopPolicy,
    planner: &dyn Planner,
    topology: Topology,
) -> Result<Apm, ApmError> {
    let request = PlanRequest {
        prompt,
        manifest,
        regulations,
        stop,
    };
    let planned = planner
        .plan(&request)
        .map_err(ApmError::from)
        .and_then(|plan| from_plan(prompt, manifest, regulations, stop, plan, topology));
    let mut apm = match planned {
        Err(ApmError::Plan(e)) => refusal(prompt, manifest, regulations, stop, topology, &e),
        other => other,
    }?;
    apm.guards.trajectory = planner.trajectory();
    if apm.guards.trajectory.is_unplanned() && apm.planning.is_none() {
        // No plan names the toolkits the run needs: an unplanned run (bounded by its
        // contract) is authorized every toolkit of its manifest.
        let all: Vec<&str> = manifest.tools().map(|t| t.toolkit.as_str()).collect();
        apm.guards.syscall = auth::authorization(manifest, all);
    }
    // Decide on the APM the verifier will read back from its canonical bytes.
    Ok(knox_types::canon::normalized(&apm)?)
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
    check_links(&plan)?;
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
            contract: None,
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
            trajectory: TrajectoryMode::Exact,
            closed: Closed::ALL,
            remote: Vec::new(),
        },
        planning: None,
    })
}

/// Distributes tasks over agents (task `i` to agent `i mod m`) and orders each agent's
/// trajectory: tasks one after the other, or round-robin by position when interleaved.
/// A plan's data links (`from_output`) name a call of the same task; in the APM they
/// name the trajectory position that call lands on (the hash is recomputed).
fn assign(plan: &Plan, topology: Topology) -> Vec<AgentPlan> {
    let m = topology.agents.max(1);
    (0..m)
        .map(|a| {
            let mine: Vec<u32> = (0..plan.tasks.len())
                .map(task_id)
                .filter(|i| i % m == a)
                .collect();
            let calls = |t: u32| plan.tasks.get(t as usize).map_or(0, Vec::len);
            // (task, index of the call in its task), in trajectory order.
            let order: Vec<(u32, usize)> = if topology.kind == TopologyKind::MtSaInt {
                let longest = mine.iter().map(|t| calls(*t)).max().unwrap_or(0);
                (0..longest)
                    .flat_map(|k| {
                        mine.iter()
                            .filter(move |t| k < calls(**t))
                            .map(move |t| (*t, k))
                    })
                    .collect()
            } else {
                mine.iter()
                    .flat_map(|t| (0..calls(*t)).map(move |k| (*t, k)))
                    .collect()
            };
            let position: HashMap<(u32, usize), u32> = order
                .iter()
                .enumerate()
                .map(|(p, key)| (*key, task_id(p)))
                .collect();
            let trajectory = order
                .iter()
                .filter_map(|&(t, k)| {
                    Some(relink(plan.tasks.get(t as usize)?.get(k)?, t, &position))
                })
                .collect();
            AgentPlan {
                id: agent_id(a),
                tasks: mine,
                trajectory,
            }
        })
        .collect()
}

/// `e` with its task-relative data links rewritten to trajectory positions (and hashed
/// anew when one was).
fn relink(e: &ExpectedCall, task: u32, position: &HashMap<(u32, usize), u32>) -> ExpectedCall {
    let mut out = e.clone();
    let mut moved = false;
    let at = |call: u32| {
        position
            .get(&(task, call as usize))
            .copied()
            .unwrap_or(u32::MAX)
    };
    for c in out.constraints.iter_mut().flat_map(|c| c.values_mut()) {
        // `check_links` made sure each call exists and comes earlier.
        for call in c.linked_calls_mut() {
            *call = at(*call);
            moved = true;
        }
    }
    if moved {
        out.hash = out.compute_hash();
    }
    out
}

/// Every data link of a plan names an earlier call of the same task.
fn check_links(plan: &Plan) -> Result<(), PlanError> {
    for (t, calls) in plan.tasks.iter().enumerate() {
        for (k, e) in calls.iter().enumerate() {
            for (param, c) in e.constraints.iter().flatten() {
                if let Some(call) = c.linked_calls().iter().find(|call| **call as usize >= k) {
                    return Err(PlanError::Link {
                        task: t,
                        call: k,
                        param: param.clone(),
                        from: *call,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Signs the binding of the APM hash (`apm_hash = H(apm)`) to its inputs.
pub fn attest(
    apm: &Apm,
    apm_hash: Digest,
    key: MonitorKey<'_>,
) -> Result<ApmAttestation, CanonError> {
    attest_bound(apm, apm_hash, key, Bound::default())
}

/// What an APM attestation binds besides the APM and its inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bound<'a> {
    /// The platform evidence that binds the key (`H("knox/platform", evidence)`).
    pub platform: Option<&'a knox_types::bundle::PlatformEvidence>,
    /// The checkpoint cadence of the run's journal, when it keeps one.
    pub checkpoints: Option<knox_types::checkpoint::CheckpointPolicy>,
    /// The key id of the capability contract's authority, when the run has one.
    pub contract_authority: Option<Digest>,
}

/// [`attest`], also binding what `bound` gives: the platform evidence that binds `key`
/// (`H("knox/platform", evidence)`), as every run does, the checkpoint cadence of the
/// run's journal when it keeps one (journal format v4), and the capability contract's
/// authority when it has one.
pub fn attest_bound(
    apm: &Apm,
    apm_hash: Digest,
    key: MonitorKey<'_>,
    bound: Bound<'_>,
) -> Result<ApmAttestation, CanonError> {
    let Bound {
        platform,
        checkpoints,
        contract_authority,
    } = bound;
    let platform = platform
        .map(|p| Digest::of_json(knox_types::digest::tag::PLATFORM, p))
        .transpose()?;
    let statement = ApmStatement {
        apm_hash,
        inputs: apm.inputs.clone(),
        platform,
        checkpoints,
        contract_authority,
    };
    let envelope = knox_attest::dsse::sign(key.tee(), &statement.to_statement()?)?;
    Ok(ApmAttestation {
        statement,
        envelope,
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use std::collections::BTreeMap;

    use knox_types::apm::ParamConstraint;

    use serde_json::{Map, json};

    use super::*;

    fn search(task: u32) -> ExpectedCall {
        let p = json!({"keywords": ["invoice"]})
            .as_object()
            .cloned()
            .unwrap();
        ExpectedCall::exact(task, "GmailSearchEmails", p)
    }

    /// A read whose id comes from call `from` of its own task.
    fn read(task: u32, from: u32) -> ExpectedCall {
        let mut c = BTreeMap::new();
        c.insert(
            "email_id".to_string(),
            ParamConstraint::FromOutput {
                call: from,
                pointer: None,
            },
        );
        let p: Map<String, serde_json::Value> = json!({"email_id": "$output:0"})
            .as_object()
            .cloned()
            .unwrap();
        ExpectedCall::constrained(task, "GmailReadEmail", p, c)
    }

    fn linked(e: &ExpectedCall) -> u32 {
        match e.constraints.as_ref().unwrap()["email_id"] {
            ParamConstraint::FromOutput { call, .. } => call,
            _ => u32::MAX,
        }
    }

    fn plan() -> Plan {
        Plan {
            tasks: vec![vec![search(0), read(0, 0)], vec![search(1), read(1, 0)]],
        }
    }

    fn topo(kind: TopologyKind, agents: u32) -> Topology {
        Topology {
            kind,
            tasks: 2,
            agents,
        }
    }

    #[test]
    fn data_links_name_trajectory_positions() {
        // One after the other: task 1's search is at 2.
        let seq = assign(&plan(), topo(TopologyKind::MtSaSeq, 1));
        let t = &seq[0].trajectory;
        assert_eq!((linked(&t[1]), linked(&t[3])), (0, 2));
        // Interleaved: searches at 0 and 1, reads at 2 and 3.
        let int = assign(&plan(), topo(TopologyKind::MtSaInt, 1));
        let t = &int[0].trajectory;
        assert_eq!((t[2].task, linked(&t[2])), (0, 0));
        assert_eq!((t[3].task, linked(&t[3])), (1, 1));
        // One agent each: every link is to that agent's first call.
        let ma = assign(&plan(), topo(TopologyKind::MtMa, 2));
        assert!(ma.iter().all(|a| linked(&a.trajectory[1]) == 0));
        // The rewritten call is hashed anew.
        for a in seq.iter().chain(&int).chain(&ma) {
            assert!(a.trajectory.iter().all(|e| e.hash == e.compute_hash()));
        }
        assert_ne!(seq[0].trajectory[3].hash, read(1, 0).hash);
    }

    #[test]
    fn a_link_to_a_later_call_or_to_itself_is_refused() {
        for from in [1, 2] {
            let p = Plan {
                tasks: vec![vec![search(0), read(0, from)]],
            };
            let e = check_links(&p).unwrap_err();
            assert!(matches!(e, PlanError::Link { call: 1, .. }), "{e}");
        }
        assert!(check_links(&plan()).is_ok());
    }
}
