//! The MCP gateway's cost, on loopback, bounded:
//!
//! - `call/direct` vs `call/gateway`: one allowed `tools/call` from an rmcp client
//!   straight to an upstream Streamable-HTTP server, and the same call through a
//!   gateway session in front of that server, in the same run. The difference is what
//!   the gateway adds (mediation, grant, recording, the extra hop). p50/p99 of both
//!   are printed from 2,000 timed calls each.
//! - `session/open_seal`: one session opened (plan checked, key bound, APM attested)
//!   and sealed (bundle written and self-verified).
//! - 64 concurrent sessions, 16 calls each: every bundle is checked for lost or
//!   mixed-up nodes (each session's calls carry its own marker).
//!
//! `cargo bench -p knox-gateway --bench mcp`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable,
    reason = "a test harness: a failed step is a failed test"
)]

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use knox_agent::Prompt;
use knox_gateway::mcp::http::{HttpGateway, Shutdown};
use knox_gateway::mcp::{GatewayConfig, OpenRequest, SessionHandle};
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

/// The upstream: one `echo` tool answering its `text`.
#[derive(Clone)]
struct Echo;

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

const MANIFEST: &str = r#"format = "knox-toolkit/1"
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

struct Bench {
    rt: tokio::runtime::Runtime,
    upstream: String,
    cfg: Arc<GatewayConfig>,
    gateway: String,
    token: String,
    _dir: tempfile::TempDir,
}

fn setup() -> Bench {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let upstream = rt.block_on(async {
        let svc = StreamableHttpService::new(
            || Ok(Echo),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let app = axum::Router::new().route_service("/mcp", svc);
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await });
        format!("http://{addr}/mcp")
    });
    let servers = dir.path().join("servers.toml");
    std::fs::write(
        &servers,
        format!("version = 1\n[[server]]\nname = \"up\"\nurl = \"{upstream}\"\n"),
    )
    .unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let host = knox_mcp::McpHost::from_file(&servers, out.join("mcp")).unwrap();
    let cfg = Arc::new(GatewayConfig {
        manifest: knox_policy::ToolkitManifest::from_toolkit_text(MANIFEST).unwrap(),
        host: Arc::new(host),
        planner: None,
        max_calls: 8,
        trajectory: knox_types::apm::TrajectoryMode::tolerant(),
        platform: Arc::new(|| Ok(Box::new(knox_engine::Simulated) as Box<_>)),
        nonce: Vec::new(),
        out,
        stop: knox_types::apm::StopPolicy::default(),
        stop_flag: Arc::new(AtomicBool::new(false)),
        stop_file: None,
        idle_timeout: Duration::from_secs(600),
        max_message_bytes: 1 << 20,
    });
    let token = knox_gateway::mcp::session_token().unwrap();
    let gateway = rt.block_on(async {
        let gw = HttpGateway::bind(
            Arc::clone(&cfg),
            "127.0.0.1:0".parse().unwrap(),
            token.clone(),
            None,
        )
        .await
        .unwrap();
        let addr = gw.local_addr().unwrap();
        tokio::spawn(gw.serve(Shutdown::new()));
        format!("http://{addr}")
    });
    Bench {
        rt,
        upstream,
        cfg,
        gateway,
        token,
        _dir: dir,
    }
}

fn request(text: &str) -> OpenRequest {
    OpenRequest {
        prompt: Prompt {
            tasks: vec!["Echo my text".into()],
        },
        plan: Some(json!({"calls": [{"tool": "up.echo", "params": {"text": text}}]})),
        label: format!("bench-{text}"),
    }
}

/// Opens a session as the user would, over HTTP: its MCP URL.
fn open_http(b: &Bench, text: &str) -> String {
    let body = json!({"prompt": "Echo my text", "plan": {"calls": [{"tool": "up.echo", "params": {"text": text}}]}});
    let text = b.rt.block_on(async {
        let mut s = tokio::net::TcpStream::connect(b.gateway.trim_start_matches("http://"))
            .await
            .unwrap();
        let body = body.to_string();
        let req = format!(
            "POST /knox/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            b.token,
            body.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await.unwrap();
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut s, &mut out).await.unwrap();
        out
    });
    let json = &text[text.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(json).unwrap();
    v["mcp_url"].as_str().unwrap().to_owned()
}

async fn client(url: &str) -> RunningService<RoleClient, ()> {
    ().serve(StreamableHttpClientTransport::from_uri(url.to_owned()))
        .await
        .unwrap()
}

fn echo(name: &str, text: &str) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    p.arguments = Some(Map::from_iter([("text".to_owned(), json!(text))]));
    p
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

fn calls(c: &mut Criterion) {
    let b = setup();
    let url = open_http(&b, "hi");
    let (direct, gated) =
        b.rt.block_on(async { (client(&b.upstream).await, client(&url).await) });
    let mut g = c.benchmark_group("call");
    g.bench_function("direct", |x| {
        x.iter(|| {
            b.rt.block_on(direct.peer().call_tool(echo("echo", "hi")))
                .unwrap()
        })
    });
    g.bench_function("gateway", |x| {
        x.iter(|| {
            let r =
                b.rt.block_on(gated.peer().call_tool(echo("up.echo", "hi")))
                    .unwrap();
            assert_ne!(r.is_error, Some(true), "{r:?}");
        })
    });
    g.finish();
    // p50/p99 from the same run, interleaved so both see the same machine state.
    let (mut d, mut w) = (Vec::new(), Vec::new());
    for _ in 0..2000 {
        let t = Instant::now();
        b.rt.block_on(direct.peer().call_tool(echo("echo", "hi")))
            .unwrap();
        d.push(t.elapsed());
        let t = Instant::now();
        b.rt.block_on(gated.peer().call_tool(echo("up.echo", "hi")))
            .unwrap();
        w.push(t.elapsed());
    }
    let ((d50, d99), (w50, w99)) = (percentiles(d), percentiles(w));
    println!(
        "tools/call over loopback, 2000 each: direct p50 {d50:?} p99 {d99:?}; through the gateway p50 {w50:?} p99 {w99:?}; added p50 {:?} p99 {:?}",
        w50.saturating_sub(d50),
        w99.saturating_sub(d99)
    );
}

fn sessions(c: &mut Criterion) {
    let b = setup();
    let mut g = c.benchmark_group("session");
    g.sample_size(20);
    g.bench_function("open_seal", |x| {
        x.iter(|| {
            let h = SessionHandle::open(&b.cfg, request("s")).unwrap();
            h.end("bench");
            let end = b.rt.block_on(h.ended()).unwrap();
            assert_eq!(end.verified.as_deref(), Some("complete"));
        })
    });
    g.finish();
}

/// 64 sessions at once, 16 calls each: no lost and no mixed-up node.
fn concurrent(_: &mut Criterion) {
    const N: usize = 64;
    const CALLS: usize = 16;
    let b = setup();
    let handles: Vec<Arc<SessionHandle>> = (0..N)
        .map(|i| Arc::new(SessionHandle::open(&b.cfg, request(&format!("s{i}"))).unwrap()))
        .collect();
    let t = Instant::now();
    b.rt.block_on(async {
        let mut tasks = Vec::new();
        for (i, h) in handles.iter().enumerate() {
            let h = Arc::clone(h);
            tasks.push(tokio::spawn(async move {
                for _ in 0..CALLS {
                    let mut args = Map::new();
                    args.insert("text".into(), json!(format!("s{i}")));
                    let r = h.call("up.echo".into(), args).await;
                    assert_ne!(r.is_error, Some(true), "{r:?}");
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let elapsed = t.elapsed();
    let (mut lost, mut mixed) = (0, 0);
    for (i, h) in handles.iter().enumerate() {
        h.end("bench");
        let end = b.rt.block_on(h.ended()).unwrap();
        assert_eq!(end.verified.as_deref(), Some("complete"));
        let bundle: Value =
            serde_json::from_slice(&std::fs::read(end.bundle.as_ref().unwrap()).unwrap()).unwrap();
        let outputs: Vec<&Value> = bundle["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "tool_output")
            .collect();
        lost += CALLS.saturating_sub(outputs.len());
        mixed += outputs
            .iter()
            .filter(|n| {
                !n["payload"]["output"]
                    .to_string()
                    .contains(&format!("\"s{i}\""))
            })
            .count();
    }
    println!(
        "{N} concurrent sessions × {CALLS} calls in {elapsed:?}: {lost} lost, {mixed} mixed-up tool outputs"
    );
    assert_eq!((lost, mixed), (0, 0));
}

criterion_group!(benches, calls, sessions, concurrent);
criterion_main!(benches);
