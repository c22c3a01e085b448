//! Focused checks on the NVIDIA vectors: parsed fields against NVIDIA's and trustee's own parses, nonce, pins, RIMs, references.

use knox_hw::nvidia::rim::{self, RimError, RimVerifier};
use knox_hw::nvidia::{
    self, ChainError, GpuError, GpuVerifier, NVIDIA_DEVICE_IDENTITY_ROOT_SHA256, ReferenceCheck,
    ReferenceError, ReferenceMeasurements, RevocationStatus, parse_serialized,
};
use sha2::{Digest, Sha256};

use super::support::{read, read_hex, utc};

fn nvtrust() -> (Vec<u8>, Vec<u8>) {
    (
        read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt"),
        read("nvidia-gpu/nvtrust/hopperCertChain.txt"),
    )
}

#[test]
fn parse_matches_trustees_expected_claims() {
    let (evidence, chain) = nvtrust();
    let nonce: [u8; 32] =
        hex::decode("931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb")
            .unwrap()
            .try_into()
            .unwrap();
    let v = nvidia::verify(&evidence, &chain, Some(nonce)).unwrap();
    let claims: serde_json::Value = serde_json::from_slice(&read(
        "nvidia-gpu/trustee/hopperAttestationReport-claims.txt",
    ))
    .unwrap();
    let config = &claims["config"];
    assert_eq!(
        v.driver_version.as_deref(),
        config["driver_version"].as_str()
    );
    assert_eq!(v.vbios_version.as_deref(), config["vbios_version"].as_str());
    assert_eq!(Some(hex::encode(v.fwid).as_str()), config["fwid"].as_str());
    let measurements = claims["measurements"].as_object().unwrap();
    assert_eq!(measurements.len(), v.measurements.len());
    for block in &v.measurements {
        let want = measurements[&block.index.to_string()].as_str().unwrap();
        assert_eq!(
            hex::encode(&block.value),
            want,
            "measurement {}",
            block.index
        );
    }
    assert_eq!(v.chain_subjects.len(), 5);
    assert!(
        v.revocation
            .iter()
            .all(|r| r.status == RevocationStatus::NotChecked)
    );
    assert_eq!(v.reference, ReferenceCheck::NotSupplied);
}

#[test]
fn coco_capture_tolerates_one_zero_byte_of_padding() {
    let evidence = read_hex("nvidia-gpu/trustee/hopper_coco_report1.txt");
    let chain = read("nvidia-gpu/trustee/hopper_coco_certs1.txt");
    // The nonce is the first 32 bytes of the TDX report data the CoCo run used.
    let nonce: [u8; 32] =
        hex::decode("87d8e24ab336adafe228d49e83d745f6dba4ae505372b6a5704820856b343fec")
            .unwrap()
            .try_into()
            .unwrap();
    let v = nvidia::verify(&evidence, &chain, Some(nonce)).unwrap();
    assert_eq!(
        (v.padding, v.driver_version.as_deref()),
        (1, Some("580.95.05"))
    );
    let mut bad = evidence.clone();
    *bad.last_mut().unwrap() = 7;
    assert!(matches!(
        nvidia::verify(&bad, &chain, None),
        Err(GpuError::Spdm(_))
    ));
}

#[test]
fn a_different_nonce_is_refused() {
    let (evidence, chain) = nvtrust();
    let err = nvidia::verify(&evidence, &chain, Some([0; 32])).unwrap_err();
    assert!(matches!(err, GpuError::NonceMismatch { .. }), "{err}");
}

#[test]
fn the_pinned_nvidia_root_is_the_one_in_the_vectors() {
    let pem = read("nvidia-gpu/nvtrust/verifier_device_root.pem");
    let (_, der) = der::pem::decode_vec(&pem).unwrap();
    assert_eq!(
        Sha256::digest(&der).to_vec(),
        NVIDIA_DEVICE_IDENTITY_ROOT_SHA256.to_vec()
    );
    let (evidence, chain) = nvtrust();
    let err = GpuVerifier::dangerous_with_root([7; 32])
        .verify(&evidence, &chain, None)
        .unwrap_err();
    assert!(
        matches!(err, GpuError::Chain(ChainError::UntrustedRoot { .. })),
        "{err}"
    );
}

#[test]
fn certificates_are_checked_at_the_given_time() {
    let (evidence, chain) = nvtrust();
    let err = GpuVerifier::nvidia()
        .at(utc("2019-01-01T00:00:00Z"))
        .verify(&evidence, &chain, None)
        .unwrap_err();
    assert!(
        matches!(err, GpuError::Chain(ChainError::NotValidAt { .. })),
        "{err}"
    );
}

#[test]
fn certificate_on_hold_is_invisible_offline_and_reported_so() {
    let entry = parse_serialized(&read(
        "nvidia-gpu/attestation-sdk/hopper_evidence_cert_hold.json",
    ))
    .unwrap()
    .remove(0);
    let v = nvidia::verify(&entry.evidence, &entry.certificate_chain_pem, None).unwrap();
    // No stapled OCSP response ships with this vector: the hold is not visible
    // and every certificate is reported as not checked (the policy decides).
    assert_eq!(v.revocation.len(), 4);
    assert!(
        v.revocation
            .iter()
            .all(|r| r.status == RevocationStatus::NotChecked)
    );
}

#[test]
fn measurements_match_references_built_from_them() {
    let (evidence, chain) = nvtrust();
    let v = nvidia::verify(&evidence, &chain, None).unwrap();
    let mut reference = ReferenceMeasurements::new("recorded golden values");
    for block in v.measurements.iter().filter(|b| b.index % 2 == 0) {
        reference.insert(block.index, vec![vec![0; 48], block.value.clone()]);
    }
    let v = GpuVerifier::nvidia()
        .reference(reference)
        .verify(&evidence, &chain, None)
        .unwrap();
    assert!(matches!(
        v.reference,
        ReferenceCheck::Matched { indices: 32, .. }
    ));
}

#[test]
fn measurements_differ_from_the_test_no_gpu_rims() {
    // The README says these RIMs do not describe the current nvtrust report.
    let at = utc("2024-06-01T00:00:00Z");
    let driver = rim::verify(
        &read("nvidia-gpu/nvtrust/Driver_RIM_test_no_gpu.swidtag"),
        at,
    )
    .unwrap();
    let vbios = rim::verify(
        &read("nvidia-gpu/nvtrust/1010_0200_882_96005E0001_test_no_gpu.swidtag"),
        at,
    )
    .unwrap();
    let (evidence, chain) = nvtrust();
    let err = GpuVerifier::nvidia()
        .reference(driver.measurements)
        .reference(vbios.measurements)
        .verify(&evidence, &chain, None)
        .unwrap_err();
    assert!(
        matches!(err, GpuError::Reference(ReferenceError::Mismatch { .. })),
        "{err}"
    );
}

#[test]
fn overlapping_references_are_refused() {
    let (evidence, chain) = nvtrust();
    let mut a = ReferenceMeasurements::new("a");
    a.insert(1, vec![vec![0; 48]]);
    let b = a.clone();
    let err = GpuVerifier::nvidia()
        .reference(a)
        .reference(b)
        .verify(&evidence, &chain, None)
        .unwrap_err();
    assert!(
        matches!(
            err,
            GpuError::Reference(ReferenceError::Overlap { index: 1, .. })
        ),
        "{err}"
    );
}

const DRIVER_RIM: &str = "nvidia-gpu/attestation-sdk/NV_GPU_DRIVER_GH100_550.144.03.xml";

#[test]
fn genuine_driver_rim_verifies_and_lists_active_measurements() {
    let v = rim::verify(&read(DRIVER_RIM), utc("2025-06-01T00:00:00Z")).unwrap();
    assert_eq!(
        (v.name.as_str(), v.version.as_deref()),
        ("GH100", Some("550.144.03"))
    );
    assert!(v.signer.contains("HCC RIM L4 Signer"));
    // RIM index 7 (active) is SPDM block 8.
    let hash = &v.measurements.entries()[&8][0];
    assert_eq!(
        hex::encode(hash),
        "4a5e4b3d501fe31f91bd8b6f2921b58437704a504dbedba971440e840c938c805612689ae3ac04b1009515a179063d49"
    );
}

#[test]
fn edited_rim_content_breaks_the_digest() {
    let text = String::from_utf8(read(DRIVER_RIM)).unwrap();
    let edited = text.replacen("4a5e4b3d", "4a5e4b3e", 1);
    let err = rim::verify(edited.as_bytes(), utc("2025-06-01T00:00:00Z")).unwrap_err();
    assert_eq!(err, RimError::DigestMismatch);
}

#[test]
fn rim_under_another_pinned_root_is_refused() {
    let pem = read("nvidia-gpu/attestation-sdk/incorrect_rim_root.crt");
    let (_, der) = der::pem::decode_vec(&pem).unwrap();
    let pin: [u8; 32] = Sha256::digest(&der).into();
    let err = RimVerifier::dangerous_with_root(pin)
        .verify(&read(DRIVER_RIM), utc("2025-06-01T00:00:00Z"))
        .unwrap_err();
    assert!(
        matches!(err, RimError::Chain(ChainError::UntrustedRoot { .. })),
        "{err}"
    );
    // And the RIM signer certificate expires on 2026-12-30.
    let err = rim::verify(&read(DRIVER_RIM), utc("2027-06-01T00:00:00Z")).unwrap_err();
    assert!(
        matches!(
            err,
            RimError::Chain(ChainError::NotValidAt { index: 0, .. })
        ),
        "{err}"
    );
}

#[test]
fn rim_with_a_dtd_is_refused() {
    let doc = b"<!DOCTYPE x [<!ENTITY a \"b\">]><x>&a;</x>";
    assert!(matches!(
        rim::verify(doc, utc("2025-06-01T00:00:00Z")),
        Err(RimError::Xml(_))
    ));
}
