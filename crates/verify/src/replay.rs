//! Replaying the AEG against the APM: chain, topology and policy consistency.
//!
//! The replay walks the nodes in commit order with the same per-agent state the monitor
//! kept ([`knox_guards::AgentState`]: trajectory pointer, proposal count, spent budget,
//! outputs), recomputes every guard decision with the monitor's own pipeline
//! ([`knox_guards::Pipeline`]), and compares it with what each `check` node records. The monitor commits a `tool_call`, its checks and its `blocked` or
//! `interrupt` node contiguously; only a `tool_output` arrives later.

use std::collections::HashMap;
use std::sync::Arc;

use knox_attest::key::key_id;
use knox_attest::verify_signature;
use knox_contract::{Ledger, LedgerEvent};
use knox_guards::{
    AgentState, Clock, ContractInput, Decision, Disclosure, Egress, Evaluation, Input, Pipeline,
    Proposal, RecordedOutput, RegulationSource, SharedOutput,
};
use knox_policy::ToolkitManifest;
use knox_types::aeg::{
    NODE_ATTESTATION_CONTEXT, Node, NodeKind, PLANNER_AGENT, chain_start, chain_step,
};
use knox_types::apm::{Apm, PlanningFailure, StopCause, TopologyKind};
use knox_types::bundle::{Counts, ModelInfo, ModelRole, MonitorRules, PublicKey};
use knox_types::digest::Digest;
use knox_types::payload::{
    AgentBranchPayload, AgentStepPayload, Assignment, BlockedPayload, CheckDetail, CheckPayload,
    GuardKind, HeardPayload, InterruptPayload, Payload, ProofOfInferencePayload, RootPayload,
    ToolCallPayload, ToolOutputPayload, UnansweredPayload,
};

use crate::report::BlockedAction;

/// A failure: the first offending node, when one can be named, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fail {
    /// The first offending node, when one can be named.
    pub node: Option<u64>,
    /// Why the evidence is refused as tampered.
    pub reason: String,
}

impl Fail {
    /// A failure at node `seq`.
    pub fn at(seq: u64, reason: impl Into<String>) -> Self {
        Self {
            node: Some(seq),
            reason: reason.into(),
        }
    }

    /// A failure no single node can be named for (something is missing).
    pub fn unplaced(reason: impl Into<String>) -> Self {
        Self {
            node: None,
            reason: reason.into(),
        }
    }
}

impl From<(Option<u64>, String)> for Fail {
    fn from((node, reason): (Option<u64>, String)) -> Self {
        Self { node, reason }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.node {
            Some(n) => write!(f, "node {n}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

fn fail<T>(node: &Node, why: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::at(node.seq, why))
}

/// Recomputes every measurement, the sequence numbers and the chain; returns `c_N`,
/// the leaf hashes for the structure root, and the counts.
pub fn chain(nodes: &[Node]) -> Result<(Digest, Vec<Digest>, Counts), Fail> {
    let mut c = chain_start();
    let mut leaves = Vec::with_capacity(nodes.len());
    let mut counts = Counts::default();
    for (i, n) in nodes.iter().enumerate() {
        if n.seq != i as u64 {
            // Name the position: the sequence number itself is what is wrong.
            let why = format!(
                "node at position {i} has sequence number {}: a node was dropped, inserted or reordered",
                n.seq
            );
            return Err(Fail::at(i as u64, why));
        }
        if n.compute_measurement() != n.measurement {
            return fail(n, "measurement does not match the node's content");
        }
        c = chain_step(&c, n.seq, &n.measurement);
        leaves.push(n.leaf_hash());
        counts.nodes += 1;
        match n.kind {
            NodeKind::ToolCall => counts.tool_calls += 1,
            NodeKind::ToolOutput => counts.executed += 1,
            NodeKind::Blocked => counts.blocked += 1,
            NodeKind::Interrupt => counts.interrupts += 1,
            _ => {}
        }
    }
    Ok((c, leaves, counts))
}

/// What the replay found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Blocked actions.
    pub blocked: Vec<BlockedAction>,
    /// Interrupts, `agent: cause`.
    pub interrupts: Vec<String>,
    /// `not_applicable` regulation verdicts.
    pub flagged: u64,
    /// Allowed calls still waiting for their output at the end.
    pub unfinished: Vec<u64>,
    /// Per agent that made any, the product of the options of its free choices in the
    /// tolerant mode (`AgentState::choices`), as the replay recomputed them.
    pub choices: Vec<u128>,
    /// Notes that do not change the outcome.
    pub warnings: Vec<String>,
}

/// One agent as the replay follows it: the guards' state, as the monitor kept it, and
/// what the structural checks need.
#[derive(Debug)]
struct AgentReplay {
    state: AgentState,
    /// The node the agent's next step hangs under.
    cursor: u64,
    /// The elapsed time its last stop check recorded (it may not go backwards).
    last_elapsed: u64,
    /// The allowed calls whose outputs are still to come, in commit order (at most one
    /// under the rules before format v4).
    awaiting: Vec<Awaiting>,
}

impl AgentReplay {
    /// The awaiting call whose node is `parent`, if any.
    fn awaiting_at(&self, parent: Option<u64>) -> Option<usize> {
        self.awaiting.iter().position(|w| Some(w.call) == parent)
    }
}

/// An allowed call waiting for its `tool_output`.
#[derive(Debug)]
struct Awaiting {
    /// The `tool_call` node.
    call: u64,
    /// Its trajectory position.
    position: u32,
    /// The tool's cost.
    cost: u64,
    /// The tool.
    tool: String,
    /// The contract capability it acted through.
    capability: Option<String>,
    /// The contract reservation its output must settle.
    reservation: Option<u64>,
    /// Whether the broker refused it (a `refusal` recorded under it).
    refused: bool,
}

/// How the regulation checks are replayed.
#[derive(Debug)]
pub enum RegulationReplay<'n> {
    /// The APM names no policy set: every verdict must be `not_applicable`.
    NotConfigured,
    /// Recomputed with the policy set the APM names.
    Recompute(Box<knox_regulation::Regulator<'n>>),
    /// The APM names a policy set the verifier does not have (the reason is reported
    /// as a refusal elsewhere): recorded verdicts are checked for shape only.
    Unavailable,
}

/// Inputs of the replay.
#[derive(Debug)]
pub struct Context<'a> {
    /// The APM.
    pub apm: &'a Apm,
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// The manifest the APM names.
    pub manifest: &'a ToolkitManifest,
    /// Run identifier.
    pub run_id: &'a str,
    /// Models the bundle declares.
    pub models: &'a [ModelInfo],
    /// The signing key.
    pub key: &'a PublicKey,
    /// The regulation guard.
    pub regulation: &'a RegulationReplay<'a>,
    /// The signed capability contract the APM names, verified (see the `contract` stage
    /// of [`knox_guards::contract`]).
    pub contract: Option<&'a knox_contract::Verified>,
    /// The monitor's rules, fixed by the evidence format.
    pub rules: MonitorRules,
}

/// How a refused call's group ends.
enum Refusal {
    /// A guard blocked it, with this reason.
    Blocked {
        /// The failing guard.
        guard: GuardKind,
        /// Its reason, as the call records it.
        reason: String,
    },
    /// The stop guard interrupted the agent.
    Interrupted(StopCause),
}

/// The ending node `end` of the refused `call`: the stop guard's `interrupt` of the
/// cause, attested by the run's key, or the failing guard's unattested `blocked` node,
/// the call recording the guard's reason.
fn check_end(end: &Node, call: &Node, refusal: &Refusal, key: &PublicKey) -> Result<(), Fail> {
    match refusal {
        Refusal::Interrupted(cause) => {
            if end.kind != NodeKind::Interrupt || parse::<InterruptPayload>(end)?.cause != *cause {
                return fail(end, "stop guard fired but no matching interrupt follows");
            }
            check_attested(end, key)
        }
        Refusal::Blocked { guard, reason } => {
            if *guard != GuardKind::Stop && call.block_reason.as_ref() != Some(reason) {
                return fail(call, "block reason differs from the failing check's");
            }
            if end.kind != NodeKind::Blocked
                || !end.attestations.is_empty()
                || parse::<BlockedPayload>(end)?.guard != *guard
            {
                return fail(end, "failed guard without its blocked node");
            }
            Ok(())
        }
    }
}

/// The stop guard's clock as the call's first check recorded it: a signal only where
/// the APM watches one, and time that never goes backwards for the agent (`last`, the
/// agent's latest, advanced).
fn recorded_clock(
    call: &Node,
    got: &[(&Node, &CheckPayload)],
    apm: &Apm,
    last: &mut u64,
) -> Result<Clock, Fail> {
    let Some((
        stop_node,
        CheckPayload {
            detail: CheckDetail::Stop {
                elapsed_ms, signal, ..
            },
            ..
        },
    )) = got.first()
    else {
        return fail(call, "the stop guard's check is missing");
    };
    if *signal && !apm.guards.stop.external {
        return fail(
            stop_node,
            "external stop signal recorded although the APM does not watch one",
        );
    }
    if *elapsed_ms < *last {
        return fail(stop_node, "elapsed time went backwards");
    }
    *last = *elapsed_ms;
    Ok(Clock {
        elapsed_ms: *elapsed_ms,
        signal: *signal,
    })
}

/// The proposal re-classified from what the call recorded, and whether it was a
/// truncated one whose input check lies beyond a journal `cut`. A truncated proposal
/// cannot be re-parsed: its recorded input failure can only block, never admit (the
/// pipeline's input check is a failure with the recorded error, or with none if none
/// was recorded: then it differs).
fn recorded_proposal<'a>(
    call: &Node,
    p: ToolCallPayload,
    got: &[(&Node, &CheckPayload)],
    cut: bool,
    cx: &Context<'a>,
) -> Result<(Proposal<'a>, bool), Fail> {
    match Input::reclassify(&p, cx.manifest, cx.rules) {
        Ok(Some(input)) => Ok((Proposal::recorded(p, input), false)),
        Ok(None) => {
            let recorded = got.get(1).and_then(|(_, c)| match &c.detail {
                CheckDetail::Input { error: Some(e) } => Some(e.clone()),
                _ => None,
            });
            let pending = cut && got.get(1).is_none();
            let error = recorded.unwrap_or_default();
            Ok((Proposal::recorded(p, Input::Malformed { error }), pending))
        }
        Err(e) => fail(call, e.to_string()),
    }
}

/// The run's outputs the monitor saw when it decided: as many as the data-flow check
/// records (outputs committed before this call; the monitor may have seen fewer when
/// another agent's output was committed meanwhile), else all so far.
fn outputs_seen<'r>(
    got: &[(&Node, &CheckPayload)],
    run: &'r [Arc<SharedOutput>],
) -> Result<&'r [Arc<SharedOutput>], Fail> {
    let seen = got.iter().find_map(|(n, c)| match &c.detail {
        CheckDetail::DataFlow {
            outputs: Some(k), ..
        } => Some((n.seq, *k as usize)),
        _ => None,
    });
    match seen {
        Some((node, k)) => run.get(..k).ok_or_else(|| {
            Fail::at(
                node,
                format!(
                    "data-flow check saw {k} outputs of the run, only {} precede it",
                    run.len()
                ),
            )
        }),
        None => Ok(run),
    }
}

/// The proof-of-inference nodes after the root, one per declared model in order, each
/// matching its model; the index after them.
fn proofs_of_inference(nodes: &[Node], models: &[ModelInfo]) -> Result<usize, Fail> {
    let mut i = 1;
    for m in models {
        let Some(n) = nodes.get(i) else {
            return Err(Fail::unplaced("proof_of_inference nodes missing"));
        };
        expect_plain(n, NodeKind::ProofOfInference, Some(0), "monitor")?;
        let p = parse::<ProofOfInferencePayload>(n)?;
        let same = p.role == m.role
            && p.model == m.name
            && p.weights_hash == m.weights_hash
            && p.declared == m.declared;
        if !same {
            return fail(
                n,
                format!(
                    "proof of inference for `{}` does not match the bundle's declared model",
                    p.role
                ),
            );
        }
        i += 1;
    }
    Ok(i)
}

/// The planner's `agent_step` of a multi-agent run: its decomposition is the APM's
/// sub-agents and their tasks.
fn check_decomposition(step: &Node, apm: &Apm) -> Result<(), Fail> {
    expect_plain(step, NodeKind::AgentStep, Some(0), PLANNER_AGENT)?;
    let p = parse::<AgentStepPayload>(step)?;
    let want: Vec<Assignment> = apm
        .agents
        .iter()
        .map(|a| Assignment {
            agent: a.id.clone(),
            tasks: a.tasks.clone(),
        })
        .collect();
    if p.decomposition != want {
        return fail(step, "decomposition differs from the APM's sub-agents");
    }
    Ok(())
}

/// The ledger event an output records for its call's contract `reservation` (none
/// without one): it settles exactly that reservation, saying it ran unless the broker
/// `refused` it.
fn settlement(
    n: &Node,
    reservation: Option<u64>,
    refused: bool,
    settled: Option<knox_types::payload::Settlement>,
) -> Result<Option<LedgerEvent>, Fail> {
    match (reservation, settled) {
        (None, None) => Ok(None),
        (Some(id), Some(s)) if s.reservation == id && s.executed != refused => {
            Ok(Some(LedgerEvent::Settled {
                id,
                executed: s.executed,
            }))
        }
        (Some(id), None) => fail(
            n,
            format!("tool_output does not settle contract reservation {id}"),
        ),
        (Some(id), Some(_)) => fail(
            n,
            format!(
                "tool_output settles another reservation than {id}, or says it ran when the broker refused (or the reverse)"
            ),
        ),
        (None, Some(_)) => fail(n, "tool_output settles a contract reservation no call made"),
    }
}

/// A judge opinion as recorded, to recompute the regulation check with: from a
/// declared judge model of the bundle, with a verdict and information types the monitor
/// records (anything else a judge says is dropped: another one was written afterwards),
/// its agreement left for the recomputation. Why not, otherwise.
fn recorded_judge(
    j: &knox_types::payload::JudgeOpinion,
    models: &[ModelInfo],
) -> Result<knox_types::payload::JudgeOpinion, String> {
    let declared = models.iter().any(|m| {
        m.role == ModelRole::Judge && m.name == j.model && m.weights_hash == j.weights_hash
    });
    if !declared {
        return Err(format!(
            "judge `{}` is not a declared judge model of the bundle",
            j.model
        ));
    }
    if let Some(v) = j.verdict.as_deref()
        && !matches!(v, "compliant" | "non_compliant" | "not_applicable")
    {
        return Err(format!("unknown judge verdict `{v}`"));
    }
    if let Some(t) = j
        .info_types
        .iter()
        .find(|t| !knox_regulation::judge::INFO_TYPES.contains(&t.as_str()))
    {
        return Err(format!("unknown judge information type `{t}`"));
    }
    let mut j = j.clone();
    j.agrees = None;
    Ok(j)
}

/// A recorded check: its node and payload.
type RecordedCheck<'n> = (&'n Node, &'n CheckPayload);

/// The `check` nodes of `call` from `nodes[j]` on (children of the call, in order,
/// each consistent: same agent, no attestation or block reason, allowed exactly when
/// passed), and the index after them.
fn gather_checks<'n>(
    nodes: &'n [Node],
    mut j: usize,
    call: &Node,
) -> Result<(Vec<RecordedCheck<'n>>, usize), Fail> {
    let mut checks = Vec::new();
    while let Some(n) = nodes
        .get(j)
        .filter(|n| n.kind == NodeKind::Check && n.parent == Some(call.seq))
    {
        if n.agent != call.agent || !n.attestations.is_empty() || n.block_reason.is_some() {
            return fail(
                n,
                "check node's agent, attestations or block reason are inconsistent",
            );
        }
        let c = parse::<CheckPayload>(n)?;
        if n.allowed != c.passed {
            return fail(n, "check's allowed flag differs from its result");
        }
        checks.push((n, c));
        j += 1;
    }
    Ok((checks, j))
}

/// The recorded call `p` against the recomputed `eval`: the position and expected
/// call are the pipeline's (the pointer's in the exact mode, the automaton's choice
/// in the tolerant mode), and the expected call's hash is its content's.
fn compare_call(call: &Node, p: &ToolCallPayload, eval: &Evaluation<'_>) -> Result<(), Fail> {
    let position = eval.call.position;
    if p.position != position {
        return fail(
            call,
            format!("position {} but replay is at {position}", p.position),
        );
    }
    if p.expected != eval.call.expected {
        return fail(
            call,
            format!("expected call differs from the APM trajectory at position {position}"),
        );
    }
    if let Some(e) = &eval.call.expected
        && e.compute_hash() != e.hash
    {
        return fail(call, "expected call's hash does not match its content");
    }
    Ok(())
}

/// The recorded checks against the recomputed ones (`want`): equal, one for one.
/// Within a journal `cut` inside this call's group, what is there must match (a
/// reservation beyond the cut aside, when a check is `pending`); `false` then: the
/// group is not whole and the replay goes no further with it.
fn compare_checks(
    call: &Node,
    checks: &[(&Node, &CheckPayload)],
    want: &[CheckPayload],
    cut: bool,
    pending: bool,
) -> Result<bool, Fail> {
    let partial = cut && (pending || checks.len() < want.len());
    if !partial && checks.len() != want.len() {
        return fail(
            call,
            format!(
                "{} checks recorded, {} guards apply",
                checks.len(),
                want.len()
            ),
        );
    }
    for ((n, got), w) in checks.iter().zip(want) {
        if *got != w && !(partial && pending && reservation_beyond_cut(got, w)) {
            return fail(
                n,
                format!(
                    "recorded `{}` check differs from the recomputed decision",
                    got.guard.as_str()
                ),
            );
        }
    }
    Ok(!partial)
}

/// Whether `got` is the recomputed contract check `w` but for the reservation, which
/// the monitor clears when a later guard blocks the call: a journal cut before that
/// guard's check (the decision undecided) leaves it unknown, so both are a prefix.
fn reservation_beyond_cut(got: &CheckPayload, w: &CheckPayload) -> bool {
    match (&got.detail, &w.detail) {
        (CheckDetail::Contract(g), CheckDetail::Contract(c)) if g.reservation.is_none() => {
            let mut c = (**c).clone();
            c.reservation = None;
            c.approval_nonce = None;
            got.guard == w.guard && got.passed == w.passed && **g == c
        }
        _ => false,
    }
}

/// Replays the graph. `nodes` must already have passed [`chain`]. When `finished` is
/// false the graph may end anywhere (a journal's prefix), even inside its header.
pub fn replay(cx: &Context<'_>, nodes: &[Node], finished: bool) -> Result<Findings, Fail> {
    let mut r = Replayer {
        cx,
        finished,
        agents: HashMap::new(),
        guards: Pipeline::new(cx.apm, cx.manifest)
            .with_contract(cx.contract)
            .with_rules(cx.rules),
        run: Vec::new(),
        ledger: Ledger::new(),
        found: Findings::default(),
    };
    let mut i = match r.header(nodes) {
        Ok(i) => i,
        Err(Fail { node: None, .. }) if !finished => return Ok(r.found),
        Err(e) => return Err(e),
    };
    while let Some(n) = nodes.get(i) {
        i = match n.kind {
            NodeKind::ToolCall => r.tool_call(nodes, i)?,
            NodeKind::ToolOutput => r.tool_output(n).map(|()| i + 1)?,
            NodeKind::Check => {
                return fail(n, "check node not attached to the tool_call before it");
            }
            NodeKind::Blocked => r.kernel_denial(n).map(|()| i + 1)?,
            NodeKind::Heard => r.heard(n).map(|()| i + 1)?,
            NodeKind::Unanswered => r.unanswered(n).map(|()| i + 1)?,
            NodeKind::Interrupt => {
                return fail(n, "interrupt node without the checks it follows");
            }
            other => {
                return fail(
                    n,
                    format!(
                        "unexpected `{}` node after the run's header",
                        other.as_str()
                    ),
                );
            }
        };
    }
    let mut unfinished: Vec<u64> = r
        .agents
        .values()
        .flat_map(|a| a.awaiting.iter().map(|w| w.call))
        .collect();
    unfinished.sort_unstable();
    r.found.unfinished = unfinished;
    r.found.choices = r
        .agents
        .values()
        .map(|a| a.state.choices)
        .filter(|c| *c > 1)
        .collect();
    Ok(r.found)
}

struct Replayer<'a, 'c> {
    cx: &'c Context<'a>,
    /// False for a journal: the graph may stop in the middle of a call's group.
    finished: bool,
    agents: HashMap<&'a str, AgentReplay>,
    /// The monitor's guards.
    guards: Pipeline<'a>,
    /// The run's outputs in commit order (APMs closing the content or label channel).
    run: Vec<Arc<SharedOutput>>,
    found: Findings,
    /// The contract's ledger, rebuilt in commit order from the reservations of allowed
    /// calls and the settlements recorded with their outputs.
    ledger: Ledger,
}

fn parse<T: Payload>(n: &Node) -> Result<&T, Fail> {
    n.payload
        .get::<T>()
        .map_err(|e| Fail::at(n.seq, e.to_string()))
}

fn expect_plain(n: &Node, kind: NodeKind, parent: Option<u64>, agent: &str) -> Result<(), Fail> {
    if n.kind != kind {
        return fail(
            n,
            format!(
                "expected a `{}` node, found `{}`",
                kind.as_str(),
                n.kind.as_str()
            ),
        );
    }
    if n.parent != parent {
        return fail(n, format!("parent {:?}, expected {:?}", n.parent, parent));
    }
    if n.agent != agent {
        return fail(n, format!("agent `{}`, expected `{agent}`", n.agent));
    }
    if !n.allowed || n.block_reason.is_some() || !n.attestations.is_empty() {
        return fail(
            n,
            "structural node must be allowed, without block reason or attestations",
        );
    }
    Ok(())
}

impl<'a> Replayer<'a, '_> {
    /// A `heard` node: the monitor's, under the root, plain; its tool one whose output
    /// carries labels in the manifest. It joins the run's outputs in commit order, as
    /// labelled data without text (`SharedOutput::heard`), as the monitor's did.
    fn heard(&mut self, n: &Node) -> Result<(), Fail> {
        expect_plain(n, NodeKind::Heard, Some(0), "monitor")?;
        let p = parse::<HeardPayload>(n)?;
        let labelled = self
            .cx
            .manifest
            .tool(&p.tool)
            .and_then(|t| t.annotations.returns.as_ref())
            .is_some_and(|r| !r.info_types.is_empty());
        if !labelled {
            return fail(
                n,
                format!(
                    "heard node names `{}`, not a tool whose output carries labels",
                    p.tool
                ),
            );
        }
        if self.guards.shares_outputs() {
            self.run.push(Arc::new(SharedOutput::heard(n.seq, &p.tool)));
        }
        Ok(())
    }

    /// Root, proof-of-inference nodes, and (multi-agent) the decomposition and branches.
    fn header(&mut self, nodes: &[Node]) -> Result<usize, Fail> {
        let apm = self.cx.apm;
        let Some(root) = nodes.first() else {
            return Err(Fail::unplaced("the graph has no root node"));
        };
        expect_plain(root, NodeKind::Root, None, "monitor")?;
        let rp = parse::<RootPayload>(root)?;
        if rp.apm_hash != self.cx.apm_hash {
            return fail(root, "root names another APM");
        }
        if rp.topology != apm.topology || rp.run_id != self.cx.run_id {
            return fail(root, "root's run id or topology differs from the bundle's");
        }
        let mut i = proofs_of_inference(nodes, self.cx.models)?;
        if let Some(failure) = &apm.planning {
            return self.plan_failed(nodes, i, failure);
        }
        let multi = apm.topology.kind == TopologyKind::MtMa;
        if multi {
            let Some(step) = nodes.get(i) else {
                return Err(Fail::unplaced("agent_step missing"));
            };
            check_decomposition(step, apm)?;
            i += 1;
        }
        for (k, plan) in apm.agents.iter().enumerate() {
            let cursor = if multi {
                let Some(b) = nodes.get(i) else {
                    return Err(Fail::unplaced(format!("branch of `{}` missing", plan.id)));
                };
                expect_plain(b, NodeKind::AgentBranch, Some(0), &plan.id)?;
                let p = parse::<AgentBranchPayload>(b)?;
                if p.agent != plan.id || p.tasks != plan.tasks {
                    return fail(b, format!("branch does not match sub-agent `{}`", plan.id));
                }
                i += 1;
                b.seq
            } else {
                0
            };
            let st = AgentReplay {
                state: AgentState::new(apm, k),
                cursor,
                last_elapsed: 0,
                awaiting: Vec::new(),
            };
            if self.agents.insert(plan.id.as_str(), st).is_some() {
                return Err(Fail::unplaced(format!(
                    "APM lists agent `{}` twice",
                    plan.id
                )));
            }
        }
        Ok(i)
    }

    /// The header's end when the APM records a planning failure: the APM permits
    /// nothing, and the one node after the proofs of inference is the attested
    /// `plan_failed` interrupt under the root, with the APM's reason; nothing may follow.
    fn plan_failed(
        &mut self,
        nodes: &[Node],
        i: usize,
        failure: &PlanningFailure,
    ) -> Result<usize, Fail> {
        let apm = self.cx.apm;
        if apm.agents.iter().any(|a| !a.trajectory.is_empty())
            || !apm.guards.syscall.toolkits.is_empty()
        {
            return Err(Fail::at(
                0,
                "the APM records a planning failure but permits tool calls",
            ));
        }
        let Some(n) = nodes.get(i) else {
            return Err(Fail::unplaced("the plan_failed interrupt is missing"));
        };
        let reason = failure.interrupt_reason();
        let well_formed = n.kind == NodeKind::Interrupt
            && n.parent == Some(0)
            && n.agent == PLANNER_AGENT
            && !n.allowed
            && n.block_reason.as_deref() == Some(reason.as_str());
        if !well_formed {
            return fail(
                n,
                "the APM records a planning failure: expected the planner's `plan_failed` interrupt under the root, with the APM's reason",
            );
        }
        if parse::<InterruptPayload>(n)?.cause != StopCause::PlanFailed {
            return fail(n, "the planning failure's interrupt names another cause");
        }
        check_attested(n, self.cx.key)?;
        if let Some(after) = nodes.get(i + 1) {
            return fail(
                after,
                "node after the plan_failed interrupt: nothing may run when planning failed",
            );
        }
        self.found
            .interrupts
            .push(format!("{PLANNER_AGENT}: {reason}"));
        Ok(i + 1)
    }

    /// A `tool_call`, its checks and its `blocked`/`interrupt` node; returns the index
    /// after the group. In stages: the call's place in its agent's branch
    /// ([`Self::call_payload`]), its checks ([`gather_checks`]), the pipeline's
    /// decision recomputed ([`Self::evaluate`]) and compared with what was recorded
    /// ([`compare_call`], [`compare_checks`]), the agent's state advanced, and the
    /// group's ending checked ([`Self::ending`]).
    fn tool_call(&mut self, nodes: &[Node], i: usize) -> Result<usize, Fail> {
        let call = nodes
            .get(i)
            .ok_or((None, "index out of range".to_string()))?;
        let p = self.call_payload(call)?;
        let (checks, j) = gather_checks(nodes, i + 1, call)?;
        let cut = !self.finished && j >= nodes.len();
        if cut && checks.is_empty() {
            return Ok(j);
        }
        let (eval, pending) = self.evaluate(call, p.clone(), &checks, cut)?;
        compare_call(call, &p, &eval)?;
        if !compare_checks(call, &checks, &eval.checks, cut, pending)? {
            return Ok(j);
        }
        let st = self
            .agents
            .get_mut(call.agent.as_str())
            .ok_or((Some(call.seq), "agent vanished".to_string()))?;
        st.state.apply(eval.change());
        let reserved = eval.reservation();
        let reservation = match &reserved {
            Some(ev @ LedgerEvent::Reserved { id, .. }) => {
                self.ledger
                    .apply(ev)
                    .map_err(|e| Fail::at(call.seq, format!("contract ledger: {e}")))?;
                Some(*id)
            }
            _ => None,
        };
        let tool = eval.call.actual.as_ref().map(|a| a.tool.clone());
        let refusal = match eval.decision {
            Decision::Allow {
                position,
                cost,
                action,
                ..
            } => {
                if !call.allowed || call.block_reason.is_some() {
                    return fail(
                        call,
                        "every guard passed but the call is not marked allowed",
                    );
                }
                st.awaiting.push(Awaiting {
                    call: call.seq,
                    position,
                    cost,
                    capability: knox_guards::contract::capability_of(&action),
                    tool: action.tool,
                    reservation,
                    refused: false,
                });
                return Ok(j);
            }
            // Checks equal to the recomputed ones decide: a pending decision left above.
            Decision::Undecided => return Ok(j),
            Decision::Block { guard, reason, .. } => Refusal::Blocked { guard, reason },
            Decision::Interrupt { cause } => Refusal::Interrupted(cause),
        };
        self.ending(nodes, j, call, &checks, refusal, tool)
    }

    /// The recorded `tool_call` `call` in its place: its agent is in the APM and not
    /// interrupted, no allowed call of it awaits its output (unless the run allows
    /// parallel calls), it follows the agent's previous step, carries no attestation,
    /// and its ordinal is the replay's. Its payload.
    fn call_payload(&self, call: &Node) -> Result<ToolCallPayload, Fail> {
        let Some(st) = self.agents.get(call.agent.as_str()) else {
            return fail(call, format!("agent `{}` is not in the APM", call.agent));
        };
        if st.state.stopped {
            return fail(call, "tool_call after the agent was interrupted");
        }
        if let Some(prev) = st
            .awaiting
            .first()
            .filter(|_| !self.cx.rules.parallel_calls)
        {
            return fail(
                call,
                format!("allowed tool_call {} has no tool_output", prev.call),
            );
        }
        if call.parent != Some(st.cursor) {
            return fail(
                call,
                format!(
                    "parent {:?} is not the agent's previous step {}",
                    call.parent, st.cursor
                ),
            );
        }
        if !call.attestations.is_empty() {
            return fail(call, "tool_call carries attestations");
        }
        let p = parse::<ToolCallPayload>(call)?;
        let actions = st.state.actions;
        if p.ordinal != actions {
            return fail(
                call,
                format!("ordinal {} but replay is at {actions}", p.ordinal),
            );
        }
        Ok(p.clone())
    }

    /// The ending of a refused call's group at `nodes[j]`: a `blocked` node of the
    /// failing guard (unattested), or the stop guard's attested `interrupt`, attached
    /// to the first failed check with the call's reason; the agent's branch continues
    /// from it. Returns the index after it.
    fn ending(
        &mut self,
        nodes: &[Node],
        j: usize,
        call: &Node,
        checks: &[(&Node, &CheckPayload)],
        refusal: Refusal,
        tool: Option<String>,
    ) -> Result<usize, Fail> {
        let guard = match &refusal {
            Refusal::Blocked { guard, .. } => *guard,
            Refusal::Interrupted(_) => GuardKind::Stop,
        };
        let Some((failed_node, _)) = checks.iter().find(|(_, c)| !c.passed) else {
            return fail(call, "a guard blocked but no check failed");
        };
        if call.allowed || call.block_reason.is_none() {
            return fail(
                call,
                format!(
                    "the `{}` guard failed but the call is marked allowed",
                    guard.as_str()
                ),
            );
        }
        let Some(end) = nodes.get(j) else {
            if !self.finished {
                return Ok(j);
            }
            return Err(Fail::at(
                call.seq,
                "the graph ends before the blocked/interrupt node of this call",
            ));
        };
        if end.parent != Some(failed_node.seq)
            || end.agent != call.agent
            || end.allowed
            || end.block_reason != call.block_reason
        {
            return fail(
                end,
                "blocked/interrupt node is not attached to the failing check",
            );
        }
        check_end(end, call, &refusal, self.cx.key)?;
        match refusal {
            Refusal::Interrupted(cause) => {
                self.found
                    .interrupts
                    .push(format!("{}: {}", call.agent, cause.as_str()))
            }
            Refusal::Blocked { guard, .. } => self.found.blocked.push(BlockedAction {
                node: call.seq,
                agent: call.agent.clone(),
                tool,
                guard: guard.as_str().into(),
                reason: call.block_reason.clone().unwrap_or_default(),
            }),
        }
        let st = self
            .agents
            .get_mut(call.agent.as_str())
            .ok_or((Some(call.seq), "agent vanished".to_string()))?;
        st.cursor = end.seq;
        Ok(j + 1)
    }

    /// The monitor's evaluation of this call, recomputed by the same pipeline from what
    /// was recorded: the stop guard's clock and signal (checked monotone and watched),
    /// the proposal (re-classified), the regulation opinion (checked against the
    /// declared judge models). `true` with it when a check that could only be
    /// recomputed from its recorded content (the regulation check, the input check of a
    /// truncated proposal) lies beyond the end of a journal cut inside this call's group
    /// (`cut`); outside a cut, such a missing check is tampering.
    fn evaluate(
        &mut self,
        call: &Node,
        p: ToolCallPayload,
        got: &[(&Node, &CheckPayload)],
        cut: bool,
    ) -> Result<(Evaluation<'a>, bool), Fail> {
        let cx = self.cx;
        let st = self
            .agents
            .get_mut(call.agent.as_str())
            .ok_or((Some(call.seq), "unknown agent".to_string()))?;
        let clock = recorded_clock(call, got, cx.apm, &mut st.last_elapsed)?;
        let (proposal, truncated_cut) = recorded_proposal(call, p, got, cut, cx)?;
        let mut source = Recorded {
            mode: cx.regulation,
            models: cx.models,
            call: call.seq,
            got,
            cut,
            error: None,
            flagged: 0,
            warnings: Vec::new(),
        };
        let run = outputs_seen(got, &self.run)?;
        // The contract stage decides again at the recorded time, with the recorded
        // approval token, in the ledger the earlier nodes rebuilt.
        let recorded = got.iter().find_map(|(_, c)| match &c.detail {
            CheckDetail::Contract(cc) => Some(&**cc),
            _ => None,
        });
        let contract_input = recorded.map(|cc| ContractInput {
            at_ms: cc.at_ms,
            approval: cc.approval.as_ref(),
            ledger: &self.ledger,
            used_by: cc.approval_used_by.as_deref(),
        });
        let mut eval =
            self.guards
                .evaluate_with(&st.state, proposal, clock, &mut source, run, contract_input);
        if let Some(e) = source.error {
            return Err(e);
        }
        self.found.flagged += source.flagged;
        self.found.warnings.append(&mut source.warnings);
        if truncated_cut && eval.checks.len() > 1 {
            // Only the stop check can be compared.
            eval.checks.truncate(1);
            eval.decision = Decision::Undecided;
        }
        let pending = matches!(eval.decision, Decision::Undecided);
        Ok((eval, pending))
    }

    /// A denial the kernel layer (or the broker) recorded while an allowed call ran: it
    /// hangs under that call, before its output.
    fn kernel_denial(&mut self, n: &Node) -> Result<(), Fail> {
        let Some(st) = self.agents.get_mut(n.agent.as_str()) else {
            return fail(n, format!("agent `{}` is not in the APM", n.agent));
        };
        if st.awaiting.is_empty() {
            return fail(n, "blocked node without the checks it follows");
        }
        let Some(at) = st.awaiting_at(n.parent) else {
            return fail(n, "kernel denial not attached to the running call");
        };
        let call = st.awaiting.get(at).map_or(0, |w| w.call);
        if n.allowed || n.block_reason.is_none() || !n.attestations.is_empty() {
            return fail(n, "kernel denial not attached to the running call");
        }
        let p = parse::<BlockedPayload>(n)?;
        let Some(event) = p
            .kernel
            .as_ref()
            .filter(|_| matches!(p.guard, GuardKind::Kernel | GuardKind::Broker))
        else {
            return fail(
                n,
                "blocked node under a running call must be a kernel or broker denial",
            );
        };
        // The kernel may deny a system call that `Auth` lists, for its arguments
        // (a clone with namespace flags, a socket of another family, an exec outside the
        // execute grants): only the event's shape is checked here.
        match (p.guard, event.event.as_str()) {
            (GuardKind::Kernel, "syscall")
                if event.syscall.as_deref().is_some_and(|s| !s.is_empty()) => {}
            (GuardKind::Kernel, "limit") | (GuardKind::Broker, "refusal") => {}
            (g, e) => return fail(n, format!("`{e}` event under guard `{}`", g.as_str())),
        }
        if p.guard == GuardKind::Broker
            && let Some(w) = st.awaiting.get_mut(at)
        {
            w.refused = true;
        }
        let tool = None;
        self.found.blocked.push(BlockedAction {
            node: call,
            agent: n.agent.clone(),
            tool,
            guard: p.guard.as_str().into(),
            reason: n.block_reason.clone().unwrap_or_default(),
        });
        Ok(())
    }

    /// An `unanswered` node (format v4): an allowed call of the agent, still awaiting
    /// its output, closed without one — plain, under that call, its cost the call's,
    /// and a reservation the call held settled as executed (a call no output came back
    /// for may have run: its hold is never released). The agent's state does not
    /// change (no output, nothing spent).
    fn unanswered(&mut self, n: &Node) -> Result<(), Fail> {
        if !self.cx.rules.parallel_calls {
            return fail(n, "an `unanswered` node in evidence of a format before v4");
        }
        let Some(st) = self.agents.get_mut(n.agent.as_str()) else {
            return fail(n, format!("agent `{}` is not in the APM", n.agent));
        };
        let Some(at) = st.awaiting_at(n.parent) else {
            return fail(
                n,
                "unanswered node not attached to an allowed call awaiting its output",
            );
        };
        if !n.allowed || n.block_reason.is_some() || !n.attestations.is_empty() {
            return fail(
                n,
                "unanswered node must be allowed, without block reason or attestations",
            );
        }
        let p = parse::<UnansweredPayload>(n)?;
        let Some(w) = st.awaiting.get(at) else {
            return fail(
                n,
                "unanswered node not attached to an allowed call awaiting its output",
            );
        };
        if p.cost != w.cost {
            return fail(
                n,
                format!("cost {} differs from the tool's cost {}", p.cost, w.cost),
            );
        }
        match (w.reservation, p.settled) {
            (None, None) => {}
            (Some(id), Some(s)) if s.reservation == id && s.executed => {
                self.ledger
                    .apply(&LedgerEvent::Settled { id, executed: true })
                    .map_err(|e| Fail::at(n.seq, format!("contract ledger: {e}")))?;
            }
            (Some(id), _) => {
                return fail(
                    n,
                    format!(
                        "unanswered node does not settle contract reservation {id} as executed"
                    ),
                );
            }
            (None, Some(_)) => {
                return fail(
                    n,
                    "unanswered node settles a contract reservation no call made",
                );
            }
        }
        st.awaiting.remove(at);
        Ok(())
    }

    fn tool_output(&mut self, n: &Node) -> Result<(), Fail> {
        let Some(st) = self.agents.get_mut(n.agent.as_str()) else {
            return fail(n, format!("agent `{}` is not in the APM", n.agent));
        };
        if st.awaiting.is_empty() {
            return fail(n, "tool_output without an allowed tool_call awaiting it");
        }
        let Some(at) = st.awaiting_at(n.parent) else {
            let calls: Vec<String> = st.awaiting.iter().map(|w| w.call.to_string()).collect();
            return fail(
                n,
                format!(
                    "tool_output is not attached to an allowed call awaiting it ({})",
                    calls.join(", ")
                ),
            );
        };
        let Some(&Awaiting {
            call,
            position,
            cost,
            reservation,
            refused,
            ..
        }) = st.awaiting.get(at)
        else {
            return fail(n, "tool_output without an allowed tool_call awaiting it");
        };
        if !n.allowed || n.block_reason.is_some() || !n.attestations.is_empty() {
            return fail(
                n,
                format!("tool_output is not attached to allowed call {call}"),
            );
        }
        let p = parse::<ToolOutputPayload>(n)?;
        if p.cost != cost {
            return fail(
                n,
                format!("cost {} differs from the tool's cost {cost}", p.cost),
            );
        }
        if let Some(settled) = settlement(n, reservation, refused, p.settled)? {
            self.ledger
                .apply(&settled)
                .map_err(|e| Fail::at(n.seq, format!("contract ledger: {e}")))?;
        }
        let Awaiting {
            tool, capability, ..
        } = st.awaiting.remove(at);
        let out = RecordedOutput {
            node: n.seq,
            position,
            tool,
            cost,
            output: p.output.clone(),
            capability,
        };
        let labels = matches!(self.cx.regulation, RegulationReplay::Recompute(_));
        if self.guards.shares_outputs() {
            self.run
                .push(Arc::new(SharedOutput::of(st.state.plan, &out)));
        }
        st.state.record_output(self.cx.manifest, out, labels);
        st.cursor = n.seq;
        Ok(())
    }
}

/// The verifier's regulation source: the recorded check at the pipeline's index,
/// validated, and recomputed when the verifier has the APM's policy set (with the
/// recorded judge opinion, if its model is a declared judge).
struct Recorded<'r, 'n> {
    mode: &'r RegulationReplay<'n>,
    models: &'r [ModelInfo],
    /// The `tool_call` node.
    call: u64,
    got: &'r [(&'r Node, &'r CheckPayload)],
    cut: bool,
    /// The first problem found with the recorded check.
    error: Option<Fail>,
    flagged: u64,
    warnings: Vec<String>,
}

impl Recorded<'_, '_> {
    fn refuse(&mut self, node: u64, why: impl Into<String>) -> Option<CheckPayload> {
        self.error = Some(Fail::at(node, why));
        None
    }

    /// Whether a recorded regulation check's verdict can stand, whatever it decided: a
    /// verdict of the vocabulary, and, with no policy set in force, `not_applicable`
    /// by no policy. Otherwise the check is refused (the replay's error is set).
    fn verdict_can_stand(&mut self, node: u64, verdict: &str, policies: &[String]) -> bool {
        if !matches!(verdict, "compliant" | "non_compliant" | "not_applicable") {
            self.refuse(node, format!("unknown regulation verdict `{verdict}`"));
            return false;
        }
        if matches!(self.mode, RegulationReplay::NotConfigured)
            && (verdict != "not_applicable" || !policies.is_empty())
        {
            self.refuse(
                node,
                "regulation verdict without a policy set must be not_applicable",
            );
            return false;
        }
        true
    }
}

impl RegulationSource for Recorded<'_, '_> {
    fn check(&mut self, d: &Disclosure<'_>) -> Option<CheckPayload> {
        let Some((n, recorded)) = self.got.get(d.index) else {
            // Cut before it: the checks before it must still match (the caller
            // compares them).
            if self.cut {
                return None;
            }
            return self.refuse(self.call, "regulation check missing");
        };
        let CheckDetail::Regulation {
            verdict,
            policies,
            judge,
            ..
        } = &recorded.detail
        else {
            return self.refuse(n.seq, "regulation check expected");
        };
        if !self.verdict_can_stand(n.seq, verdict, policies) {
            return None;
        }
        if verdict == "not_applicable" {
            self.flagged += 1;
        }
        match self.mode {
            RegulationReplay::NotConfigured => {
                // Passed as its verdict says; the pipeline fails it closed if it must.
                let mut c = (*recorded).clone();
                c.passed = true;
                Some(c)
            }
            RegulationReplay::Unavailable => {
                self.warnings.push(format!(
                    "node {}: regulation verdict taken as recorded (the APM's policy set is not the verifier's)",
                    n.seq
                ));
                // A `not_applicable` that failed closed (after a labelled read) is
                // handed back as its verdict says; the pipeline fails it again if it must.
                let raw = verdict != "non_compliant";
                let failed_closed = verdict == "not_applicable" && !recorded.passed;
                if recorded.passed != raw && !failed_closed {
                    return self
                        .refuse(n.seq, "regulation check's result differs from its verdict");
                }
                let mut c = (*recorded).clone();
                c.passed = raw;
                Some(c)
            }
            RegulationReplay::Recompute(regulator) => {
                let judge = match judge.as_deref().map(|j| recorded_judge(j, self.models)) {
                    Some(Ok(j)) => Some(j),
                    Some(Err(why)) => return self.refuse(n.seq, why),
                    None => None,
                };
                Some(regulator.check(d.flow(regulator), judge))
            }
        }
    }

    fn egress(&mut self, e: &Egress<'_>) -> Option<CheckPayload> {
        let Some((n, recorded)) = self.got.get(e.index) else {
            if self.cut {
                return None;
            }
            return self.refuse(
                self.call,
                format!(
                    "regulation check of handing the output to remote model `{}` missing",
                    e.model.model
                ),
            );
        };
        let CheckDetail::Regulation {
            verdict,
            policies,
            judge,
            model,
            ..
        } = &recorded.detail
        else {
            return self.refuse(n.seq, "regulation check expected");
        };
        if model.as_deref() != Some(e.model) {
            return self.refuse(
                n.seq,
                format!(
                    "regulation check does not decide handing the output to remote model `{}`",
                    e.model.model
                ),
            );
        }
        if judge.is_some() {
            return self.refuse(n.seq, "no judge is asked about a remote model's input");
        }
        if !self.verdict_can_stand(n.seq, verdict, policies) {
            return None;
        }
        match self.mode {
            RegulationReplay::NotConfigured => {
                // The pipeline settles whether it passes.
                Some((*recorded).clone())
            }
            RegulationReplay::Unavailable => {
                self.warnings.push(format!(
                    "node {}: regulation verdict on remote model `{}` taken as recorded (the APM's policy set is not the verifier's)",
                    n.seq, e.model.model
                ));
                Some((*recorded).clone())
            }
            RegulationReplay::Recompute(regulator) => {
                Some(regulator.egress(e.entry, e.task, e.model))
            }
        }
    }
}

fn check_attested(n: &Node, key: &PublicKey) -> Result<(), Fail> {
    let id = key_id(&key.public_key.0);
    let Some(a) = n.attestations.first() else {
        return fail(n, "interrupt is not attested");
    };
    if n.attestations.len() != 1 || a.key != id || a.alg != knox_attest::key::ALG {
        return fail(n, "interrupt attestation names another key");
    }
    verify_signature(key, NODE_ATTESTATION_CONTEXT, &n.measurement.0, &a.sig)
        .map_err(|e| Fail::at(n.seq, format!("interrupt attestation: {e}")))
}
