//! Hardware evidence in bundles, regulator receipts and EAR output.

use std::process::Command;

use knox_attest::hardware::{MEDIA_TYPE, MODE, TdxEvidence};
use knox_hw::policy::RegulatorPolicy;
use knox_types::bundle::{Bundle, PlatformEvidence};
use knox_types::bytes::HexBytes;
use knox_verify::{Options, Outcome};

use super::support::{bundle, manifest};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/attestation/");

fn vector(path: &str) -> Vec<u8> {
    std::fs::read(format!("{VECTORS}{path}")).unwrap()
}

fn example_policy() -> RegulatorPolicy {
    RegulatorPolicy::from_toml(
        &std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hw/policies/example.toml"
        ))
        .unwrap(),
    )
    .unwrap()
}

/// A bundle whose platform evidence is a genuine TDX quote with its collateral. The
/// quote is real, but its report_data binds some other key, not this bundle's.
fn with_genuine_quote(mut b: Bundle, quote: Vec<u8>) -> Bundle {
    let pk: [u8; 32] = b.key.public_key.0.as_slice().try_into().unwrap();
    let collateral: serde_json::Value =
        serde_json::from_slice(&vector("intel-tdx/dcap-qvl/tdx_quote_collateral.json")).unwrap();
    let attested_at = knox_hw::time::parse_rfc3339_utc("2025-06-19T11:32:27Z").unwrap();
    let evidence = TdxEvidence {
        quote: HexBytes(quote),
        collateral,
        attested_at,
        gpus: vec![],
    };
    b.platform = PlatformEvidence {
        mode: MODE.into(),
        media_type: MEDIA_TYPE.into(),
        // What a forger would claim: the binding of the bundle's own key.
        report_data: HexBytes(
            knox_attest::binding::report_data(&pk, &b.platform.nonce.0, None).to_vec(),
        ),
        nonce: b.platform.nonce.clone(),
        evidence: serde_json::to_value(evidence).unwrap(),
    };
    b
}

#[test]
fn a_genuine_quote_that_binds_another_key_is_tampered_evidence() {
    let policy = example_policy();
    let opts = Options {
        dangerous_allow_simulated: false,
        policy: Some(&policy),
        norms: None,
    };
    let b = with_genuine_quote(bundle("st-sa"), vector("intel-tdx/dcap-qvl/tdx_quote"));
    let r = knox_verify::verify_bundle(&b, manifest(), opts);
    match &r.outcome {
        Outcome::Tampered { reason, .. } => assert!(reason.contains("key binding"), "{r}"),
        other => panic!("{other:?}\n{r}"),
    }
    // The same without a policy: the binding is checked before acceptance.
    let r = knox_verify::verify_bundle(&b, manifest(), Options::default());
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
}

#[test]
fn a_quote_with_one_flipped_byte_does_not_verify() {
    let policy = example_policy();
    let opts = Options {
        dangerous_allow_simulated: false,
        policy: Some(&policy),
        norms: None,
    };
    let mut quote = vector("intel-tdx/dcap-qvl/tdx_quote");
    quote[200] ^= 0x01; // inside the signed TD report body
    let b = with_genuine_quote(bundle("st-sa"), quote);
    match knox_verify::verify_bundle(&b, manifest(), opts).outcome {
        Outcome::Tampered { reason, .. } => assert!(
            reason.contains("hardware evidence does not verify"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
}

fn knox() -> Command {
    Command::new(env!("CARGO_BIN_EXE_knox"))
}

#[test]
fn two_regulators_sign_receipts_and_knox_receipts_shows_both() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let b = bundle("mt-ma:2:2");
    let path = d.join("bundle.json");
    std::fs::write(&path, serde_json::to_vec(&b).unwrap()).unwrap();
    let mut receipts = Vec::new();
    for who in ["eu-ai-office", "hhs-ocr"] {
        let prefix = d.join(who);
        assert!(
            knox()
                .args(["keygen", "--out"])
                .arg(&prefix)
                .status()
                .unwrap()
                .success()
        );
        // A key is never overwritten.
        assert!(
            !knox()
                .args(["keygen", "--out"])
                .arg(&prefix)
                .status()
                .unwrap()
                .success()
        );
        let receipt = d.join(format!("{who}.receipt.json"));
        let out = knox()
            .arg("verify")
            .arg(&path)
            .arg("--allow-simulated")
            .arg("--key")
            .arg(prefix.with_extension("key"))
            .arg("--receipt")
            .arg(&receipt)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        receipts.push(receipt);
    }
    let out = knox()
        .arg("receipts")
        .arg(&path)
        .args(&receipts)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(text.matches("| complete |").count(), 2, "{text}");
    // A receipt does not vouch for another bundle.
    let other = d.join("other.json");
    std::fs::write(&other, serde_json::to_vec(&bundle("st-sa")).unwrap()).unwrap();
    let out = knox()
        .arg("receipts")
        .arg(&other)
        .args(&receipts)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("INVALID"));
    // A forged receipt (the result changed) fails its signature.
    let mut forged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&receipts[0]).unwrap()).unwrap();
    let payload = knox_types::dsse::unb64(forged["envelope"]["payload"].as_str().unwrap()).unwrap();
    let text_payload = String::from_utf8(payload)
        .unwrap()
        .replace("\"complete\"", "\"tampered\"");
    forged["envelope"]["payload"] =
        serde_json::Value::String(knox_types::dsse::b64(text_payload.as_bytes()));
    let forged_path = d.join("forged.json");
    std::fs::write(&forged_path, serde_json::to_vec(&forged).unwrap()).unwrap();
    let out = knox()
        .arg("receipts")
        .arg(&path)
        .arg(&forged_path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn ear_output_has_one_appraisal_per_aspect() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.json");
    std::fs::write(&path, serde_json::to_vec(&bundle("st-sa")).unwrap()).unwrap();
    let out = knox()
        .arg("verify")
        .arg(&path)
        .args(["--allow-simulated", "--ear"])
        .output()
        .unwrap();
    let ear: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ear["eat_profile"], knox_verify::ear::EAR_PROFILE);
    // Simulated evidence: never better than a warning for hardware and overall.
    assert_eq!(ear["submods"]["hardware"]["ear.status"], "warning");
    assert_eq!(ear["ear.status"], "warning");
    for aspect in ["key_binding", "chain", "policy"] {
        assert_eq!(
            ear["submods"][aspect]["ear.status"], "affirming",
            "{aspect}: {ear}"
        );
    }
}

#[test]
fn quote_and_gpu_commands_check_the_genuine_vectors() {
    let q = |name: &str, at: &str| {
        knox()
            .args(["quote", "verify", "--quote"])
            .arg(format!("{VECTORS}intel-tdx/dcap-qvl/{name}"))
            .arg("--collateral")
            .arg(format!(
                "{VECTORS}intel-tdx/dcap-qvl/{name}_collateral.json"
            ))
            .args(["--at", at])
            .arg("--policy")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../hw/policies/example.toml"
            ))
            .status()
            .unwrap()
            .code()
    };
    assert_eq!(q("tdx_quote", "2025-06-19T11:32:27Z"), Some(0));
    assert_eq!(q("tdx_quote_outdated", "2025-06-19T11:32:27Z"), Some(1));
    let gpu = knox()
        .args(["gpu", "verify", "--evidence"])
        .arg(format!(
            "{VECTORS}nvidia-gpu/nvtrust/hopperAttestationReport.txt"
        ))
        .arg("--certs")
        .arg(format!("{VECTORS}nvidia-gpu/nvtrust/hopperCertChain.txt"))
        .args([
            "--nonce",
            "931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb",
        ])
        .status()
        .unwrap();
    assert_eq!(gpu.code(), Some(0));
    let broken = knox()
        .args(["gpu", "verify", "--evidence"])
        .arg(format!(
            "{VECTORS}nvidia-gpu/trustee/hopper_coco_report1.txt"
        ))
        .arg("--certs")
        .arg(format!(
            "{VECTORS}nvidia-gpu/trustee/hopper_cert_chain_case3.txt"
        ))
        .status()
        .unwrap();
    assert_eq!(broken.code(), Some(1));
}

#[test]
fn model_weights_outside_the_policy_are_refused() {
    use knox_monitor::aeg::AegBuilder;
    use knox_monitor::guard::stop::StopSignal;
    use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
    let plan = vec![vec![ExpectedCall::exact(
        0,
        "GmailReadEmail",
        super::support::params(serde_json::json!({"email_id": "a"})),
    )]];
    let mut h = super::support::harness(
        plan,
        Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        StopPolicy::default(),
    );
    let weights =
        std::env::temp_dir().join(format!("knox-test-weights-{}.gguf", std::process::id()));
    std::fs::write(&weights, b"GGUF not really a model").unwrap();
    h.models[0].weights_hash = Some(knox_attest::weights::hash_file(&weights).unwrap());
    std::fs::remove_file(&weights).unwrap();
    let m = h.monitor(StopSignal::new(), AegBuilder::default());
    let b = h.seal(m.finish());
    let accepting = format!(
        "version = 1\n[models]\naccepted_weights_sha256 = [\"{}\"]\n",
        h.models[0].weights_hash.unwrap()
    );
    let policy = RegulatorPolicy::from_toml(accepting.as_bytes()).unwrap();
    let opts = Options {
        dangerous_allow_simulated: true,
        policy: Some(&policy),
        norms: None,
    };
    assert_eq!(
        knox_verify::verify_bundle(&b, manifest(), opts).outcome,
        Outcome::Complete
    );
    let other = RegulatorPolicy::from_toml(
        format!(
            "version = 1\n[models]\naccepted_weights_sha256 = [\"{}\"]\n",
            "ab".repeat(32)
        )
        .as_bytes(),
    )
    .unwrap();
    let opts = Options {
        dangerous_allow_simulated: true,
        policy: Some(&other),
        norms: None,
    };
    let r = knox_verify::verify_bundle(&b, manifest(), opts);
    assert!(matches!(r.outcome, Outcome::Refused { .. }), "{r}");
}

#[test]
fn a_refresh_report_binds_its_own_run_and_no_other() {
    use knox::session::ExecutorKind;
    let runs = super::support::outcomes_with(
        &super::support::workload("st-sa", 2),
        ExecutorKind::Injected,
        |b| b.refresh(true),
    );
    let (a, b) = (&runs[0].bundle, &runs[1].bundle);
    assert!(a.refresh.is_some());
    let r = super::support::verify(a);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert!(
        r.steps
            .iter()
            .any(|s| s.name == "refresh" && s.result == "pass")
    );
    // Another run's refresh report binds another chain head.
    let mut t = a.clone();
    t.refresh = b.refresh.clone();
    match super::support::verify(&t).outcome {
        Outcome::Tampered { reason, .. } => assert!(reason.contains("refresh"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
