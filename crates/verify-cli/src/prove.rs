//! `knox prove`: an RFC 9162 inclusion proof that one node belongs to a bundle's signed
//! structure root, so a regulator can be shown one node without the whole graph.

use std::path::PathBuf;

use anyhow::Result;
use knox_types::digest::Digest;
use knox_verify::proof::{self, InclusionProof};

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
#[command(after_help = crate::exit_codes!(
    "  0   the proof is printed (JSON; --json changes nothing but the form of a failure)"
))]
pub struct NodeArgs {
    /// The bundle (verify it first: the proof is only as good as the signed root).
    #[arg(value_parser = crate::files::path)]
    pub bundle: PathBuf,
    /// Sequence number of the node.
    #[arg(long)]
    pub node: u64,
    /// The proof is JSON already; with --json a failure is a JSON error object too.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `knox prove check`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   the node is included under the root\
   \n  1   it is not (its measurement or its path does not lead to the root)"
))]
pub struct CheckArgs {
    /// A proof written by `knox prove node`.
    #[arg(value_parser = crate::files::path)]
    pub proof: PathBuf,
    /// The structure root to check against (hex): `structure_root` in the output of
    /// `knox verify --json` for the bundle.
    #[arg(long)]
    pub root: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl ProveCommand {
    /// Whether JSON output was asked for (then a failure is a JSON object).
    pub fn json(&self) -> bool {
        match self {
            Self::Node(a) => a.json,
            Self::Check(a) => a.json,
        }
    }
}

/// Runs `knox prove`.
pub fn run(cmd: &ProveCommand) -> Result<i32> {
    match cmd {
        ProveCommand::Node(a) => {
            let bytes = crate::files::read_input(&a.bundle, crate::files::EVIDENCE)?;
            let b = knox_verify::parse_bundle_in(&bytes, &crate::verify::parts_beside(&a.bundle))
                .map_err(|e| crate::files::bad_input(&a.bundle, "an evidence bundle", e))?;
            let proof = proof::prove(&b, a.node).map_err(|e| {
                crate::files::usage(format!("--node {}: `{}`: {e}", a.node, a.bundle.display()))
            })?;
            crate::outln!("{}", serde_json::to_string_pretty(&proof)?);
            Ok(0)
        }
        ProveCommand::Check(a) => {
            let p: InclusionProof = knox_types::json::from_slice(&crate::files::read_input(
                &a.proof,
                crate::files::SMALL,
            )?)
            .map_err(|e| {
                crate::files::bad_input(&a.proof, "an inclusion proof (`knox prove node`)", e)
            })?;
            let root = Digest::from_hex(&a.root).map_err(|e| {
                crate::files::usage(format!("--root must be a SHA-256 digest in hex: {e}"))
            })?;
            let check = proof::check(&p, &root);
            let (measured, included) = (check.measured, check.included);
            if a.json {
                crate::outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "included": check.holds(),
                        "node": p.node.seq,
                        "kind": p.node.kind.as_str(),
                        "measurement": if measured { "ok" } else { "mismatch" },
                        "path": if included { "ok" } else { "does not lead to the root" },
                        "structure_root": root.to_hex(),
                    }))?
                );
                return Ok(if check.holds() { 0 } else { 1 });
            }
            if check.holds() {
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
