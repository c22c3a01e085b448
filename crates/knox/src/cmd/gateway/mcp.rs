//! `knox gateway mcp`: argument parsing and printing; the gateway is
//! `knox_gateway::mcp`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use knox_agent::{Planner, Prompt, ToolHost};
use knox_gateway::mcp::{GatewayConfig, OpenRequest, PlatformFactory};
use knox_models::{ChatPlanner, ModelSpec};
use knox_types::apm::{StopPolicy, TrajectoryMode};

use crate::cmd::{self, usage};
use crate::error::{Kind, fail};

mod shared;

/// Arguments of `knox gateway mcp`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   the gateway ended and every session's bundle verified complete\
   \n  1   a session's bundle did not seal or did not verify complete\
   \n  65  --contract: the contract is malformed, not signed by --contract-authority, or not valid now\
   \n  SIGUSR1, SIGTERM, SIGINT or the stop file seal every open session and end the gateway"
))]
pub struct McpGatewayArgs {
    /// The `knox-toolkit/1` manifest of the upstream servers' tools (`SERVER.TOOL`).
    #[arg(value_parser = cmd::path, long, value_name = "FILE", required_unless_present = "contract", conflicts_with = "contract")]
    pub manifest: Option<PathBuf>,
    /// The upstream MCP servers (`servers.toml`, docs/mcp.md): stdio servers run
    /// confined from their needs; HTTP servers are reached only at their URL.
    #[arg(value_parser = cmd::path, long, value_name = "SERVERS.toml", required_unless_present = "contract", conflicts_with = "contract")]
    pub mcp: Option<PathBuf>,
    /// Instead of upstream servers: the contract's four tools, executed by Knox's
    /// broker (`--contract`, `--contract-authority`, `--approvals`,
    /// `--approval-timeout-ms`).
    #[command(flatten)]
    pub bound: cmd::contract::ContractFlags,
    /// Serve Streamable HTTP on this loopback address (`127.0.0.1:0` picks a port)
    /// instead of stdio: the user opens each session with `POST /knox/sessions`
    /// (docs/gateway-mcp.md).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Stdio: serve this launch's session from the one gateway serving `--out` — started
    /// in the background (`--http` on a loopback port, its log in `<out>/gateway.log`)
    /// when none is — instead of from a process of its own. Every launch is then a
    /// numbered link of that gateway's key, launches running at once share `--out`
    /// instead of contending for its lock, and the gateway ends after
    /// `--shared-idle-secs` with no session open. Takes `--prompt` and `--plan`.
    #[arg(long, conflicts_with = "http")]
    pub shared: bool,
    /// With `--shared`: how long the background gateway waits with no session open
    /// before it ends.
    #[arg(long, default_value_t = 600, requires = "shared")]
    pub shared_idle_secs: u64,
    /// With `--http`: end the gateway once no session has been open for this many
    /// seconds (what `--shared` starts its background gateway with).
    #[arg(long, value_name = "SECS", requires = "http")]
    pub exit_when_idle_secs: Option<u64>,
    /// Stdio: the user's prompt for the one session, one task per `--prompt`. With
    /// `--contract` it may be left out: the session is then unplanned, bounded by the
    /// contract alone.
    #[arg(long, value_name = "TEXT", conflicts_with = "http")]
    pub prompt: Vec<String>,
    /// Stdio: the user's plan for the prompt (`{"calls": [{"tool", "params"}, …]}`, as
    /// `knox run --plan`). Over HTTP each session brings its own `plan`, or is planned
    /// by `--planner`.
    #[arg(value_parser = cmd::path, long, value_name = "PLAN.json", conflicts_with = "http")]
    pub plan: Option<PathBuf>,
    /// The model planning each session's prompt (`local:…`, `openai:URL#MODEL`).
    #[arg(long, value_name = "SPEC", value_parser = super::planner_spec)]
    pub planner: Option<ModelSpec>,
    /// The model cache.
    #[command(flatten)]
    pub cache: cmd::model::CacheArgs,
    /// Most calls a model planner's plan may hold per task (a plan you give with
    /// `--plan` may hold up to 1,024).
    #[arg(long, default_value_t = knox_models::tools::MAX_PLANNED_CALLS)]
    pub max_calls: usize,
    /// How the monitor follows the plan (default `tolerant`: reads may repeat and
    /// reorder, writes run as planned; `strict`: tolerant until the model has read
    /// labelled data, then the plan's own order; `exact`: the plan's order throughout).
    /// The APM records it.
    #[arg(long, value_name = "MODE")]
    pub trajectory: Option<TrajectoryMode>,
    /// The evidence folder: bundles (`<run>.json`), live journals
    /// (`<run>.journal.jsonl`), the servers' workspaces, the label store of what the
    /// client's model heard (`heard.jsonl`) and, with `--http`, the session token. It
    /// accumulates: a gateway launched again into it adds its sessions beside
    /// the earlier ones (run ids are unique to each process's key; evidence is never
    /// replaced). Locked while the gateway runs.
    #[arg(value_parser = cmd::path, long)]
    pub out: PathBuf,
    /// No longer needed (`--out` accumulates; nothing is ever replaced): accepted so
    /// that older client configurations still start.
    #[arg(long, hide = true)]
    pub force: bool,
    /// Seal a session after this many seconds without a request.
    #[arg(long, default_value_t = knox_gateway::mcp::DEFAULT_IDLE_TIMEOUT.as_secs())]
    pub idle_timeout_secs: u64,
    /// Largest MCP message a client may send, in bytes.
    #[arg(long, default_value_t = knox_gateway::mcp::DEFAULT_MAX_MESSAGE_BYTES)]
    pub max_message_bytes: usize,
    /// Stream every session live to a `knox serve` store, `http://HOST:PORT`: first the
    /// gateway's key announcement (also kept in `--out`: `key-….announcement.json`), then
    /// each node as it is committed (the session's journal in `--out`, followed), then
    /// the sealed bundle as soon as the session ends. Signed with `--stream-key`.
    #[arg(long, value_name = "URL", requires = "stream_key")]
    pub stream_to: Option<String>,
    /// The provider's private key the stream is signed with (`knox keygen`).
    #[arg(value_parser = cmd::path, long, value_name = "KEY", requires = "stream_to")]
    pub stream_key: Option<PathBuf>,
    /// Seal every session and end when this file exists (SIGUSR1 does the same).
    #[arg(value_parser = cmd::path, long)]
    pub stop_file: Option<PathBuf>,
    /// Regulations in force in every session (`--regulations`, `--regulation-context`,
    /// `--policy-set`, `--judge`): each disclosure a session's agent proposes is decided
    /// before it reaches its server, and blocked when not compliant. The context's
    /// `default_task` names the sessions' sender and purpose.
    #[command(flatten)]
    pub regulation: cmd::regulations::RegulationArgs,
    /// Stop guard: most proposals per session.
    #[arg(long)]
    pub max_actions: Option<u32>,
    /// Epoch nonce (hex) bound into each session's platform evidence.
    #[arg(long, default_value = "")]
    pub nonce: String,
    /// Platform evidence backend (one key binding per session).
    #[command(flatten)]
    pub platform: crate::session::PlatformArgs,
}

/// Runs the MCP gateway.
pub fn run(args: &McpGatewayArgs) -> Result<i32> {
    // Before any work: SIGUSR1, SIGTERM and SIGINT seal the sessions instead of
    // killing the gateway (a second SIGTERM or SIGINT ends it at once).
    crate::signals::install()?;
    let nonce = hex::decode(&args.nonce).map_err(|e| usage(format!("--nonce must be hex: {e}")))?;
    let contracted = args.bound.contract.is_some();
    if args.http.is_none() {
        if args.prompt.is_empty() && !contracted {
            return Err(usage(
                "a stdio gateway is one session: give the user's --prompt (or serve --http, or bound the session by --contract)",
            ));
        }
        if args.prompt.is_empty() && args.plan.is_some() {
            return Err(usage("--plan plans a prompt: give the --prompt too"));
        }
        if !args.prompt.is_empty() && args.plan.is_some() == args.planner.is_some() {
            return Err(usage(
                "plan the session with a model (--planner) or give the plan (--plan), one of the two",
            ));
        }
    }
    if args.shared {
        return shared::run(args);
    }
    if let Some(a) = args.http
        && !a.ip().is_loopback()
    {
        return Err(usage(format!(
            "--http {a}: the gateway listens on loopback only"
        )));
    }
    let plan = args
        .plan
        .as_deref()
        .map(|p| {
            serde_json::from_str::<serde_json::Value>(&cmd::read_text(p, cmd::MANIFEST)?)
                .map_err(|e| cmd::bad_input(p, "a plan (JSON)", e))
        })
        .transpose()?;
    let _out = cmd::evidence_dir(&args.out)?;
    let (manifest, host, contract): (_, Arc<dyn ToolHost>, _) = match (
        args.bound.for_run(&args.out, &[])?,
        &args.manifest,
        &args.mcp,
    ) {
        (Some(c), _, _) => (
            knox_engine::contract::manifest().map_err(|e| fail(Kind::Software, e.to_string()))?,
            Arc::new(c.host),
            Some(knox_gateway::mcp::Contract {
                verified: c.verified,
                approvals: c.approvals,
            }),
        ),
        (None, Some(manifest), Some(servers)) => (
            cmd::toolkit::load(manifest)?,
            Arc::new(cmd::mcp::host(servers, args.out.join("mcp"))?),
            None,
        ),
        _ => return Err(usage("give --manifest and --mcp, or --contract")),
    };
    let cache_dir = cmd::absolute_cache_dir(args.cache.cache_dir.as_deref())?;
    let mut locals = Vec::new();
    let planner: Option<Arc<dyn Planner>> = match &args.planner {
        Some(spec) => {
            let chat = cmd::model::open(spec, cache_dir.as_deref(), &mut locals)?
                .ok_or_else(|| usage("--planner must name a model"))?;
            Some(Arc::new(
                ChatPlanner::new(chat).with_max_calls(args.max_calls),
            ))
        }
        None => None,
    };
    let regulation = args
        .regulation
        .setup_judged(cache_dir.as_deref(), &mut locals)?;
    let platform_args = args.platform.clone();
    crate::session::backend(&platform_args)?; // a bad platform fails now, not per session
    let platform: PlatformFactory =
        Arc::new(move || crate::session::backend(&platform_args).map_err(|e| e.to_string()));
    let stream = match (&args.stream_to, &args.stream_key) {
        (Some(url), Some(key)) => Some(cmd::serve::Sealing::start(url, key, &args.out)?),
        _ => None,
    };
    let sealed = stream.as_ref().map(cmd::serve::Sealing::sender);
    // The gateway's one key: every session a numbered link of its chain of runs.
    let runtime = knox_gateway::mcp::key_runtime(&platform, &nonce, manifest.clone())
        .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    if let Some(s) = &sealed {
        // Announced before any session: a gateway whose sessions are all withheld
        // still shows in the store, as a key announced and never followed.
        s.announce(crate::cmd::write_announcement(&runtime, &args.out)?);
    }
    let cfg = Arc::new(GatewayConfig {
        manifest,
        host,
        contract,
        planner,
        regulation,
        max_calls: args.max_calls,
        trajectory: args.trajectory.unwrap_or_else(TrajectoryMode::tolerant),
        runtime,
        platform,
        nonce,
        out: args.out.clone(),
        stop: StopPolicy {
            max_actions: args.max_actions,
            ..StopPolicy::default()
        },
        stop_flag: crate::signals::stop_flag(),
        stop_file: args.stop_file.clone(),
        idle_timeout: Duration::from_secs(args.idle_timeout_secs.max(1)),
        max_message_bytes: args.max_message_bytes.max(1024),
        heard: Arc::new(knox_gateway::heard::Heard::in_dir(&args.out).map_err(|e| {
            fail(
                Kind::CantCreate,
                format!(
                    "cannot open the label store {}: {e}",
                    args.out.join(knox_gateway::heard::FILE).display()
                ),
            )
        })?),
    });
    let served = match args.http {
        None => {
            let req = OpenRequest {
                prompt: Prompt {
                    tasks: args.prompt.clone(),
                },
                plan,
                label: "mcp-stdio".into(),
            };
            knox_gateway::mcp::run_stdio(Arc::clone(&cfg), req)
                .map_err(|e| fail(Kind::Unavailable, e.to_string()))
                .and_then(|end| {
                    if let (Some(s), Some(b)) = (&sealed, &end.bundle) {
                        s.submit(b.clone());
                    }
                    // Standard output is the MCP channel: the summary goes to standard error.
                    eprintln!("{}", serde_json::to_string(end.as_ref())?);
                    Ok(vec![end])
                })
        }
        Some(addr) => serve_http(&cfg, addr, sealed, args),
    };
    // What was sealed is submitted, and the journals delivered, also when serving failed.
    if let Some(s) = stream {
        s.finish();
    }
    let ends = served?;
    drop(locals);
    let ok = ends
        .iter()
        .all(|e| e.verified.as_deref() == Some("complete"));
    Ok(if ok { 0 } else { 1 })
}

/// The HTTP gateway: the session token written to `<out>/session-token` (mode 0600),
/// one JSON line on standard output when listening (and `<out>/gateway.addr`, which
/// `--shared` launches find it by), one per sealed session (whose bundle goes to
/// `sealed`, when streaming). Both files are removed when it ends.
fn serve_http(
    cfg: &Arc<GatewayConfig>,
    addr: SocketAddr,
    sealed: Option<cmd::serve::Sealed>,
    args: &McpGatewayArgs,
) -> Result<Vec<Arc<knox_gateway::mcp::SessionEnd>>> {
    let token =
        knox_gateway::mcp::session_token().map_err(|e| fail(Kind::Software, e.to_string()))?;
    let token_file = cfg.out.join("session-token");
    let found_file = cfg.out.join(shared::FOUND);
    // `--out` is locked by this process: files a gateway before it left are stale.
    for stale in [&token_file, &found_file] {
        match std::fs::remove_file(stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(Kind::CantCreate, format!("{}: {e}", stale.display()))),
        }
    }
    let config = shared::config(args)?;
    let _cleanup = shared::RemoveOnDrop(vec![token_file.clone(), found_file.clone()]);
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&token_file)
            .map_err(|e| fail(Kind::CantCreate, format!("{}: {e}", token_file.display())))?;
        f.write_all(token.as_bytes())?;
    }
    let shown = token_file.display().to_string();
    knox_gateway::mcp::run_http(
        Arc::clone(cfg),
        addr,
        token,
        args.exit_when_idle_secs
            .map(|s| Duration::from_secs(s.max(1))),
        |local| {
            shared::publish(&found_file, &format!("http://{local}"), &config);
            crate::outln!(
                "{}",
                serde_json::json!({
                    "listening": format!("http://{local}"),
                    "open_sessions": format!("http://{local}/knox/sessions"),
                    "token_file": shown,
                })
            );
        },
        move |end| {
            if let (Some(s), Some(b)) = (&sealed, &end.bundle) {
                s.submit(b.clone());
            }
            if let Ok(line) = serde_json::to_string(end) {
                crate::outln!("{line}");
            }
        },
    )
    .map_err(|e| fail(Kind::Unavailable, e.to_string()))
}
