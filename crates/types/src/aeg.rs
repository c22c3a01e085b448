//! Attested execution graph (AEG) nodes, their measurement `m_i`, the hash chain `c_i`
//! and the leaf records of the structure root `s`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::bytes::HexBytes;
use crate::canon;
use crate::digest::{Digest, tag};
use crate::merkle;
use crate::payload::Body;

/// The kinds of AEG node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// The run: one per AEG, sequence 0.
    Root,
    /// The planner's decomposition of the tasks among sub-agents.
    AgentStep,
    /// One sub-agent's branch.
    AgentBranch,
    /// A proposed action.
    ToolCall,
    /// One guard's evaluation of a tool call.
    Check,
    /// The output of an executed tool.
    ToolOutput,
    /// An action (or a system call inside one) that was not allowed.
    Blocked,
    /// A stop: the sub-agent proposes nothing more.
    Interrupt,
    /// A model identified by its weights hash.
    ProofOfInference,
    /// Labelled data the run's remote model heard in another run through the same
    /// endpoint (the OpenAI proxy's other conversations): from here on, content that
    /// model composes may carry it.
    Heard,
    /// An allowed call whose output never came back (the client never answered it,
    /// disconnected, or the run ended first): closes the call at the seal, so a
    /// sealed run accounts for every allowed call (format v4).
    Unanswered,
}

impl NodeKind {
    /// All kinds, in code order.
    pub const ALL: [Self; 11] = [
        Self::Root,
        Self::AgentStep,
        Self::AgentBranch,
        Self::ToolCall,
        Self::Check,
        Self::ToolOutput,
        Self::Blocked,
        Self::Interrupt,
        Self::ProofOfInference,
        Self::Heard,
        Self::Unanswered,
    ];

    /// The one-byte code used in Merkle leaf records.
    pub fn code(self) -> u8 {
        match self {
            Self::Root => 0,
            Self::AgentStep => 1,
            Self::AgentBranch => 2,
            Self::ToolCall => 3,
            Self::Check => 4,
            Self::ToolOutput => 5,
            Self::Blocked => 6,
            Self::Interrupt => 7,
            Self::ProofOfInference => 8,
            Self::Heard => 9,
            Self::Unanswered => 10,
        }
    }

    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::AgentStep => "agent_step",
            Self::AgentBranch => "agent_branch",
            Self::ToolCall => "tool_call",
            Self::Check => "check",
            Self::ToolOutput => "tool_output",
            Self::Blocked => "blocked",
            Self::Interrupt => "interrupt",
            Self::ProofOfInference => "proof_of_inference",
            Self::Heard => "heard",
            Self::Unanswered => "unanswered",
        }
    }
}

/// A signature by the in-TEE key over one node's measurement (used for interrupts,
/// which the paper requires to be attested on their own).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeAttestation {
    /// Always `ed25519`.
    pub alg: String,
    /// Hash of the signing key (`H("knox/key", public key)`).
    pub key: Digest,
    /// Signature over `"knox/node-attestation/v1" ‖ 0x00 ‖ m_i`.
    pub sig: HexBytes,
}

/// The acting agent of the planner's nodes: the `agent_step` decomposition, and the
/// `plan_failed` interrupt when planning fails.
pub const PLANNER_AGENT: &str = "planner";

/// Domain prefix of the message a node attestation signs.
pub const NODE_ATTESTATION_CONTEXT: &[u8] = b"knox/node-attestation/v1\0";

/// One AEG node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    /// Commit sequence number, from 0, without gaps.
    pub seq: u64,
    /// The parent node's sequence number (`None` only for the root).
    pub parent: Option<u64>,
    /// Node kind.
    pub kind: NodeKind,
    /// Acting agent (`planner`, `monitor` or a sub-agent id).
    pub agent: String,
    /// Kind-specific content (see [`crate::payload`]), tagged by `kind`, written in its
    /// canonical form.
    pub payload: Body,
    /// Whether the step was allowed.
    pub allowed: bool,
    /// Why it was not, when it was not.
    pub block_reason: Option<String>,
    /// `m_i`.
    pub measurement: Digest,
    /// Signatures over `m_i`; not part of the measurement, each self-verifying.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attestations: Vec<NodeAttestation>,
}

/// A node as written: its body is read once its kind is known (see [`Body::read`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeWire {
    seq: u64,
    #[serde(deserialize_with = "crate::json::present")]
    parent: Option<u64>,
    kind: NodeKind,
    agent: String,
    payload: Box<RawValue>,
    allowed: bool,
    #[serde(deserialize_with = "crate::json::present")]
    block_reason: Option<String>,
    measurement: Digest,
    #[serde(default)]
    attestations: Vec<NodeAttestation>,
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = NodeWire::deserialize(d)?;
        Ok(Self {
            seq: w.seq,
            parent: w.parent,
            kind: w.kind,
            agent: w.agent,
            payload: Body::read_text(w.kind, w.payload.get()),
            allowed: w.allowed,
            block_reason: w.block_reason,
            measurement: w.measurement,
            attestations: w.attestations,
        })
    }
}

impl Node {
    /// `m_i = H("knox/node", canonical(node without measurement and attestations))`.
    pub fn compute_measurement(&self) -> Digest {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(4096));
        }
        BUF.with(|b| match b.try_borrow_mut() {
            Ok(mut buf) => {
                buf.clear();
                self.write_body(&mut buf);
                Digest::tagged(tag::NODE, &[&buf])
            }
            // Re-entered (cannot happen: write_body does not measure): use a fresh buffer.
            Err(_) => {
                let mut buf = Vec::with_capacity(512);
                self.write_body(&mut buf);
                Digest::tagged(tag::NODE, &[&buf])
            }
        })
    }

    /// [`Node::compute_measurement`] with the body's canonical JSON already written
    /// (`body`: what [`Body::write_canonical`] writes for `self.payload`), so that a
    /// committer can serialize the body before it knows the node's sequence number.
    pub fn compute_measurement_with_body(&self, body: &[u8]) -> Digest {
        let mut buf = Vec::with_capacity(body.len() + 160);
        self.write_head(&mut buf);
        buf.extend_from_slice(body);
        self.write_tail(&mut buf);
        Digest::tagged(tag::NODE, &[&buf])
    }

    /// Canonical JSON of the measured fields, keys in RFC 8785 order.
    pub fn write_body(&self, buf: &mut Vec<u8>) {
        self.write_head(buf);
        self.payload.write_canonical(buf);
        self.write_tail(buf);
    }

    /// The measured fields before the body, up to `"payload":`.
    fn write_head(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b"{\"agent\":");
        canon::write_string(&self.agent, buf);
        buf.extend_from_slice(if self.allowed {
            b",\"allowed\":true"
        } else {
            b",\"allowed\":false"
        });
        buf.extend_from_slice(b",\"block_reason\":");
        match &self.block_reason {
            Some(r) => canon::write_string(r, buf),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b",\"kind\":\"");
        buf.extend_from_slice(self.kind.as_str().as_bytes());
        buf.extend_from_slice(b"\",\"parent\":");
        match self.parent {
            Some(p) => buf.extend_from_slice(p.to_string().as_bytes()),
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b",\"payload\":");
    }

    /// The measured fields after the body.
    fn write_tail(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(b",\"seq\":");
        buf.extend_from_slice(self.seq.to_string().as_bytes());
        buf.push(b'}');
    }

    /// The structure-root leaf record: `seq (u64 BE) ‖ parent (u64 BE, all ones for
    /// none) ‖ kind code (u8) ‖ m_i`, 49 bytes.
    pub fn leaf_record(&self) -> [u8; 49] {
        leaf_record(self.seq, self.parent, self.kind, &self.measurement)
    }

    /// Hash of the leaf record, `SHA-256(0x00 ‖ record)`.
    pub fn leaf_hash(&self) -> Digest {
        merkle::leaf_hash(&self.leaf_record())
    }
}

/// See [`Node::leaf_record`].
pub fn leaf_record(seq: u64, parent: Option<u64>, kind: NodeKind, m: &Digest) -> [u8; 49] {
    let mut out = [0u8; 49];
    let (s, rest) = out.split_at_mut(8);
    s.copy_from_slice(&seq.to_be_bytes());
    let (p, rest) = rest.split_at_mut(8);
    p.copy_from_slice(&parent.unwrap_or(u64::MAX).to_be_bytes());
    let (k, m_out) = rest.split_at_mut(1);
    k.copy_from_slice(&[kind.code()]);
    m_out.copy_from_slice(&m.0);
    out
}

/// `c_0 = H(∅)`.
pub fn chain_start() -> Digest {
    Digest::tagged(tag::CHAIN_EMPTY, &[])
}

/// `c_i = H(c_{i-1} ‖ seq_i ‖ m_i)` with `seq_i` as 8-byte big-endian.
pub fn chain_step(prev: &Digest, seq: u64, m: &Digest) -> Digest {
    Digest::tagged(tag::CHAIN, &[&prev.0, &seq.to_be_bytes(), &m.0])
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node() -> Node {
        Node {
            seq: 3,
            parent: Some(1),
            kind: NodeKind::ToolCall,
            agent: "agent-0".into(),
            payload: Body::read(NodeKind::ToolCall, json!({"b": 1, "a": "é"})),
            allowed: true,
            block_reason: None,
            measurement: Digest::default(),
            attestations: vec![],
        }
    }

    #[test]
    fn fast_body_equals_generic_canonical_form() {
        let n = node();
        let mut fast = Vec::new();
        n.write_body(&mut fast);
        let mut v = serde_json::to_value(&n).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("measurement");
        obj.remove("attestations");
        assert_eq!(
            String::from_utf8(fast).unwrap(),
            String::from_utf8(canon::canonical(&v)).unwrap()
        );
    }

    #[test]
    fn measurement_with_a_prewritten_body_is_the_measurement() {
        let n = node();
        let mut body = Vec::new();
        n.payload.write_canonical(&mut body);
        assert_eq!(
            n.compute_measurement_with_body(&body),
            n.compute_measurement()
        );
        assert_ne!(
            n.compute_measurement_with_body(b"{}"),
            n.compute_measurement()
        );
    }

    #[test]
    fn measurement_covers_every_field() {
        let base = node().compute_measurement();
        let mut n = node();
        n.allowed = false;
        assert_ne!(n.compute_measurement(), base);
        let mut n = node();
        n.block_reason = Some("x".into());
        assert_ne!(n.compute_measurement(), base);
        let mut n = node();
        n.parent = None;
        assert_ne!(n.compute_measurement(), base);
        let mut n = node();
        n.seq = 4;
        assert_ne!(n.compute_measurement(), base);
        let mut n = node();
        n.agent = "agent-1".into();
        assert_ne!(n.compute_measurement(), base);
        let mut n = node();
        n.kind = NodeKind::Check;
        assert_ne!(n.compute_measurement(), base);
    }

    /// Reading a payload from its text gives what reading its value gives, for the
    /// payloads of a real bundle written canonically, written otherwise, and read as
    /// another kind's payload.
    #[test]
    fn a_body_read_from_text_is_the_body_read_from_its_value() {
        let bundle: Value = serde_json::from_str(include_str!(
            "../../verify/tests/fixtures/topologies/mt-ma-3-3.json"
        ))
        .unwrap();
        let nodes = bundle["nodes"].as_array().unwrap();
        assert!(nodes.len() > 20);
        for (i, n) in nodes.iter().enumerate() {
            let kind: NodeKind = serde_json::from_value(n["kind"].clone()).unwrap();
            let payload = &n["payload"];
            let canonical = String::from_utf8(canon::canonical(payload)).unwrap();
            let pretty = serde_json::to_string_pretty(payload).unwrap();
            let other = NodeKind::ALL[(i + 1) % NodeKind::ALL.len()];
            for (k, text) in [(kind, &canonical), (kind, &pretty), (other, &canonical)] {
                let from_value = Body::read(k, serde_json::from_str(text).unwrap());
                assert_eq!(
                    Body::read_text(k, text),
                    from_value,
                    "node {i} as {k:?}: {text}"
                );
            }
            assert!(
                matches!(Body::read_text(kind, &canonical), b if b.kind() == Some(kind)),
                "node {i}"
            );
        }
    }

    #[test]
    fn kinds_round_trip_with_distinct_codes() {
        let mut codes: Vec<u8> = NodeKind::ALL.iter().map(|k| k.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), NodeKind::ALL.len());
        for k in NodeKind::ALL {
            let s = serde_json::to_string(&k).unwrap();
            assert_eq!(s, format!("\"{}\"", k.as_str()));
        }
    }
}
