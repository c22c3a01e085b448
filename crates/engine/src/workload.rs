//! The paper's workloads over the embedded suites: InjecAgent flows bundled by a
//! workload's task count, and the reviewed terminal tasks — run ids, executor choice
//! and the runs themselves.

use std::path::Path;

use knox_agent::{ExecutorFactory, Planner, Prompt, Regulations, ToolHost};
use knox_dataset::flows::injecagent_flows;
use knox_harness::{BenignFactory, DatasetPlanner, Harness, InjectedFactory, Workload};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::{self, RunConfig, RunOutcome};
use knox_types::apm::StopPolicy;

use crate::error::EngineError;
use crate::regulation::RegulationSetup;
use crate::session::{Core, Session};

/// The executors the deterministic runs offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ExecutorKind {
    /// Follows the plan, ignores injected instructions.
    Benign,
    /// Follows injected instructions found in tool outputs (as InjecAgent's attacked agent).
    Injected,
}

impl ExecutorKind {
    /// The executor's name (in run ids and reports).
    pub fn name(self) -> &'static str {
        match self {
            Self::Benign => "benign",
            Self::Injected => "injected",
        }
    }

    /// The executor factory for this kind over `h`'s data.
    pub fn factory(self, h: &Harness) -> Box<dyn ExecutorFactory> {
        match self {
            Self::Benign => Box::new(BenignFactory),
            Self::Injected => Box::new(InjectedFactory::new(h.data.attacker_cases.clone())),
        }
    }
}

/// Options of a workload run.
#[derive(Clone)]
pub struct WorkloadRun<'a> {
    /// Shape.
    pub workload: Workload,
    /// Executor.
    pub executor: ExecutorKind,
    /// Flows to draw (bundled by the workload's task count; the remainder is dropped).
    pub flows: usize,
    /// Stop policy.
    pub stop: StopPolicy,
    /// External stop signal.
    pub signal: StopSignal,
    /// Journal directory.
    pub journal_dir: Option<&'a Path>,
    /// Where tools run (default: simulated, in-process).
    pub host: Option<&'a dyn ToolHost>,
    /// A backend for end-of-run refresh reports binding each chain head.
    pub refresh: Option<&'a dyn knox_attest::PlatformBackend>,
    /// A model-driven executor replacing the deterministic one.
    pub model: Option<&'a dyn ExecutorFactory>,
    /// A model planner replacing the dataset's plans.
    pub planner: Option<&'a dyn Planner>,
}

impl std::fmt::Debug for WorkloadRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkloadRun")
            .field("workload", &self.workload)
            .field("executor", &self.executor)
            .field("flows", &self.flows)
            .field("hosted", &self.host.is_some())
            .finish_non_exhaustive()
    }
}

impl<'a> WorkloadRun<'a> {
    /// The run configuration for these options, with `planner` and `executor`.
    pub fn config<'c>(
        &self,
        planner: &'c dyn Planner,
        executor: &'c dyn ExecutorFactory,
    ) -> RunConfig<'c>
    where
        'a: 'c,
    {
        RunConfig {
            topology: self.workload.0,
            planner,
            executor,
            norms: None,
            judge: None,
            regulations: Regulations::default(),
            stop: self.stop.clone(),
            signal: self.signal.clone(),
            journal_dir: self.journal_dir,
            host: self.host,
            refresh: self.refresh,
            contract: None,
            approvals: None,
        }
    }

    /// A run of `flows` flows with no stop limits.
    pub fn new(workload: Workload, executor: ExecutorKind, flows: usize) -> Self {
        Self {
            workload,
            executor,
            flows,
            stop: StopPolicy::default(),
            signal: StopSignal::new(),
            journal_dir: None,
            host: None,
            refresh: None,
            model: None,
            planner: None,
        }
    }

    /// The identifier of the workload's `i`-th bundle.
    pub fn run_id(&self, i: usize) -> String {
        format!(
            "{}-{}-{i:04}",
            self.workload.spec().replace(':', "-"),
            if self.model.is_some() {
                "model"
            } else {
                self.executor.name()
            }
        )
    }

    /// Whether an external stop (a signal, the stop file) has stopped the run: the
    /// bundle it interrupted is sealed, and no new one starts.
    fn stopped(&self) -> bool {
        self.stop.external && self.signal.is_set()
    }
}

/// Runs every bundle of the workload over `h`'s InjecAgent flows, with `regulation` in
/// force when given; `each` sees every outcome as it is produced. Returns the number
/// of bundles run.
pub fn run_workload<E: From<EngineError>>(
    h: &Harness,
    w: &WorkloadRun<'_>,
    regulation: Option<&RegulationSetup>,
    mut each: impl FnMut(&RunOutcome) -> Result<(), E>,
) -> Result<usize, E> {
    let flows = injecagent_flows(&h.data, w.flows);
    let need = w.workload.0.tasks as usize;
    if flows.len() < need {
        return Err(EngineError::Flows {
            workload: w.workload.spec(),
            need,
            got: flows.len(),
        }
        .into());
    }
    let dataset = DatasetPlanner::new(&h.data);
    let planner: &dyn Planner = w.planner.unwrap_or(&dataset);
    let owned = w.executor.factory(h);
    let factory: &dyn ExecutorFactory = w.model.unwrap_or(owned.as_ref());
    let mut cfg = w.config(planner, factory);
    if let Some(r) = regulation {
        cfg.regulations = r.regulations.clone();
        cfg.norms = Some(&r.norms);
        cfg.judge = r.judge.as_deref();
    }
    let mut n = 0;
    for (i, bundle) in knox_harness::bundles(&flows, w.workload).enumerate() {
        let run_id = w.run_id(i);
        let outcome = knox_harness::run_bundle(h, bundle, &cfg, &run_id)
            .map_err(|e| EngineError::bundle(&run_id, e))?;
        each(&outcome)?;
        n += 1;
        if w.stopped() {
            break;
        }
    }
    Ok(n)
}

/// One task of the terminal suite: an instruction the planner serves with one
/// `TerminalExecute` call.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalTask {
    /// The user's instruction.
    pub instruction: String,
    /// The planned command.
    pub command: String,
    /// What to expect, for readers.
    pub note: String,
}

/// The reviewed terminal tasks (`data/terminal_tasks.json`).
pub fn terminal_tasks() -> Result<Vec<TerminalTask>, EngineError> {
    serde_json::from_str(include_str!("../../../data/terminal_tasks.json"))
        .map_err(EngineError::TerminalTasks)
}

/// Runs terminal `tasks` bundled for `w.workload`: real commands, planned by the
/// dataset planner, executed by the benign executor through `w.host`.
pub fn run_terminal<E: From<EngineError>>(
    h: &Harness,
    w: &WorkloadRun<'_>,
    tasks: &[TerminalTask],
    mut each: impl FnMut(&RunOutcome) -> Result<(), E>,
) -> Result<usize, E> {
    let mut planner = DatasetPlanner::default();
    for t in tasks {
        let params = serde_json::json!({"command": t.command})
            .as_object()
            .cloned()
            .unwrap_or_default();
        planner.insert(
            t.instruction.clone(),
            vec![("TerminalExecute".to_string(), params)],
        );
    }
    let factory = ExecutorKind::Benign.factory(h);
    let cfg = w.config(&planner, factory.as_ref());
    let t = w.workload.0.tasks.max(1) as usize;
    let tools = knox_harness::SimulatedTools::new(&h.data, &h.manifest);
    let mut n = 0;
    for (i, chunk) in tasks.chunks_exact(t).enumerate() {
        let run_id = format!("terminal-{}-{i:04}", w.workload.spec().replace(':', "-"));
        let prompt = Prompt {
            tasks: chunk.iter().map(|t| t.instruction.clone()).collect(),
        };
        let outcome = run::run_prompt(h, &prompt, &tools, &cfg, &run_id, std::time::Instant::now())
            .map_err(|e| EngineError::bundle(&run_id, e))?;
        each(&outcome)?;
        n += 1;
        if w.stopped() {
            break;
        }
    }
    Ok(n)
}

/// The InjecAgent toolkit manifest embedded in this build (the one verifiers of the
/// suite's bundles trust by default).
pub fn embedded_manifest() -> Result<knox_policy::ToolkitManifest, knox_policy::ManifestError> {
    knox_policy::shipped::current()
}

/// Which suite [`Session::run_workload`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    /// InjecAgent flows: user cases whose tool outputs carry an attacker's instruction.
    Injecagent,
    /// The reviewed terminal tasks (real commands through the session's tool host).
    Terminal,
}

impl Session {
    /// Runs `workload` over the embedded `suite` with the session's stop policy,
    /// signal, regulations, journal, host and output (and the session's planner and
    /// executor when they were set, else the dataset planner and the `executor`
    /// kind); `flows` InjecAgent flows are drawn (ignored for the terminal suite).
    /// `each` sees every outcome. Needs the suite's builder call: the InjecAgent suite
    /// [`SessionBuilder::embedded_suite`], the terminal suite
    /// [`SessionBuilder::terminal_suite`] (each runs under its own manifest, which its
    /// APMs name).
    ///
    /// [`SessionBuilder::embedded_suite`]: crate::SessionBuilder::embedded_suite
    /// [`SessionBuilder::terminal_suite`]: crate::SessionBuilder::terminal_suite
    pub fn run_workload<E: From<EngineError>>(
        &self,
        suite: Suite,
        workload: Workload,
        executor: ExecutorKind,
        flows: usize,
        mut each: impl FnMut(&RunOutcome) -> Result<(), E>,
    ) -> Result<usize, E> {
        let h = match (&self.core, suite) {
            (Core::Suite(h, s), _) if *s == suite => h,
            (_, Suite::Injecagent) => return Err(EngineError::Missing("embedded_suite").into()),
            (_, Suite::Terminal) => return Err(EngineError::Missing("terminal_suite").into()),
        };
        let w = WorkloadRun {
            workload,
            executor,
            flows,
            stop: self.stop.clone(),
            signal: self.signal.clone(),
            journal_dir: self.journal_dir.as_deref(),
            host: self.host.as_deref(),
            refresh: self.refresh.then_some(self.platform.as_ref()),
            model: self.executor.as_deref(),
            planner: self.custom_planner(),
        };
        let mut write = |o: &RunOutcome| -> Result<(), E> {
            self.write(&o.bundle)?;
            each(o)
        };
        match suite {
            Suite::Injecagent => run_workload(h, &w, self.regulation.as_ref(), &mut write),
            Suite::Terminal => run_terminal(h, &w, &terminal_tasks()?, &mut write),
        }
    }
}
