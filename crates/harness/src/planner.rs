//! The dataset planner: each InjecAgent user case names the tool call that serves its
//! instruction.

use std::collections::HashMap;

use knox_agent::{Plan, PlanError, PlanRequest, PlannedCall, Planner, plan_from_table};
use knox_types::apm::ExpectedCall;
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
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        plan_from_table(
            request,
            |_, instruction| self.plans.get(instruction).map(Vec::as_slice),
            |task, (tool, params)| ExpectedCall::exact(task, tool.clone(), params.clone()),
        )
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
