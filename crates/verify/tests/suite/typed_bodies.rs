//! Typed node bodies keep the evidence format: every node of every fixture (bundles and
//! journals, format v1 and v2, here and in `crates/knox/tests/fixtures`) reads as its
//! kind's payload and writes back to exactly the canonical bytes it was written with,
//! so its measurement is unchanged; a body that is not its kind's payload is kept as
//! written and reported naming its node.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};

use knox_types::aeg::{Node, NodeKind};
use knox_types::canon;
use knox_types::payload::{Body, CheckPayload, RootPayload, ToolCallPayload};
use knox_verify::{Options, Outcome};
use serde_json::{Value, json};

fn fixture_files() -> Vec<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in [
        here.join("tests/fixtures/topologies"),
        here.join("tests/fixtures/evidence-v1"),
        here.join("../knox/tests/fixtures/evidence-v1"),
    ] {
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json" || x == "jsonl") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// The nodes of a bundle or journal file, as written (JSON values).
fn raw_nodes(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|x| x == "jsonl") {
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v.get("seq").is_some() && v.get("payload").is_some())
            .collect()
    } else {
        let v: Value = serde_json::from_str(&text).unwrap();
        v["nodes"].as_array().unwrap().clone()
    }
}

#[test]
fn every_fixture_node_reads_typed_and_writes_back_its_bytes() {
    let files = fixture_files();
    assert!(files.len() >= 10, "fixtures found: {files:?}");
    let mut nodes = 0;
    let mut kinds = std::collections::HashSet::new();
    for path in &files {
        for raw in raw_nodes(path) {
            let node: Node = serde_json::from_value(raw.clone()).unwrap();
            let at = format!("{} node {}", path.display(), node.seq);
            // Typed: neither kept verbatim nor invalid.
            assert!(
                matches!(node.payload.typed(), Some(b) if !matches!(b, Body::Verbatim(_))),
                "{at}: {:?}",
                node.payload
            );
            assert!(!matches!(node.payload, Body::Verbatim(_)), "{at}");
            assert_eq!(node.payload.kind(), Some(node.kind), "{at}");
            // The body's canonical bytes are those written.
            let mut body = Vec::new();
            node.payload.write_canonical(&mut body);
            assert_eq!(
                String::from_utf8(body).unwrap(),
                String::from_utf8(canon::canonical(&raw["payload"])).unwrap(),
                "{at}"
            );
            // So is the node's: its measurement is the recorded one.
            assert_eq!(node.compute_measurement(), node.measurement, "{at}");
            // And the node serializes to what was read.
            assert_eq!(serde_json::to_value(&node).unwrap(), raw, "{at}");
            kinds.insert(node.kind);
            nodes += 1;
        }
    }
    assert!(nodes >= 400, "{nodes} nodes");
    for k in [
        NodeKind::Root,
        NodeKind::AgentStep,
        NodeKind::AgentBranch,
        NodeKind::ToolCall,
        NodeKind::Check,
        NodeKind::ToolOutput,
        NodeKind::Blocked,
        NodeKind::ProofOfInference,
    ] {
        assert!(kinds.contains(&k), "no fixture node of kind {k:?}");
    }
}

#[test]
fn a_body_that_is_not_its_kinds_payload_is_kept_as_written_and_named() {
    let raw = json!({"run_id": "r", "apm_hash": "00", "extra": 1});
    let body = Body::read(NodeKind::Root, raw.clone());
    let Body::Invalid { raw: kept, error } = &body else {
        panic!("{body:?}");
    };
    assert_eq!(kept, &raw);
    assert!(!error.is_empty());
    assert_eq!(body.to_value(), raw);
    assert_eq!(
        body.to_string(),
        String::from_utf8(canon::canonical(&raw)).unwrap()
    );
    let e = body.get::<RootPayload>().unwrap_err().to_string();
    assert!(e.contains("`root` payload does not parse"), "{e}");
    // A typed body asked for another kind's payload says which it is.
    let call = Body::read(NodeKind::ToolCall, raw_tool_call());
    assert!(call.tool_call().is_some());
    let e = call.get::<CheckPayload>().unwrap_err().to_string();
    assert!(e.contains("`tool_call` payload where a `check`"), "{e}");
}

fn raw_tool_call() -> Value {
    let p = ToolCallPayload {
        ordinal: 0,
        position: 0,
        expected: None,
        actual: None,
        actual_hash: knox_types::digest::Digest::default(),
        raw: Some("{".into()),
        raw_len: 1,
    };
    serde_json::to_value(p).unwrap()
}

#[test]
fn a_body_its_payload_would_write_differently_is_kept_verbatim() {
    // A missing optional field reads as `None`, which the payload writes as `null`.
    let mut raw = raw_tool_call();
    raw.as_object_mut().unwrap().remove("expected");
    let body = Body::read(NodeKind::ToolCall, raw.clone());
    assert!(matches!(body, Body::Verbatim(_)), "{body:?}");
    assert!(body.tool_call().is_some());
    assert_eq!(body.to_value(), raw);
}

#[test]
fn a_bundle_with_a_malformed_body_is_tampered_at_that_node() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/topologies/st-sa.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let nodes = v["nodes"].as_array_mut().unwrap();
    let i = nodes.iter().position(|n| n["kind"] == "check").unwrap();
    nodes[i]["payload"]["surprise"] = json!(true);
    // Re-measured, as a forger would: only the body's content gives it away.
    let mut node: Node = serde_json::from_value(nodes[i].clone()).unwrap();
    assert!(matches!(node.payload, Body::Invalid { .. }));
    node.measurement = node.compute_measurement();
    nodes[i] = serde_json::to_value(&node).unwrap();
    let bytes = serde_json::to_vec(&v).unwrap();
    let manifest = knox_policy::shipped::current().unwrap();
    let r = knox_verify::evidence::verify_bytes(&bytes, &manifest, Options::DANGEROUS_SIMULATED)
        .unwrap();
    match r.outcome {
        Outcome::Tampered { node, .. } => assert_eq!(node, Some(i as u64)),
        other => panic!("expected tampered, got {other:?}"),
    }
}
