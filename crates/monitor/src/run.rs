//! Running one bundle end to end: plan → APM → mediated execution by concurrent
//! sub-agents → signed AEG → evidence bundle.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use knox_attest::platform::{KeyBinding, PlatformBackend, PlatformError};
use knox_attest::{TeeKey, key::KeyGenError};

use crate::key::MonitorKey;
use knox_policy::{ManifestError, ToolkitManifest};
use knox_types::Action;
use knox_types::apm::{StopPolicy, Topology, TopologyKind};
use knox_types::bundle::{BUNDLE_FORMAT, Bundle, KeyChain, ModelInfo, PlatformEvidence, Summary};
use knox_types::canon::CanonError;
use knox_types::dsse::Envelope;
use knox_types::payload::GuardKind;
use serde_json::Value;

use crate::aeg::{AegBuilder, Checkpoints, FinishedAeg, JOURNAL_FORMAT, Journal};
use knox_agent::{
    AgentTask, ExecutorFactory, Label, Observation, Planner, Prompt, Regulations, RunContext, Step,
    ToolHost, ToolRunner,
};

use crate::apm::{self, ApmError};
use crate::guard::stop::StopSignal;
use crate::monitor::{Monitor, MonitorConfig, Verdict};

/// Most proposals one executor may make in a run, whatever the stop policy says; a
/// runaway executor is cut off here.
pub const HARD_STEP_CAP: u32 = 10_000;

/// Errors that prevent a run (never a decision about an action: those are verdicts).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The tool host could not serve the run.
    #[error("tool host: {0}")]
    Host(String),
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// No APM.
    #[error(transparent)]
    Apm(#[from] ApmError),
    /// No key.
    #[error(transparent)]
    Key(#[from] KeyGenError),
    /// No platform evidence.
    #[error(transparent)]
    Platform(#[from] PlatformError),
    /// Hashing failed.
    #[error(transparent)]
    Canon(#[from] CanonError),
    /// The regulation configuration does not fit the policy set.
    #[error(transparent)]
    Regulation(#[from] knox_regulation::RegulatorError),
    /// The journal could not be written.
    #[error("journal: {0}")]
    Journal(#[from] std::io::Error),
    /// A key is announced once, before its first run.
    #[error(
        "the key cannot be announced: its chain is at number {0} (runs were sealed, or it was announced)"
    )]
    Announced(u64),
}

/// What lives for the whole process: the in-TEE key, its platform evidence and the
/// toolkit manifest.
#[derive(Debug)]
pub struct Runtime {
    /// The in-TEE key: private to this crate, which signs with it only what a run of
    /// its own made (its APM, its checkpoints, its summary). Nothing outside reads or
    /// signs with it; its public half is [`Runtime::public_key`].
    key: Arc<TeeKey>,
    /// Evidence binding it.
    pub platform: PlatformEvidence,
    /// The toolkit manifest.
    pub manifest: ToolkitManifest,
    /// How long collecting the platform evidence took.
    pub platform_time: Duration,
    /// How often the key signs a checkpoint into each run's journal.
    pub checkpoints: Checkpoints,
    /// The key's chain of sealed runs: the next run's number and what it names as the
    /// run before it.
    chain: std::sync::Mutex<KeyChain>,
}

impl Runtime {
    /// Generates the key and binds it through `backend`, with the regulator-supplied
    /// epoch `nonce`.
    pub fn start(
        backend: &dyn PlatformBackend,
        nonce: &[u8],
        manifest: ToolkitManifest,
    ) -> Result<Self, RunError> {
        Self::bind(Arc::new(TeeKey::generate()?), backend, nonce, manifest)
    }

    /// A runtime on **simulated** platform evidence whose key the caller made and
    /// keeps: for tests that sign as a run's key would (a compromised monitor's
    /// evidence, a provider re-signing its runs).
    ///
    /// It gives nobody anything: simulated evidence has no root of trust, so anyone can
    /// already make it for any key, and a verifier accepts it only when told to accept
    /// simulated evidence. A key known outside the process is never bound by hardware
    /// evidence: no constructor takes a key with another platform.
    pub fn simulated_with_key(
        key: Arc<TeeKey>,
        nonce: &[u8],
        manifest: ToolkitManifest,
    ) -> Result<Self, RunError> {
        Self::bind(key, &knox_attest::simulated::Simulated, nonce, manifest)
    }

    fn bind(
        key: Arc<TeeKey>,
        backend: &dyn PlatformBackend,
        nonce: &[u8],
        manifest: ToolkitManifest,
    ) -> Result<Self, RunError> {
        let t = Instant::now();
        let platform = backend.collect(&KeyBinding {
            public_key: key.public_bytes(),
            nonce: nonce.to_vec(),
            chain_head: None,
        })?;
        let platform_time = t.elapsed();
        let start = KeyChain::start(&knox_types::Digest::of_json(
            knox_types::digest::tag::PLATFORM,
            &platform,
        )?);
        Ok(Self {
            key,
            platform,
            manifest,
            platform_time,
            checkpoints: Checkpoints::DEFAULT,
            chain: std::sync::Mutex::new(KeyChain {
                seq: 0,
                prev: start,
            }),
        })
    }

    /// The in-TEE key, as the handle a monitor of this runtime signs with (nothing
    /// outside this crate can sign with it).
    pub fn monitor_key(&self) -> MonitorKey<'_> {
        MonitorKey::new(&self.key)
    }

    /// The in-TEE key's public half, as bundles carry it.
    pub fn public_key(&self) -> knox_types::bundle::PublicKey {
        self.key.public_key()
    }

    /// The in-TEE key's raw public key.
    pub fn public_bytes(&self) -> [u8; 32] {
        self.key.public_bytes()
    }

    /// `H("knox/key", public key)` of the in-TEE key.
    pub fn key_id(&self) -> knox_types::Digest {
        self.key.key_id()
    }

    /// The key's announcement: its first summary (number 0 of its chain of runs),
    /// signed now, for a store to receive before any run (`knox run --stream-to`), so
    /// that a process whose runs are all withheld shows as a key announced and never
    /// followed. The key's runs are then numbered from 1, the first naming it. Only
    /// before the first run is sealed: afterwards number 0 is taken.
    pub fn announce(&self) -> Result<knox_types::bundle::Announcement, RunError> {
        let mut chain = self
            .chain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let platform =
            knox_types::Digest::of_json(knox_types::digest::tag::PLATFORM, &self.platform)?;
        let summary = knox_types::bundle::Announcement::summary_for(&platform);
        if summary.key_chain != Some(*chain) {
            return Err(RunError::Announced(chain.seq));
        }
        let envelope = knox_attest::dsse::sign(&*self.key, &summary.to_statement()?)?;
        *chain = KeyChain {
            seq: 1,
            prev: summary.seal_digest()?,
        };
        Ok(knox_types::bundle::Announcement {
            format: knox_types::bundle::ANNOUNCEMENT_FORMAT.into(),
            key: self.key.public_key(),
            platform: self.platform.clone(),
            summary,
            envelope,
        })
    }

    /// Signs `summary` as the key's next sealed run: numbers it in the key's chain and
    /// names the run sealed before it, under one lock, so that runs sealed at once on
    /// several threads still form one chain. A summary that fails to sign takes no
    /// number.
    fn sign_next(&self, summary: &mut Summary) -> Result<Envelope, RunError> {
        let mut chain = self
            .chain
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        summary.key_chain = Some(*chain);
        let envelope = knox_attest::dsse::sign(&*self.key, &summary.to_statement()?)?;
        let sealed = summary.seal_digest()?;
        *chain = KeyChain {
            seq: chain.seq + 1,
            prev: sealed,
        };
        Ok(envelope)
    }
}

/// How to run bundles.
pub struct RunConfig<'a> {
    /// The run's shape: tasks and sub-agents.
    pub topology: Topology,
    /// The planner.
    pub planner: &'a dyn Planner,
    /// The executor.
    pub executor: &'a dyn ExecutorFactory,
    /// The regulation policy set (it must be the one `regulations.policy_hash` names);
    /// `None` leaves disclosures `not_applicable`, flagged for manual review.
    pub norms: Option<&'a knox_regulation::Norms>,
    /// A judge for disclosures whose content no data label reaches.
    pub judge: Option<&'a dyn knox_regulation::Judge>,
    /// Regulations in force.
    pub regulations: Regulations,
    /// Stop policy.
    pub stop: StopPolicy,
    /// External stop signal.
    pub signal: StopSignal,
    /// Directory for journals, when journaling.
    pub journal_dir: Option<&'a Path>,
    /// Where tools run: `None` runs them in process with [`run_prompt`]'s runner; a
    /// host (the broker) runs them in confined workers under grants.
    pub host: Option<&'a dyn ToolHost>,
    /// When set, a refresh report from this backend binds each run's chain head to the
    /// same key with fresh platform evidence (one report per bundle).
    pub refresh: Option<&'a dyn PlatformBackend>,
    /// The signed capability contract bounding every run (see [`PlanSpec::contract`]).
    pub contract: Option<&'a knox_contract::Verified>,
    /// Where approval tokens for the contract's high-impact actions come from.
    pub approvals: Option<&'a dyn crate::monitor::ApprovalSource>,
}

impl std::fmt::Debug for RunConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunConfig")
            .field("topology", &self.topology)
            .finish_non_exhaustive()
    }
}

/// Allowed and blocked proposals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Proposals allowed.
    pub allowed: u64,
    /// Proposals blocked.
    pub blocked: u64,
}

impl Tally {
    /// Adds another tally.
    pub fn merge(&mut self, o: Self) {
        self.allowed += o.allowed;
        self.blocked += o.blocked;
    }
}

/// Outcome counts of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Proposals made.
    pub proposals: u64,
    /// Allowed and blocked proposals per executor [`Label`] (the run loop does not
    /// interpret labels; an interrupted proposal is in no tally).
    pub labels: BTreeMap<Label, Tally>,
    /// Blocks by the first failing guard.
    pub blocked_by: BTreeMap<GuardKind, u64>,
    /// Interrupts.
    pub interrupts: u64,
    /// Runs whose planner gave no valid plan (each ends in one `plan_failed` interrupt,
    /// also counted in `interrupts`; nothing ran).
    pub plan_failures: u64,
    /// Denials the kernel layer or the broker recorded while allowed tools ran.
    pub kernel_denials: u64,
    /// Time spent inside the monitor (mediation and output recording), summed over agents.
    pub monitor_time: Duration,
    /// Time spent running tools, summed over agents.
    pub tool_time: Duration,
}

impl RunStats {
    fn add(&mut self, label: Label, allowed: bool) {
        let tally = self.labels.entry(label).or_default();
        if allowed {
            tally.allowed += 1;
        } else {
            tally.blocked += 1;
        }
    }

    /// The tally of proposals labelled `label`.
    pub fn tally(&self, label: Label) -> Tally {
        self.labels.get(&label).copied().unwrap_or_default()
    }

    /// Adds another run's counts.
    pub fn merge(&mut self, o: &Self) {
        self.proposals += o.proposals;
        for (l, t) in &o.labels {
            self.labels.entry(*l).or_default().merge(*t);
        }
        self.interrupts += o.interrupts;
        self.plan_failures += o.plan_failures;
        self.kernel_denials += o.kernel_denials;
        self.monitor_time += o.monitor_time;
        self.tool_time += o.tool_time;
        for (g, n) in &o.blocked_by {
            *self.blocked_by.entry(*g).or_default() += n;
        }
    }
}

/// Where a run's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTimings {
    /// Planning and APM derivation.
    pub apm: Duration,
    /// Signing the APM and the summary.
    pub sign: Duration,
    /// The whole run, wall clock.
    pub total: Duration,
}

/// One bundle's result.
#[derive(Debug)]
pub struct RunOutcome {
    /// The evidence.
    pub bundle: Bundle,
    /// Counts.
    pub stats: RunStats,
    /// Timings.
    pub timings: RunTimings,
}

/// What planning a run needs besides the prompt: the run's shape, its planner and the
/// rules and models its APM names.
pub struct PlanSpec<'a> {
    /// The run's shape: tasks and sub-agents.
    pub topology: Topology,
    /// The planner.
    pub planner: &'a dyn Planner,
    /// Regulations in force.
    pub regulations: &'a Regulations,
    /// Stop policy.
    pub stop: &'a StopPolicy,
    /// The models the bundle lists (planner, executor, judge).
    pub models: Vec<ModelInfo>,
    /// Directory for journals, when journaling.
    pub journal_dir: Option<&'a Path>,
    /// The signed capability contract bounding the run: its hash goes into the APM's
    /// inputs, its envelope into the journal header and the bundle.
    pub contract: Option<&'a knox_contract::Verified>,
}

impl std::fmt::Debug for PlanSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanSpec")
            .field("topology", &self.topology)
            .field("models", &self.models)
            .field("journal_dir", &self.journal_dir)
            .finish_non_exhaustive()
    }
}

/// A planned run: its APM derived, hashed and attested, the journal (when journaling)
/// opened with its header; nothing mediated yet. A [`Monitor`] started on it with
/// [`start`] mediates the run, and [`seal_planned`] seals what it recorded.
#[derive(Clone, Debug)]
pub struct Planned {
    /// Run identifier.
    pub run_id: String,
    /// The user's prompt.
    pub prompt: Prompt,
    /// The APM.
    pub apm: knox_types::apm::Apm,
    /// `H(APM)`.
    pub apm_hash: knox_types::Digest,
    /// The APM's signed, platform-bound attestation.
    pub apm_attestation: knox_types::bundle::ApmAttestation,
    /// The models the bundle lists.
    pub models: Vec<ModelInfo>,
    /// How long planning and APM derivation took.
    pub apm_time: Duration,
    /// How long signing the APM took.
    pub sign_time: Duration,
    /// The signed capability contract the APM names, if any.
    pub contract: Option<knox_contract::Verified>,
}

impl Planned {
    /// Whether the planner gave no valid plan: the monitor then commits one attested
    /// `plan_failed` interrupt and nothing may run.
    pub fn plan_failed(&self) -> bool {
        self.apm.planning.is_some()
    }

    /// The tool names the run's toolkits offer, sorted.
    pub fn offered(&self, manifest: &ToolkitManifest) -> Vec<String> {
        let mut t: Vec<String> = manifest
            .tools()
            .filter(|t| self.apm.guards.syscall.toolkits.contains(&t.toolkit))
            .map(|t| t.name.clone())
            .collect();
        t.sort();
        t
    }
}

/// Plans `prompt` under `spec`: derives, hashes and attests the APM and, when
/// journaling, opens the run's journal (returned beside the plan, for [`start`]).
pub fn plan(
    rt: &Runtime,
    prompt: &Prompt,
    spec: &PlanSpec<'_>,
    run_id: &str,
) -> Result<(Planned, Option<Journal>), RunError> {
    let t = Instant::now();
    let mut apm = apm::derive(
        prompt,
        &rt.manifest,
        spec.regulations,
        spec.stop,
        spec.planner,
        spec.topology,
    )?;
    apm.inputs.contract = spec.contract.map(|c| c.hash);
    apm.guards.remote = remote_models(&spec.models);
    let apm_hash = apm.hash()?;
    let apm_time = t.elapsed();
    let t = Instant::now();
    // Signed with the APM: the platform evidence, the journal's checkpoint cadence (a
    // journal missing checkpoints it promised is tampered, not a crash's prefix) and the
    // contract's authority (the contract's hash covers its body, not its signer).
    let bound = apm::Bound {
        platform: Some(&rt.platform),
        checkpoints: spec.journal_dir.map(|_| rt.checkpoints.normalized()),
        contract_authority: spec
            .contract
            .map(|c| knox_attest::key::key_id(&c.authority.public_key.0)),
    };
    let apm_attestation = apm::attest_bound(&apm, apm_hash, rt.monitor_key(), bound)?;
    let sign_time = t.elapsed();
    let journal = match spec.journal_dir {
        Some(dir) => {
            let header = knox_types::bundle::JournalHeader {
                format: JOURNAL_FORMAT.into(),
                run_id: run_id.into(),
                prompt: Some(serde_json::to_value(prompt).map_err(CanonError::from)?),
                apm: apm.clone(),
                apm_attestation: apm_attestation.clone(),
                key: rt.key.public_key(),
                platform: rt.platform.clone(),
                models: spec.models.clone(),
                contract: spec.contract.map(embedded_contract),
                manifest: embedded_manifest(&rt.manifest),
            };
            Some(Journal::create(
                &dir.join(format!("{run_id}.journal.jsonl")),
                &header,
                rt.monitor_key(),
                rt.checkpoints,
            )?)
        }
        None => None,
    };
    let planned = Planned {
        run_id: run_id.into(),
        prompt: prompt.clone(),
        apm,
        apm_hash,
        apm_attestation,
        models: spec.models.clone(),
        apm_time,
        sign_time,
        contract: spec.contract.cloned(),
    };
    Ok((planned, journal))
}

/// The models of `models` behind a remote endpoint, once each: their operators are
/// recipients of what the run sends them (`Guards::remote`).
pub fn remote_models(models: &[ModelInfo]) -> Vec<knox_types::apm::RemoteModel> {
    let mut out: Vec<knox_types::apm::RemoteModel> = Vec::new();
    for m in models.iter().filter_map(knox_types::apm::RemoteModel::of) {
        if !out.contains(&m) {
            out.push(m);
        }
    }
    out
}

/// How a started monitor guards: the regulation norms and judge, the external stop
/// signal, and whether allowed calls get grants (a host runs them).
#[derive(Clone, Default)]
pub struct Guarding<'a> {
    /// The regulation policy set (it must be the one the APM's regulations name).
    pub norms: Option<&'a knox_regulation::Norms>,
    /// A judge for disclosures whose content no data label reaches.
    pub judge: Option<&'a dyn knox_regulation::Judge>,
    /// External stop signal.
    pub signal: StopSignal,
    /// Issue signed grants for allowed calls (a tool host runs them).
    pub grants: bool,
    /// Where approval tokens for the contract's high-impact actions come from.
    pub approvals: Option<&'a dyn crate::monitor::ApprovalSource>,
}

impl std::fmt::Debug for Guarding<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarding")
            .field("norms", &self.norms.is_some())
            .field("judge", &self.judge.map(|j| j.model().name))
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

/// Starts the monitor on a planned run, recording into `journal` as well when given.
pub fn start<'p>(
    rt: &'p Runtime,
    planned: &'p Planned,
    journal: Option<Journal>,
    guarding: Guarding<'p>,
) -> Result<Monitor<'p>, RunError> {
    let regulator =
        knox_regulation::Regulator::new(&planned.apm.guards.regulation, guarding.norms)?;
    Ok(Monitor::start(
        MonitorConfig {
            apm: &planned.apm,
            apm_hash: planned.apm_hash,
            run_id: &planned.run_id,
            manifest: &rt.manifest,
            key: rt.monitor_key(),
            models: &planned.models,
            signal: guarding.signal,
            aeg: AegBuilder::new(journal),
            grants: guarding.grants,
            contract: planned.contract.as_ref(),
            approvals: guarding.approvals,
        },
        regulator,
        guarding.judge,
    ))
}

/// Seals a finished monitor's AEG for `planned` into a signed bundle; with `refresh`,
/// a refresh report binds the chain head too. A journal write that failed fails here.
pub fn seal_planned(
    rt: &Runtime,
    planned: Planned,
    mut aeg: FinishedAeg,
    refresh: Option<&dyn PlatformBackend>,
) -> Result<Bundle, RunError> {
    if let Some(e) = aeg.journal_error.take() {
        return Err(RunError::Journal(e));
    }
    let contract = planned.contract.as_ref().map(embedded_contract);
    let mut bundle = seal(
        rt,
        &planned.run_id,
        Some(&planned.prompt),
        planned.apm,
        planned.apm_attestation,
        planned.models,
        aeg,
    )?;
    bundle.contract = contract;
    if let Some(backend) = refresh {
        let refresh = backend.collect(&KeyBinding {
            public_key: rt.key.public_bytes(),
            nonce: rt.platform.nonce.0.clone(),
            chain_head: Some(bundle.summary.chain_head.0),
        })?;
        bind_refresh(rt, &mut bundle, refresh)?;
    }
    Ok(bundle)
}

/// Runs one prompt (its tasks planned by `cfg.planner`) with `tools` running the
/// allowed calls — or, when `cfg.host` is set, answering in process for the host the
/// tools it does not run for real; `started` is when the run began, for its timings.
pub fn run_prompt(
    rt: &Runtime,
    prompt: &Prompt,
    tools: &dyn ToolRunner,
    cfg: &RunConfig<'_>,
    run_id: &str,
    started: Instant,
) -> Result<RunOutcome, RunError> {
    let mut models = vec![cfg.planner.model(), cfg.executor.model()];
    if let Some(j) = cfg.judge {
        models.push(j.model());
    }
    let spec = PlanSpec {
        topology: cfg.topology,
        planner: cfg.planner,
        regulations: &cfg.regulations,
        stop: &cfg.stop,
        models,
        journal_dir: cfg.journal_dir,
        contract: cfg.contract,
    };
    let (planned, journal) = plan(rt, prompt, &spec, run_id)?;
    let guarding = Guarding {
        norms: cfg.norms,
        judge: cfg.judge,
        signal: cfg.signal.clone(),
        grants: cfg.host.is_some(),
        approvals: cfg.approvals,
    };
    let t_start = Instant::now();
    let monitor = start(rt, &planned, journal, guarding)?;
    let start_time = t_start.elapsed();
    let public_key = rt.key.public_key();
    let hosted = match cfg.host {
        Some(h) if !planned.plan_failed() => {
            let cx = RunContext {
                apm: &planned.apm,
                apm_hash: planned.apm_hash,
                monitor_key: &public_key,
                run_id,
                canned: tools,
            };
            Some(h.runner(cx).map_err(RunError::Host)?)
        }
        _ => None,
    };
    let runner: &dyn ToolRunner = hosted.as_deref().unwrap_or(tools);
    let offered = planned.offered(&rt.manifest);
    let mut stats = if planned.plan_failed() {
        // Nothing may run: the monitor committed the attested `plan_failed` interrupt.
        RunStats {
            interrupts: 1,
            plan_failures: 1,
            ..RunStats::default()
        }
    } else {
        execute(&monitor, &planned.apm, cfg.executor, runner, &offered)
    };
    drop(hosted);
    let t_finish = Instant::now();
    let aeg = monitor.finish();
    stats.monitor_time += start_time + t_finish.elapsed();
    let (apm_time, mut sign_time) = (planned.apm_time, planned.sign_time);
    let t = Instant::now();
    let bundle = seal_planned(rt, planned, aeg, cfg.refresh)?;
    sign_time += t.elapsed();
    let timings = RunTimings {
        apm: apm_time,
        sign: sign_time,
        total: started.elapsed(),
    };
    Ok(RunOutcome {
        bundle,
        stats,
        timings,
    })
}

/// Adds a refresh report to a sealed bundle and signs the summary again, now naming
/// the report's hash, so every byte of it is bound.
pub fn bind_refresh(
    rt: &Runtime,
    bundle: &mut Bundle,
    refresh: PlatformEvidence,
) -> Result<(), RunError> {
    bundle.summary.refresh = Some(knox_types::Digest::of_json(
        knox_types::digest::tag::REFRESH,
        &refresh,
    )?);
    bundle.envelope = knox_attest::dsse::sign(&*rt.key, &bundle.summary.to_statement()?)?;
    bundle.refresh = Some(refresh);
    Ok(())
}

/// Signs a finished AEG and assembles the evidence bundle.
pub fn seal(
    rt: &Runtime,
    run_id: &str,
    prompt: Option<&Prompt>,
    apm: knox_types::apm::Apm,
    apm_attestation: knox_types::bundle::ApmAttestation,
    models: Vec<ModelInfo>,
    aeg: FinishedAeg,
) -> Result<Bundle, RunError> {
    let mut summary = Summary {
        format: BUNDLE_FORMAT.into(),
        run_id: run_id.into(),
        chain_head: aeg.chain_head,
        structure_root: aeg.structure_root,
        apm_hash: apm_attestation.statement.apm_hash,
        counts: aeg.counts,
        refresh: None,
        key_chain: None,
    };
    let envelope = rt.sign_next(&mut summary)?;
    let prompt = prompt
        .map(serde_json::to_value)
        .transpose()
        .map_err(CanonError::from)?;
    Ok(Bundle {
        format: BUNDLE_FORMAT.into(),
        run_id: run_id.into(),
        prompt,
        apm,
        apm_attestation,
        nodes: aeg.nodes,
        summary,
        envelope,
        key: rt.key.public_key(),
        platform: rt.platform.clone(),
        refresh: None,
        models,
        manifest: embedded_manifest(&rt.manifest),
        contract: None,
        as_written: None,
    })
}

/// The signed contract as a bundle or journal carries it.
fn embedded_contract(c: &knox_contract::Verified) -> knox_types::bundle::SignedContract {
    knox_types::bundle::SignedContract {
        authority: c.authority.clone(),
        envelope: c.envelope.clone(),
    }
}

/// The manifest's canonical bytes for the bundle, unless every verifier of this build
/// knows the manifest by its hash (the shipped ones).
fn embedded_manifest(m: &ToolkitManifest) -> Option<String> {
    if knox_policy::shipped::is_known(&m.hash()) {
        return None;
    }
    String::from_utf8(m.canonical_bytes().to_vec()).ok()
}

/// Runs every agent of the APM; sub-agents of a multi-agent run on their own threads.
fn execute(
    monitor: &Monitor<'_>,
    apm: &knox_types::apm::Apm,
    factory: &dyn ExecutorFactory,
    tools: &dyn ToolRunner,
    offered: &[String],
) -> RunStats {
    let scripts: Vec<(String, AgentTask)> = apm
        .agents
        .iter()
        .map(|a| {
            let plan = a
                .trajectory
                .iter()
                .filter_map(|e| Action::new(&e.tool, Value::Object(e.params.clone())).ok())
                .collect();
            let instructions = a
                .tasks
                .iter()
                .filter_map(|t| {
                    apm.tasks
                        .iter()
                        .find(|p| p.id == *t)
                        .map(|p| p.instruction.clone())
                })
                .collect();
            (
                a.id.clone(),
                AgentTask {
                    instructions,
                    plan,
                    tools: offered.to_vec(),
                },
            )
        })
        .collect();
    let mut total = RunStats::default();
    if apm.topology.kind == TopologyKind::MtMa {
        let results: Vec<RunStats> = std::thread::scope(|s| {
            let handles: Vec<_> = scripts
                .into_iter()
                .map(|(id, plan)| s.spawn(move || agent_loop(monitor, &id, factory, plan, tools)))
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for r in &results {
            total.merge(r);
        }
    } else {
        for (id, plan) in scripts {
            total.merge(&agent_loop(monitor, &id, factory, plan, tools));
        }
    }
    total
}

/// One agent: propose, get a verdict, execute when allowed, observe.
fn agent_loop(
    monitor: &Monitor<'_>,
    id: &str,
    factory: &dyn ExecutorFactory,
    task: AgentTask,
    tools: &dyn ToolRunner,
) -> RunStats {
    let mut exec = factory.build(task);
    let mut stats = RunStats::default();
    let mut last: Option<Observation> = None;
    for _ in 0..HARD_STEP_CAP {
        let Step::Propose(raw, label) = exec.next(last.as_ref()) else {
            break;
        };
        stats.proposals += 1;
        let t = Instant::now();
        let verdict = monitor.mediate(id, &raw);
        stats.monitor_time += t.elapsed();
        last = Some(match verdict {
            Verdict::Allow(ticket) => {
                stats.add(label, true);
                let t = Instant::now();
                let result = tools.run(&ticket.action, ticket.grant.as_ref());
                let t2 = Instant::now();
                stats.tool_time += t2 - t;
                let out = result.output.clone();
                stats.kernel_denials += result.kernel.len() as u64;
                monitor.record_result(ticket, result);
                stats.monitor_time += t2.elapsed();
                Observation::Output(out)
            }
            Verdict::Block { guard, reason } => {
                stats.add(label, false);
                *stats.blocked_by.entry(guard).or_default() += 1;
                Observation::Blocked(reason)
            }
            Verdict::Interrupt { .. } => {
                // A stop is neither an allowed nor a blocked action: counted on its own.
                stats.interrupts += 1;
                break;
            }
            Verdict::Stopped => break,
        });
    }
    stats
}

/// The models a bundle lists, for reports.
pub fn model_names(models: &[ModelInfo]) -> String {
    models
        .iter()
        .map(|m| format!("{}={}", m.role, m.name))
        .collect::<Vec<_>>()
        .join(", ")
}
