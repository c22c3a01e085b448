//! The pipeline's stages, in the order [`Pipeline::evaluate_with`] runs them: where the
//! call stands in its plan, the stop guard, the input guard, (the contract,
//! [`super::contract`]), the trajectory, system-call and data-flow guards, the
//! regulation of the disclosure and of the output's way to remote models, and the
//! decision. Each stage appends its checks; the first failing check decides. The
//! monitor and the verifier run the same stages (issue 36, item 6).

use std::sync::Arc;

use knox_policy::dataflow::{RunOutput, Tainted};
use knox_policy::mediated;
use knox_policy::stop::{self, RunState};
use knox_policy::trajectory::{RegexCache, Selection};
use knox_policy::{ToolEntry, ToolkitManifest};
use knox_regulation::flow::Seen;
use knox_types::Action;
use knox_types::apm::{Apm, ExpectedCall, StopCause};
use knox_types::bundle::ModelRole;
use knox_types::digest::Digest;
use knox_types::payload::{CheckDetail, CheckPayload, GuardKind};

use super::{
    AgentState, Clock, Decision, Disclosure, Egress, Input, Pipeline, RegulationSource,
    SharedOutput, capacity, contract, fail_closed, planned_params, provenance_context,
    provenance_of, settle_egress, unplanned_outcome,
};

/// Where a proposal stands in its agent's plan.
pub(super) struct Located {
    /// The tolerant mode's choice of step (none in the exact mode, or for a malformed
    /// proposal).
    pub(super) selection: Option<Selection>,
    /// The trajectory position it is checked against.
    pub(super) position: u32,
    /// Whether it took the exact mode's retryable step ([`AgentState::retry`]).
    pub(super) retry: bool,
}

/// The plan step a call is checked against.
#[derive(Clone, Copy)]
pub(super) struct Step<'s> {
    /// `e_j`, when the trajectory has one at the call's position.
    pub(super) expected: Option<&'s ExpectedCall>,
    /// The tolerant mode's choice of it.
    pub(super) selection: Option<&'s Selection>,
    /// The proposal's hash, `H(α)`.
    pub(super) hash: &'s Digest,
}

/// What the regulation stages decide about: the call as it runs.
pub(super) struct Regulated<'r, 'a> {
    pub(super) st: &'r AgentState,
    pub(super) entry: &'a ToolEntry,
    pub(super) action: &'r Action,
    pub(super) expected: Option<&'a ExpectedCall>,
    /// The task the action belongs to (the expected call's, or the agent's last).
    pub(super) task: Option<u32>,
    /// The run's outputs this call sees (empty unless the APM shares them).
    pub(super) run: &'r [Arc<SharedOutput>],
}

/// The input guard: a well-formed call of a known tool passes (its check appended);
/// a malformed proposal is blocked.
pub(super) fn input_stage<'a>(
    input: Input<'a>,
    checks: &mut Vec<CheckPayload>,
) -> Result<(Action, &'a ToolEntry), Decision<'a>> {
    match input {
        Input::WellFormed { action, entry } => {
            checks.push(CheckPayload {
                guard: GuardKind::Input,
                passed: true,
                detail: CheckDetail::Input { error: None },
            });
            Ok((action, entry))
        }
        Input::Malformed { error } => {
            let reason = format!("malformed proposal: {error}");
            checks.push(CheckPayload {
                guard: GuardKind::Input,
                passed: false,
                detail: CheckDetail::Input { error: Some(error) },
            });
            Err(Decision::Block {
                guard: GuardKind::Input,
                reason,
                advances: false,
                attempted: false,
            })
        }
    }
}

impl<'a> Pipeline<'a> {
    /// Where the proposal stands: the exact mode expects the call at the pointer (or
    /// at the retryable step a blocked call matched, format v4); the tolerant mode's
    /// automaton picks the enabled step the action matches, or the one it is
    /// attributed to.
    pub(super) fn locate(
        &mut self,
        st: &AgentState,
        input: &Input<'a>,
        actual_hash: &Digest,
        run: &[Arc<SharedOutput>],
    ) -> Located {
        let plan = self.apm.agents.get(st.plan);
        let outputs = |k: u32| st.outputs.get(k as usize).cloned().flatten();
        let automaton = self.automata.get(st.plan).and_then(Option::as_ref);
        let selection = match (automaton, plan, input) {
            (Some(a), Some(p), Input::WellFormed { action, .. }) => Some(a.select(
                p,
                &st.runs,
                &st.attempted,
                capacity(self.apm.guards.trajectory, self.manifest, st, run),
                action,
                actual_hash,
                &outputs,
                &mut self.regexes,
            )),
            _ => None,
        };
        let position = match (&selection, automaton) {
            (Some(s), _) => s.position,
            (None, Some(a)) => a
                .next(&st.runs, &st.attempted)
                .map_or(u32::MAX, |j| u32::try_from(j).unwrap_or(u32::MAX)),
            (None, None) => st.pointer,
        };
        let retry = match (automaton, plan, input, st.retry) {
            (None, Some(p), Input::WellFormed { action, .. }, Some(k))
                if !self.rules.blocked_uses_step =>
            {
                let matches = |j: u32, regexes: &mut RegexCache| {
                    p.trajectory.get(j as usize).is_some_and(|e| {
                        knox_policy::trajectory::check(
                            Some(e),
                            action,
                            actual_hash,
                            &outputs,
                            regexes,
                        )
                        .matched
                    })
                };
                !matches(position, &mut self.regexes) && matches(k, &mut self.regexes)
            }
            _ => false,
        };
        let position = if retry {
            st.retry.unwrap_or(position)
        } else {
            position
        };
        let position = if automaton.is_some() && position == u32::MAX {
            plan.map_or(0, |p| u32::try_from(p.trajectory.len()).unwrap_or(u32::MAX))
        } else {
            position
        };
        Located {
            selection,
            position,
            retry,
        }
    }

    /// The stop guard's check, and what fired. The budget counts the proposed call's
    /// cost (a malformed proposal costs nothing) when the APM closes that channel.
    pub(super) fn stop_stage(
        &self,
        st: &AgentState,
        input: &Input<'_>,
        clock: Clock,
    ) -> (CheckPayload, Option<StopCause>) {
        let proposed = match input {
            Input::WellFormed { entry, .. } => entry.needs.cost,
            Input::Malformed { .. } => 0,
        };
        let cost = self.apm.guards.closed.budget.then_some(proposed);
        let state = RunState {
            actions: st.actions,
            spent: st.spent,
            elapsed_ms: clock.elapsed_ms,
            signal: clock.signal,
            cost,
        };
        let cause = stop::evaluate(&self.apm.guards.stop, &state);
        let check = CheckPayload {
            guard: GuardKind::Stop,
            passed: cause.is_none(),
            detail: CheckDetail::Stop {
                actions: state.actions,
                spent: state.spent,
                elapsed_ms: state.elapsed_ms,
                signal: state.signal,
                cause,
                cost,
            },
        };
        (check, cause)
    }

    /// The trajectory, system-call and data-flow checks ([`mediated::checks`]);
    /// returns the action that runs (the plan's values where they replace the
    /// proposal's).
    pub(super) fn mediated_stage(
        &mut self,
        st: &AgentState,
        entry: &'a ToolEntry,
        action: Action,
        step: Step<'_>,
        run: &[Arc<SharedOutput>],
        checks: &mut Vec<CheckPayload>,
    ) -> Action {
        let outputs = |k: u32| st.outputs.get(k as usize).cloned().flatten();
        let (tainted, run_view) = views(st, run);
        // An unplanned run (no prompt was given) has no trajectory to follow: the
        // contract bounds it, and without a contract nothing passes.
        let unplanned = self
            .apm
            .guards
            .trajectory
            .is_unplanned()
            .then(|| unplanned_outcome(self.contract.is_some()));
        let (apm, manifest, bound) = (self.apm, self.manifest, self.contract);
        let links =
            |call: u32, pointer: Option<&str>| link_untrusted(apm, manifest, st, call, pointer);
        let context = || provenance_context(manifest, st, run);
        let contract_sources = || match bound {
            Some(c) => contract::sources(c, &action, st, run),
            None => Vec::new(),
        };
        // Unplanned under a contract: a request's endpoint must be cleared by the
        // contract for every output the model read (issue 36, item 1).
        let contract_sink =
            unplanned.is_some() && self.contract.is_some() && action.tool == contract::HTTP;
        let view = mediated::AgentView {
            expected: step.expected,
            outputs: &outputs,
            tainted: &tainted,
            prompt: &self.prompt,
            trajectory: unplanned
                .as_ref()
                .or_else(|| step.selection.map(|s| &s.outcome)),
            closed: self.apm.guards.closed,
            run: &run_view,
            links: &links,
            context: &context,
            contract_sources: contract_sink
                .then_some(&contract_sources as &dyn Fn() -> Vec<(u64, bool)>),
        };
        let found = mediated::checks(
            entry,
            &action,
            step.hash,
            &self.apm.guards.syscall,
            view,
            &mut self.caches,
        );
        checks.extend(found);
        match planned_params(checks) {
            Some(params) => Action {
                tool: action.tool,
                params: params.clone(),
            },
            None => action,
        }
    }

    /// The regulation check of a disclosure under the regulations in force; `None`
    /// when the source has none to give (the decision is then undecided).
    pub(super) fn regulation_stage(
        &self,
        cx: &Regulated<'_, 'a>,
        regulation: &mut dyn RegulationSource,
        checks: &mut Vec<CheckPayload>,
    ) -> Option<()> {
        let regulated = !self.apm.guards.regulation.regulations.is_empty();
        if !regulated || cx.entry.annotations.discloses.is_none() {
            return Some(());
        }
        let closed = self.apm.guards.closed;
        // Under provenance, which outputs the disclosure's content carries is where
        // its parameters' data came from (the data-flow check's entries).
        let carried = (closed.provenance && cx.expected.is_some())
            .then(|| carried_by_provenance(cx.entry, checks));
        let seen = self.seen(cx, carried.as_deref());
        let d = Disclosure {
            entry: cx.entry,
            action: cx.action,
            expected: cx.expected,
            task: cx.task,
            seen: &seen,
            index: checks.len(),
        };
        let mut c = regulation.check(&d)?;
        // Content the executor composed (a parameter the plan does not fix exactly):
        // it may carry what was read in a form no match finds.
        let composed = if let Some(carried) = &carried {
            // By provenance: content that runs as composed and carries a labelled
            // output (one the plan's value replaced carries nothing). Its labels are
            // then in `φ`: what fails closed is a flow the norms could not decide with
            // them.
            seen.iter().any(|s| carried.contains(&s.node))
        } else {
            cx.action
                .params
                .iter()
                .any(|(n, v)| !knox_policy::dataflow::fixed(n, v, cx.expected))
        };
        if closed.labels && composed {
            fail_closed(&mut c, &seen);
        }
        checks.push(c);
        Some(())
    }

    /// The labelled outputs a disclosure saw: with labels per run, every agent's this
    /// call saw (another agent's positions are not this trajectory's: they link
    /// nothing), else the agent's own; each marked with whether the content carries it
    /// by provenance (`carried`, when decided so).
    fn seen<'r>(&self, cx: &Regulated<'r, 'a>, carried: Option<&[u64]>) -> Vec<Seen<'r>>
    where
        'a: 'r,
    {
        let labels_of = |tool: &str| {
            self.manifest
                .tool(tool)
                .and_then(|t| t.annotations.returns.as_ref())
        };
        let carries = |node: u64| carried.map(|c| c.contains(&node));
        if self.apm.guards.closed.labels {
            cx.run
                .iter()
                .filter_map(|r| {
                    let labels = labels_of(&r.tool).filter(|l| !l.info_types.is_empty())?;
                    Some(Seen {
                        node: r.node,
                        position: if r.agent == cx.st.plan {
                            r.position
                        } else {
                            u32::MAX
                        },
                        labels: Some(labels),
                        output: &r.output,
                        heard: r.heard,
                        carried: carries(r.node),
                    })
                })
                .collect()
        } else {
            cx.st
                .labelled
                .iter()
                .map(|l| Seen {
                    node: l.node,
                    position: l.position,
                    labels: labels_of(&l.tool),
                    output: &l.output,
                    heard: false,
                    carried: carries(l.node),
                })
                .collect()
        }
    }

    /// Remote models are recipients: a labelled output the call would return goes to
    /// every remote executor's operator, decided as a disclosure to them. `None` when
    /// the source has no check to give.
    pub(super) fn egress_stage(
        &self,
        cx: &Regulated<'_, 'a>,
        regulation: &mut dyn RegulationSource,
        checks: &mut Vec<CheckPayload>,
    ) -> Option<()> {
        let regulated = !self.apm.guards.regulation.regulations.is_empty();
        let labelled = cx
            .entry
            .annotations
            .returns
            .as_ref()
            .is_some_and(|l| !l.info_types.is_empty());
        if !(self.apm.guards.closed.models && regulated && labelled) {
            return Some(());
        }
        for model in self
            .apm
            .guards
            .remote
            .iter()
            .filter(|m| m.role == ModelRole::Executor)
        {
            let e = Egress {
                entry: cx.entry,
                task: cx.task,
                model,
                index: checks.len(),
            };
            let mut c = regulation.egress(&e)?;
            settle_egress(&mut c);
            checks.push(c);
        }
        Some(())
    }

    /// The decision: the first failing check blocks (from format v4 a blocked call
    /// never uses up the plan step it matched: the plan moves on, the step stays open
    /// to the same call); otherwise the call is allowed.
    pub(super) fn decide(
        &self,
        st: &AgentState,
        position: u32,
        expected: Option<&ExpectedCall>,
        entry: &'a ToolEntry,
        action: Action,
        checks: &mut [CheckPayload],
    ) -> Decision<'a> {
        let at = mediated::At {
            position,
            proposal: self
                .rules
                .plain_reasons
                .then(|| st.actions.saturating_add(1)),
        };
        let failure = checks
            .iter()
            .find_map(|c| mediated::block_reason(c, at).map(|r| (c.guard, r)));
        if let Some((guard, reason)) = failure {
            let matched = expected.is_some()
                && checks
                    .iter()
                    .any(|c| c.guard == GuardKind::Trajectory && c.passed);
            contract::settle_reservation(checks);
            return Decision::Block {
                guard,
                reason,
                advances: matched && self.rules.blocked_uses_step,
                attempted: matched && !self.rules.blocked_uses_step,
            };
        }
        Decision::Allow {
            position,
            cost: entry.needs.cost,
            action,
            entry,
        }
    }
}

/// The outputs a disclosure's content carries by provenance (the data-flow check's
/// entries): every parameter but a recipient that runs as composed carries its
/// sources.
fn carried_by_provenance(entry: &ToolEntry, checks: &[CheckPayload]) -> Vec<u64> {
    let recipients = entry
        .annotations
        .discloses
        .as_ref()
        .map(|d| d.recipient.as_slice())
        .unwrap_or_default();
    provenance_of(checks)
        .unwrap_or_default()
        .iter()
        .filter(|f| f.ran == knox_policy::provenance::COMPOSED && !recipients.contains(&f.param))
        .flat_map(|f| f.sources.iter().copied())
        .collect()
}

/// Whether a recipient linked to call `call`'s output (at `pointer`) is not
/// authorized by the link: one into an output of outside content, unless the
/// manifest trusts the field — or, deciding by provenance, unless the plan names
/// the field: the user chose where the address comes from (reply to its sender),
/// and what the recipient gets is only what the plan clears or writes. A link
/// naming no field stays unauthorized (any value of the output, an address the
/// output's author planted among others, would do).
fn link_untrusted(
    apm: &Apm,
    manifest: &ToolkitManifest,
    st: &AgentState,
    call: u32,
    pointer: Option<&str>,
) -> bool {
    if apm.guards.closed.provenance && pointer.is_some() {
        return false;
    }
    let entry = apm
        .agents
        .get(st.plan)
        .and_then(|p| p.trajectory.get(call as usize))
        .and_then(|e| manifest.tool(&e.tool));
    entry.is_none_or(|t| {
        t.returns_external()
            && !pointer.is_some_and(|p| t.annotations.trusted.iter().any(|f| f == p))
    })
}

/// The data-flow guard's views of what agent `st` received: its untrusted outputs, and
/// the run's outputs this call sees. What was heard elsewhere has no text here (a null
/// output): content matching finds nothing in it, and the regulation guard takes it as
/// reaching composed content. It stays in the view, which the data-flow check counts.
fn views<'r>(
    st: &'r AgentState,
    run: &'r [Arc<SharedOutput>],
) -> (Vec<Tainted<'r>>, Vec<RunOutput<'r>>) {
    let tainted = st
        .tainted
        .iter()
        .map(|t| Tainted {
            node: t.node,
            output: &t.output,
        })
        .collect();
    let run_view = run
        .iter()
        .map(|r| RunOutput {
            node: r.node,
            mine: r.agent == st.plan,
            position: r.position,
            output: &r.output,
            text: &r.text,
        })
        .collect();
    (tainted, run_view)
}
