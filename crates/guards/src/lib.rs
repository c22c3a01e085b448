#![doc = include_str!("../README.md")]

pub mod contract;
mod stages;

use std::sync::Arc;

use knox_policy::dataflow::OutputText;
use knox_policy::mediated::Caches;
use knox_policy::proposal::{self, Malformed};
use knox_policy::trajectory::{Automaton, RegexCache};
use knox_policy::{ToolEntry, ToolkitManifest};
use knox_regulation::Regulator;
use knox_regulation::flow::Seen;
use knox_types::Action;
use knox_types::apm::{Apm, ExpectedCall, RemoteModel, StopCause, TrajectoryMode};
use knox_types::digest::{Digest, tag};
use knox_types::payload::{
    CheckDetail, CheckPayload, GuardKind, MAX_RECORDED_PROPOSAL, ToolCallPayload,
};
use knox_types::regulation::InfoFlow;
use serde_json::Value;

pub use contract::ContractInput;
use stages::{Regulated, Step, input_stage};

/// An output of a tool whose content others can write: the data-flow guard's taint.
#[derive(Clone, Debug, PartialEq)]
pub struct TaintedOutput {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// The output.
    pub output: Value,
}

/// An output of a tool whose results carry data labels, for the regulation guard.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelledOutput {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// Trajectory position of the call that produced it.
    pub position: u32,
    /// The producing tool.
    pub tool: String,
    /// The output.
    pub output: Value,
}

/// An output of the run, shared by every agent's content and label checks (APMs that
/// close those channels, [`knox_types::apm::Closed`]): the monitor and the verifier keep
/// the run's outputs in commit order, and each disclosing call records how many of them
/// it saw.
#[derive(Clone, Debug, PartialEq)]
pub struct SharedOutput {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// Index of the producing agent's plan in the APM's agents.
    pub agent: usize,
    /// Trajectory position of the call in that agent's trajectory.
    pub position: u32,
    /// The producing tool.
    pub tool: String,
    /// The output.
    pub output: Value,
    /// A `heard` node, not an output of this run: labelled data of `tool` the run's
    /// remote model heard in another run. No text (`output` is null, `agent` and
    /// `position` belong to no plan): it reaches every disclosure whose content the
    /// model composes.
    pub heard: bool,
    /// What content matching reads of `output`, worked out on first use.
    pub text: OutputText,
    /// The contract capability the call acted through ([`contract::capability_of`]).
    pub capability: Option<String>,
}

impl SharedOutput {
    /// The run-wide view of an output agent `agent` recorded.
    pub fn of(agent: usize, out: &RecordedOutput) -> Self {
        Self {
            node: out.node,
            agent,
            position: out.position,
            tool: out.tool.clone(),
            output: out.output.clone(),
            heard: false,
            text: OutputText::new(),
            capability: out.capability.clone(),
        }
    }

    /// The run-wide view of `heard` node `node`: labelled output of `tool` the run's
    /// remote model heard elsewhere.
    pub fn heard(node: u64, tool: &str) -> Self {
        Self {
            node,
            agent: usize::MAX,
            position: u32::MAX,
            tool: tool.to_owned(),
            output: Value::Null,
            heard: true,
            text: OutputText::new(),
            capability: None,
        }
    }
}

/// Whether `apm` closes a channel that needs the run's outputs ([`SharedOutput`]):
/// content as a sink, or labels per run.
pub fn shares_outputs(apm: &Apm) -> bool {
    let c = apm.guards.closed;
    c.content || c.labels
}

/// The output of an allowed call, as it is recorded into the agent's state.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedOutput {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// Trajectory position of the call ([`Decision::Allow`]'s `position`).
    pub position: u32,
    /// The tool that ran.
    pub tool: String,
    /// Its cost ([`Decision::Allow`]'s `cost`).
    pub cost: u64,
    /// The output, as its canonical bytes read back.
    pub output: Value,
    /// The contract capability the call acted through, for a contract's tool that
    /// returns data ([`contract::capability_of`]).
    pub capability: Option<String>,
}

/// What the guards know of one agent: the same for the monitor and the verifier.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentState {
    /// Index of the agent's plan in the APM's agents.
    pub plan: usize,
    /// Trajectory pointer `j`: in the exact mode the next expected call, in the tolerant
    /// mode how many proposals matched a step.
    pub pointer: u32,
    /// The tolerant mode's automaton state: how many times each step has run (allowed;
    /// under the rules before format v4 also matched and then blocked by a later guard).
    pub runs: Vec<u32>,
    /// The tolerant mode's attempted steps (format v4): matched by a call a later guard
    /// blocked. An attempted step lets the steps after it run, and stays open itself.
    pub attempted: Vec<bool>,
    /// The exact mode's retryable step (format v4): the last step a call matched and a
    /// later guard blocked. The pointer moved past it, so the plan goes on; the same
    /// call may still take it until a later step runs.
    pub retry: Option<u32>,
    /// Proposals made so far.
    pub actions: u32,
    /// Cost units spent on executed actions.
    pub spent: u64,
    /// Whether the stop guard fired: the agent proposes nothing more.
    pub stopped: bool,
    /// Output of each executed trajectory call, by position (a step's first run's).
    pub outputs: Vec<Option<Value>>,
    /// Untrusted outputs received, in order.
    pub tainted: Vec<TaintedOutput>,
    /// Labelled outputs received, in order.
    pub labelled: Vec<LabelledOutput>,
    /// Every output received, in order: the provenance stage's context when the run's
    /// outputs are not shared ([`knox_types::apm::Closed::provenance`]).
    pub read: Vec<ReadOutput>,
    /// The tolerant mode's free choices so far, under a capacity: the product of the
    /// options of every allowed call that chose among several enabled steps (0 or 1:
    /// none yet; [`knox_policy::trajectory::Capacity`]).
    pub choices: u128,
}

/// An output an agent received, as the provenance stage needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOutput {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// Trajectory position of the call that produced it.
    pub position: u32,
    /// The producing tool.
    pub tool: String,
    /// The contract capability the call acted through ([`contract::capability_of`]).
    pub capability: Option<String>,
}

impl AgentState {
    /// The state of agent `plan` of `apm` before its first proposal.
    pub fn new(apm: &Apm, plan: usize) -> Self {
        let len = apm.agents.get(plan).map_or(0, |p| p.trajectory.len());
        Self {
            plan,
            outputs: vec![None; len],
            runs: vec![0; len],
            attempted: vec![false; len],
            ..Self::default()
        }
    }

    /// Applies the state change of one evaluated proposal.
    pub fn apply(&mut self, change: StateChange) {
        if !change.counted {
            return;
        }
        self.actions = self.actions.saturating_add(1);
        if change.advances && change.options > 1 {
            self.choices = self
                .choices
                .max(1)
                .saturating_mul(u128::from(change.options));
        }
        if change.advances {
            // A step after a retryable one ran, or the retryable one itself did: it is
            // no longer open. A retry leaves the pointer where it is (past that step).
            if !change.retry {
                self.pointer = self.pointer.saturating_add(1);
            }
            self.retry = None;
            if let Some(r) = self.runs.get_mut(change.position as usize) {
                *r = r.saturating_add(1);
            }
        }
        if change.attempted {
            if !change.retry {
                self.pointer = self.pointer.saturating_add(1);
                self.retry = Some(change.position);
            }
            if let Some(a) = self.attempted.get_mut(change.position as usize) {
                *a = true;
            }
        }
        if change.stops {
            self.stopped = true;
        }
    }

    /// Records what an allowed call returned: its output at its position, its cost, and
    /// the output as taint (a tool others can write to) and — when `labels`, that is when
    /// a policy set decides the regulation checks — as labelled data (a tool whose
    /// results carry information types).
    pub fn record_output(&mut self, manifest: &ToolkitManifest, out: RecordedOutput, labels: bool) {
        let RecordedOutput {
            node,
            position,
            tool,
            cost,
            output,
            capability,
        } = out;
        let entry = manifest.tool(&tool);
        self.spent = self.spent.saturating_add(cost);
        self.read.push(ReadOutput {
            node,
            position,
            tool: tool.clone(),
            capability,
        });
        if entry.is_some_and(ToolEntry::returns_external) {
            self.tainted.push(TaintedOutput {
                node,
                output: output.clone(),
            });
        }
        let labelled = labels
            && entry
                .and_then(|t| t.annotations.returns.as_ref())
                .is_some_and(|r| !r.info_types.is_empty());
        if labelled {
            self.labelled.push(LabelledOutput {
                node,
                position,
                tool,
                output: output.clone(),
            });
        }
        // The first output of a step stays the one later steps take values from: a
        // repeated read (tolerant mode) cannot swap in another value for a data link.
        if let Some(slot) = self.outputs.get_mut(position as usize)
            && slot.is_none()
        {
            *slot = Some(output);
        }
    }
}

/// The stop guard's view of time and the external signal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Clock {
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
    /// Whether an external stop signal is present (only if the APM watches one).
    pub signal: bool,
}

/// What the input guard found.
#[derive(Clone, Debug)]
pub enum Input<'m> {
    /// A well-formed call of a known tool.
    WellFormed {
        /// The action.
        action: Action,
        /// Its tool.
        entry: &'m ToolEntry,
    },
    /// Not a well-formed call of a known tool.
    Malformed {
        /// Why.
        error: String,
    },
}

/// A proposal, classified: what its `tool_call` records of it and what the input guard
/// decides.
#[derive(Clone, Debug)]
pub struct Proposal<'m> {
    /// The parsed action, when it parsed that far.
    pub actual: Option<Action>,
    /// `H(α)` for a parsed action, `H("knox/proposal", raw bytes)` otherwise.
    pub actual_hash: Digest,
    /// The raw proposal's recorded prefix, when it is malformed.
    pub raw: Option<String>,
    /// Size in bytes of the raw proposal.
    pub raw_len: u64,
    /// The input guard's finding.
    pub input: Input<'m>,
}

/// Why a recorded `tool_call`'s proposal does not re-classify as recorded.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum Misrecorded {
    /// The recorded action does not hash to the recorded hash.
    #[error("actual call's hash does not match its content")]
    ActionHash,
    /// The recorded raw proposal does not hash to the recorded hash.
    #[error("raw proposal's hash does not match its content")]
    RawHash,
    /// Recorded as malformed, but it parses.
    #[error("recorded as malformed but the proposal is well formed")]
    WellFormed,
    /// The recorded action is not what the raw proposal parses to.
    #[error("recorded action differs from the raw proposal")]
    ActionDiffers,
    /// Nothing to classify.
    #[error("tool_call records neither an action nor a raw proposal")]
    Empty,
}

impl<'m> Proposal<'m> {
    /// The `tool_call` payload of this proposal, the `ordinal`-th of its agent, at
    /// trajectory `position` where `expected` is planned; and its input, for the guards.
    pub fn into_call(
        self,
        ordinal: u32,
        position: u32,
        expected: Option<&ExpectedCall>,
    ) -> (ToolCallPayload, Input<'m>) {
        let call = ToolCallPayload {
            ordinal,
            position,
            expected: expected.cloned(),
            actual: self.actual,
            actual_hash: self.actual_hash,
            raw: self.raw,
            raw_len: self.raw_len,
        };
        (call, self.input)
    }

    /// Classifies the raw bytes an executor proposed (the monitor).
    pub fn classify(raw: &[u8], manifest: &'m ToolkitManifest) -> Self {
        let parsed = proposal::parse(raw, manifest);
        let (actual, actual_hash) = match &parsed {
            Ok((a, _))
            | Err(Malformed {
                action: Some(a), ..
            }) => (Some(a.clone()), a.hash()),
            Err(_) => (None, Digest::tagged(tag::PROPOSAL, &[raw])),
        };
        let raw_len = raw.len() as u64;
        match parsed {
            Ok((action, entry)) => Self {
                actual,
                actual_hash,
                raw: None,
                raw_len,
                input: Input::WellFormed { action, entry },
            },
            Err(m) => Self {
                actual,
                actual_hash,
                raw: Some(lossy_prefix(raw)),
                raw_len,
                input: Input::Malformed { error: m.error },
            },
        }
    }

    /// The proposal `p` records, with the input guard's finding `input` (from
    /// [`Input::reclassify`], or for a truncated proposal the recorded input failure).
    pub fn recorded(p: ToolCallPayload, input: Input<'m>) -> Self {
        Self {
            actual: p.actual,
            actual_hash: p.actual_hash,
            raw: p.raw,
            raw_len: p.raw_len,
            input,
        }
    }
}

impl<'m> Input<'m> {
    /// Re-classifies the proposal a `tool_call` recorded (the verifier), with the same
    /// code the monitor classified it with. `Ok(None)`: the raw proposal was recorded
    /// truncated (over [`MAX_RECORDED_PROPOSAL`] bytes) and cannot be re-parsed; its
    /// recorded input failure is all there is (it can only block, never admit).
    pub fn reclassify(
        p: &ToolCallPayload,
        manifest: &'m ToolkitManifest,
        rules: knox_types::bundle::MonitorRules,
    ) -> Result<Option<Self>, Misrecorded> {
        let plain = rules.plain_reasons;
        let input = match (&p.actual, &p.raw) {
            (Some(a), None) => {
                if a.hash() != p.actual_hash {
                    return Err(Misrecorded::ActionHash);
                }
                match proposal::check_with(a.clone(), manifest, plain) {
                    Ok((action, entry)) => Input::WellFormed { action, entry },
                    Err(m) => Input::Malformed { error: m.error },
                }
            }
            (actual, Some(raw)) => {
                let complete = raw.len() as u64 == p.raw_len;
                if complete
                    && actual.is_none()
                    && Digest::tagged(tag::PROPOSAL, &[raw.as_bytes()]) != p.actual_hash
                {
                    return Err(Misrecorded::RawHash);
                }
                if let Some(a) = actual
                    && a.hash() != p.actual_hash
                {
                    return Err(Misrecorded::ActionHash);
                }
                match complete.then(|| proposal::parse_with(raw.as_bytes(), manifest, plain)) {
                    Some(Ok(_)) => return Err(Misrecorded::WellFormed),
                    Some(Err(m)) if m.action != *actual => return Err(Misrecorded::ActionDiffers),
                    Some(Err(m)) => Input::Malformed { error: m.error },
                    None => return Ok(None),
                }
            }
            (None, None) => return Err(Misrecorded::Empty),
        };
        Ok(Some(input))
    }
}

/// A disclosing call under regulations in force: what its regulation check is about.
#[derive(Debug)]
pub struct Disclosure<'x> {
    /// The disclosing tool.
    pub entry: &'x ToolEntry,
    /// The action.
    pub action: &'x Action,
    /// `e_j`, when the trajectory has one at the pointer.
    pub expected: Option<&'x ExpectedCall>,
    /// The task the action belongs to (the expected call's, or the agent's last).
    pub task: Option<u32>,
    /// The labelled outputs the agent received before it.
    pub seen: &'x [Seen<'x>],
    /// How many checks precede the regulation check (its index among the call's checks).
    pub index: usize,
}

impl Disclosure<'_> {
    /// `φ` of the disclosure, as `regulator` derives it.
    pub fn flow(&self, regulator: &Regulator<'_>) -> Option<InfoFlow> {
        regulator.flow(self.entry, self.action, self.expected, self.task, self.seen)
    }
}

/// A call whose output, labelled, would be handed to a remote model: what its
/// regulation check of that hand-over is about ([`Closed::models`]).
///
/// [`Closed::models`]: knox_types::apm::Closed::models
#[derive(Debug)]
pub struct Egress<'x> {
    /// The tool whose output it is.
    pub entry: &'x ToolEntry,
    /// The task the call belongs to.
    pub task: Option<u32>,
    /// The remote model the output goes to.
    pub model: &'x RemoteModel,
    /// How many checks precede this one (its index among the call's checks).
    pub index: usize,
}

/// Where the regulation checks come from: the one guard input the monitor and the
/// verifier do not share (the monitor decides, asking its judge; the verifier
/// recomputes with the recorded opinion, or takes what was recorded when it cannot
/// recompute).
pub trait RegulationSource {
    /// The regulation check of `d`; `None` when there is none to have (a journal cut
    /// before it): the evaluation is then [`Decision::Undecided`].
    fn check(&mut self, d: &Disclosure<'_>) -> Option<CheckPayload>;

    /// The regulation check of handing a call's output to a remote model (`e`), as
    /// the norms decide it (the pipeline settles whether it passes); `None` as for
    /// [`RegulationSource::check`].
    fn egress(&mut self, e: &Egress<'_>) -> Option<CheckPayload>;
}

/// The pipeline's decision on one proposal.
#[derive(Clone, Debug)]
pub enum Decision<'m> {
    /// Every guard passed.
    Allow {
        /// Trajectory position of the call.
        position: u32,
        /// The tool's cost.
        cost: u64,
        /// The action.
        action: Action,
        /// Its tool.
        entry: &'m ToolEntry,
    },
    /// A guard failed: not executed.
    Block {
        /// The first guard that failed.
        guard: GuardKind,
        /// Why, as the `block_reason` records it.
        reason: String,
        /// Whether the call used up its plan step: only under the rules before format
        /// v4 ([`knox_types::bundle::MonitorRules::blocked_uses_step`]), when the call
        /// matched its expected call and a later guard refused it.
        advances: bool,
        /// From format v4, when the call matched its expected call and a later guard
        /// refused it: the plan moves on without using the step up (it stays open to
        /// the same call, [`AgentState::attempted`], [`AgentState::retry`]).
        attempted: bool,
    },
    /// The stop guard fired: the agent stops.
    Interrupt {
        /// What fired.
        cause: StopCause,
    },
    /// The regulation check could not be had ([`RegulationSource::check`] gave none):
    /// `checks` holds those evaluated before it, and the state does not change.
    Undecided,
}

impl Decision<'_> {
    /// The `block_reason` the `tool_call` records (`None` when allowed or undecided).
    pub fn block_reason(&self) -> Option<String> {
        match self {
            Self::Allow { .. } | Self::Undecided => None,
            Self::Block { reason, .. } => Some(reason.clone()),
            Self::Interrupt { cause } => Some(format!("interrupted: {}", cause.as_str())),
        }
    }
}

/// How one evaluated proposal changes the agent's state ([`AgentState::apply`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateChange {
    /// The proposal counts (every decided proposal does).
    pub counted: bool,
    /// The trajectory pointer moves on (and the step at `position` has run once more).
    pub advances: bool,
    /// The call matched the step at `position` and a later guard blocked it (format
    /// v4): the plan moves on, the step stays open.
    pub attempted: bool,
    /// The call took the exact mode's retryable step ([`AgentState::retry`]), behind
    /// the pointer.
    pub retry: bool,
    /// The trajectory position of the call.
    pub position: u32,
    /// The agent stops.
    pub stops: bool,
    /// How many enabled steps the call chose among, when it counts against the
    /// tolerant mode's capacity (more than one); 0 otherwise.
    pub options: u32,
}

/// The guards' evaluation of one proposal.
#[derive(Clone, Debug)]
pub struct Evaluation<'m> {
    /// The `tool_call` payload.
    pub call: ToolCallPayload,
    /// One `check` per guard evaluated, in order.
    pub checks: Vec<CheckPayload>,
    /// The decision.
    pub decision: Decision<'m>,
    /// Whether the call was matched with the exact mode's retryable step
    /// ([`AgentState::retry`]) rather than the step at the pointer.
    pub retry: bool,
}

impl Evaluation<'_> {
    /// The contract budget an allowed call reserves (its contract check's reservation):
    /// the ledger event the monitor applies before the call runs and the verifier
    /// applies when it replays the call. `None` for a refused call, or without a
    /// contract.
    pub fn reservation(&self) -> Option<knox_contract::LedgerEvent> {
        contract::of(&self.checks)
            .and_then(contract::reserved)
            .filter(|_| matches!(self.decision, Decision::Allow { .. }))
    }

    /// The state change this evaluation makes.
    pub fn change(&self) -> StateChange {
        let position = self.call.position;
        let retry = self.retry;
        match &self.decision {
            Decision::Allow { .. } => StateChange {
                counted: true,
                advances: true,
                retry,
                position,
                options: self
                    .checks
                    .iter()
                    .find_map(|c| match &c.detail {
                        CheckDetail::Trajectory { options, .. } => *options,
                        _ => None,
                    })
                    .unwrap_or(0),
                ..StateChange::default()
            },
            Decision::Block {
                advances,
                attempted,
                ..
            } => StateChange {
                counted: true,
                advances: *advances,
                attempted: *attempted,
                retry,
                position,
                ..StateChange::default()
            },
            Decision::Interrupt { .. } => StateChange {
                counted: true,
                position,
                stops: true,
                ..StateChange::default()
            },
            Decision::Undecided => StateChange::default(),
        }
    }
}

/// Per agent plan of `apm`, its tolerant-mode automaton (none in the exact mode).
fn compile_automata(
    apm: &Apm,
    manifest: &ToolkitManifest,
    rules: knox_types::bundle::MonitorRules,
) -> Vec<Option<Automaton>> {
    apm.agents
        .iter()
        .map(|p| match apm.guards.trajectory {
            TrajectoryMode::Exact | TrajectoryMode::Unplanned => None,
            TrajectoryMode::Tolerant { read_repeats, .. } => {
                Some(Automaton::compile_with(p, manifest, read_repeats, rules))
            }
        })
        .collect()
}

/// The guards of one run: the APM, the manifest, and per-run memos.
#[derive(Debug)]
pub struct Pipeline<'a> {
    apm: &'a Apm,
    manifest: &'a ToolkitManifest,
    /// The prompt's task instructions (the data-flow guard's authorized values).
    prompt: Vec<&'a str>,
    caches: Caches,
    /// Per agent plan, its tolerant-mode automaton (none in the exact mode).
    automata: Vec<Option<Automaton>>,
    regexes: RegexCache,
    /// The signed capability contract bounding the run, when the APM names one.
    contract: Option<&'a knox_contract::Verified>,
    /// The monitor's rules the decisions follow (those of the evidence format).
    rules: knox_types::bundle::MonitorRules,
}

impl<'a> Pipeline<'a> {
    /// The guards of a run under `apm`, derived from `manifest`.
    pub fn new(apm: &'a Apm, manifest: &'a ToolkitManifest) -> Self {
        Self {
            apm,
            manifest,
            prompt: apm.tasks.iter().map(|t| t.instruction.as_str()).collect(),
            caches: Caches::default(),
            automata: compile_automata(apm, manifest, knox_types::bundle::MonitorRules::CURRENT),
            regexes: RegexCache::default(),
            contract: None,
            rules: knox_types::bundle::MonitorRules::CURRENT,
        }
    }

    /// The guards with the `contract` stage: every well-formed proposal is decided by
    /// the contract too (after the input guard), and must pass both it and the plan.
    pub fn with_contract(mut self, contract: Option<&'a knox_contract::Verified>) -> Self {
        self.contract = contract;
        self
    }

    /// The guards under the monitor's `rules` of an earlier evidence format (a
    /// verifier replaying it); [`knox_types::bundle::MonitorRules::CURRENT`] otherwise.
    pub fn with_rules(mut self, rules: knox_types::bundle::MonitorRules) -> Self {
        if rules != self.rules {
            self.automata = compile_automata(self.apm, self.manifest, rules);
        }
        self.rules = rules;
        self
    }

    /// The contract the run is bounded by, if any.
    pub fn contract(&self) -> Option<&'a knox_contract::Verified> {
        self.contract
    }

    /// The APM.
    pub fn apm(&self) -> &'a Apm {
        self.apm
    }

    /// The toolkit manifest.
    pub fn manifest(&self) -> &'a ToolkitManifest {
        self.manifest
    }

    /// Whether the APM closes a channel that needs the run's outputs
    /// ([`SharedOutput`]): content as a sink, or labels per run.
    pub fn shares_outputs(&self) -> bool {
        shares_outputs(self.apm)
    }

    /// Evaluates the guards on `proposal` by the agent in state `st`, in order: stop
    /// (with `clock`), input, trajectory, mediated system call, data flow, and — for a
    /// disclosing tool when regulations are in force — regulation (from `regulation`).
    /// `run` is the run's outputs this evaluation sees, in commit order (used only when
    /// [`Pipeline::shares_outputs`]). Evaluation stops at a fired stop guard or a failed
    /// input guard; the first failing check decides the block. Nothing is changed: apply
    /// [`Evaluation::change`].
    pub fn evaluate(
        &mut self,
        st: &AgentState,
        proposal: Proposal<'a>,
        clock: Clock,
        regulation: &mut dyn RegulationSource,
        run: &[Arc<SharedOutput>],
    ) -> Evaluation<'a> {
        self.evaluate_with(st, proposal, clock, regulation, run, None)
    }

    /// [`Pipeline::evaluate`] with the `contract` stage's inputs (a pipeline
    /// [`with_contract`](Self::with_contract) decides the contract after the input
    /// guard; without inputs its check denies). A call a later guard blocks reserves
    /// nothing: its contract check records no reservation.
    pub fn evaluate_with(
        &mut self,
        st: &AgentState,
        proposal: Proposal<'a>,
        clock: Clock,
        regulation: &mut dyn RegulationSource,
        run: &[Arc<SharedOutput>],
        contract_input: Option<ContractInput<'_>>,
    ) -> Evaluation<'a> {
        let at = self.locate(st, &proposal.input, &proposal.actual_hash, run);
        let plan = self.apm.agents.get(st.plan);
        let expected = plan.and_then(|p| p.trajectory.get(at.position as usize));
        let (call, input) = proposal.into_call(st.actions, at.position, expected);
        let retry = at.retry;
        let done = |call, checks, decision| Evaluation {
            call,
            checks,
            decision,
            retry,
        };
        // Stages 1 and 2: the stop guard, then the input guard.
        let (stop, cause) = self.stop_stage(st, &input, clock);
        let mut checks = vec![stop];
        if let Some(cause) = cause {
            return done(call, checks, Decision::Interrupt { cause });
        }
        let (action, entry) = match input_stage(input, &mut checks) {
            Ok(well_formed) => well_formed,
            Err(decision) => return done(call, checks, decision),
        };
        // Stage 3: the contract, when one bounds the run.
        if let Some(c) = self.contract {
            checks.push(contract::check(c, &action, contract_input));
        }
        // Stage 4: trajectory, system calls, data flow; the later stages and the grant
        // are about the call that runs.
        let run: &[Arc<SharedOutput>] = if self.shares_outputs() { run } else { &[] };
        let step = Step {
            expected,
            selection: at.selection.as_ref(),
            hash: &call.actual_hash,
        };
        let action = self.mediated_stage(st, entry, action, step, run, &mut checks);
        // Stages 5 and 6: the regulation of the disclosure, then of the output's way to
        // remote models.
        let task = expected
            .map(|e| e.task)
            .or_else(|| plan.and_then(|p| p.tasks.last().copied()));
        let cx = Regulated {
            st,
            entry,
            action: &action,
            expected,
            task,
            run,
        };
        if self
            .regulation_stage(&cx, regulation, &mut checks)
            .is_none()
            || self.egress_stage(&cx, regulation, &mut checks).is_none()
        {
            return done(call, checks, Decision::Undecided);
        }
        let decision = self.decide(st, at.position, expected, entry, action, &mut checks);
        done(call, checks, decision)
    }
}

/// The capacity agent `st`'s free choices have under `mode` (none outside the tolerant
/// mode, or when it declares none): 0 bits once the run is strict and labelled data
/// was read ([`read_labelled`]).
fn capacity(
    mode: TrajectoryMode,
    manifest: &ToolkitManifest,
    st: &AgentState,
    run: &[Arc<SharedOutput>],
) -> Option<knox_policy::trajectory::Capacity> {
    let TrajectoryMode::Tolerant {
        capacity_bits,
        strict,
        ..
    } = mode
    else {
        return None;
    };
    let strict = strict && read_labelled(manifest, st, run);
    let bits = if strict { Some(0) } else { capacity_bits }?;
    Some(knox_policy::trajectory::Capacity {
        bits,
        used: st.choices.max(1),
        strict,
    })
}

/// Whether agent `st`'s model has read labelled data: an output of a tool whose
/// `returns` declares an information type other than `public` — its own, or, when the
/// run's outputs are shared (`run`), any agent's, or one its model heard elsewhere.
fn read_labelled(manifest: &ToolkitManifest, st: &AgentState, run: &[Arc<SharedOutput>]) -> bool {
    use knox_policy::manifest::InfoType;
    let labelled = |tool: &str| {
        manifest
            .tool(tool)
            .and_then(|t| t.annotations.returns.as_ref())
            .is_some_and(|r| r.info_types.iter().any(|i| *i != InfoType::Public))
    };
    st.read.iter().any(|r| labelled(&r.tool)) || run.iter().any(|r| r.heard || labelled(&r.tool))
}

/// The provenance stage's context for agent `st`: the outputs holding data its model
/// read, in commit order — the run's (every agent's, and what its model heard
/// elsewhere) when the APM shares them (`run` non-empty), else the agent's own.
fn provenance_context(
    manifest: &ToolkitManifest,
    st: &AgentState,
    run: &[Arc<SharedOutput>],
) -> Vec<knox_policy::provenance::Source> {
    use knox_policy::provenance::{Source, holds_data};
    if run.is_empty() {
        st.read
            .iter()
            .filter(|r| holds_data(manifest.tool(&r.tool)))
            .map(|r| Source {
                node: r.node,
                step: Some(r.position),
            })
            .collect()
    } else {
        run.iter()
            .filter(|r| r.heard || holds_data(manifest.tool(&r.tool)))
            .map(|r| Source {
                node: r.node,
                step: (r.agent == st.plan && !r.heard).then_some(r.position),
            })
            .collect()
    }
}

/// The provenance entries of the data-flow check, under an APM deciding by provenance.
fn provenance_of(checks: &[CheckPayload]) -> Option<&[knox_types::payload::ArgFlow]> {
    checks.iter().find_map(|c| match &c.detail {
        CheckDetail::DataFlow { provenance, .. } if !provenance.is_empty() => {
            Some(provenance.as_slice())
        }
        _ => None,
    })
}

/// The parameters the trajectory check recorded as executed in place of the
/// proposal's ([`knox_types::apm::Closed::planned`]).
fn planned_params(checks: &[CheckPayload]) -> Option<&serde_json::Map<String, Value>> {
    checks.iter().find_map(|c| match &c.detail {
        CheckDetail::Trajectory {
            executed: Some(p), ..
        } => Some(p),
        _ => None,
    })
}

/// The trajectory check of a call in an unplanned run: passed under a contract
/// (which decides the call in its own stage), failed without one.
fn unplanned_outcome(bounded: bool) -> knox_policy::trajectory::Outcome {
    knox_policy::trajectory::Outcome {
        matched: bounded,
        mode: "unplanned",
        params: Vec::new(),
        reason: (!bounded).then(|| {
            "the run has no plan and no contract bounds it: nothing is permitted".to_owned()
        }),
        executed: None,
        options: None,
    }
}

/// Regulation fails closed: a `not_applicable` verdict for a disclosure whose content
/// the executor composed, made after the run read labelled data (`seen`), does not pass
/// — no policy decided a disclosure that may carry those labels (paraphrased, encoded,
/// translated to a code), so it is blocked pending approval. The same on a check the
/// verifier takes as recorded (idempotent).
///
/// Labelled data the run's remote model heard in another run (`heard` nodes) counts
/// as read before.
fn fail_closed(c: &mut CheckPayload, seen: &[Seen<'_>]) {
    let CheckDetail::Regulation { verdict, note, .. } = &mut c.detail else {
        return;
    };
    if seen.is_empty() || verdict != "not_applicable" {
        return;
    }
    c.passed = false;
    let list = |heard: bool| {
        let nodes: Vec<String> = seen
            .iter()
            .filter(|s| s.heard == heard)
            .map(|s| s.node.to_string())
            .collect();
        let more = if nodes.len() > 8 { ", …" } else { "" };
        let shown: Vec<&str> = nodes.iter().take(8).map(String::as_str).collect();
        (!nodes.is_empty()).then(|| format!("{}{more}", shown.join(", ")))
    };
    let places: Vec<String> = [
        list(false).map(|n| format!("tool_output node {n}")),
        list(true).map(|n| format!("heard by the remote model elsewhere, node {n}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    *note = Some(format!(
        "labelled data was read before ({}) and no policy decides this disclosure",
        places.join("; "),
    ));
}

/// A remote model may be handed labelled data only where no regulation in force
/// forbids it or leaves it undecided: the check of an egress passes when its verdict
/// is `compliant`, or `not_applicable` because every regulation decided the flow is
/// outside its scope (product details under GDPR and HIPAA: nothing regulated goes);
/// it fails on `non_compliant`, and on a `not_applicable` the norms could not decide
/// (a term they do not know, no policy set: pending approval, as regulation fails
/// closed). The same on a check the verifier takes as recorded.
fn settle_egress(c: &mut CheckPayload) {
    if let CheckDetail::Regulation {
        verdict, decisions, ..
    } = &c.detail
    {
        let out_of_scope = verdict == "not_applicable"
            && !decisions.is_empty()
            && decisions
                .iter()
                .all(|d| d.verdict == "not_applicable" && d.warnings.is_empty());
        c.passed = verdict == "compliant" || out_of_scope;
    }
}

/// The first [`MAX_RECORDED_PROPOSAL`] bytes of a raw proposal, as text.
fn lossy_prefix(raw: &[u8]) -> String {
    let end = raw.len().min(MAX_RECORDED_PROPOSAL);
    String::from_utf8_lossy(raw.get(..end).unwrap_or_default()).into_owned()
}
