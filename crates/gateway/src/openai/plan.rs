//! Planners a gateway session owns: a model planner followed in a chosen trajectory mode,
//! and one user plan applied to every conversation.

use knox_agent::{Plan, PlanError, Planner, Prompt, Regulations};
use knox_models::UserPlans;
use knox_policy::ToolkitManifest;
use knox_types::apm::{StopPolicy, TrajectoryMode};
use knox_types::bundle::ModelInfo;
use serde_json::Value;

/// `inner`'s plans followed in `mode` (the owning counterpart of
/// [`knox_agent::Following`], which borrows its planner).
pub struct Followed {
    inner: Box<dyn Planner>,
    mode: TrajectoryMode,
}

impl Followed {
    /// `inner`, followed in `mode`.
    pub fn new(inner: Box<dyn Planner>, mode: TrajectoryMode) -> Self {
        Self { inner, mode }
    }
}

impl std::fmt::Debug for Followed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Followed")
            .field("planner", &self.inner.model().name)
            .field("mode", &self.mode)
            .finish()
    }
}

impl Planner for Followed {
    fn plan(
        &self,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        regulations: &Regulations,
        stop: &StopPolicy,
    ) -> Result<Plan, PlanError> {
        self.inner.plan(prompt, manifest, regulations, stop)
    }

    fn model(&self) -> ModelInfo {
        self.inner.model()
    }

    fn trajectory(&self) -> TrajectoryMode {
        self.mode
    }
}

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
    fn plan(
        &self,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        regulations: &Regulations,
        stop: &StopPolicy,
    ) -> Result<Plan, PlanError> {
        UserPlans::new([self.plan.clone()], self.max_calls).plan(
            prompt,
            manifest,
            regulations,
            stop,
        )
    }

    fn model(&self) -> ModelInfo {
        UserPlans::new([], self.max_calls).model()
    }
}
