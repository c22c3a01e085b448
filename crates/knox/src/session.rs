//! Glue shared by the commands and the tests: the embedded runtime, executor choice,
//! running a workload's bundles.

use std::path::Path;

use anyhow::{Context as _, Result};
use knox_agent::{ExecutorFactory, Planner, Prompt, Regulations, ToolHost};
use knox_attest::simulated::Simulated;
use knox_dataset::flows::injecagent_flows;
use knox_harness::{BenignFactory, DatasetPlanner, Harness, InjectedFactory, Workload};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::{self, RunConfig, RunOutcome};
use knox_types::apm::StopPolicy;

use crate::error::{Kind, KindExt as _};

/// The executors the deterministic runs offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorKind {
    /// Follows the plan, ignores injected instructions.
    Benign,
    /// Follows injected instructions found in tool outputs (as InjecAgent's attacked agent).
    Injected,
}

/// Which platform evidence binds the in-TEE key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlatformKind {
    /// Development only: no root of trust; verifiers refuse it unless told otherwise.
    Simulated,
    /// An Intel TDX guest (configfs-tsm), optionally with NVIDIA GPUs in CC mode.
    Tdx,
}

/// Command-line choice of the platform backend.
#[derive(Debug, Clone, clap::Args)]
pub struct PlatformArgs {
    /// Platform evidence backend.
    #[arg(long, value_enum, default_value_t = PlatformKind::Simulated)]
    pub platform: PlatformKind,
    /// TDX: Intel collateral for this platform (dcap-qvl JSON, from your PCCS), stapled
    /// into every bundle so verifiers need no network.
    #[arg(value_parser = crate::cmd::path, long, value_name = "JSON", required_if_eq("platform", "tdx"))]
    pub collateral: Option<std::path::PathBuf>,
    /// TDX: also bind NVIDIA GPU evidence collected through NVML.
    #[arg(long)]
    pub gpus: bool,
    /// TDX: the configfs-tsm report directory.
    #[arg(value_parser = crate::cmd::path, long, default_value = "/sys/kernel/config/tsm/report")]
    pub configfs: std::path::PathBuf,
}

/// The platform backend `p` names.
pub fn backend(p: &PlatformArgs) -> Result<Box<dyn knox_attest::PlatformBackend>> {
    Ok(match p.platform {
        PlatformKind::Simulated => Box::new(Simulated),
        PlatformKind::Tdx => {
            let path = p
                .collateral
                .as_ref()
                .ok_or_else(|| crate::cmd::usage("--collateral is required with --platform tdx"))?;
            let collateral: serde_json::Value =
                serde_json::from_slice(&crate::cmd::read_input(path, crate::cmd::COLLATERAL)?)
                    .map_err(|e| {
                        crate::cmd::bad_input(path, "Intel collateral (dcap-qvl JSON)", e)
                    })?;
            Box::new(knox_attest::hardware::collect::TdxBackend {
                configfs: p.configfs.clone(),
                collateral,
                gpus: p.gpus,
            })
        }
    })
}

/// The embedded runtime (the InjecAgent harness) bound through `backend`.
pub fn runtime_with(backend: &dyn knox_attest::PlatformBackend, nonce: &[u8]) -> Result<Harness> {
    Harness::embedded(backend, nonce).kind_context(Kind::Unavailable, || {
        format!("binding the key through `{}`", backend.mode())
    })
}

/// The runtime on the embedded dataset and manifest, with simulated platform evidence.
pub fn embedded_runtime(nonce: &[u8]) -> Result<Harness> {
    Harness::embedded(&Simulated, nonce).kind_context(Kind::Software, || {
        "starting the runtime on the embedded defaults".into()
    })
}

/// The executor factory for `kind`.
pub fn executor(rt: &Harness, kind: ExecutorKind) -> Box<dyn ExecutorFactory> {
    match kind {
        ExecutorKind::Benign => Box::new(BenignFactory),
        ExecutorKind::Injected => Box::new(InjectedFactory::new(rt.data.attacker_cases.clone())),
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
}

/// Runs every bundle of the workload; `each` sees every outcome as it is produced.
pub fn run_workload(
    rt: &Harness,
    w: &WorkloadRun<'_>,
    each: impl FnMut(&RunOutcome) -> Result<()>,
) -> Result<usize> {
    run_workload_regulated(rt, w, None, each)
}

/// The regulations in force for a run and the policy set deciding them.
pub struct RegulationSetup {
    /// Names, policy hash and context (they go into every APM).
    pub regulations: Regulations,
    /// The policy set whose hash `regulations` names.
    pub norms: knox_regulation::Norms,
    /// A judge for disclosures no data label reaches.
    pub judge: Option<Box<dyn knox_regulation::Judge>>,
}

impl std::fmt::Debug for RegulationSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegulationSetup")
            .field("regulations", &self.regulations)
            .field("judge", &self.judge.as_ref().map(|j| j.model().name))
            .finish_non_exhaustive()
    }
}

/// [`run_workload`] with regulations in force.
pub fn run_workload_regulated(
    rt: &Harness,
    w: &WorkloadRun<'_>,
    regulation: Option<&RegulationSetup>,
    mut each: impl FnMut(&RunOutcome) -> Result<()>,
) -> Result<usize> {
    let flows = injecagent_flows(&rt.data, w.flows);
    let need = w.workload.0.tasks as usize;
    if flows.len() < need {
        return Err(crate::cmd::usage(format!(
            "workload `{}` needs at least {need} flows, got {}: raise --flows",
            w.workload.spec(),
            flows.len()
        )));
    }
    let dataset = DatasetPlanner::new(&rt.data);
    let planner: &dyn Planner = w.planner.unwrap_or(&dataset);
    let owned = executor(rt, w.executor);
    let factory: &dyn ExecutorFactory = w.model.unwrap_or(owned.as_ref());
    let mut cfg = w.config(planner, factory);
    if let Some(r) = regulation {
        cfg.regulations = r.regulations.clone();
        cfg.norms = Some(&r.norms);
        cfg.judge = r.judge.as_deref();
    }
    let mut n = 0;
    for (i, bundle) in knox_harness::bundles(&flows, w.workload).enumerate() {
        let run_id = format!(
            "{}-{}-{i:04}",
            w.workload.spec().replace(':', "-"),
            if w.model.is_some() {
                "model"
            } else {
                executor_name(w.executor)
            }
        );
        let outcome = knox_harness::run_bundle(rt, bundle, &cfg, &run_id)
            .with_context(|| format!("running bundle {run_id}"))?;
        each(&outcome)?;
        n += 1;
        if stopped(w) {
            break;
        }
    }
    Ok(n)
}

/// The executor's CLI name.
pub fn executor_name(k: ExecutorKind) -> &'static str {
    match k {
        ExecutorKind::Benign => "benign",
        ExecutorKind::Injected => "injected",
    }
}

/// The toolkit manifest the verifier trusts by default: the embedded one.
pub fn embedded_manifest() -> Result<knox_policy::ToolkitManifest> {
    knox_policy::ToolkitManifest::from_sources(
        knox_dataset::embedded::TOOLS_JSON,
        knox_dataset::embedded::TOOLKIT_NEEDS,
    )
    .kind_context(Kind::Software, || {
        "loading the embedded toolkit manifest".into()
    })
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
pub fn terminal_tasks() -> Result<Vec<TerminalTask>> {
    serde_json::from_str(include_str!("../../../data/terminal_tasks.json"))
        .context("data/terminal_tasks.json")
}

/// Runs terminal `tasks` bundled for `w.workload`: real commands, planned by the
/// dataset planner, executed by the benign executor through `w.host`.
pub fn run_terminal(
    rt: &Harness,
    w: &WorkloadRun<'_>,
    tasks: &[TerminalTask],
    mut each: impl FnMut(&RunOutcome) -> Result<()>,
) -> Result<usize> {
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
    let factory = executor(rt, ExecutorKind::Benign);
    let cfg = w.config(&planner, factory.as_ref());
    let t = w.workload.0.tasks.max(1) as usize;
    let tools = knox_harness::SimulatedTools::new(&rt.data, &rt.manifest);
    let mut n = 0;
    for (i, chunk) in tasks.chunks_exact(t).enumerate() {
        let run_id = format!("terminal-{}-{i:04}", w.workload.spec().replace(':', "-"));
        let prompt = Prompt {
            tasks: chunk.iter().map(|t| t.instruction.clone()).collect(),
        };
        let outcome = run::run_prompt(
            rt,
            &prompt,
            &tools,
            &cfg,
            &run_id,
            std::time::Instant::now(),
        )
        .with_context(|| format!("running bundle {run_id}"))?;
        each(&outcome)?;
        n += 1;
        if stopped(w) {
            break;
        }
    }
    Ok(n)
}

/// Whether an external stop (a signal, the stop file) has stopped the run: the bundle
/// it interrupted is sealed, and no new one starts.
fn stopped(w: &WorkloadRun<'_>) -> bool {
    w.stop.external && w.signal.is_set()
}

/// A broker running tools in confined workers: the worker is this very binary's
/// hidden `tool-worker` subcommand; workspaces go under `workspaces`.
pub fn broker(workspaces: &Path) -> Result<knox_broker::Broker> {
    let exe = std::env::current_exe()
        .kind_context(Kind::Software, || "locating the knox binary".into())?;
    let worker = vec![exe.into_os_string(), "tool-worker".into()];
    knox_broker::Broker::new(
        worker,
        workspaces.to_path_buf(),
        knox_sandbox::SandboxConfig::default(),
    )
    .kind_context(Kind::Unavailable, || {
        "starting the kernel sandbox (needs Landlock, Linux 5.13+, and seccomp user notification; run with --tools simulated where the kernel lacks them)".into()
    })
}
