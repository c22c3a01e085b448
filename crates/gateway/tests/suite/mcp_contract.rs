//! The MCP gateway bounded by a signed capability contract (issue 17, items 1(b) and
//! 1(c); issue 18, item 2): the contract's four tools, executed for real by the
//! broker's contract host beneath a directory the test created.
//!
//! - **No prompt** (`POST /knox/sessions` with `{}`): an unplanned session. A real rmcp
//!   client lists the contract's tools, writes and reads inside the capabilities, and
//!   is refused a write into a read-only capability, a `../` escape and a tool of no
//!   contract; the bundle verifies `complete`, its APM is `unplanned` and names the
//!   contract, and nothing outside the capability roots was touched.
//! - **A prompt and the user's plan**: both bound each call — an off-plan write inside
//!   the contract is blocked by the trajectory guard, a planned escape by the contract.
//! - A session without a prompt on a gateway with no contract, or with a plan but no
//!   prompt, is refused before anything runs.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use super::mcp_support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use knox_agent::Prompt;
use knox_attest::PartyKey;
use knox_gateway::mcp::http::{HttpGateway, Shutdown};
use knox_gateway::mcp::{Contract, GatewayConfig, GatewayError, OpenRequest, SessionHandle};
use knox_types::apm::TrajectoryMode;
use knox_types::bundle::Bundle;
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value, json};

struct Fx {
    dir: tempfile::TempDir,
    ws: PathBuf,
    cfg: Arc<GatewayConfig>,
    contract: knox_contract::Verified,
}

fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A gateway serving the template contract with its `workspace` (write) and `docs`
/// (read) capabilities rooted in a fresh directory; `None` where the kernel sandbox
/// the contract host needs is unavailable (never in CI).
fn fixture() -> Option<Fx> {
    fixture_with(None)
}

/// [`fixture`]; with `approver`, its `vault` capability (writes beneath the workspace)
/// is high-impact and needs that key's approval (as `alice`), tokens read from
/// `<dir>/tokens` (`knox run --approvals`).
fn fixture_with(approver: Option<&PartyKey>) -> Option<Fx> {
    fixture_edit(approver, |_| {})
}

/// [`fixture_with`], the contract edited by `edit` before it is signed.
fn fixture_edit(
    approver: Option<&PartyKey>,
    edit: impl FnOnce(&mut knox_contract::format::Contract),
) -> Option<Fx> {
    let dir = tempfile::tempdir().unwrap();
    let (ws, docs, out) = (
        dir.path().join("ws"),
        dir.path().join("docs"),
        dir.path().join("out"),
    );
    for d in [&ws, &docs, &out] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(docs.join("readme.txt"), "read me").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "knox-secret-outside").unwrap();
    let now = now_ms();
    let mut c = knox_contract::example::template(now - 3_600_000, now + 3_600_000, &"0".repeat(64));
    c.id = "gateway-test".into();
    c.directories.get_mut("workspace").unwrap().root = ws.to_str().unwrap().into();
    c.directories.get_mut("docs").unwrap().root = docs.to_str().unwrap().into();
    let approvals = approver.map(|alice| {
        c.directories.insert(
            "vault".into(),
            knox_contract::format::DirectoryCap {
                root: ws.to_str().unwrap().into(),
                access: knox_contract::format::DirAccess::Write,
                cost_cents: 1,
                impact: knox_contract::format::Impact::High,
            },
        );
        c.approvers
            .insert("alice".into(), hex::encode(alice.public_bytes()));
        c.approval_required
            .insert(knox_contract::format::Impact::High);
        let tokens = dir.path().join("tokens");
        std::fs::create_dir(&tokens).unwrap();
        knox_engine::contract::ApprovalDir {
            dir: tokens,
            pending: None,
            timeout: Duration::ZERO,
        }
    });
    edit(&mut c);
    let authority = PartyKey::from_seed([11; 32]);
    let env = knox_contract::signed::sign(&authority, &c).unwrap();
    let verified = knox_contract::signed::verify(&env, &authority.public_key()).unwrap();
    let host = match knox_broker::contract::ContractHost::new(
        verified.clone(),
        out.join("contract-scratch"),
        knox_sandbox::SandboxConfig::default(),
    ) {
        Ok(h) => h,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "kernel sandbox unavailable in CI: {e}"
            );
            eprintln!("skipping: kernel sandbox unavailable here: {e}");
            return None;
        }
    };
    let cfg = Arc::new(GatewayConfig {
        manifest: knox_engine::contract::manifest().unwrap(),
        runtime: Arc::new(
            knox_monitor::run::Runtime::start(
                &knox_engine::Simulated,
                &[],
                knox_engine::contract::manifest().unwrap(),
            )
            .unwrap(),
        ),
        host: Arc::new(host),
        contract: Some(Contract {
            verified: verified.clone(),
            approvals,
        }),
        planner: None,
        regulation: None,
        max_calls: 8,
        trajectory: TrajectoryMode::tolerant(),
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
    Some(Fx {
        dir,
        ws,
        cfg,
        contract: verified,
    })
}

fn call(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_owned());
    let Value::Object(o) = args else {
        panic!("arguments must be an object")
    };
    p.arguments = Some(o);
    p
}

fn verified(path: &std::path::Path) -> (Bundle, String) {
    let text = std::fs::read_to_string(path).unwrap();
    let b: Bundle = serde_json::from_str(&text).unwrap();
    let r = knox_verify::verify_bundle(
        &b,
        &knox_verify::manifests::Manifests::new(),
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    assert_eq!(r.outcome, knox_verify::Outcome::Complete, "{r:?}");
    (b, text)
}

/// The block reasons of a bundle's blocked nodes, in order.
fn blocked(b: &Bundle) -> Vec<String> {
    b.nodes
        .iter()
        .filter(|n| n.kind == knox_types::aeg::NodeKind::Blocked)
        .filter_map(|n| n.block_reason.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_without_a_prompt_is_bounded_by_the_contract_alone() {
    let Some(fx) = fixture() else {
        return;
    };
    let token = knox_gateway::mcp::session_token().unwrap();
    let gw = HttpGateway::bind(
        Arc::clone(&fx.cfg),
        "127.0.0.1:0".parse().unwrap(),
        token.clone(),
        None,
    )
    .await
    .unwrap();
    let user = mcp_support::User {
        gateway: format!("http://{}", gw.local_addr().unwrap()),
        token,
    };
    let stop = Shutdown::new();
    tokio::spawn(gw.serve(stop.clone()));
    // The user opens a session with no prompt.
    let (status, opened) =
        mcp_support::exchange(&user, "POST", "/knox/sessions", Some(&json!({}))).await;
    assert_eq!(status, 201, "{opened}");
    let c = mcp_support::client(opened["mcp_url"].as_str().unwrap()).await;
    let mut listed: Vec<String> = c
        .peer()
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "ContractExec",
            "ContractHttp",
            "ContractReadFile",
            "ContractWriteFile"
        ]
    );
    let peer = c.peer();
    // Inside the contract: executed for real.
    let w = peer
        .call_tool(call(
            "ContractWriteFile",
            json!({"dir": "workspace", "path": "notes/a.txt", "content": "from the agent"}),
        ))
        .await
        .unwrap();
    assert_ne!(w.is_error, Some(true), "{w:?}");
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("notes/a.txt")).unwrap(),
        "from the agent"
    );
    let r = peer
        .call_tool(call(
            "ContractReadFile",
            json!({"dir": "docs", "path": "readme.txt"}),
        ))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    assert!(format!("{:?}", r.content).contains("read me"), "{r:?}");
    // Outside it: each refused with the contract's check, and nothing happens.
    let refusals = [
        call(
            "ContractWriteFile",
            json!({"dir": "docs", "path": "readme.txt", "content": "overwritten"}),
        ),
        call(
            "ContractReadFile",
            json!({"dir": "docs", "path": "../secret.txt"}),
        ),
        call(
            "ContractWriteFile",
            json!({"dir": "workspace", "path": "../escaped.txt", "content": "x"}),
        ),
    ];
    for p in refusals {
        let no = peer.call_tool(p).await.unwrap();
        assert_eq!(no.is_error, Some(true), "{no:?}");
        let knox = &no.structured_content.as_ref().unwrap()["knox"];
        assert_eq!(knox["guard"], "contract", "{knox}");
    }
    // A tool no contract offers.
    let stranger = peer
        .call_tool(call(
            "fs.write_file",
            json!({"path": "/tmp/x", "content": "x"}),
        ))
        .await
        .unwrap();
    assert_eq!(stranger.is_error, Some(true));
    assert_eq!(
        std::fs::read_to_string(fx.dir.path().join("docs/readme.txt")).unwrap(),
        "read me"
    );
    assert!(!fx.dir.path().join("escaped.txt").exists());
    drop(c);
    let end = mcp_support::close(&user, opened["session"].as_str().unwrap()).await;
    assert_eq!(end["verified"], "complete", "{end}");
    assert_eq!(
        (end["calls"].as_u64(), end["blocked"].as_u64()),
        (Some(6), Some(4))
    );
    let (b, text) = verified(std::path::Path::new(end["bundle"].as_str().unwrap()));
    // The APM: unplanned, bounded by the contract, whose envelope the bundle embeds.
    assert_eq!(b.apm.guards.trajectory, TrajectoryMode::Unplanned);
    assert_eq!(b.apm.inputs.contract, Some(fx.contract.hash));
    assert!(b.contract.is_some());
    assert!(b.apm.agents.iter().all(|a| a.trajectory.is_empty()));
    assert!(
        b.apm.tasks[0].instruction.contains("gateway-test"),
        "{}",
        b.apm.tasks[0].instruction
    );
    let reasons = blocked(&b);
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert_eq!(
        reasons
            .iter()
            .filter(|r| r.contains("contract check"))
            .count(),
        3,
        "{reasons:?}"
    );
    assert_eq!(b.summary.counts.executed, 2);
    // What lies outside the capabilities never reached the evidence.
    assert!(!text.contains("knox-secret-outside"));
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_prompt_the_plan_and_the_contract_must_both_allow() {
    let Some(fx) = fixture() else {
        return;
    };
    let plan = json!({"calls": [
        {"tool": "ContractWriteFile", "params": {"dir": "workspace", "path": "plan.txt", "content": "planned"}},
        {"tool": "ContractWriteFile", "params": {"dir": "workspace", "path": "../planned-escape.txt", "content": "x"}},
    ]});
    let req = OpenRequest {
        prompt: Prompt {
            tasks: vec!["Write my plan down".into()],
        },
        plan: Some(plan),
        label: "planned".into(),
    };
    let cfg = Arc::clone(&fx.cfg);
    let h = tokio::task::spawn_blocking(move || SessionHandle::open(&cfg, req))
        .await
        .unwrap()
        .unwrap();
    let args = |v: Value| -> Map<String, Value> {
        let Value::Object(o) = v else { panic!() };
        o
    };
    let names: Vec<String> = h.tools().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["ContractWriteFile"], "only what the plan can allow");
    let ok = h
        .call(
            "ContractWriteFile".into(),
            args(json!({"dir": "workspace", "path": "plan.txt", "content": "planned"})),
        )
        .await;
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    // Inside the contract but off the plan: the trajectory guard.
    let off = h
        .call(
            "ContractWriteFile".into(),
            args(json!({"dir": "workspace", "path": "other.txt", "content": "unplanned"})),
        )
        .await;
    assert_eq!(
        off.structured_content.as_ref().unwrap()["knox"]["guard"],
        "trajectory",
        "{off:?}"
    );
    // On the plan but outside the contract: the contract.
    let escape = h
        .call(
            "ContractWriteFile".into(),
            args(json!({"dir": "workspace", "path": "../planned-escape.txt", "content": "x"})),
        )
        .await;
    assert_eq!(
        escape.structured_content.as_ref().unwrap()["knox"]["guard"],
        "contract",
        "{escape:?}"
    );
    h.end("test");
    let end = h.ended().await.unwrap();
    let (b, _) = verified(end.bundle.as_ref().unwrap());
    assert_eq!(b.apm.guards.trajectory, TrajectoryMode::tolerant());
    assert_eq!(b.apm.inputs.contract, Some(fx.contract.hash));
    assert_eq!(b.summary.counts.executed, 1);
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("plan.txt")).unwrap(),
        "planned"
    );
    assert!(!fx.ws.join("other.txt").exists());
    assert!(!fx.dir.path().join("planned-escape.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_a_prompt_needs_a_contract_and_a_plan_needs_its_prompt() {
    let Some(fx) = fixture() else {
        return;
    };
    let open = |cfg: Arc<GatewayConfig>, plan: Option<Value>| {
        let req = OpenRequest {
            prompt: Prompt { tasks: Vec::new() },
            plan,
            label: "none".into(),
        };
        tokio::task::spawn_blocking(move || SessionHandle::open(&cfg, req))
    };
    // A plan with no prompt to plan.
    let e = open(Arc::clone(&fx.cfg), Some(json!({"calls": []})))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(&e, GatewayError::BadRequest(m) if m.contains("prompt")),
        "{e}"
    );
    // The same gateway with no contract: no bound, no session.
    let unbounded = Arc::new(GatewayConfig {
        manifest: fx.cfg.manifest.clone(),
        runtime: Arc::clone(&fx.cfg.runtime),
        host: Arc::clone(&fx.cfg.host),
        contract: None,
        planner: None,
        regulation: None,
        max_calls: 8,
        trajectory: TrajectoryMode::tolerant(),
        platform: Arc::clone(&fx.cfg.platform),
        nonce: Vec::new(),
        out: fx.cfg.out.clone(),
        stop: knox_types::apm::StopPolicy::default(),
        stop_flag: Arc::new(AtomicBool::new(false)),
        stop_file: None,
        idle_timeout: Duration::from_secs(600),
        max_message_bytes: 1 << 20,
        heard: Arc::default(),
    });
    let e = open(unbounded, None).await.unwrap().unwrap_err();
    assert!(
        matches!(&e, GatewayError::BadRequest(m) if m.contains("contract")),
        "{e}"
    );
    // Nothing ran: no bundle was written.
    let written: Vec<_> = std::fs::read_dir(&fx.cfg.out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert!(written.is_empty(), "{written:?}");
}

/// #35: one approval token, three gateway sessions: the first session's write runs, the
/// two later sessions are refused it (`approval_used_by`: the first session's run), and
/// all three bundles verify complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_approval_token_serves_one_gateway_session() {
    let alice = PartyKey::generate().unwrap();
    let Some(fx) = fixture_with(Some(&alice)) else {
        return;
    };
    let args = json!({"dir": "vault", "path": "k.txt", "content": "approved"});
    let action = knox_types::Action::new("ContractWriteFile", args.clone()).unwrap();
    let token = knox_contract::approval::sign(
        &alice,
        "alice",
        fx.contract.hash,
        action.hash(),
        now_ms(),
        60_000,
    )
    .unwrap();
    std::fs::write(
        fx.dir
            .path()
            .join("tokens")
            .join(format!("{}.json", action.hash().to_hex())),
        serde_json::to_vec(&token).unwrap(),
    )
    .unwrap();
    let session = knox_gateway::mcp::session_token().unwrap();
    let gw = HttpGateway::bind(
        Arc::clone(&fx.cfg),
        "127.0.0.1:0".parse().unwrap(),
        session.clone(),
        None,
    )
    .await
    .unwrap();
    let user = mcp_support::User {
        gateway: format!("http://{}", gw.local_addr().unwrap()),
        token: session,
    };
    let stop = Shutdown::new();
    tokio::spawn(gw.serve(stop.clone()));
    let mut runs = Vec::new();
    for i in 0..3 {
        let _ = std::fs::remove_file(fx.ws.join("k.txt"));
        let (status, opened) =
            mcp_support::exchange(&user, "POST", "/knox/sessions", Some(&json!({}))).await;
        assert_eq!(status, 201, "{opened}");
        let c = mcp_support::client(opened["mcp_url"].as_str().unwrap()).await;
        let r = c
            .peer()
            .call_tool(call("ContractWriteFile", args.clone()))
            .await
            .unwrap();
        drop(c);
        let end = mcp_support::close(&user, opened["session"].as_str().unwrap()).await;
        assert_eq!(end["verified"], "complete", "{end}");
        let (b, _) = verified(std::path::Path::new(end["bundle"].as_str().unwrap()));
        if i == 0 {
            assert_ne!(r.is_error, Some(true), "{r:?}");
            assert_eq!(
                std::fs::read_to_string(fx.ws.join("k.txt")).unwrap(),
                "approved"
            );
        } else {
            assert_eq!(r.is_error, Some(true), "session {i}: {r:?}");
            assert!(!fx.ws.join("k.txt").exists(), "session {i} wrote");
            let reasons = blocked(&b);
            assert!(
                reasons
                    .iter()
                    .any(|r| r.contains(&format!("already used by run `{}`", runs[0]))),
                "session {i}: {reasons:?}"
            );
        }
        runs.push(b.run_id.clone());
    }
    stop.cancel();
}

/// Issue 36, item 1: in a session only the contract bounds, a request carries whatever
/// the agent read before it, in any form — so it runs only when the contract clears its
/// endpoint for the capability the data came through. Against a loopback endpoint the
/// test serves: a request before any read runs; after reading `docs/readme.txt`, the
/// same endpoint is refused by the data-flow guard (the file's text in its query, and
/// also a request whose text holds nothing of it: what decides is what was read) and
/// receives nothing; a contract whose endpoint `receives` `docs` lets it through. Both
/// bundles verify.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unplanned_request_runs_only_where_the_contract_clears_what_was_read() {
    let got: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/v1/{*rest}",
        axum::routing::get(move |uri: axum::http::Uri| {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(uri.to_string());
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(l, app).await });
    let local = |receives: &[&str]| {
        let receives: std::collections::BTreeSet<String> =
            receives.iter().map(|r| (*r).to_owned()).collect();
        move |c: &mut knox_contract::format::Contract| {
            let e = c.endpoints.get_mut("example-api").unwrap();
            e.scheme = knox_contract::format::Scheme::Http;
            e.host = "127.0.0.1".into();
            e.port = port;
            e.receives = receives;
        }
    };
    let url = |q: &str| format!("http://127.0.0.1:{port}/v1/search?q={q}");
    let http = |q: &str| {
        json!({"endpoint": "example-api", "method": "GET", "url": url(q)})
            .as_object()
            .cloned()
            .unwrap()
    };
    let read = json!({"dir": "docs", "path": "readme.txt"})
        .as_object()
        .cloned()
        .unwrap();
    for cleared in [false, true] {
        let receives: &[&str] = if cleared { &["docs"] } else { &[] };
        let Some(fx) = fixture_edit(None, local(receives)) else {
            return;
        };
        got.lock().unwrap().clear();
        let cfg = Arc::clone(&fx.cfg);
        let h = tokio::task::spawn_blocking(move || {
            SessionHandle::open(
                &cfg,
                OpenRequest {
                    prompt: Prompt { tasks: vec![] },
                    plan: None,
                    label: "flow".into(),
                },
            )
        })
        .await
        .unwrap()
        .unwrap();
        // Nothing read yet: the request runs, and so does one carrying its own answer.
        for q in ["hello", "again"] {
            let r = h.call("ContractHttp".into(), http(q)).await;
            assert_ne!(r.is_error, Some(true), "{cleared}: {r:?}");
        }
        let r = h.call("ContractReadFile".into(), read.clone()).await;
        assert_ne!(r.is_error, Some(true), "{r:?}");
        // The file's text, plainly and encoded; then text that holds none of it.
        for q in ["read%20me", "cmVhZCBtZQ", "weather"] {
            let r = h.call("ContractHttp".into(), http(q)).await;
            if cleared {
                assert_ne!(r.is_error, Some(true), "{q}: {r:?}");
            } else {
                assert_eq!(r.is_error, Some(true), "{q}: {r:?}");
                let knox = &r.structured_content.as_ref().unwrap()["knox"];
                assert_eq!(knox["guard"], "data_flow", "{knox}");
                assert!(
                    knox["reason"].as_str().unwrap().contains(
                        "which the contract does not clear the request's endpoint to receive"
                    ),
                    "{knox}"
                );
            }
        }
        h.end("done");
        let end = h.ended().await.unwrap();
        let (b, _) = verified(end.bundle.as_ref().unwrap());
        let queries: Vec<String> = got.lock().unwrap().clone();
        if cleared {
            assert_eq!(queries.len(), 5, "{queries:?}");
            assert!(blocked(&b).is_empty(), "{:?}", blocked(&b));
        } else {
            assert_eq!(
                queries,
                ["/v1/search?q=hello", "/v1/search?q=again"],
                "nothing after the read reached the endpoint"
            );
            assert_eq!(blocked(&b).len(), 3, "{:?}", blocked(&b));
        }
    }
}
