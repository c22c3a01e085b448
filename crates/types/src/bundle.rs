//! The evidence bundle: everything a verifier needs, in one self-describing JSON file.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aeg::Node;
use crate::apm::{Apm, ApmInputs};
use crate::bytes::HexBytes;
use crate::digest::Digest;

/// Format identifier of bundles this crate reads and writes.
pub const BUNDLE_FORMAT: &str = "knox-evidence/v1";

/// Domain prefix of the message the summary signature covers.
pub const SUMMARY_CONTEXT: &[u8] = b"knox/summary/v1\0";

/// Domain prefix of the message the APM attestation covers.
pub const APM_CONTEXT: &[u8] = b"knox/apm-attestation/v1\0";

/// Largest bundle file a verifier reads.
pub const MAX_BUNDLE_BYTES: usize = 256 << 20;

/// An evidence bundle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// Run identifier.
    pub run_id: String,
    /// The prompt's inputs in clear, when the provider discloses them.
    pub prompt: Option<Value>,
    /// The APM.
    pub apm: Apm,
    /// Signature binding the APM hash to its inputs.
    pub apm_attestation: ApmAttestation,
    /// AEG nodes in commit order.
    pub nodes: Vec<Node>,
    /// What the signature covers.
    pub summary: Summary,
    /// Ed25519 signature over `SUMMARY_CONTEXT ‖ canonical(summary)`.
    pub signature: HexBytes,
    /// The in-TEE public key.
    pub key: PublicKey,
    /// Hardware (or simulated) evidence binding the key.
    pub platform: PlatformEvidence,
    /// Models used, by role.
    #[serde(default)]
    pub models: Vec<ModelInfo>,
}

/// The statement an APM attestation signs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApmStatement {
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// The hashes of `(p, C, R, stop)`.
    pub inputs: ApmInputs,
}

/// An APM attestation: the statement and the in-TEE key's signature over
/// `APM_CONTEXT ‖ canonical(statement)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApmAttestation {
    /// What is signed.
    pub statement: ApmStatement,
    /// Ed25519 signature.
    pub signature: HexBytes,
}

/// The AEG summary the bundle signature covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// Run identifier.
    pub run_id: String,
    /// `c_N`.
    pub chain_head: Digest,
    /// `s`.
    pub structure_root: Digest,
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// Node counts.
    pub counts: Counts,
}

/// Node counts by outcome.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// All nodes.
    pub nodes: u64,
    /// `tool_call` nodes.
    pub tool_calls: u64,
    /// `tool_output` nodes (executed actions).
    pub executed: u64,
    /// `blocked` nodes.
    pub blocked: u64,
    /// `interrupt` nodes.
    pub interrupts: u64,
}

/// A public key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicKey {
    /// Always `ed25519`.
    pub alg: String,
    /// The 32-byte key.
    pub public_key: HexBytes,
}

/// Platform evidence binding the in-TEE key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformEvidence {
    /// `simulated`, `tdx`, `tdx+nvidia`, …
    pub mode: String,
    /// Media type of `evidence`.
    pub media_type: String,
    /// The 64-byte report_data the hardware report carries.
    pub report_data: HexBytes,
    /// The epoch/campaign nonce bound into report_data.
    pub nonce: HexBytes,
    /// Backend-specific evidence.
    pub evidence: Value,
}

/// A model that took part in the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// `planner`, `executor` or `judge`.
    pub role: String,
    /// Model name (`dataset`, `benign`, `local:…`, `openai:…`).
    pub name: String,
    /// SHA-256 of the weights, when there are weights.
    pub weights_hash: Option<Digest>,
    /// True when the hash was declared rather than measured.
    pub declared: bool,
}
