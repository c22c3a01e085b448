//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

use std::sync::OnceLock;

/// An Intel TDX quote, parsed and then verified against the genuine collateral of the
/// vendored vector (`data/attestation/intel-tdx/dcap-qvl`); and the bytes read as
/// collateral.
pub fn tdx_quote(data: &[u8]) {
    use crate::tdx::{Collateral, parse_unverified, verify};
    static COLLATERAL: OnceLock<Option<Collateral>> = OnceLock::new();
    let _ = parse_unverified(data);
    let _ = Collateral::from_json(data);
    let collateral = COLLATERAL.get_or_init(|| {
        Collateral::from_json(include_bytes!(
            "../../../data/attestation/intel-tdx/dcap-qvl/tdx_quote_collateral.json"
        ))
        .ok()
    });
    if let Some(c) = collateral {
        // The vector's own time, so the chain's validity does not decide first.
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_736_000_000);
        let _ = verify(data, c, at);
    }
}

/// NVIDIA GPU evidence: SPDM evidence verified under the genuine certificate chain of
/// the vendored Hopper vector (so the parser past the chain is reached), the bytes as a
/// certificate chain, as serialized evidence, and as a reference-integrity manifest.
pub fn gpu_evidence(data: &[u8]) {
    use crate::nvidia::{GpuVerifier, parse_serialized, rim};
    const CHAIN: &[u8] =
        include_bytes!("../../../data/attestation/nvidia-gpu/nvtrust/hopperCertChain.txt");
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_736_000_000);
    let gpu = GpuVerifier::nvidia().at(at);
    let _ = gpu.verify(data, CHAIN, None);
    let _ = gpu.verify(&[], data, None);
    let _ = parse_serialized(data);
    let _ = rim::verify(data, at);
}

/// The regulator's hardware acceptance policy (`--policy`, TOML).
pub fn hw_policy(data: &[u8]) {
    let _ = crate::policy::RegulatorPolicy::from_toml(data);
}
