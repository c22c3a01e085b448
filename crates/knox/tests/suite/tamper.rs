//! Tamper evidence of what this build's prover writes. The tamper suite itself — every
//! mutation class on bundles of every topology, from their files — is the verifier's
//! own (`crates/verify/tests/suite/tamper.rs`, on fixtures `knox run` wrote); here, freshly
//! made bundles of every topology verify complete, and a run whose planning failed
//! (which only the prover can make) is tamper-evident node by node.

use knox_types::payload::Body;
use std::sync::OnceLock;

use knox_types::aeg::NodeKind;
use knox_types::bundle::Bundle;
use knox_verify::Outcome;
use serde_json::json;

use super::support::{TOPOLOGIES, assert_tampered, bundle, verify};

/// A run whose planning failed: root, proofs of inference, one interrupt.
fn refused() -> &'static Bundle {
    static B: OnceLock<Bundle> = OnceLock::new();
    B.get_or_init(|| super::planning::refused_bundle("mt-ma:2:2"))
}

#[test]
fn fresh_bundles_of_every_topology_verify_complete() {
    for b in TOPOLOGIES
        .iter()
        .map(|t| bundle(t))
        .chain([refused().clone()])
    {
        let r = verify(&b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
    }
}

#[test]
fn a_failed_plans_bundle_names_every_edited_dropped_or_swapped_node() {
    let b = refused();
    assert!(b.nodes.iter().any(|n| n.kind == NodeKind::Interrupt));
    let n = b.nodes.len();
    for i in 0..n {
        let mut t = b.clone();
        t.nodes[i].allowed = !t.nodes[i].allowed;
        assert_eq!(assert_tampered(&t, "allowed"), Some(i as u64));
        let mut t = b.clone();
        t.nodes[i].payload = Body::read(
            t.nodes[i].kind,
            json!({"forged": t.nodes[i].payload.to_value()}),
        );
        assert_eq!(assert_tampered(&t, "payload"), Some(i as u64));
        let mut t = b.clone();
        t.nodes.remove(i);
        let named = assert_tampered(&t, "drop");
        if i + 1 < n {
            assert_eq!(named, Some(i as u64), "drop {i}");
            let mut t = b.clone();
            t.nodes.swap(i, i + 1);
            assert_eq!(assert_tampered(&t, "swap"), Some(i as u64), "swap {i}");
        }
    }
}
