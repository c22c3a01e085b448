//! What an execution grant costs: the monitor issuing one for an allowed action (a
//! fresh nonce, the canonical body, an Ed25519 signature) and a tool host admitting it
//! (signature, run, action, expiry, single use), and of that the signature check alone
//! (the key read from its bytes, strict Ed25519). Every allowed call through a tool host
//! (the broker, the MCP host of `knox gateway mcp`, a contract execution) pays both.
//!
//! `cargo bench -p knox-attest --bench grant`

#![allow(clippy::unwrap_used, reason = "a benchmark harness")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use knox_attest::grant::{self, Spent};
use knox_attest::key::{TeeKey, verify_signature};
use knox_types::Action;
use knox_types::canon;
use knox_types::digest::Digest;
use knox_types::grant::GRANT_CONTEXT;
use serde_json::json;

fn grants(c: &mut Criterion) {
    let key = TeeKey::generate().unwrap();
    let public = key.public_key();
    let apm = Digest::sha256(b"apm");
    let action = Action::new(
        "up.echo",
        json!({"text": "a planned call's argument, as long as a short sentence"}),
    )
    .unwrap();
    let mut g = c.benchmark_group("grant");
    g.bench_function("issue", |b| {
        b.iter(|| grant::issue(&key, apm, black_box(&action), "agent-0", 7).unwrap());
    });
    let spent = Spent::new();
    g.bench_function("admit", |b| {
        b.iter_batched(
            || grant::issue(&key, apm, &action, "agent-0", 7).unwrap(),
            |granted| {
                spent
                    .admit(&granted, &public, &apm, &action, grant::now_ms())
                    .unwrap();
            },
            criterion::BatchSize::SmallInput,
        );
    });
    let granted = grant::issue(&key, apm, &action, "agent-0", 7).unwrap();
    let body = canon::to_canonical(&granted.body).unwrap();
    g.bench_function("verify_signature", |b| {
        b.iter(|| {
            verify_signature(&public, GRANT_CONTEXT, black_box(&body), &granted.sig).unwrap()
        });
    });
    g.finish();
}

criterion_group!(benches, grants);
criterion_main!(benches);
