//! The tamper suite: every mutation class on bundles of every topology gives the
//! right outcome, naming the first offending node where there is one.

use std::sync::OnceLock;

use knox_attest::TeeKey;
use knox_types::aeg::{NodeKind, chain_start, chain_step};
use knox_types::bundle::Bundle;
use knox_types::merkle;
use knox_verify::Outcome;
use proptest::prelude::*;
use serde_json::json;

use super::support::{TOPOLOGIES, assert_tampered, bundle, verify};

type Edit = fn(&mut knox_types::aeg::Node);

fn bundles() -> &'static Vec<Bundle> {
    static B: OnceLock<Vec<Bundle>> = OnceLock::new();
    B.get_or_init(|| {
        let mut all: Vec<Bundle> = TOPOLOGIES.iter().map(|t| bundle(t)).collect();
        // And a run whose planning failed: root, proofs of inference, one interrupt.
        all.push(super::planning::refused_bundle("mt-ma:2:2"));
        all
    })
}

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
fn untouched_bundles_of_every_topology_verify_complete() {
    for b in bundles() {
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
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
                    n.payload = json!({"forged": n.payload.clone()})
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
    match verify(&t).outcome {
        Outcome::Tampered { reason, .. } => assert!(reason.contains("key binding"), "{reason}"),
        other => panic!("{other:?}"),
    }
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
fn simulated_evidence_is_refused_unless_explicitly_allowed() {
    let b = &bundles()[0];
    let r = knox_verify::verify_bundle(
        b,
        super::support::manifest(),
        knox_verify::Options::default(),
    );
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
            match serde_json::from_slice(&bytes) {
                Ok(v) if v != node.payload => node.payload = v,
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
    fn any_random_mutation_of_any_topology_is_tampered(which in 0usize..6, m in mutation(), remeasured in any::<bool>()) {
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
    let leaves: Vec<_> = b.nodes.iter().map(|n| n.leaf_hash()).collect();
    let size = leaves.len() as u64;
    for (i, n) in b.nodes.iter().enumerate() {
        let proof = merkle::inclusion_proof(&leaves, i).unwrap();
        assert!(merkle::verify_inclusion(
            &n.leaf_hash(),
            i as u64,
            size,
            &proof,
            &b.summary.structure_root
        ));
        // A modified node does not verify against the same proof.
        let mut forged = n.clone();
        forged.allowed = !forged.allowed;
        forged.measurement = forged.compute_measurement();
        assert!(!merkle::verify_inclusion(
            &forged.leaf_hash(),
            i as u64,
            size,
            &proof,
            &b.summary.structure_root
        ));
    }
}
