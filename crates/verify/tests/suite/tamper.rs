//! The tamper suite, on evidence as files: bundles of every topology and a journal,
//! written by `knox run` (`tests/fixtures/`), verify complete (prefix for the journal)
//! untouched; every mutation class — a field of any node, a dropped, reordered or
//! inserted node, a forgery that recomputes every hash, an edited APM or prompt, a
//! forged signature, another key — is tampered, naming the first offending node where
//! there is one. A mutated bundle is written back the way a forger would write it
//! (canonical JSON) and verified from those bytes.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use knox_types::payload::Body;
use std::path::Path;
use std::sync::OnceLock;

use knox_attest::TeeKey;
use knox_policy::ToolkitManifest;
use knox_types::aeg::{Node, NodeKind, chain_start, chain_step};
use knox_types::bundle::Bundle;
use knox_types::merkle;
use knox_verify::proof;
use knox_verify::{Options, Outcome, Report};
use proptest::prelude::*;
use serde_json::json;

/// What the suite verifies with: simulated platform evidence accepted (the fixtures
/// were made on a machine without a TEE).
const ALLOW: Options = Options::DANGEROUS_SIMULATED;

/// The toolkit manifest the fixtures' APMs were derived from (the embedded default).
fn manifest() -> &'static ToolkitManifest {
    static M: OnceLock<ToolkitManifest> = OnceLock::new();
    M.get_or_init(|| knox_policy::shipped::current().unwrap())
}

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The bundles of every topology, as read from their files.
fn bundles() -> &'static Vec<Bundle> {
    static B: OnceLock<Vec<Bundle>> = OnceLock::new();
    B.get_or_init(|| {
        TOPOLOGIES
            .iter()
            .map(|t| knox_verify::parse_bundle(&fixture(&format!("topologies/{t}.json"))).unwrap())
            .collect()
    })
}

/// One bundle file per topology: `knox run --workload W --flows 1` (injected executor).
const TOPOLOGIES: [&str; 5] = [
    "st-sa",
    "mt-sa-seq-2",
    "mt-sa-int-3",
    "mt-ma-4-2",
    "mt-ma-3-3",
];

/// `b` written as a forger writes it (canonical JSON) and verified from those bytes.
fn verify(b: &Bundle) -> Report {
    let bytes = serde_json::to_vec(b).unwrap();
    knox_verify::evidence::verify_bytes(&bytes, manifest(), ALLOW).unwrap()
}

/// The first offending node of `b`, which must be tampered.
fn assert_tampered(b: &Bundle, what: &str) -> Option<u64> {
    match verify(b).outcome {
        Outcome::Tampered { node, .. } => node,
        other => panic!("{what}: expected tampered, got {other:?}"),
    }
}

/// The reason `b` is tampered.
fn tampered_reason(b: &Bundle, what: &str) -> String {
    match verify(b).outcome {
        Outcome::Tampered { reason, .. } => reason,
        other => panic!("{what}: expected tampered, got {other:?}"),
    }
}

type Edit = fn(&mut Node);

/// What a forger who can recompute hashes (but holds no key) does after an edit:
/// renumber, re-measure, and rebuild the chain and root the summary would need.
fn remeasure(b: &mut Bundle) {
    let mut c = chain_start();
    let mut leaves = Vec::new();
    for (i, n) in b.nodes.iter_mut().enumerate() {
        n.seq = i as u64;
        n.measurement = n.compute_measurement();
        c = chain_step(&c, n.seq, &n.measurement);
        leaves.push(n.leaf_hash());
    }
    b.summary.chain_head = c;
    b.summary.structure_root = merkle::root(&leaves);
    b.summary.counts.nodes = b.nodes.len() as u64;
}

#[test]
fn untouched_bundles_of_every_topology_verify_complete_from_their_files() {
    for (t, b) in TOPOLOGIES.iter().zip(bundles()) {
        let bytes = fixture(&format!("topologies/{t}.json"));
        let e = knox_verify::evidence::verify_evidence(&bytes, manifest(), ALLOW).unwrap();
        assert_eq!(e.report.outcome, Outcome::Complete, "{t}: {}", e.report);
        assert_eq!(e.structure_root, Some(b.summary.structure_root), "{t}");
        assert_eq!(e.as_read.unwrap().nodes, b.nodes.len(), "{t}");
        // Written back canonically, as the suite writes its forgeries: still complete.
        assert_eq!(verify(b).outcome, Outcome::Complete, "{t}");
    }
    let topologies: Vec<_> = bundles().iter().map(|b| b.apm.topology).collect();
    for (i, t) in topologies.iter().enumerate() {
        assert!(
            !topologies[..i].contains(t),
            "two fixtures of one topology: {t:?}"
        );
    }
}

#[test]
fn a_journal_verifies_as_prefix_and_a_dropped_line_is_tampered() {
    let j = fixture("topologies/mt-ma-4-2.journal.jsonl");
    let r = knox_verify::evidence::verify_bytes(&j, manifest(), ALLOW).unwrap();
    assert_eq!(r.outcome, Outcome::Prefix, "{r}");
    let text = String::from_utf8(j).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 4);
    // Cut at a line boundary: still a prefix.
    let cut = lines[..lines.len() - 1].join("\n") + "\n";
    let r = knox_verify::evidence::verify_bytes(cut.as_bytes(), manifest(), ALLOW).unwrap();
    assert_eq!(r.outcome, Outcome::Prefix, "{r}");
    // A node line dropped from the middle: tampered.
    let mut dropped = lines.clone();
    dropped.remove(lines.len() / 2);
    let dropped = dropped.join("\n") + "\n";
    let r = knox_verify::evidence::verify_bytes(dropped.as_bytes(), manifest(), ALLOW).unwrap();
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
}

#[test]
fn version_1_evidence_still_verifies() {
    let r =
        knox_verify::evidence::verify_bytes(&fixture("evidence-v1/bundle.json"), manifest(), ALLOW)
            .unwrap();
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    let r = knox_verify::evidence::verify_bytes(
        &fixture("evidence-v1/journal.jsonl"),
        manifest(),
        ALLOW,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Prefix, "{r}");
}

#[test]
fn bytes_that_are_not_evidence_are_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"{",
        b"[]",
        b"{\"format\":\"knox-evidence/v9\"}",
        b"\xff\xfe",
        b"{\"format\":\"knox-journal/v2\"}\n{",
    ] {
        if let Ok(r) = knox_verify::evidence::verify_bytes(bytes, manifest(), ALLOW) {
            assert!(
                !matches!(r.outcome, Outcome::Complete),
                "{:?} verified complete",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}

#[test]
fn modifying_any_field_of_any_node_names_that_node() {
    for b in bundles() {
        for i in 0..b.nodes.len() {
            let edits: [(&str, Edit); 7] = [
                ("agent", |n| n.agent.push('x')),
                ("parent", |n| n.parent = Some(n.parent.map_or(0, |p| p + 1))),
                ("kind", |n| {
                    n.kind = if n.kind == NodeKind::Check {
                        NodeKind::Blocked
                    } else {
                        NodeKind::Check
                    }
                }),
                ("allowed", |n| n.allowed = !n.allowed),
                ("block_reason", |n| {
                    n.block_reason = if n.block_reason.is_some() {
                        None
                    } else {
                        Some("x".into())
                    }
                }),
                ("payload", |n| {
                    n.payload = Body::read(n.kind, json!({"forged": n.payload.to_value()}))
                }),
                ("measurement", |n| n.measurement.0[0] ^= 1),
            ];
            for (field, edit) in edits {
                let mut t = b.clone();
                edit(&mut t.nodes[i]);
                let node = assert_tampered(&t, &format!("{} node {i} field {field}", b.run_id));
                assert_eq!(node, Some(i as u64), "{} node {i} field {field}", b.run_id);
            }
            let mut t = b.clone();
            t.nodes[i].seq += 1;
            assert_eq!(assert_tampered(&t, "seq"), Some(i as u64));
        }
    }
}

#[test]
fn drop_reorder_insert_and_truncate_are_detected() {
    for b in bundles() {
        let n = b.nodes.len();
        for i in 0..n {
            let mut t = b.clone();
            t.nodes.remove(i);
            let named = assert_tampered(&t, "drop");
            // Dropping the last node is seen by the replay (an unfinished group) or the chain head.
            if i + 1 < n {
                assert_eq!(named, Some(i as u64), "{} drop {i}", b.run_id);
            }
            if i + 1 < n {
                let mut t = b.clone();
                t.nodes.swap(i, i + 1);
                assert_eq!(
                    assert_tampered(&t, "swap"),
                    Some(i as u64),
                    "{} swap {i}",
                    b.run_id
                );
            }
            let mut t = b.clone();
            let dup = t.nodes[i].clone();
            t.nodes.insert(i + 1, dup);
            assert_eq!(
                assert_tampered(&t, "insert"),
                Some(i as u64 + 1),
                "{} insert {i}",
                b.run_id
            );
        }
        let mut t = b.clone();
        t.nodes.truncate(n / 2);
        assert_tampered(&t, "truncate");
    }
}

#[test]
fn forgeries_that_recompute_every_hash_still_fail_without_the_key() {
    for b in bundles() {
        // Flip a decision and re-measure everything: the signed head no longer matches.
        let mut t = b.clone();
        let i = t
            .nodes
            .iter()
            .position(|n| n.kind == NodeKind::Blocked)
            .or_else(|| t.nodes.iter().position(|n| n.kind == NodeKind::Interrupt))
            .unwrap();
        t.nodes[i].allowed = true;
        t.nodes[i].block_reason = None;
        remeasure(&mut t);
        assert_tampered(&t, "re-measured decision flip");
        // Drop the blocked (or interrupt) nodes, rebuild: policy replay or signature fails.
        let mut t = b.clone();
        t.nodes
            .retain(|n| n.kind != NodeKind::Blocked && n.kind != NodeKind::Interrupt);
        assert_ne!(t.nodes.len(), b.nodes.len(), "{}", b.run_id);
        remeasure(&mut t);
        assert_tampered(&t, "blocked nodes removed");
    }
}

#[test]
fn moving_a_branch_is_detected() {
    let b = bundles()
        .iter()
        .find(|b| b.run_id.starts_with("mt-ma-4-2"))
        .unwrap();
    let branches: Vec<usize> = b
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::AgentBranch)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(branches.len(), 2);
    // Attach agent-1's first tool call to agent-0's branch, re-measure.
    let mut t = b.clone();
    let first_call = t
        .nodes
        .iter()
        .position(|n| n.kind == NodeKind::ToolCall && n.agent == "agent-1")
        .unwrap();
    t.nodes[first_call].parent = Some(branches[0] as u64);
    t.nodes[first_call].measurement = t.nodes[first_call].compute_measurement();
    assert_eq!(assert_tampered(&t, "moved call"), Some(first_call as u64));
    // Swap the branches' order.
    let mut t = b.clone();
    t.nodes.swap(branches[0], branches[1]);
    remeasure(&mut t);
    assert_tampered(&t, "swapped branches");
}

#[test]
fn swapping_the_apm_or_re_signing_with_another_key_is_detected() {
    let all = bundles();
    let (a, other) = (&all[0], &all[1]);
    let mut t = a.clone();
    t.apm = other.apm.clone();
    assert_tampered(&t, "apm swapped");
    // APM and its (genuine) attestation from another run of the same key.
    let mut t = a.clone();
    t.apm = other.apm.clone();
    t.apm_attestation = other.apm_attestation.clone();
    assert_tampered(&t, "apm and attestation swapped");
    // Another key signs the summary.
    let forger = TeeKey::generate().unwrap();
    let mut t = a.clone();
    t.envelope = knox_attest::dsse::sign(&forger, &t.summary.to_statement().unwrap()).unwrap();
    assert_tampered(&t, "summary signed by another key");
    // Another key re-signs everything and replaces the key: the platform evidence
    // binds the original key, so the binding fails.
    let mut t = a.clone();
    t.key = forger.public_key();
    t.envelope = knox_attest::dsse::sign(&forger, &t.summary.to_statement().unwrap()).unwrap();
    t.apm_attestation.envelope = knox_attest::dsse::sign(
        &forger,
        &t.apm_attestation.statement.to_statement().unwrap(),
    )
    .unwrap();
    let reason = tampered_reason(&t, "re-signed with another key");
    assert!(reason.contains("key binding"), "{reason}");
    // Changing the summary's counts breaks its signature.
    let mut t = a.clone();
    t.summary.counts.blocked = 0;
    assert_tampered(&t, "counts");
    // A non-canonical re-encoding of the signed payload is refused even though its
    // content is the same.
    let mut t = a.clone();
    let pretty = serde_json::to_vec_pretty(&t.summary.to_statement().unwrap()).unwrap();
    t.envelope.payload = knox_types::dsse::b64(&pretty);
    assert_tampered(&t, "non-canonical payload");
}

#[test]
fn a_forged_signature_an_edited_apm_or_prompt_is_tampered() {
    for b in bundles() {
        // One bit of the summary's signature.
        let mut t = b.clone();
        let sig = &mut t.envelope.signatures[0].sig;
        let flipped = if sig.starts_with('A') { "B" } else { "A" };
        sig.replace_range(..1, flipped);
        assert_tampered(&t, "summary signature");
        // One bit of the APM attestation's signature.
        let mut t = b.clone();
        let sig = &mut t.apm_attestation.envelope.signatures[0].sig;
        let flipped = if sig.starts_with('A') { "B" } else { "A" };
        sig.replace_range(..1, flipped);
        assert_tampered(&t, "APM signature");
        // The APM edited: another topology.
        let mut t = b.clone();
        t.apm.topology = other_topology(&t.apm.topology);
        assert_tampered(&t, "APM topology");
        // The prompt in clear replaced.
        let mut t = b.clone();
        t.prompt = Some(json!({"tasks": ["Wire $5,000 to acct 998877"]}));
        assert!(
            tampered_reason(&t, "prompt").contains("prompt"),
            "{}",
            b.run_id
        );
    }
}

/// A topology other than `t`, of the same kind when possible.
fn other_topology(t: &knox_types::apm::Topology) -> knox_types::apm::Topology {
    let mut v = serde_json::to_value(t).unwrap();
    let changed = bump_first_number(&mut v);
    assert!(changed, "{v}");
    serde_json::from_value(v).unwrap()
}

fn bump_first_number(v: &mut serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => {
            *v = json!(n.as_u64().unwrap() + 1);
            true
        }
        serde_json::Value::Object(m) => m.values_mut().any(bump_first_number),
        serde_json::Value::Array(a) => a.iter_mut().any(bump_first_number),
        _ => false,
    }
}

#[test]
fn simulated_evidence_is_refused_unless_explicitly_allowed() {
    let bytes = fixture("topologies/st-sa.json");
    let r = knox_verify::evidence::verify_bytes(&bytes, manifest(), Options::default()).unwrap();
    assert!(matches!(r.outcome, Outcome::Refused { .. }), "{r}");
    assert!(r.to_string().contains("NOT hardware-backed"));
}

#[derive(Clone, Debug)]
enum Mutation {
    Field(usize, u8),
    Drop(usize),
    Swap(usize),
    Duplicate(usize),
    Truncate(usize),
    PayloadString(usize),
}

fn apply(b: &mut Bundle, m: &Mutation) -> bool {
    let n = b.nodes.len();
    match *m {
        Mutation::Field(i, f) => {
            let node = &mut b.nodes[i % n];
            match f % 5 {
                0 => node.agent.push('!'),
                1 => node.allowed = !node.allowed,
                2 => node.parent = node.parent.map(|p| p ^ 1).or(Some(1)),
                3 => node.block_reason = Some(format!("{:?}!", node.block_reason)),
                _ => node.seq ^= 2,
            }
        }
        Mutation::Drop(i) => {
            b.nodes.remove(i % n);
        }
        Mutation::Swap(i) => {
            let i = i % (n - 1);
            if b.nodes[i] == b.nodes[i + 1] {
                return false;
            }
            b.nodes.swap(i, i + 1);
        }
        Mutation::Duplicate(i) => {
            let d = b.nodes[i % n].clone();
            b.nodes.insert(i % n, d);
        }
        Mutation::Truncate(k) => b.nodes.truncate(k % n),
        Mutation::PayloadString(i) => {
            let node = &mut b.nodes[i % n];
            let text = node.payload.to_string();
            let Some(pos) = text.find(|c: char| c.is_ascii_lowercase()) else {
                return false;
            };
            let mut bytes = text.into_bytes();
            bytes[pos] = bytes[pos].to_ascii_uppercase();
            match serde_json::from_slice::<serde_json::Value>(&bytes) {
                Ok(v) if v != node.payload.to_value() => node.payload = Body::read(node.kind, v),
                _ => return false,
            }
        }
    }
    true
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, f)| Mutation::Field(i, f)),
        any::<usize>().prop_map(Mutation::Drop),
        any::<usize>().prop_map(Mutation::Swap),
        any::<usize>().prop_map(Mutation::Duplicate),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::PayloadString),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn any_random_mutation_of_any_topology_is_tampered(which in 0usize..5, m in mutation(), remeasured in any::<bool>()) {
        let original = &bundles()[which];
        let mut b = original.clone();
        prop_assume!(apply(&mut b, &m));
        if remeasured {
            remeasure(&mut b);
        }
        // Re-numbering can undo a sequence-number edit; that is no mutation at all.
        prop_assume!(b.nodes != original.nodes);
        let outcome = verify(&b).outcome;
        prop_assert!(matches!(outcome, Outcome::Tampered { .. }), "{:?} (remeasured {}) gave {:?}", m, remeasured, outcome);
    }
}

#[test]
fn one_node_is_proven_against_the_signed_structure_root() {
    let b = bundles()
        .iter()
        .find(|b| b.run_id.starts_with("mt-ma-4-2"))
        .unwrap();
    assert_eq!(verify(b).outcome, Outcome::Complete);
    let root = b.summary.structure_root;
    for (i, n) in b.nodes.iter().enumerate() {
        let p = proof::prove(b, i as u64).unwrap();
        assert_eq!(&p.node, n);
        assert!(proof::check(&p, &root).holds(), "node {i}");
        // Another root: the path does not lead there.
        let mut other = root;
        other.0[0] ^= 1;
        assert!(!proof::check(&p, &other).included, "node {i}");
        // A modified node, re-measured, does not verify against the same path.
        let mut forged = p.clone();
        forged.node.allowed = !forged.node.allowed;
        forged.node.measurement = forged.node.compute_measurement();
        let c = proof::check(&forged, &root);
        assert!(c.measured && !c.included, "node {i}");
        // A modified node, not re-measured: its measurement is wrong.
        let mut forged = p.clone();
        forged.node.agent.push('x');
        assert!(!proof::check(&forged, &root).measured, "node {i}");
    }
    let missing = b.nodes.len() as u64;
    assert!(matches!(
        proof::prove(b, missing),
        Err(proof::ProofError::NoSuchNode { .. })
    ));
}

/// A bundle read from `bytes` (which must parse) and its report, verified from those
/// bytes with simulated evidence allowed.
fn parse_and_verify(bytes: &str) -> (Bundle, Report) {
    let b = knox_verify::parse_bundle(bytes.as_bytes()).unwrap();
    let r = knox_verify::evidence::verify_bytes(bytes.as_bytes(), manifest(), ALLOW).unwrap();
    (b, r)
}

/// The result and detail of the step `name` of `r`.
fn step<'r>(r: &'r Report, name: &str) -> (&'static str, &'r str) {
    let s = r
        .steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no `{name}` step: {r}"));
    (s.result, &s.detail)
}

#[test]
fn an_unknown_platform_mode_is_read_and_refused_naming_it() {
    use knox_types::bundle::PlatformMode;
    let text = String::from_utf8(fixture("topologies/st-sa.json")).unwrap();
    let edited = text.replace(r#""mode":"simulated""#, r#""mode":"sgx""#);
    assert_ne!(edited, text);
    let (b, r) = parse_and_verify(&edited);
    assert_eq!(b.platform.mode, PlatformMode::Other("sgx".into()));
    // Read back as written: the unknown name is kept, not dropped or renamed.
    assert!(
        serde_json::to_string(&b.platform)
            .unwrap()
            .contains(r#""mode":"sgx""#)
    );
    assert!(!matches!(r.outcome, Outcome::Complete), "{r}");
    let (result, detail) = step(&r, "evidence");
    assert_eq!(result, "refused", "{r}");
    assert!(
        detail.contains("unknown platform evidence mode `sgx`"),
        "{detail}"
    );
    assert_eq!(r.platform, PlatformMode::Other("sgx".into()));
}

#[test]
fn an_unknown_model_role_is_read_and_refused_naming_it() {
    use knox_types::bundle::ModelRole;
    let text = String::from_utf8(fixture("topologies/st-sa.json")).unwrap();
    let edited = text.replace(r#""role":"executor""#, r#""role":"critic""#);
    assert_ne!(edited, text);
    let (b, r) = parse_and_verify(&edited);
    assert!(
        b.models
            .iter()
            .any(|m| m.role == ModelRole::Other("critic".into())),
        "{:?}",
        b.models
    );
    assert!(!matches!(r.outcome, Outcome::Complete), "{r}");
    let (result, detail) = step(&r, "models");
    assert_eq!(result, "refused", "{r}");
    assert!(detail.contains("role `critic`"), "{detail}");

    // A journal naming it is read and refused too.
    let text = String::from_utf8(fixture("topologies/mt-ma-4-2.journal.jsonl")).unwrap();
    let edited = text.replace(r#""role":"executor""#, r#""role":"critic""#);
    assert_ne!(edited, text);
    let r = knox_verify::evidence::verify_bytes(edited.as_bytes(), manifest(), ALLOW).unwrap();
    assert!(
        !matches!(r.outcome, Outcome::Complete | Outcome::Prefix),
        "{r}"
    );
    let (result, detail) = step(&r, "models");
    assert_eq!(result, "refused", "{r}");
    assert!(detail.contains("role `critic`"), "{detail}");
}
