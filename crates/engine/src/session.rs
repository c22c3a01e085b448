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
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::monitor::ApprovalSource;
use knox_monitor::run::{self, RunConfig, RunOutcome, Runtime};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::{StopPolicy, Topology, TopologyKind};
use knox_types::grant::Grant;

use crate::error::EngineError;
use crate::regulation::RegulationSetup;

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
    manifest: Option<Box<ToolkitManifest>>,
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
    encoding: Encoding,
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

    /// The regulator-supplied epoch nonce bound into the platform evidence (default:
    /// empty).
    pub fn nonce(mut self, nonce: impl Into<Vec<u8>>) -> Self {
        self.nonce = nonce.into();
        self
    }

    /// The toolkit manifest `C`. Required.
    pub fn manifest(mut self, manifest: ToolkitManifest) -> Self {
        self.manifest = Some(Box::new(manifest));
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

    /// The planner deriving each run's expected trajectory: needed by
    /// [`Session::run_prompt`] and [`Session::open`], not by a host that brings its own
    /// plans ([`Session::open_plan`]). A
    /// `Box<dyn Planner>` or an `Arc` shared with other sessions is a planner too.
    pub fn planner(mut self, planner: impl Planner + 'static) -> Self {
        self.planner = Some(Box::new(planner));
        self
    }

    /// The executor agents of [`Session::run_prompt`] (boxed or shared, as a planner).
    pub fn executor(mut self, executor: impl ExecutorFactory + 'static) -> Self {
        self.executor = Some(Box::new(executor));
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

    /// Also append every node to `<dir>/<run>.journal.jsonl` as it is committed.
    pub fn journal_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.journal_dir = Some(dir.into());
        self
    }

    /// Write every sealed bundle to `<dir>/<run>.json` (or `<run>.cbor`, see
    /// [`SessionBuilder::encoding`]).
    pub fn output(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output = Some(dir.into());
        self
    }

    /// How bundles are written to the output directory (default JSON).
    pub fn encoding(mut self, encoding: Encoding) -> Self {
        self.encoding = encoding;
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
        let manifest = self.manifest.ok_or(EngineError::Missing("manifest"))?;
        if let Some(r) = &self.regulation
            && r.regulations.policy_hash != Some(r.norms.hash())
        {
            return Err(EngineError::Invalid(
                "the regulations name another policy set than the one given",
            ));
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
        let platform_error = |source| EngineError::Platform {
            mode: platform.mode(),
            source: Box::new(source),
        };
        let rt = match (self.shared, self.simulated_key) {
            (Some(_), Some(_)) => {
                return Err(EngineError::Invalid(
                    "a shared runtime has its own key: give it or a key, not both",
                ));
            }
            (Some(_), None) if self.checkpoints.is_some() => {
                return Err(EngineError::Invalid(
                    "a shared runtime's checkpoint cadence is its own: set it on the runtime",
                ));
            }
            (Some(rt), None) if manifest.hash() == rt.manifest.hash() => rt,
            (Some(_), None) => {
                return Err(EngineError::Invalid(
                    "the manifest differs from the shared runtime's",
                ));
            }
            (None, key) => {
                let mut rt = match key {
                    Some(key) => Runtime::simulated_with_key(key, &self.nonce, *manifest),
                    None => Runtime::start(platform.as_ref(), &self.nonce, *manifest),
                }
                .map_err(platform_error)?;
                if let Some(every) = self.checkpoints {
                    rt.checkpoints = every;
                }
                Arc::new(rt)
            }
        };
        Ok(Session {
            rt,
            platform,
            regulation: self.regulation,
            stop: self.stop,
            signal: self.signal.unwrap_or_default(),
            topology,
            planner: self.planner,
            executor: self.executor,
            runner: self.runner,
            host: self.host,
            journal_dir: self.journal_dir,
            output: self.output,
            encoding: self.encoding,
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
    /// The key, its platform evidence and the manifest: the session's own, or one
    /// shared with other sessions (one key for a whole gateway process: its sessions
    /// are numbered links of that key's one chain of runs).
    rt: Arc<Runtime>,
    pub(crate) platform: Box<dyn PlatformBackend>,
    pub(crate) regulation: Option<RegulationSetup>,
    pub(crate) stop: StopPolicy,
    pub(crate) signal: StopSignal,
    pub(crate) topology: Topology,
    pub(crate) planner: Option<Box<dyn Planner>>,
    pub(crate) executor: Option<Box<dyn ExecutorFactory>>,
    pub(crate) runner: Option<Box<dyn ToolRunner>>,
    pub(crate) host: Option<Box<dyn ToolHost>>,
    pub(crate) journal_dir: Option<PathBuf>,
    pub(crate) output: Option<PathBuf>,
    pub(crate) encoding: Encoding,
    pub(crate) refresh: bool,
    run_prefix: String,
    runs: AtomicU64,
    pub(crate) contract: Option<Verified>,
    pub(crate) approvals: Option<Box<dyn ApprovalSource>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("platform", &self.rt.platform.mode)
            .field("regulation", &self.regulation)
            .field("stop", &self.stop)
            .field("topology", &self.topology)
            .field("planner", &self.planner.as_ref().map(|p| p.model().name))
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
        &self.rt
    }

    /// The toolkit manifest (verifiers of this session's bundles need the same one).
    pub fn manifest(&self) -> &ToolkitManifest {
        &self.rt.manifest
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

    /// The executor's model, when the session has an executor.
    pub fn executor_model(&self) -> Option<knox_types::bundle::ModelInfo> {
        self.executor.as_ref().map(|e| e.model())
    }

    /// The stop policy every run is held to.
    pub fn stop_policy(&self) -> &StopPolicy {
        &self.stop
    }

    /// Whether an external stop (the signal, a stop file) has been asked for and the
    /// stop policy honours it: a caller running many prompts starts no new one.
    pub fn stopped(&self) -> bool {
        self.stop.external && self.signal.is_set()
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

    /// Runs the user's `prompt`: plans it, derives and attests the APM, lets the
    /// session's executor(s) propose under the monitor, runs what is allowed and seals
    /// the evidence (written to the output directory when one is set).
    pub fn run_prompt(&self, prompt: &Prompt) -> Result<RunOutcome, EngineError> {
        let run_id = self.next_run_id();
        self.run_prompt_as(prompt, &run_id)
    }

    /// [`run_prompt`](Self::run_prompt) under the identifier `run_id`.
    pub fn run_prompt_as(&self, prompt: &Prompt, run_id: &str) -> Result<RunOutcome, EngineError> {
        if self.planner.is_none() {
            return Err(EngineError::Missing("planner"));
        }
        if self.executor.is_none() {
            return Err(EngineError::Missing("executor"));
        }
        let tools = match (&self.runner, &self.host) {
            (Some(r), _) => r.as_ref(),
            (None, Some(_)) => &NoTools,
            (None, None) => return Err(EngineError::Missing("tools")),
        };
        self.run_prompt_with(prompt, run_id, tools)
    }

    /// [`run_prompt_as`](Self::run_prompt_as) with `tools` answering this run's calls in
    /// process instead of the session's tools (a harness's canned outputs for one run);
    /// a tool host, when the session has one, still runs what it runs for real.
    pub fn run_prompt_with(
        &self,
        prompt: &Prompt,
        run_id: &str,
        tools: &dyn ToolRunner,
    ) -> Result<RunOutcome, EngineError> {
        let started = Instant::now();
        let planner = self
            .planner
            .as_deref()
            .ok_or(EngineError::Missing("planner"))?;
        let executor = self
            .executor
            .as_deref()
            .ok_or(EngineError::Missing("executor"))?;
        let cfg = self.config(self.topology_for(prompt), planner, executor);
        let outcome = run::run_prompt(self.runtime(), prompt, tools, &cfg, run_id, started)
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
        write_bundle(dir, bundle, self.encoding)
    }
}

/// How a bundle is stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// The bundle's JSON (`docs/evidence-format.md` §2), without whitespace: `<run>.json`.
    #[default]
    Json,
    /// The compact encoding (`knox-compact/v2`, §9), which expands back to exactly
    /// that JSON: `<run>.cbor`.
    Compact,
    /// The compact encoding in a store (§9.5): `<run>.cbor` refers to the parts many
    /// runs share (the APM's guards) by digest, each written once as
    /// `parts/<digest>.cbor` in the same folder.
    Store,
}

impl Encoding {
    /// The file name extension bundles of this encoding are written with.
    pub fn extension(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Compact | Self::Store => "cbor",
        }
    }
}

/// The bytes [`write_bundle`] stores for `bundle` as JSON (no whitespace).
pub fn bundle_bytes(bundle: &knox_types::bundle::Bundle) -> Result<Vec<u8>, EngineError> {
    serde_json::to_vec(bundle).map_err(EngineError::Serialize)
}

/// The bytes [`write_bundle`] stores for `bundle` in `encoding` (for [`Encoding::Store`],
/// the bundle's file; its parts: [`stored_bundle`]).
pub fn encoded_bundle(
    bundle: &knox_types::bundle::Bundle,
    encoding: Encoding,
) -> Result<Vec<u8>, EngineError> {
    Ok(stored_bundle(bundle, encoding)?.0)
}

/// The bytes [`write_bundle`] stores for `bundle` in `encoding`, and the shared parts it
/// refers to (only for [`Encoding::Store`]).
pub fn stored_bundle(
    bundle: &knox_types::bundle::Bundle,
    encoding: Encoding,
) -> Result<(Vec<u8>, Vec<knox_types::compact::Part>), EngineError> {
    let json = bundle_bytes(bundle)?;
    let value = || serde_json::from_slice(&json).map_err(EngineError::Serialize);
    match encoding {
        Encoding::Json => Ok((json, Vec::new())),
        Encoding::Compact => Ok((
            knox_types::compact::compact(&value()?).map_err(EngineError::Compact)?,
            Vec::new(),
        )),
        Encoding::Store => {
            knox_types::compact::compact_in_store(&value()?).map_err(EngineError::Compact)
        }
    }
}

/// Writes the shared parts a store's bundle refers to into `dir`'s `parts/` folder: each
/// once (a part already there is kept, after checking it holds the same bytes: a part is
/// never replaced, and a store holding another file under a part's name is an error).
pub fn write_parts(dir: &Path, parts: &[knox_types::compact::Part]) -> Result<(), EngineError> {
    for part in parts {
        let path = dir.join(knox_types::compact::part_file_name(&part.digest));
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(|source| EngineError::Output {
                path: folder.to_path_buf(),
                source,
            })?;
        }
        let written = knox_files::write_atomic_with(
            &path,
            &part.bytes,
            knox_files::WriteOptions {
                create_new: true,
                ..knox_files::WriteOptions::default()
            },
        );
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let same = std::fs::read(&path).is_ok_and(|held| held == part.bytes);
                if !same {
                    return Err(EngineError::Output {
                        path,
                        source: std::io::Error::other(
                            "the store holds another file under this part's name; it is never replaced",
                        ),
                    });
                }
            }
            Err(source) => return Err(EngineError::Output { path, source }),
        }
    }
    Ok(())
}

/// Writes `bundle` as `<dir>/<run>.json` (or `.cbor`, compact), atomically (a
/// temporary file fsynced and linked into place): a crash never leaves a partial or
/// empty bundle, and an existing file of that name — evidence of an earlier run — is
/// never replaced (an error).
pub fn write_bundle(
    dir: &Path,
    bundle: &knox_types::bundle::Bundle,
    encoding: Encoding,
) -> Result<(), EngineError> {
    let path = dir.join(format!("{}.{}", bundle.run_id, encoding.extension()));
    let (bytes, parts) = stored_bundle(bundle, encoding)?;
    // The parts first: a bundle on disk always finds what it refers to.
    write_parts(dir, &parts)?;
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
