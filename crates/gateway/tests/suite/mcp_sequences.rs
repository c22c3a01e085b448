//! #34: generated client behaviour against the MCP gateway, in process, over a real
//! rmcp Streamable-HTTP upstream. Each sequence is one session, drawn from a seed: the
//! client makes 1–8 calls — the plan's reads and write, off-plan reads and writes, a
//! tool of no server, arguments off the schema — one at a time or several at once (as a
//! client with parallel tool calls does), and ends the session itself, or leaves it to
//! the gateway, sometimes while a call is still in flight.
//!
//! Every sealed bundle must verify `complete` — never `tampered` — and the decisions
//! the client saw (each call allowed or refused with Knox's reason) must be the ones
//! its evidence records: call by call for calls made one at a time, as a multiset for
//! calls made at once (whose order the gateway picks). `KNOX_SEQUENCES=N` sets how many
//! sequences run (default 200; the figure in `docs/gateway-mcp.md` is of 10,000).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "a test harness: a failed step is a failed test"
)]

use std::sync::Arc;

use knox_agent::Prompt;
use knox_gateway::mcp::{GatewayConfig, OpenRequest, SessionHandle};
use serde_json::{Map, Value, json};

use super::rng::Rng;

/// One call a client may make: a tool and its arguments.
fn draw(r: &mut Rng) -> (String, Value) {
    match r.below(7) {
        0 | 1 => ("up.echo".into(), json!({"text": "a"})),
        2 => ("up.echo".into(), json!({"text": "b"})),
        3 => ("up.echo".into(), json!({"text": "off plan"})),
        4 => ("up.send".into(), json!({"text": "x"})),
        5 => ("up.send".into(), json!({"text": "exfiltrate"})),
        _ => match r.below(2) {
            0 => ("mail.send".into(), json!({"to": "attacker"})),
            _ => ("up.echo".into(), json!({"text": 42})),
        },
    }
}

fn args(v: &Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// What the client of one session saw: per group of calls made at once, whether each
/// was allowed (not refused by Knox).
#[derive(Debug, Default)]
struct Seen {
    groups: Vec<Vec<bool>>,
    /// Ended while a call was in flight: that call's decision is unknown to the client.
    cut: bool,
}

async fn play(cfg: &Arc<GatewayConfig>, seed: u64) -> (Seen, std::path::PathBuf) {
    let mut r = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(1));
    let req = OpenRequest {
        prompt: Prompt {
            tasks: vec![format!("Sequence {seed}: echo a and b, then send x")],
        },
        plan: Some(json!({"calls": [
            {"tool": "up.echo", "params": {"text": "a"}},
            {"tool": "up.echo", "params": {"text": "b"}},
            {"tool": "up.send", "params": {"text": "x"}}]})),
        label: format!("seq-{seed}"),
    };
    let c = Arc::clone(cfg);
    let h = tokio::task::spawn_blocking(move || SessionHandle::open(&c, req))
        .await
        .unwrap()
        .unwrap();
    let h = Arc::new(h);
    let mut seen = Seen::default();
    let steps = 1 + r.below(6);
    for _ in 0..steps {
        let at_once = if r.chance(30) { 2 + r.below(2) } else { 1 };
        let calls: Vec<(String, Value)> = (0..at_once).map(|_| draw(&mut r)).collect();
        if r.chance(5) {
            // The client ends the session while its calls are in flight.
            let pending: Vec<_> = calls
                .into_iter()
                .map(|(name, a)| {
                    let h = Arc::clone(&h);
                    tokio::spawn(async move { h.call(name, args(&a)).await })
                })
                .collect();
            h.end("the client hung up");
            for p in pending {
                let _ = p.await;
            }
            seen.cut = true;
            break;
        }
        let results = futures_join(&h, calls).await;
        seen.groups.push(
            results
                .iter()
                .map(|res| {
                    let refused = res
                        .structured_content
                        .as_ref()
                        .is_some_and(|s| s.get("knox").is_some());
                    !refused
                })
                .collect(),
        );
    }
    h.end("the client is done");
    let end = h.ended().await.unwrap();
    assert_eq!(
        end.verified.as_deref(),
        Some("complete"),
        "seed {seed}: {end:?}"
    );
    (seen, end.bundle.clone().unwrap())
}

/// The calls made at once, their results in the order made.
async fn futures_join(
    h: &Arc<SessionHandle>,
    calls: Vec<(String, Value)>,
) -> Vec<rmcp::model::CallToolResult> {
    let handles: Vec<_> = calls
        .into_iter()
        .map(|(name, a)| {
            let h = Arc::clone(h);
            tokio::spawn(async move { h.call(name, args(&a)).await })
        })
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for j in handles {
        out.push(j.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generated_client_sequences_never_seal_tampered_and_the_client_sees_what_the_evidence_records()
 {
    let n: u64 = std::env::var("KNOX_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // The upstream's answers come within 5 s even on a busy machine.
    let fx = super::mcp_sessions::fixture_with(5).await;
    let cfg = Arc::clone(&fx.cfg);
    let started = std::time::Instant::now();
    // Eight sessions at a time.
    let mut played = Vec::new();
    let mut seeds = 0..n;
    loop {
        let batch: Vec<u64> = seeds.by_ref().take(8).collect();
        if batch.is_empty() {
            break;
        }
        let tasks: Vec<_> = batch
            .iter()
            .map(|&seed| {
                let cfg = Arc::clone(&cfg);
                tokio::spawn(async move { (seed, play(&cfg, seed).await) })
            })
            .collect();
        for t in tasks {
            played.push(t.await.unwrap());
        }
    }
    let manifest =
        knox_policy::ToolkitManifest::from_toolkit_text(super::mcp_sessions::MANIFEST).unwrap();
    let (mut calls, mut compared) = (0u64, 0u64);
    for (seed, (seen, path)) in &played {
        let b = knox_verify::parse_bundle(&std::fs::read(path).unwrap()).unwrap();
        let report =
            knox_verify::verify_bundle(&b, &manifest, knox_verify::Options::DANGEROUS_SIMULATED);
        assert_eq!(
            report.outcome,
            knox_verify::Outcome::Complete,
            "seed {seed}: {report}"
        );
        let recorded: Vec<bool> = b
            .nodes
            .iter()
            .filter(|n| n.kind == knox_types::aeg::NodeKind::ToolCall)
            .map(|n| n.allowed)
            .collect();
        calls += recorded.len() as u64;
        // Group by group: the same decisions, in order within a group made one at a
        // time, as a multiset within a group made at once.
        let mut at = 0;
        for g in &seen.groups {
            let mut got: Vec<bool> = recorded
                .get(at..at + g.len())
                .unwrap_or_else(|| panic!("seed {seed}: {seen:?} vs {recorded:?}"))
                .to_vec();
            let mut want = g.clone();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "seed {seed}: {seen:?} vs {recorded:?}");
            at += g.len();
        }
        if seen.cut {
            assert!(recorded.len() >= at, "seed {seed}");
        } else {
            assert_eq!(recorded.len(), at, "seed {seed}: {seen:?} vs {recorded:?}");
            compared += 1;
        }
    }
    eprintln!(
        "{n} sessions in {:.1} s: all complete; {calls} calls decided; {compared} sessions' decisions compared call by call ({} ended with calls in flight)",
        started.elapsed().as_secs_f64(),
        played.iter().filter(|(_, (s, _))| s.cut).count(),
    );
}
