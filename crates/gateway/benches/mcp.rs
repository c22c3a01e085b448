//! The MCP gateway's cost, on loopback, bounded:
//!
//! - `call/direct` vs `call/gateway`: one allowed `tools/call` from an rmcp client
//!   straight to an upstream Streamable-HTTP server, and the same call through a
//!   gateway session in front of that server, in the same run. The difference is what
//!   the gateway adds (the extra hop, mediation, the grant, recording, the journal
//!   line). Every gateway call is a planned one: a session is opened (by the user,
//!   over HTTP) per batch of [`BATCH`] calls whose plan holds each of them once, and
//!   only the calls are timed — opening and sealing are measured on their own below.
//!   A session's first call also connects the session to its upstream (an MCP
//!   handshake): it is made before the batch and timed apart. p50/p99 of both paths
//!   are printed from [`SAMPLES`] interleaved calls each.
//! - `session/open_seal_http`: one session opened by the user (`POST /knox/sessions`:
//!   plan checked, key bound, APM attested, journal opened) and closed (`DELETE`:
//!   bundle sealed and self-verified); sessions per second = 1 / its time.
//! - 64 concurrent sessions × 16 calls over HTTP, each with its own rmcp client and
//!   markers: every bundle is verified and checked for lost, mixed-up or foreign
//!   nodes (the same check as `tests/suite/mcp_concurrency.rs`); the bench fails on any.
//!
//! `cargo bench -p knox-gateway --bench mcp -- --warm-up-time 1 --measurement-time 3`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unreachable,
    reason = "a test harness: a failed step is a failed test"
)]

#[path = "../tests/suite/mcp_support/mod.rs"]
mod mcp_support;

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_support::{Fx, Opened, Report, client, close, echo, marker, open};
use rmcp::service::{RoleClient, RunningService};
use serde_json::json;

/// Calls per gateway session (each planned once in the session's plan).
const BATCH: usize = 64;
/// Interleaved calls per path for the percentile table (32 sessions of [`BATCH`]).
const SAMPLES: usize = 2048;
/// Concurrent sessions, and calls each.
const SESSIONS: usize = 64;
const CALLS: usize = 16;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A gateway session planned for `1 + BATCH` calls, with its client.
struct Batch {
    opened: Opened,
    client: RunningService<RoleClient, ()>,
    texts: Vec<String>,
}

async fn end(fx: &Fx, b: Batch) {
    let end = close(&fx.user, &b.opened.id).await;
    assert_eq!(end["verified"], "complete", "{end}");
    assert_eq!(end["blocked"], 0, "{end}");
    let _ = b.client.cancel().await;
}

async fn gated(b: &Batch, i: usize) -> Duration {
    let t = Instant::now();
    let r = b
        .client
        .peer()
        .call_tool(echo("up.echo", &b.texts[i]))
        .await
        .unwrap();
    let took = t.elapsed();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    took
}

/// Gateway sessions, each opened by the user over HTTP with a plan of `1 + BATCH`
/// calls: the first call of a session (which also connects the session to the
/// upstream) is timed apart, the next `BATCH` are the per-call samples.
#[derive(Default)]
struct Sessions {
    current: Option<Batch>,
    next: usize,
    opened: usize,
    first_calls: Vec<Duration>,
}

impl Sessions {
    /// One planned call through the gateway; a new session when the current one's
    /// plan is used up.
    async fn call(&mut self, fx: &Fx) -> Duration {
        if self.next > BATCH || self.current.is_none() {
            if let Some(b) = self.current.take() {
                end(fx, b).await;
            }
            let texts: Vec<String> = (0..=BATCH).map(|c| marker(self.opened % 100, c)).collect();
            let opened = open(&fx.user, &texts).await;
            let b = Batch {
                client: client(&opened.mcp_url).await,
                opened,
                texts,
            };
            self.first_calls.push(gated(&b, 0).await);
            self.current = Some(b);
            self.opened += 1;
            self.next = 1;
        }
        let b = self.current.as_ref().unwrap();
        let took = gated(b, self.next).await;
        self.next += 1;
        took
    }

    async fn close(&mut self, fx: &Fx) {
        if let Some(b) = self.current.take() {
            end(fx, b).await;
        }
    }
}

async fn direct(c: &RunningService<RoleClient, ()>, text: &str) -> Duration {
    let t = Instant::now();
    let r = c.peer().call_tool(echo("echo", text)).await.unwrap();
    let took = t.elapsed();
    assert_ne!(r.is_error, Some(true), "{r:?}");
    took
}

fn percentile(v: &mut [Duration], p: usize) -> Duration {
    v.sort_unstable();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

fn us(d: Duration) -> u128 {
    d.as_micros()
}

fn calls(c: &mut Criterion) {
    let rt = runtime();
    let fx = rt.block_on(mcp_support::start(BATCH + 1));
    let up = rt.block_on(client(&fx.upstream));
    let text = marker(0, 0);
    let mut g = c.benchmark_group("call");
    g.bench_function("direct", |x| {
        x.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += direct(&up, &text).await;
                }
                total
            })
        })
    });
    let mut pool = Sessions::default();
    g.bench_function("gateway", |x| {
        x.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += pool.call(&fx).await;
                }
                total
            })
        })
    });
    rt.block_on(pool.close(&fx));
    g.finish();
    // p50/p99 from the same run, interleaved so both paths see the same machine state.
    let (mut d, mut w, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    let mut pool = Sessions::default();
    rt.block_on(async {
        for i in 0..SAMPLES {
            let x = direct(&up, &marker(0, i % BATCH)).await;
            let y = pool.call(&fx).await;
            d.push(x);
            w.push(y);
            diff.push(y.saturating_sub(x));
        }
        pool.close(&fx).await;
    });
    let mut first = std::mem::take(&mut pool.first_calls);
    let (f50, f99) = (percentile(&mut first, 50), percentile(&mut first, 99));
    let (d50, d99) = (percentile(&mut d, 50), percentile(&mut d, 99));
    let (w50, w99) = (percentile(&mut w, 50), percentile(&mut w, 99));
    let (a50, a99) = (percentile(&mut diff, 50), percentile(&mut diff, 99));
    println!(
        "\nmcp gateway, {SAMPLES} interleaved tools/call per path ({} sessions of {BATCH} planned calls; µs)",
        SAMPLES / BATCH
    );
    println!("| path | p50 | p99 |");
    println!("|---|---|---|");
    println!("| direct to the upstream | {} | {} |", us(d50), us(d99));
    println!("| through the gateway | {} | {} |", us(w50), us(w99));
    println!(
        "| added (difference of the percentiles) | {} | {} |",
        us(w50.saturating_sub(d50)),
        us(w99.saturating_sub(d99))
    );
    println!(
        "| added (percentile of the paired differences) | {} | {} |",
        us(a50),
        us(a99)
    );
    println!(
        "| a session's first call, which also connects it to the upstream ({} sessions; not in the rows above) | {} | {} |\n",
        first.len(),
        us(f50),
        us(f99)
    );
    fx.stop.cancel();
}

fn sessions(c: &mut Criterion) {
    let rt = runtime();
    let fx = rt.block_on(mcp_support::start(BATCH));
    let mut g = c.benchmark_group("session");
    g.sample_size(20);
    let one = vec![marker(0, 0)];
    g.bench_function("open_seal_http", |x| {
        x.iter(|| {
            rt.block_on(async {
                let o = open(&fx.user, &one).await;
                let end = close(&fx.user, &o.id).await;
                assert_eq!(end["verified"], "complete", "{end}");
            })
        })
    });
    g.finish();
    fx.stop.cancel();
}

/// 64 sessions at once, 16 calls each: no lost, mixed-up or foreign node.
fn concurrent(_: &mut Criterion) {
    let rt = runtime();
    let fx = rt.block_on(mcp_support::start(CALLS));
    let run = rt.block_on(mcp_support::concurrent(&fx, SESSIONS, CALLS));
    let total = SESSIONS * CALLS;
    println!(
        "{SESSIONS} concurrent sessions × {CALLS} calls over HTTP: opened and all {total} calls answered in {:.0} ms ({:.0} calls/s), all sealed and closed in {:.0} ms ({:.1} sessions/s); {}",
        run.calls_elapsed.as_secs_f64() * 1e3,
        total as f64 / run.calls_elapsed.as_secs_f64(),
        run.total_elapsed.as_secs_f64() * 1e3,
        SESSIONS as f64 / run.total_elapsed.as_secs_f64(),
        json!({
            "incomplete": run.report.incomplete,
            "lost": run.report.lost,
            "mixed": run.report.mixed,
            "foreign": run.report.foreign,
            "wrong_answers": run.report.wrong_answers,
        })
    );
    assert_eq!(run.report, Report::default());
    fx.stop.cancel();
}

criterion_group!(benches, calls, sessions, concurrent);
criterion_main!(benches);
