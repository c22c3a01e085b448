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
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use knox_agent::ToolResult;
use knox_attest::TeeKey;
use knox_policy::mediated::{self, Caches};
use knox_policy::proposal::{self, Malformed};
use knox_policy::stop::RunState;
use knox_policy::{ToolkitManifest, dataflow, stop};
use knox_regulation::{Judge, Regulator};
use knox_types::Action;
use knox_types::aeg::{NodeKind, PLANNER_AGENT};
use knox_types::apm::{Apm, StopCause, TopologyKind};
use knox_types::bundle::ModelInfo;
use knox_types::digest::{Digest, tag};
use knox_types::grant::Grant;
use knox_types::payload::{
    AgentBranchPayload, AgentStepPayload, Assignment, BlockedPayload, CheckDetail, CheckPayload,
    GuardKind, InterruptPayload, MAX_RECORDED_PROPOSAL, ProofOfInferencePayload, RootPayload,
    ToolCallPayload, ToolOutputPayload,
};
use serde::Serialize;
use serde_json::Value;

use crate::aeg::{AegBuilder, FinishedAeg, NewNode};
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
}

#[derive(Debug)]
struct AgentState {
    plan: usize,
    pointer: u32,
    actions: u32,
    spent: u64,
    cursor: u64,
    stopped: bool,
    outputs: Vec<Option<Value>>,
    /// Outputs of tools whose content others can write: the data-flow guard's taint.
    tainted: Vec<(u64, Value)>,
    /// Labelled outputs `(node, position, tool, output)`, for the regulation guard.
    labelled: Vec<(u64, u32, String, Value)>,
}

#[derive(Debug)]
struct Inner {
    aeg: AegBuilder,
    agents: HashMap<String, AgentState>,
    caches: Caches,
}

/// The reference monitor for one run.
pub struct Monitor<'a> {
    apm: &'a Apm,
    apm_hash: Digest,
    grants: bool,
    manifest: &'a ToolkitManifest,
    key: &'a TeeKey,
    regulator: Regulator<'a>,
    judge: Option<&'a dyn Judge>,
    signal: StopSignal,
    started: Instant,
    inner: Mutex<Inner>,
    /// The prompt's task instructions (the data-flow guard's authorized values).
    prompt: Vec<&'a str>,
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
    pub key: &'a TeeKey,
    /// Models taking part, for proof-of-inference nodes.
    pub models: &'a [ModelInfo],
    /// External stop signal.
    pub signal: StopSignal,
    /// The graph to build on (possibly journaling).
    pub aeg: AegBuilder,
    /// Sign an execution grant for every allowed action (needed when a broker runs the
    /// tools; an Ed25519 signature per action, so off for in-process tools).
    pub grants: bool,
}

fn payload<T: Serialize>(p: &T) -> Value {
    // Payload types are plain data: serialization cannot fail.
    serde_json::to_value(p).unwrap_or(Value::Null)
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
        } = cfg;
        let node = |parent, kind, agent, payload| NewNode {
            parent,
            kind,
            agent,
            payload,
            allowed: true,
            block_reason: None,
        };
        let root = aeg.commit(
            node(
                None,
                NodeKind::Root,
                "monitor",
                payload(&RootPayload {
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
                node(
                    Some(root),
                    NodeKind::ProofOfInference,
                    "monitor",
                    payload(&p),
                ),
                None,
            );
        }
        let mut agents = HashMap::new();
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
                        payload: payload(&InterruptPayload {
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
        let multi = apm.topology.kind == TopologyKind::MtMa && !planned.is_empty();
        if multi {
            let decomposition = planned
                .iter()
                .map(|a| Assignment {
                    agent: a.id.clone(),
                    tasks: a.tasks.clone(),
                })
                .collect();
            aeg.commit(
                node(
                    Some(root),
                    NodeKind::AgentStep,
                    PLANNER_AGENT,
                    payload(&AgentStepPayload { decomposition }),
                ),
                None,
            );
        }
        for (i, a) in planned.iter().enumerate() {
            let cursor = if multi {
                let p = AgentBranchPayload {
                    agent: a.id.clone(),
                    tasks: a.tasks.clone(),
                };
                aeg.commit(
                    node(Some(root), NodeKind::AgentBranch, &a.id, payload(&p)),
                    None,
                )
            } else {
                root
            };
            let outputs = vec![None; a.trajectory.len()];
            agents.insert(
                a.id.clone(),
                AgentState {
                    plan: i,
                    pointer: 0,
                    actions: 0,
                    spent: 0,
                    cursor,
                    stopped: false,
                    outputs,
                    tainted: Vec::new(),
                    labelled: Vec::new(),
                },
            );
        }
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
            inner: Mutex::new(Inner {
                aeg,
                agents,
                caches: Caches::default(),
            }),
            prompt: apm.tasks.iter().map(|t| t.instruction.as_str()).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere cannot leave the graph half-committed: commits are atomic
        // under the lock, so a poisoned lock's state is still consistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Mediates one raw proposal from `agent`'s executor.
    pub fn mediate(&self, agent: &str, raw: &[u8]) -> Verdict {
        let elapsed_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let signal = self.apm.guards.stop.external && self.signal.is_set();
        let mut guard = self.lock();
        let Inner {
            aeg,
            agents,
            caches,
        } = &mut *guard;
        let Some(st) = agents.get_mut(agent) else {
            return Verdict::Stopped;
        };
        if st.stopped {
            return Verdict::Stopped;
        }
        let Some(plan) = self.apm.agents.get(st.plan) else {
            return Verdict::Stopped;
        };
        let expected = plan.trajectory.get(st.pointer as usize);
        let parsed = proposal::parse(raw, self.manifest);
        let (actual, actual_hash) = match &parsed {
            Ok((a, _))
            | Err(Malformed {
                action: Some(a), ..
            }) => (Some(a.clone()), a.hash()),
            Err(_) => (None, Digest::tagged(tag::PROPOSAL, &[raw])),
        };
        let call = ToolCallPayload {
            ordinal: st.actions,
            position: st.pointer,
            expected: expected.cloned(),
            actual,
            actual_hash,
            raw: parsed.is_err().then(|| lossy_prefix(raw)),
            raw_len: raw.len() as u64,
        };
        let state = RunState {
            actions: st.actions,
            spent: st.spent,
            elapsed_ms,
            signal,
        };
        let cause = stop::evaluate(&self.apm.guards.stop, &state);
        let mut checks = vec![CheckPayload {
            guard: GuardKind::Stop,
            passed: cause.is_none(),
            detail: CheckDetail::Stop {
                actions: state.actions,
                spent: state.spent,
                elapsed_ms,
                signal,
                cause,
            },
        }];
        st.actions = st.actions.saturating_add(1);
        if let Some(cause) = cause {
            st.stopped = true;
            let reason = format!("interrupted: {}", cause.as_str());
            let call_seq = commit_call(aeg, st.cursor, agent, &call, Some(reason.clone()));
            let check_seq = commit_checks(aeg, call_seq, agent, &checks);
            let n = NewNode {
                parent: Some(check_seq),
                kind: NodeKind::Interrupt,
                agent,
                payload: payload(&InterruptPayload { cause }),
                allowed: false,
                block_reason: Some(reason),
            };
            st.cursor = aeg.commit(n, Some(self.key));
            return Verdict::Interrupt { cause };
        }
        let (action, entry) = match parsed {
            Ok(ok) => ok,
            Err(m) => {
                checks.push(CheckPayload {
                    guard: GuardKind::Input,
                    passed: false,
                    detail: CheckDetail::Input {
                        error: Some(m.error.clone()),
                    },
                });
                let reason = format!("malformed proposal: {}", m.error);
                return block(aeg, st, agent, &call, &checks, GuardKind::Input, reason);
            }
        };
        checks.push(CheckPayload {
            guard: GuardKind::Input,
            passed: true,
            detail: CheckDetail::Input { error: None },
        });
        // Trajectory, mediated system calls, data flow: the same code the verifier runs.
        let outputs = |k: u32| st.outputs.get(k as usize).cloned().flatten();
        let tainted = dataflow::tainted(&st.tainted);
        let view = mediated::AgentView {
            expected,
            outputs: &outputs,
            tainted: &tainted,
            prompt: &self.prompt,
        };
        checks.extend(mediated::checks(
            entry,
            &action,
            &actual_hash,
            &self.apm.guards.syscall,
            view,
            caches,
        ));
        // Regulation, for disclosures when regulations are in force.
        if self.regulator.applies(entry) {
            let seen = knox_regulation::flow::seen(self.manifest, &st.labelled);
            let task = expected
                .map(|e| e.task)
                .or_else(|| plan.tasks.last().copied());
            let flow = self.regulator.flow(entry, &action, expected, task, &seen);
            let opinion = match (self.judge, &flow) {
                (Some(judge), Some(f)) if f.info_types.is_empty() => {
                    let content = knox_regulation::flow::content_text(entry, &action);
                    let q = knox_regulation::JudgeQuestion {
                        regulations: &self.apm.guards.regulation.regulations,
                        flow: f,
                        content: &content,
                    };
                    knox_regulation::judge::opinion(judge, &q).ok()
                }
                _ => None,
            };
            checks.push(self.regulator.check(flow, opinion));
        }
        let failure = checks
            .iter()
            .find_map(|c| mediated::block_reason(c, st.pointer).map(|reason| (c.guard, reason)));
        if let Some((guard, reason)) = failure {
            // A call that matched its expected call but was refused by a later guard still
            // moves the pointer on: that step of the plan was attempted and refused (the
            // verifier replays the same rule).
            let matched = expected.is_some()
                && checks
                    .iter()
                    .any(|c| c.guard == GuardKind::Trajectory && c.passed);
            let verdict = block(aeg, st, agent, &call, &checks, guard, reason);
            if matched {
                st.pointer = st.pointer.saturating_add(1);
            }
            return verdict;
        }
        let call_seq = commit_call(aeg, st.cursor, agent, &call, None);
        commit_checks(aeg, call_seq, agent, &checks);
        let position = st.pointer;
        st.pointer = st.pointer.saturating_add(1);
        let grant = if self.grants {
            knox_attest::grant::issue(self.key, self.apm_hash, &action, agent, call_seq).ok()
        } else {
            None
        };
        Verdict::Allow(Box::new(Ticket {
            agent: agent.into(),
            tool_call: call_seq,
            position,
            cost: entry.needs.cost,
            action,
            grant,
        }))
    }

    /// Records the output of an allowed action (a tool error is an output too).
    pub fn record_output(&self, ticket: Box<Ticket>, output: Value) {
        self.record_result(ticket, ToolResult::from(output));
    }

    /// Records what executing an allowed action produced: a `blocked` node (guard
    /// `kernel` or `broker`) under the `tool_call` for every denial the kernel layer or
    /// the broker reported, then the `tool_output`.
    pub fn record_result(&self, ticket: Box<Ticket>, mut result: ToolResult) {
        // Decide on the output the verifier will read back from its canonical bytes.
        knox_types::canon::normalize_numbers(&mut result.output);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(st) = inner.agents.get_mut(&ticket.agent) else {
            return;
        };
        for event in result.kernel {
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
            let n = NewNode {
                parent: Some(ticket.tool_call),
                kind: NodeKind::Blocked,
                agent: &ticket.agent,
                payload: payload(&BlockedPayload {
                    guard,
                    kernel: Some(event.clone()),
                }),
                allowed: false,
                block_reason: Some(format!("{} denied {what}{detail}", guard.as_str())),
            };
            inner.aeg.commit(n, None);
        }
        if let Some(slot) = st.outputs.get_mut(ticket.position as usize) {
            *slot = Some(result.output.clone());
        }
        st.spent = st.spent.saturating_add(ticket.cost);
        let external = self
            .manifest
            .tool(&ticket.action.tool)
            .is_some_and(knox_policy::ToolEntry::returns_external);
        let tainted_output = external.then(|| result.output.clone());
        let labelled = self.regulator.evaluates()
            && self
                .manifest
                .tool(&ticket.action.tool)
                .and_then(|t| t.annotations.returns.as_ref())
                .is_some_and(|r| !r.info_types.is_empty());
        let labelled_output = labelled.then(|| result.output.clone());
        let n = NewNode {
            parent: Some(ticket.tool_call),
            kind: NodeKind::ToolOutput,
            agent: &ticket.agent,
            payload: payload(&ToolOutputPayload {
                output: result.output,
                cost: ticket.cost,
                confinement: result.confinement,
            }),
            allowed: true,
            block_reason: None,
        };
        st.cursor = inner.aeg.commit(n, None);
        if let Some(output) = tainted_output {
            st.tainted.push((st.cursor, output));
        }
        if let Some(output) = labelled_output {
            st.labelled.push((
                st.cursor,
                ticket.position,
                ticket.action.tool.clone(),
                output,
            ));
        }
    }

    /// Ends the run.
    pub fn finish(self) -> FinishedAeg {
        self.inner
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .aeg
            .finish()
    }
}

fn commit_call(
    aeg: &mut AegBuilder,
    parent: u64,
    agent: &str,
    call: &ToolCallPayload,
    reason: Option<String>,
) -> u64 {
    let n = NewNode {
        parent: Some(parent),
        kind: NodeKind::ToolCall,
        agent,
        payload: payload(call),
        allowed: reason.is_none(),
        block_reason: reason,
    };
    aeg.commit(n, None)
}

/// Commits the checks under `call_seq`; returns the first failing check's sequence
/// number, or the last check's when all passed.
fn commit_checks(aeg: &mut AegBuilder, call_seq: u64, agent: &str, checks: &[CheckPayload]) -> u64 {
    let mut first_failed = None;
    let mut last = call_seq;
    for c in checks {
        let n = NewNode {
            parent: Some(call_seq),
            kind: NodeKind::Check,
            agent,
            payload: payload(c),
            allowed: c.passed,
            block_reason: None,
        };
        last = aeg.commit(n, None);
        if !c.passed && first_failed.is_none() {
            first_failed = Some(last);
        }
    }
    first_failed.unwrap_or(last)
}

fn block(
    aeg: &mut AegBuilder,
    st: &mut AgentState,
    agent: &str,
    call: &ToolCallPayload,
    checks: &[CheckPayload],
    guard: GuardKind,
    reason: String,
) -> Verdict {
    let call_seq = commit_call(aeg, st.cursor, agent, call, Some(reason.clone()));
    let failed = commit_checks(aeg, call_seq, agent, checks);
    let n = NewNode {
        parent: Some(failed),
        kind: NodeKind::Blocked,
        agent,
        payload: payload(&BlockedPayload {
            guard,
            kernel: None,
        }),
        allowed: false,
        block_reason: Some(reason.clone()),
    };
    st.cursor = aeg.commit(n, None);
    Verdict::Block { guard, reason }
}

/// The first [`MAX_RECORDED_PROPOSAL`] bytes of a raw proposal, as text.
fn lossy_prefix(raw: &[u8]) -> String {
    let end = raw.len().min(MAX_RECORDED_PROPOSAL);
    String::from_utf8_lossy(raw.get(..end).unwrap_or_default()).into_owned()
}
