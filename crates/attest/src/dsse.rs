//! Signing and verifying DSSE envelopes with Ed25519 keys.

use knox_types::bundle::PublicKey;
use knox_types::canon::CanonError;
use knox_types::dsse::{
    self, Envelope, EnvelopeSignature, INTOTO_PAYLOAD_TYPE, PayloadError, Statement,
};

use crate::key::{SignatureError, Signer, key_id, verify_signature};

/// Why an envelope does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    /// The payload is not an acceptable statement.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// No signature by the expected key.
    #[error("no signature by key {0}")]
    NoSignature(String),
    /// More than one signature: Knox envelopes carry exactly one.
    #[error("{0} signatures: exactly one is expected")]
    Count(usize),
    /// The signature is not base64 or does not verify.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// The signature is not base64.
    #[error("signature is not base64")]
    Base64,
}

/// Signs `statement` (canonical payload) with `key`.
pub fn sign(key: &(impl Signer + ?Sized), statement: &Statement) -> Result<Envelope, CanonError> {
    let payload = statement.to_payload()?;
    let sig = key.sign(b"", &dsse::pae(INTOTO_PAYLOAD_TYPE, &payload));
    Ok(Envelope {
        payload: dsse::b64(&payload),
        payload_type: INTOTO_PAYLOAD_TYPE.into(),
        signatures: vec![EnvelopeSignature {
            keyid: key.key_id().to_hex(),
            sig: dsse::b64(&sig.0),
        }],
    })
}

/// Verifies that `env` carries exactly one valid signature by `key` over a canonical
/// statement of `predicate`, and returns the statement.
pub fn verify(
    env: &Envelope,
    key: &PublicKey,
    predicate: &'static str,
) -> Result<Statement, EnvelopeError> {
    let statement = env.statement(predicate)?;
    let [s] = env.signatures.as_slice() else {
        return Err(EnvelopeError::Count(env.signatures.len()));
    };
    let id = key_id(&key.public_key.0).to_hex();
    if s.keyid != id {
        return Err(EnvelopeError::NoSignature(id));
    }
    let sig = dsse::unb64(&s.sig).ok_or(EnvelopeError::Base64)?;
    let payload = env.payload_bytes()?;
    verify_signature(
        key,
        b"",
        &dsse::pae(&env.payload_type, &payload),
        &knox_types::bytes::HexBytes(sig),
    )?;
    Ok(statement)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use crate::TeeKey;
    use knox_types::dsse::{SUMMARY_PREDICATE, Subject};

    #[test]
    fn round_trip_and_rejections() {
        let k = TeeKey::generate().unwrap();
        let st = Statement::new(
            vec![Subject::one("s", "sha256", "ab".repeat(32))],
            SUMMARY_PREDICATE,
            &serde_json::json!({"n": 1}),
        )
        .unwrap();
        let env = sign(&k, &st).unwrap();
        assert_eq!(
            verify(&env, &k.public_key(), SUMMARY_PREDICATE).unwrap(),
            st
        );
        let other = TeeKey::generate().unwrap();
        assert!(matches!(
            verify(&env, &other.public_key(), SUMMARY_PREDICATE),
            Err(EnvelopeError::NoSignature(_))
        ));
        let mut forged = env.clone();
        let st2 = Statement::new(
            st.subject.clone(),
            SUMMARY_PREDICATE,
            &serde_json::json!({"n": 2}),
        )
        .unwrap();
        forged.payload = dsse::b64(&st2.to_payload().unwrap());
        assert!(matches!(
            verify(&forged, &k.public_key(), SUMMARY_PREDICATE),
            Err(EnvelopeError::Signature(_))
        ));
        let mut two = env.clone();
        two.signatures.push(two.signatures[0].clone());
        assert_eq!(
            verify(&two, &k.public_key(), SUMMARY_PREDICATE),
            Err(EnvelopeError::Count(2))
        );
    }
}
