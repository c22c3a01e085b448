//! AttRM, the attested reference monitor: every proposal is mediated against the APM
//! and recorded in the AEG, whatever it contains.
//!
//! Guards run in the order of the design: stop (fires → attested `interrupt`, the agent
//! proposes nothing more), input (malformed → `blocked`), then trajectory, mediated
//! system call and — for disclosing tools when regulations are in force — regulation.
//! Every guard evaluated gets a `check` node under the `tool_call`; a failure adds a
//! `blocked` node under the first failing check. A decision is a value: nothing here
//! returns an error or panics on untrusted input.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use crate::key::MonitorKey;
use knox_agent::ToolResult;
use knox_contract::{Ledger, LedgerEvent, Verified};
use knox_guards::{
    AgentState, Clock, ContractInput, Decision, Disclosure, Egress, Evaluation, Pipeline, Proposal,
    RecordedOutput, RegulationSource, SharedOutput,
};
use knox_policy::ToolkitManifest;
use knox_regulation::{Judge, Regulator};
use knox_types::Action;
use knox_types::aeg::{NodeKind, PLANNER_AGENT};
use knox_types::apm::{AgentPlan, Apm, StopCause, TopologyKind};
use knox_types::bundle::ModelInfo;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use knox_types::payload::{
    AgentBranchPayload, AgentStepPayload, Assignment, BlockedPayload, Body, CheckPayload,
    ContractOutcome, GuardKind, HeardPayload, InterruptPayload, KernelEvent,
    ProofOfInferencePayload, RootPayload, Settlement, ToolCallPayload, ToolOutputPayload,
    UnansweredPayload,
};
use serde_json::Value;

use crate::aeg::{AegBuilder, FinishedAeg, NewNode, Prepared};
use crate::guard::stop::StopSignal;

pub use knox_policy::proposal::MAX_PROPOSAL_BYTES;

/// The monitor's decision on one proposal.
#[derive(Debug)]
pub enum Verdict {
    /// Execute the action, then hand its output back with [`Monitor::record_output`].
    Allow(Box<Ticket>),
    /// Not executed.
    Block {
        /// The first guard that failed.
        guard: GuardKind,
        /// Why.
        reason: String,
    },
    /// The stop guard fired; the agent must stop.
    Interrupt {
        /// What fired.
        cause: StopCause,
    },
    /// The agent was already interrupted (or is unknown): nothing was recorded.
    Stopped,
}

/// Permission to execute one allowed action, consumed when its output is recorded.
#[derive(Debug)]
pub struct Ticket {
    agent: String,
    tool_call: u64,
    position: u32,
    cost: u64,
    /// The allowed action.
    pub action: Action,
    /// The signed, single-use execution grant a broker requires (absent only if the
    /// system could not produce randomness for it; a broker then refuses).
    pub grant: Option<Grant>,
    /// The contract reservation the output settles (runs bounded by a contract).
    pub reservation: Option<u64>,
}

/// Where approval tokens for a contract's high-impact actions come from (`knox run
/// --approvals DIR`, a regulator UI): looked up before the contract decides, and —
/// when the decision is *pending* — waited for once; a token that arrives is decided
/// with (and recorded), none leaves the action pending (recorded, not executed).
pub trait ApprovalSource: Send + Sync + std::fmt::Debug {
    /// A token already given for the action `action_hash` names, if any.
    fn token(&self, action: &Action, action_hash: &Digest) -> Option<Value>;
    /// The action is pending: publish the request and wait (bounded) for a token.
    fn wait(&self, action: &Action, action_hash: &Digest) -> Option<Value>;
    /// Records that run `run_id` uses the token whose nonce is `nonce` (hex), before
    /// the action it approves runs: durably, and atomically with respect to every
    /// other process that reads the same tokens, so that a token is accepted once
    /// across runs and processes. `Err(by)` when it was used already, `by` naming the
    /// run that did (or why its use cannot be recorded): the action is then refused,
    /// and the evidence says so (`approval_used_by`).
    fn consume(&self, nonce: &str, run_id: &str) -> Result<(), String>;
}

/// What the contract stage decides with now: the time, the token presented, the
/// run's ledger, and who already used the token (as the approval source says).
fn contract_now<'x>(
    token: Option<&'x Value>,
    ledger: &'x Ledger,
    used_by: Option<&'x str>,
) -> ContractInput<'x> {
    ContractInput {
        at_ms: unix_ms(),
        approval: token,
        ledger,
        used_by,
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One agent as the monitor keeps it: the guards' state, the node its next step
/// hangs under, and its own guard pipeline (with its memos). Each agent has its own
/// lock: sub-agents are mediated in parallel, and meet only in the short critical
/// section that appends their nodes to the graph.
#[derive(Debug)]
struct Agent<'a> {
    state: AgentState,
    cursor: u64,
    guards: Pipeline<'a>,
    /// Its allowed calls whose outputs are still to come (several at once: the tool
    /// calls of one model answer), closed by their output or, at the seal, by an
    /// `unanswered` node.
    awaiting: Vec<Awaited>,
}

/// A node the monitor commits as it is (allowed, no reason).
fn plain<'n>(parent: Option<u64>, kind: NodeKind, agent: &'n str, payload: Body) -> NewNode<'n> {
    NewNode {
        parent,
        kind,
        agent,
        payload,
        allowed: true,
        block_reason: None,
    }
}

/// The run's header: its root, naming the run, the APM and the topology, and a
/// proof-of-inference node under it per model taking part. Returns the root.
fn header(
    aeg: &mut AegBuilder,
    run_id: &str,
    apm_hash: Digest,
    apm: &Apm,
    models: &[ModelInfo],
) -> u64 {
    let root = aeg.commit(
        plain(
            None,
            NodeKind::Root,
            "monitor",
            Body::from(RootPayload {
                run_id: run_id.into(),
                apm_hash,
                topology: apm.topology,
            }),
        ),
        None,
    );
    for m in models {
        let p = ProofOfInferencePayload {
            role: m.role.clone(),
            model: m.name.clone(),
            weights_hash: m.weights_hash,
            declared: m.declared,
        };
        aeg.commit(
            plain(
                Some(root),
                NodeKind::ProofOfInference,
                "monitor",
                Body::from(p),
            ),
            None,
        );
    }
    root
}

/// Where each of the `planned` agents starts: the root, or in a multi-agent run its
/// own branch under the planner's decomposition step (both committed here).
fn branches(
    aeg: &mut AegBuilder,
    root: u64,
    kind: TopologyKind,
    planned: &[AgentPlan],
) -> Vec<u64> {
    if kind != TopologyKind::MtMa || planned.is_empty() {
        return vec![root; planned.len()];
    }
    let decomposition = planned
        .iter()
        .map(|a| Assignment {
            agent: a.id.clone(),
            tasks: a.tasks.clone(),
        })
        .collect();
    aeg.commit(
        plain(
            Some(root),
            NodeKind::AgentStep,
            PLANNER_AGENT,
            Body::from(AgentStepPayload { decomposition }),
        ),
        None,
    );
    planned
        .iter()
        .map(|a| {
            let p = AgentBranchPayload {
                agent: a.id.clone(),
                tasks: a.tasks.clone(),
            };
            aeg.commit(
                plain(Some(root), NodeKind::AgentBranch, &a.id, Body::from(p)),
                None,
            )
        })
        .collect()
}

/// The `blocked` node of a denial the kernel layer (guard `kernel`) or the broker
/// (a `refusal`: guard `broker`) reported while `agent`'s allowed `call` ran, under
/// that call.
fn denial<'t>(call: u64, agent: &'t str, event: &KernelEvent) -> NewNode<'t> {
    let guard = if event.event == "refusal" {
        GuardKind::Broker
    } else {
        GuardKind::Kernel
    };
    let what = event
        .syscall
        .as_deref()
        .map_or_else(|| event.event.clone(), |s| format!("system call `{s}`"));
    let detail = event
        .detail
        .as_deref()
        .map(|d| format!(" ({d})"))
        .unwrap_or_default();
    NewNode {
        parent: Some(call),
        kind: NodeKind::Blocked,
        agent,
        payload: Body::from(BlockedPayload {
            guard,
            kernel: Some(event.clone()),
        }),
        allowed: false,
        block_reason: Some(format!("{} denied {what}{detail}", guard.as_str())),
    }
}

/// A decision's nodes with their bodies written, before the graph's lock: numbering,
/// measuring and chaining are all that is left ([`Monitor::commit`]).
struct Group<'n> {
    /// The `tool_call`.
    call: Prepared<'n>,
    /// Its checks, in the pipeline's order.
    checks: Vec<Prepared<'n>>,
    /// The ending node of a block or an interrupt, and the key that attests it.
    end: Option<(Prepared<'n>, Option<MonitorKey<'n>>)>,
}

impl<'n> Group<'n> {
    /// The group of `agent`'s `call` decided `decision` (`reason` when refused), its
    /// call under the agent's `cursor`.
    fn prepare(
        agent: &'n str,
        cursor: u64,
        call: ToolCallPayload,
        checks: Vec<CheckPayload>,
        decision: &Decision,
        reason: Option<String>,
        key: MonitorKey<'n>,
    ) -> Self {
        let call = NewNode {
            parent: Some(cursor),
            kind: NodeKind::ToolCall,
            agent,
            payload: Body::from(call),
            allowed: reason.is_none(),
            block_reason: reason.clone(),
        }
        .prepare();
        let checks = checks
            .into_iter()
            .map(|c| {
                let allowed = c.passed;
                NewNode {
                    parent: None,
                    kind: NodeKind::Check,
                    agent,
                    payload: Body::from(c),
                    allowed,
                    block_reason: None,
                }
                .prepare()
            })
            .collect();
        let end = match decision {
            Decision::Interrupt { cause } => Some((
                NewNode {
                    parent: None,
                    kind: NodeKind::Interrupt,
                    agent,
                    payload: Body::from(InterruptPayload { cause: *cause }),
                    allowed: false,
                    block_reason: reason,
                }
                .prepare(),
                Some(key),
            )),
            Decision::Block { guard, reason, .. } => Some((
                NewNode {
                    parent: None,
                    kind: NodeKind::Blocked,
                    agent,
                    payload: Body::from(BlockedPayload {
                        guard: *guard,
                        kernel: None,
                    }),
                    allowed: false,
                    block_reason: Some(reason.clone()),
                }
                .prepare(),
                None,
            )),
            Decision::Allow { .. } | Decision::Undecided => None,
        };
        Self { call, checks, end }
    }
}

/// An allowed call waiting for its output.
#[derive(Clone, Copy, Debug)]
struct Awaited {
    /// Its `tool_call` node.
    call: u64,
    /// The tool's cost.
    cost: u64,
    /// The contract reservation it holds.
    reservation: Option<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere cannot leave a half-made change: the graph's commits and an
    // agent's state changes are whole under their locks, so a poisoned lock's state is
    // still consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A decision to record: the guards' evaluation, the reservation an allow made in the
/// contract's ledger, and (under a contract) that ledger's lock, held until the
/// decision's nodes are committed: the verifier rebuilds the ledger in commit order, so
/// no other decision may reserve between this one's reservation and its commit.
struct Decided<'m, 'a> {
    eval: Evaluation<'a>,
    reservation: Option<u64>,
    ledger: Option<MutexGuard<'m, Ledger>>,
}

/// The monitor's regulation check: decided with its regulator, asking its judge when
/// the labels leave the information types unknown.
struct Decide<'r, 'a> {
    regulator: &'r Regulator<'a>,
    judge: Option<&'a dyn Judge>,
    regulations: &'a [String],
}

impl RegulationSource for Decide<'_, '_> {
    fn check(&mut self, d: &Disclosure<'_>) -> Option<CheckPayload> {
        let flow = d.flow(self.regulator);
        let opinion = match (self.judge, &flow) {
            (Some(judge), Some(f)) if f.info_types.is_empty() => {
                let content = knox_regulation::flow::content_text(d.entry, d.action);
                let q = knox_regulation::JudgeQuestion {
                    regulations: self.regulations,
                    flow: f,
                    content: &content,
                };
                knox_regulation::judge::opinion(judge, &q).ok()
            }
            _ => None,
        };
        Some(self.regulator.check(flow, opinion))
    }

    fn egress(&mut self, e: &Egress<'_>) -> Option<CheckPayload> {
        Some(self.regulator.egress(e.entry, e.task, e.model))
    }
}

/// The reference monitor for one run.
pub struct Monitor<'a> {
    apm: &'a Apm,
    apm_hash: Digest,
    grants: bool,
    manifest: &'a ToolkitManifest,
    key: MonitorKey<'a>,
    regulator: Regulator<'a>,
    judge: Option<&'a dyn Judge>,
    signal: StopSignal,
    started: Instant,
    /// The graph: numbering, measurement and chaining of nodes whose bodies are
    /// already written (see [`NewNode::prepare`]), one whole group per critical section.
    aeg: Mutex<AegBuilder>,
    /// The agents, fixed at the start; each behind its own lock (taken before `aeg`).
    agents: HashMap<String, Mutex<Agent<'a>>>,
    /// The run's outputs in commit order, when the APM closes the content or label
    /// channel (appended under `aeg`; a disclosing call records how many it saw).
    run_outputs: Mutex<Vec<Arc<SharedOutput>>>,
    /// The contract's budget ledger, run-wide (taken after an agent's lock, before the
    /// graph's): a decision, its reservation and its commit are one step, so the
    /// verifier rebuilds the same ledger in commit order.
    ledger: Mutex<Ledger>,
    approvals: Option<&'a dyn ApprovalSource>,
    /// The run's identifier (what an approval's use is recorded under).
    run_id: &'a str,
}

impl std::fmt::Debug for Monitor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("apm_agents", &self.apm.agents.len())
            .finish_non_exhaustive()
    }
}

/// What [`Monitor::start`] needs.
#[derive(Debug)]
pub struct MonitorConfig<'a> {
    /// The APM.
    pub apm: &'a Apm,
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// Run identifier.
    pub run_id: &'a str,
    /// The toolkit manifest the APM was derived from.
    pub manifest: &'a ToolkitManifest,
    /// The in-TEE key (signs interrupts).
    pub key: MonitorKey<'a>,
    /// Models taking part, for proof-of-inference nodes.
    pub models: &'a [ModelInfo],
    /// External stop signal.
    pub signal: StopSignal,
    /// The graph to build on (possibly journaling).
    pub aeg: AegBuilder,
    /// Sign an execution grant for every allowed action (needed when a broker runs the
    /// tools; an Ed25519 signature per action, so off for in-process tools).
    pub grants: bool,
    /// The signed capability contract the APM names (`apm.inputs.contract`), if any.
    pub contract: Option<&'a Verified>,
    /// Where approval tokens come from, for a contract's high-impact actions.
    pub approvals: Option<&'a dyn ApprovalSource>,
}

impl<'a> MonitorConfig<'a> {
    /// A run of `apm` (hashing to `apm_hash`) over `manifest`, its interrupts signed
    /// with `key`, `models` taking part: no stop signal but the APM's own, a fresh
    /// graph (no journal), no grants, no contract and no approvals.
    pub fn new(
        apm: &'a Apm,
        apm_hash: Digest,
        run_id: &'a str,
        manifest: &'a ToolkitManifest,
        key: MonitorKey<'a>,
        models: &'a [ModelInfo],
    ) -> Self {
        Self {
            apm,
            apm_hash,
            run_id,
            manifest,
            key,
            models,
            signal: StopSignal::new(),
            aeg: AegBuilder::default(),
            grants: false,
            contract: None,
            approvals: None,
        }
    }
}

impl<'a> Monitor<'a> {
    /// Starts the run: commits the root, proof-of-inference nodes and, for multi-agent
    /// runs, the planner's decomposition and one branch per sub-agent.
    pub fn start(
        cfg: MonitorConfig<'a>,
        regulator: Regulator<'a>,
        judge: Option<&'a dyn Judge>,
    ) -> Self {
        let MonitorConfig {
            apm,
            apm_hash,
            run_id,
            manifest,
            key,
            models,
            signal,
            mut aeg,
            grants,
            contract,
            approvals,
        } = cfg;
        let root = header(&mut aeg, run_id, apm_hash, apm, models);
        // A failed plan: the run's one event is the attested interrupt saying so, and no
        // agent may act (none is registered, so every proposal is `Stopped`).
        let planned = match &apm.planning {
            None => apm.agents.as_slice(),
            Some(failure) => {
                aeg.commit(
                    NewNode {
                        parent: Some(root),
                        kind: NodeKind::Interrupt,
                        agent: PLANNER_AGENT,
                        payload: Body::from(InterruptPayload {
                            cause: StopCause::PlanFailed,
                        }),
                        allowed: false,
                        block_reason: Some(failure.interrupt_reason()),
                    },
                    Some(key),
                );
                &[]
            }
        };
        let cursors = branches(&mut aeg, root, apm.topology.kind, planned);
        let agents = planned
            .iter()
            .zip(cursors)
            .enumerate()
            .map(|(i, (a, cursor))| {
                let agent = Agent {
                    state: AgentState::new(apm, i),
                    cursor,
                    guards: Pipeline::new(apm, manifest).with_contract(contract),
                    awaiting: Vec::new(),
                };
                (a.id.clone(), Mutex::new(agent))
            })
            .collect();
        Self {
            apm,
            apm_hash,
            grants,
            manifest,
            key,
            regulator,
            judge,
            signal,
            started: Instant::now(),
            aeg: Mutex::new(aeg),
            agents,
            run_outputs: Mutex::new(Vec::new()),
            ledger: Mutex::new(Ledger::new()),
            approvals,
            run_id,
        }
    }

    /// Mediates one raw proposal from `agent`'s executor: the guards of
    /// [`knox_guards::Pipeline`] decide ([`Self::decide`]), and this records what they
    /// return ([`Group::prepare`], [`Self::commit`]) and answers the executor
    /// ([`Self::answer`]).
    pub fn mediate(&self, agent: &str, raw: &[u8]) -> Verdict {
        let Some(slot) = self.agents.get(agent) else {
            return Verdict::Stopped;
        };
        let mut st = lock(slot);
        let st = &mut *st;
        // Read under the agent's lock: the agent's clock never goes backwards.
        let elapsed_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let clock = Clock {
            elapsed_ms,
            signal: self.apm.guards.stop.external && self.signal.is_set(),
        };
        if st.state.stopped || self.apm.agents.get(st.state.plan).is_none() {
            return Verdict::Stopped;
        }
        let proposal = Proposal::classify(raw, self.manifest);
        let Some(Decided {
            eval,
            reservation,
            ledger,
        }) = self.decide(st, proposal, clock)
        else {
            return Verdict::Stopped;
        };
        st.state.apply(eval.change());
        let reason = eval.decision.block_reason();
        let Evaluation {
            call,
            checks,
            decision,
            ..
        } = eval;
        let group = Group::prepare(agent, st.cursor, call, checks, &decision, reason, self.key);
        let (call_seq, end_seq) = self.commit(group);
        // A contract's ledger is released only now ([`Decided`]).
        drop(ledger);
        if let Some(e) = end_seq {
            st.cursor = e;
        }
        self.answer(st, agent, decision, call_seq, reservation)
    }

    /// The guards' decision on `proposal`, under the run's contract when it has one
    /// ([`Monitor::under_contract`]). `None` when nothing is to be recorded.
    fn decide(
        &self,
        st: &mut Agent<'a>,
        proposal: Proposal<'a>,
        clock: Clock,
    ) -> Option<Decided<'_, 'a>> {
        let mut regulation = Decide {
            regulator: &self.regulator,
            judge: self.judge,
            regulations: &self.apm.guards.regulation.regulations,
        };
        let run = if st.guards.shares_outputs() {
            lock(&self.run_outputs).clone()
        } else {
            Vec::new()
        };
        let decided = if st.guards.contract().is_some() {
            self.under_contract(st, proposal, clock, &mut regulation, &run)?
        } else {
            // No contract: no approval to wait for or spend and no budget to reserve, so
            // the ledger is not taken and the agents' guards run side by side.
            let Agent { state, guards, .. } = st;
            Decided {
                eval: guards.evaluate_with(state, proposal, clock, &mut regulation, &run, None),
                reservation: None,
                ledger: None,
            }
        };
        // The monitor's regulation source always answers: nothing to record.
        (!matches!(decided.eval.decision, Decision::Undecided)).then_some(decided)
    }

    /// [`Monitor::decide`] under the run's contract, with its approvals and its budget
    /// ledger: a pending approval is waited for (without holding the ledger) and the
    /// proposal decided again with the token; an approval the allow uses is consumed
    /// here, once, where every process reading the same tokens looks (used already:
    /// decided again, refused, and recorded so); an allowed action's cost is reserved in
    /// the ledger, whose lock comes back held. `None` when the ledger refuses the
    /// reservation (nothing is recorded, the action does not run).
    fn under_contract(
        &self,
        st: &mut Agent<'a>,
        proposal: Proposal<'a>,
        clock: Clock,
        regulation: &mut Decide<'_, 'a>,
        run: &[Arc<SharedOutput>],
    ) -> Option<Decided<'_, 'a>> {
        let action = proposal.actual.clone();
        let mut token = match (&action, self.approvals) {
            (Some(a), Some(src)) => src.token(a, &proposal.actual_hash),
            _ => None,
        };
        let mut ledger = lock(&self.ledger);
        let Agent { state, guards, .. } = st;
        let mut evaluate = |contract: Option<ContractInput<'_>>| {
            guards.evaluate_with(state, proposal.clone(), clock, regulation, run, contract)
        };
        let mut eval = evaluate(Some(contract_now(token.as_ref(), &ledger, None)));
        let pending = knox_guards::contract::of(&eval.checks)
            .is_some_and(|c| c.outcome == ContractOutcome::Pending);
        if let (true, Some(a), Some(src)) = (pending, &action, self.approvals) {
            drop(ledger);
            token = src.wait(a, &proposal.actual_hash);
            ledger = lock(&self.ledger);
            if token.is_some() {
                eval = evaluate(Some(contract_now(token.as_ref(), &ledger, None)));
            }
        }
        let spends = knox_guards::contract::of(&eval.checks)
            .filter(|_| matches!(eval.decision, Decision::Allow { .. }))
            .and_then(|c| c.approval_nonce.clone());
        if let (Some(nonce), Some(src)) = (spends, self.approvals)
            && let Err(by) = src.consume(&nonce, self.run_id)
        {
            eval = evaluate(Some(contract_now(token.as_ref(), &ledger, Some(&by))));
        }
        let reserved = eval.reservation();
        if let Some(ev) = &reserved
            && ledger.apply(ev).is_err()
        {
            // The guards gave the ledger's next number: this cannot refuse.
            return None;
        }
        let reservation = match reserved {
            Some(LedgerEvent::Reserved { id, .. }) => Some(id),
            _ => None,
        };
        Some(Decided {
            eval,
            reservation,
            ledger: Some(ledger),
        })
    }

    /// Appends a decision's group to the graph under its lock, whole (the verifier
    /// reads a call's checks right after it): the `tool_call`, its checks under it,
    /// and the ending node (a block or an interrupt) under the first failed check.
    /// Returns the call's and the ending node's sequence numbers.
    fn commit(&self, group: Group<'_>) -> (u64, Option<u64>) {
        let mut aeg = lock(&self.aeg);
        let call_seq = aeg.commit_prepared(group.call, None);
        let mut first_failed = None;
        let mut last = call_seq;
        for mut c in group.checks {
            c.node.parent = Some(call_seq);
            let passed = c.node.allowed;
            last = aeg.commit_prepared(c, None);
            if !passed && first_failed.is_none() {
                first_failed = Some(last);
            }
        }
        let end_seq = group.end.map(|(mut n, attest)| {
            n.node.parent = Some(first_failed.unwrap_or(last));
            aeg.commit_prepared(n, attest)
        });
        (call_seq, end_seq)
    }

    /// What the executor is told of `decision`, recorded as the `tool_call`
    /// `call_seq`: an allowed action awaits its output and carries its ticket (and,
    /// with a tool host, a signed grant).
    fn answer(
        &self,
        st: &mut Agent<'a>,
        agent: &str,
        decision: Decision,
        call_seq: u64,
        reservation: Option<u64>,
    ) -> Verdict {
        match decision {
            Decision::Interrupt { cause } => Verdict::Interrupt { cause },
            Decision::Block { guard, reason, .. } => Verdict::Block { guard, reason },
            Decision::Allow {
                position,
                cost,
                action,
                ..
            } => {
                st.awaiting.push(Awaited {
                    call: call_seq,
                    cost,
                    reservation,
                });
                let grant = if self.grants {
                    knox_attest::grant::issue(
                        self.key.tee(),
                        self.apm_hash,
                        &action,
                        agent,
                        call_seq,
                    )
                    .ok()
                } else {
                    None
                };
                Verdict::Allow(Box::new(Ticket {
                    agent: agent.into(),
                    tool_call: call_seq,
                    position,
                    cost,
                    action,
                    grant,
                    reservation,
                }))
            }
            Decision::Undecided => Verdict::Stopped,
        }
    }

    /// Records the output of an allowed action (a tool error is an output too).
    pub fn record_output(&self, ticket: Box<Ticket>, output: Value) {
        self.record_result(ticket, ToolResult::from(output));
    }

    /// Records what executing an allowed action produced: a `blocked` node (guard
    /// `kernel` or `broker`) under the `tool_call` for every denial the kernel layer or
    /// the broker reported, then the `tool_output`, whose sequence number it returns
    /// (`None` for a ticket of no agent of this run, or of a call no longer awaiting
    /// its output: nothing is recorded).
    pub fn record_result(&self, ticket: Box<Ticket>, mut result: ToolResult) -> Option<u64> {
        // Decide on the output the verifier will read back from its canonical bytes.
        knox_types::canon::normalize_numbers(&mut result.output);
        let slot = self.agents.get(&ticket.agent)?;
        let mut st = lock(slot);
        let at = st
            .awaiting
            .iter()
            .position(|w| w.call == ticket.tool_call)?;
        st.awaiting.remove(at);
        let settled = ticket.reservation.map(|reservation| Settlement {
            reservation,
            executed: !result.kernel.iter().any(|e| e.event == "refusal"),
        });
        let mut group: Vec<Prepared<'_>> = result
            .kernel
            .iter()
            .map(|event| denial(ticket.tool_call, &ticket.agent, event).prepare())
            .collect();
        let n = NewNode {
            parent: Some(ticket.tool_call),
            kind: NodeKind::ToolOutput,
            agent: &ticket.agent,
            payload: Body::from(ToolOutputPayload {
                output: result.output.clone(),
                cost: ticket.cost,
                confinement: result.confinement,
                settled,
            }),
            allowed: true,
            block_reason: None,
        };
        group.push(n.prepare());
        let shares = st.guards.shares_outputs();
        let mut out = RecordedOutput {
            node: 0,
            position: ticket.position,
            capability: knox_guards::contract::capability_of(&ticket.action),
            tool: ticket.action.tool,
            cost: ticket.cost,
            output: result.output,
        };
        {
            let mut ledger = settled.map(|_| lock(&self.ledger));
            let mut aeg = lock(&self.aeg);
            if let (Some(l), Some(s)) = (ledger.as_deref_mut(), settled) {
                // Held since the reservation: it applies.
                let _ = l.apply(&LedgerEvent::Settled {
                    id: s.reservation,
                    executed: s.executed,
                });
            }
            for n in group {
                st.cursor = aeg.commit_prepared(n, None);
            }
            out.node = st.cursor;
            if shares {
                // In commit order: pushed while the graph's lock is held.
                lock(&self.run_outputs).push(Arc::new(SharedOutput::of(st.state.plan, &out)));
            }
        }
        let node = out.node;
        st.state
            .record_output(self.manifest, out, self.regulator.evaluates());
        Some(node)
    }

    /// Records that the run's remote model heard labelled data in another run through
    /// the same endpoint (`heard.tool`'s output there): a `heard` node under the root.
    /// From it on, every disclosure whose content an agent's model composes carries
    /// that tool's labels (when the APM carries labels per run). Refused — nothing
    /// committed — for a tool of no labels in this run's manifest. Returns the node's
    /// sequence number.
    pub fn heard(&self, heard: HeardPayload) -> Result<u64, String> {
        let labelled = self
            .manifest
            .tool(&heard.tool)
            .and_then(|t| t.annotations.returns.as_ref())
            .is_some_and(|r| !r.info_types.is_empty());
        if !labelled {
            return Err(format!(
                "`{}` is not a tool whose output carries labels in this run's manifest",
                heard.tool
            ));
        }
        let shares = knox_guards::shares_outputs(self.apm);
        let tool = heard.tool.clone();
        let mut aeg = lock(&self.aeg);
        let seq = aeg.commit(
            NewNode {
                parent: Some(0),
                kind: NodeKind::Heard,
                agent: "monitor",
                payload: Body::from(heard),
                allowed: true,
                block_reason: None,
            },
            None,
        );
        if shares {
            // In commit order: pushed while the graph's lock is held.
            lock(&self.run_outputs).push(Arc::new(SharedOutput::heard(seq, &tool)));
        }
        Ok(seq)
    }

    /// Ends the run. Every allowed call still awaiting its output (a client that never
    /// answered it, a run stopped while it ran) is closed by an `unanswered` node under
    /// it, in the order the calls were made; a contract reservation it held is settled
    /// as executed (it may have run).
    pub fn finish(self) -> FinishedAeg {
        let mut open: Vec<(String, Awaited)> = self
            .agents
            .iter()
            .flat_map(|(id, slot)| {
                let awaiting = std::mem::take(&mut lock(slot).awaiting);
                awaiting.into_iter().map(move |w| (id.clone(), w))
            })
            .collect();
        open.sort_unstable_by_key(|(_, w)| w.call);
        let mut aeg = self
            .aeg
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let mut ledger = lock(&self.ledger);
        for (agent, w) in open {
            let settled = w.reservation.map(|reservation| Settlement {
                reservation,
                executed: true,
            });
            if let Some(s) = settled {
                let _ = ledger.apply(&LedgerEvent::Settled {
                    id: s.reservation,
                    executed: true,
                });
            }
            aeg.commit(
                NewNode {
                    parent: Some(w.call),
                    kind: NodeKind::Unanswered,
                    agent: &agent,
                    payload: Body::from(UnansweredPayload {
                        cost: w.cost,
                        settled,
                    }),
                    allowed: true,
                    block_reason: None,
                },
                None,
            );
        }
        drop(ledger);
        aeg.finish()
    }
}
