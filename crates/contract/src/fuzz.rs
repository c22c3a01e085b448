//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

use std::sync::OnceLock;

/// A signed contract, a contract, an action and an approval token, as the contract
/// reader and the decision function take them: the bytes are tried as a signed
/// envelope, then as JSON `{"contract", "action", "approval"}` (any part missing: the
/// whole value), decided both under that value as a contract and under a valid one.
pub fn contract(data: &[u8]) {
    use crate::{State, decide, decide_json};
    use serde_json::Value;
    static VALID: OnceLock<(crate::format::Contract, knox_types::digest::Digest)> = OnceLock::new();
    static AUTHORITY: OnceLock<knox_types::bundle::PublicKey> = OnceLock::new();
    let authority =
        AUTHORITY.get_or_init(|| knox_attest::PartyKey::from_seed([7; 32]).public_key());
    let _ = crate::signed::verify_bytes(data, authority);
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let c = v.get("contract").unwrap_or(&v);
    let a = v.get("action").unwrap_or(&v);
    let ap = v.get("approval");
    let state = State::default();
    let _ = decide_json(c, a, ap, &state, 1_800_000_000_000);
    let valid = VALID.get_or_init(|| {
        let mut t = crate::example::template(0, 1 << 53, &"0".repeat(64));
        t.approvers.insert(
            "alice".into(),
            hex::encode(knox_attest::PartyKey::from_seed([1; 32]).public_bytes()),
        );
        t.approval_required.insert(crate::Impact::Low);
        let h = t.hash();
        (t, h)
    });
    let _ = decide(&valid.0, &valid.1, a, ap, &state, 1_800_000_000_000);
}
