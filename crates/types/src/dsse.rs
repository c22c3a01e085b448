//! DSSE envelopes carrying in-toto Statement v1 documents: how Knox signs its APM
//! attestation, its evidence summary and regulators' receipts.
//!
//! A signature covers `PAE(payloadType, payload)` = `"DSSEv1" SP LEN(type) SP type SP
//! LEN(payload) SP payload`, with lengths in ASCII decimal. The payload is the RFC 8785
//! canonical form of an in-toto Statement v1; verifiers reject any other encoding.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canon::{self, CanonError};

/// The payload type of in-toto statements.
pub const INTOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// `_type` of an in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// Predicate type of Knox's evidence summary.
pub const SUMMARY_PREDICATE: &str = "urn:knox:predicate:evidence-summary:v1";

/// Predicate type of Knox's APM attestation.
pub const APM_PREDICATE: &str = "urn:knox:predicate:apm:v1";

/// Predicate type of a regulator's verification receipt.
pub const RECEIPT_PREDICATE: &str = "urn:knox:predicate:verification-receipt:v1";

/// Largest payload a verifier decodes.
pub const MAX_PAYLOAD: usize = 1 << 20;

/// The pre-authentication encoding of DSSE v1.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// A DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// Base64 (standard, padded) of the payload bytes.
    pub payload: String,
    /// What the payload is.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// Signatures.
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature in an envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// Hex of `H("knox/key", public key)`.
    pub keyid: String,
    /// Base64 of the 64-byte Ed25519 signature over the PAE.
    pub sig: String,
}

/// An in-toto Statement v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub type_: String,
    /// What the statement is about.
    pub subject: Vec<Subject>,
    /// The predicate's type URI.
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The predicate.
    pub predicate: Value,
}

/// A statement's subject: a name and digests by algorithm.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// Name.
    pub name: String,
    /// Digests, keyed by algorithm (`sha256`, or Knox's own `knoxChainHead` …).
    pub digest: Map<String, Value>,
}

impl Statement {
    /// A statement about `subject` with a serializable predicate.
    pub fn new<P: Serialize>(
        subject: Vec<Subject>,
        predicate_type: &str,
        predicate: &P,
    ) -> Result<Self, CanonError> {
        Ok(Self {
            type_: STATEMENT_TYPE.into(),
            subject,
            predicate_type: predicate_type.into(),
            predicate: serde_json::to_value(predicate)?,
        })
    }

    /// The canonical payload bytes.
    pub fn to_payload(&self) -> Result<Vec<u8>, CanonError> {
        canon::to_canonical(self)
    }
}

impl Subject {
    /// A subject with one digest.
    pub fn one(name: impl Into<String>, alg: &str, hex: String) -> Self {
        let mut digest = Map::new();
        digest.insert(alg.into(), Value::String(hex));
        Self {
            name: name.into(),
            digest,
        }
    }
}

/// Why an envelope's payload is not an acceptable statement.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PayloadError {
    /// Not base64.
    #[error("payload is not base64")]
    Base64,
    /// Too large.
    #[error("payload exceeds {MAX_PAYLOAD} bytes")]
    TooLarge,
    /// Wrong payload type.
    #[error("payload type `{0}` is not `{INTOTO_PAYLOAD_TYPE}`")]
    Type(String),
    /// Not an in-toto statement.
    #[error("payload is not an in-toto Statement v1: {0}")]
    Statement(String),
    /// Not in canonical form.
    #[error("payload is not in RFC 8785 canonical form")]
    NotCanonical,
    /// Another predicate type than expected.
    #[error("predicate type `{got}`, expected `{expected}`")]
    Predicate {
        /// Found.
        got: String,
        /// Expected.
        expected: &'static str,
    },
}

impl Envelope {
    /// Base64-decodes the payload (size-capped).
    pub fn payload_bytes(&self) -> Result<Vec<u8>, PayloadError> {
        if self.payload.len() > MAX_PAYLOAD / 3 * 4 + 4 {
            return Err(PayloadError::TooLarge);
        }
        STANDARD
            .decode(&self.payload)
            .map_err(|_| PayloadError::Base64)
    }

    /// Decodes the payload as a canonical in-toto statement of `predicate_type`.
    /// (Signatures are checked separately, by `knox-attest`.)
    pub fn statement(&self, predicate_type: &'static str) -> Result<Statement, PayloadError> {
        if self.payload_type != INTOTO_PAYLOAD_TYPE {
            return Err(PayloadError::Type(self.payload_type.clone()));
        }
        let bytes = self.payload_bytes()?;
        let st: Statement =
            serde_json::from_slice(&bytes).map_err(|e| PayloadError::Statement(e.to_string()))?;
        if st.type_ != STATEMENT_TYPE {
            return Err(PayloadError::Statement(format!("_type `{}`", st.type_)));
        }
        if st
            .to_payload()
            .map_err(|e| PayloadError::Statement(e.to_string()))?
            != bytes
        {
            return Err(PayloadError::NotCanonical);
        }
        if st.predicate_type != predicate_type {
            return Err(PayloadError::Predicate {
                got: st.predicate_type,
                expected: predicate_type,
            });
        }
        Ok(st)
    }
}

/// Base64 (standard, padded).
pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes base64 (standard, padded).
pub fn unb64(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s).ok()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_specification_example() {
        // DSSE protocol.md: PAE("http://example.com/HelloWorld", "hello world").
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn non_canonical_or_foreign_payloads_are_rejected() {
        let st = Statement::new(
            vec![Subject::one("x", "sha256", "00".repeat(32))],
            SUMMARY_PREDICATE,
            &serde_json::json!({"a": 1}),
        )
        .unwrap();
        let good = Envelope {
            payload: b64(&st.to_payload().unwrap()),
            payload_type: INTOTO_PAYLOAD_TYPE.into(),
            signatures: vec![],
        };
        assert_eq!(good.statement(SUMMARY_PREDICATE).unwrap(), st);
        assert!(matches!(
            good.statement(APM_PREDICATE),
            Err(PayloadError::Predicate { .. })
        ));
        let pretty = serde_json::to_vec_pretty(&st).unwrap();
        let bad = Envelope {
            payload: b64(&pretty),
            ..good.clone()
        };
        assert_eq!(
            bad.statement(SUMMARY_PREDICATE),
            Err(PayloadError::NotCanonical)
        );
        let wrong_type = Envelope {
            payload_type: "text/plain".into(),
            ..good.clone()
        };
        assert!(matches!(
            wrong_type.statement(SUMMARY_PREDICATE),
            Err(PayloadError::Type(_))
        ));
        let junk = Envelope {
            payload: "!!".into(),
            ..good
        };
        assert_eq!(junk.statement(SUMMARY_PREDICATE), Err(PayloadError::Base64));
    }
}
