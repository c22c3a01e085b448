//! Issuing and checking execution grants.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use knox_types::Action;
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::canon::{self, CanonError};
use knox_types::digest::Digest;
use knox_types::grant::{GRANT_CONTEXT, Grant, GrantBody};

use crate::key::{KeyGenError, TeeKey, verify_signature};

/// How long a grant stays valid.
pub const GRANT_TTL_MS: u64 = 30_000;

/// Why a grant was not honoured.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// The signature does not verify under the monitor's key.
    #[error("grant signature does not verify")]
    Signature,
    /// The grant is for another run.
    #[error("grant is for another APM")]
    OtherRun,
    /// The grant is for another action.
    #[error("grant is for another action")]
    OtherAction,
    /// The grant has expired.
    #[error("grant expired at {0} ms")]
    Expired(u64),
    /// The grant was already used.
    #[error("grant already used")]
    Replayed,
    /// The grant is malformed.
    #[error("malformed grant: {0}")]
    Malformed(String),
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Issues a grant for `action`, proposed by `agent` and recorded as node `tool_call`.
pub fn issue(
    key: &TeeKey,
    apm_hash: Digest,
    action: &Action,
    agent: &str,
    tool_call: u64,
) -> Result<Grant, GrantIssueError> {
    let mut nonce = [0u8; 16];
    getrandom::fill(&mut nonce).map_err(|e| GrantIssueError::Random(e.to_string()))?;
    let body = GrantBody {
        apm_hash,
        action_hash: action.hash(),
        agent: agent.into(),
        tool_call,
        nonce: HexBytes(nonce.to_vec()),
        expires_at_ms: now_ms().saturating_add(GRANT_TTL_MS),
    };
    let sig = key.sign(GRANT_CONTEXT, &canon::to_canonical(&body)?);
    Ok(Grant { body, sig })
}

/// Why a grant could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum GrantIssueError {
    /// No randomness.
    #[error("no randomness for a grant nonce: {0}")]
    Random(String),
    /// Serialization failed.
    #[error(transparent)]
    Canon(#[from] CanonError),
    /// Key failure.
    #[error(transparent)]
    Key(#[from] KeyGenError),
}

/// Checks a grant's signature, run, action and expiry (single use is the caller's
/// bookkeeping: see the broker).
pub fn check(
    grant: &Grant,
    monitor: &PublicKey,
    apm_hash: &Digest,
    action: &Action,
    now_ms: u64,
) -> Result<(), GrantError> {
    let msg = canon::to_canonical(&grant.body).map_err(|e| GrantError::Malformed(e.to_string()))?;
    verify_signature(monitor, GRANT_CONTEXT, &msg, &grant.sig)
        .map_err(|_| GrantError::Signature)?;
    if grant.body.apm_hash != *apm_hash {
        return Err(GrantError::OtherRun);
    }
    if grant.body.action_hash != action.hash() {
        return Err(GrantError::OtherAction);
    }
    if grant.body.expires_at_ms < now_ms {
        return Err(GrantError::Expired(grant.body.expires_at_ms));
    }
    if grant.body.nonce.0.len() != 16 {
        return Err(GrantError::Malformed("nonce must be 16 bytes".into()));
    }
    Ok(())
}

/// The grants one executor has honoured, by nonce: a grant admits exactly one
/// execution. Every tool host (the broker, contract executions, MCP servers) admits
/// through one of these, so "single use" is written once.
#[derive(Debug, Default)]
pub struct Spent(Mutex<HashSet<Vec<u8>>>);

impl Spent {
    /// No grant spent yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`check`]s `grant` and, when it holds, spends it: signature, run, action,
    /// expiry, then single use ([`GrantError::Replayed`] the second time).
    pub fn admit(
        &self,
        grant: &Grant,
        monitor: &PublicKey,
        apm_hash: &Digest,
        action: &Action,
        now_ms: u64,
    ) -> Result<(), GrantError> {
        check(grant, monitor, apm_hash, action, now_ms)?;
        let fresh = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(grant.body.nonce.0.clone());
        if fresh {
            Ok(())
        } else {
            Err(GrantError::Replayed)
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grants_bind_key_run_action_and_time() {
        let k = TeeKey::generate().unwrap();
        let apm = Digest::sha256(b"apm");
        let a = Action::new("GmailReadEmail", json!({"email_id": "1"})).unwrap();
        let g = issue(&k, apm, &a, "agent-0", 7).unwrap();
        let now = now_ms();
        assert_eq!(check(&g, &k.public_key(), &apm, &a, now), Ok(()));
        let other = TeeKey::generate().unwrap();
        assert_eq!(
            check(&g, &other.public_key(), &apm, &a, now),
            Err(GrantError::Signature)
        );
        assert_eq!(
            check(&g, &k.public_key(), &Digest::sha256(b"x"), &a, now),
            Err(GrantError::OtherRun)
        );
        let b = Action::new("GmailReadEmail", json!({"email_id": "2"})).unwrap();
        assert_eq!(
            check(&g, &k.public_key(), &apm, &b, now),
            Err(GrantError::OtherAction)
        );
        assert!(matches!(
            check(&g, &k.public_key(), &apm, &a, now + GRANT_TTL_MS + 1),
            Err(GrantError::Expired(_))
        ));
        let mut forged = g.clone();
        forged.body.expires_at_ms += 1_000_000;
        assert_eq!(
            check(&forged, &k.public_key(), &apm, &a, now),
            Err(GrantError::Signature)
        );
    }
}
