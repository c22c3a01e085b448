//! Focused checks on the Intel vectors: fields of the verified report, windows, pins, synthetic PKI, malformed input.

use knox_hw::tdx::{
    self, Collateral, INTEL_SGX_ROOT_KEY_ID, Rejection, TcbStatus, TdxError, TdxVerifier, Tee,
};
use sha2::{Digest, Sha256, Sha384};

use super::support::{read, read_hex, utc};

fn genuine() -> (Vec<u8>, Collateral) {
    (
        read("intel-tdx/dcap-qvl/tdx_quote"),
        Collateral::from_json(&read("intel-tdx/dcap-qvl/tdx_quote_collateral.json")).unwrap(),
    )
}

#[test]
fn genuine_tdx_quote_reports_its_fields() {
    let (quote, collateral) = genuine();
    let v = tdx::verify(&quote, &collateral, utc("2025-06-19T11:32:27Z")).unwrap();
    assert_eq!(
        (v.tee, v.quote_version, v.tcb_status),
        (Tee::Tdx, 4, TcbStatus::UpToDate)
    );
    assert!(v.advisory_ids.is_empty());
    assert_eq!(hex::encode(v.fmspc), "b0c06f000000");
    assert_eq!(v.platform.dynamic_platform, Some(true));
    assert_eq!(v.platform.cached_keys, Some(true));
    assert_eq!(v.platform.smt_enabled, Some(true));
    assert_eq!(v.root_key_id, INTEL_SGX_ROOT_KEY_ID);
    assert!(v.collateral.at_within_window());
    let td = v.report.as_td().unwrap();
    assert_eq!(td.body, "1.0");
    assert!(!td.debug());
    assert_eq!(
        hex::encode(td.mr_td),
        "91eb2b44d141d4ece09f0c75c2c53d247a3c68edd7fafe8a3520c942a604a407de03ae6dc5f87f27428b2538873118b7"
    );
    assert_eq!(td.rtmr[3], [0u8; 48]);
    // The report data equals what the unverified parse sees.
    let parsed = tdx::parse_unverified(&quote).unwrap();
    assert_eq!(parsed.report.report_data(), v.report.report_data());
    assert_eq!(parsed.padding, 70);
}

#[test]
fn td15ex_quote_exposes_its_extra_fields() {
    let quote = read("intel-tdx/dcap-qvl/tdx_quote_td15ex");
    let c = Collateral::from_json(&read("intel-tdx/dcap-qvl/tdx_quote_td15ex_collateral.json"))
        .unwrap();
    let v = tdx::verify(&quote, &c, utc("2026-10-08T01:09:46Z")).unwrap();
    let td = v.report.as_td().unwrap();
    assert_eq!((v.quote_version, td.body), (5, "1.5ex"));
    assert!(td.tee_tcb_svn2.is_some() && td.mr_service_td.is_some());
}

#[test]
fn verification_outside_the_collateral_window_is_refused() {
    let (quote, collateral) = genuine();
    let window = collateral.signed_window();
    for at in ["2025-06-19T09:00:00Z", "2025-08-01T00:00:00Z"] {
        match tdx::verify(&quote, &collateral, utc(at)) {
            Err(TdxError::CollateralNotCurrent { window: w, .. }) => assert_eq!(w, window),
            other => panic!("{at}: {other:?}"),
        }
    }
}

#[test]
fn the_pinned_intel_root_is_the_one_in_the_vectors() {
    let der = read("intel-tdx/dcap-qvl/TrustedRootCA.der");
    assert_eq!(
        hex::encode(Sha256::digest(&der)),
        "44a0196b2b99f889b8e149e95b807a350e7424964399e885a7cbb8ccfab674d3"
    );
    let cert: x509_cert::Certificate = der::Decode::from_der(&der).unwrap();
    let key = cert
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    assert_eq!(Sha384::digest(key).to_vec(), INTEL_SGX_ROOT_KEY_ID.to_vec());
    // The same quote verifies when the root is passed explicitly.
    let (quote, collateral) = genuine();
    TdxVerifier::dangerous_with_root(der)
        .unwrap()
        .verify(&quote, &collateral, utc("2025-06-19T11:32:27Z"))
        .unwrap();
}

/// Collateral assembled from Intel's QVL sample files (synthetic test PKI).
fn synthetic_collateral() -> Collateral {
    let dir = "intel-tdx/intel-qvl-synthetic/tdx";
    let text = |f: &str| String::from_utf8(read(&format!("{dir}/{f}"))).unwrap();
    // The signed body is the exact text of the inner object, as Intel serves it.
    let split = |json: String, key: &str| -> (String, String) {
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let start = json.find(&format!("\"{key}\":")).unwrap() + key.len() + 3;
        let end = json.rfind(",\"signature\"").unwrap();
        (
            json[start..end].to_owned(),
            v["signature"].as_str().unwrap().to_owned(),
        )
    };
    let (tcb_info, tcb_sig) = split(text("tcbInfo.json"), "tcbInfo");
    let (qe_identity, qe_sig) = split(text("qeIdentity.json"), "enclaveIdentity");
    let pck_chain = format!("{}{}", text("pckCert.pem"), text("pckSignChain.pem"));
    let json = serde_json::json!({
        "pck_crl_issuer_chain": text("pckSignChain.pem"),
        "root_ca_crl": hex::encode(read(&format!("{dir}/rootCaCrl.der"))),
        "pck_crl": hex::encode(read(&format!("{dir}/intermediateCaCrl.der"))),
        "tcb_info_issuer_chain": text("tcbSignChain.pem"),
        "tcb_info": tcb_info,
        "tcb_info_signature": tcb_sig,
        "qe_identity_issuer_chain": text("tcbSignChain.pem"),
        "qe_identity": qe_identity,
        "qe_identity_signature": qe_sig,
        "pck_certificate_chain": pck_chain,
    });
    Collateral::from_json(json.to_string().as_bytes()).unwrap()
}

/// Called from the folder walk for `intel-qvl-synthetic/tdx/quote.dat`. (The
/// positive half, verifying under the synthetic root, is out of reach: its TCB
/// info carries SVNs above 255, which dcap-qvl refuses to decode.)
pub(super) fn synthetic_fails_against_genuine_root() {
    let quote = read("intel-tdx/intel-qvl-synthetic/tdx/quote.dat");
    let collateral = synthetic_collateral();
    let at = utc("2023-01-01T00:00:00Z");
    match tdx::verify(&quote, &collateral, at) {
        Err(TdxError::Rejected { kind, reason }) => {
            assert_eq!(kind, Rejection::CertificateChain, "{reason}");
        }
        other => panic!("synthetic quote: {other:?}"),
    }
}

#[test]
fn synthetic_pki_is_refused_by_the_genuine_root() {
    synthetic_fails_against_genuine_root();
}

#[test]
fn hex_quotes_need_newer_collateral() {
    let c = Collateral::from_json(&read("intel-tdx/dcap-qvl/tdx_quote_collateral.json")).unwrap();
    for f in [
        "intel-tdx/dcap-qvl/tdx-quote.hex",
        "intel-tdx/dcap-qvl/quote-from-tappd.hex",
    ] {
        let err = tdx::verify(&read_hex(f), &c, utc("2025-06-19T11:32:27Z")).unwrap_err();
        assert!(
            matches!(
                err,
                TdxError::Rejected {
                    kind: Rejection::NoMatchingTcbLevel,
                    ..
                }
            ),
            "{f}: {err}"
        );
    }
}

#[test]
fn trailing_garbage_is_refused_but_zero_padding_is_not() {
    let (mut quote, _) = genuine();
    tdx::parse_unverified(&quote).unwrap();
    *quote.last_mut().unwrap() = 1;
    assert!(matches!(
        tdx::parse_unverified(&quote),
        Err(TdxError::TrailingBytes { extra: 70 })
    ));
}

#[test]
fn oversized_collateral_is_refused_before_parsing() {
    let big = vec![b' '; tdx::MAX_COLLATERAL_BYTES + 1];
    assert!(matches!(
        Collateral::from_json(&big),
        Err(tdx::CollateralError::TooLarge { .. })
    ));
}
