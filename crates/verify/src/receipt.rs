//! Verification receipts: a regulator signs what it verified (bundle digest, policy
//! digest, result, time) with its own key, so several regulators who do not trust each
//! other can each vouch for — or against — the same bundle.

use knox_attest::PartyKey;
use knox_attest::dsse::{self, EnvelopeError};
use knox_types::bundle::PublicKey;
use knox_types::canon::CanonError;
use knox_types::digest::Digest;
use knox_types::dsse::{Envelope, RECEIPT_PREDICATE, Statement, Subject};
use serde::{Deserialize, Serialize};

use crate::Report;

/// Format identifier of receipt files.
pub const RECEIPT_FORMAT: &str = "knox-receipt/v1";

/// A receipt file: the regulator's public key and the signed envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// [`RECEIPT_FORMAT`].
    pub format: String,
    /// The regulator's public key.
    pub key: PublicKey,
    /// In-toto statement about the bundle, signed by that key.
    pub envelope: Envelope,
}

/// What a regulator attests about a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptPredicate {
    /// Run identifier of the bundle.
    pub run_id: String,
    /// `complete`, `prefix`, `tampered` or `refused`.
    pub result: String,
    /// Why, when not complete.
    pub reason: Option<String>,
    /// Whether hardware vouched for the bundle's key.
    pub hardware_backed: bool,
    /// SHA-256 of the regulator policy file used, if any.
    pub policy_sha256: Option<Digest>,
    /// When the verification ran (Unix seconds).
    pub verified_at: u64,
    /// Which verifier produced the result.
    pub verifier: String,
}

/// Issues a receipt for `bundle` (its file bytes) with the regulator's `key`.
pub fn issue(
    key: &PartyKey,
    bundle: &[u8],
    report: &Report,
    policy: Option<&[u8]>,
    now: u64,
) -> Result<Receipt, CanonError> {
    let reason = match &report.outcome {
        crate::Outcome::Tampered { reason, .. } | crate::Outcome::Refused { reason } => {
            Some(reason.clone())
        }
        _ => None,
    };
    let predicate = ReceiptPredicate {
        run_id: report.run_id.clone(),
        result: report.outcome.name().into(),
        reason,
        hardware_backed: report.hardware_backed,
        policy_sha256: policy.map(Digest::sha256),
        verified_at: now,
        verifier: format!("knox-verify {}", env!("CARGO_PKG_VERSION")),
    };
    let subject = Subject::one(
        format!("knox-bundle:{}", report.run_id),
        "sha256",
        Digest::sha256(bundle).to_hex(),
    );
    let envelope = dsse::sign(
        key,
        &Statement::new(vec![subject], RECEIPT_PREDICATE, &predicate)?,
    )?;
    Ok(Receipt {
        format: RECEIPT_FORMAT.into(),
        key: key.public_key(),
        envelope,
    })
}

/// Why a receipt does not vouch for a bundle.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// Not a receipt file.
    #[error("not a knox receipt: {0}")]
    Format(String),
    /// The envelope does not verify under the receipt's key.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The receipt is about another bundle.
    #[error("the receipt is for bundle sha256 {got}, this bundle is {expected}")]
    OtherBundle {
        /// Digest in the receipt.
        got: String,
        /// Digest of the bundle given.
        expected: String,
    },
}

/// A receipt that checked out: who signed it and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedReceipt {
    /// `H("knox/key", regulator key)`.
    pub regulator: Digest,
    /// What the regulator attests.
    pub predicate: ReceiptPredicate,
}

/// Checks a receipt (file bytes) against a bundle (file bytes).
pub fn check(receipt: &[u8], bundle: &[u8]) -> Result<CheckedReceipt, ReceiptError> {
    if receipt.len() > 1 << 20 {
        return Err(ReceiptError::Format("larger than 1 MiB".into()));
    }
    let r: Receipt =
        knox_types::json::from_slice(receipt).map_err(|e| ReceiptError::Format(e.to_string()))?;
    if r.format != RECEIPT_FORMAT {
        return Err(ReceiptError::Format(format!("format `{}`", r.format)));
    }
    let st = dsse::verify(&r.envelope, &r.key, RECEIPT_PREDICATE)?;
    let expected = Digest::sha256(bundle).to_hex();
    let got = st
        .subject
        .first()
        .and_then(|s| s.digest.get("sha256"))
        .and_then(|d| d.as_str())
        .unwrap_or_default();
    if st.subject.len() != 1 || got != expected {
        return Err(ReceiptError::OtherBundle {
            got: got.to_string(),
            expected,
        });
    }
    let predicate = ReceiptPredicate::deserialize(&st.predicate)
        .map_err(|e| ReceiptError::Format(e.to_string()))?;
    Ok(CheckedReceipt {
        regulator: knox_attest::key::key_id(&r.key.public_key.0),
        predicate,
    })
}
