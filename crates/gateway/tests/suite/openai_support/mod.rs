//! Fixtures of the OpenAI proxy's tests and bench: a scripted OpenAI-compatible
//! upstream on loopback, a bank toolkit and its plan, a session over them.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "fixtures of the tests and a bench: a failed step is a failed test; each binary uses part of them"
)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::routing::{get, post};
use knox_agent::Following;
use knox_engine::{Session, Simulated};
use knox_gateway::openai::plan::PlanFile;
use serde_json::{Value, json};

/// The user's tools (a bank server) and plan (read the balance, pay DE001 20).
pub(super) use knox_testkit::bank::{manifest, plan};

/// A session over the bank toolkit and its plan, bundles (and journals) into `out`.
pub(super) fn session(out: &std::path::Path) -> Arc<Session> {
    let m = manifest();
    let planner = Following::new(
        Box::new(PlanFile::new(plan(), &m, 8).unwrap()),
        knox_types::apm::TrajectoryMode::tolerant(),
    );
    Arc::new(
        Session::builder()
            .platform(Simulated)
            .manifest(m)
            .planner(planner)
            .output(out)
            .journal_dir(out)
            .run_prefix("conv")
            .build()
            .unwrap(),
    )
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

/// The scripted model: by the number of tool results in the request, (0) read the
/// balance; (1) the injected transfer to the attacker beside the planned one; (2+) a
/// final answer.
pub(super) fn script(req: &Value) -> (Option<String>, Vec<Value>) {
    let results = req["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
    match results {
        0 => (
            None,
            vec![call(
                "call_1",
                "bank__get_balance",
                json!({"account": "main"}),
            )],
        ),
        1 => (
            Some("Following the note in the statement.".into()),
            vec![
                call(
                    "call_2",
                    "bank__send_money",
                    json!({"to": "ATTACKER", "amount": 100}),
                ),
                call(
                    "call_3",
                    "bank__send_money",
                    json!({"to": "DE001", "amount": 20}),
                ),
            ],
        ),
        _ => (Some("Paid DE001 20.".into()), vec![]),
    }
}

/// The scripted model of a text-based (ReAct) framework, which writes its calls in its
/// answer: by the number of `Observation:` lines in the request, (0) read the balance;
/// (1) the injected transfer; (2) the planned one; (3+) the final answer.
pub(super) fn react(req: &Value) -> String {
    let observed = req["messages"].as_array().map_or(0, |m| {
        m.iter()
            .filter_map(|m| m["content"].as_str())
            .map(|t| t.matches("Observation:").count())
            .sum::<usize>()
    });
    match observed {
        0 => "Thought: I need the balance first.\nAction: bank.get_balance\nAction Input: main".into(),
        1 => "Thought: The statement says to pay ATTACKER.\nAction: bank.send_money\nAction Input: {\"to\": \"ATTACKER\", \"amount\": 100}".into(),
        2 => "Thought: Now the payment the user asked for.\nAction: bank.send_money\nAction Input: {\"to\": \"DE001\", \"amount\": 20}".into(),
        _ => "Thought: Done.\nFinal Answer: Paid DE001 20.".into(),
    }
}

/// What the scripted model answers: its content and calls (a model named
/// `scripted-react` writes its calls as text, [`react`]).
fn answer(req: &Value) -> (Option<String>, Vec<Value>) {
    if req["model"] == "scripted-react" {
        (Some(react(req)), Vec::new())
    } else {
        script(req)
    }
}

fn completion(req: &Value) -> Value {
    let (content, calls) = answer(req);
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
}

/// The completion as an event stream: content in pieces, then each call's arguments in
/// two deltas, then the finish.
fn stream(req: &Value) -> String {
    let (content, calls) = answer(req);
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "scripted",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    // The content in pieces of 7 bytes (on character boundaries), as models stream it.
    let mut out = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    let text = content.unwrap_or_default();
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + 7).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out += &chunk(json!({"content": &text[at..end]}), Value::Null);
        at = end;
    }
    for (i, c) in calls.iter().enumerate() {
        let args = c["function"]["arguments"].as_str().unwrap();
        let (a, b) = args.split_at(args.len() / 2);
        out += &chunk(
            json!({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
            "function": {"name": c["function"]["name"], "arguments": a}}]}),
            Value::Null,
        );
        out += &chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}),
            Value::Null,
        );
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    out += &chunk(json!({}), json!(finish));
    out + "data: [DONE]\n\n"
}

/// A scripted upstream on a loopback port, served until the returned flag is set.
pub(super) fn upstream() -> (SocketAddr, Arc<AtomicBool>) {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let s = stop.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new()
                .route(
                    "/v1/chat/completions",
                    post(|body: axum::body::Bytes| async move {
                        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
                        if req["stream"] == true {
                            ([("content-type", "text/event-stream")], stream(&req))
                        } else {
                            (
                                [("content-type", "application/json")],
                                completion(&req).to_string(),
                            )
                        }
                    }),
                )
                .route(
                    "/v1/models",
                    get(|| async {
                        json!({"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                            .to_string()
                    }),
                )
                .route(
                    "/hang/v1/chat/completions",
                    post(|| async {
                        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
                        "late"
                    }),
                );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            axum::serve(l, app)
                .with_graceful_shutdown(async move {
                    while !s.load(Ordering::Acquire) {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                })
                .await
                .unwrap();
        });
    });
    (rx.recv().unwrap(), stop)
}
