//! The dataset planner: each InjecAgent user case names the tool call that serves its
//! instruction.

use std::collections::HashMap;

use knox_agent::{
    Plan, PlanError, PlannedCall, Planner, Prompt, Regulations, planned_entry, task_id, task_plan,
};
use knox_policy::ToolkitManifest;
use knox_types::apm::{ExpectedCall, StopPolicy};
use knox_types::bundle::{ModelInfo, ModelRole};

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
            let calls = task_plan(
                self.plans.get(instruction).map(Vec::as_slice),
                i,
                instruction,
            )?;
            let mut expected = Vec::with_capacity(calls.len());
            for (tool, params) in calls {
                planned_entry(manifest, tool, Some(params))?;
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
            role: ModelRole::Planner,
            name: "dataset".into(),
            weights_hash: None,
            declared: false,
        }
    }
}
