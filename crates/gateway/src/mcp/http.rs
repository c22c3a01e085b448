//! The Streamable-HTTP face: many sessions on one loopback address.
//!
//! | request | who | what |
//! |---|---|---|
//! | `POST /knox/sessions` | the user (bearer token) | opens a session from `{"prompt": TEXT}` or `{"tasks": [TEXT, …]}`, optionally with `"plan"` (or from `{}` on a gateway bounded by a contract: an unplanned session); answers its `mcp_url` |
//! | `GET /knox/sessions/ID` | the user | the session's state (and its end, once sealed) |
//! | `DELETE /knox/sessions/ID` | the user | ends the session; answers once the bundle is sealed |
//! | `/knox/sessions/ID/mcp` | the agent's MCP client | Streamable HTTP (rmcp), one engine run per ID |
//!
//! The agent only ever gets its `mcp_url`: the policy is fixed when the user opens the
//! session, and the MCP connection cannot open, change or end another one. `ID` holds
//! 128 random bits; the bearer token is the gateway's own (written by the CLI with mode
//! 0600), compared in constant time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use knox_agent::Prompt;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

/// Ends [`HttpGateway::serve`] when cancelled.
pub use tokio_util::sync::CancellationToken as Shutdown;

use super::session::{OpenRequest, SessionEnd, SessionHandle};
use super::{Front, GatewayConfig, GatewayError, random_hex};

/// Most sessions open at once; past it, opening answers 503.
pub const MAX_SESSIONS: usize = 1024;

struct Entry {
    handle: Arc<SessionHandle>,
    service: StreamableHttpService<Front, LocalSessionManager>,
    cancel: CancellationToken,
}

struct Shared {
    cfg: Arc<GatewayConfig>,
    token: String,
    base: String,
    sessions: Mutex<HashMap<String, Arc<Entry>>>,
    ends: Option<UnboundedSender<Arc<SessionEnd>>>,
}

impl Shared {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<Arc<Entry>> {
        self.sessions().get(id).cloned()
    }
}

/// A bound, not yet serving, HTTP gateway.
pub struct HttpGateway {
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for HttpGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGateway")
            .field("addr", &self.listener.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl HttpGateway {
    /// Binds `addr`, which must be a loopback address. `token` is what the user sends
    /// as `Authorization: Bearer TOKEN` to open and end sessions. Each sealed
    /// session's end is sent on `ends`.
    pub async fn bind(
        cfg: Arc<GatewayConfig>,
        addr: SocketAddr,
        token: String,
        ends: Option<UnboundedSender<Arc<SessionEnd>>>,
    ) -> Result<Self, GatewayError> {
        if !addr.ip().is_loopback() {
            return Err(GatewayError::Serve(format!(
                "{addr} is not a loopback address: the gateway serves this machine only"
            )));
        }
        if token.len() < 16 {
            return Err(GatewayError::Serve(
                "the session token must be at least 16 characters".into(),
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| GatewayError::Serve(format!("cannot listen on {addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| GatewayError::Serve(e.to_string()))?;
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                cfg,
                token,
                base: format!("http://{local}"),
                sessions: Mutex::new(HashMap::new()),
                ends,
            }),
        })
    }

    /// The address served.
    pub fn local_addr(&self) -> Result<SocketAddr, GatewayError> {
        self.listener
            .local_addr()
            .map_err(|e| GatewayError::Serve(e.to_string()))
    }

    /// How many sessions are open, asked at any time (also while serving).
    pub fn open_sessions(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let shared = Arc::clone(&self.shared);
        move || shared.sessions().len()
    }

    /// Serves until `shutdown` is cancelled or the stop signal (SIGUSR1, the stop
    /// file) is seen; then ends every session, waits until each is sealed and returns
    /// their ends.
    pub async fn serve(
        self,
        shutdown: CancellationToken,
    ) -> Result<Vec<Arc<SessionEnd>>, GatewayError> {
        let shared = Arc::clone(&self.shared);
        let router = Router::new()
            .route("/knox/sessions", post(open))
            .route("/knox/sessions/{id}", get(status).delete(close))
            .route("/knox/sessions/{id}/mcp", any(mcp))
            .layer(DefaultBodyLimit::max(shared.cfg.max_message_bytes))
            .with_state(Arc::clone(&shared));
        let reaper = tokio::spawn(reap(Arc::clone(&shared)));
        let stopping = Arc::clone(&shared);
        let collected = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&collected);
        axum::serve(crate::no_delay(self.listener), router)
            .with_graceful_shutdown(async move {
                wait_for_stop(&stopping.cfg, &shutdown).await;
                let ends = end_all(&stopping, "the gateway stopped").await;
                out.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend(ends);
            })
            .await
            .map_err(|e| GatewayError::Serve(e.to_string()))?;
        reaper.abort();
        let ends = std::mem::take(&mut *collected.lock().unwrap_or_else(PoisonError::into_inner));
        Ok(ends)
    }
}

/// Returns once `shutdown` is cancelled or the gateway's stop signal is set.
async fn wait_for_stop(cfg: &GatewayConfig, shutdown: &CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {
                if cfg.stop_flag.load(std::sync::atomic::Ordering::Acquire)
                    || cfg.stop_file.as_ref().is_some_and(|f| f.exists())
                {
                    return;
                }
            }
        }
    }
}

/// Ends every session and waits for their seals.
async fn end_all(shared: &Shared, reason: &str) -> Vec<Arc<SessionEnd>> {
    let all: Vec<Arc<Entry>> = shared.sessions().drain().map(|(_, e)| e).collect();
    let mut ends = Vec::new();
    for e in &all {
        e.handle.end(reason);
    }
    for e in all {
        e.cancel.cancel();
        if let Some(end) = e.handle.ended().await {
            if let Some(tx) = &shared.ends {
                let _ = tx.send(Arc::clone(&end));
            }
            ends.push(end);
        }
    }
    ends
}

/// Drops sessions that ended on their own (idle, disconnect, interrupt) and reports
/// their ends.
async fn reap(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tick.tick().await;
        let done: Vec<(String, Arc<Entry>)> = {
            let mut s = shared.sessions();
            let ids: Vec<String> = s
                .iter()
                .filter(|(_, e)| e.handle.end_state().is_some())
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| s.remove(&id).map(|e| (id, e)))
                .collect()
        };
        for (_, e) in done {
            e.cancel.cancel();
            if let (Some(end), Some(tx)) = (e.handle.end_state(), &shared.ends) {
                let _ = tx.send(end);
            }
        }
    }
}

fn problem(status: StatusCode, why: impl Into<String>) -> Response {
    (status, axum::Json(json!({"error": why.into()}))).into_response()
}

/// Constant-time comparison of the bearer token.
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let (a, b) = (given.as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Live session `id`, for a caller holding the gateway's bearer token (`remove`: taken
/// out of the table, as closing it does), or the status and reason to answer.
fn live_session(
    shared: &Shared,
    headers: &HeaderMap,
    id: &str,
    remove: bool,
) -> Result<Arc<Entry>, (StatusCode, &'static str)> {
    if !authorized(headers, &shared.token) {
        return Err((StatusCode::UNAUTHORIZED, "needs the gateway's bearer token"));
    }
    let found = if remove {
        shared.sessions().remove(id)
    } else {
        shared.get(id)
    };
    found.ok_or((
        StatusCode::NOT_FOUND,
        "no such live session (sealed ones are in --out)",
    ))
}

/// The open request's body.
pub(crate) fn parse_open(body: &[u8]) -> Result<(Prompt, Option<Value>), String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(o) = v else {
        return Err("expected {\"prompt\": TEXT} or {\"tasks\": [TEXT, …]}".into());
    };
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "prompt" | "tasks" | "plan"))
    {
        return Err(format!("unknown field `{k}`"));
    }
    let tasks = match (o.get("prompt"), o.get("tasks")) {
        (Some(Value::String(p)), None) => vec![p.clone()],
        (None, Some(Value::Array(t))) => t
            .iter()
            .map(|x| x.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or("`tasks` must be strings")?,
        // No prompt: a session bounded by the gateway's contract alone.
        (None, None) => Vec::new(),
        _ => return Err("expected {\"prompt\": TEXT} or {\"tasks\": [TEXT, …]}".into()),
    };
    Ok((Prompt { tasks }, o.get("plan").cloned()))
}

async fn open(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&headers, &shared.token) {
        return problem(
            StatusCode::UNAUTHORIZED,
            "opening a session needs the gateway's bearer token",
        );
    }
    let (prompt, plan) = match parse_open(&body) {
        Ok(p) => p,
        Err(why) => return problem(StatusCode::BAD_REQUEST, why),
    };
    if shared.sessions().len() >= MAX_SESSIONS {
        return problem(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_SESSIONS} sessions are open: close one first"),
        );
    }
    let id = match random_hex() {
        Ok(id) => id,
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let req = OpenRequest {
        prompt,
        plan,
        label: format!("mcp-{}", &id[..12]),
    };
    let cfg = Arc::clone(&shared.cfg);
    let opened = tokio::task::spawn_blocking(move || SessionHandle::open(&cfg, req)).await;
    let handle = match opened {
        Ok(Ok(h)) => Arc::new(h),
        Ok(Err(e @ GatewayError::BadRequest(_))) => {
            return problem(StatusCode::BAD_REQUEST, e.to_string());
        }
        Ok(Err(e)) => return problem(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let cancel = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(cancel.clone())
        .with_max_request_body_bytes(shared.cfg.max_message_bytes);
    let for_factory = Arc::clone(&handle);
    let service = StreamableHttpService::new(
        move || Ok(Front::new(Arc::clone(&for_factory))),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let answer = json!({
        "session": id,
        "mcp_url": format!("{}/knox/sessions/{id}/mcp", shared.base),
        "run_id": handle.run_id(),
        "plan_failed": handle.plan_failed(),
        "tools": handle.tools().iter().map(|t| t.name.to_string()).collect::<Vec<_>>(),
    });
    shared.sessions().insert(
        id,
        Arc::new(Entry {
            handle,
            service,
            cancel,
        }),
    );
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

async fn status(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let e = match live_session(&shared, &headers, &id, false) {
        Ok(e) => e,
        Err((status, why)) => return problem(status, why),
    };
    axum::Json(json!({
        "run_id": e.handle.run_id(),
        "state": if e.handle.end_state().is_some() { "ended" } else { "live" },
        "end": e.handle.end_state(),
    }))
    .into_response()
}

async fn close(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let e = match live_session(&shared, &headers, &id, true) {
        Ok(e) => e,
        Err((status, why)) => return problem(status, why),
    };
    e.handle.end("the user closed the session");
    e.cancel.cancel();
    match e.handle.ended().await {
        Some(end) => {
            if let Some(tx) = &shared.ends {
                let _ = tx.send(Arc::clone(&end));
            }
            axum::Json(json!(end.as_ref())).into_response()
        }
        None => problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the session ended without sealing",
        ),
    }
}

async fn mcp(State(shared): State<Arc<Shared>>, Path(id): Path<String>, req: Request) -> Response {
    let Some(e) = shared.get(&id) else {
        return problem(
            StatusCode::NOT_FOUND,
            "no such Knox session: the user opens one with POST /knox/sessions",
        );
    };
    e.service.handle(req).await.map(Body::new)
}
