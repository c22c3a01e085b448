//! Fixtures: a shared runtime and bundles of every topology.

use std::sync::OnceLock;

use knox::session::{self, ExecutorKind, Suite, SuiteRun};
use knox_engine::{Session, SessionBuilder};
use knox_monitor::run::RunOutcome;
use knox_policy::ToolkitManifest;
use knox_types::bundle::Bundle;
use knox_verify::{Options, Outcome, Report};

pub(super) fn runtime() -> &'static knox_harness::Harness {
    static RT: OnceLock<knox_harness::Harness> = OnceLock::new();
    RT.get_or_init(|| session::embedded_runtime(b"test-epoch").unwrap())
}

pub(super) fn manifest() -> &'static ToolkitManifest {
    static M: OnceLock<ToolkitManifest> = OnceLock::new();
    M.get_or_init(|| session::embedded_manifest().unwrap())
}

pub(super) const ALLOW: Options = knox_verify::Options::DANGEROUS_SIMULATED;

/// The `knox` binary under test.
pub(super) fn knox() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_knox"))
}

/// Whether the tests run as root (tools then run as the unprivileged uid 65520).
pub(super) fn caller_is_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Whether a `knox` run could not start its kernel sandbox here (exit 69 naming it):
/// the caller then skips, saying so. In CI the sandbox must be there: it fails instead.
pub(super) fn sandbox_unavailable(o: &std::process::Output) -> bool {
    let stderr = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(69) || !stderr.contains("kernel sandbox") {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "kernel sandbox unavailable in CI: {stderr}"
    );
    eprintln!("skipping: kernel sandbox unavailable here: {stderr}");
    true
}

/// Runs a `knox` invocation; fails the test with both output streams unless it
/// succeeds, and returns its standard output.
pub(super) fn succeeds(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// `knox verify --allow-simulated FILE`: the exit code and everything it printed.
pub(super) fn verify_file(path: &std::path::Path) -> (i32, String) {
    let out = knox()
        .args(["verify", "--allow-simulated"])
        .arg(path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A JSON file the test's run wrote.
pub(super) fn read_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

pub(super) fn verify(b: &Bundle) -> Report {
    knox_verify::verify_bundle(b, manifest(), ALLOW)
}

/// A workload of `flows` InjecAgent flows shaped as `spec`.
pub(super) fn workload(spec: &str, flows: usize) -> SuiteRun<'static> {
    SuiteRun::new(
        Suite::Injecagent,
        &runtime().data,
        spec.parse().unwrap(),
        flows,
    )
}

/// Every outcome of `run` with the deterministic `executor`, in a simulated session
/// `configure` completes (a model, a host, a journal, a stop policy…).
pub(super) fn outcomes_with(
    run: &SuiteRun<'_>,
    executor: ExecutorKind,
    configure: impl FnOnce(SessionBuilder) -> SessionBuilder,
) -> Vec<RunOutcome> {
    let builder = run
        .session(executor)
        .unwrap()
        .platform(knox_attest::simulated::Simulated)
        .nonce(b"test-epoch".to_vec());
    run_all(run, &configure(builder).build().unwrap())
}

/// Every outcome of `run` through `session`.
pub(super) fn run_all(run: &SuiteRun<'_>, session: &Session) -> Vec<RunOutcome> {
    let mut out = Vec::new();
    session::run_suite(session, run, |o| {
        out.push(RunOutcome {
            bundle: o.bundle.clone(),
            stats: o.stats.clone(),
            timings: o.timings,
        });
        Ok(())
    })
    .unwrap();
    out
}

/// Every outcome of the workload `spec` over `flows` flows with `executor`.
pub(super) fn outcomes(spec: &str, executor: ExecutorKind, flows: usize) -> Vec<RunOutcome> {
    outcomes_with(&workload(spec, flows), executor, |b| b)
}

/// One injected-executor bundle of the workload `spec`, using flows starting at `skip`.
pub(super) fn bundle(spec: &str) -> Bundle {
    outcomes(spec, ExecutorKind::Injected, spec_tasks(spec))
        .remove(0)
        .bundle
}

fn spec_tasks(spec: &str) -> usize {
    let w: knox_harness::Workload = spec.parse().unwrap();
    w.0.tasks as usize
}

/// The topologies the tamper suite covers: one of each shape.
pub(super) const TOPOLOGIES: [&str; 5] = [
    "st-sa",
    "mt-sa-seq:2",
    "mt-sa-int:3",
    "mt-ma:4:2",
    "mt-ma:3:3",
];

pub(super) fn assert_tampered(b: &Bundle, what: &str) -> Option<u64> {
    match verify(b).outcome {
        Outcome::Tampered { node, .. } => node,
        other => panic!("{what}: expected tampered, got {other:?}"),
    }
}

use knox_agent::{Plan, PlanRequest, Prompt, Regulations};
use knox_monitor::aeg::{AegBuilder, FinishedAeg};
use knox_monitor::apm as apm_mod;
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::monitor::{Monitor, MonitorConfig};
use knox_types::apm::{Apm, ExpectedCall, StopPolicy, Topology};
use knox_types::bundle::{ApmAttestation, ModelInfo, ModelRole};
use knox_types::digest::Digest;

/// A hand-made plan under the monitor, for guard-level tests.
pub(super) struct Harness {
    pub apm: Apm,
    pub apm_hash: Digest,
    pub att: ApmAttestation,
    pub models: Vec<ModelInfo>,
}

pub(super) fn harness(
    tasks: Vec<Vec<ExpectedCall>>,
    topology: Topology,
    stop: StopPolicy,
) -> Harness {
    let prompt = Prompt {
        tasks: (0..tasks.len()).map(|i| format!("task {i}")).collect(),
    };
    harness_for(prompt, tasks, topology, stop)
}

pub(super) fn harness_for(
    prompt: Prompt,
    tasks: Vec<Vec<ExpectedCall>>,
    topology: Topology,
    stop: StopPolicy,
) -> Harness {
    harness_regulated(prompt, tasks, topology, stop, Regulations::default())
}

/// The embedded regulation policy set.
pub(super) fn norms() -> &'static knox_regulation::Norms {
    static N: OnceLock<knox_regulation::Norms> = OnceLock::new();
    N.get_or_init(|| knox_regulation::Norms::embedded().unwrap())
}

pub(super) fn harness_regulated(
    prompt: Prompt,
    tasks: Vec<Vec<ExpectedCall>>,
    topology: Topology,
    stop: StopPolicy,
    regulations: Regulations,
) -> Harness {
    let apm = apm_mod::from_plan(
        &prompt,
        manifest(),
        &regulations,
        &stop,
        Plan { tasks },
        topology,
    )
    .unwrap();
    let apm_hash = apm.hash().unwrap();
    let att = apm_mod::attest(&apm, apm_hash, runtime().monitor_key()).unwrap();
    let models = vec![ModelInfo {
        role: ModelRole::Executor,
        name: "test-script".into(),
        weights_hash: None,
        declared: false,
    }];
    Harness {
        apm,
        apm_hash,
        att,
        models,
    }
}

impl Harness {
    pub(super) fn monitor(&self, signal: StopSignal, aeg: AegBuilder) -> Monitor<'_> {
        let spec = &self.apm.guards.regulation;
        let norms = spec.policy_hash.map(|_| norms());
        let regulator = knox_regulation::Regulator::new(spec, norms).unwrap();
        self.monitor_deciding(signal, aeg, regulator, None)
    }

    /// A monitor whose regulation guard is `regulator` (with `judge`), whatever the APM
    /// says: how a test plays a monitor that decides otherwise.
    pub(super) fn monitor_deciding<'a>(
        &'a self,
        signal: StopSignal,
        aeg: AegBuilder,
        regulator: knox_regulation::Regulator<'a>,
        judge: Option<&'a dyn knox_regulation::Judge>,
    ) -> Monitor<'a> {
        let rt = runtime();
        let cfg = MonitorConfig {
            signal,
            aeg,
            ..MonitorConfig::new(
                &self.apm,
                self.apm_hash,
                "test-run",
                manifest(),
                rt.monitor_key(),
                &self.models,
            )
        };
        Monitor::start(cfg, regulator, judge)
    }

    pub(super) fn seal(&self, aeg: FinishedAeg) -> Bundle {
        knox_monitor::run::seal(
            runtime(),
            "test-run",
            None,
            self.apm.clone(),
            self.att.clone(),
            self.models.clone(),
            aeg,
        )
        .unwrap()
    }
}

pub(super) fn params(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().cloned().unwrap()
}

pub(super) fn raw(tool: &str, p: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"tool": tool, "params": p})).unwrap()
}

/// The kernel's audit held on while a test needs Landlock's denial records; the
/// tests of this binary run in parallel, so it is switched back off (when it was
/// off) only after the last holder is gone — a test that restored it on its own
/// could switch it off under another one's run.
pub(super) struct AuditOn(());

/// Holders, and whether the audit was off before the first.
static AUDIT_ON: std::sync::Mutex<(usize, bool)> = std::sync::Mutex::new((0, false));

impl AuditOn {
    /// Switches the audit on; `None` when it cannot be (not root, no audit here).
    pub(super) fn take() -> Option<Self> {
        let mut holders = AUDIT_ON
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = knox_sandbox::audit::enable_kernel_audit().ok()?;
        if holders.0 == 0 {
            holders.1 = before.enabled == 0;
        }
        holders.0 += 1;
        Some(Self(()))
    }
}

impl Drop for AuditOn {
    fn drop(&mut self) {
        let mut holders = AUDIT_ON
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        holders.0 = holders.0.saturating_sub(1);
        if holders.0 == 0 && holders.1 {
            let _ = knox_sandbox::audit::set_kernel_audit(false);
        }
    }
}

/// A planner that returns a fixed plan (the tasks' expected calls) in a trajectory mode,
/// whatever the prompt: for tests that drive an engine session with a plan they wrote.
pub(super) struct FixedPlan {
    /// Each task's expected calls.
    pub tasks: Vec<Vec<ExpectedCall>>,
    /// How the plan is followed.
    pub mode: knox_types::apm::TrajectoryMode,
    /// The planner's name, as the bundle's models list it.
    pub name: &'static str,
}

impl knox_agent::Planner for FixedPlan {
    fn plan(&self, _: &PlanRequest<'_>) -> Result<Plan, knox_agent::PlanError> {
        Ok(Plan {
            tasks: self.tasks.clone(),
        })
    }
    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Planner,
            name: self.name.into(),
            weights_hash: None,
            declared: false,
        }
    }
    fn trajectory(&self) -> knox_types::apm::TrajectoryMode {
        self.mode
    }
}

/// The file of prompt run `n` in `dir`: `<prefix>-<8 hex digits of the key id>-<n>` and
/// `suffix` (`.json`, `.journal.jsonl`). Run ids carry their process's key, so the one
/// file of that shape is found; two (the same run number of two processes) fail.
pub(super) fn run_file(
    dir: &std::path::Path,
    prefix: &str,
    n: u32,
    suffix: &str,
) -> std::path::PathBuf {
    let tail = format!("-{n:04}{suffix}");
    let found = run_files(dir, prefix, n, suffix);
    assert_eq!(
        found.len(),
        1,
        "`{prefix}-KEY{tail}` in {}: {found:?}",
        dir.display()
    );
    found.into_iter().next().unwrap()
}

/// Every file of prompt run `n` in `dir` (see [`run_file`]): one per process that wrote
/// a run `n` there; none while nothing was written (or `dir` does not exist yet).
pub(super) fn run_files(
    dir: &std::path::Path,
    prefix: &str,
    n: u32,
    suffix: &str,
) -> Vec<std::path::PathBuf> {
    let tail = format!("-{n:04}{suffix}");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<std::path::PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix(&format!("{prefix}-"))
                .and_then(|r| r.strip_suffix(&tail))
                .is_some_and(|key| key.len() == 8 && key.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .collect();
    found.sort();
    found
}
