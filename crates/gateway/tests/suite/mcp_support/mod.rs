//! Fixtures of the MCP gateway's concurrency test and bench: an rmcp Streamable-HTTP
//! `echo` upstream and a Streamable-HTTP gateway in front of it, both on loopback;
//! the user's session endpoint spoken over plain HTTP; and the check that many
//! concurrent sessions each seal a bundle holding exactly their own calls.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable,
    reason = "fixtures of a test and a bench: a failed step is a failed test; each binary uses part of them"
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use knox_gateway::mcp::GatewayConfig;
use knox_gateway::mcp::http::{HttpGateway, Shutdown};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _};
use serde_json::{Map, Value, json};

/// The upstream: one listed `echo` tool answering its `text` (any other name is
/// echoed too, and `hang` never answers).
#[derive(Clone)]
pub(crate) struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let Value::Object(o) = schema else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "echo", "echo", o,
        )]))
    }

    async fn call_tool(
        &self,
        r: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Not listed, but answered: the session test's upstream that never answers.
        if r.name == "hang" {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let text = r
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

/// The upstream's tool as the gateway's toolkit manifest declares it: `up.echo`, a read.
pub(crate) const MANIFEST: &str = r#"format = "knox-toolkit/1"
description = "echo"
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 8, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 60, max_open_files = 64 }
[[servers]]
name = "up"
needs = { profile = "offline" }
cost = 1
[[servers.tools]]
name = "up.echo"
description = "Echo a text"
effect = "read"
[servers.tools.inputSchema]
type = "object"
required = ["text"]
[servers.tools.inputSchema.properties]
text = { type = "string" }
"#;

/// Set (to anything) to serve the upstream with Nagle's algorithm left on, as axum
/// does by default. Unset, the upstream sets `TCP_NODELAY`, as Node's and Python's
/// HTTP servers do: with Nagle on, each answer after a session's first waits about
/// 40 ms for the gateway's delayed acknowledgement of the upstream's priming event
/// (docs/gateway-mcp.md, "Measured"), which hides every other cost.
pub(crate) const UPSTREAM_NAGLE: &str = "KNOX_BENCH_UPSTREAM_NAGLE";

/// A running upstream and gateway (both on loopback ports of their own).
pub(crate) struct Fx {
    /// The upstream's MCP URL (`http://127.0.0.1:P/mcp`), for direct calls.
    pub upstream: String,
    /// The user's side of the gateway.
    pub user: User,
    /// What every session shares.
    pub cfg: Arc<GatewayConfig>,
    /// Ends the gateway.
    pub stop: Shutdown,
    /// Bundles, journals, the servers file.
    pub dir: tempfile::TempDir,
}

/// Starts the `echo` upstream (see [`UPSTREAM_NAGLE`]) and an HTTP gateway in front
/// of it; a user's plan may hold up to `max_calls` calls. Call it inside a
/// multi-threaded tokio runtime.
pub(crate) async fn start(max_calls: usize) -> Fx {
    let svc = StreamableHttpService::new(
        || Ok(Echo),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", svc);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    if std::env::var_os(UPSTREAM_NAGLE).is_some() {
        tokio::spawn(async move { axum::serve(l, app).await });
    } else {
        use axum::serve::ListenerExt as _;
        let l = l.tap_io(|t| {
            let _ = t.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(l, app).await });
    }
    let upstream = format!("http://{addr}/mcp");
    let dir = tempfile::tempdir().unwrap();
    let servers = dir.path().join("servers.toml");
    std::fs::write(
        &servers,
        format!(
            "version = 1\n[[server]]\nname = \"up\"\nurl = \"{upstream}\"\ntimeout_secs = 30\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let host = knox_mcp::McpHost::from_file(&servers, out.join("mcp")).unwrap();
    let cfg = Arc::new(GatewayConfig {
        manifest: knox_policy::ToolkitManifest::from_toolkit_text(MANIFEST).unwrap(),
        runtime: Arc::new(
            knox_monitor::run::Runtime::start(
                &knox_engine::Simulated,
                &[],
                knox_policy::ToolkitManifest::from_toolkit_text(MANIFEST).unwrap(),
            )
            .unwrap(),
        ),
        host: Arc::new(host),
        contract: None,
        planner: None,
        regulation: None,
        max_calls,
        trajectory: knox_types::apm::TrajectoryMode::tolerant(),
        platform: Arc::new(|| Ok(Box::new(knox_engine::Simulated) as Box<_>)),
        nonce: Vec::new(),
        out,
        stop: knox_types::apm::StopPolicy::default(),
        stop_flag: Arc::new(AtomicBool::new(false)),
        stop_file: None,
        idle_timeout: Duration::from_secs(600),
        max_message_bytes: 1 << 20,
        heard: Arc::default(),
    });
    let token = knox_gateway::mcp::session_token().unwrap();
    let gw = HttpGateway::bind(
        Arc::clone(&cfg),
        "127.0.0.1:0".parse().unwrap(),
        token.clone(),
        None,
    )
    .await
    .unwrap();
    let gateway = format!("http://{}", gw.local_addr().unwrap());
    let stop = Shutdown::new();
    tokio::spawn(gw.serve(stop.clone()));
    Fx {
        upstream,
        user: User { gateway, token },
        cfg,
        stop,
        dir,
    }
}

/// The user's side of an HTTP gateway: its address and the bearer token.
#[derive(Clone, Debug)]
pub(crate) struct User {
    /// The gateway's base URL (`http://127.0.0.1:P`).
    pub gateway: String,
    /// The user's bearer token for `/knox/sessions`.
    pub token: String,
}

/// One HTTP/1.1 exchange with the gateway's user endpoint (`Connection: close`):
/// the status and the JSON body.
pub(crate) async fn exchange(
    user: &User,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let addr = user.gateway.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        user.token,
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text[9..12].parse().unwrap();
    let json = &text[text.find("\r\n\r\n").unwrap() + 4..];
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

/// The user's plan: one planned `up.echo` call per text, in order.
pub(crate) fn plan(texts: &[String]) -> Value {
    let calls: Vec<Value> = texts
        .iter()
        .map(|t| json!({"tool": "up.echo", "params": {"text": t}}))
        .collect();
    json!({ "calls": calls })
}

/// A session opened by the user over HTTP (`POST /knox/sessions`).
pub(crate) struct Opened {
    /// The session's identifier.
    pub id: String,
    /// The agent's MCP URL.
    pub mcp_url: String,
}

/// Opens a session whose plan calls `up.echo` once with each of `texts`.
pub(crate) async fn open(user: &User, texts: &[String]) -> Opened {
    let body = json!({"prompt": "Echo each of my texts", "plan": plan(texts)});
    let (status, v) = exchange(user, "POST", "/knox/sessions", Some(&body)).await;
    assert_eq!(status, 201, "{v}");
    Opened {
        id: v["session"].as_str().unwrap().to_owned(),
        mcp_url: v["mcp_url"].as_str().unwrap().to_owned(),
    }
}

/// Ends a session as the user does (`DELETE /knox/sessions/ID`), once it is sealed:
/// its end (`run_id`, `bundle`, `verified`, `calls`, `blocked`, …).
pub(crate) async fn close(user: &User, id: &str) -> Value {
    let (status, v) = exchange(user, "DELETE", &format!("/knox/sessions/{id}"), None).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// An rmcp client connected to `url`.
pub(crate) async fn client(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

/// A `tools/call` of `name` with `{"text": text}`.
pub(crate) fn echo(name: &str, text: &str) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    p.arguments = Some(Map::from_iter([("text".to_owned(), json!(text))]));
    p
}

/// The marker of session `s`'s call `c`: fixed width, so no marker is a prefix of
/// another (`knox-mk-s07-c03`).
pub(crate) fn marker(s: usize, c: usize) -> String {
    format!("knox-mk-s{s:02}-c{c:02}")
}

/// What [`concurrent`] found, over every session.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Sessions whose bundle did not verify `complete`.
    pub incomplete: usize,
    /// Planned calls of a session with no allowed `tool_call` and `tool_output` of its
    /// own marker in its bundle (or more than one).
    pub lost: usize,
    /// `tool_output` nodes whose marker is not their parent `tool_call`'s.
    pub mixed: usize,
    /// Another session's markers found anywhere in a session's bundle.
    pub foreign: usize,
    /// Calls the gateway answered with a tool error, or with another text than sent.
    pub wrong_answers: usize,
}

/// What a concurrency run measured besides its [`Report`].
#[derive(Debug)]
pub(crate) struct Run {
    /// The checks.
    pub report: Report,
    /// From the first open to the last call answered.
    pub calls_elapsed: Duration,
    /// From the first open to the last bundle sealed.
    pub total_elapsed: Duration,
    /// Each session's bundle, by session number.
    pub bundles: Vec<PathBuf>,
}

/// `sessions` sessions opened at once over HTTP, each served to its own rmcp client
/// making `calls` calls (its own markers, in one task per session, all sessions
/// concurrently), then closed by the user; every bundle is then verified and read.
pub(crate) async fn concurrent(fx: &Fx, sessions: usize, calls: usize) -> Run {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..sessions {
        let user = fx.user.clone();
        tasks.push(tokio::spawn(async move {
            let texts: Vec<String> = (0..calls).map(|c| marker(s, c)).collect();
            let opened = open(&user, &texts).await;
            let c = client(&opened.mcp_url).await;
            let mut wrong = 0;
            for text in &texts {
                let r = c.peer().call_tool(echo("up.echo", text)).await.unwrap();
                let answered = serde_json::to_value(&r.content).unwrap()[0]["text"].clone();
                if r.is_error == Some(true) || answered != json!(text) {
                    wrong += 1;
                }
            }
            (opened, c, wrong)
        }));
    }
    let mut served = Vec::new();
    for task in tasks {
        served.push(task.await.unwrap());
    }
    let calls_elapsed = t.elapsed();
    let mut ends = Vec::new();
    for (opened, c, wrong) in served {
        ends.push((close(&fx.user, &opened.id).await, wrong));
        let _ = c.cancel().await;
    }
    let total_elapsed = t.elapsed();
    let mut report = Report::default();
    let mut bundles = Vec::new();
    for (s, (end, wrong)) in ends.into_iter().enumerate() {
        report.wrong_answers += wrong;
        let bundle = PathBuf::from(end["bundle"].as_str().unwrap());
        check(&bundle, &fx.cfg.manifest, s, calls, &mut report);
        bundles.push(bundle);
    }
    Run {
        report,
        calls_elapsed,
        total_elapsed,
        bundles,
    }
}

/// Verifies session `s`'s bundle and counts, into `report`, what it lacks or holds
/// that is not its own.
pub(crate) fn check(
    path: &Path,
    manifest: &knox_policy::ToolkitManifest,
    s: usize,
    calls: usize,
    report: &mut Report,
) {
    let bytes = std::fs::read(path).unwrap();
    let bundle: knox_types::bundle::Bundle = serde_json::from_slice(&bytes).unwrap();
    let verified = knox_verify::verify_bundle(
        &bundle,
        &knox_verify::manifests::Manifests::new().with(manifest.clone()),
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    if verified.outcome != knox_verify::Outcome::Complete {
        report.incomplete += 1;
    }
    let text = String::from_utf8_lossy(&bytes);
    report.foreign += markers_in(&text)
        .iter()
        .filter(|m| !m.starts_with(&format!("knox-mk-s{s:02}-")))
        .count();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let of = |kind: &str, m: &str| {
        nodes
            .iter()
            .filter(|n| n["kind"] == kind && n["allowed"] == true)
            .filter(|n| markers_in(&n["payload"].to_string()).contains(m))
            .count()
    };
    for c in 0..calls {
        let m = marker(s, c);
        if of("tool_call", &m) != 1 || of("tool_output", &m) != 1 {
            report.lost += 1;
        }
    }
    for out in nodes.iter().filter(|n| n["kind"] == "tool_output") {
        let parent = out["parent"]
            .as_u64()
            .and_then(|p| nodes.iter().find(|n| n["seq"].as_u64() == Some(p)));
        let mine = markers_in(&out["payload"].to_string());
        let theirs = parent.map(|p| markers_in(&p["payload"].to_string()));
        if mine.is_empty() || theirs.as_ref() != Some(&mine) {
            report.mixed += 1;
        }
    }
}

/// Every marker in `text`, as a set.
fn markers_in(text: &str) -> BTreeSet<String> {
    text.match_indices("knox-mk-s")
        .filter_map(|(i, _)| text.get(i..i + "knox-mk-s00-c00".len()))
        .map(str::to_owned)
        .collect()
}
