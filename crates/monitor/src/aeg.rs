//! Building the attested execution graph: each node is measured, folded into the hash
//! chain and, when a journal is open, appended to it on disk as it is committed.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use knox_attest::TeeKey;

use crate::key::MonitorKey;
use knox_types::aeg::{
    NODE_ATTESTATION_CONTEXT, Node, NodeAttestation, NodeKind, chain_start, chain_step,
};
use knox_types::bundle::{Counts, JournalHeader};
use knox_types::checkpoint::{CHECKPOINT_CONTEXT, Checkpoint, CheckpointBody};
use knox_types::digest::Digest;
use knox_types::merkle;
use knox_types::payload::Body;

/// Format identifier of the first line of a journal.
pub const JOURNAL_FORMAT: &str = knox_types::bundle::JOURNAL_FORMAT;

/// How often the journal is checkpointed (signed in the run's APM attestation).
pub use knox_types::checkpoint::CheckpointPolicy as Checkpoints;

/// An append-only journal: one header line, then one JSON node per line, with a
/// signed checkpoint line ([`knox_types::checkpoint`]) after every few nodes.
#[derive(Debug)]
pub struct Journal {
    file: File,
    line: Vec<u8>,
    signer: CheckpointSigner,
}

/// What the journal needs to sign checkpoints, and where it stands.
#[derive(Debug)]
struct CheckpointSigner {
    /// The run's key, shared with the run (never copied: its private half exists once,
    /// in this process).
    key: Arc<TeeKey>,
    run_id: String,
    apm_hash: Digest,
    every: Checkpoints,
    /// The structure root of the nodes journaled so far.
    frontier: merkle::Frontier,
    /// Nodes since the last checkpoint.
    since: u64,
    /// When the last checkpoint (or the journal) was written.
    last: Instant,
}

impl Journal {
    /// Creates the journal file, opened `O_APPEND`, with its header line already
    /// written and fsynced (under a temporary name, renamed into place): a journal is
    /// never empty, whenever the process dies. An existing file of that name is
    /// replaced. Checkpoints are signed with `key` (the run's key, the one the header
    /// names) at the interval `every`.
    pub fn create(
        path: &Path,
        header: &JournalHeader,
        key: MonitorKey<'_>,
        every: Checkpoints,
    ) -> io::Result<Self> {
        let mut line = serde_json::to_vec(header).map_err(io::Error::other)?;
        line.push(b'\n');
        let file = knox_files::create_with_header(path, &line)?;
        Ok(Self {
            file,
            line: Vec::with_capacity(1024),
            signer: CheckpointSigner {
                key: key.shared(),
                run_id: header.run_id.clone(),
                apm_hash: header.apm_attestation.statement.apm_hash,
                // As signed in the APM attestation (`run::plan`).
                every: every.normalized(),
                frontier: merkle::Frontier::default(),
                since: 0,
                last: Instant::now(),
            },
        })
    }

    /// Appends `node` (whose chain step gave `chain`), then a checkpoint when one is due.
    fn append(&mut self, node: &Node, chain: &Digest) -> io::Result<()> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, node).map_err(io::Error::other)?;
        self.line.push(b'\n');
        // One write per line (`O_APPEND`): a killed run leaves every committed node and
        // checkpoint on disk, each line whole or (the last only) cut.
        self.file.write_all(&self.line)?;
        let s = &mut self.signer;
        s.frontier.push(node.leaf_hash());
        s.since += 1;
        let every = s.every;
        if s.since >= every.every_nodes || s.last.elapsed() >= Duration::from_millis(every.every_ms)
        {
            self.checkpoint(chain)?;
        }
        Ok(())
    }

    /// Signs and appends a checkpoint over the nodes journaled so far.
    fn checkpoint(&mut self, chain: &Digest) -> io::Result<()> {
        let s = &mut self.signer;
        let body = CheckpointBody {
            run_id: s.run_id.clone(),
            apm_hash: s.apm_hash,
            nodes: s.frontier.len(),
            chain_head: *chain,
            structure_root: s.frontier.root(),
        };
        let signed = body.signed_bytes().map_err(io::Error::other)?;
        let sig = s.key.sign(CHECKPOINT_CONTEXT, &signed);
        s.since = 0;
        s.last = Instant::now();
        self.line.clear();
        serde_json::to_writer(
            &mut self.line,
            &Checkpoint {
                checkpoint: body,
                sig,
            },
        )
        .map_err(io::Error::other)?;
        self.line.push(b'\n');
        self.file.write_all(&self.line)
    }

    /// Flushes the journal to the disk (at the end of a run).
    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// What a node commit needs besides its sequence number.
#[derive(Debug)]
pub struct NewNode<'a> {
    /// Parent sequence number.
    pub parent: Option<u64>,
    /// Kind.
    pub kind: NodeKind,
    /// Acting agent.
    pub agent: &'a str,
    /// Body.
    pub payload: Body,
    /// Allowed flag.
    pub allowed: bool,
    /// Block reason.
    pub block_reason: Option<String>,
}

impl<'a> NewNode<'a> {
    /// Serializes the body now (outside any lock), so that committing the node only
    /// numbers, measures and chains it.
    pub fn prepare(self) -> Prepared<'a> {
        let mut body = Vec::with_capacity(256);
        self.payload.write_canonical(&mut body);
        Prepared { node: self, body }
    }
}

/// A node whose body is already written as canonical JSON (see [`NewNode::prepare`]).
#[derive(Debug)]
pub struct Prepared<'a> {
    /// The node (its parent may still be set: it is not part of the body).
    pub node: NewNode<'a>,
    body: Vec<u8>,
}

/// The AEG under construction.
#[derive(Debug)]
pub struct AegBuilder {
    nodes: Vec<Node>,
    leaves: Vec<Digest>,
    chain: Digest,
    counts: Counts,
    journal: Option<Journal>,
    journal_error: Option<io::Error>,
}

impl Default for AegBuilder {
    fn default() -> Self {
        Self::new(None)
    }
}

impl AegBuilder {
    /// A new, empty graph, journaling to `journal` when given.
    pub fn new(journal: Option<Journal>) -> Self {
        Self {
            nodes: Vec::with_capacity(64),
            leaves: Vec::with_capacity(64),
            chain: chain_start(),
            counts: Counts::default(),
            journal,
            journal_error: None,
        }
    }

    /// Commits a node: assigns the next sequence number, measures it, signs its
    /// measurement with `attest` when given, extends the chain and the journal.
    pub fn commit(&mut self, n: NewNode<'_>, attest: Option<MonitorKey<'_>>) -> u64 {
        self.commit_prepared(n.prepare(), attest)
    }

    /// [`AegBuilder::commit`] of a node whose body is already written.
    pub fn commit_prepared(&mut self, p: Prepared<'_>, attest: Option<MonitorKey<'_>>) -> u64 {
        let Prepared { node: n, body } = p;
        let seq = self.nodes.len() as u64;
        let mut node = Node {
            seq,
            parent: n.parent,
            kind: n.kind,
            agent: n.agent.to_string(),
            payload: n.payload,
            allowed: n.allowed,
            block_reason: n.block_reason,
            measurement: Digest::default(),
            attestations: Vec::new(),
        };
        node.measurement = node.compute_measurement_with_body(&body);
        if let Some(key) = attest {
            node.attestations.push(NodeAttestation {
                alg: knox_attest::key::ALG.into(),
                key: key.key_id(),
                sig: key
                    .tee()
                    .sign(NODE_ATTESTATION_CONTEXT, &node.measurement.0),
            });
        }
        self.chain = chain_step(&self.chain, seq, &node.measurement);
        self.leaves.push(node.leaf_hash());
        self.count(node.kind);
        if let Some(j) = &mut self.journal
            && let Err(e) = j.append(&node, &self.chain)
        {
            // Keep running: the final bundle is complete; the error is reported.
            self.journal_error.get_or_insert(e);
            self.journal = None;
        }
        self.nodes.push(node);
        seq
    }

    fn count(&mut self, kind: NodeKind) {
        let c = &mut self.counts;
        c.nodes += 1;
        match kind {
            NodeKind::ToolCall => c.tool_calls += 1,
            NodeKind::ToolOutput => c.executed += 1,
            NodeKind::Blocked => c.blocked += 1,
            NodeKind::Interrupt => c.interrupts += 1,
            _ => {}
        }
    }

    /// Nodes committed so far.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// `c_N` so far.
    pub fn chain_head(&self) -> Digest {
        self.chain
    }

    /// Finishes the graph: nodes, `c_N`, `s`, counts, and the first journal error if any.
    pub fn finish(mut self) -> FinishedAeg {
        if let Some(j) = &mut self.journal
            && let Err(e) = j.sync()
        {
            self.journal_error.get_or_insert(e);
        }
        FinishedAeg {
            structure_root: merkle::root(&self.leaves),
            chain_head: self.chain,
            counts: self.counts,
            nodes: self.nodes,
            journal_error: self.journal_error,
        }
    }
}

/// A finished AEG.
#[derive(Debug)]
pub struct FinishedAeg {
    /// Nodes in commit order.
    pub nodes: Vec<Node>,
    /// `c_N`.
    pub chain_head: Digest,
    /// `s`.
    pub structure_root: Digest,
    /// Counts.
    pub counts: Counts,
    /// The first error writing the journal, if any.
    pub journal_error: Option<io::Error>,
}
