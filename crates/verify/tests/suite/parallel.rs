//! Format v4 (#34): an agent's allowed calls may await their outputs together (the tool
//! calls of one model answer), their outputs may come in any order, and an allowed call
//! whose output never came back is closed by an `unanswered` node when the run is
//! sealed — an honest run is `complete`. What only the monitor may write stays checked:
//! an `unanswered` node dropped, added to a call that has its output, made to release a
//! reservation, or found in a bundle of an earlier format, is tampered — even when an
//! insider holding the key re-seals the bundle.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::sync::Arc;

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::TeeKey;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_policy::ToolkitManifest;
use knox_types::aeg::{Node, NodeKind, chain_start, chain_step};
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::Bundle;
use knox_types::payload::{Body, UnansweredPayload};
use knox_verify::{Options, Outcome, Report};
use serde_json::json;

fn manifest() -> ToolkitManifest {
    knox_policy::shipped::current().unwrap()
}

/// A run planning three reads; the agent proposes all three before any output (one
/// model answer), then the outputs of `answered` (by index) come back, in that order.
fn run(rt: &Runtime, answered: &[usize]) -> Bundle {
    run_after(rt, &[], answered)
}

/// [`run`], the agent first proposing each of `blocked` (each must be blocked).
fn run_after(rt: &Runtime, blocked: &[serde_json::Value], answered: &[usize]) -> Bundle {
    let ids = ["a", "b", "c"];
    let prompt = Prompt {
        tasks: vec!["read emails a, b and c".into()],
    };
    let plan = Plan {
        tasks: vec![
            ids.iter()
                .map(|id| {
                    ExpectedCall::exact(
                        0,
                        "GmailReadEmail",
                        json!({"email_id": id}).as_object().cloned().unwrap(),
                    )
                })
                .collect(),
        ],
    };
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        plan,
        Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
    )
    .unwrap();
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let regulator = knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap();
    let m = Monitor::start(
        MonitorConfig::new(
            &apm,
            apm_hash,
            "parallel",
            &rt.manifest,
            rt.monitor_key(),
            &[],
        ),
        regulator,
        None,
    );
    let agent = apm.agents[0].id.clone();
    for call in blocked {
        let raw = serde_json::to_vec(call).unwrap();
        if let Verdict::Allow(_) = m.mediate(&agent, &raw) {
            panic!("{call} allowed");
        }
    }
    let mut tickets: Vec<Option<_>> = ids
        .iter()
        .map(|id| {
            let raw =
                serde_json::to_vec(&json!({"tool": "GmailReadEmail", "params": {"email_id": id}}))
                    .unwrap();
            match m.mediate(&agent, &raw) {
                Verdict::Allow(t) => Some(t),
                other => panic!("planned read {id} not allowed: {other:?}"),
            }
        })
        .collect();
    for &i in answered {
        let t = tickets[i].take().unwrap();
        m.record_output(t, json!({"email": {"id": ids[i], "body": "hi"}}));
    }
    drop(tickets);
    let aeg = m.finish();
    knox_monitor::run::seal(rt, "parallel", Some(&prompt), apm.clone(), att, vec![], aeg).unwrap()
}

fn verify(b: &Bundle) -> Report {
    let bytes = serde_json::to_vec(b).unwrap();
    let b = knox_verify::parse_bundle(&bytes).unwrap();
    knox_verify::verify_bundle(&b, &manifest(), Options::DANGEROUS_SIMULATED)
}

fn kinds(b: &Bundle) -> Vec<NodeKind> {
    b.nodes.iter().map(|n| n.kind).collect()
}

/// What an insider holding the key does after an edit: renumber, re-measure, re-chain
/// and re-sign, so only the replay of the monitor's rules can catch it.
fn reseal(b: &mut Bundle, key: &TeeKey) {
    let mut c = chain_start();
    let mut leaves = Vec::new();
    let mut counts = knox_types::bundle::Counts::default();
    for (i, n) in b.nodes.iter_mut().enumerate() {
        n.seq = i as u64;
        n.measurement = n.compute_measurement();
        c = chain_step(&c, n.seq, &n.measurement);
        leaves.push(n.leaf_hash());
        counts.nodes += 1;
        match n.kind {
            NodeKind::ToolCall => counts.tool_calls += 1,
            NodeKind::ToolOutput => counts.executed += 1,
            NodeKind::Blocked => counts.blocked += 1,
            NodeKind::Interrupt => counts.interrupts += 1,
            _ => {}
        }
    }
    b.summary.chain_head = c;
    b.summary.structure_root = knox_types::merkle::root(&leaves);
    b.summary.counts = counts;
    b.summary.format = b.format.clone();
    b.envelope = knox_attest::dsse::sign(key, &b.summary.to_statement().unwrap()).unwrap();
}

fn tampered(r: &Report, what: &str) {
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert!(r.to_string().contains(what), "`{what}` not in:\n{r}");
}

#[test]
fn calls_awaiting_together_and_in_any_order_seal_complete() {
    let rt = Runtime::start(&knox_attest::simulated::Simulated, b"parallel", manifest()).unwrap();
    for answered in [&[0, 1, 2][..], &[2, 0, 1], &[1], &[]] {
        let b = run(&rt, answered);
        let r = verify(&b);
        assert_eq!(r.outcome, Outcome::Complete, "{answered:?}: {r}");
        let k = kinds(&b);
        let n = |kind| k.iter().filter(|x| **x == kind).count();
        assert_eq!(n(NodeKind::ToolCall), 3);
        assert_eq!(n(NodeKind::ToolOutput), answered.len(), "{answered:?}");
        assert_eq!(n(NodeKind::Unanswered), 3 - answered.len(), "{answered:?}");
        assert_eq!(r.executed, answered.len() as u64);
        // All three calls hang under the same step: they were proposed together.
        let parents: Vec<Option<u64>> = b
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::ToolCall)
            .map(|n| n.parent)
            .collect();
        assert!(parents.iter().all(|p| *p == parents[0]), "{parents:?}");
    }
}

#[test]
fn an_unanswered_node_only_the_monitor_may_write_is_checked() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"parallel", manifest()).unwrap();
    let b = run(&rt, &[1]);
    assert_eq!(verify(&b).outcome, Outcome::Complete);
    let unanswered: Vec<usize> = (0..b.nodes.len())
        .filter(|i| b.nodes[*i].kind == NodeKind::Unanswered)
        .collect();
    assert_eq!(unanswered.len(), 2);

    // Dropped: an allowed call left without its output in a sealed run.
    let mut t = b.clone();
    t.nodes.remove(unanswered[1]);
    reseal(&mut t, &key);
    tampered(&verify(&t), "allowed call without its output");

    // Added under the call that has its output.
    let answered = b
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::ToolOutput)
        .and_then(|n| n.parent)
        .unwrap();
    let mut t = b.clone();
    let mut extra: Node = t.nodes[unanswered[0]].clone();
    extra.parent = Some(answered);
    t.nodes.push(extra);
    reseal(&mut t, &key);
    tampered(
        &verify(&t),
        "not attached to an allowed call awaiting its output",
    );

    // Its cost edited.
    let mut t = b.clone();
    t.nodes[unanswered[0]].payload = Body::from(UnansweredPayload {
        cost: 99,
        settled: None,
    });
    reseal(&mut t, &key);
    tampered(&verify(&t), "differs from the tool's cost");

    // The same bundle relabelled as format v3 (whose rules have neither calls awaiting
    // together nor unanswered nodes), re-signed: tampered.
    let mut t = b.clone();
    t.format = knox_types::bundle::BUNDLE_FORMAT_V3.into();
    reseal(&mut t, &key);
    tampered(&verify(&t), "has no tool_output");
}

/// Format v5 words block reasons plainly; a v4 bundle's reasons, worded as v4's monitor
/// wrote them, still verify under v4's rules — and neither wording passes for the other.
#[test]
fn block_reasons_are_worded_as_the_format_says() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"parallel", manifest()).unwrap();
    let off_plan = json!({"tool": "GmailReadEmail", "params": {"email_id": "attacker"}});
    let b = run_after(&rt, &[off_plan], &[0, 1, 2]);
    assert_eq!(verify(&b).outcome, Outcome::Complete);
    let reasons: Vec<&str> = b
        .nodes
        .iter()
        .filter_map(|n| n.block_reason.as_deref())
        .collect();
    let plain = "proposal 1 is off the plan (checked against plan step 1): ";
    assert!(
        !reasons.is_empty() && reasons.iter().all(|r| r.starts_with(plain)),
        "{reasons:?}"
    );

    // Relabelled v4 and re-signed: v4's monitor would have worded it otherwise.
    let mut t = b.clone();
    t.format = knox_types::bundle::BUNDLE_FORMAT_V4.into();
    reseal(&mut t, &key);
    tampered(&verify(&t), "block reason differs");

    // Worded as v4's monitor wrote it, under v4: complete.
    let mut v4 = t.clone();
    for n in &mut v4.nodes {
        if let Some(r) = &mut n.block_reason {
            *r = r.replace(plain, "off trajectory at position 0: ");
        }
    }
    reseal(&mut v4, &key);
    assert_eq!(verify(&v4).outcome, Outcome::Complete, "{}", verify(&v4));

    // And that wording under v5: tampered.
    let mut t = v4.clone();
    t.format = knox_types::bundle::BUNDLE_FORMAT.into();
    reseal(&mut t, &key);
    tampered(&verify(&t), "block reason differs");
}
