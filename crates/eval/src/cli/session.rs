//! Glue shared by the commands and the tests: the platform flags, the embedded runtime
//! and the engine's workload runs with their failures classified for exit codes.

use std::path::Path;

use anyhow::Result;
use knox_attest::simulated::Simulated;
pub use knox_engine::RegulationSetup;
use knox_harness::Harness;
pub use knox_harness::{ExecutorKind, Suite, SuiteRun};
use knox_monitor::run::RunOutcome;

use knox_command::error::{Kind, KindExt as _, fail};

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
    #[arg(value_parser = knox_command::files::path, long, value_name = "JSON", required_if_eq("platform", "tdx"))]
    pub collateral: Option<std::path::PathBuf>,
    /// TDX: also bind NVIDIA GPU evidence collected through NVML.
    #[arg(long)]
    pub gpus: bool,
    /// TDX: the configfs-tsm report directory.
    #[arg(value_parser = knox_command::files::path, long, default_value = "/sys/kernel/config/tsm/report")]
    pub configfs: std::path::PathBuf,
}

/// The platform backend `p` names.
pub fn backend(p: &PlatformArgs) -> Result<Box<dyn knox_attest::PlatformBackend>> {
    Ok(match p.platform {
        PlatformKind::Simulated => Box::new(Simulated),
        PlatformKind::Tdx => {
            let path = p.collateral.as_ref().ok_or_else(|| {
                knox_command::files::usage("--collateral is required with --platform tdx")
            })?;
            let collateral: serde_json::Value = serde_json::from_slice(
                &knox_command::files::read_input(path, knox_command::files::COLLATERAL)?,
            )
            .map_err(|e| {
                knox_command::files::bad_input(path, "Intel collateral (dcap-qvl JSON)", e)
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

/// A runtime over `manifest` bound through `backend`, for sessions that share one key.
pub fn runtime_over(
    backend: &dyn knox_attest::PlatformBackend,
    nonce: &[u8],
    manifest: knox_policy::ToolkitManifest,
) -> Result<knox_monitor::run::Runtime> {
    knox_monitor::run::Runtime::start(backend, nonce, manifest)
        .kind_context(Kind::Unavailable, || {
            format!("binding the key through `{}`", backend.mode())
        })
}

/// The runtime on the embedded dataset and manifest, with simulated platform evidence.
pub fn embedded_runtime(nonce: &[u8]) -> Result<Harness> {
    Harness::embedded(&Simulated, nonce).kind_context(Kind::Software, || {
        "starting the runtime on the embedded defaults".into()
    })
}

/// The embedded InjecAgent data.
pub fn embedded_data() -> Result<knox_dataset::Dataset> {
    knox_dataset::Dataset::embedded().kind_context(Kind::Software, || {
        "loading the embedded InjecAgent data".into()
    })
}

/// Builds a suite run's session, a failure classified: a platform that cannot bind
/// the key is unavailable, a missing or contradictory piece is the caller's.
pub fn build(builder: knox_engine::SessionBuilder) -> Result<knox_engine::Session> {
    builder.build().map_err(|e| match &e {
        knox_engine::EngineError::Platform { .. } => fail(Kind::Unavailable, e.to_string()),
        _ => classify(anyhow::Error::new(e)),
    })
}

/// Runs every bundle of `run` through `session`; `each` sees every outcome as it is
/// produced.
pub fn run_suite(
    session: &knox_engine::Session,
    run: &SuiteRun<'_>,
    each: impl FnMut(&RunOutcome) -> Result<()>,
) -> Result<usize> {
    run.run(session, each).map_err(classify)
}

/// The announcement of `rt`'s in-TEE key (evidence format §6a).
pub fn announcement(rt: &knox_monitor::run::Runtime) -> Result<knox_types::bundle::Announcement> {
    rt.announce()
        .map_err(|e| fail(Kind::Software, format!("cannot announce the key: {e}")))
}

/// The toolkit manifest the verifier trusts by default: the embedded one.
pub fn embedded_manifest() -> Result<knox_policy::ToolkitManifest> {
    Suite::Injecagent
        .manifest()
        .kind_context(Kind::Software, || {
            "loading the embedded toolkit manifest".into()
        })
}

/// An engine error the caller caused (too few flows, …) as a usage failure; anything
/// else as it is.
fn classify(e: anyhow::Error) -> anyhow::Error {
    let usage = match (
        e.downcast_ref::<knox_engine::EngineError>(),
        e.downcast_ref::<knox_harness::HarnessError>(),
    ) {
        (Some(engine), _) => engine.is_usage(),
        (_, Some(harness)) => harness.is_usage(),
        _ => false,
    };
    if usage {
        knox_command::files::usage(e.to_string())
    } else {
        e
    }
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

/// The deterministic executor the models leave in charge (benign when a model executes).
pub fn executor_kind(models: &knox_models::Models) -> ExecutorKind {
    match models.executor_spec() {
        knox_models::ModelSpec::Injected => ExecutorKind::Injected,
        _ => ExecutorKind::Benign,
    }
}

/// `builder` with `models`' planner and executor in place of the deterministic ones,
/// where models were named.
pub fn apply_models(
    models: &knox_models::Models,
    mut builder: knox_engine::SessionBuilder,
) -> knox_engine::SessionBuilder {
    if let Some(p) = models.planner() {
        builder = builder.planner(p);
    }
    if let Some(e) = models.executor() {
        builder = builder.executor(e);
    }
    builder
}
