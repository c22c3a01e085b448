//! Criterion benchmarks of the evidence path: mediation per action, node measurement,
//! summary signing, verification throughput.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "benchmarks")]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use knox::session::{self, ExecutorKind, Suite, SuiteRun};
use knox_agent::{Plan, Prompt, Regulations};
use knox_harness::Harness;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::Bundle;
use serde_json::json;

const CALLS: usize = 64;

fn plan() -> Vec<ExpectedCall> {
    (0..CALLS)
        .map(|i| {
            ExpectedCall::exact(
                0,
                "GmailReadEmail",
                json!({"email_id": format!("email{i:03}")})
                    .as_object()
                    .cloned()
                    .unwrap(),
            )
        })
        .collect()
}

fn proposals() -> Vec<Vec<u8>> {
    (0..CALLS)
        .map(|i| {
            serde_json::to_vec(
                &json!({"tool": "GmailReadEmail", "params": {"email_id": format!("email{i:03}")}}),
            )
            .unwrap()
        })
        .collect()
}

fn mediation(c: &mut Criterion, rt: &Harness) {
    let manifest = &rt.manifest;
    let prompt = Prompt {
        tasks: vec!["read my emails".into()],
    };
    let topo = Topology {
        kind: TopologyKind::StSa,
        tasks: 1,
        agents: 1,
    };
    let apm = apm::from_plan(
        &prompt,
        manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        Plan {
            tasks: vec![plan()],
        },
        topo,
    )
    .unwrap();
    let apm_hash = apm.hash().unwrap();
    let props = proposals();
    let injected = serde_json::to_vec(&json!({"tool": "BankManagerTransferFunds", "params": {"from_account_number": "1", "to_account_number": "2", "amount": 3000}})).unwrap();
    let output =
        json!({"email": {"from": "a@example.com", "subject": "hi", "body": "hello there"}});
    let start_with = |grants: bool| {
        Monitor::start(
            MonitorConfig {
                grants,
                ..MonitorConfig::new(&apm, apm_hash, "bench", manifest, rt.monitor_key(), &[])
            },
            knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap(),
            None,
        )
    };
    let start = || start_with(false);
    let mut g = c.benchmark_group("mediate");
    g.throughput(Throughput::Elements(CALLS as u64));
    g.bench_function("allowed_action_with_output", |b| {
        b.iter_batched(
            start,
            |m| {
                for p in &props {
                    if let Verdict::Allow(t) = m.mediate("agent-0", p) {
                        m.record_output(t, output.clone());
                    }
                }
                m
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("allowed_action_with_output_and_signed_grant", |b| {
        b.iter_batched(
            || start_with(true),
            |m| {
                for p in &props {
                    if let Verdict::Allow(t) = m.mediate("agent-0", p) {
                        m.record_output(t, output.clone());
                    }
                }
                m
            },
            BatchSize::SmallInput,
        );
    });
    g.bench_function("blocked_off_trajectory_action", |b| {
        b.iter_batched(
            start,
            |m| {
                for _ in 0..CALLS {
                    black_box(m.mediate("agent-0", &injected));
                }
                m
            },
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

fn bundle(rt: &Harness, spec: &str, flows: usize) -> Bundle {
    let run = SuiteRun::new(Suite::Injecagent, &rt.data, spec.parse().unwrap(), flows);
    let session = session::build(
        run.session(ExecutorKind::Injected)
            .unwrap()
            .platform(knox_attest::simulated::Simulated),
    )
    .unwrap();
    let mut out = None;
    session::run_suite(&session, &run, |o| {
        out.get_or_insert_with(|| o.bundle.clone());
        Ok(())
    })
    .unwrap();
    out.unwrap()
}

fn evidence(c: &mut Criterion, rt: &Harness) {
    let b = bundle(rt, "mt-sa-seq:6", 6);
    let node = b
        .nodes
        .iter()
        .find(|n| n.kind == knox_types::aeg::NodeKind::ToolCall)
        .unwrap()
        .clone();
    c.bench_function("measure_tool_call_node", |bn| {
        bn.iter(|| black_box(&node).compute_measurement())
    });
    let statement = b.summary.to_statement().unwrap();
    // A key of the run's kind: the run's own signs nothing outside its monitor.
    let key = knox_attest::TeeKey::generate().unwrap();
    c.bench_function("sign_summary_dsse", |bn| {
        bn.iter(|| knox_attest::dsse::sign(&key, black_box(&statement)))
    });
    let manifest = session::embedded_manifest().unwrap();
    let opts = knox_verify::Options::DANGEROUS_SIMULATED;
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Elements(b.nodes.len() as u64));
    g.bench_function("bundle_mt_sa_seq_6", |bn| {
        bn.iter(|| knox_verify::verify_bundle(black_box(&b), &manifest, opts))
    });
    g.bench_function("chain_and_measurements_only", |bn| {
        bn.iter(|| knox_verify::replay::chain(black_box(&b.nodes)).map(|x| x.0))
    });
    g.finish();
    let bytes = serde_json::to_vec(&b).unwrap();
    let report = knox_verify::verify_bundle(&b, &manifest, opts);
    let regulator = knox_attest::PartyKey::generate().unwrap();
    c.bench_function("issue_receipt", |bn| {
        bn.iter(|| knox_verify::receipt::issue(&regulator, black_box(&bytes), &report, None, 0))
    });
}

fn all(c: &mut Criterion) {
    let rt = session::embedded_runtime(b"bench").expect("runtime");
    mediation(c, &rt);
    evidence(c, &rt);
}

criterion_group!(benches, all);
criterion_main!(benches);
