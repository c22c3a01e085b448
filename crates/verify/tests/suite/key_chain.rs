//! Every run an in-TEE key seals is numbered in the key's chain and names the run
//! sealed before it (evidence format v3, `summary.key_chain`); the verifier reports
//! the link of a signed summary and refuses a chain that is missing, edited, or that
//! does not start at the key's platform evidence.
//!
//! The bundles in `tests/fixtures/chain/` (runs 0–3 of one key, and a second run 1
//! signed by the same key: a fork; a key announced and its runs 1–2; a key announced
//! and never followed) are what the server's tests hand over to find a run left out;
//! `KNOX_WRITE_FIXTURES=1 cargo test -p knox-verify --test all -- suite::key_chain`
//! writes them again.

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use std::path::PathBuf;
use std::sync::Arc;

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::TeeKey;
use knox_attest::simulated::Simulated;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_policy::ToolkitManifest;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::{BUNDLE_FORMAT, Bundle, KeyChain};
use knox_types::digest::{Digest, tag};
use knox_verify::{Options, Outcome, Report};
use serde_json::json;

fn manifest() -> ToolkitManifest {
    knox_policy::shipped::current().unwrap()
}

/// One single-call run sealed by `rt`: the key's next link.
fn sealed_run(rt: &Runtime, name: &str) -> Bundle {
    let params = json!({"email_id": name});
    let prompt = Prompt {
        tasks: vec![format!("read email {name}")],
    };
    let plan = Plan {
        tasks: vec![vec![ExpectedCall::exact(
            0,
            "GmailReadEmail",
            params.as_object().cloned().unwrap(),
        )]],
    };
    let topology = Topology {
        kind: TopologyKind::StSa,
        tasks: 1,
        agents: 1,
    };
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        plan,
        topology,
    )
    .unwrap();
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let regulator = knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap();
    let m = Monitor::start(
        MonitorConfig::new(&apm, apm_hash, name, &rt.manifest, rt.monitor_key(), &[]),
        regulator,
        None,
    );
    let agent = apm.agents[0].id.clone();
    let raw = serde_json::to_vec(&json!({"tool": "GmailReadEmail", "params": params})).unwrap();
    let Verdict::Allow(t) = m.mediate(&agent, &raw) else {
        unreachable!("the planned call is allowed")
    };
    m.record_output(t, json!({"email": {"id": name, "body": "hi"}}));
    let aeg = m.finish();
    knox_monitor::run::seal(rt, name, Some(&prompt), apm.clone(), att, vec![], aeg).unwrap()
}

fn verify(b: &Bundle) -> Report {
    knox_verify::verify_bundle(b, &manifest(), Options::DANGEROUS_SIMULATED)
}

/// Re-reads a bundle from its bytes, as a verifier does.
fn reread(b: &Bundle) -> Bundle {
    knox_verify::parse_bundle(&serde_json::to_vec(b).unwrap()).unwrap()
}

fn step<'r>(r: &'r Report, name: &str) -> &'r knox_verify::Step {
    r.steps.iter().find(|s| s.name == name).unwrap()
}

#[test]
fn a_keys_runs_form_one_chain_from_its_platform_evidence() {
    let rt = Runtime::start(&Simulated, b"chain", manifest()).unwrap();
    let runs: Vec<Bundle> = (0..3)
        .map(|i| reread(&sealed_run(&rt, &format!("r{i}"))))
        .collect();
    let platform = Digest::of_json(tag::PLATFORM, &rt.platform).unwrap();
    let mut prev = KeyChain::start(&platform);
    for (i, b) in runs.iter().enumerate() {
        assert_eq!(b.format, BUNDLE_FORMAT);
        let chain = b.summary.key_chain.unwrap();
        assert_eq!(chain.seq, i as u64);
        assert_eq!(chain.prev, prev, "run {i} names the run before it");
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
        assert_eq!(step(&r, "key chain").result, "pass");
        let link = r.key_chain.clone().unwrap();
        assert_eq!(link.seq, i as u64);
        assert_eq!(link.prev, prev);
        assert_eq!(link.seal, b.summary.seal_digest().unwrap());
        assert_eq!(
            link.key,
            knox_attest::key::key_id(&rt.public_bytes()).to_hex()
        );
        prev = link.seal;
    }
    // A second key starts its own chain at 0.
    let other = Runtime::start(&Simulated, b"chain", manifest()).unwrap();
    assert_eq!(sealed_run(&other, "o").summary.key_chain.unwrap().seq, 0);
}

#[test]
fn runs_sealed_at_once_on_many_threads_still_form_one_chain() {
    let rt = Runtime::start(&Simulated, b"chain", manifest()).unwrap();
    let runs: Vec<Bundle> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let rt = &rt;
                s.spawn(move || sealed_run(rt, &format!("t{i}")))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut by_seq: Vec<&Bundle> = runs.iter().collect();
    by_seq.sort_by_key(|b| b.summary.key_chain.unwrap().seq);
    let platform = Digest::of_json(tag::PLATFORM, &rt.platform).unwrap();
    let mut prev = KeyChain::start(&platform);
    for (i, b) in by_seq.iter().enumerate() {
        let chain = b.summary.key_chain.unwrap();
        assert_eq!(chain.seq, i as u64, "numbers 0..8, each once");
        assert_eq!(chain.prev, prev);
        prev = b.summary.seal_digest().unwrap();
    }
}

#[test]
fn an_edited_missing_or_misplaced_chain_is_tampered() {
    // A key this test keeps: it signs as the run's key would (simulated evidence only).
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"chain", manifest()).unwrap();
    let first = sealed_run(&rt, "a");
    let second = sealed_run(&rt, "b");

    // The number edited in clear: the signed summary differs.
    let mut b = second.clone();
    b.summary.key_chain = Some(KeyChain {
        seq: 0,
        ..b.summary.key_chain.unwrap()
    });
    let r = verify(&reread(&b));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert_eq!(step(&r, "signature").result, "fail");
    assert!(r.key_chain.is_none(), "an unsigned link is never reported");

    // Signed by the key, but with no chain in format v3 (a build that drops it).
    let mut b = second.clone();
    b.summary.key_chain = None;
    b.envelope = knox_attest::dsse::sign(&*key, &b.summary.to_statement().unwrap()).unwrap();
    let r = verify(&reread(&b));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert!(step(&r, "key chain").detail.contains("no key chain"), "{r}");

    // Run 0 that does not start at the key's platform evidence.
    let mut b = first.clone();
    b.summary.key_chain = Some(KeyChain {
        seq: 0,
        prev: Digest::sha256(b"elsewhere"),
    });
    b.envelope = knox_attest::dsse::sign(&*key, &b.summary.to_statement().unwrap()).unwrap();
    let r = verify(&reread(&b));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert!(
        step(&r, "key chain").detail.contains("does not start"),
        "{r}"
    );

    // A chain in a bundle that says it is format v2, which has none.
    let mut b = second;
    b.format = knox_types::bundle::BUNDLE_FORMAT_V2.into();
    b.summary.format = b.format.clone();
    b.envelope = knox_attest::dsse::sign(&*key, &b.summary.to_statement().unwrap()).unwrap();
    let r = verify(&reread(&b));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert_eq!(step(&r, "key chain").result, "fail", "{r}");
}

#[test]
fn a_bundle_of_format_v2_has_no_chain_and_still_verifies() {
    let bytes = include_bytes!("../fixtures/topologies/st-sa.json");
    let b = knox_verify::parse_bundle(bytes).unwrap();
    assert_eq!(b.format, knox_types::bundle::BUNDLE_FORMAT_V2);
    let r = verify(&b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert_eq!(step(&r, "key chain").result, "skipped");
    assert!(r.key_chain.is_none());
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chain")
}

/// The fixture files: runs 0–3 of one key, and `fork-1`, a second run 1 the same key
/// signed (what only the key's holder can make: how a fork looks).
const FIXTURES: [&str; 5] = ["run-0", "run-1", "run-2", "run-3", "fork-1"];

#[test]
fn the_chain_fixtures_are_one_keys_runs_and_a_fork() {
    let dir = fixtures();
    if std::env::var_os("KNOX_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        // A key this test keeps: it signs as the run's key would (simulated evidence only).
        let key = Arc::new(TeeKey::generate().unwrap());
        let rt =
            Runtime::simulated_with_key(Arc::clone(&key), b"chain-fixtures", manifest()).unwrap();
        let runs: Vec<Bundle> = (0..4)
            .map(|i| sealed_run(&rt, &format!("chain-run-{i}")))
            .collect();
        // The fork: run 1's successor under the same number, signed by the same key.
        let mut fork = sealed_run(&rt, "chain-fork-1");
        fork.summary.key_chain = runs[1].summary.key_chain;
        fork.envelope =
            knox_attest::dsse::sign(&*key, &fork.summary.to_statement().unwrap()).unwrap();
        for (name, b) in FIXTURES.iter().zip(runs.iter().chain([&fork])) {
            std::fs::write(
                dir.join(format!("{name}.json")),
                serde_json::to_vec(b).unwrap(),
            )
            .unwrap();
        }
    }
    let read: Vec<Bundle> = FIXTURES
        .iter()
        .map(|n| {
            knox_verify::parse_bundle(&std::fs::read(dir.join(format!("{n}.json"))).unwrap())
                .unwrap()
        })
        .collect();
    let links: Vec<knox_verify::ChainLink> = read
        .iter()
        .map(|b| {
            let r = verify(b);
            assert_eq!(r.outcome, Outcome::Complete, "{r}");
            r.key_chain.unwrap()
        })
        .collect();
    assert!(links.iter().all(|l| l.key == links[0].key), "one key");
    for i in 1..4 {
        assert_eq!(links[i].seq, i as u64);
        assert_eq!(links[i].prev, links[i - 1].seal);
    }
    assert_eq!(links[4].seq, 1);
    assert_eq!(links[4].prev, links[0].seal);
    assert_ne!(links[4].seal, links[1].seal, "two runs signed at number 1");
}

/// The announced fixtures: `announced-0` (a key's announcement), `announced-1` and
/// `announced-2` (its runs), `unfollowed-0` (another key's announcement, no run).
const ANNOUNCED: [&str; 4] = ["announced-0", "announced-1", "announced-2", "unfollowed-0"];

#[test]
fn the_announced_fixtures_are_a_keys_announcement_its_runs_and_a_key_never_followed() {
    let dir = fixtures();
    if std::env::var_os("KNOX_WRITE_FIXTURES").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        let rt = Runtime::start(&Simulated, b"chain-fixtures", manifest()).unwrap();
        let a = serde_json::to_vec(&rt.announce().unwrap()).unwrap();
        let runs: Vec<Vec<u8>> = (1..3)
            .map(|i| serde_json::to_vec(&sealed_run(&rt, &format!("announced-run-{i}"))).unwrap())
            .collect();
        let other = Runtime::start(&Simulated, b"chain-fixtures", manifest()).unwrap();
        let unfollowed = serde_json::to_vec(&other.announce().unwrap()).unwrap();
        for (name, bytes) in ANNOUNCED.iter().zip([&a, &runs[0], &runs[1], &unfollowed]) {
            std::fs::write(dir.join(format!("{name}.json")), bytes).unwrap();
        }
    }
    let links: Vec<knox_verify::ChainLink> = ANNOUNCED
        .iter()
        .map(|n| {
            let bytes = std::fs::read(dir.join(format!("{n}.json"))).unwrap();
            let r = knox_verify::evidence::verify_bytes(
                &bytes,
                &manifest(),
                Options::DANGEROUS_SIMULATED,
            )
            .unwrap();
            assert_eq!(r.outcome, Outcome::Complete, "{n}: {r}");
            r.key_chain.unwrap()
        })
        .collect();
    assert_eq!(links[0].seq, 0);
    for i in 1..3 {
        assert_eq!(links[i].key, links[0].key);
        assert_eq!((links[i].seq, links[i].prev), (i as u64, links[i - 1].seal));
    }
    assert_eq!(links[3].seq, 0);
    assert_ne!(links[3].key, links[0].key, "another key");
}

/// #35: a key announced when made — its first summary, number 0 of its chain — verifies
/// complete on its own, names link 0, and the key's runs follow it from number 1 (the
/// first naming its seal). It is announced once, before any run; an announcement edited
/// (even re-signed by its own key) or signed by another key is tampered.
#[test]
fn a_key_announced_when_made_is_link_0_and_its_runs_follow() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"chain", manifest()).unwrap();
    let a = rt.announce().unwrap();
    let bytes = serde_json::to_vec(&a).unwrap();
    assert!(knox_verify::announcement::is_announcement(&bytes));
    let r = knox_verify::evidence::verify_bytes(&bytes, &manifest(), Options::DANGEROUS_SIMULATED)
        .unwrap();
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    let link0 = r.key_chain.clone().unwrap();
    assert_eq!(link0.seq, 0);
    // Refused without --allow-simulated, as any simulated evidence.
    let strict =
        knox_verify::announcement::verify_announcement(&bytes, Options::default()).unwrap();
    assert!(
        matches!(strict.outcome, Outcome::Refused { .. }),
        "{strict}"
    );
    // Announced once.
    assert!(rt.announce().is_err());
    // The first run is number 1 and names the announcement.
    let b = sealed_run(&rt, "after");
    let chain = b.summary.key_chain.unwrap();
    assert_eq!((chain.seq, chain.prev), (1, link0.seal));
    assert_eq!(verify(&b).outcome, Outcome::Complete);
    // Edited and re-signed by the key itself: not an announcement's summary.
    let mut edited = a.clone();
    edited.summary.counts.executed = 1;
    edited.envelope =
        knox_attest::dsse::sign(&*key, &edited.summary.to_statement().unwrap()).unwrap();
    let r = knox_verify::announcement::verify_announcement(
        &serde_json::to_vec(&edited).unwrap(),
        Options::DANGEROUS_SIMULATED,
    )
    .unwrap();
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert!(r.key_chain.is_none());
    // Another key's signature.
    let mut forged = a.clone();
    let other = TeeKey::generate().unwrap();
    forged.envelope = knox_attest::dsse::sign(&other, &a.summary.to_statement().unwrap()).unwrap();
    let r = knox_verify::announcement::verify_announcement(
        &serde_json::to_vec(&forged).unwrap(),
        Options::DANGEROUS_SIMULATED,
    )
    .unwrap();
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    // A run of a key that was never announced still starts at 0.
    let plain = Runtime::start(&Simulated, b"chain", manifest()).unwrap();
    assert_eq!(
        sealed_run(&plain, "plain").summary.key_chain.unwrap().seq,
        0
    );
}
