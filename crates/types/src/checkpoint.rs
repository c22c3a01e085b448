//! Journal checkpoints: the monitor's signature over the journal's prefix, so a
//! journal cut by a crash is authenticated up to its last checkpoint.
//!
//! A checkpoint line is `{"checkpoint": CheckpointBody, "sig": hex}`: it has none of a
//! node's members (a node line always has `seq`), so no line reads as both. The
//! signature is Ed25519 by the run's key over `CHECKPOINT_CONTEXT ‖
//! canonical(checkpoint)` (RFC 8785), as grants are signed.

use serde::{Deserialize, Serialize};

use crate::bytes::HexBytes;
use crate::canon::{self, CanonError};
use crate::digest::Digest;

/// Domain prefix of the message a checkpoint signature covers.
pub const CHECKPOINT_CONTEXT: &[u8] = b"knox/checkpoint/v1\0";

/// What a checkpoint states: the run, and the journal's first `nodes` nodes by their
/// chain head and structure root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointBody {
    /// The run identifier of the journal's header.
    pub run_id: String,
    /// `H(APM)` of the run.
    pub apm_hash: Digest,
    /// `K`: how many nodes precede the checkpoint (nodes `0..K`).
    pub nodes: u64,
    /// `c_K`: the chain head after node `K − 1`.
    pub chain_head: Digest,
    /// `s_K`: the structure root (RFC 9162) over the leaves of nodes `0..K`.
    pub structure_root: Digest,
}

impl CheckpointBody {
    /// The bytes the signature covers after [`CHECKPOINT_CONTEXT`]: the canonical JSON
    /// of the body.
    pub fn signed_bytes(&self) -> Result<Vec<u8>, CanonError> {
        canon::to_canonical(self)
    }
}

/// How often the monitor signs a checkpoint into a journal: after the node that makes
/// `every_nodes` nodes since the last checkpoint, or after the first node committed
/// `every_ms` milliseconds or more after it, whichever comes first. The clock is read
/// when a node is committed: a run that commits nothing for a while writes no
/// checkpoint meanwhile (there is nothing new to sign until its next node, which is
/// then followed by one). A verifier authenticates a cut journal up to its last
/// checkpoint.
///
/// Signed in the run's APM
/// attestation ([`crate::bundle::ApmStatement::checkpoints`], journal format v4), so a
/// journal missing checkpoints it promised is tampered, not a crash: between two
/// checkpoints, before the first and after the last, a v4 journal holds at most
/// `every_nodes` nodes. (Time cannot be checked offline: `every_ms` only adds
/// checkpoints.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPolicy {
    /// Most nodes between two checkpoints (at least 1).
    pub every_nodes: u64,
    /// Most milliseconds between two checkpoints, as seen at a commit.
    pub every_ms: u64,
}

impl CheckpointPolicy {
    /// The defaults: every 16 nodes or 250 ms. One checkpoint (an Ed25519 signature,
    /// `O(log n)` node hashes, one line written) costs about four journaled node
    /// commits; one every 16 nodes adds 20 % to journaling (`cargo bench -p
    /// knox-monitor --bench journal`, docs/evidence-format.md §8a) and leaves at most
    /// 16 nodes (or a quarter of a second of them) of a crashed run unauthenticated.
    pub const DEFAULT: Self = Self {
        every_nodes: 16,
        every_ms: 250,
    };

    /// The largest integer a signed JSON number holds exactly (I-JSON, RFC 8785):
    /// `2^53 − 1`.
    pub const MAX_EXACT: u64 = (1 << 53) - 1;

    /// The policy as it is signed and followed: `every_nodes` at least 1, and both at
    /// most [`Self::MAX_EXACT`] (a canonical JSON number beyond it is not exact; `2^53`
    /// nodes or milliseconds are never reached, so nothing changes).
    pub fn normalized(self) -> Self {
        Self {
            every_nodes: self.every_nodes.clamp(1, Self::MAX_EXACT),
            every_ms: self.every_ms.min(Self::MAX_EXACT),
        }
    }

    /// The most nodes a journal may hold between two checkpoints (`every_nodes`, at
    /// least 1).
    pub fn max_gap(&self) -> u64 {
        self.every_nodes.max(1)
    }
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// One checkpoint line of a journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    /// What is signed.
    pub checkpoint: CheckpointBody,
    /// Ed25519 signature by the run's key over `CHECKPOINT_CONTEXT ‖
    /// canonical(checkpoint)`.
    pub sig: HexBytes,
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn body() -> CheckpointBody {
        CheckpointBody {
            run_id: "r".into(),
            apm_hash: Digest([1; 32]),
            nodes: 3,
            chain_head: Digest([2; 32]),
            structure_root: Digest([3; 32]),
        }
    }

    #[test]
    fn signed_bytes_are_canonical_with_sorted_members() {
        let b = String::from_utf8(body().signed_bytes().unwrap()).unwrap();
        let order = [
            "apm_hash",
            "chain_head",
            "nodes",
            "run_id",
            "structure_root",
        ];
        let at: Vec<usize> = order.iter().map(|k| b.find(k).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{b}");
        assert!(!b.contains(' '));
    }

    #[test]
    fn a_checkpoint_line_is_not_a_node_and_a_node_is_not_a_checkpoint() {
        let line = serde_json::to_vec(&Checkpoint {
            checkpoint: body(),
            sig: HexBytes(vec![0; 64]),
        })
        .unwrap();
        assert!(serde_json::from_slice::<crate::aeg::Node>(&line).is_err());
        let node = br#"{"seq":0,"parent":null,"kind":"root","agent":"monitor","payload":{},"allowed":true,"block_reason":null,"measurement":"0000000000000000000000000000000000000000000000000000000000000000"}"#;
        assert!(serde_json::from_slice::<Checkpoint>(node).is_err());
        let extra = br#"{"checkpoint":{"run_id":"r","apm_hash":"0000000000000000000000000000000000000000000000000000000000000000","nodes":1,"chain_head":"0000000000000000000000000000000000000000000000000000000000000000","structure_root":"0000000000000000000000000000000000000000000000000000000000000000"},"sig":"00","seq":0}"#;
        assert!(serde_json::from_slice::<Checkpoint>(extra).is_err());
    }
}
