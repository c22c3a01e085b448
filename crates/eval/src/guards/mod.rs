//! One module per guard. Each implements [`GuardEval`]: it generates its part of the
//! pool, configures the run of one bundle of its flows, and scores each flow from its
//! trace. The runner ([`crate::run`]) is the same for every guard.

pub mod regulation;
pub mod regulation_cases;
pub mod regulation_text;
pub mod stop;
pub mod syscall;
pub mod trajectory;

use std::time::Duration;

use knox_agent::Regulations;
use knox_harness::Workload;
use knox_policy::ToolkitManifest;
use knox_types::apm::StopPolicy;

use crate::EvalError;
pub use crate::generate::PoolContext;
use crate::pool::{Guard, GuardPool, PoolFlow};
use crate::score::Score;
use crate::trace::FlowTrace;

/// What configuring one bundle may look at.
#[derive(Debug, Clone, Copy)]
pub struct SetupContext<'a> {
    /// The toolkit manifest (tool costs, disclosure annotations).
    pub manifest: &'a ToolkitManifest,
    /// The workload the bundle runs under.
    pub workload: Workload,
    /// The stop flows' timeout.
    pub stop_timeout: Duration,
}

/// The guard-specific part of one bundle's run configuration.
#[derive(Default)]
pub struct BundleSetup {
    /// The stop policy (none by default).
    pub stop: StopPolicy,
    /// The regulations in force (none by default).
    pub regulations: Regulations,
    /// The regulation policy set deciding disclosures (by default none: every
    /// disclosure is flagged for manual review). It must be the set whose hash
    /// `regulations.policy_hash` names.
    pub norms: Option<std::sync::Arc<knox_regulation::Norms>>,
}

impl std::fmt::Debug for BundleSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundleSetup")
            .field("stop", &self.stop)
            .field("regulations", &self.regulations)
            .field("norms", &self.norms.is_some())
            .finish()
    }
}

/// One guard's part of the evaluation.
pub trait GuardEval: Send + Sync {
    /// Which guard.
    fn guard(&self) -> Guard;

    /// Its flows, generated deterministically from `cx.seed`, in pool order (bundles are
    /// consecutive runs of them); [`GuardPool::pending`] while the guard cannot be
    /// evaluated yet.
    fn pool(&self, cx: &PoolContext<'_>) -> Result<GuardPool, EvalError>;

    /// The order of a bundle's flows in its prompt (default: pool order).
    fn order<'f>(&self, bundle: &[&'f PoolFlow]) -> Vec<&'f PoolFlow> {
        bundle.to_vec()
    }

    /// The run configuration of one bundle (its flows in prompt order).
    fn setup(
        &self,
        _cx: &SetupContext<'_>,
        _bundle: &[&PoolFlow],
    ) -> Result<BundleSetup, EvalError> {
        Ok(BundleSetup::default())
    }

    /// Scores one flow from what the evidence shows happened to it.
    fn score(&self, flow: &PoolFlow, trace: &FlowTrace) -> Score;
}

/// Every guard, in the paper's order.
pub fn all() -> Vec<Box<dyn GuardEval>> {
    vec![
        Box::new(regulation::Regulation),
        Box::new(trajectory::Trajectory),
        Box::new(syscall::Syscall),
        Box::new(stop::Stop),
    ]
}
