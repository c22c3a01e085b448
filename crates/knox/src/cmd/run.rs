//! `knox run`: InjecAgent flows bundled for one workload, one evidence bundle each; or,
//! with `--manifest`, the user's own prompt over the user's own tools
//! ([`super::prompt`]).

use std::path::PathBuf;

use anyhow::Result;
use knox_harness::{GroundTruth, Workload};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::RunStats;
use knox_types::apm::StopPolicy;
use knox_verify::Outcome;
use serde_json::json;

use crate::error::{Kind, KindExt as _};
use crate::session::{self, Suite, SuiteRun};

/// Arguments of `knox run`.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("user_tools").args(["manifest", "contract"]).multiple(false))]
#[command(after_help = crate::exit_codes!(
    "  0   every bundle verified complete, no planned call blocked, no injected call allowed\
   \n  1   the run finished, but a bundle did not verify complete or a guard decided wrongly\
   \n  65  --contract: the contract is malformed, not signed by --contract-authority, or not valid now\
   \n  SIGUSR1, SIGTERM or SIGINT stop the run as the stop file does (interrupts, sealed bundles,\
   \n  the summary; the code as above); a second SIGTERM or SIGINT ends it at once: 143 or 130"
))]
pub struct RunArgs {
    /// Workload: st-sa, mt-sa-seq:T, mt-sa-int:T or mt-ma:T:M.
    #[arg(long, value_parser = clap::value_parser!(Workload), required_unless_present = "user_tools", conflicts_with = "user_tools")]
    pub workload: Option<Workload>,
    /// Your own tools: a `knox-toolkit/1` manifest (`knox toolkit check`). Runs
    /// `--prompt` (or each line of `--tasks`) planned by `--planner MODEL` or `--plan`,
    /// executed by `--executor` (default `benign`: follows the plan), tools answered
    /// from `--responses`; one bundle per run, carrying the manifest.
    #[arg(value_parser = crate::cmd::path, long, value_name = "FILE")]
    pub manifest: Option<PathBuf>,
    /// With `--manifest` or `--contract`: the prompt, one task per `--prompt` (repeatable).
    #[arg(
        long,
        value_name = "TEXT",
        requires = "user_tools",
        conflicts_with = "tasks"
    )]
    pub prompt: Vec<String>,
    /// With `--manifest` or `--contract`: one run per line, `"TEXT"`, `{"prompt": TEXT}`
    /// or `{"tasks": [TEXT, …]}`, optionally with its own `"plan"`.
    #[arg(value_parser = crate::cmd::path, long, value_name = "FILE.jsonl", requires = "user_tools")]
    pub tasks: Option<PathBuf>,
    /// With `--manifest` or `--contract`: your plan, `{"tasks": [{"calls": [{"tool",
    /// "params"}, …]}, …]}` (or `{"calls": […]}` for one task), validated against the
    /// manifest as a model's plan is: declared prose may be reworded, every other
    /// parameter is fixed; a value an earlier call returns is `"$output:K/FIELD"`.
    #[arg(value_parser = crate::cmd::path, long, value_name = "PLAN.json", requires = "user_tools")]
    pub plan: Option<PathBuf>,
    /// With `--manifest`: canned tool outputs, `{"TOOL": OUTPUT}` or `{"TOOL":
    /// {"responses": [O1, O2, …]}}`, answered in process (a stand-in for a tool host).
    #[arg(value_parser = crate::cmd::path, long, value_name = "FILE.json", requires = "manifest")]
    pub responses: Option<PathBuf>,
    /// With `--manifest`: the MCP servers serving its tools (`servers.toml`,
    /// `docs/mcp.md`): stdio servers run confined from their needs, one per server per
    /// run; HTTP servers are reached only at their URL. Their workspaces live under `--out`.
    #[arg(value_parser = crate::cmd::path, long, value_name = "SERVERS.toml", requires = "manifest", conflicts_with = "responses")]
    pub mcp: Option<PathBuf>,
    /// `--contract`, `--contract-authority`, `--approvals`, `--approval-timeout-ms`.
    #[command(flatten)]
    pub bound: super::contract::ContractFlags,
    /// Most calls a model planner's plan may hold per task (a plan you give with
    /// `--plan` may hold up to 1,024).
    #[arg(long, default_value_t = knox_models::tools::MAX_PLANNED_CALLS)]
    pub max_calls: usize,
    /// Planner and executor (`--planner`, `--executor`, `--cache-dir`).
    #[command(flatten)]
    pub models: crate::cmd::model::ModelArgs,
    /// InjecAgent flows to draw (user case × attacker case, deterministic order);
    /// bundled by the workload's task count, the remainder dropped.
    #[arg(long, default_value_t = 60)]
    pub flows: usize,
    /// Output directory for bundles and the summary: new or empty (locked for the run).
    #[arg(value_parser = crate::cmd::path, long)]
    pub out: PathBuf,
    /// Write into a non-empty `--out` that holds no evidence (other files of an
    /// output's name, such as `summary.json`, are replaced; a folder holding bundles,
    /// journals or key announcements is refused: evidence is never replaced; the folder
    /// is still locked against a concurrent run).
    #[arg(long)]
    pub force: bool,
    /// Also append every node to `<run>.journal.jsonl` as it is committed.
    #[arg(long)]
    pub journal: bool,
    /// Journals: sign a checkpoint after at most N nodes, so a journal cut by a crash
    /// is authenticated up to its last checkpoint (`knox verify` says how far).
    #[arg(long, value_name = "N", default_value_t = knox_monitor::aeg::Checkpoints::DEFAULT.every_nodes,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub checkpoint_every_nodes: u64,
    /// Journals: also sign one at the first node committed MS milliseconds or more after
    /// the last.
    #[arg(long, value_name = "MS", default_value_t = knox_monitor::aeg::Checkpoints::DEFAULT.every_ms)]
    pub checkpoint_every_ms: u64,
    /// Stream each run live to a `knox serve` store, `http://HOST:PORT`: first the
    /// process's key announcement (also kept in `--out`: `key-….announcement.json`),
    /// then every node as it is committed (the journal, followed; implies `--journal`),
    /// then the sealed bundle. Signed with `--stream-key`. Workload, `--manifest` and
    /// `--contract` runs.
    #[arg(long, value_name = "URL", requires = "stream_key")]
    pub stream_to: Option<String>,
    /// The provider's private key the stream is signed with (`knox keygen`).
    #[arg(value_parser = crate::cmd::path, long, value_name = "KEY", requires = "stream_to")]
    pub stream_key: Option<PathBuf>,
    /// Stop guard: most proposals per agent.
    #[arg(long)]
    pub max_actions: Option<u32>,
    /// Stop guard: most cost units per agent.
    #[arg(long)]
    pub budget: Option<u64>,
    /// Stop guard: run timeout in milliseconds.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Stop guard: stop when this file exists (SIGUSR1, SIGTERM and SIGINT also stop
    /// the run; a second SIGTERM or SIGINT ends it at once).
    #[arg(value_parser = crate::cmd::path, long)]
    pub stop_file: Option<PathBuf>,
    /// Epoch nonce (hex) bound into the platform evidence with the signing key.
    #[arg(long, default_value = "")]
    pub nonce: String,
    /// Platform evidence backend.
    #[command(flatten)]
    pub platform: crate::session::PlatformArgs,
    /// At the end of each run, bind its chain head to the key with a fresh platform
    /// report (one hardware quote per bundle on TDX).
    #[arg(long)]
    pub refresh: bool,
    /// Which tasks: InjecAgent flows (under the shipped manifest
    /// `data/manifests/injecagent.toolkit.json`), or the terminal suite (real commands,
    /// `data/terminal_tasks.json`, under `data/manifests/terminal.toolkit.json`).
    #[arg(long, value_enum, default_value_t = Suite::Injecagent)]
    pub suite: Suite,
    /// Where tools run: simulated in-process, or in kernel-confined workers through the
    /// broker (grants checked, denied system calls recorded as evidence).
    #[arg(long, value_enum, default_value_t = Tools::Simulated)]
    pub tools: Tools,
    /// With `--tools confined`: keep each run's workspace (`<out>/workspaces/<run>`,
    /// owned by the tools' unprivileged uid) instead of removing it after the run.
    #[arg(long)]
    pub keep_workspaces: bool,
    /// With `--tools confined`: a protection to run without on a kernel that cannot
    /// enforce it, instead of refusing the run (repeatable). `device-ioctl`: before
    /// Landlock ABI 5 (Linux 6.10), `ioctl` on the devices the toolkits grant is not
    /// restricted. The evidence records what each worker got.
    #[arg(long, value_name = "MODE", value_parser = parse_degraded)]
    pub degraded: Vec<knox_sandbox::Degraded>,
    /// Regulations in force and their configuration.
    #[command(flatten)]
    pub regulation: super::regulations::RegulationArgs,
    /// Print the summary (`summary.json`, with `out`) as JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// How the monitor follows the plan: `exact` (the paper's strict sequence; the
    /// default for the shipped suites, which reproduce its figures) or `tolerant` (read
    /// steps may repeat and reorder, writes run as planned; the default with
    /// `--manifest`, for real agents) or `strict` (tolerant until the model has read
    /// labelled data, then the plan's own order). The APM records it.
    #[arg(long, value_name = "MODE")]
    pub trajectory: Option<knox_types::apm::TrajectoryMode>,
    /// How bundles are stored: `json` (`<run>.json`, the format of
    /// `docs/evidence-format.md` §2), `compact` (`<run>.cbor`, `knox-compact/v2`, §9:
    /// a quarter of the bytes or less, expanding back to exactly that JSON) or `store`
    /// (compact files that refer to the parts runs share, the APM's guards, written
    /// once as `parts/<digest>.cbor` in the output folder, §9.5: keep the folder whole).
    /// `knox verify` reads all three (a store's file with its `parts/` beside it).
    #[arg(long, value_enum, value_name = "ENCODING", default_value_t = Evidence::Json)]
    pub evidence: Evidence,
}

/// How bundles are stored (`--evidence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Evidence {
    /// JSON, `<run>.json`.
    Json,
    /// The compact encoding, `<run>.cbor`.
    Compact,
    /// Compact files in a store: `<run>.cbor` and the shared `parts/`.
    Store,
}

impl From<Evidence> for knox_engine::Encoding {
    fn from(e: Evidence) -> Self {
        match e {
            Evidence::Json => Self::Json,
            Evidence::Compact => Self::Compact,
            Evidence::Store => Self::Store,
        }
    }
}

/// Tool execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tools {
    /// In-process functions returning the dataset's responses.
    Simulated,
    /// Confined worker processes (Landlock, seccomp, rlimits, cgroups) via the broker.
    Confined,
}

/// The live stream `--stream-to`/`--stream-key` ask for, following the journals of
/// `--out` (workload, `--manifest` and `--contract` runs alike).
pub(super) fn stream(args: &RunArgs) -> Result<Option<super::serve::Stream>> {
    match (&args.stream_to, &args.stream_key) {
        (Some(url), Some(key)) => Ok(Some(super::serve::Stream::start(url, key, &args.out)?)),
        _ => Ok(None),
    }
}

/// Runs the workload and prints the counts.
pub fn run(args: &RunArgs) -> Result<i32> {
    if let Some(m) = &args.manifest {
        return super::prompt::run(args, m);
    }
    if let Some(c) = args.bound.for_run(&args.out, &args.degraded)? {
        return super::prompt::run_contract(args, c);
    }
    let Some(workload) = args.workload else {
        return Err(super::usage("--workload or --manifest is required"));
    };
    let nonce =
        hex::decode(&args.nonce).map_err(|e| super::usage(format!("--nonce must be hex: {e}")))?;
    if !args.regulation.regulations.is_empty() && args.suite == Suite::Terminal {
        return Err(super::usage(
            "--regulations applies to the InjecAgent suite (terminal tasks disclose nothing)",
        ));
    }
    let _out = super::out_dir(&args.out, args.force)?;
    let mut stream = stream(args)?;
    let mut regulation = args.regulation.setup()?;
    let backend = session::backend(&args.platform)?;
    // `main` installed the handlers of SIGUSR1, SIGTERM and SIGINT before any work.
    let mut signal = StopSignal::from_flag(crate::signals::stop_flag());
    if let Some(f) = &args.stop_file {
        signal = signal.with_file(f.clone());
    }
    let external = args.stop_file.is_some() || cfg!(unix);
    let stop = StopPolicy {
        timeout_ms: args.timeout_ms,
        max_actions: args.max_actions,
        budget: args.budget,
        external,
    };
    let executor = args
        .models
        .executor
        .clone()
        .unwrap_or(knox_models::ModelSpec::Injected);
    if args.suite == Suite::Terminal && (args.models.planner.is_model() || executor.is_model()) {
        return Err(super::usage(
            "the terminal suite runs its reviewed commands with the dataset planner and the benign executor: drop --planner and --executor",
        ));
    }
    let data = session::embedded_data()?;
    // Each suite runs under its own shipped manifest, which its APMs name.
    let suite = SuiteRun::new(args.suite, &data, workload, args.flows);
    let manifest = args.suite.manifest()?;
    let cache_dir = super::absolute_cache_dir(args.models.cache.cache_dir.as_deref())?;
    let models = crate::cmd::model::load(
        &args.models.planner,
        &executor,
        args.regulation.judge.as_ref(),
        cache_dir.as_deref(),
        &manifest,
    )
    .kind(Kind::Unavailable)?;
    if let Some(r) = regulation.as_mut() {
        r.judge = models.judge();
    }
    let mut builder = suite
        .session(crate::session::executor_kind(&models))?
        .platform(backend)
        .nonce(nonce)
        .checkpoints(knox_monitor::aeg::Checkpoints {
            every_nodes: args.checkpoint_every_nodes,
            every_ms: args.checkpoint_every_ms,
        })
        .stop(stop)
        .signal(signal);
    // The plan (the model planner's, else the dataset's) followed in `--trajectory` mode.
    let mode = args.trajectory.unwrap_or_default();
    builder = match models.planner() {
        Some(p) => builder.planner(knox_agent::Following::new(p, mode)),
        None if args.suite == Suite::Terminal => builder,
        None => builder.planner(knox_agent::Following::new(
            knox_harness::DatasetPlanner::new(&data),
            mode,
        )),
    };
    if let Some(e) = models.executor() {
        builder = builder.executor(e);
    }
    if let Some(r) = regulation {
        builder = builder.regulations(r);
    }
    if args.journal || stream.is_some() {
        builder = builder.journal_dir(&args.out);
    }
    builder = builder.refresh(args.refresh);
    if args.tools == Tools::Confined {
        builder = builder.host(
            session::broker(&args.out.join("workspaces"))?
                .keep_workspaces(args.keep_workspaces)
                .accept_degraded(args.degraded.iter().copied()),
        );
    }
    let sess = session::build(builder)?;
    if let Some(s) = stream.as_mut() {
        // Before any run: a process whose runs are all withheld still shows.
        s.announce(&session::announcement(sess.runtime())?, &args.out)?;
    }
    let mut stats = RunStats::default();
    let (mut complete, mut other) = (0u64, Vec::new());
    let mut nodes = 0u64;
    let each = |o: &knox_monitor::run::RunOutcome| -> Result<()> {
        stats.merge(&o.stats);
        nodes += o.bundle.nodes.len() as u64;
        let encoding = knox_engine::Encoding::from(args.evidence);
        let path = args
            .out
            .join(format!("{}.{}", o.bundle.run_id, encoding.extension()));
        if let Some(s) = stream.as_mut() {
            s.seal(&knox_engine::bundle_bytes(&o.bundle)?);
        }
        let (bytes, parts) = knox_engine::stored_bundle(&o.bundle, encoding)?;
        knox_engine::write_parts(&args.out, &parts)?;
        super::write_new(&path, bytes)?;
        // Self-check: our own evidence is simulated, hence the explicit permission.
        let report = knox_verify::verify_bundle(
            &o.bundle,
            &manifest,
            knox_verify::Options::DANGEROUS_SIMULATED,
        );
        match report.outcome {
            Outcome::Complete => complete += 1,
            ref bad => other.push(format!("{}: {}", o.bundle.run_id, bad.name())),
        }
        Ok(())
    };
    let n = session::run_suite(&sess, &suite, each)?;
    if let Some(s) = stream {
        s.finish();
    }
    let truth = GroundTruth::of(&stats);
    let summary = json!({
        "workload": workload.spec(),
        "executor": if args.suite == Suite::Terminal { "benign".to_string() } else { models.executor_name() },
        "planner": models.planner_name(),
        "model": {"allowed": truth.model.allowed, "blocked": truth.model.blocked},
        "bundles": n,
        "nodes": nodes,
        "proposals": stats.proposals,
        "planned": {"allowed": truth.planned.allowed, "blocked": truth.planned.blocked},
        "injected": {"allowed": truth.injected.allowed, "blocked": truth.injected.blocked},
        "blocked_by": stats.blocked_by.iter().map(|(g, n)| (g.as_str(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "interrupts": stats.interrupts,
        "plan_failures": stats.plan_failures,
        "kernel_denials": stats.kernel_denials,
        "tools": format!("{:?}", args.tools).to_lowercase(),
        "verified_complete": complete,
        "not_complete": other,
        "platform": sess.runtime().platform.mode,
        "stopped_by_signal": crate::signals::received(),
    });
    super::write_file(
        &args.out.join("summary.json"),
        serde_json::to_vec_pretty(&summary)?,
    )?;
    let correct = truth.planned.blocked == 0 && truth.injected.allowed == 0 && other.is_empty();
    if args.json {
        let mut v = summary;
        if let Some(o) = v.as_object_mut() {
            o.insert("out".into(), json!(args.out.display().to_string()));
        }
        crate::outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if correct { 0 } else { 1 });
    }
    crate::outln!(
        "workload {} ({}), planner {}, executor {}: {n} bundles, {nodes} nodes",
        workload,
        workload.spec(),
        models.planner_name(),
        if args.suite == Suite::Terminal {
            "benign".to_string()
        } else {
            models.executor_name()
        }
    );
    crate::outln!(
        "  proposals {}: on-trajectory allowed {} / blocked {}; off-trajectory (injected) blocked {} / allowed {}",
        stats.proposals,
        truth.planned.allowed,
        truth.planned.blocked,
        truth.injected.blocked,
        truth.injected.allowed
    );
    if truth.model.allowed + truth.model.blocked > 0 {
        crate::outln!(
            "  the model's own proposals: allowed {} / blocked {}",
            truth.model.allowed,
            truth.model.blocked
        );
    }
    for line in models.report() {
        crate::outln!("  {line}");
    }
    for (g, k) in &stats.blocked_by {
        crate::outln!("  blocked by {}: {k}", g.as_str());
    }
    if stats.kernel_denials > 0 {
        crate::outln!(
            "  denied by the kernel layer while allowed tools ran (recorded as blocked nodes): {}",
            stats.kernel_denials
        );
    }
    if stats.interrupts > 0 {
        crate::outln!("  interrupts: {}", stats.interrupts);
    }
    if stats.plan_failures > 0 {
        crate::outln!(
            "  planning failed in {} bundle(s): each ends in an attested `plan_failed` interrupt, nothing ran (the reason is in the bundle's APM)",
            stats.plan_failures
        );
    }
    crate::outln!(
        "  verified: {complete}/{n} complete (platform evidence: {}, not hardware-backed)",
        sess.runtime().platform.mode
    );
    for o in &other {
        crate::outln!("  NOT complete: {o}");
    }
    crate::outln!("  bundles and summary.json in {}", args.out.display());
    Ok(if correct { 0 } else { 1 })
}

/// A `--degraded` mode, by the name the sandbox gives it (`device-ioctl`).
fn parse_degraded(s: &str) -> std::result::Result<knox_sandbox::Degraded, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("`{s}` is not a degraded mode (known: device-ioctl)"))
}
