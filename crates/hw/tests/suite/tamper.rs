//! Property tests: any single-byte change in the signed region of genuine evidence is rejected, and arbitrary bytes never panic a parser.

use knox_hw::nvidia;
use knox_hw::tdx::{self, Collateral};
use proptest::prelude::*;

use super::support::{read, read_hex, utc};

fn tdx_inputs() -> (Vec<u8>, Collateral, usize) {
    let quote = read("intel-tdx/dcap-qvl/tdx_quote");
    let collateral =
        Collateral::from_json(&read("intel-tdx/dcap-qvl/tdx_quote_collateral.json")).unwrap();
    let signed = tdx::parse_unverified(&quote).unwrap().signed_len;
    (quote, collateral, signed)
}

/// Evidence and the length of request || response before the signature.
fn gpu_inputs() -> (Vec<u8>, Vec<u8>, usize) {
    let evidence = read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt");
    let chain = read("nvidia-gpu/nvtrust/hopperCertChain.txt");
    let signed = evidence.len() - nvidia::SIGNATURE_LEN;
    (evidence, chain, signed)
}

/// An empty chain, or one of line breaks only, is refused: `x509-cert`'s PEM chain reader
/// computed its length minus one and panicked on it (found by the property test below).
#[test]
fn an_empty_certificate_chain_is_refused_not_panicked_on() {
    let (evidence, _, _) = gpu_inputs();
    for chain in [&b""[..], b"\n", b"\r\n\n"] {
        assert!(nvidia::verify(&evidence, chain, None).is_err(), "{chain:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn flipped_tdx_quote_byte_is_rejected(pos in 0usize..10_000, bits in 1u8..=255) {
        let (mut quote, collateral, signed) = tdx_inputs();
        let pos = pos % signed;
        quote[pos] ^= bits;
        prop_assert!(tdx::verify(&quote, &collateral, utc("2025-06-19T11:32:27Z")).is_err());
    }

    #[test]
    fn flipped_gpu_evidence_byte_is_rejected(pos in 0usize..10_000, bits in 1u8..=255) {
        let (mut evidence, chain, signed) = gpu_inputs();
        let pos = pos % signed;
        evidence[pos] ^= bits;
        prop_assert!(nvidia::verify(&evidence, &chain, None).is_err());
    }

    #[test]
    fn flipped_gpu_signature_byte_is_rejected(pos in 0usize..96, bits in 1u8..=255) {
        let (mut evidence, chain, signed) = gpu_inputs();
        evidence[signed + pos] ^= bits;
        prop_assert!(nvidia::verify(&evidence, &chain, None).is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..6000)) {
        let _ = tdx::parse_unverified(&bytes);
        let _ = Collateral::from_json(&bytes);
        let _ = nvidia::parse_serialized(&bytes);
        let _ = nvidia::rim::verify(&bytes, utc("2025-06-01T00:00:00Z"));
        let _ = knox_hw::policy::RegulatorPolicy::from_toml(&bytes);
        let chain = read("nvidia-gpu/nvtrust/hopperCertChain.txt");
        let _ = nvidia::verify(&bytes, &chain, None);
        let _ = nvidia::verify(&read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt"), &bytes, None);
    }

    #[test]
    fn truncated_gpu_evidence_is_rejected(len in 0usize..4117) {
        let (evidence, chain, _) = gpu_inputs();
        prop_assert!(nvidia::verify(&evidence[..len], &chain, None).is_err());
    }
}
