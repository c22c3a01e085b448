//! `knox gateway openai`: argument parsing and printing around
//! [`knox_gateway::openai::Proxy`] (docs/gateway-openai.md).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use knox_agent::Following;
use knox_agent::Planner;
use knox_engine::Session;
use knox_gateway::openai::plan::PlanFile;
use knox_gateway::openai::{Proxy, ProxyConfig, SealHook, Sealed};
use knox_models::{ChatPlanner, ModelSpec};
use knox_verify::Outcome;

use crate::error::{Kind, fail};

/// Arguments of `knox gateway openai`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   the proxy stopped (SIGUSR1, SIGTERM, SIGINT or the stop file) and every conversation's\
   \n      bundle verified complete\
   \n  1   a conversation's bundle did not seal or did not verify complete"
))]
pub struct OpenaiGatewayArgs {
    /// The agent's tools: a `knox-toolkit/1` manifest. Function names are tool names
    /// (a `__` may stand for the first `.`: `bank__send_money` is `bank.send_money`).
    #[arg(long, value_name = "FILE", value_parser = crate::cmd::path)]
    pub manifest: PathBuf,
    /// The upstream's base URL, as an OpenAI SDK's `base_url` (`http://127.0.0.1:8080/v1`,
    /// `https://api.openai.com/v1`). Its key: the client's `Authorization` header, else
    /// `KNOX_UPSTREAM_API_KEY`.
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// Listen address (loopback only; port 0 picks one, printed on standard error).
    #[arg(long, default_value = "127.0.0.1:8089")]
    pub listen: SocketAddr,
    /// Plans each conversation's first request (system and user messages) with a model:
    /// `local:NAME`, `local:PATH.gguf` or `openai:URL#MODEL`.
    #[arg(long, value_name = "SPEC", value_parser = super::planner_spec, required_unless_present = "plan", conflicts_with = "plan")]
    pub planner: Option<ModelSpec>,
    /// Instead of a model: this plan (`{"calls": [{"tool", "params"}, …]}`, as `knox run
    /// --plan`) for every conversation.
    #[arg(long, value_name = "PLAN.json", value_parser = crate::cmd::path)]
    pub plan: Option<PathBuf>,
    /// Most calls a model planner's plan may hold (a plan you give with `--plan` may
    /// hold up to 1,024).
    #[arg(long, default_value_t = knox_models::tools::MAX_PLANNED_CALLS)]
    pub max_calls: usize,
    /// How the monitor follows the plan (default `tolerant`: reads may repeat and
    /// reorder, as real agents do; `strict`: tolerant until the model has read
    /// labelled data, then the plan's own order; `exact`: the plan's order throughout).
    #[arg(long, value_name = "MODE")]
    pub trajectory: Option<knox_types::apm::TrajectoryMode>,
    /// Model cache directory for `--planner local:…`.
    #[command(flatten)]
    pub cache: crate::cmd::model::CacheArgs,
    /// The evidence folder: one `<run>.json` bundle per conversation (and, with
    /// `--journal`, its live `<run>.journal.jsonl`). It accumulates: a proxy started
    /// again into it adds its conversations beside the earlier ones (run ids are unique
    /// to each process's key; evidence is never replaced). Locked while the proxy runs.
    #[arg(long, value_parser = crate::cmd::path)]
    pub out: PathBuf,
    /// No longer needed (`--out` accumulates; nothing is ever replaced): accepted so
    /// that older scripts still start.
    #[arg(long, hide = true)]
    pub force: bool,
    /// Append every node to `<run>.journal.jsonl` as it is committed (a killed proxy
    /// leaves a prefix `knox verify` checks).
    #[arg(long)]
    pub journal: bool,
    /// Stream every conversation live to a `knox serve` store, `http://HOST:PORT`:
    /// first the gateway's key announcement (also kept in `--out`), then each node as
    /// it is committed (its journal, followed; implies `--journal`), then the sealed
    /// bundle as soon as the conversation is sealed. Signed with `--stream-key`.
    #[arg(long, value_name = "URL", requires = "stream_key")]
    pub stream_to: Option<String>,
    /// The provider's private key the stream is signed with (`knox keygen`).
    #[arg(value_parser = crate::cmd::path, long, value_name = "KEY", requires = "stream_to")]
    pub stream_key: Option<PathBuf>,
    /// Do not read tool calls written as text in the model's answers. By default the
    /// proxy reads the forms text-based frameworks run (ReAct `Action:` / `Action
    /// Input:` lines, `<tool_call>` and `<function=…>` tags, JSON call objects naming a
    /// tool of the manifest), proposes each to the monitor and withholds a blocked one
    /// from the answer (docs/gateway-openai.md, "Tool calls written as text").
    #[arg(long)]
    pub no_text_calls: bool,
    /// Seal a conversation after this many seconds without a request.
    #[arg(long, default_value_t = 300)]
    pub idle_secs: u64,
    /// Largest request body, in bytes (413 above it).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Longest an upstream exchange may take, in seconds (504 after it).
    #[arg(long, default_value_t = 300)]
    pub upstream_timeout_secs: u64,
    /// Seal every conversation and stop when this file exists (as SIGUSR1 does).
    #[arg(long, value_parser = crate::cmd::path)]
    pub stop_file: Option<PathBuf>,
    /// Regulations in force in every conversation (`--regulations`,
    /// `--regulation-context`, `--policy-set`, `--judge`): each disclosure the model
    /// proposes is decided before the client sees it. The upstream is a remote
    /// executor: a tool result holding labelled data is a disclosure to its operator,
    /// so list the upstream's URL in the context's directory (as a business associate
    /// under an agreement, say) or such reads are withheld.
    #[command(flatten)]
    pub regulation: crate::cmd::regulations::RegulationArgs,
    /// Epoch nonce (hex) bound into the platform evidence with the signing key.
    #[arg(long, default_value = "")]
    pub nonce: String,
    /// Platform evidence backend.
    #[command(flatten)]
    pub platform: crate::session::PlatformArgs,
}

/// The planner the arguments name (a local model shared through `locals`).
fn planner(
    args: &OpenaiGatewayArgs,
    manifest: &knox_policy::ToolkitManifest,
    cache_dir: Option<&std::path::Path>,
    locals: &mut knox_models::registry::Locals,
) -> Result<Box<dyn Planner>> {
    if let Some(p) = &args.plan {
        let text = super::super::read_text(p, super::super::MANIFEST)?;
        let plan = serde_json::from_str(&text)
            .map_err(|e| super::super::bad_input(p, "a plan (JSON)", e))?;
        let plan = PlanFile::new(plan, manifest, knox_models::tools::MAX_USER_PLAN_CALLS)
            .map_err(|e| super::super::usage(format!("the plan is refused: {e}")))?;
        return Ok(Box::new(plan));
    }
    let spec = args
        .planner
        .as_ref()
        .filter(|s| s.is_model())
        .ok_or_else(|| {
            super::super::usage("--planner must name a model (local:…, openai:…), or give --plan")
        })?;
    let chat = super::super::model::open(spec, cache_dir, locals)?
        .ok_or_else(|| super::super::usage("--planner must name a model"))?;
    Ok(Box::new(
        ChatPlanner::new(chat).with_max_calls(args.max_calls),
    ))
}

/// Runs the OpenAI-compatible proxy until stopped; verifies every sealed bundle.
pub fn run(args: &OpenaiGatewayArgs) -> Result<i32> {
    // Before any work: SIGUSR1, SIGTERM and SIGINT seal the conversations, not kill them.
    crate::signals::install()?;
    let nonce = hex::decode(&args.nonce)
        .map_err(|e| super::super::usage(format!("--nonce must be hex: {e}")))?;
    let manifest = super::super::toolkit::load(&args.manifest)?;
    let _out = super::super::evidence_dir(&args.out)?;
    let mode = args
        .trajectory
        .unwrap_or_else(knox_types::apm::TrajectoryMode::tolerant);
    let cache_dir = super::super::absolute_cache_dir(args.cache.cache_dir.as_deref())?;
    let mut locals = Vec::new();
    let planner = Following::new(
        planner(args, &manifest, cache_dir.as_deref(), &mut locals)?,
        mode,
    );
    let regulation = args
        .regulation
        .setup_judged(cache_dir.as_deref(), &mut locals)?;
    let norms = regulation.as_ref().map(|r| std::sync::Arc::clone(&r.norms));
    let mut builder = Session::builder()
        .platform(crate::session::backend(&args.platform)?)
        .nonce(nonce)
        .manifest(manifest.clone())
        .planner(planner)
        .output(&args.out)
        .run_prefix("conv");
    if args.journal || args.stream_to.is_some() {
        builder = builder.journal_dir(&args.out);
    }
    if let Some(r) = regulation {
        builder = builder.regulations(r);
    }
    let session = Arc::new(
        builder
            .build()
            .map_err(|e| fail(Kind::Software, e.to_string()))?,
    );
    let stream = match (&args.stream_to, &args.stream_key) {
        (Some(url), Some(key)) => Some(super::super::serve::Sealing::start(url, key, &args.out)?),
        _ => None,
    };
    if let Some(s) = &stream {
        // Before any conversation: a gateway whose conversations are all withheld still
        // shows, as a key announced and never followed.
        s.sender().announce(crate::cmd::write_announcement(
            session.runtime(),
            &args.out,
        )?);
    }
    let on_seal = stream.as_ref().map(|s| {
        let sealed = s.sender();
        SealHook(Arc::new(move |c: &Sealed| {
            if let Ok(Some(path)) = &c.bundle {
                sealed.submit(path.clone());
            }
        }))
    });
    let config = ProxyConfig {
        upstream: args.upstream.clone(),
        api_key: std::env::var("KNOX_UPSTREAM_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        idle: Duration::from_secs(args.idle_secs.max(1)),
        max_body: args.max_body,
        upstream_timeout: Duration::from_secs(args.upstream_timeout_secs.max(1)),
        out: Some(args.out.clone()),
        on_seal,
        text_calls: !args.no_text_calls,
    };
    let proxy = Proxy::new(session, &config);
    let flag = crate::signals::stop_flag();
    let stop_file = args.stop_file.clone();
    let stop =
        move || flag.load(Ordering::Acquire) || stop_file.as_ref().is_some_and(|f| f.exists());
    let upstream = args.upstream.clone();
    let served = proxy.run_until(args.listen, stop, |addr| {
        eprintln!("knox gateway openai: listening on http://{addr}/v1 (upstream {upstream})");
    });
    // What was sealed is submitted, and the journals delivered, also when serving failed.
    if let Some(s) = stream {
        s.finish();
    }
    let sealed =
        served.map_err(|e| fail(Kind::Unavailable, format!("--listen {}: {e}", args.listen)))?;
    let mut ok = true;
    for s in &sealed {
        let line = match &s.bundle {
            Ok(Some(path)) => {
                let outcome = verify(path, &manifest, norms.as_deref());
                ok &= outcome == "complete";
                format!("{}: {} ({})", s.run_id, outcome, path.display())
            }
            Ok(None) => format!("{}: sealed", s.run_id),
            Err(e) => {
                ok = false;
                format!("{}: NOT sealed: {e}", s.run_id)
            }
        };
        crate::outln!("{line}");
    }
    crate::outln!(
        "{} conversation(s) sealed into {}",
        sealed.len(),
        args.out.display()
    );
    Ok(if ok { 0 } else { 1 })
}

/// The outcome of verifying the bundle at `path` (simulated evidence is Knox's own),
/// regulation decisions recomputed with `norms` (the embedded set when `None`).
fn verify(
    path: &std::path::Path,
    manifest: &knox_policy::ToolkitManifest,
    norms: Option<&knox_regulation::Norms>,
) -> String {
    let Ok(bytes) = std::fs::read(path) else {
        return "unreadable".into();
    };
    let Ok(bundle) = serde_json::from_slice(&bytes) else {
        return "malformed".into();
    };
    let report = knox_verify::verify_bundle(
        &bundle,
        manifest,
        knox_verify::Options {
            norms,
            ..knox_verify::Options::DANGEROUS_SIMULATED
        },
    );
    match report.outcome {
        Outcome::Complete => "complete".into(),
        other => other.name().to_owned(),
    }
}
