//! Inclusion proofs: one node of a bundle shown against the structure root its summary
//! signs (an RFC 9162 audit path), so a regulator can be shown one node without the
//! whole graph. The proof file is [`InclusionProof`] as JSON.

use knox_types::aeg::Node;
use knox_types::bundle::Bundle;
use knox_types::digest::Digest;
use knox_types::merkle;
use serde::{Deserialize, Serialize};

/// An inclusion proof, self-contained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InclusionProof {
    /// The node.
    pub node: Node,
    /// Number of nodes in the graph.
    pub tree_size: u64,
    /// Audit path, leaf to root.
    pub path: Vec<Digest>,
    /// The structure root the bundle's summary signs.
    pub structure_root: Digest,
}

/// Why no proof was made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The bundle has no node `index`.
    #[error("no node {index}: the bundle has {nodes} nodes")]
    NoSuchNode {
        /// The node asked for.
        index: u64,
        /// How many the bundle has.
        nodes: usize,
    },
}

/// The inclusion proof of node `index` of `bundle`, against the root its summary
/// signs. (Verify the bundle first: the proof is only as good as the signed root.)
pub fn prove(bundle: &Bundle, index: u64) -> Result<InclusionProof, ProofError> {
    let missing = || ProofError::NoSuchNode {
        index,
        nodes: bundle.nodes.len(),
    };
    let i = usize::try_from(index).map_err(|_| missing())?;
    let leaves: Vec<Digest> = bundle.nodes.iter().map(Node::leaf_hash).collect();
    let (Some(node), Some(path)) = (bundle.nodes.get(i), merkle::inclusion_proof(&leaves, i))
    else {
        return Err(missing());
    };
    Ok(InclusionProof {
        node: node.clone(),
        tree_size: leaves.len() as u64,
        path,
        structure_root: bundle.summary.structure_root,
    })
}

/// What checking a proof against a root found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProofCheck {
    /// The node's measurement recomputes from its content.
    pub measured: bool,
    /// Its leaf hash and audit path lead to the root.
    pub included: bool,
}

impl ProofCheck {
    /// Both hold: the node, as shown, is under the root.
    pub fn holds(self) -> bool {
        self.measured && self.included
    }
}

/// Checks `proof` against `root` (the structure root of a bundle that verified
/// complete), never against the root the proof itself carries.
pub fn check(proof: &InclusionProof, root: &Digest) -> ProofCheck {
    ProofCheck {
        measured: proof.node.compute_measurement() == proof.node.measurement,
        included: merkle::verify_inclusion(
            &proof.node.leaf_hash(),
            proof.node.seq,
            proof.tree_size,
            &proof.path,
            root,
        ),
    }
}
