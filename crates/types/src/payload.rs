//! Typed payloads of AEG nodes, one per node kind.
//!
//! A node stores its payload as a [`Body`], one arm per kind, written as the payload's
//! JSON; a body read from evidence is parsed with `deny_unknown_fields`, so an altered
//! or extended payload is caught before any check reads it (and reported naming its
//! node: see [`Body::Invalid`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::Action;
use crate::aeg::NodeKind;
use crate::apm::{ExpectedCall, StopCause, Topology};
use crate::digest::Digest;
use crate::regulation::{InfoFlow, RegulationDecision};
use crate::{canon, canon_ser};

/// Longest raw proposal text kept in a `tool_call` node (its hash covers all of it).
pub const MAX_RECORDED_PROPOSAL: usize = 4096;

/// `root`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootPayload {
    /// Run identifier.
    pub run_id: String,
    /// Hash of the APM the run is mediated against.
    pub apm_hash: Digest,
    /// Workload shape.
    pub topology: Topology,
}

/// One sub-agent's share of the tasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    /// Sub-agent id.
    pub agent: String,
    /// Task ids.
    pub tasks: Vec<u32>,
}

/// `agent_step`: the planner's decomposition into sub-agents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStepPayload {
    /// One entry per dispatched sub-agent.
    pub decomposition: Vec<Assignment>,
}

/// `agent_branch`: the start of one sub-agent's subgraph.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentBranchPayload {
    /// Sub-agent id.
    pub agent: String,
    /// Its tasks.
    pub tasks: Vec<u32>,
}

/// `tool_call`: a proposal and what it was compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallPayload {
    /// Ordinal of the proposal among the agent's proposals (0-based).
    pub ordinal: u32,
    /// Trajectory pointer `j` when the proposal arrived.
    pub position: u32,
    /// `e_j`, when the trajectory has one at `j`.
    pub expected: Option<ExpectedCall>,
    /// The parsed action, when the proposal was well formed.
    pub actual: Option<Action>,
    /// `H(α)` for a parsed action, `H("knox/proposal", raw bytes)` otherwise.
    pub actual_hash: Digest,
    /// The raw proposal (truncated to [`MAX_RECORDED_PROPOSAL`] bytes) when it could not
    /// be parsed.
    pub raw: Option<String>,
    /// Size in bytes of the raw proposal.
    pub raw_len: u64,
}

/// The guards, in the order the monitor applies them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardKind {
    /// `Γ_int`: timeout, action cap, budget, external signal.
    Stop,
    /// Well-formedness of the proposal against the toolkit manifest.
    Input,
    /// `Γ_traj`.
    Trajectory,
    /// `Γ_sys`, mediated: the tool's declared needs within `Auth`.
    Syscall,
    /// `Γ_reg`.
    Regulation,
    /// The data-flow guard: no untrusted value in a sensitive sink unless authorized.
    DataFlow,
    /// The kernel layer (seccomp, Landlock, limits) while the tool ran: not evaluated by
    /// the monitor, recorded from the sandbox's observations.
    Kernel,
    /// The broker refused to execute (no valid, unconsumed grant).
    Broker,
    /// The signed capability contract (`knox-contract`): evaluated after the input
    /// guard when the APM names a contract.
    Contract,
}

impl GuardKind {
    /// Order of evaluation.
    pub const ORDER: [Self; 7] = [
        Self::Stop,
        Self::Input,
        Self::Contract,
        Self::Trajectory,
        Self::Syscall,
        Self::DataFlow,
        Self::Regulation,
    ];

    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Input => "input",
            Self::Trajectory => "trajectory",
            Self::Syscall => "syscall",
            Self::Regulation => "regulation",
            Self::DataFlow => "data_flow",
            Self::Kernel => "kernel",
            Self::Broker => "broker",
            Self::Contract => "contract",
        }
    }
}

/// `check`: one guard's evaluation of its parent `tool_call`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckPayload {
    /// The guard.
    pub guard: GuardKind,
    /// Whether it passed.
    pub passed: bool,
    /// What it looked at.
    pub detail: CheckDetail,
}

/// Guard-specific facts recorded with a check, enough to recompute it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "guard", rename_all = "snake_case", deny_unknown_fields)]
pub enum CheckDetail {
    /// Run state `σ` as the stop guard saw it.
    Stop {
        /// Proposals by this agent before this one.
        actions: u32,
        /// Cost units this agent spent before this proposal.
        spent: u64,
        /// Milliseconds since the run started.
        elapsed_ms: u64,
        /// Whether an external stop signal was present.
        signal: bool,
        /// What fired, when something did.
        cause: Option<StopCause>,
        /// Cost of the proposed call, counted against the budget with `spent` (APMs
        /// that close the budget channel, [`crate::apm::Closed::budget`]; absent before).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<u64>,
    },
    /// Parsing and schema validation.
    Input {
        /// Why the proposal was malformed.
        error: Option<String>,
    },
    /// Trajectory comparison.
    Trajectory {
        /// `exact`, `constraints`, or `none` when no call was expected at `j`.
        mode: String,
        /// Per-parameter results (constraint mode only).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        params: Vec<ParamCheck>,
        /// Why it did not match.
        reason: Option<String>,
        /// The parameters as the plan writes them, when the call matched a plan step
        /// under an APM that executes planned values as planned
        /// ([`crate::apm::Closed::planned`]) and they differ from the proposal's: what
        /// runs instead of the proposal's parameters.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        executed: Option<serde_json::Map<String, serde_json::Value>>,
        /// In the tolerant mode under a declared capacity: how many plan steps were
        /// enabled when the call matched one, when more than one — the choice carried
        /// `log2(options)` bits of the run's capacity
        /// ([`crate::apm::TrajectoryMode::Tolerant`]'s `capacity_bits`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        options: Option<u32>,
    },
    /// Mediated system-call check.
    Syscall {
        /// The tool's toolkit.
        toolkit: String,
        /// `H("knox/needs", canonical(needs))` of the tool's declared needs in the
        /// manifest the APM names (the verifier recomputes it from that manifest).
        needs: Digest,
        /// Needs not covered by `Auth`.
        missing: BTreeSet<String>,
    },
    /// Data-flow guard: one entry per sink parameter present.
    DataFlow {
        /// Sink results.
        sinks: Vec<SinkCheck>,
        /// For a disclosing tool under an APM that treats content as a sink
        /// ([`crate::apm::Closed::content`]): every earlier output of the run that
        /// reaches the call's content, declared by the plan or not.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        content: Vec<ContentFlow>,
        /// How many of the run's outputs (in commit order) the check saw; set under
        /// [`crate::apm::Closed::content`] or [`crate::apm::Closed::labels`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outputs: Option<u32>,
        /// For a disclosing call matched to its plan step under an APM deciding flows
        /// by provenance ([`crate::apm::Closed::provenance`]): one entry per parameter
        /// the executor composed, in name order — what it carries and what ran.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        provenance: Vec<ArgFlow>,
    },
    /// Regulation guard.
    Regulation {
        /// `compliant`, `non_compliant` or `not_applicable`.
        verdict: String,
        /// Ids of the deciding policies.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        policies: Vec<String>,
        /// `φ`, when a policy set decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flow: Option<Box<InfoFlow>>,
        /// Per regulation and recipient.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        decisions: Vec<RegulationDecision>,
        /// A judge's opinion, when one was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        judge: Option<Box<JudgeOpinion>>,
        /// Why the verdict is what it is, in words.
        note: Option<String>,
        /// Set when the check decides sending the call's output to a remote model
        /// (its operator the recipient) rather than the call's own disclosure.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<Box<crate::apm::RemoteModel>>,
    },
    /// The capability contract's decision (`knox_contract::decide`), with the inputs
    /// the verifier decides again with: the time and the approval token. The ledger
    /// state it was decided in is the one the run's earlier nodes rebuild.
    Contract(Box<ContractCheck>),
}

/// What the contract decided on one proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractOutcome {
    /// Within the contract.
    Allow,
    /// Within the contract but needs a human approval it did not have: not executed.
    Pending,
    /// Refused by the check named.
    Deny,
}

/// The `contract` check's facts: inputs, decision and the reservation it made.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContractCheck {
    /// When it was decided (Unix ms): the contract's window and an approval's validity
    /// are checked at this time.
    pub at_ms: u64,
    /// The approval token presented with the action, as presented.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Value>,
    /// The decision.
    pub outcome: ContractOutcome,
    /// The check that decided a denial (`window`, `structure`, `capability`, `path`,
    /// `argv`, `endpoint`, `action_cap`, `budget`, `approval`; `approval` for pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Why, in words (a denial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The capability the action resolved to (allow, pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// Its cost in cents, from the signed capability (allow, pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_cents: Option<u64>,
    /// Its impact level (allow, pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impact: Option<String>,
    /// The approval's nonce, consumed with the reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_nonce: Option<String>,
    /// The run the approvals store named as having used the presented token already
    /// (another run, another process): the token is refused (`check` = `approval`). A
    /// token is accepted once, across runs and processes; this records what the monitor
    /// was told, so the verifier decides again with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_used_by: Option<String>,
    /// The reservation made: set only when every guard passed and the action was
    /// authorized (numbered from 0 in the run, in commit order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<u64>,
    /// The ledger before this decision: cents spent, cents reserved and actions
    /// authorized (the verifier rebuilds it and compares).
    pub spent_cents: u64,
    /// Cents reserved and not settled before this decision.
    pub reserved_cents: u64,
    /// Actions authorized before this decision.
    pub actions: u64,
}

/// The settlement of a contract reservation, recorded with the action's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settlement {
    /// The reservation.
    pub reservation: u64,
    /// Whether the action ran (its cost is spent) or the executor refused it (the
    /// hold is released; it still counts against the action cap).
    pub executed: bool,
}

/// What an LLM judge said about a disclosure. Its classification fills in information
/// types and purpose only where the labels said nothing; its verdict is a second opinion
/// that never overrides a deterministic one (a disagreement is recorded).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeOpinion {
    /// The judge model's name.
    pub model: String,
    /// SHA-256 of its weights, when measured.
    pub weights_hash: Option<Digest>,
    /// Version of the prompt file the judge was given.
    pub prompt_version: String,
    /// `H("knox/judge-prompt", prompt)` of the exact prompt text.
    pub prompt: Digest,
    /// Information types it found in the content.
    pub info_types: BTreeSet<String>,
    /// Purpose it inferred, if any.
    pub purpose: Option<String>,
    /// Its own verdict, if it gave one.
    pub verdict: Option<String>,
    /// Whether its verdict agrees with the deterministic one (`None` when either is
    /// missing).
    pub agrees: Option<bool>,
    /// Its reasoning, as returned.
    pub rationale: String,
}

/// One sink parameter's data-flow result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkCheck {
    /// Parameter name.
    pub param: String,
    /// The `tool_output` node of untrusted content the value came from, if any.
    pub source: Option<u64>,
    /// Whether the APM authorizes the flow (the user's prompt or the plan fixes it).
    pub authorized: bool,
}

/// One composed parameter of a disclosing call, decided by provenance: the outputs it
/// carries (every output holding data its agent's model read before composing it, or
/// the one output a `from_output` link takes it from) and those the plan clears it for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgFlow {
    /// Parameter name.
    pub param: String,
    /// The `tool_output` (or `heard`) nodes whose data the value may carry, in commit
    /// order.
    pub sources: Vec<u64>,
    /// Those of `sources` the plan clears the parameter for.
    pub cleared: Vec<u64>,
    /// What ran: `composed` (the executor's value: every source cleared), `planned`
    /// (the plan's value in its place), `withheld` (neither: the call is blocked), or
    /// `uncleared` (an unplanned request under a contract that does not clear its
    /// endpoint for every source: blocked).
    pub ran: String,
}

/// An earlier output of the run whose data reaches a disclosure's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentFlow {
    /// The `tool_output` node.
    pub source: u64,
    /// The parameters it reaches (several: a value split across parameters).
    pub params: Vec<String>,
    /// How it was found: `plain`, `normalized` (case, confusables, invisible
    /// characters, whitespace), `split`, `base64`, `hex` or `url`.
    pub via: String,
    /// Whether the plan declares the flow (a data link of the expected call to it).
    pub declared: bool,
}

/// One parameter's constraint result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParamCheck {
    /// Parameter name.
    pub name: String,
    /// Constraint kind.
    pub constraint: String,
    /// Whether it held.
    pub ok: bool,
}

/// `tool_output`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputPayload {
    /// What the tool returned.
    pub output: Value,
    /// Cost units charged.
    pub cost: u64,
    /// How the tool was confined (Landlock ABI, cgroups, fallbacks), when it ran in
    /// the kernel sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confinement: Option<Value>,
    /// The contract reservation this output settles (runs bounded by a contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settlement>,
}

/// `blocked`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockedPayload {
    /// The guard that blocked.
    pub guard: GuardKind,
    /// For the kernel layer: what the kernel denied or capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelEvent>,
}

/// Something the kernel layer denied, capped or killed while a tool ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelEvent {
    /// `syscall` (a denied system call, from the seccomp supervisor), `limit` (a
    /// resource limit hit or a kill signal), or `refusal` (the broker refused).
    pub event: String,
    /// System call name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall: Option<String>,
    /// System call number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nr: Option<i64>,
    /// Process id inside the tool's process tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Raw arguments, written as `0x`-prefixed lowercase hex strings: canonical JSON
    /// writes numbers as IEEE doubles, which cannot hold every 64-bit argument
    /// (`AT_FDCWD` is `0xffffffffffffff9c`). Version-1 evidence wrote numbers; they are
    /// still read.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_args")]
    pub args: Vec<u64>,
    /// Decoded pointer arguments (path, socket address), or the limit/refusal detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl KernelEvent {
    /// A `refusal`: the layer that runs tools refused the call, for `detail`.
    pub fn refusal(detail: String) -> Self {
        Self {
            event: "refusal".into(),
            syscall: None,
            nr: None,
            pid: None,
            args: vec![],
            detail: Some(detail),
        }
    }
}

/// `interrupt`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptPayload {
    /// What fired.
    pub cause: StopCause,
}

/// `proof_of_inference`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofOfInferencePayload {
    /// `planner`, `executor` or `judge`.
    pub role: crate::bundle::ModelRole,
    /// Model name.
    pub model: String,
    /// SHA-256 of the weights file, when measured or declared.
    pub weights_hash: Option<Digest>,
    /// True when the hash was declared by a remote endpoint, not measured here.
    pub declared: bool,
}

/// `heard`: a labelled output a remote model of this run heard in another run through
/// the same endpoint. Where (that run and its `tool_output` node, which a regulator
/// holding that run's bundle finds there) and what produced it (the tool, whose labels
/// the manifest gives). The output itself stays in its own run's evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeardPayload {
    /// The endpoint's base URL the model is reached at; `mcp:client` for the MCP
    /// gateway's client, whose model hears every result the gateway returns.
    pub endpoint: String,
    /// The run it was heard in.
    pub run: String,
    /// That run's `tool_output` node (its sequence number).
    pub node: u64,
    /// The tool that produced it: a tool of this run's manifest whose output carries
    /// information types.
    pub tool: String,
}

/// `unanswered`: an allowed call whose output never came back to the monitor, closed
/// when the run is sealed (format v4). For the OpenAI proxy the client runs the tools:
/// a call it never answered may still have run, so a contract reservation it held is
/// settled as executed (its cost counted), never released.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnansweredPayload {
    /// Cost units the call would have charged (not added to the agent's spending: no
    /// output says it ran).
    pub cost: u64,
    /// The contract reservation it held, settled as executed (runs bounded by a
    /// contract).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settlement>,
}

/// 64-bit system call arguments as hex strings (see [`KernelEvent::args`]).
mod hex_args {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(args: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(args.iter().map(|a| format!("{a:#x}")))
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Arg {
        Number(u64),
        Hex(String),
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        Vec::<Arg>::deserialize(d)?
            .into_iter()
            .map(|a| match a {
                Arg::Number(n) => Ok(n),
                Arg::Hex(h) => h
                    .strip_prefix("0x")
                    .and_then(|digits| u64::from_str_radix(digits, 16).ok())
                    .filter(|n| format!("{n:#x}") == h)
                    .ok_or_else(|| {
                        serde::de::Error::custom(format!(
                            "system call argument `{h}` is not 0x-prefixed lowercase hex without leading zeros"
                        ))
                    }),
            })
            .collect()
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod kernel_event_tests {
    use super::KernelEvent;

    #[test]
    fn every_64_bit_argument_survives_canonical_json() {
        let e = KernelEvent {
            event: "syscall".into(),
            syscall: Some("openat".into()),
            nr: Some(257),
            pid: Some(7),
            args: vec![0xffff_ffff_ffff_ff9c, 0, 1 << 60, 0x7ffd_1234_5678],
            detail: None,
        };
        let bytes = crate::canon::to_canonical(&e).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains(
                r#""args":["0xffffffffffffff9c","0x0","0x1000000000000000","0x7ffd12345678"]"#
            ),
            "{text}"
        );
        let back: KernelEvent = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, e);
        // Version 1 wrote numbers.
        let v1: KernelEvent =
            serde_json::from_str(r#"{"event":"syscall","args":[18446744073709551516,3]}"#).unwrap();
        assert_eq!(v1.args, vec![0xffff_ffff_ffff_ff9c, 3]);
        for bad in [r#""0XFF""#, r#""0x0ff""#, r#""ff""#, r#""0x""#, "1.5"] {
            let doc = format!(r#"{{"event":"syscall","args":[{bad}]}}"#);
            assert!(serde_json::from_str::<KernelEvent>(&doc).is_err(), "{bad}");
        }
    }
}

/// A node's body: the payload of its kind, or, for a body read from evidence that is
/// not one, the body as written and why it is not.
///
/// The body is tagged by the node's [`NodeKind`] (a sibling field of the node), not by
/// a field of its own, so it serializes to exactly the payload's JSON: the evidence
/// format is the one the payload structs define. A body read from evidence is parsed
/// with its node ([`Body::read`]); a body that does not parse is kept verbatim as
/// [`Body::Invalid`] (the node's measurement is still over what was written, and the
/// verifier reports the node), and a body that parses but whose payload would not write
/// it back byte for byte (a version-1 encoding) is kept verbatim beside its payload
/// ([`Body::Verbatim`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// `root`.
    Root(RootPayload),
    /// `agent_step`.
    AgentStep(AgentStepPayload),
    /// `agent_branch`.
    AgentBranch(AgentBranchPayload),
    /// `tool_call`.
    ToolCall(Box<ToolCallPayload>),
    /// `check`.
    Check(Box<CheckPayload>),
    /// `tool_output`.
    ToolOutput(Box<ToolOutputPayload>),
    /// `blocked`.
    Blocked(BlockedPayload),
    /// `interrupt`.
    Interrupt(InterruptPayload),
    /// `proof_of_inference`.
    ProofOfInference(ProofOfInferencePayload),
    /// `heard`.
    Heard(HeardPayload),
    /// `unanswered`.
    Unanswered(UnansweredPayload),
    /// A body read from evidence that parses as its kind's payload, but which that
    /// payload would not write back byte for byte: the payload, and what was written.
    Verbatim(Box<Verbatim>),
    /// A body read from evidence that is not its kind's payload.
    Invalid {
        /// What was written.
        raw: Value,
        /// Why it does not parse.
        error: String,
    },
}

/// See [`Body::Verbatim`].
#[derive(Clone, Debug, PartialEq)]
pub struct Verbatim {
    /// The parsed payload (never itself `Verbatim` or `Invalid`).
    pub body: Body,
    /// The body as written, which its measurement covers.
    pub raw: Value,
}

/// Why a node's body cannot be read as the payload asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body was written but does not parse as its kind's payload.
    #[error("`{kind}` payload does not parse: {error}")]
    Invalid {
        /// The node's kind.
        kind: &'static str,
        /// The parse error.
        error: String,
    },
    /// The body is another kind's payload.
    #[error("`{found}` payload where a `{wanted}` payload was expected")]
    Kind {
        /// The kind asked for.
        wanted: &'static str,
        /// The body's kind.
        found: &'static str,
    },
}

/// Payload types: one per node kind, each the content of one [`Body`] arm.
pub trait Payload: Sized + Serialize + serde::de::DeserializeOwned {
    /// The node kind that carries this payload.
    const KIND: NodeKind;
    /// This payload, when `body` is it.
    fn of(body: &Body) -> Option<&Self>;
    /// The body carrying this payload.
    fn into_body(self) -> Body;
}

macro_rules! payload_arm {
    ($ty:ty, $arm:ident, boxed) => {
        impl Payload for $ty {
            const KIND: NodeKind = NodeKind::$arm;
            fn of(body: &Body) -> Option<&Self> {
                match body.typed() {
                    Some(Body::$arm(p)) => Some(p),
                    _ => None,
                }
            }
            fn into_body(self) -> Body {
                Body::$arm(Box::new(self))
            }
        }
        impl From<$ty> for Body {
            fn from(p: $ty) -> Self {
                p.into_body()
            }
        }
    };
    ($ty:ty, $arm:ident) => {
        impl Payload for $ty {
            const KIND: NodeKind = NodeKind::$arm;
            fn of(body: &Body) -> Option<&Self> {
                match body.typed() {
                    Some(Body::$arm(p)) => Some(p),
                    _ => None,
                }
            }
            fn into_body(self) -> Body {
                Body::$arm(self)
            }
        }
        impl From<$ty> for Body {
            fn from(p: $ty) -> Self {
                p.into_body()
            }
        }
    };
}

payload_arm!(RootPayload, Root);
payload_arm!(AgentStepPayload, AgentStep);
payload_arm!(AgentBranchPayload, AgentBranch);
payload_arm!(ToolCallPayload, ToolCall, boxed);
payload_arm!(CheckPayload, Check, boxed);
payload_arm!(ToolOutputPayload, ToolOutput, boxed);
payload_arm!(BlockedPayload, Blocked);
payload_arm!(InterruptPayload, Interrupt);
payload_arm!(ProofOfInferencePayload, ProofOfInference);
payload_arm!(HeardPayload, Heard);
payload_arm!(UnansweredPayload, Unanswered);

/// The body of a node of `kind` read from `d` as that kind's payload: the one table of
/// which payload each kind carries, for [`Body::read`] and [`Body::read_text`].
fn typed<'de, D: serde::Deserializer<'de>>(kind: NodeKind, d: D) -> Result<Body, D::Error> {
    fn read<'de, T: Payload, D: serde::Deserializer<'de>>(d: D) -> Result<Body, D::Error> {
        T::deserialize(d).map(T::into_body)
    }
    match kind {
        NodeKind::Root => read::<RootPayload, D>(d),
        NodeKind::AgentStep => read::<AgentStepPayload, D>(d),
        NodeKind::AgentBranch => read::<AgentBranchPayload, D>(d),
        NodeKind::ToolCall => read::<ToolCallPayload, D>(d),
        NodeKind::Check => read::<CheckPayload, D>(d),
        NodeKind::ToolOutput => read::<ToolOutputPayload, D>(d),
        NodeKind::Blocked => read::<BlockedPayload, D>(d),
        NodeKind::Interrupt => read::<InterruptPayload, D>(d),
        NodeKind::ProofOfInference => read::<ProofOfInferencePayload, D>(d),
        NodeKind::Heard => read::<HeardPayload, D>(d),
        NodeKind::Unanswered => read::<UnansweredPayload, D>(d),
    }
}

impl Body {
    /// Reads the body of a node of `kind` written as `raw`: typed when it parses as
    /// that kind's payload, [`Body::Invalid`] when it does not (never an error: the
    /// node is reported where its body is read), [`Body::Verbatim`] when the payload
    /// would not write it back as it was written.
    pub fn read(kind: NodeKind, raw: Value) -> Self {
        let parsed = typed(kind, &raw).map_err(|e| e.to_string());
        match parsed {
            Err(error) => Self::Invalid { raw, error },
            Ok(body) => {
                let mut again = Vec::new();
                body.write_canonical(&mut again);
                if again == canon::canonical(&raw) {
                    body
                } else {
                    Self::Verbatim(Box::new(Verbatim { body, raw }))
                }
            }
        }
    }

    /// [`Body::read`] of a payload given as its JSON text: the typed reading straight
    /// from the text when it writes back exactly that text (a payload written
    /// canonically, as every version-2 bundle writes them), with no `Value` built;
    /// otherwise what [`Body::read`] makes of the text's value, so the outcome is the
    /// same either way.
    pub fn read_text(kind: NodeKind, text: &str) -> Self {
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = typed(kind, &mut de).and_then(|body| de.end().map(|()| body));
        if let Ok(body) = parsed {
            let mut again = Vec::with_capacity(text.len());
            body.write_canonical(&mut again);
            // The text is canonical (it is what the canonical writer writes), so it is its
            // own canonical form: exactly the case in which `read` keeps the typed body.
            if again == text.as_bytes() {
                return body;
            }
        }
        match serde_json::from_str::<Value>(text) {
            Ok(raw) => Self::read(kind, raw),
            Err(e) => Self::Invalid {
                raw: Value::String(text.to_owned()),
                error: e.to_string(),
            },
        }
    }

    /// The node kind whose payload this is (`None` for an invalid body).
    pub fn kind(&self) -> Option<NodeKind> {
        Some(match self {
            Self::Root(_) => NodeKind::Root,
            Self::AgentStep(_) => NodeKind::AgentStep,
            Self::AgentBranch(_) => NodeKind::AgentBranch,
            Self::ToolCall(_) => NodeKind::ToolCall,
            Self::Check(_) => NodeKind::Check,
            Self::ToolOutput(_) => NodeKind::ToolOutput,
            Self::Blocked(_) => NodeKind::Blocked,
            Self::Interrupt(_) => NodeKind::Interrupt,
            Self::ProofOfInference(_) => NodeKind::ProofOfInference,
            Self::Heard(_) => NodeKind::Heard,
            Self::Unanswered(_) => NodeKind::Unanswered,
            Self::Verbatim(v) => return v.body.kind(),
            Self::Invalid { .. } => return None,
        })
    }

    /// The typed payload (through [`Body::Verbatim`]); `None` for an invalid body.
    pub fn typed(&self) -> Option<&Self> {
        match self {
            Self::Verbatim(v) => Some(&v.body),
            Self::Invalid { .. } => None,
            other => Some(other),
        }
    }

    /// The payload `T`, or why the body is not one (`kind`: the node's kind, named in
    /// the error).
    pub fn get<T: Payload>(&self) -> Result<&T, BodyError> {
        if let Some(p) = T::of(self) {
            return Ok(p);
        }
        Err(match self {
            Self::Invalid { error, .. } => BodyError::Invalid {
                kind: T::KIND.as_str(),
                error: error.clone(),
            },
            other => BodyError::Kind {
                wanted: T::KIND.as_str(),
                found: other.kind().map_or("invalid", NodeKind::as_str),
            },
        })
    }

    /// The `check` payload, when this is one.
    pub fn check(&self) -> Option<&CheckPayload> {
        CheckPayload::of(self)
    }

    /// The `tool_call` payload, when this is one.
    pub fn tool_call(&self) -> Option<&ToolCallPayload> {
        ToolCallPayload::of(self)
    }

    /// The `tool_output` payload, when this is one.
    pub fn tool_output(&self) -> Option<&ToolOutputPayload> {
        ToolOutputPayload::of(self)
    }

    /// The body as a JSON value (what [`Body::write_canonical`] writes).
    pub fn to_value(&self) -> Value {
        fn v<T: Serialize>(p: &T) -> Value {
            // Payload types are plain data with string keys: serialization cannot fail.
            serde_json::to_value(p).unwrap_or(Value::Null)
        }
        match self {
            Self::Root(p) => v(p),
            Self::AgentStep(p) => v(p),
            Self::AgentBranch(p) => v(p),
            Self::ToolCall(p) => v(p),
            Self::Check(p) => v(p),
            Self::ToolOutput(p) => v(p),
            Self::Blocked(p) => v(p),
            Self::Interrupt(p) => v(p),
            Self::ProofOfInference(p) => v(p),
            Self::Heard(p) => v(p),
            Self::Unanswered(p) => v(p),
            Self::Verbatim(b) => b.raw.clone(),
            Self::Invalid { raw, .. } => raw.clone(),
        }
    }

    /// Appends the body's canonical JSON: the payload's, or what was written for a
    /// body kept verbatim.
    pub fn write_canonical(&self, out: &mut Vec<u8>) {
        match self {
            Self::Verbatim(b) => canon::write_value(&b.raw, out),
            Self::Invalid { raw, .. } => canon::write_value(raw, out),
            typed => {
                let start = out.len();
                let written = match typed {
                    Self::Root(p) => canon_ser::write(p, out),
                    Self::AgentStep(p) => canon_ser::write(p, out),
                    Self::AgentBranch(p) => canon_ser::write(p, out),
                    Self::ToolCall(p) => canon_ser::write(p, out),
                    Self::Check(p) => canon_ser::write(p, out),
                    Self::ToolOutput(p) => canon_ser::write(p, out),
                    Self::Blocked(p) => canon_ser::write(p, out),
                    Self::Interrupt(p) => canon_ser::write(p, out),
                    Self::ProofOfInference(p) => canon_ser::write(p, out),
                    Self::Heard(p) => canon_ser::write(p, out),
                    Self::Unanswered(p) => canon_ser::write(p, out),
                    Self::Verbatim(_) | Self::Invalid { .. } => Ok(()),
                };
                // Payloads are plain data: the direct writer does not fail on them.
                if written.is_err() {
                    out.truncate(start);
                    canon::write_value(&typed.to_value(), out);
                }
            }
        }
    }
}

impl Serialize for Body {
    /// The canonical JSON of the body, verbatim (also inside a pretty printer).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(256);
        self.write_canonical(&mut bytes);
        crate::json::raw(bytes, s)
    }
}

impl std::fmt::Display for Body {
    /// The body's canonical JSON.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut bytes = Vec::with_capacity(256);
        self.write_canonical(&mut bytes);
        f.write_str(&String::from_utf8_lossy(&bytes))
    }
}
