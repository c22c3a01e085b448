//! The key binding: what a hardware report's 64-byte `report_data` commits to.
//!
//! Layout v1: `report_data = SHA-512("knox/report-data/v1" ‖ 0x00 ‖ F(1, public key) ‖
//! F(2, nonce) ‖ F(3, gpu evidence digest) [‖ F(4, chain head)])`, where `F(tag, bytes) = tag (u8) ‖
//! len (u32 BE) ‖ bytes`, the nonce is the epoch/campaign nonce a regulator may supply
//! (empty when none), and the GPU evidence digest is the SHA-256 of the GPU evidence
//! (empty when there is none). The GPU's own nonce is derived from the key and the
//! epoch nonce ([`gpu_nonce`]), so GPU evidence is bound to the same key by content.
//! A refresh report, made at the end of a run, appends `F(4, c_N)`: it binds the run's
//! chain head to the same key with fresh hardware evidence.

use sha2::{Digest as _, Sha256, Sha512};

/// Domain tag of layout v1.
pub const REPORT_DATA_V1: &[u8] = b"knox/report-data/v1\0";

/// Domain tag of the GPU nonce.
pub const GPU_NONCE_V1: &[u8] = b"knox/gpu-nonce/v1\0";

/// Most bytes of epoch nonce accepted.
pub const MAX_NONCE: usize = 64;

/// The 64-byte `report_data` binding `public_key`, `nonce` and optional GPU evidence.
pub fn report_data(
    public_key: &[u8; 32],
    nonce: &[u8],
    gpu_evidence_sha256: Option<&[u8; 32]>,
) -> [u8; 64] {
    refresh_report_data(public_key, nonce, gpu_evidence_sha256, None)
}

/// The report_data of a refresh report binding `chain_head` too (start-up reports have
/// no chain head: [`report_data`]).
pub fn refresh_report_data(
    public_key: &[u8; 32],
    nonce: &[u8],
    gpu_evidence_sha256: Option<&[u8; 32]>,
    chain_head: Option<&[u8; 32]>,
) -> [u8; 64] {
    let mut h = Sha512::new();
    h.update(REPORT_DATA_V1);
    field(&mut h, 1, public_key);
    field(&mut h, 2, nonce);
    field(&mut h, 3, gpu_evidence_sha256.map_or(&[][..], |d| &d[..]));
    if let Some(head) = chain_head {
        field(&mut h, 4, head);
    }
    h.finalize().into()
}

fn field(h: &mut Sha512, tag: u8, bytes: &[u8]) {
    h.update([tag]);
    h.update(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    h.update(bytes);
}

/// The 32-byte nonce to request GPU evidence with: `SHA-256(tag ‖ public key ‖ nonce)`.
pub fn gpu_nonce(public_key: &[u8; 32], nonce: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(GPU_NONCE_V1);
    h.update(public_key);
    h.update(nonce);
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_report_data() {
        let pk = [7u8; 32];
        let base = report_data(&pk, b"epoch", None);
        assert_ne!(base, report_data(&[8u8; 32], b"epoch", None));
        assert_ne!(base, report_data(&pk, b"epoch2", None));
        assert_ne!(base, report_data(&pk, b"epoch", Some(&[0u8; 32])));
        // Length prefixes keep fields from sliding into each other.
        assert_ne!(
            report_data(&pk, b"", Some(&[1u8; 32])),
            report_data(&pk, &[1u8; 32], None)
        );
        assert_ne!(gpu_nonce(&pk, b"a"), gpu_nonce(&pk, b"b"));
    }
}
