//! The MCP gateway in process, against a real rmcp Streamable-HTTP upstream on
//! loopback and real rmcp clients: mediation, evidence, concurrent sessions, an
//! upstream that hangs, the live journal of a session that was never sealed. (The
//! npm servers and third-party clients are in `crates/knox/tests/suite/gateway_mcp.rs`.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable,
    reason = "a test harness: a failed step is a failed test"
)]

use super::mcp_support;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use knox_agent::Prompt;
use knox_gateway::mcp::http::{HttpGateway, Shutdown};
use knox_gateway::mcp::{GatewayConfig, GatewayError, OpenRequest, SessionHandle};
use rmcp::ServiceExt as _;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};

/// The upstream: `echo` (and `send`) answer their `text`; `hang` never answers.
use mcp_support::Echo as Upstream;

/// The upstream's tools as the gateway's manifest declares them: `up.echo` and
/// `up.hang` (reads), `up.send` (a write).
pub(super) const MANIFEST: &str = r#"format = "knox-toolkit/1"
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
[[servers.tools]]
name = "up.hang"
description = "Never answers"
effect = "read"
[servers.tools.inputSchema]
type = "object"
[[servers.tools]]
name = "up.send"
description = "Sends a text"
effect = "write"
[servers.tools.inputSchema]
type = "object"
required = ["text"]
[servers.tools.inputSchema.properties]
text = { type = "string" }
"#;

/// A gateway configuration over the `echo` upstream, and its folder.
pub(super) struct Fx {
    pub(super) cfg: Arc<GatewayConfig>,
    pub(super) dir: tempfile::TempDir,
}

async fn fixture() -> Fx {
    fixture_with(1).await
}

/// The `echo` upstream on a loopback port and a gateway configuration in front of it
/// (sessions opened in process), the upstream given `timeout_secs` to answer.
pub(super) async fn fixture_with(timeout_secs: u64) -> Fx {
    fixture_of(timeout_secs, MANIFEST, |_| Arc::default()).await
}

/// [`fixture_with`] under `manifest`, its label store made by `heard` from the output
/// folder.
async fn fixture_of(
    timeout_secs: u64,
    manifest: &str,
    heard: impl FnOnce(&std::path::Path) -> Arc<knox_gateway::heard::Heard>,
) -> Fx {
    let svc = StreamableHttpService::new(
        || Ok(Upstream),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().route_service("/mcp", svc);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    let dir = tempfile::tempdir().unwrap();
    let servers = dir.path().join("servers.toml");
    std::fs::write(
        &servers,
        format!("version = 1\n[[server]]\nname = \"up\"\nurl = \"http://{addr}/mcp\"\ntimeout_secs = {timeout_secs}\n"),
    )
    .unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let host = knox_mcp::McpHost::from_file(&servers, out.join("mcp")).unwrap();
    let manifest = knox_policy::ToolkitManifest::from_toolkit_text(manifest).unwrap();
    let cfg = Arc::new(GatewayConfig {
        manifest: manifest.clone(),
        runtime: Arc::new(
            knox_monitor::run::Runtime::start(&knox_engine::Simulated, &[], manifest).unwrap(),
        ),
        heard: heard(&out),
        host: Arc::new(host),
        contract: None,
        planner: None,
        regulation: None,
        max_calls: 8,
        trajectory: knox_types::apm::TrajectoryMode::tolerant(),
        platform: Arc::new(|| Ok(Box::new(knox_engine::Simulated) as Box<_>)),
        nonce: Vec::new(),
        out,
        stop: knox_types::apm::StopPolicy::default(),
        stop_flag: Arc::new(AtomicBool::new(false)),
        stop_file: None,
        idle_timeout: Duration::from_secs(600),
        max_message_bytes: 1 << 16,
    });
    Fx { cfg, dir }
}

fn request(label: &str, calls: Value) -> OpenRequest {
    OpenRequest {
        prompt: Prompt {
            tasks: vec!["Echo my text".into()],
        },
        plan: Some(json!({ "calls": calls })),
        label: label.into(),
    }
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(o) => o,
        _ => Map::new(),
    }
}

async fn open(cfg: &Arc<GatewayConfig>, req: OpenRequest) -> Result<SessionHandle, GatewayError> {
    let cfg = Arc::clone(cfg);
    tokio::task::spawn_blocking(move || SessionHandle::open(&cfg, req))
        .await
        .unwrap()
}

fn verify(path: &std::path::Path) -> (knox_verify::Outcome, Value) {
    let bytes = std::fs::read(path).unwrap();
    let b: knox_types::bundle::Bundle = serde_json::from_slice(&bytes).unwrap();
    let r = knox_verify::verify_bundle(
        &b,
        &knox_verify::manifests::Manifests::new(),
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    (r.outcome, serde_json::from_slice(&bytes).unwrap())
}

fn blocked<'a>(b: &'a Value, guard: &str) -> Vec<&'a Value> {
    b["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "blocked" && n["payload"]["guard"] == guard)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_allowed_call_is_forwarded_and_a_call_off_the_plan_is_blocked_and_recorded() {
    let fx = fixture().await;
    let h = open(
        &fx.cfg,
        request(
            "one",
            json!([{"tool": "up.echo", "params": {"text": "hi"}}]),
        ),
    )
    .await
    .unwrap();
    let names: Vec<String> = h.tools().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        ["up.echo"],
        "only what the plan can ever allow is listed"
    );
    let ok = h.call("up.echo".into(), args(json!({"text": "hi"}))).await;
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert_eq!(serde_json::to_value(&ok.content).unwrap()[0]["text"], "hi");
    // Off the plan: a write, and a listed tool with other arguments.
    let no = h
        .call("up.send".into(), args(json!({"text": "exfil"})))
        .await;
    assert_eq!(no.is_error, Some(true));
    let knox = &no.structured_content.as_ref().unwrap()["knox"];
    assert_eq!(knox["guard"], "trajectory", "{knox}");
    let other = h
        .call("up.echo".into(), args(json!({"text": "other"})))
        .await;
    assert_eq!(other.is_error, Some(true), "{other:?}");
    // A tool of a server that is not declared.
    let stranger = h.call("mail.send".into(), Map::new()).await;
    assert_eq!(stranger.is_error, Some(true));
    h.end("test");
    let end = h.ended().await.unwrap();
    assert_eq!((end.calls, end.blocked), (4, 3), "{end:?}");
    let (outcome, b) = verify(end.bundle.as_ref().unwrap());
    assert_eq!(outcome, knox_verify::Outcome::Complete);
    assert!(!blocked(&b, "trajectory").is_empty());
    assert!(!blocked(&b, "input").is_empty());
    let outputs = b["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "tool_output")
        .count();
    assert_eq!(outputs, 1, "only the allowed call ran");
    // After the end, calls get a tool error, not a hang.
    let late = h.call("up.echo".into(), args(json!({"text": "hi"}))).await;
    assert_eq!(late.is_error, Some(true));
    drop(fx.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hanging_upstream_times_out_as_a_tool_error_and_other_sessions_keep_being_served() {
    let fx = fixture().await;
    let hung = open(
        &fx.cfg,
        request("hung", json!([{"tool": "up.hang", "params": {}}])),
    )
    .await
    .unwrap();
    let fine = open(
        &fx.cfg,
        request(
            "fine",
            json!([{"tool": "up.echo", "params": {"text": "x"}}]),
        ),
    )
    .await
    .unwrap();
    let (slow, quick) = tokio::join!(
        hung.call("up.hang".into(), Map::new()),
        fine.call("up.echo".into(), args(json!({"text": "x"})))
    );
    assert_eq!(slow.is_error, Some(true), "{slow:?}");
    assert!(format!("{slow:?}").contains("no answer within"), "{slow:?}");
    assert_ne!(quick.is_error, Some(true), "{quick:?}");
    for h in [hung, fine] {
        h.end("test");
        let end = h.ended().await.unwrap();
        assert_eq!(end.verified.as_deref(), Some("complete"), "{end:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_not_yet_sealed_leaves_a_journal_that_verifies_as_a_prefix() {
    let fx = fixture().await;
    let h = open(
        &fx.cfg,
        request(
            "live",
            json!([{"tool": "up.echo", "params": {"text": "hi"}}]),
        ),
    )
    .await
    .unwrap();
    h.call("up.echo".into(), args(json!({"text": "hi"}))).await;
    h.call("up.send".into(), args(json!({"text": "no"}))).await;
    // What a killed gateway leaves: the journal, written as nodes are committed.
    let journal = fx.cfg.out.join(format!("{}.journal.jsonl", h.run_id()));
    let bytes = std::fs::read(&journal).unwrap();
    let r = knox_verify::journal::verify_journal(
        &bytes,
        &knox_verify::manifests::Manifests::new().with(fx.cfg.manifest.clone()),
        knox_verify::Options::DANGEROUS_SIMULATED,
    )
    .unwrap();
    assert_eq!(r.outcome, knox_verify::Outcome::Prefix, "{r:?}");
    // Tampering with the prefix is caught.
    let text = String::from_utf8(bytes)
        .unwrap()
        .replace("\"no\"", "\"ok\"");
    let t = knox_verify::journal::verify_journal(
        text.as_bytes(),
        &knox_verify::manifests::Manifests::new().with(fx.cfg.manifest.clone()),
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    assert!(t.map_or(true, |r| r.outcome != knox_verify::Outcome::Prefix));
    h.end("test");
    h.ended().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_open_requests_are_refused_and_http_sessions_are_the_users_to_open() {
    let fx = fixture().await;
    let bad = open(
        &fx.cfg,
        request("bad", json!([{"tool": "up.nope", "params": {}}])),
    )
    .await;
    assert!(matches!(bad, Err(GatewayError::BadRequest(_))), "{bad:?}");
    let mut no_plan = request("np", json!([]));
    no_plan.plan = None;
    assert!(matches!(
        open(&fx.cfg, no_plan).await,
        Err(GatewayError::BadRequest(_))
    ));
    // Not on loopback: refused.
    let far = HttpGateway::bind(
        Arc::clone(&fx.cfg),
        "0.0.0.0:0".parse().unwrap(),
        "0123456789abcdef0123".into(),
        None,
    )
    .await;
    assert!(far.is_err());
    // An MCP client cannot reach a session nobody opened.
    let gw = HttpGateway::bind(
        Arc::clone(&fx.cfg),
        "127.0.0.1:0".parse().unwrap(),
        "0123456789abcdef0123".into(),
        None,
    )
    .await
    .unwrap();
    let addr = gw.local_addr().unwrap();
    let stop = Shutdown::new();
    let served = tokio::spawn(gw.serve(stop.clone()));
    let url = format!("http://{addr}/knox/sessions/0123/mcp");
    let c = ().serve(StreamableHttpClientTransport::from_uri(url)).await;
    assert!(c.is_err(), "connected to a session nobody opened");
    stop.cancel();
    let ends = served.await.unwrap().unwrap();
    assert!(ends.is_empty());
}

/// #34: one key per gateway process. Every session's run is signed by the gateway's
/// one key and numbered in its chain of runs — the numbers consecutive in the order
/// the sessions were sealed — so a session the provider leaves out shows as a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_session_is_a_numbered_link_of_the_gateways_one_key() {
    let fx = fixture().await;
    let mut links = Vec::new();
    for label in ["first", "second", "third"] {
        let h = open(
            &fx.cfg,
            request(
                label,
                json!([{"tool": "up.echo", "params": {"text": "hi"}}]),
            ),
        )
        .await
        .unwrap();
        h.call("up.echo".into(), args(json!({"text": "hi"}))).await;
        h.end("test");
        let end = h.ended().await.unwrap();
        let (outcome, b) = verify(end.bundle.as_ref().unwrap());
        assert_eq!(outcome, knox_verify::Outcome::Complete);
        links.push((
            b["key"]["public_key"].as_str().unwrap().to_owned(),
            b["summary"]["key_chain"]["seq"].as_u64().unwrap(),
        ));
    }
    let key = hex::encode(fx.cfg.runtime.public_bytes());
    assert!(links.iter().all(|(k, _)| *k == key), "{links:?}");
    let seqs: Vec<u64> = links.iter().map(|(_, s)| *s).collect();
    assert_eq!(seqs, [0, 1, 2]);
    drop(fx.dir);
}

/// Issue 36, item 2: what the client's model heard in one session reaches every later
/// session of the same gateway's folder, in this process or the next. Session A reads a
/// labelled record; a malicious client then writes it into session B's post, whose text
/// the plan leaves to the model. B records a `heard` node first, so the composed text
/// carries the record and runs as the plan wrote it; so does a session of a second
/// gateway started later on the same folder. Without the store (a folder that heard
/// nothing) the same post runs as composed: the store is what closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_one_session_heard_is_carried_into_the_next_sessions_and_the_next_gateways() {
    let labelled = MANIFEST
        .replace(
            "description = \"Echo a text\"\neffect = \"read\"\n",
            "description = \"Echo a text\"\neffect = \"read\"\nreturns = { info_types = [\"health\"], subject = \"third_party\", source = \"user\" }\n",
        )
        .replace(
            "description = \"Sends a text\"\neffect = \"write\"\n",
            "description = \"Sends a text\"\neffect = \"write\"\nprose = [\"text\"]\n",
        );
    assert_ne!(labelled, MANIFEST);
    let secret = "diagnosis: arrhythmia, patient 4411";
    let post = |label: &str| OpenRequest {
        prompt: Prompt {
            tasks: vec!["Post a greeting".into()],
        },
        plan: Some(json!({"calls": [{"tool": "up.send", "params": {"text": "hello all"}}]})),
        label: label.into(),
    };
    // What a post ran with (the echo answers its text), and the run's bundle.
    let send = async |cfg: &Arc<GatewayConfig>, label: &str| {
        let h = open(cfg, post(label)).await.unwrap();
        let r = h
            .call("up.send".into(), args(json!({"text": secret})))
            .await;
        assert_ne!(r.is_error, Some(true), "{r:?}");
        let text = serde_json::to_value(&r.content).unwrap()[0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        h.end("done");
        let end = h.ended().await.unwrap();
        let (outcome, bundle) = verify(end.bundle.as_ref().unwrap());
        assert_eq!(outcome, knox_verify::Outcome::Complete, "{}", end.run_id);
        (text, bundle)
    };
    let heard_nodes = |b: &Value| -> Vec<Value> {
        b["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["kind"] == "heard")
            .map(|n| n["payload"].clone())
            .collect()
    };

    // Control: a folder whose store heard nothing lets the composed text run.
    let fresh = fixture_of(1, &labelled, |out| {
        Arc::new(knox_gateway::heard::Heard::in_dir(out).unwrap())
    })
    .await;
    let (text, bundle) = send(&fresh.cfg, "control").await;
    assert_eq!(text, secret, "nothing heard: the post runs as composed");
    assert!(heard_nodes(&bundle).is_empty());

    let fx = fixture_of(1, &labelled, |out| {
        Arc::new(knox_gateway::heard::Heard::in_dir(out).unwrap())
    })
    .await;
    let a = open(
        &fx.cfg,
        OpenRequest {
            prompt: Prompt {
                tasks: vec!["Read the record".into()],
            },
            plan: Some(json!({"calls": [{"tool": "up.echo", "params": {"text": secret}}]})),
            label: "read".into(),
        },
    )
    .await
    .unwrap();
    let r = a
        .call("up.echo".into(), args(json!({"text": secret})))
        .await;
    assert_ne!(r.is_error, Some(true), "{r:?}");
    a.end("done");
    let read_run = a.ended().await.unwrap().run_id.clone();
    let logged = fx.cfg.heard.entries();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0].run, read_run);
    assert_eq!(logged[0].tool, "up.echo");

    let (text, bundle) = send(&fx.cfg, "post").await;
    assert_eq!(text, "hello all", "the post ran in the plan's words");
    let heard = heard_nodes(&bundle);
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!(heard[0]["run"], read_run.as_str());
    assert_eq!(heard[0]["endpoint"], knox_gateway::mcp::session::CLIENT);

    // A second gateway on the same folder, later: the store is on disk.
    let out = fx.cfg.out.clone();
    let next = fixture_of(1, &labelled, |_| {
        Arc::new(knox_gateway::heard::Heard::in_dir(&out).unwrap())
    })
    .await;
    let (text, bundle) = send(&next.cfg, "next").await;
    assert_eq!(
        text, "hello all",
        "the next gateway's post ran in the plan's words"
    );
    assert_eq!(heard_nodes(&bundle).len(), 1);
}
