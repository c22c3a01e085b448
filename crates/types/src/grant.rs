//! Execution grants: the monitor's single-use, short-lived permission to execute one
//! allowed action, which the broker requires before it runs anything.

use serde::{Deserialize, Serialize};

use crate::bytes::HexBytes;
use crate::digest::Digest;

/// Domain prefix of the message a grant signature covers.
pub const GRANT_CONTEXT: &[u8] = b"knox/grant/v1\0";

/// A grant's signed content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantBody {
    /// `H(APM)` of the run.
    pub apm_hash: Digest,
    /// `H(α)` of the allowed action.
    pub action_hash: Digest,
    /// Agent that proposed it.
    pub agent: String,
    /// Sequence number of its `tool_call` node.
    pub tool_call: u64,
    /// 16 random bytes: each grant is accepted once.
    pub nonce: HexBytes,
    /// Expiry, Unix milliseconds.
    pub expires_at_ms: u64,
}

/// A signed grant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// What is granted.
    pub body: GrantBody,
    /// Ed25519 signature by the monitor's key over `GRANT_CONTEXT ‖ canonical(body)`.
    pub sig: HexBytes,
}
