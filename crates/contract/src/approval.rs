//! Human approval tokens: an approver listed in the contract signs, for one action of
//! one contract, a short-lived single-use token.
//!
//! The signature is Ed25519 over `"knox/approval\0" ‖ canonical(body)`.

use std::collections::BTreeSet;

use knox_attest::PartyKey;
use knox_attest::key::verify_signature;
use knox_types::bytes::HexBytes;
use knox_types::digest::Digest;
use serde::{Deserialize, Serialize};

use crate::format::Contract;

/// Domain separation of approval signatures.
pub const APPROVAL_CONTEXT: &[u8] = b"knox/approval\0";
/// Nonce length in bytes.
pub const NONCE_BYTES: usize = 16;

/// What an approver signs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalBody {
    /// The contract the action runs under.
    pub contract_hash: Digest,
    /// `H(α)` of the approved action.
    pub action_hash: Digest,
    /// The approver's name in the contract.
    pub approver: String,
    /// 16 random bytes: the token is accepted once.
    pub nonce: HexBytes,
    /// When it was signed (Unix ms).
    pub issued_at_ms: u64,
    /// When it stops being accepted (Unix ms).
    pub expires_at_ms: u64,
}

/// A signed approval token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// The signed body.
    pub body: ApprovalBody,
    /// Ed25519 signature.
    pub sig: HexBytes,
}

/// Why an approval token is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalError {
    /// Not an approval token.
    #[error("malformed approval token: {0}")]
    Malformed(String),
    /// The approver is not listed in the contract.
    #[error("approver `{0}` is not listed in the contract")]
    Unlisted(String),
    /// The signature does not verify under the listed key.
    #[error("approval signature does not verify under approver `{0}`'s key")]
    Signature(String),
    /// The token is for another contract.
    #[error("approval is for another contract")]
    OtherContract,
    /// The token is for another action (swapped).
    #[error("approval is for another action")]
    OtherAction,
    /// The token has expired or is not valid yet.
    #[error("approval not valid now (issued {issued} ms, expires {expires} ms, now {now} ms)")]
    Expired {
        /// Issued.
        issued: u64,
        /// Expires.
        expires: u64,
        /// Now.
        now: u64,
    },
    /// The token claims a longer life than the contract allows.
    #[error("approval lives {0} ms, more than the contract allows")]
    TooLong(u64),
    /// The token was already used.
    #[error("approval already used (replayed)")]
    Replayed,
}

/// Signs an approval of `action_hash` under `contract_hash` by `approver`.
pub fn sign(
    key: &PartyKey,
    approver: &str,
    contract_hash: Digest,
    action_hash: Digest,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<Approval, ApprovalError> {
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce).map_err(|e| ApprovalError::Malformed(e.to_string()))?;
    let body = ApprovalBody {
        contract_hash,
        action_hash,
        approver: approver.into(),
        nonce: HexBytes(nonce.to_vec()),
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    };
    let msg = knox_types::canon::to_canonical(&body)
        .map_err(|e| ApprovalError::Malformed(e.to_string()))?;
    let sig = key.sign(APPROVAL_CONTEXT, &msg);
    Ok(Approval { body, sig })
}

impl Approval {
    /// The nonce in hex: the single-use key.
    pub fn nonce_hex(&self) -> String {
        hex::encode(&self.body.nonce.0)
    }
}

/// Checks `token` for `action_hash` under the contract: listed approver, signature,
/// contract, action, validity window, lifetime, single use (`used` holds the nonces
/// already accepted in this session).
pub fn check(
    contract: &Contract,
    contract_hash: &Digest,
    action_hash: &Digest,
    token: &Approval,
    now_ms: u64,
    used: &BTreeSet<String>,
) -> Result<(), ApprovalError> {
    let b = &token.body;
    if b.nonce.0.len() != NONCE_BYTES {
        return Err(ApprovalError::Malformed("nonce must be 16 bytes".into()));
    }
    let key = contract
        .approver(&b.approver)
        .ok_or_else(|| ApprovalError::Unlisted(b.approver.chars().take(64).collect()))?;
    let msg =
        knox_types::canon::to_canonical(b).map_err(|e| ApprovalError::Malformed(e.to_string()))?;
    verify_signature(&key, APPROVAL_CONTEXT, &msg, &token.sig)
        .map_err(|_| ApprovalError::Signature(b.approver.clone()))?;
    if b.contract_hash != *contract_hash {
        return Err(ApprovalError::OtherContract);
    }
    if b.action_hash != *action_hash {
        return Err(ApprovalError::OtherAction);
    }
    let life = b.expires_at_ms.saturating_sub(b.issued_at_ms);
    if life > contract.max_approval_ttl_ms {
        return Err(ApprovalError::TooLong(life));
    }
    if now_ms < b.issued_at_ms || now_ms > b.expires_at_ms {
        return Err(ApprovalError::Expired {
            issued: b.issued_at_ms,
            expires: b.expires_at_ms,
            now: now_ms,
        });
    }
    if used.contains(&token.nonce_hex()) {
        return Err(ApprovalError::Replayed);
    }
    Ok(())
}
