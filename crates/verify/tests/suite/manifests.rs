//! The verifier picks the manifest the evidence names, by hash: evidence written under
//! the manifests frozen at 6c31851 and a644880 keeps verifying `complete` whatever
//! manifest the verifier is handed, and a journal under an unknown manifest is refused
//! by name.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests")]

use knox_policy::ToolkitManifest;
use knox_verify::evidence::verify_evidence;
use knox_verify::manifests::Manifests;
use knox_verify::{Options, Outcome};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// A manifest that differs from every shipped one (a cost changed).
fn changed() -> ToolkitManifest {
    let needs = knox_policy::shipped::LEGACY_NEEDS_A644880.replacen("cost = ", "cost = 1", 1);
    ToolkitManifest::from_sources(knox_policy::shipped::INJECAGENT_TOOLS_JSON, &needs).unwrap()
}

#[test]
fn frozen_manifest_evidence_verifies_whatever_manifest_is_handed() {
    let m = changed();
    assert!(!knox_policy::shipped::is_known(&m.hash()));
    for f in [
        "topologies/st-sa.json",
        "topologies/mt-ma-3-3.json",
        "evidence-v1/bundle.json",
        // Written under the needs file frozen at a644880 (`dfd62744…`).
        "chain/run-0.json",
    ] {
        let bytes = std::fs::read(format!("{FIXTURES}/{f}")).unwrap();
        let e = verify_evidence(&bytes, &m, Options::DANGEROUS_SIMULATED).unwrap();
        assert_eq!(e.report.outcome, Outcome::Complete, "{f}: {:?}", e.report);
        let e = verify_evidence(&bytes, &Manifests::new(), Options::DANGEROUS_SIMULATED).unwrap();
        assert_eq!(e.report.outcome, Outcome::Complete, "{f}: {:?}", e.report);
    }
    let bytes = std::fs::read(format!("{FIXTURES}/topologies/mt-ma-4-2.journal.jsonl")).unwrap();
    let e = verify_evidence(&bytes, &m, Options::DANGEROUS_SIMULATED).unwrap();
    assert_eq!(e.report.outcome, Outcome::Prefix, "{:?}", e.report);
}

#[test]
fn evidence_naming_an_unknown_manifest_is_refused_naming_it() {
    // The choice alone (the APM, edited, no longer matches its attestation: the full
    // verification would report that first).
    let bytes = std::fs::read(format!("{FIXTURES}/topologies/st-sa.json")).unwrap();
    let mut b = knox_verify::parse_bundle(&bytes).unwrap();
    let unknown = changed().hash();
    b.apm.inputs.manifest = unknown;
    let Err(why) = knox_verify::manifests::choose(&b, &Manifests::new()) else {
        panic!("an unknown manifest was chosen")
    };
    assert!(why.contains(&unknown.to_string()), "{why}");
    // Handed that manifest, the verifier chooses it.
    let handed = Manifests::new().with(changed());
    assert!(knox_verify::manifests::choose(&b, &handed).is_ok());
}
