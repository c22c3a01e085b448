//! The session: what lives for a whole process — the in-TEE key bound through a
//! platform backend, the toolkit manifest, the regulations, the stop policy, the
//! planner, executor and tools — and the runs it makes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use knox_agent::{ExecutorFactory, Planner, Prompt, Regulations, ToolHost, ToolResult, ToolRunner};
use knox_attest::platform::PlatformBackend;
use knox_contract::Verified;
use knox_harness::{DatasetPlanner, Harness};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::monitor::ApprovalSource;
use knox_monitor::run::{self, RunConfig, RunOutcome, Runtime};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::{StopPolicy, Topology, TopologyKind};
use knox_types::grant::Grant;

use crate::error::EngineError;
use crate::regulation::RegulationSetup;

/// The key and manifest a session runs with: a plain runtime, or the InjecAgent
/// harness (runtime and dataset) when the session carries the embedded suite.
#[derive(Debug)]
pub(crate) enum Core {
    /// A runtime over the caller's manifest.
    Plain(Runtime),
    /// A runtime shared with other sessions (one key for a whole gateway process: its
    /// sessions are numbered links of that key's one chain of runs).
    Shared(Arc<Runtime>),
    /// An embedded suite, its harness under the suite's own manifest.
    Suite(Harness, crate::workload::Suite),
}

impl Core {
    pub(crate) fn rt(&self) -> &Runtime {
        match self {
            Self::Plain(rt) => rt,
            Self::Shared(rt) => rt,
            Self::Suite(h, _) => &h.rt,
        }
    }
}

/// Where the toolkit manifest comes from.
enum Tools {
    /// The caller's manifest.
    Manifest(Box<ToolkitManifest>),
    /// The embedded InjecAgent suite: its manifest, data, planner and simulated tools.
    Embedded,
    /// The embedded terminal suite: the same, under the terminal suite's manifest.
    EmbeddedTerminal,
}

/// Builds a [`Session`]: the platform backend and the toolkit manifest are required;
/// everything else has a default (no regulations, no stop limits, one task for one
/// agent, no journal, no output directory).
#[derive(Default)]
pub struct SessionBuilder {
    platform: Option<Box<dyn PlatformBackend>>,
    simulated_key: Option<Arc<knox_attest::TeeKey>>,
    shared: Option<Arc<Runtime>>,
    checkpoints: Option<knox_monitor::aeg::Checkpoints>,
    nonce: Vec<u8>,
    tools: Option<Tools>,
    regulation: Option<RegulationSetup>,
    stop: StopPolicy,
    signal: Option<StopSignal>,
    topology: Option<Topology>,
    planner: Option<Box<dyn Planner>>,
    executor: Option<Box<dyn ExecutorFactory>>,
    runner: Option<Box<dyn ToolRunner>>,
    host: Option<Box<dyn ToolHost>>,
    journal_dir: Option<PathBuf>,
    output: Option<PathBuf>,
    refresh: bool,
    run_prefix: Option<String>,
    contract: Option<Verified>,
    approvals: Option<Box<dyn ApprovalSource>>,
}

impl std::fmt::Debug for SessionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBuilder")
            .field("platform", &self.platform.as_ref().map(|p| p.mode()))
            .field("regulation", &self.regulation)
            .field("stop", &self.stop)
            .field("topology", &self.topology)
            .field("journal_dir", &self.journal_dir)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

impl SessionBuilder {
    /// The platform backend that binds the in-TEE key (`Simulated` for development,
    /// a TDX backend in a confidential VM). Required.
    pub fn platform(mut self, backend: impl PlatformBackend + 'static) -> Self {
        self.platform = Some(Box::new(backend));
        self
    }

    /// Simulated platform evidence, binding a key the caller made and keeps instead of
    /// one generated inside: for tests that sign as a run's key would (a compromised
    /// monitor). See [`Runtime::simulated_with_key`]: simulated evidence has no root
    /// of trust, so this gives nobody anything; no other platform takes a caller's key.
    /// Only with [`manifest`](Self::manifest).
    pub fn simulated_with_key(mut self, key: Arc<knox_attest::TeeKey>) -> Self {
        self.platform = Some(Box::new(knox_attest::simulated::Simulated));
        self.simulated_key = Some(key);
        self
    }

    /// Runs this session's prompts with `runtime`, shared with other sessions, instead
    /// of a key of its own: one key for a whole gateway process, every session a
    /// numbered link of its one chain of runs, so a session left out shows as a gap.
    /// The manifest is the runtime's (a [`manifest`](Self::manifest) given too must be
    /// the same), and so is the checkpoint cadence. The platform backend is still
    /// needed, for refresh reports.
    pub fn runtime(mut self, runtime: Arc<Runtime>) -> Self {
        self.shared = Some(runtime);
        self
    }

    /// How often a journal is checkpointed (default
    /// [`Checkpoints::DEFAULT`](knox_monitor::aeg::Checkpoints::DEFAULT)); signed with
    /// each run's APM (journal format v4).
    pub fn checkpoints(mut self, every: knox_monitor::aeg::Checkpoints) -> Self {
        self.checkpoints = Some(every);
        self
    }

    /// [`platform`](Self::platform), boxed.
    pub fn platform_boxed(mut self, backend: Box<dyn PlatformBackend>) -> Self {
        self.platform = Some(backend);
        self
    }

    /// The regulator-supplied epoch nonce bound into the platform evidence (default:
    /// empty).
    pub fn nonce(mut self, nonce: impl Into<Vec<u8>>) -> Self {
        self.nonce = nonce.into();
        self
    }

    /// The toolkit manifest `C`. This or [`embedded_suite`](Self::embedded_suite) is
    /// required.
    pub fn manifest(mut self, manifest: ToolkitManifest) -> Self {
        self.tools = Some(Tools::Manifest(Box::new(manifest)));
        self
    }

    /// The embedded InjecAgent suite: its manifest and data, the dataset planner and
    /// simulated tools as defaults, and [`Session::run_workload`].
    pub fn embedded_suite(mut self) -> Self {
        self.tools = Some(Tools::Embedded);
        self
    }

    /// The embedded terminal suite: as [`embedded_suite`](Self::embedded_suite), under
    /// the terminal suite's own manifest (`data/manifests/terminal.toolkit.json`, its
    /// one tool `TerminalExecute`), which its APMs then name. For
    /// [`Session::run_workload`] with [`Suite::Terminal`](crate::workload::Suite).
    pub fn terminal_suite(mut self) -> Self {
        self.tools = Some(Tools::EmbeddedTerminal);
        self
    }

    /// Regulations in force, their context and the policy set deciding them.
    pub fn regulations(mut self, setup: RegulationSetup) -> Self {
        self.regulation = Some(setup);
        self
    }

    /// The stop policy (caps, budget, timeout, external stop).
    pub fn stop(mut self, stop: StopPolicy) -> Self {
        self.stop = stop;
        self
    }

    /// The external stop signal (default: a fresh one; see [`Session::signal`]).
    pub fn signal(mut self, signal: StopSignal) -> Self {
        self.signal = Some(signal);
        self
    }

    /// The shape of prompt runs: tasks and sub-agents (default: ST-SA, one task for
    /// one agent; a prompt with more tasks runs them sequentially).
    pub fn topology(mut self, topology: Topology) -> Self {
        self.topology = Some(topology);
        self
    }

    /// The planner deriving each run's expected trajectory.
    pub fn planner(mut self, planner: impl Planner + 'static) -> Self {
        self.planner = Some(Box::new(planner));
        self
    }

    /// [`planner`](Self::planner), boxed.
    pub fn planner_boxed(mut self, planner: Box<dyn Planner>) -> Self {
        self.planner = Some(planner);
        self
    }

    /// The executor agents of [`Session::run_prompt`].
    pub fn executor(mut self, executor: impl ExecutorFactory + 'static) -> Self {
        self.executor = Some(Box::new(executor));
        self
    }

    /// [`executor`](Self::executor), boxed.
    pub fn executor_boxed(mut self, executor: Box<dyn ExecutorFactory>) -> Self {
        self.executor = Some(executor);
        self
    }

    /// Runs allowed calls in process.
    pub fn tools(mut self, runner: impl ToolRunner + 'static) -> Self {
        self.runner = Some(Box::new(runner));
        self
    }

    /// Runs allowed calls under grants in a host (the broker's confined workers); the
    /// in-process tools answer what the host does not run for real.
    pub fn host(mut self, host: impl ToolHost + 'static) -> Self {
        self.host = Some(Box::new(host));
        self
    }

    /// [`host`](Self::host), boxed.
    pub fn host_boxed(mut self, host: Box<dyn ToolHost>) -> Self {
        self.host = Some(host);
        self
    }

    /// Also append every node to `<dir>/<run>.journal.jsonl` as it is committed.
    pub fn journal_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.journal_dir = Some(dir.into());
        self
    }

    /// Write every sealed bundle to `<dir>/<run>.json`.
    pub fn output(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output = Some(dir.into());
        self
    }

    /// At the end of each run, bind its chain head to the key with a fresh report
    /// from the platform backend.
    pub fn refresh(mut self, refresh: bool) -> Self {
        self.refresh = refresh;
        self
    }

    /// The prefix of prompt runs' identifiers (`<prefix>-<key>-0000`, …, `<key>` the
    /// first 8 hex digits of the session's key id; default `run`).
    pub fn run_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.run_prefix = Some(prefix.into());
        self
    }

    /// Bounds every run by a signed capability contract, already verified against its
    /// authority key (`knox_contract::signed::verify`): its hash goes into each APM's
    /// inputs, its envelope into the bundle, and the guards' `contract` stage decides
    /// every proposal with it (a tool outside the contract's four is denied). With the
    /// planner's plan as well, an action must satisfy both. The toolkit manifest must
    /// offer the contract's tools ([`crate::contract::manifest`]).
    pub fn contract(mut self, contract: Verified) -> Self {
        self.contract = Some(contract);
        self
    }

    /// Where approval tokens for the contract's high-impact actions come from (see
    /// [`crate::contract::ApprovalDir`]); without one, such an action stays pending.
    pub fn approvals(mut self, source: impl ApprovalSource + 'static) -> Self {
        self.approvals = Some(Box::new(source));
        self
    }

    /// Checks the pieces, generates the key and binds it through the platform.
    pub fn build(self) -> Result<Session, EngineError> {
        let platform = self.platform.ok_or(EngineError::Missing("platform"))?;
        let tools = self.tools.ok_or(EngineError::Missing("manifest"))?;
        if let Some(r) = &self.regulation
            && r.regulations.policy_hash != Some(r.norms.hash())
        {
            return Err(EngineError::Invalid(
                "the regulations name another policy set than the one given",
            ));
        }
        if matches!(tools, Tools::Manifest(_)) && self.planner.is_none() {
            return Err(EngineError::Missing("planner"));
        }
        let topology = self.topology.unwrap_or(Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        });
        if topology.tasks == 0 || topology.agents == 0 {
            return Err(EngineError::Invalid(
                "a topology needs at least one task and one agent",
            ));
        }
        let platform_error = |source| EngineError::Platform {
            mode: platform.mode(),
            source: Box::new(source),
        };
        let suite_error = |e: knox_harness::HarnessError| match e {
            knox_harness::HarnessError::Run(r @ run::RunError::Platform(_)) => platform_error(r),
            other => EngineError::Suite(Box::new(other)),
        };
        let mut core = match (tools, self.simulated_key) {
            (tools, key) if self.shared.is_some() => {
                let Some(rt) = self.shared else {
                    return Err(EngineError::Missing("runtime"));
                };
                if key.is_some() {
                    return Err(EngineError::Invalid(
                        "a shared runtime has its own key: give it or a key, not both",
                    ));
                }
                if self.checkpoints.is_some() {
                    return Err(EngineError::Invalid(
                        "a shared runtime's checkpoint cadence is its own: set it on the runtime",
                    ));
                }
                match tools {
                    Tools::Manifest(m) if m.hash() == rt.manifest.hash() => Core::Shared(rt),
                    Tools::Manifest(_) => {
                        return Err(EngineError::Invalid(
                            "the manifest differs from the shared runtime's",
                        ));
                    }
                    _ => {
                        return Err(EngineError::Invalid(
                            "a shared runtime runs the caller's manifest, not an embedded suite",
                        ));
                    }
                }
            }
            (Tools::Manifest(m), Some(key)) => Core::Plain(
                Runtime::simulated_with_key(key, &self.nonce, *m).map_err(platform_error)?,
            ),
            (_, Some(_)) => {
                return Err(EngineError::Invalid(
                    "a key of the caller's runs only with a manifest",
                ));
            }
            (Tools::Manifest(m), None) => Core::Plain(
                Runtime::start(platform.as_ref(), &self.nonce, *m).map_err(platform_error)?,
            ),
            (Tools::Embedded, None) => Core::Suite(
                Harness::embedded(platform.as_ref(), &self.nonce).map_err(suite_error)?,
                crate::workload::Suite::Injecagent,
            ),
            (Tools::EmbeddedTerminal, None) => Core::Suite(
                Harness::embedded_terminal(platform.as_ref(), &self.nonce).map_err(suite_error)?,
                crate::workload::Suite::Terminal,
            ),
        };
        if let Some(every) = self.checkpoints {
            match &mut core {
                Core::Plain(rt) => rt.checkpoints = every,
                Core::Suite(h, _) => h.rt.checkpoints = every,
                Core::Shared(_) => {}
            }
        }
        let custom_planner = self.planner.is_some();
        if self.contract.is_none()
            && self
                .planner
                .as_ref()
                .is_some_and(|p| p.trajectory().is_unplanned())
        {
            return Err(EngineError::Invalid(
                "an unplanned session (no prompt-derived plan) needs a contract to bound it",
            ));
        }
        let planner = match (self.planner, &core) {
            (Some(p), _) => p,
            (None, Core::Suite(h, _)) => Box::new(DatasetPlanner::new(&h.data)),
            (None, Core::Plain(_) | Core::Shared(_)) => {
                return Err(EngineError::Missing("planner"));
            }
        };
        Ok(Session {
            core,
            platform,
            regulation: self.regulation,
            stop: self.stop,
            signal: self.signal.unwrap_or_default(),
            topology,
            planner,
            custom_planner,
            executor: self.executor,
            runner: self.runner,
            host: self.host,
            journal_dir: self.journal_dir,
            output: self.output,
            refresh: self.refresh,
            run_prefix: self.run_prefix.unwrap_or_else(|| "run".into()),
            runs: AtomicU64::new(0),
            contract: self.contract,
            approvals: self.approvals,
        })
    }
}

/// A Knox session: a bound key, a manifest and the pieces that run prompts under the
/// reference monitor into sealed evidence bundles. Build one with [`Session::builder`].
pub struct Session {
    pub(crate) core: Core,
    pub(crate) platform: Box<dyn PlatformBackend>,
    pub(crate) regulation: Option<RegulationSetup>,
    pub(crate) stop: StopPolicy,
    pub(crate) signal: StopSignal,
    pub(crate) topology: Topology,
    pub(crate) planner: Box<dyn Planner>,
    custom_planner: bool,
    pub(crate) executor: Option<Box<dyn ExecutorFactory>>,
    pub(crate) runner: Option<Box<dyn ToolRunner>>,
    pub(crate) host: Option<Box<dyn ToolHost>>,
    pub(crate) journal_dir: Option<PathBuf>,
    pub(crate) output: Option<PathBuf>,
    pub(crate) refresh: bool,
    run_prefix: String,
    runs: AtomicU64,
    pub(crate) contract: Option<Verified>,
    pub(crate) approvals: Option<Box<dyn ApprovalSource>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("platform", &self.core.rt().platform.mode)
            .field("regulation", &self.regulation)
            .field("stop", &self.stop)
            .field("topology", &self.topology)
            .field("planner", &self.planner.model().name)
            .field("executor", &self.executor.as_ref().map(|e| e.model().name))
            .field("hosted", &self.host.is_some())
            .field("journal_dir", &self.journal_dir)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

/// Answers nothing: the in-process runner of a session that has none (a host then
/// runs every tool itself).
struct NoTools;

impl ToolRunner for NoTools {
    fn run(&self, action: &Action, _: Option<&Grant>) -> ToolResult {
        ToolResult::from(serde_json::json!({
            "error": format!("no in-process tool runs `{}`", action.tool)
        }))
    }
}

impl Session {
    /// A builder with nothing set.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// The monitor's runtime: the key, its platform evidence and the manifest.
    pub fn runtime(&self) -> &Runtime {
        self.core.rt()
    }

    /// The toolkit manifest (verifiers of this session's bundles need the same one).
    pub fn manifest(&self) -> &ToolkitManifest {
        &self.core.rt().manifest
    }

    /// The suite's harness (runtime and dataset), when the session carries an embedded
    /// suite ([`SessionBuilder::embedded_suite`] or [`SessionBuilder::terminal_suite`]).
    pub fn harness(&self) -> Option<&Harness> {
        match &self.core {
            Core::Suite(h, _) => Some(h),
            Core::Plain(_) | Core::Shared(_) => None,
        }
    }

    /// The external stop signal: setting it stops every run at its next proposal.
    pub fn signal(&self) -> &StopSignal {
        &self.signal
    }

    /// The regulations in force.
    pub fn regulations(&self) -> Regulations {
        self.regulation
            .as_ref()
            .map(|r| r.regulations.clone())
            .unwrap_or_default()
    }

    /// The planner the caller set, if any (else the suite's dataset planner serves).
    pub(crate) fn custom_planner(&self) -> Option<&dyn Planner> {
        self.custom_planner.then_some(self.planner.as_ref())
    }

    /// The next prompt run's identifier: `<prefix>-<key>-<n>`, `<key>` the first 8 hex
    /// digits of the session's in-TEE key id (a key of its own per process), `<n>` the
    /// session's run count — unique across processes and machines, so runs written
    /// into one folder never collide.
    pub(crate) fn next_run_id(&self) -> String {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let key = self.runtime().key_id().to_hex();
        format!(
            "{}-{}-{n:04}",
            self.run_prefix,
            key.get(..8).unwrap_or(&key)
        )
    }

    /// The run configuration of this session with `planner` and `executor`.
    pub(crate) fn config<'s>(
        &'s self,
        topology: Topology,
        planner: &'s dyn Planner,
        executor: &'s dyn ExecutorFactory,
    ) -> RunConfig<'s> {
        RunConfig {
            topology,
            planner,
            executor,
            norms: self.regulation.as_ref().map(|r| &*r.norms),
            judge: self.regulation.as_ref().and_then(|r| r.judge.as_deref()),
            regulations: self.regulations(),
            stop: self.stop.clone(),
            signal: self.signal.clone(),
            journal_dir: self.journal_dir.as_deref(),
            host: self.host.as_deref(),
            refresh: self.refresh.then_some(self.platform.as_ref()),
            contract: self.contract.as_ref(),
            approvals: self.approvals.as_deref(),
        }
    }

    /// The in-process tools: the caller's, else the suite's simulated tools, else none.
    fn with_tools<T>(&self, f: impl FnOnce(&dyn ToolRunner) -> T) -> T {
        match (&self.runner, &self.core) {
            (Some(r), _) => f(r.as_ref()),
            (None, Core::Suite(h, _)) => {
                f(&knox_harness::SimulatedTools::new(&h.data, &h.manifest))
            }
            (None, Core::Plain(_) | Core::Shared(_)) => f(&NoTools),
        }
    }

    /// Runs the user's `prompt`: plans it, derives and attests the APM, lets the
    /// session's executor(s) propose under the monitor, runs what is allowed and seals
    /// the evidence (written to the output directory when one is set).
    pub fn run_prompt(&self, prompt: &Prompt) -> Result<RunOutcome, EngineError> {
        let run_id = self.next_run_id();
        self.run_prompt_as(prompt, &run_id)
    }

    /// [`run_prompt`](Self::run_prompt) under the identifier `run_id`.
    pub fn run_prompt_as(&self, prompt: &Prompt, run_id: &str) -> Result<RunOutcome, EngineError> {
        let started = Instant::now();
        let executor = self
            .executor
            .as_deref()
            .ok_or(EngineError::Missing("executor"))?;
        if self.runner.is_none() && self.host.is_none() && self.harness().is_none() {
            return Err(EngineError::Missing("tools"));
        }
        let cfg = self.config(self.topology_for(prompt), self.planner.as_ref(), executor);
        let outcome = self
            .with_tools(|tools| {
                run::run_prompt(self.runtime(), prompt, tools, &cfg, run_id, started)
            })
            .map_err(|e| EngineError::bundle(run_id, e))?;
        self.write(&outcome.bundle)?;
        Ok(outcome)
    }

    /// The topology of a prompt run: the session's, stretched to the prompt's tasks.
    pub(crate) fn topology_for(&self, prompt: &Prompt) -> Topology {
        let tasks = u32::try_from(prompt.tasks.len()).unwrap_or(u32::MAX).max(1);
        let mut t = self.topology;
        if t.tasks != tasks {
            t.tasks = tasks;
            t.agents = t.agents.min(tasks);
            if t.kind == TopologyKind::StSa && tasks > 1 {
                t.kind = TopologyKind::MtSaSeq;
            }
        }
        t
    }

    /// Writes `bundle` to the output directory, when one is set.
    pub(crate) fn write(&self, bundle: &knox_types::bundle::Bundle) -> Result<(), EngineError> {
        let Some(dir) = &self.output else {
            return Ok(());
        };
        write_bundle(dir, bundle)
    }
}

/// Writes `bundle` as `<dir>/<run>.json`, atomically (a temporary file fsynced and
/// linked into place): a crash never leaves a partial or empty bundle, and an existing
/// file of that name — evidence of an earlier run — is never replaced (an error).
pub fn write_bundle(dir: &Path, bundle: &knox_types::bundle::Bundle) -> Result<(), EngineError> {
    let path = dir.join(format!("{}.json", bundle.run_id));
    let bytes = serde_json::to_vec(bundle).map_err(EngineError::Serialize)?;
    knox_files::write_atomic_with(
        &path,
        &bytes,
        knox_files::WriteOptions {
            create_new: true,
            ..knox_files::WriteOptions::default()
        },
    )
    .map_err(|source| EngineError::Output { path, source })
}
