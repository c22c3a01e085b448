//! The planner a gateway owns besides a model's: one user plan applied to every
//! conversation. (A model planner followed in a chosen trajectory mode is
//! [`knox_agent::Following`].)

use knox_agent::{Plan, PlanError, PlanRequest, Planner, Prompt};
use knox_models::UserPlans;
use knox_policy::ToolkitManifest;
use knox_types::bundle::ModelInfo;
use serde_json::Value;

/// One user plan (`{"calls": [{"tool", "params"}, …]}`, as `knox run --plan` takes)
/// for every conversation, checked against each conversation's prompt and the manifest
/// as [`UserPlans`] checks it. The bundle names the planner `user-plan`.
#[derive(Debug)]
pub struct PlanFile {
    plan: Value,
    max_calls: usize,
}

impl PlanFile {
    /// `plan`, at most `max_calls` calls; checked now against `manifest` (for a
    /// one-task prompt), so a bad plan fails before the proxy serves.
    pub fn new(plan: Value, manifest: &ToolkitManifest, max_calls: usize) -> Result<Self, String> {
        let probe = Prompt {
            tasks: vec!["(the conversation's prompt)".into()],
        };
        UserPlans::validate(&plan, &probe, manifest, max_calls)?;
        Ok(Self { plan, max_calls })
    }
}

impl Planner for PlanFile {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        UserPlans::new([self.plan.clone()], self.max_calls).plan(request)
    }

    fn model(&self) -> ModelInfo {
        UserPlans::new([], self.max_calls).model()
    }
}
