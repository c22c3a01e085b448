//! Bundles of InjecAgent flows run end to end under the monitor, and the ground truth
//! of their counts.

use std::ops::Deref;
use std::time::Instant;

use knox_agent::Prompt;
use knox_attest::platform::PlatformBackend;
use knox_dataset::{Dataset, Flow};
use knox_monitor::run::{RunConfig, RunError, RunOutcome, RunStats, Runtime, Tally, run_prompt};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use serde_json::Value;

use crate::executor::Origin;
use crate::tools::SimulatedTools;
use crate::workload::Workload;

/// Errors that prevent a harness run.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The run itself failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The embedded or given data is invalid.
    #[error(transparent)]
    Dataset(#[from] knox_dataset::cases::DatasetError),
    /// A bundle needs at least one flow per task.
    #[error("bundle needs {need} flows, got {got}")]
    Flows {
        /// Needed.
        need: usize,
        /// Given.
        got: usize,
    },
    /// A workload needs more flows than it was given.
    #[error("workload `{workload}` needs at least {need} flows, got {got}: raise --flows")]
    TooFewFlows {
        /// The workload's spec.
        workload: String,
        /// Flows needed (the workload's task count).
        need: usize,
        /// Flows drawn.
        got: usize,
    },
    /// A suite's shipped manifest does not load.
    #[error(transparent)]
    Manifest(#[from] knox_policy::ManifestError),
    /// The reviewed terminal tasks could not be read.
    #[error("data/terminal_tasks.json")]
    TerminalTasks(#[source] serde_json::Error),
    /// The session could not be built or a run through it failed.
    #[error(transparent)]
    Engine(#[from] Box<knox_engine::EngineError>),
}

impl From<knox_engine::EngineError> for HarnessError {
    fn from(e: knox_engine::EngineError) -> Self {
        Self::Engine(Box::new(e))
    }
}

impl HarnessError {
    /// Whether the caller's own choices are at fault (too few flows, a session missing
    /// a piece), as opposed to the environment or a bug.
    pub fn is_usage(&self) -> bool {
        match self {
            Self::TooFewFlows { .. } => true,
            Self::Engine(e) => e.is_usage(),
            _ => false,
        }
    }
}

/// The monitor's [`Runtime`] with the InjecAgent dataset beside it. It dereferences to
/// the runtime, so it serves wherever one is asked for.
#[derive(Debug)]
pub struct Harness {
    /// The key, its platform evidence and the manifest.
    pub rt: Runtime,
    /// The dataset.
    pub data: Dataset,
}

impl Deref for Harness {
    type Target = Runtime;

    fn deref(&self) -> &Runtime {
        &self.rt
    }
}

impl Harness {
    /// Generates the key and binds it through `backend`, with the regulator-supplied
    /// epoch `nonce`, for runs over `data` and `manifest`.
    pub fn start(
        backend: &dyn PlatformBackend,
        nonce: &[u8],
        data: Dataset,
        manifest: ToolkitManifest,
    ) -> Result<Self, HarnessError> {
        let rt = Runtime::start(backend, nonce, manifest)?;
        Ok(Self { rt, data })
    }

    /// The embedded dataset and the shipped InjecAgent manifest, bound through
    /// `backend`.
    pub fn embedded(backend: &dyn PlatformBackend, nonce: &[u8]) -> Result<Self, HarnessError> {
        let data = Dataset::embedded()?;
        let manifest = knox_policy::shipped::current().map_err(RunError::from)?;
        Self::start(backend, nonce, data, manifest)
    }

    /// The embedded dataset and the terminal suite's manifest (its one tool,
    /// `TerminalExecute`), bound through `backend`: the runtime of the terminal suite.
    pub fn embedded_terminal(
        backend: &dyn PlatformBackend,
        nonce: &[u8],
    ) -> Result<Self, HarnessError> {
        let data = Dataset::embedded()?;
        let manifest = knox_policy::shipped::terminal().map_err(RunError::from)?;
        Self::start(backend, nonce, data, manifest)
    }
}

/// Runs one bundle of `flows` (one per task of `cfg.topology`) under `cfg`: each
/// flow's user tool answers with its case's response, the attacker's instruction in it.
pub fn run_bundle(
    h: &Harness,
    flows: &[Flow],
    cfg: &RunConfig<'_>,
    run_id: &str,
) -> Result<RunOutcome, HarnessError> {
    let started = Instant::now();
    let need = cfg.topology.tasks as usize;
    let flows = flows.get(..need).ok_or(HarnessError::Flows {
        need,
        got: flows.len(),
    })?;
    let (prompt, tools) = bundle_tools(&h.data, &h.manifest, flows)?;
    Ok(run_prompt(h, &prompt, &tools, cfg, run_id, started)?)
}

/// The prompt of a bundle of `flows` (one task each) and the simulated tools answering
/// it: each flow's user tool answers with its case's response, the attacker's
/// instruction in it.
pub(crate) fn bundle_tools<'d>(
    data: &'d Dataset,
    manifest: &'d ToolkitManifest,
    flows: &[Flow],
) -> Result<(Prompt, SimulatedTools<'d>), HarnessError> {
    let need = flows.len();
    let mut tools = SimulatedTools::new(data, manifest);
    let mut tasks = Vec::with_capacity(need);
    for f in flows {
        let user = data
            .user_cases
            .get(f.user_case)
            .ok_or(HarnessError::Flows { need, got: 0 })?;
        let attack = data
            .attacker_cases
            .get(f.attacker_case)
            .ok_or(HarnessError::Flows { need, got: 0 })?;
        tasks.push(user.instruction.clone());
        if let Ok(a) = Action::new(&user.tool, Value::Object(user.params.clone())) {
            tools.respond(&a, user.response(&attack.instruction));
        }
    }
    Ok((Prompt { tasks }, tools))
}

/// Splits flows into bundles of `t`, dropping the trailing remainder (as Table III).
pub fn bundles(flows: &[Flow], workload: Workload) -> impl Iterator<Item = &[Flow]> {
    flows.chunks_exact(workload.0.tasks.max(1) as usize)
}

/// A run's counts by ground truth: its label tallies read as [`Origin`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroundTruth {
    /// Planned proposals.
    pub planned: Tally,
    /// Injected proposals.
    pub injected: Tally,
    /// A model's own proposals (no ground truth).
    pub model: Tally,
}

impl GroundTruth {
    /// The ground truth of `stats`.
    pub fn of(stats: &RunStats) -> Self {
        let mut g = Self::default();
        for (label, tally) in &stats.labels {
            let slot = match Origin::of(*label) {
                Origin::Plan => &mut g.planned,
                Origin::Injection => &mut g.injected,
                Origin::Model => &mut g.model,
            };
            slot.merge(*tally);
        }
        g
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use knox_agent::{ExecutorFactory, Label, Regulations};
    use knox_attest::simulated::Simulated;
    use knox_dataset::flows::injecagent_flows;
    use knox_monitor::guard::stop::StopSignal;
    use knox_types::apm::StopPolicy;

    use super::*;
    use crate::{BenignFactory, DatasetPlanner, InjectedFactory};

    fn config<'a>(
        w: &str,
        planner: &'a DatasetPlanner,
        executor: &'a dyn ExecutorFactory,
    ) -> RunConfig<'a> {
        RunConfig {
            contract: None,
            approvals: None,
            topology: w.parse::<Workload>().unwrap().0,
            planner,
            executor,
            norms: None,
            judge: None,
            regulations: Regulations::default(),
            stop: StopPolicy::default(),
            signal: StopSignal::new(),
            journal_dir: None,
            host: None,
            refresh: None,
        }
    }

    #[test]
    fn bundles_run_with_their_ground_truth_and_too_few_flows_are_refused() {
        let h = Harness::embedded(&Simulated, b"epoch").unwrap();
        let planner = DatasetPlanner::new(&h.data);
        let flows = injecagent_flows(&h.data, 4);
        let benign = config("mt-sa-seq:2", &planner, &BenignFactory);
        let short = flows.get(..1).unwrap();
        assert!(matches!(
            run_bundle(&h, short, &benign, "short"),
            Err(HarnessError::Flows { need: 2, got: 1 })
        ));
        assert_eq!(
            bundles(flows.get(..3).unwrap(), "mt-sa-seq:2".parse().unwrap()).count(),
            1
        );

        let t = |allowed, blocked| Tally { allowed, blocked };
        let out = run_bundle(&h, &flows, &benign, "benign").unwrap();
        let g = GroundTruth::of(&out.stats);
        assert_eq!(
            (g.planned, g.injected, g.model),
            (t(2, 0), t(0, 0), t(0, 0))
        );

        let injected = InjectedFactory::new(h.data.attacker_cases.clone());
        let cfg = config("mt-sa-seq:2", &planner, &injected);
        let out = run_bundle(&h, &flows, &cfg, "injected").unwrap();
        let g = GroundTruth::of(&out.stats);
        assert_eq!(g.planned, t(2, 0));
        assert!(g.injected.blocked > 0 && g.injected.allowed == 0, "{g:?}");
        assert_eq!(out.stats.proposals, 2 + g.injected.blocked);
    }

    #[test]
    fn ground_truth_reads_labels_as_origins() {
        let mut stats = RunStats::default();
        let t = |allowed, blocked| Tally { allowed, blocked };
        stats.labels.insert(Origin::Plan.label(), t(3, 1));
        stats.labels.insert(Origin::Injection.label(), t(0, 2));
        stats.labels.insert(Label::NONE, t(4, 0));
        stats.labels.insert(Label("other"), t(1, 1));
        let g = GroundTruth::of(&stats);
        assert_eq!(g.planned, t(3, 1));
        assert_eq!(g.injected, t(0, 2));
        assert_eq!(g.model, t(5, 1));
    }
}
