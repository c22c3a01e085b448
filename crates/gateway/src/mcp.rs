//! The MCP gateway (`knox gateway mcp`): Knox as an MCP server in front of upstream
//! MCP servers, for MCP clients Knox does not run (Claude Desktop, Cursor, Codex CLI,
//! the MCP Inspector, any SDK client).
//!
//! Every gateway session is one run of the [`knox_engine`] front door:
//!
//! 1. **Open.** The user's prompt (and optionally the user's plan) is planned into the
//!    session's APM when the session opens — over stdio from `--prompt`, over
//!    Streamable HTTP through the user's `POST /knox/sessions` (bearer token, never the
//!    agent's MCP connection). Each session has its own engine [`Session`] over the
//!    gateway's one key ([`GatewayConfig::runtime`]: its run a numbered link of that
//!    key's chain, so a session left out shows as a gap), its own AEG, journal and
//!    bundle.
//! 2. **Serve.** `tools/list` answers the upstream tools the APM can ever allow (those on
//!    its trajectory), named `SERVER.TOOL` as the manifest names them. `tools/call`
//!    proposes the raw action `{"tool", "params"}` to [`LiveRun::propose`]; an allowed
//!    call goes to its upstream through the [`McpHost`] under its single-use grant
//!    (stdio servers confined in the kernel sandbox from their needs, `roots/list`
//!    answered from the policy, sampling refused), its result is recorded and
//!    returned; a blocked call returns a tool result with `isError: true` naming the
//!    guard and the reason, and the evidence records it.
//! 3. **End.** Client disconnect, idle timeout, the stop signal (SIGUSR1, the stop
//!    file), or the user's `DELETE` seal the bundle into `--out`; the journal is
//!    written live, so a killed gateway leaves a verifiable prefix.
//!
//! A session is owned by a thread of its own ([`session`]): the engine's runs borrow
//! their session, so the thread holds the whole borrow chain on its stack and the async
//! front ends talk to it over channels.
//!
//! [`Session`]: knox_engine::Session
//! [`LiveRun::propose`]: knox_engine::LiveRun::propose

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use knox_agent::{Planner, ToolHost};
use knox_attest::PlatformBackend;
use knox_policy::ToolkitManifest;
use knox_types::apm::{StopPolicy, TrajectoryMode};

pub mod bridge;
pub mod front;
#[doc(hidden)]
pub mod fuzz;
pub mod http;
pub mod session;
pub mod stdio;

pub use front::Front;
pub use session::{OpenRequest, SessionEnd, SessionHandle};

/// Largest MCP message (JSON-RPC request or HTTP body) a client may send, in bytes.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;

/// Default idle timeout: a session with no request for this long is sealed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Makes one platform backend per session (its refresh reports; the key is the
/// gateway's one, [`GatewayConfig::runtime`]).
pub type PlatformFactory =
    Arc<dyn Fn() -> Result<Box<dyn PlatformBackend>, String> + Send + Sync + 'static>;

/// What every session of one gateway shares.
pub struct GatewayConfig {
    /// The toolkit manifest of the upstream servers' tools (`SERVER.TOOL`); under a
    /// contract, the contract's tools ([`knox_engine::contract::manifest`]).
    pub manifest: ToolkitManifest,
    /// What runs an allowed call: the upstream servers ([`knox_mcp::McpHost`]: stdio
    /// ones confined, HTTP ones pinned), or under a contract the broker's contract host
    /// (`knox_broker::contract::ContractHost`).
    pub host: Arc<dyn ToolHost>,
    /// The signed capability contract bounding every session, when the gateway serves
    /// one (`knox gateway mcp --contract`): each APM names it, each bundle embeds it,
    /// and every call must pass it — and the session's plan too when the session was
    /// opened with a prompt. A session opened without a prompt is unplanned: the
    /// contract alone bounds it.
    pub contract: Option<Contract>,
    /// The model planner, when sessions are planned by a model; without it every
    /// session must bring the user's plan.
    pub planner: Option<Arc<dyn Planner>>,
    /// The regulations in force in every session, with the policy set deciding them
    /// and the regulation context (recipients, consents, the sender and purpose of the
    /// session's task): each APM names them, every disclosure is decided before it
    /// runs, and each bundle is verified against that policy set when it is sealed.
    pub regulation: Option<knox_engine::RegulationSetup>,
    /// Most calls a user's plan may hold per task.
    pub max_calls: usize,
    /// How the monitor follows the plan (tolerant by default: real agents repeat and
    /// reorder their reads).
    pub trajectory: TrajectoryMode,
    /// The gateway's one in-TEE key, its platform evidence and the manifest
    /// ([`key_runtime`]): every session's run is a numbered link of this key's chain, so a
    /// session the provider leaves out shows as a gap. Its manifest is
    /// [`GatewayConfig::manifest`].
    pub runtime: Arc<knox_monitor::run::Runtime>,
    /// One platform backend per session (its refresh reports).
    pub platform: PlatformFactory,
    /// The epoch nonce bound into the platform evidence.
    pub nonce: Vec<u8>,
    /// Where bundles and journals are written (`<run>.json`, `<run>.journal.jsonl`) and
    /// where the stdio servers' workspaces live.
    pub out: PathBuf,
    /// The stop policy of every session (`external` is set by the gateway).
    pub stop: StopPolicy,
    /// The process's stop flag (SIGUSR1): every session seals at once.
    pub stop_flag: Arc<AtomicBool>,
    /// The stop file: its existence seals every session.
    pub stop_file: Option<PathBuf>,
    /// A session with no request for this long is sealed.
    pub idle_timeout: Duration,
    /// Largest message a client may send.
    pub max_message_bytes: usize,
    /// What the client's model heard in earlier sessions (issue 36, item 2): every
    /// labelled output a session returns is logged here, and every other session
    /// records it as a `heard` node before it mediates its next call. The CLI keeps it
    /// in `<out>/heard.jsonl` ([`crate::heard::Heard::in_dir`]), so it spans every
    /// gateway writing to that directory, earlier processes included.
    pub heard: Arc<crate::heard::Heard>,
}

/// The gateway's one key: generated and bound through a backend of `platform`, with the
/// epoch `nonce`, for `manifest` (the [`GatewayConfig::runtime`] of a gateway serving
/// it).
pub fn key_runtime(
    platform: &PlatformFactory,
    nonce: &[u8],
    manifest: ToolkitManifest,
) -> Result<Arc<knox_monitor::run::Runtime>, GatewayError> {
    let backend = platform().map_err(GatewayError::Open)?;
    knox_monitor::run::Runtime::start(backend.as_ref(), nonce, manifest)
        .map(Arc::new)
        .map_err(|e| GatewayError::Open(e.to_string()))
}

/// The contract a gateway is bounded by, and where approvals of its high-impact
/// actions come from.
#[derive(Clone, Debug)]
pub struct Contract {
    /// The contract, verified against its authority key.
    pub verified: knox_contract::Verified,
    /// Approval tokens (none: a high-impact action stays pending and is refused).
    pub approvals: Option<knox_engine::contract::ApprovalDir>,
}

impl std::fmt::Debug for GatewayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayConfig")
            .field("manifest", &self.manifest.hash())
            .field("contract", &self.contract.as_ref().map(|c| c.verified.hash))
            .field("planner", &self.planner.as_ref().map(|p| p.model().name))
            .field(
                "regulations",
                &self.regulation.as_ref().map(|r| &r.regulations.names),
            )
            .field("trajectory", &self.trajectory)
            .field("out", &self.out)
            .field("idle_timeout", &self.idle_timeout)
            .field("key", &self.runtime.key_id())
            .finish_non_exhaustive()
    }
}

/// Errors of the MCP gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The request to open a session is not usable (no prompt, a plan that does not
    /// fit the manifest, no planner and no plan).
    #[error("cannot open the session: {0}")]
    BadRequest(String),
    /// The engine could not open the session (platform, key, journal).
    #[error("the session did not open: {0}")]
    Open(String),
    /// The gateway cannot serve (a listener, a runtime, randomness).
    #[error("{0}")]
    Serve(String),
}

/// A bearer token for the user's session endpoint: 128 random bits, hex.
pub fn session_token() -> Result<String, GatewayError> {
    random_hex()
}

/// 128 random bits, hex: session identifiers and tokens nobody can guess.
pub(crate) fn random_hex() -> Result<String, GatewayError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| GatewayError::Serve(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// A runtime for a blocking caller (the CLI).
fn runtime() -> Result<tokio::runtime::Runtime, GatewayError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("knox-gateway")
        .build()
        .map_err(|e| GatewayError::Serve(format!("no async runtime: {e}")))
}

/// Serves one session over this process's standard input and output, blocking until
/// it is sealed ([`stdio::serve`]).
pub fn run_stdio(
    cfg: Arc<GatewayConfig>,
    req: OpenRequest,
) -> Result<Arc<SessionEnd>, GatewayError> {
    runtime()?.block_on(stdio::serve(cfg, req))
}

/// Serves Streamable HTTP on `addr` (loopback), blocking until the stop signal (or,
/// with `exit_when_idle`, until no session has been open for that long): `listening`
/// is told the bound address once, `ended` each sealed session.
pub fn run_http(
    cfg: Arc<GatewayConfig>,
    addr: std::net::SocketAddr,
    token: String,
    exit_when_idle: Option<Duration>,
    listening: impl FnOnce(std::net::SocketAddr),
    ended: impl Fn(&SessionEnd) + Send + 'static,
) -> Result<Vec<Arc<SessionEnd>>, GatewayError> {
    runtime()?.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Arc<SessionEnd>>();
        let gw = http::HttpGateway::bind(cfg, addr, token, Some(tx)).await?;
        listening(gw.local_addr()?);
        let printer = tokio::spawn(async move {
            while let Some(end) = rx.recv().await {
                ended(&end);
            }
        });
        let shutdown = http::Shutdown::new();
        if let Some(idle) = exit_when_idle {
            let open = gw.open_sessions();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let mut since = tokio::time::Instant::now();
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tick.tick().await;
                    if open() > 0 {
                        since = tokio::time::Instant::now();
                    } else if since.elapsed() >= idle {
                        stop.cancel();
                        return;
                    }
                }
            });
        }
        let ends = gw.serve(shutdown).await;
        // Every end was sent before `serve` returned: let the printer drain them.
        let _ = tokio::time::timeout(Duration::from_secs(5), printer).await;
        ends
    })
}
