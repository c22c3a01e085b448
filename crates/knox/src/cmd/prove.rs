//! `knox prove`: an RFC 9162 inclusion proof that one node belongs to a bundle's signed
//! structure root, so a regulator can be shown one node without the whole graph.

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use knox_types::aeg::Node;
use knox_types::digest::Digest;
use knox_types::merkle;
use serde::{Deserialize, Serialize};

/// `knox prove …`.
#[derive(Debug, clap::Subcommand)]
pub enum ProveCommand {
    /// Write the inclusion proof of node `--node` of a bundle.
    Node(NodeArgs),
    /// Check an inclusion proof: the node's measurement and its path to the root.
    Check(CheckArgs),
}

/// Arguments of `knox prove node`.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// The bundle (verify it first: the proof is only as good as the signed root).
    pub bundle: PathBuf,
    /// Sequence number of the node.
    #[arg(long)]
    pub node: u64,
}

/// Arguments of `knox prove check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// A proof written by `knox prove node`.
    pub proof: PathBuf,
    /// The structure root to check against (hex), taken from a verified bundle's summary.
    #[arg(long)]
    pub root: String,
}

/// An inclusion proof, self-contained.
#[derive(Debug, Serialize, Deserialize)]
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

/// Runs `knox prove`.
pub fn run(cmd: &ProveCommand) -> Result<i32> {
    match cmd {
        ProveCommand::Node(a) => {
            let bytes = super::read_input(&a.bundle)
                .with_context(|| format!("reading `{}`", a.bundle.display()))?;
            let b = knox_verify::parse_bundle(&bytes)?;
            let leaves: Vec<Digest> = b.nodes.iter().map(Node::leaf_hash).collect();
            let Ok(index) = usize::try_from(a.node) else {
                bail!("node {} out of range", a.node)
            };
            let (Some(node), Some(path)) =
                (b.nodes.get(index), merkle::inclusion_proof(&leaves, index))
            else {
                bail!("the bundle has no node {}", a.node);
            };
            let proof = InclusionProof {
                node: node.clone(),
                tree_size: leaves.len() as u64,
                path,
                structure_root: b.summary.structure_root,
            };
            crate::outln!("{}", serde_json::to_string_pretty(&proof)?);
            Ok(0)
        }
        ProveCommand::Check(a) => {
            let p: InclusionProof = serde_json::from_slice(&super::read_input(&a.proof)?)
                .context("not an inclusion proof")?;
            let root = Digest::from_hex(&a.root)?;
            let measured = p.node.compute_measurement() == p.node.measurement;
            let included = merkle::verify_inclusion(
                &p.node.leaf_hash(),
                p.node.seq,
                p.tree_size,
                &p.path,
                &root,
            );
            if measured && included {
                crate::outln!(
                    "node {} ({}) is included under structure root {root}",
                    p.node.seq,
                    p.node.kind.as_str()
                );
                Ok(0)
            } else {
                crate::outln!(
                    "NOT included: measurement {}, path {}",
                    if measured { "ok" } else { "mismatch" },
                    if included {
                        "ok"
                    } else {
                        "does not lead to the root"
                    }
                );
                Ok(1)
            }
        }
    }
}
