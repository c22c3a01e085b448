//! The example policy accepts every genuine vector; each rule, when broken, names its field.

use knox_hw::nvidia::{self, GpuVerified, parse_serialized};
use knox_hw::policy::{PolicyError, PolicyViolation, RegulatorPolicy};
use knox_hw::tdx::{self, Collateral, TdxVerified};

use super::support::{read, read_hex, utc};

const EXAMPLE: &str = include_str!("../../policies/example.toml");

fn example() -> RegulatorPolicy {
    RegulatorPolicy::from_toml(EXAMPLE.as_bytes()).unwrap()
}

/// The example with one line replaced.
fn edited(from: &str, to: &str) -> RegulatorPolicy {
    assert!(EXAMPLE.contains(from), "{from}");
    RegulatorPolicy::from_toml(EXAMPLE.replacen(from, to, 1).as_bytes()).unwrap()
}

fn tdx_quote() -> TdxVerified {
    let c = Collateral::from_json(&read("intel-tdx/dcap-qvl/tdx_quote_collateral.json")).unwrap();
    tdx::verify(
        &read("intel-tdx/dcap-qvl/tdx_quote"),
        &c,
        utc("2025-06-19T11:32:27Z"),
    )
    .unwrap()
}

fn sgx_quote() -> TdxVerified {
    let c = Collateral::from_json(&read("intel-tdx/dcap-qvl/sgx_quote_collateral.json")).unwrap();
    tdx::verify(
        &read("intel-tdx/dcap-qvl/sgx_quote"),
        &c,
        utc("2025-06-19T11:32:27Z"),
    )
    .unwrap()
}

fn genuine_tdx() -> Vec<TdxVerified> {
    let more = [
        (
            "intel-tdx/dcap-qvl/tdx_quote_td15ex",
            "intel-tdx/dcap-qvl/tdx_quote_td15ex_collateral.json",
            "2026-10-08T01:09:46Z",
            false,
        ),
        (
            "intel-tdx/dcap-qvl/near_quote_hex.txt",
            "intel-tdx/dcap-qvl/near_quote_collateral.json",
            "2025-09-02T08:41:59Z",
            true,
        ),
    ];
    let mut all = vec![tdx_quote(), sgx_quote()];
    for (q, c, at, hex) in more {
        let quote = if hex { read_hex(q) } else { read(q) };
        let c = Collateral::from_json(&read(c)).unwrap();
        all.push(tdx::verify(&quote, &c, utc(at)).unwrap());
    }
    all
}

fn gpu() -> GpuVerified {
    nvidia::verify(
        &read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt"),
        &read("nvidia-gpu/nvtrust/hopperCertChain.txt"),
        None,
    )
    .unwrap()
}

fn genuine_gpu() -> Vec<GpuVerified> {
    let mut all = vec![
        gpu(),
        nvidia::verify(
            &read_hex("nvidia-gpu/trustee/hopper_coco_report1.txt"),
            &read("nvidia-gpu/trustee/hopper_coco_certs1.txt"),
            None,
        )
        .unwrap(),
    ];
    for f in [
        "attestation-sdk/hopper_evidence.json",
        "attestation-sdk/evidence_hopper_590_12.json",
        "attestation-sdk/multi_gpu_hopper.json",
        "attestation-sdk/hopper_evidence_cert_hold.json",
        "nvtrust/ppcie_gpu_evidence.json",
    ] {
        for e in parse_serialized(&read(&format!("nvidia-gpu/{f}"))).unwrap() {
            all.push(nvidia::verify(&e.evidence, &e.certificate_chain_pem, None).unwrap());
        }
    }
    all
}

fn field(r: Result<(), PolicyViolation>) -> String {
    r.unwrap_err().field().to_owned()
}

#[test]
fn example_policy_accepts_every_genuine_vector() {
    let policy = example();
    for v in genuine_tdx() {
        policy.appraise_tdx(&v).unwrap();
    }
    for v in genuine_gpu() {
        policy.appraise_gpu(&v).unwrap();
    }
    policy
        .check_weights_hash("9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08")
        .unwrap();
}

#[test]
fn strict_intel_reading_refuses_cloud_platform_flags() {
    let v = tdx_quote();
    let p = edited(
        "allow_dynamic_platform = true",
        "allow_dynamic_platform = false",
    );
    assert_eq!(field(p.appraise_tdx(&v)), "tdx.dynamic_platform");
    let p = edited("allow_cached_keys = true", "allow_cached_keys = false");
    assert_eq!(field(p.appraise_tdx(&v)), "tdx.cached_keys");
    let p = edited("allow_smt = true", "allow_smt = false");
    assert_eq!(field(p.appraise_tdx(&v)), "tdx.smt_enabled");
}

#[test]
fn tcb_status_tee_and_advisories_are_named() {
    let p = edited(
        r#"accepted_tcb_statuses = ["UpToDate", "ConfigurationAndSWHardeningNeeded"]"#,
        r#"accepted_tcb_statuses = ["UpToDate"]"#,
    );
    assert_eq!(field(p.appraise_tdx(&sgx_quote())), "tdx.tcb_status");
    let p = edited(
        r#"accepted_advisory_ids = ["INTEL-SA-00289", "INTEL-SA-00615"]"#,
        r#"accepted_advisory_ids = ["INTEL-SA-00289"]"#,
    );
    let err = p.appraise_tdx(&sgx_quote()).unwrap_err();
    assert_eq!(
        err,
        PolicyViolation::NotAccepted {
            field: "tdx.advisory_ids".into(),
            got: "INTEL-SA-00615".into()
        }
    );
    let p = edited(
        r#"accepted_tees = ["tdx", "sgx"]"#,
        r#"accepted_tees = ["tdx"]"#,
    );
    assert_eq!(field(p.appraise_tdx(&sgx_quote())), "tdx.tee");
}

#[test]
fn each_measurement_register_is_named() {
    let v = tdx_quote();
    for name in ["mr_td", "rtmr0", "rtmr1", "rtmr2", "rtmr3"] {
        let text = EXAMPLE.replacen(
            &format!("{name} = ["),
            &format!("{name} = [\"{}\",\n", "ab".repeat(48)),
            1,
        );
        // Keep only the bogus value: drop the original list entries.
        let start = text.find(&format!("{name} = [")).unwrap();
        let end = start + text[start..].find(']').unwrap();
        let text = format!(
            "{}{name} = [\"{}\"]{}",
            &text[..start],
            "ab".repeat(48),
            &text[end + 1..]
        );
        let p = RegulatorPolicy::from_toml(text.as_bytes()).unwrap();
        assert_eq!(field(p.appraise_tdx(&v)), format!("tdx.{name}"), "{name}");
    }
    let p = edited(
        r#"td_attributes = ["0000001000000000"]"#,
        r#"td_attributes = ["0000000000000000"]"#,
    );
    assert_eq!(field(p.appraise_tdx(&v)), "tdx.td_attributes");
    let p = edited(
        "mr_signer = [\"815f",
        &format!("mr_signer = [\"{}\", \"815f", "00".repeat(32)),
    );
    p.appraise_tdx(&sgx_quote()).unwrap();
    let p = edited("mr_enclave = [\"33d8", "mr_enclave = [\"43d8");
    assert_eq!(field(p.appraise_tdx(&sgx_quote())), "tdx.mr_enclave");
}

#[test]
fn gpu_rules_are_named() {
    let v = gpu();
    let p = edited(
        r#"accepted_driver_versions = ["550.90.07", "#,
        r#"accepted_driver_versions = ["#,
    );
    assert_eq!(field(p.appraise_gpu(&v)), "gpu.driver_version");
    let p = edited(r#"["96.00.9f.00.01", "#, "[");
    assert_eq!(field(p.appraise_gpu(&v)), "gpu.vbios_version");
    let p = edited("require_nonce = false", "require_nonce = true");
    assert_eq!(field(p.appraise_gpu(&v)), "gpu.nonce_checked");
    let p = edited(
        "require_reference_measurements = false",
        "require_reference_measurements = true",
    );
    assert_eq!(field(p.appraise_gpu(&v)), "gpu.reference_measurements");
    let p = edited(
        "dangerous_accept_unchecked_revocation = true",
        "dangerous_accept_unchecked_revocation = false",
    );
    assert_eq!(field(p.appraise_gpu(&v)), "gpu.revocation");
}

#[test]
fn weights_hash_outside_the_list_is_refused() {
    let err = example().check_weights_hash(&"00".repeat(32)).unwrap_err();
    assert_eq!(err.field(), "models.weights_sha256");
    assert!(example().check_weights_hash("not hex").is_err());
}

#[test]
fn missing_sections_refuse_that_kind_of_evidence() {
    let p = RegulatorPolicy::from_toml(b"version = 1\n").unwrap();
    assert_eq!(field(p.appraise_tdx(&tdx_quote())), "tdx");
    assert_eq!(field(p.appraise_gpu(&gpu())), "gpu");
    assert_eq!(
        p.check_weights_hash(&"00".repeat(32)).unwrap_err().field(),
        "models"
    );
}

#[test]
fn malformed_policies_are_refused() {
    let unknown = EXAMPLE.replacen(
        "allow_smt = true",
        "allow_smt = true\nallow_everything = true",
        1,
    );
    assert!(matches!(
        RegulatorPolicy::from_toml(unknown.as_bytes()),
        Err(PolicyError::Toml(_))
    ));
    let missing = EXAMPLE.replacen("allow_smt = true\n", "", 1);
    assert!(matches!(
        RegulatorPolicy::from_toml(missing.as_bytes()),
        Err(PolicyError::Toml(_))
    ));
    let short = EXAMPLE.replacen(
        r#"td_attributes = ["0000001000000000"]"#,
        r#"td_attributes = ["00"]"#,
        1,
    );
    assert!(matches!(
        RegulatorPolicy::from_toml(short.as_bytes()),
        Err(PolicyError::BadHex { .. })
    ));
    let unknown_field = EXAMPLE.replacen(
        "[tdx.reference]\n",
        "[tdx.reference]\nmr_nothing = [\"00\"]\n",
        1,
    );
    assert!(matches!(
        RegulatorPolicy::from_toml(unknown_field.as_bytes()),
        Err(PolicyError::UnknownReference { .. })
    ));
    for (from, to) in [
        (
            r#"accepted_tees = ["tdx", "sgx"]"#,
            r#"accepted_tees = ["TDX"]"#,
        ),
        (
            r#"accepted_tcb_statuses = ["UpToDate", "#,
            r#"accepted_tcb_statuses = ["Revoked", "#,
        ),
    ] {
        let text = EXAMPLE.replacen(from, to, 1);
        assert!(
            matches!(
                RegulatorPolicy::from_toml(text.as_bytes()),
                Err(PolicyError::UnknownValue { .. })
            ),
            "{to}"
        );
    }
    let version = EXAMPLE.replacen("version = 1", "version = 2", 1);
    assert!(matches!(
        RegulatorPolicy::from_toml(version.as_bytes()),
        Err(PolicyError::Version { got: 2 })
    ));
    let big = vec![b'#'; knox_hw::policy::MAX_POLICY_BYTES + 1];
    assert!(matches!(
        RegulatorPolicy::from_toml(&big),
        Err(PolicyError::TooLarge { .. })
    ));
}
