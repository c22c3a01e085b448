//! Planners: from a prompt to per-task expected calls. The planner is a trait so that
//! a model-backed planner can replace a fixed one without touching the rest.

use knox_policy::ToolkitManifest;
use knox_types::apm::{ExpectedCall, StopPolicy, TrajectoryMode};
use knox_types::bundle::ModelInfo;
use knox_types::digest::Digest;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The user prompt `p`: the tasks it asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    /// One instruction per task.
    pub tasks: Vec<String>,
}

/// The planner's output: expected calls per task, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// `plan.tasks[i]` are task `i`'s expected calls. A data link
    /// (`ParamConstraint::FromOutput { call: k, .. }`) names call `k` of the same task,
    /// which must come earlier; the APM rewrites it to that call's trajectory position.
    pub tasks: Vec<Vec<ExpectedCall>>,
}

/// Why no plan was produced.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// The planner knows no plan for a task.
    #[error("no plan for task {task}: `{instruction}`")]
    NoPlan {
        /// Task index.
        task: usize,
        /// Its instruction.
        instruction: String,
    },
    /// A model planner gave no valid plan within its attempts.
    #[error("model planner: {0}")]
    Model(String),
    /// A data link names no earlier call of its task.
    #[error(
        "task {task}, call {call}: parameter `{param}` takes the output of call {from}, which is not an earlier call of the task"
    )]
    Link {
        /// Task index.
        task: usize,
        /// The linking call's index in its task.
        call: usize,
        /// The linked parameter.
        param: String,
        /// The call it names.
        from: u32,
    },
    /// A plan brought for a prompt has another number of tasks than the prompt.
    #[error("the plan has {planned} task(s), the prompt {prompt}")]
    Tasks {
        /// The plan's tasks.
        planned: usize,
        /// The prompt's tasks.
        prompt: usize,
    },
    /// The plan names a tool the manifest does not have.
    #[error("plan names unknown tool `{0}`")]
    UnknownTool(String),
    /// The plan's parameters violate the tool's schema.
    #[error("plan call to `{tool}`: {error}")]
    Schema {
        /// Tool.
        tool: String,
        /// Fault.
        error: knox_policy::schema::SchemaError,
    },
}

/// What a planner is asked to plan: the prompt `p`, the tools `C`, the regulations `R`
/// and the stop policy in force.
#[derive(Clone, Copy, Debug)]
pub struct PlanRequest<'a> {
    /// The user's prompt.
    pub prompt: &'a Prompt,
    /// The tools the plan may call.
    pub manifest: &'a ToolkitManifest,
    /// The regulations in force.
    pub regulations: &'a Regulations,
    /// When the run stops.
    pub stop: &'a StopPolicy,
}

/// `(p, C, R, stop) ↦ T`.
pub trait Planner: Send + Sync {
    /// Plans the prompt.
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError>;

    /// Identifies the planner for proof of inference.
    fn model(&self) -> ModelInfo;

    /// How the monitor follows this planner's plans (the APM records it): exact unless
    /// the planner is wrapped in [`Following`].
    fn trajectory(&self) -> TrajectoryMode {
        TrajectoryMode::Exact
    }
}

/// The calls `plans` holds for task `i` of the prompt, its `instruction`: a planner
/// that has none for it refuses the whole prompt ([`PlanError::NoPlan`]).
pub fn task_plan<'p, C>(
    plans: Option<&'p [C]>,
    i: usize,
    instruction: &str,
) -> Result<&'p [C], PlanError> {
    plans.ok_or_else(|| PlanError::NoPlan {
        task: i,
        instruction: instruction.to_owned(),
    })
}

/// The manifest's entry for a planned call of `tool`; with `params` (an exact call),
/// checked against the tool's schema. Every planner checks its calls so: a plan naming
/// a tool the manifest lacks, or an exact call outside its tool's schema, is refused.
pub fn planned_entry<'m>(
    manifest: &'m ToolkitManifest,
    tool: &str,
    params: Option<&Map<String, Value>>,
) -> Result<&'m knox_policy::ToolEntry, PlanError> {
    let entry = manifest
        .tool(tool)
        .ok_or_else(|| PlanError::UnknownTool(tool.to_owned()))?;
    if let Some(params) = params {
        knox_policy::schema::validate(entry, params).map_err(|error| PlanError::Schema {
            tool: tool.to_owned(),
            error,
        })?;
    }
    Ok(entry)
}

/// The plan of a planner that holds its calls in a table: `calls(i, instruction)` are
/// task `i`'s planned calls (none: the planner has no plan for the task, and refuses
/// the whole prompt, [`PlanError::NoPlan`]), each turned into its expected call by
/// `expected(task, call)`. Every expected call is checked as [`planned_entry`] checks
/// one: its tool in the manifest and, when exact, its parameters within the tool's
/// schema.
pub fn plan_from_table<'t, C: 't>(
    request: &PlanRequest<'_>,
    calls: impl Fn(usize, &str) -> Option<&'t [C]>,
    mut expected: impl FnMut(u32, &C) -> ExpectedCall,
) -> Result<Plan, PlanError> {
    let mut tasks = Vec::with_capacity(request.prompt.tasks.len());
    for (i, instruction) in request.prompt.tasks.iter().enumerate() {
        let planned = task_plan(calls(i, instruction), i, instruction)?;
        let mut task = Vec::with_capacity(planned.len());
        for c in planned {
            let e = expected(task_id(i), c);
            planned_entry(
                request.manifest,
                &e.tool,
                e.constraints.is_none().then_some(&e.params),
            )?;
            task.push(e);
        }
        tasks.push(task);
    }
    Ok(Plan { tasks })
}

/// A planner whose plans are followed in the given trajectory mode (`knox run
/// --trajectory`): it plans as `inner` does.
pub struct Following<P: ?Sized = dyn Planner> {
    mode: TrajectoryMode,
    inner: P,
}

impl<P: Planner> Following<P> {
    /// `inner`'s plans, followed in `mode`.
    pub fn new(inner: P, mode: TrajectoryMode) -> Self {
        Self { mode, inner }
    }
}

impl<P: ?Sized> std::fmt::Debug for Following<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Following")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl<P: Planner + ?Sized> Planner for Following<P> {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        self.inner.plan(request)
    }

    fn model(&self) -> ModelInfo {
        self.inner.model()
    }

    fn trajectory(&self) -> TrajectoryMode {
        self.mode
    }
}

/// A planner behind a pointer plans as the planner it points to: a session takes a
/// `Box<dyn Planner>`, an `Arc` shared with other sessions, or a reference where it
/// takes a planner.
macro_rules! forward_planner {
    ($($ptr:ty),*) => {$(
        impl<P: Planner + ?Sized> Planner for $ptr {
            fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
                (**self).plan(request)
            }

            fn model(&self) -> ModelInfo {
                (**self).model()
            }

            fn trajectory(&self) -> TrajectoryMode {
                (**self).trajectory()
            }
        }
    )*};
}

forward_planner!(Box<P>, std::sync::Arc<P>, &P);

/// A planned call: full tool name and parameters.
pub type PlannedCall = (String, Map<String, Value>);

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

/// Task ids are their index; prompts never hold 2^32 tasks.
pub fn task_id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use knox_types::apm::ParamConstraint;
    use std::collections::HashMap;

    fn call(tool: &str, params: Value) -> PlannedCall {
        (tool.to_owned(), params.as_object().cloned().unwrap())
    }

    /// A table planner's plan of a two-task prompt (`read`, then `send`) from `rows`,
    /// each call made by `expected`.
    fn planned(
        rows: &[(&str, Vec<PlannedCall>)],
        expected: impl FnMut(u32, &PlannedCall) -> ExpectedCall,
    ) -> Result<Plan, PlanError> {
        let manifest = knox_policy::shipped::current().unwrap();
        let prompt = Prompt {
            tasks: vec!["read".into(), "send".into()],
        };
        let (regulations, stop) = (Regulations::default(), StopPolicy::default());
        let request = PlanRequest {
            prompt: &prompt,
            manifest: &manifest,
            regulations: &regulations,
            stop: &stop,
        };
        let table: HashMap<String, Vec<PlannedCall>> = rows
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        plan_from_table(
            &request,
            |_, instruction| table.get(instruction).map(Vec::as_slice),
            expected,
        )
    }

    fn exact(task: u32, (tool, params): &PlannedCall) -> ExpectedCall {
        ExpectedCall::exact(task, tool.clone(), params.clone())
    }

    #[test]
    fn a_table_plan_is_checked_call_by_call_and_a_task_without_one_refuses_the_prompt() {
        let read = call("GmailReadEmail", serde_json::json!({"email_id": "e1"}));
        let send = call(
            "GmailSendEmail",
            serde_json::json!({"to": "bob@example.com", "subject": "s", "body": "b"}),
        );
        let plan = planned(&[("read", vec![read.clone()]), ("send", vec![send])], exact).unwrap();
        assert_eq!(plan.tasks.len(), 2);
        assert_eq!((plan.tasks[0][0].task, plan.tasks[1][0].task), (0, 1));
        assert_eq!(plan.tasks[1][0].tool, "GmailSendEmail");

        // No plan for the second task: the whole prompt is refused, naming it.
        let e = planned(&[("read", vec![read.clone()])], exact).unwrap_err();
        assert!(matches!(e, PlanError::NoPlan { task: 1, .. }), "{e}");

        // A tool the manifest lacks, and an exact call outside its tool's schema.
        let nope = call("RootShell", serde_json::json!({}));
        let e = planned(&[("read", vec![read.clone()]), ("send", vec![nope])], exact);
        assert!(matches!(e, Err(PlanError::UnknownTool(t)) if t == "RootShell"));
        let bad = call(
            "GmailSendEmail",
            serde_json::json!({"to": 3, "subject": "s", "body": "b"}),
        );
        let e = planned(
            &[("read", vec![read.clone()]), ("send", vec![bad.clone()])],
            exact,
        );
        assert!(matches!(e, Err(PlanError::Schema { .. })), "{e:?}");

        // The same call with `to` bounded rather than fixed: its constraints, not the
        // example values, are what the monitor holds the call to, so only its tool is
        // checked.
        let bounded = |task, (tool, params): &PlannedCall| {
            ExpectedCall::bounded(task, tool.clone(), params.clone(), |k, _| {
                (k == "to").then_some(ParamConstraint::Length { min: 1, max: 64 })
            })
        };
        let plan = planned(&[("read", vec![read]), ("send", vec![bad])], bounded).unwrap();
        assert!(plan.tasks[1][0].constraints.is_some());
    }

    #[test]
    fn prompts_and_regulations_are_read_strictly_and_task_ids_saturate() {
        let p: Prompt = serde_json::from_str(r#"{"tasks":["a","b"]}"#).unwrap();
        assert_eq!(p.tasks, ["a", "b"]);
        assert!(serde_json::from_str::<Prompt>(r#"{"tasks":[],"extra":1}"#).is_err());
        let r = serde_json::to_value(Regulations::default()).unwrap();
        assert_eq!(r, serde_json::json!({"names": [], "policy_hash": null}));
        let back: Regulations = serde_json::from_value(r).unwrap();
        assert_eq!(back, Regulations::default());
        assert!(
            serde_json::from_str::<Regulations>(r#"{"names":[],"policy_hash":null,"x":0}"#)
                .is_err()
        );
        assert_eq!((task_id(0), task_id(7)), (0, 7));
        assert_eq!(task_id(usize::MAX), u32::MAX);
    }
}
