//! Planners: from a prompt to per-task expected calls. The planner is a trait so that
//! a model-backed planner can replace the dataset planner without touching the rest.

use std::collections::HashMap;

use knox_policy::ToolkitManifest;
use knox_types::apm::{ExpectedCall, StopPolicy};
use knox_types::bundle::ModelInfo;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::apm::Regulations;

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

/// `(p, C, R, stop) ↦ T`.
pub trait Planner: Send + Sync {
    /// Plans the prompt.
    fn plan(
        &self,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        regulations: &Regulations,
        stop: &StopPolicy,
    ) -> Result<Plan, PlanError>;

    /// Identifies the planner for proof of inference.
    fn model(&self) -> ModelInfo;
}

/// A planned call: full tool name and parameters.
pub type PlannedCall = (String, Map<String, Value>);

/// Takes plans from the dataset: each InjecAgent user case names the tool call that
/// serves its instruction.
#[derive(Clone, Debug, Default)]
pub struct DatasetPlanner {
    plans: HashMap<String, Vec<PlannedCall>>,
}

impl DatasetPlanner {
    /// A planner knowing the user cases of `data`.
    pub fn new(data: &knox_dataset::Dataset) -> Self {
        let mut p = Self::default();
        for u in &data.user_cases {
            p.insert(
                u.instruction.clone(),
                vec![(u.tool.clone(), u.params.clone())],
            );
        }
        p
    }

    /// Adds (or replaces) the plan for an instruction.
    pub fn insert(&mut self, instruction: String, calls: Vec<PlannedCall>) {
        self.plans.insert(instruction, calls);
    }
}

impl Planner for DatasetPlanner {
    fn plan(
        &self,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        _: &Regulations,
        _: &StopPolicy,
    ) -> Result<Plan, PlanError> {
        let mut tasks = Vec::with_capacity(prompt.tasks.len());
        for (i, instruction) in prompt.tasks.iter().enumerate() {
            let calls = self
                .plans
                .get(instruction)
                .ok_or_else(|| PlanError::NoPlan {
                    task: i,
                    instruction: instruction.clone(),
                })?;
            let mut expected = Vec::with_capacity(calls.len());
            for (tool, params) in calls {
                let entry = manifest
                    .tool(tool)
                    .ok_or_else(|| PlanError::UnknownTool(tool.clone()))?;
                knox_policy::schema::validate(entry, params).map_err(|error| {
                    PlanError::Schema {
                        tool: tool.clone(),
                        error,
                    }
                })?;
                expected.push(ExpectedCall::exact(
                    task_id(i),
                    tool.clone(),
                    params.clone(),
                ));
            }
            tasks.push(expected);
        }
        Ok(Plan { tasks })
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: "planner".into(),
            name: "dataset".into(),
            weights_hash: None,
            declared: false,
        }
    }
}

/// Task ids are their index; prompts never hold 2^32 tasks.
pub(crate) fn task_id(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}
