//! The executor wrapper of one bundle: it passes every proposal of the executor under
//! test through unchanged, records which flow each proposal belongs to (ground truth the
//! monitor never sees), times the executor, and plays the stop flows' scenarios —
//! a runaway loop against the action cap, a stop signal or an expired deadline just
//! before a flow that must be interrupted.
//!
//! A flow's planned calls are recognised by tool and parameters (free-text parameters
//! aside); anything else an agent proposes is a deviation of the flow it was working on.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use knox_agent::{AgentTask, Executor, ExecutorFactory, Observation, Step};
use knox_harness::Origin;
use knox_monitor::guard::stop::StopHandle;
use knox_types::Action;
use knox_types::action::hash_call;
use knox_types::apm::StopCause;
use knox_types::bundle::ModelInfo;
use knox_types::digest::Digest;
use serde_json::{Map, Value};

use crate::pool::{Label, PlannedCall, PoolFlow};

/// Longest a flow waits for the bundle's other flows before playing its stop scenario.
pub const BARRIER_WAIT: Duration = Duration::from_secs(30);

/// One proposal, as the wrapper saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposed {
    /// The flow (index in the bundle) it belongs to.
    pub flow: Option<usize>,
    /// Which planned call of that flow it is, when it is one.
    pub planned: Option<usize>,
    /// What the executor says it is.
    pub origin: Origin,
    /// The proposed tool, when the proposal parsed.
    pub tool: Option<String>,
}

/// The proposals of one sub-agent, in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentLog {
    /// The instructions the agent was given (identifies it in the APM).
    pub instructions: Vec<String>,
    /// Its proposals.
    pub proposals: Vec<Proposed>,
}

struct FlowInfo {
    label: Label,
    stop: Option<StopCause>,
    calls: Vec<(String, Digest, Vec<String>)>,
}

fn key(tool: &str, params: &Map<String, Value>, free: &[String]) -> Digest {
    let mut p = params.clone();
    for f in free {
        p.remove(f);
    }
    hash_call(tool, &p)
}

impl FlowInfo {
    fn new(f: &PoolFlow) -> Self {
        Self {
            label: f.label,
            stop: f.stop,
            calls: f
                .calls
                .iter()
                .map(|c: &PlannedCall| {
                    (
                        c.tool.clone(),
                        key(&c.tool, &c.params, &c.free_text),
                        c.free_text.clone(),
                    )
                })
                .collect(),
        }
    }

    fn matches(&self, call: usize, a: &Action) -> bool {
        self.calls
            .get(call)
            .is_some_and(|(tool, k, free)| *tool == a.tool && key(&a.tool, &a.params, free) == *k)
    }
}

struct Shared {
    flows: Vec<FlowInfo>,
    by_instruction: HashMap<String, usize>,
    logs: Mutex<Vec<AgentLog>>,
    /// Negative flows still running (only counted when a flow waits for them).
    pending: Mutex<BTreeSet<usize>>,
    cv: Condvar,
    signal: Option<StopHandle>,
    timeout: Option<Duration>,
    started: Mutex<Option<Instant>>,
    executor_time: Mutex<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn done(&self, f: usize) {
        let mut p = lock(&self.pending);
        if p.remove(&f) {
            self.cv.notify_all();
        }
    }

    fn wait_negatives(&self) {
        let deadline = Instant::now() + BARRIER_WAIT;
        let mut p = lock(&self.pending);
        while !p.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            p = match self.cv.wait_timeout(p, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

/// Wraps the executor under test for one bundle.
pub struct Recorder<'a> {
    inner: &'a dyn ExecutorFactory,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Recorder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("flows", &self.shared.flows.len())
            .finish_non_exhaustive()
    }
}

impl<'a> Recorder<'a> {
    /// A recorder for the bundle's `flows` (in task order). `signal` is the run's
    /// external stop handle and `timeout` its stop policy's timeout, for stop flows.
    pub fn new(
        inner: &'a dyn ExecutorFactory,
        flows: &[&PoolFlow],
        signal: Option<StopHandle>,
        timeout: Option<Duration>,
    ) -> Self {
        let negatives = flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.label == Label::Allow)
            .map(|(i, _)| i)
            .collect();
        Self {
            inner,
            shared: Arc::new(Shared {
                flows: flows.iter().map(|f| FlowInfo::new(f)).collect(),
                by_instruction: flows
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (f.instruction.clone(), i))
                    .collect(),
                logs: Mutex::new(Vec::new()),
                pending: Mutex::new(negatives),
                cv: Condvar::new(),
                signal,
                timeout,
                started: Mutex::new(None),
                executor_time: Mutex::new(Duration::ZERO),
            }),
        }
    }

    /// The agents' logs, and the time spent inside the executor under test.
    pub fn finish(&self) -> (Vec<AgentLog>, Duration) {
        (
            std::mem::take(&mut *lock(&self.shared.logs)),
            *lock(&self.shared.executor_time),
        )
    }
}

impl ExecutorFactory for Recorder<'_> {
    fn build(&self, task: AgentTask) -> Box<dyn Executor> {
        lock(&self.shared.started).get_or_insert_with(Instant::now);
        let mine: Vec<usize> = task
            .instructions
            .iter()
            .filter_map(|i| self.shared.by_instruction.get(i).copied())
            .collect();
        let slot = {
            let mut logs = lock(&self.shared.logs);
            logs.push(AgentLog {
                instructions: task.instructions.clone(),
                proposals: Vec::new(),
            });
            logs.len() - 1
        };
        Box::new(Scripted {
            inner: self.inner.build(task),
            shared: self.shared.clone(),
            slot,
            used: vec![0; self.shared.flows.len()],
            mine,
            current: None,
            runaway: None,
            previous: None,
        })
    }

    fn model(&self) -> ModelInfo {
        self.inner.model()
    }
}

struct Scripted {
    inner: Box<dyn Executor>,
    shared: Arc<Shared>,
    slot: usize,
    mine: Vec<usize>,
    used: Vec<usize>,
    current: Option<usize>,
    runaway: Option<Vec<u8>>,
    previous: Option<usize>,
}

impl Scripted {
    fn record(&self, p: Proposed) {
        if let Some(log) = lock(&self.shared.logs).get_mut(self.slot) {
            log.proposals.push(p);
        }
    }

    fn finished(&self, f: usize) -> bool {
        self.shared
            .flows
            .get(f)
            .is_some_and(|i| self.used.get(f).copied().unwrap_or(0) >= i.calls.len())
    }

    /// The planned call `a` is, if it is the next unproposed call of one of my flows.
    fn planned(&self, a: &Action) -> Option<(usize, usize)> {
        self.mine.iter().find_map(|&f| {
            let k = self.used.get(f).copied()?;
            self.shared
                .flows
                .get(f)
                .filter(|i| i.matches(k, a))
                .map(|_| (f, k))
        })
    }

    /// The stop scenario of a flow that must be interrupted, played just before its
    /// first call: once every negative flow of the bundle is done, raise the stop signal
    /// or let the deadline pass.
    fn before_first_call(&self, f: usize) {
        let Some(info) = self.shared.flows.get(f) else {
            return;
        };
        if info.label != Label::Block {
            return;
        }
        match info.stop {
            Some(StopCause::Signal) => {
                self.shared.wait_negatives();
                if let Some(h) = &self.shared.signal {
                    h.stop();
                }
            }
            Some(StopCause::Timeout) => {
                self.shared.wait_negatives();
                let started = *lock(&self.shared.started);
                if let (Some(t), Some(s)) = (self.shared.timeout, started) {
                    let until = s + t + Duration::from_millis(2);
                    std::thread::sleep(until.saturating_duration_since(Instant::now()));
                }
            }
            _ => {}
        }
    }
}

impl Executor for Scripted {
    fn next(&mut self, last: Option<&Observation>) -> Step {
        if let Some(f) = self.previous.take()
            && self.finished(f)
        {
            self.shared.done(f);
        }
        if let Some(raw) = &self.runaway {
            self.record(Proposed {
                flow: self.current,
                planned: None,
                origin: Origin::Model,
                tool: serde_json::from_slice::<Action>(raw).ok().map(|a| a.tool),
            });
            return Step::Propose(raw.clone(), Origin::Model.label());
        }
        let t = Instant::now();
        let step = self.inner.next(last);
        *lock(&self.shared.executor_time) += t.elapsed();
        let Step::Propose(raw, label) = step else {
            for &f in &self.mine {
                self.shared.done(f);
            }
            return step;
        };
        let action = serde_json::from_slice::<Action>(&raw).ok();
        let planned = action.as_ref().and_then(|a| self.planned(a));
        if let Some((f, k)) = planned {
            if k == 0 {
                self.before_first_call(f);
            }
            if let Some(u) = self.used.get_mut(f) {
                *u += 1;
            }
            self.current = Some(f);
            self.previous = Some(f);
            let cap =
                self.shared.flows.get(f).is_some_and(|i| {
                    i.label == Label::Block && i.stop == Some(StopCause::ActionCap)
                });
            if cap && self.finished(f) {
                self.runaway = Some(raw.clone());
            }
        }
        self.record(Proposed {
            flow: planned
                .map(|(f, _)| f)
                .or(self.current)
                .or(self.mine.first().copied()),
            planned: planned.map(|(_, k)| k),
            origin: Origin::of(label),
            tool: action.map(|a| a.tool),
        });
        Step::Propose(raw, label)
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        for &f in &self.mine {
            self.shared.done(f);
        }
    }
}
