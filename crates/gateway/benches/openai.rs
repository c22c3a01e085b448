//! The OpenAI proxy's cost, on loopback against the scripted upstream of the tests:
//! latency per response with a tool call, direct vs through the proxy — chat
//! completions, and the same request on the Responses API (which the proxy serves over
//! the upstream's chat completions) — same upstream, same run, interleaved; and
//! conversations opened and sealed per second.
//!
//! `cargo bench -p knox-gateway --bench openai`: Criterion's estimates, and a p50/p99
//! table from `SAMPLES` interleaved requests printed first (docs/gateway-openai.md).

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "bench")]

#[path = "../tests/suite/openai_support/mod.rs"]
mod openai_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use knox_gateway::openai::{Proxy, ProxyConfig};
use serde_json::json;

/// Interleaved requests per path for the percentile table.
const SAMPLES: usize = 2000;
/// Requests per conversation before the bench moves to a new one (its first request,
/// which opens the run, is not timed in the latency table).
const PER_CONVERSATION: usize = 50;

fn body() -> Vec<u8> {
    json!({"model": "scripted", "messages": [
        {"role": "system", "content": "You are a careful banking assistant."},
        {"role": "user", "content": "Check my balance, then pay DE001 20."}]})
    .to_string()
    .into_bytes()
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

/// The same request on the Responses API: the same messages, so the same conversation.
fn responses_body() -> Vec<u8> {
    json!({"model": "scripted", "instructions": "You are a careful banking assistant.",
        "input": "Check my balance, then pay DE001 20."})
    .to_string()
    .into_bytes()
}

fn send(agent: &ureq::Agent, addr: SocketAddr, conv: &str, body: &[u8]) {
    post(agent, addr, "/v1/chat/completions", conv, body);
}

fn post(agent: &ureq::Agent, addr: SocketAddr, path: &str, conv: &str, body: &[u8]) {
    let mut r = agent
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/json")
        .header("x-knox-conversation", conv)
        .send(body)
        .unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    assert!(
        text.contains("tool_calls")
            || text.contains("function_call")
            || text.contains("[knox] blocked"),
        "{text}"
    );
}

fn start(upstream: SocketAddr, out: &std::path::Path) -> (Arc<Proxy>, SocketAddr, Arc<AtomicBool>) {
    let config = ProxyConfig {
        upstream: format!("http://{upstream}/v1"),
        out: Some(out.to_owned()),
        ..ProxyConfig::default()
    };
    let m = openai_support::manifest();
    let planner = knox_agent::Following::new(
        Box::new(knox_gateway::openai::plan::PlanFile::new(openai_support::plan(), &m, 8).unwrap()),
        knox_types::apm::TrajectoryMode::tolerant(),
    );
    let session = knox_engine::Session::builder()
        .platform(knox_engine::Simulated)
        .manifest(m)
        .planner(planner)
        .output(out)
        .build()
        .unwrap();
    let proxy = Proxy::new(Arc::new(session), &config);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    let (p, s) = (proxy.clone(), stop.clone());
    std::thread::spawn(move || {
        p.run_until(
            "127.0.0.1:0".parse().unwrap(),
            move || s.load(Ordering::Acquire),
            |a| {
                tx.send(a).unwrap();
            },
        )
        .unwrap()
    });
    (proxy, rx.recv().unwrap(), stop)
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort_unstable();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn table(up: SocketAddr, proxy: SocketAddr, a: &ureq::Agent) {
    let (b, rb) = (body(), responses_body());
    let (mut direct, mut through) = (Vec::with_capacity(SAMPLES), Vec::with_capacity(SAMPLES));
    let (mut added, mut responses, mut responses_added) = (
        Vec::with_capacity(SAMPLES),
        Vec::with_capacity(SAMPLES),
        Vec::with_capacity(SAMPLES),
    );
    for i in 0..SAMPLES {
        let conv = format!("table-{}", i / PER_CONVERSATION);
        if i % PER_CONVERSATION == 0 {
            send(a, proxy, &conv, &b); // opens the run: not timed here
        }
        let t = Instant::now();
        send(a, up, &conv, &b);
        direct.push(t.elapsed());
        let t = Instant::now();
        send(a, proxy, &conv, &b);
        through.push(t.elapsed());
        let t = Instant::now();
        post(a, proxy, "/v1/responses", &conv, &rb);
        responses.push(t.elapsed());
        added.push(through[i].saturating_sub(direct[i]));
        responses_added.push(responses[i].saturating_sub(direct[i]));
    }
    let (d50, d99) = (percentile(&mut direct, 0.5), percentile(&mut direct, 0.99));
    let (p50, p99) = (
        percentile(&mut through, 0.5),
        percentile(&mut through, 0.99),
    );
    println!("\nopenai proxy, {SAMPLES} interleaved responses with one tool call each (µs)");
    println!("| path | p50 | p99 |");
    println!("|---|---|---|");
    println!(
        "| direct to the upstream | {} | {} |",
        d50.as_micros(),
        d99.as_micros()
    );
    println!(
        "| through the proxy | {} | {} |",
        p50.as_micros(),
        p99.as_micros()
    );
    println!(
        "| added (difference of the percentiles) | {} | {} |",
        p50.as_micros() as i128 - d50.as_micros() as i128,
        p99.as_micros() as i128 - d99.as_micros() as i128
    );
    println!(
        "| added (percentile of the paired differences) | {} | {} |",
        percentile(&mut added, 0.5).as_micros(),
        percentile(&mut added, 0.99).as_micros()
    );
    println!(
        "| Responses API through the proxy | {} | {} |",
        percentile(&mut responses, 0.5).as_micros(),
        percentile(&mut responses, 0.99).as_micros()
    );
    println!(
        "| Responses API added (paired, vs direct chat completions) | {} | {} |\n",
        percentile(&mut responses_added, 0.5).as_micros(),
        percentile(&mut responses_added, 0.99).as_micros()
    );
}

fn bench(c: &mut Criterion) {
    let (up, up_stop) = openai_support::upstream();
    let dir = tempfile::tempdir().unwrap();
    let (proxy, addr, stop) = start(up, dir.path());
    let a = agent();
    table(up, addr, &a);
    let b = body();
    let mut g = c.benchmark_group("openai");
    g.bench_function("response_with_tool_call/direct", |x| {
        x.iter(|| send(&a, up, "x", &b))
    });
    let mut n = 0usize;
    g.bench_function("response_with_tool_call/proxy", |x| {
        x.iter(|| {
            n += 1;
            send(&a, addr, &format!("crit-{}", n / PER_CONVERSATION), &b);
        });
    });
    let mut k = 0usize;
    g.bench_function("conversation_opened_and_sealed", |x| {
        x.iter(|| {
            k += 1;
            send(&a, addr, &format!("open-{k}"), &b);
            proxy.seal_all();
        });
    });
    g.finish();
    stop.store(true, Ordering::Release);
    up_stop.store(true, Ordering::Release);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
