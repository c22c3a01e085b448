//! The pipeline's order, decisions, state changes and output recording, on the APM of
//! the v1 evidence fixture (an MT-SA run over the embedded InjecAgent manifest).

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use knox_guards::{
    AgentState, Clock, Decision, Disclosure, Egress, Input, Misrecorded, Pipeline, Proposal,
    RecordedOutput, RegulationSource, StateChange,
};
use knox_policy::ToolkitManifest;
use knox_types::apm::{Apm, ExpectedCall, RemoteModel, StopCause};
use knox_types::bundle::MonitorRules;
use knox_types::bundle::{ModelInfo, ModelRole};

const CURRENT: MonitorRules = MonitorRules::CURRENT;
use knox_types::payload::{CheckDetail, CheckPayload, GuardKind};
use knox_types::regulation::RegulationDecision;
use serde_json::{Value, json};

fn manifest() -> ToolkitManifest {
    knox_policy::shipped::current().unwrap()
}

/// The fixture's APM: agent-0 plans `AmazonGetProductDetails` then
/// `GoogleCalendarReadEvents`; Auth grants Amazon and GoogleCalendar.
fn apm() -> Apm {
    let b: Value = serde_json::from_str(include_str!(
        "../../knox/tests/fixtures/evidence-v1/bundle.json"
    ))
    .unwrap();
    serde_json::from_value(b["apm"].clone()).unwrap()
}

fn raw(e: &ExpectedCall) -> Vec<u8> {
    serde_json::to_vec(&json!({"tool": e.tool, "params": e.params})).unwrap()
}

fn guards(checks: &[CheckPayload]) -> Vec<GuardKind> {
    checks.iter().map(|c| c.guard).collect()
}

/// A regulation source that counts its questions and answers with `answer`.
struct Fixed {
    asked: Vec<usize>,
    answer: Option<CheckPayload>,
}

impl RegulationSource for Fixed {
    fn check(&mut self, d: &Disclosure<'_>) -> Option<CheckPayload> {
        self.asked.push(d.index);
        self.answer.clone()
    }

    fn egress(&mut self, e: &Egress<'_>) -> Option<CheckPayload> {
        self.asked.push(e.index);
        self.answer.clone()
    }
}

fn never() -> Fixed {
    Fixed {
        asked: Vec::new(),
        answer: None,
    }
}

fn regulation(passed: bool) -> CheckPayload {
    CheckPayload {
        guard: GuardKind::Regulation,
        passed,
        detail: CheckDetail::Regulation {
            verdict: if passed { "compliant" } else { "non_compliant" }.into(),
            policies: if passed {
                vec![]
            } else {
                vec!["gdpr-x".into()]
            },
            flow: None,
            decisions: vec![],
            judge: None,
            note: None,
            model: None,
        },
    }
}

#[test]
fn a_planned_call_passes_every_guard_in_order_and_moves_the_pointer() {
    let (apm, m) = (apm(), manifest());
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    assert_eq!(st.outputs.len(), 2);
    let planned = &apm.agents[0].trajectory[0];
    let e = p.evaluate(
        &st,
        Proposal::classify(&raw(planned), &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    assert_eq!(
        guards(&e.checks),
        [
            GuardKind::Stop,
            GuardKind::Input,
            GuardKind::Trajectory,
            GuardKind::Syscall
        ]
    );
    assert!(e.checks.iter().all(|c| c.passed));
    assert_eq!((e.call.ordinal, e.call.position), (0, 0));
    assert_eq!(e.call.expected.as_ref(), Some(planned));
    assert_eq!(e.call.raw, None);
    let Decision::Allow { position, cost, .. } = &e.decision else {
        panic!("{:?}", e.decision);
    };
    assert_eq!(
        (*position, *cost),
        (0, m.tool(&planned.tool).unwrap().needs.cost)
    );
    assert_eq!(e.decision.block_reason(), None);
    st.apply(e.change());
    assert_eq!((st.actions, st.pointer, st.stopped), (1, 1, false));
}

#[test]
fn an_off_plan_call_is_blocked_by_the_trajectory_guard_without_moving_the_pointer() {
    let (apm, m) = (apm(), manifest());
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    // The plan's second call, proposed first.
    let e = p.evaluate(
        &st,
        Proposal::classify(&raw(&apm.agents[0].trajectory[1]), &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    let Decision::Block {
        guard,
        reason,
        advances,
        ..
    } = &e.decision
    else {
        panic!("{:?}", e.decision);
    };
    assert_eq!((*guard, *advances), (GuardKind::Trajectory, false));
    assert!(
        reason.starts_with("proposal 1 is off the plan (checked against plan step 1): "),
        "{reason}"
    );
    // Every guard after the failing one is still evaluated and recorded.
    assert_eq!(e.checks.len(), 4);
    st.apply(e.change());
    assert_eq!((st.actions, st.pointer), (1, 0));
}

#[test]
fn malformed_bytes_fail_the_input_guard_and_nothing_after_it_runs() {
    let (apm, m) = (apm(), manifest());
    let mut p = Pipeline::new(&apm, &m);
    let st = AgentState::new(&apm, 0);
    let e = p.evaluate(
        &st,
        Proposal::classify(b"\xff not json", &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    assert_eq!(guards(&e.checks), [GuardKind::Stop, GuardKind::Input]);
    assert!(!e.checks[1].passed);
    assert_eq!(e.call.raw_len, 10);
    assert!(e.call.raw.is_some() && e.call.actual.is_none());
    let reason = e.decision.block_reason().unwrap();
    assert!(
        reason.starts_with("malformed proposal: not a tool call"),
        "{reason}"
    );
    assert_eq!(
        e.change(),
        StateChange {
            counted: true,
            position: 0,
            ..StateChange::default()
        }
    );
}

#[test]
fn the_stop_guard_fires_first_on_the_given_clock_and_stops_the_agent() {
    let (mut apm, m) = (apm(), manifest());
    apm.guards.stop.timeout_ms = Some(100);
    apm.guards.stop.max_actions = Some(1);
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    let planned = raw(&apm.agents[0].trajectory[0]);
    let late = Clock {
        elapsed_ms: 100,
        signal: false,
    };
    let e = p.evaluate(
        &st,
        Proposal::classify(&planned, &m),
        late,
        &mut never(),
        &[],
    );
    assert!(matches!(
        e.decision,
        Decision::Interrupt {
            cause: StopCause::Timeout
        }
    ));
    assert_eq!(guards(&e.checks), [GuardKind::Stop]);
    assert_eq!(
        e.decision.block_reason().as_deref(),
        Some("interrupted: timeout")
    );
    // The signal outranks the timeout, but only when the APM watches one.
    let signalled = Clock {
        elapsed_ms: 100,
        signal: true,
    };
    let e = p.evaluate(
        &st,
        Proposal::classify(&planned, &m),
        signalled,
        &mut never(),
        &[],
    );
    assert!(matches!(
        e.decision,
        Decision::Interrupt {
            cause: StopCause::Signal
        }
    ));
    st.actions = 1;
    let e = p.evaluate(
        &st,
        Proposal::classify(b"junk", &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    assert!(matches!(
        e.decision,
        Decision::Interrupt {
            cause: StopCause::ActionCap
        }
    ));
    st.apply(e.change());
    assert!(st.stopped);
    assert_eq!(st.actions, 2);
}

#[test]
fn a_disclosure_asks_the_regulation_source_last_and_its_answer_decides() {
    let (mut apm, m) = (apm(), manifest());
    let disclose = ExpectedCall::exact(
        0,
        "GoogleCalendarCreateOrUpdateEvent",
        json!({"event_name": "x", "attendees": ["a@example.com"]})
            .as_object()
            .cloned()
            .unwrap(),
    );
    apm.agents[0].trajectory = vec![disclose.clone()];
    let call = raw(&disclose);
    let st = AgentState::new(&apm, 0);

    // No regulations in force: not asked.
    let mut p = Pipeline::new(&apm, &m);
    let mut source = never();
    let e = p.evaluate(
        &st,
        Proposal::classify(&call, &m),
        Clock::default(),
        &mut source,
        &[],
    );
    assert!(source.asked.is_empty());
    assert!(matches!(e.decision, Decision::Allow { .. }));

    apm.guards.regulation.regulations = vec!["GDPR".into()];
    let mut p = Pipeline::new(&apm, &m);
    // No answer (a journal cut before the check): undecided, nothing changes.
    let mut source = never();
    let e = p.evaluate(
        &st,
        Proposal::classify(&call, &m),
        Clock::default(),
        &mut source,
        &[],
    );
    assert!(matches!(e.decision, Decision::Undecided));
    assert_eq!(source.asked, [e.checks.len()]);
    assert_eq!(e.checks.last().unwrap().guard, GuardKind::DataFlow);
    assert_eq!(e.change(), StateChange::default());

    // A non-compliant answer blocks. The call matched its plan step, which it does not
    // use up (format v4): the user's own call may still take it.
    let mut source = Fixed {
        asked: Vec::new(),
        answer: Some(regulation(false)),
    };
    let e = p.evaluate(
        &st,
        Proposal::classify(&call, &m),
        Clock::default(),
        &mut source,
        &[],
    );
    let Decision::Block {
        guard, advances, ..
    } = e.decision
    else {
        panic!("{:?}", e.decision);
    };
    assert!(matches!(
        e.decision,
        Decision::Block {
            attempted: true,
            ..
        }
    ));
    assert_eq!((guard, advances), (GuardKind::Regulation, false));
    assert_eq!(e.checks.last().unwrap(), &regulation(false));
    assert_eq!(
        e.change(),
        StateChange {
            counted: true,
            attempted: true,
            position: 0,
            ..StateChange::default()
        }
    );
    // Under the rules before format v4 (a verifier replaying such evidence), the
    // blocked call used the step up.
    let mut old = Pipeline::new(&apm, &m).with_rules(knox_types::bundle::MonitorRules::V3);
    let mut source = Fixed {
        asked: Vec::new(),
        answer: Some(regulation(false)),
    };
    let e = old.evaluate(
        &st,
        Proposal::classify(&call, &m),
        Clock::default(),
        &mut source,
        &[],
    );
    assert!(
        matches!(e.decision, Decision::Block { advances: true, .. }),
        "{:?}",
        e.decision
    );
    assert!(e.change().advances);
}

/// A verdict of the egress check (`regulation(passed)` with another verdict).
fn verdict(v: &str) -> CheckPayload {
    let mut c = regulation(true);
    if let CheckDetail::Regulation { verdict, .. } = &mut c.detail {
        *verdict = v.into();
    }
    c
}

#[test]
fn a_labelled_output_for_a_remote_executor_is_decided_as_a_disclosure_to_its_operator() {
    let (mut apm, m) = (apm(), manifest());
    // GoogleCalendarReadEvents returns labelled data (schedule, contact).
    let read = apm.agents[0].trajectory[1].clone();
    assert_eq!(read.tool, "GoogleCalendarReadEvents");
    apm.agents[0].trajectory = vec![read.clone()];
    let call = raw(&read);
    let st = AgentState::new(&apm, 0);
    let remote = RemoteModel::of(&ModelInfo {
        role: ModelRole::Executor,
        name: "openai:https://llm.vendor.example/v1#m".into(),
        weights_hash: None,
        declared: true,
    })
    .unwrap();
    assert_eq!(remote.endpoint, "https://llm.vendor.example/v1");
    let run = |apm: &Apm, answer: Option<CheckPayload>| {
        let mut p = Pipeline::new(apm, &m);
        let mut source = Fixed {
            asked: Vec::new(),
            answer,
        };
        let e = p.evaluate(
            &st,
            Proposal::classify(&call, &m),
            Clock::default(),
            &mut source,
            &[],
        );
        let decision = match e.decision {
            Decision::Allow { .. } => "allow".to_owned(),
            Decision::Block { guard, .. } => format!("block:{}", guard.as_str()),
            Decision::Undecided => "undecided".to_owned(),
            Decision::Interrupt { .. } => "interrupt".to_owned(),
        };
        (e.checks, decision, source.asked)
    };
    // Not asked: no regulation in force; no remote model; a rule the APM does not
    // close (evidence from before it); a remote planner (it hears no output).
    apm.guards.remote = vec![remote.clone()];
    apm.guards.closed.models = true;
    let (_, decision, asked) = run(&apm, Some(verdict("non_compliant")));
    assert!(asked.is_empty() && decision == "allow");
    apm.guards.regulation.regulations = vec!["GDPR".into()];
    for edit in [
        (|a: &mut Apm| a.guards.remote.clear()) as fn(&mut Apm),
        |a| a.guards.closed.models = false,
        |a| a.guards.remote[0].role = ModelRole::Planner,
    ] {
        let mut a = apm.clone();
        edit(&mut a);
        let (_, decision, asked) = run(&a, Some(verdict("non_compliant")));
        assert!(asked.is_empty() && decision == "allow");
    }
    // Asked last, after the mediated checks; only `compliant` passes.
    for (v, passes) in [
        ("compliant", true),
        ("non_compliant", false),
        ("not_applicable", false),
    ] {
        let (checks, decision, asked) = run(&apm, Some(verdict(v)));
        assert_eq!(asked, [checks.len() - 1]);
        assert_eq!(checks[checks.len() - 2].guard, GuardKind::Syscall);
        assert_eq!(checks.last().unwrap().passed, passes, "{v}");
        let want = if passes { "allow" } else { "block:regulation" };
        assert_eq!(decision, want, "{v}");
    }
    // `not_applicable` because every regulation finds the flow out of its scope: passes;
    // because a norm could not decide (a warning): fails.
    let scoped = |warnings: Vec<String>| {
        let mut c = verdict("not_applicable");
        if let CheckDetail::Regulation { decisions, .. } = &mut c.detail {
            *decisions = vec![RegulationDecision {
                regulation: "GDPR".into(),
                recipient: "https://llm.vendor.example/v1".into(),
                verdict: "not_applicable".into(),
                policies: vec![],
                provisions: vec![],
                warnings,
            }];
        }
        c
    };
    let (_, decision, _) = run(&apm, Some(scoped(vec![])));
    assert_eq!(decision, "allow");
    let (_, decision, _) = run(&apm, Some(scoped(vec!["unknown role `x`".into()])));
    assert_eq!(decision, "block:regulation");
    // No answer (a journal cut before it): undecided.
    let (_, decision, _) = run(&apm, None);
    assert_eq!(decision, "undecided");
    // A tool whose output carries no label is not asked about.
    let unlabelled = ExpectedCall::exact(
        0,
        "GoogleCalendarSearchEvents",
        json!({"keywords": ["dentist"]})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let mut a = apm.clone();
    a.agents[0].trajectory = vec![unlabelled.clone()];
    let mut p = Pipeline::new(&a, &m);
    let mut source = Fixed {
        asked: Vec::new(),
        answer: Some(verdict("non_compliant")),
    };
    let e = p.evaluate(
        &AgentState::new(&a, 0),
        Proposal::classify(&raw(&unlabelled), &m),
        Clock::default(),
        &mut source,
        &[],
    );
    assert!(source.asked.is_empty() && matches!(e.decision, Decision::Allow { .. }));
}

#[test]
fn outputs_are_recorded_as_taint_and_as_labelled_data_only_when_asked() {
    let (apm, m) = (apm(), manifest());
    let mut st = AgentState::new(&apm, 0);
    let out = |node, position, tool: &str| RecordedOutput {
        node,
        position,
        tool: tool.into(),
        cost: 2,
        output: json!({"product": "B08KFQ9HK5"}),
        capability: None,
    };
    // External content with labels, no policy set deciding: taint only.
    st.record_output(&m, out(7, 0, "AmazonGetProductDetails"), false);
    assert_eq!(st.spent, 2);
    assert_eq!(st.outputs[0], Some(json!({"product": "B08KFQ9HK5"})));
    assert_eq!(st.tainted.len(), 1);
    assert_eq!(st.tainted[0].node, 7);
    assert!(st.labelled.is_empty());
    // With a policy set deciding: labelled too.
    st.record_output(&m, out(9, 1, "AmazonGetProductDetails"), true);
    assert_eq!(st.labelled.len(), 1);
    assert_eq!((st.labelled[0].node, st.labelled[0].position), (9, 1));
    // A user-sourced tool is not taint; a position past the plan records no slot.
    st.record_output(&m, out(11, 5, "AmazonViewCart"), true);
    assert_eq!(st.tainted.len(), 2);
    assert_eq!(st.labelled.len(), 2);
    assert_eq!(st.spent, 6);
    assert_eq!(st.outputs.len(), 2);
}

#[test]
fn what_the_monitor_recorded_reclassifies_to_the_same_input_and_changes_are_named() {
    let (apm, m) = (apm(), manifest());
    let mut p = Pipeline::new(&apm, &m);
    let st = AgentState::new(&apm, 0);
    let mut record = |bytes: &[u8]| {
        p.evaluate(
            &st,
            Proposal::classify(bytes, &m),
            Clock::default(),
            &mut never(),
            &[],
        )
        .call
    };
    let well = record(&raw(&apm.agents[0].trajectory[0]));
    assert!(matches!(
        Input::reclassify(&well, &m, CURRENT).unwrap().unwrap(),
        Input::WellFormed { .. }
    ));
    let bad = record(br#"{"tool":"NoSuchTool","params":{}}"#);
    assert!(matches!(
        Input::reclassify(&bad, &m, CURRENT).unwrap().unwrap(),
        Input::Malformed { error } if error == "unknown tool `NoSuchTool`"
    ));
    let big = record(&vec![b'x'; 5000]);
    assert!(Input::reclassify(&big, &m, CURRENT).unwrap().is_none());

    let mut t = well.clone();
    t.actual.as_mut().unwrap().tool.push('x');
    assert_eq!(
        Input::reclassify(&t, &m, CURRENT).unwrap_err(),
        Misrecorded::ActionHash
    );
    let mut t = bad.clone();
    t.actual = None;
    assert_eq!(
        Input::reclassify(&t, &m, CURRENT).unwrap_err(),
        Misrecorded::RawHash
    );
    let mut t = bad.clone();
    t.raw = Some(String::from_utf8(raw(&apm.agents[0].trajectory[0])).unwrap());
    t.raw_len = t.raw.as_ref().unwrap().len() as u64;
    assert_eq!(
        Input::reclassify(&t, &m, CURRENT).unwrap_err(),
        Misrecorded::WellFormed
    );
    let mut t = well;
    t.actual = None;
    assert_eq!(
        Input::reclassify(&t, &m, CURRENT).unwrap_err(),
        Misrecorded::Empty
    );
}

#[test]
fn tolerant_mode_follows_the_automaton_and_an_off_plan_call_moves_nothing() {
    let (mut apm, m) = (apm(), manifest());
    apm.guards.trajectory = knox_types::apm::TrajectoryMode::Tolerant {
        read_repeats: 1,
        capacity_bits: None,
        strict: false,
    };
    let plan = apm.agents[0].trajectory.clone();
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    let mut propose = |st: &mut AgentState, bytes: &[u8]| {
        let (allowed, position, _, reason) = propose(&mut p, &m, st, bytes);
        (allowed, position, reason)
    };
    // The second read first: both are reads, independent.
    assert_eq!(propose(&mut st, &raw(&plan[1])), (true, 1, None));
    // An off-plan call: blocked, attributed to the next step, nothing moves.
    let other = serde_json::to_vec(
        &json!({"tool": "GoogleCalendarReadEvents", "params": {"event_ids": ["attacker"]}}),
    )
    .unwrap();
    let (allowed, position, reason) = propose(&mut st, &other);
    assert!(!allowed && position == 1, "{reason:?}");
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("proposal 2 is off the plan (checked against plan step 2): "),
        "{reason}"
    );
    assert_eq!(st.runs, vec![0, 1]);
    // The first read, then once more (one repeat), then no more.
    assert_eq!(propose(&mut st, &raw(&plan[0])), (true, 0, None));
    assert_eq!(propose(&mut st, &raw(&plan[0])), (true, 0, None));
    let (allowed, _, reason) = propose(&mut st, &raw(&plan[0]));
    assert!(!allowed);
    assert!(reason.unwrap().contains("allowed time"));
    assert_eq!(st.runs, vec![2, 1]);
    assert_eq!(st.actions, 5);
}

/// #36 item 3: the tolerant mode's free choices are counted against the APM's
/// capacity: a call that chose among two enabled reads records `options: 2` and
/// spends the one bit declared; then only the plan's next step may run — a repeat is
/// refused for that, the plan's own order still runs.
#[test]
fn the_tolerant_modes_choices_are_counted_and_bounded_by_the_capacity() {
    let (mut apm, m) = (apm(), manifest());
    apm.guards.trajectory = knox_types::apm::TrajectoryMode::Tolerant {
        read_repeats: 1,
        capacity_bits: Some(1),
        strict: false,
    };
    let plan = apm.agents[0].trajectory.clone();
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    let mut propose = |st: &mut AgentState, bytes: &[u8]| {
        let (allowed, _, options, reason) = propose(&mut p, &m, st, bytes);
        (allowed, options, reason)
    };
    // The second read first: one of two enabled reads, the capacity's one bit.
    assert_eq!(propose(&mut st, &raw(&plan[1])), (true, Some(2), None));
    assert_eq!(st.choices, 2);
    // Again: another choice of two would pass the bound; only step 1 may run.
    let (allowed, options, reason) = propose(&mut st, &raw(&plan[1]));
    assert!(!allowed && options.is_none());
    let reason = reason.unwrap();
    assert!(
        reason.contains("free choices are spent (its capacity is 1 bits): only plan step 1"),
        "{reason}"
    );
    // The plan's next step: no choice, nothing spent.
    assert_eq!(propose(&mut st, &raw(&plan[0])), (true, None, None));
    assert_eq!((st.choices, st.runs.clone()), (2, vec![1, 1]));
}

/// #36 item 3, `strict`: the tolerant mode's freedoms hold until the model has read
/// labelled data; from then on its capacity is 0, so only the plan's next step runs and
/// what was read steers no choice. The same run without `strict` keeps its freedoms.
#[test]
fn a_strict_run_has_no_free_choice_after_a_labelled_read() {
    use knox_guards::RecordedOutput;
    use knox_types::apm::TrajectoryMode;
    let m = manifest();
    for strict in [true, false] {
        let mut apm = apm();
        apm.guards.trajectory = TrajectoryMode::Tolerant {
            read_repeats: 1,
            capacity_bits: Some(TrajectoryMode::DEFAULT_CAPACITY_BITS),
            strict,
        };
        let plan = apm.agents[0].trajectory.clone();
        let mut p = Pipeline::new(&apm, &m);
        let mut st = AgentState::new(&apm, 0);
        // Nothing read yet: the second read first is a free choice, counted.
        let (allowed, position, options, _) = propose(&mut p, &m, &mut st, &raw(&plan[1]));
        assert_eq!((allowed, position, options), (true, 1, Some(2)), "{strict}");
        // The calendar's events: `schedule` and `contact`.
        st.record_output(
            &m,
            RecordedOutput {
                node: 3,
                position: 1,
                tool: plan[1].tool.clone(),
                cost: 1,
                output: json!({"event_details": []}),
                capability: None,
            },
            true,
        );
        let (allowed, _, options, reason) = propose(&mut p, &m, &mut st, &raw(&plan[1]));
        if strict {
            assert!(!allowed && options.is_none());
            let reason = reason.unwrap();
            assert!(
                reason.contains(
                    "the run is strict and its model has read labelled data: only plan step 1"
                ),
                "{reason}"
            );
        } else {
            assert_eq!((allowed, options), (true, Some(2)), "{reason:?}");
        }
        // The plan's next step runs either way, with no choice.
        let (allowed, position, options, _) = propose(&mut p, &m, &mut st, &raw(&plan[0]));
        assert_eq!((allowed, position, options), (true, 0, None), "{strict}");
    }
}

/// Proposes `bytes` to `p` in state `st` (the regulation guard never asked) and applies
/// the change: whether it was allowed, its position, the trajectory check's `options`,
/// and the block reason.
fn propose<'a>(
    p: &mut Pipeline<'a>,
    m: &'a ToolkitManifest,
    st: &mut AgentState,
    bytes: &[u8],
) -> (bool, u32, Option<u32>, Option<String>) {
    let e = p.evaluate(
        st,
        Proposal::classify(bytes, m),
        Clock::default(),
        &mut never(),
        &[],
    );
    st.apply(e.change());
    let options = e.checks.iter().find_map(|c| match &c.detail {
        CheckDetail::Trajectory { options, .. } => *options,
        _ => None,
    });
    let allowed = matches!(e.decision, Decision::Allow { .. });
    (allowed, e.call.position, options, e.decision.block_reason())
}

/// #36 item 3: under an APM that executes planned values as planned, a call matched
/// in a form the plan allows but did not write (a set given with a repeat) runs — and
/// is granted — as the plan writes it, and the trajectory check records that; under
/// an APM without the rule, as proposed.
#[test]
fn a_tolerated_form_runs_as_the_plan_writes_it() {
    let m = manifest();
    let varied = serde_json::to_vec(&json!({"tool": "GoogleCalendarReadEvents",
        "params": {"event_ids": ["DocAppointment1", "DocAppointment1"]}}))
    .unwrap();
    for planned in [true, false] {
        let mut apm = apm();
        apm.guards.trajectory = knox_types::apm::TrajectoryMode::Tolerant {
            read_repeats: 1,
            capacity_bits: None,
            strict: false,
        };
        apm.guards.closed.planned = planned;
        let mut p = Pipeline::new(&apm, &m);
        let st = AgentState::new(&apm, 0);
        let e = p.evaluate(
            &st,
            Proposal::classify(&varied, &m),
            Clock::default(),
            &mut never(),
            &[],
        );
        let Decision::Allow { action, .. } = &e.decision else {
            panic!("{:?}", e.decision);
        };
        let CheckDetail::Trajectory { executed, .. } = &e.checks[2].detail else {
            panic!("{:?}", e.checks[2]);
        };
        if planned {
            assert_eq!(
                Value::Object(action.params.clone()),
                json!({"event_ids": ["DocAppointment1"]})
            );
            assert_eq!(executed.as_ref(), Some(&action.params));
        } else {
            assert_eq!(Some(action), e.call.actual.as_ref());
            assert_eq!(executed, &None);
        }
    }
}

#[test]
fn a_repeated_read_does_not_change_what_a_later_step_takes_from_its_output() {
    let (mut apm, m) = (apm(), manifest());
    apm.guards.trajectory = knox_types::apm::TrajectoryMode::Tolerant {
        read_repeats: 2,
        capacity_bits: None,
        strict: false,
    };
    let read = apm.agents[0].trajectory[1].clone();
    let mut c = std::collections::BTreeMap::new();
    c.insert(
        "event_name".to_string(),
        knox_types::apm::ParamConstraint::FromOutput {
            call: 0,
            pointer: Some("/name".into()),
        },
    );
    c.insert(
        "attendees".to_string(),
        knox_types::apm::ParamConstraint::Exact {
            value: json!(["a@example.com"]),
        },
    );
    let write = ExpectedCall::constrained(
        1,
        "GoogleCalendarCreateOrUpdateEvent",
        json!({"event_name": "$output:0/name", "attendees": ["a@example.com"]})
            .as_object()
            .cloned()
            .unwrap(),
        c,
    );
    apm.agents[0].trajectory = vec![read.clone(), write];
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    for (node, name) in [(1, "first"), (2, "second")] {
        let e = p.evaluate(
            &st,
            Proposal::classify(&raw(&read), &m),
            Clock::default(),
            &mut never(),
            &[],
        );
        assert!(matches!(e.decision, Decision::Allow { position: 0, .. }));
        st.apply(e.change());
        st.record_output(
            &m,
            RecordedOutput {
                node,
                position: 0,
                tool: read.tool.clone(),
                cost: 2,
                output: json!({"name": name}),
                capability: None,
            },
            false,
        );
    }
    let event = |name: &str| {
        serde_json::to_vec(&json!({"tool": "GoogleCalendarCreateOrUpdateEvent",
            "params": {"event_name": name, "attendees": ["a@example.com"]}}))
        .unwrap()
    };
    let e = p.evaluate(
        &st,
        Proposal::classify(&event("second"), &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    assert!(matches!(
        e.decision,
        Decision::Block {
            guard: GuardKind::Trajectory,
            ..
        }
    ));
    st.apply(e.change());
    let e = p.evaluate(
        &st,
        Proposal::classify(&event("first"), &m),
        Clock::default(),
        &mut never(),
        &[],
    );
    assert!(
        matches!(e.decision, Decision::Allow { position: 1, .. }),
        "{:?}",
        e.decision
    );
}

/// An APM that says "unplanned" (no prompt was given) but names no contract permits
/// nothing: the trajectory check fails every call, planned or not, so an unplanned
/// mode cannot be used to run without a bound.
#[test]
fn an_unplanned_apm_without_a_contract_blocks_every_call_at_the_trajectory_guard() {
    let (mut apm, m) = (apm(), manifest());
    apm.guards.trajectory = knox_types::apm::TrajectoryMode::Unplanned;
    let mut p = Pipeline::new(&apm, &m);
    let mut st = AgentState::new(&apm, 0);
    for e in apm.agents[0].trajectory.clone() {
        let ev = p.evaluate(
            &st,
            Proposal::classify(&raw(&e), &m),
            Clock::default(),
            &mut never(),
            &[],
        );
        let Decision::Block { guard, reason, .. } = &ev.decision else {
            panic!("{:?}", ev.decision);
        };
        assert_eq!(*guard, GuardKind::Trajectory);
        assert!(reason.contains("no plan and no contract"), "{reason}");
        let CheckDetail::Trajectory { mode, .. } = &ev.checks[2].detail else {
            panic!("{:?}", ev.checks[2]);
        };
        assert_eq!(mode, "unplanned");
        st.apply(ev.change());
    }
    assert_eq!((st.actions, st.pointer), (2, 0));
}

/// #34: a call that matches the user's next planned step and that a later guard blocks
/// (here the regulation guard: an injected copy of the planned disclosure, decided
/// non-compliant) never uses that step up — in the exact and the tolerant mode the
/// user's own call then takes it, allowed; and the plan goes on past a step that stays
/// blocked (the next step is not stalled by it). Under the rules before format v4 the
/// step was used up and the user's call refused.
#[test]
fn a_blocked_call_never_uses_up_the_plan_step_it_matched() {
    use knox_types::apm::TrajectoryMode;
    let m = manifest();
    let disclose = ExpectedCall::exact(
        0,
        "GoogleCalendarCreateOrUpdateEvent",
        json!({"event_name": "x", "attendees": ["a@example.com"]})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let read = ExpectedCall::exact(
        0,
        "AmazonGetProductDetails",
        json!({"product_id": "B01"}).as_object().cloned().unwrap(),
    );
    let (disclose_raw, read_raw) = (raw(&disclose), raw(&read));
    for mode in [
        TrajectoryMode::Exact,
        TrajectoryMode::Tolerant {
            read_repeats: 0,
            capacity_bits: None,
            strict: false,
        },
    ] {
        let mut apm = apm();
        apm.guards.regulation.regulations = vec!["GDPR".into()];
        apm.guards.trajectory = mode;
        apm.agents[0].trajectory = vec![disclose.clone(), read.clone()];
        // The injected copy, refused; then the user's own call, compliant.
        let mut p = Pipeline::new(&apm, &m);
        let mut st = AgentState::new(&apm, 0);
        let (guard, _, change) = decide(&mut p, &m, &st, &disclose_raw, false);
        assert_eq!(guard, Some(GuardKind::Regulation), "{mode:?}");
        st.apply(change);
        let (guard, position, change) = decide(&mut p, &m, &st, &disclose_raw, true);
        assert_eq!(
            (guard, position),
            (None, 0),
            "{mode:?}: the user's own call is refused"
        );
        st.apply(change);
        // Then the next step, allowed.
        let (guard, position, _) = decide(&mut p, &m, &st, &read_raw, true);
        assert_eq!((guard, position), (None, 1), "{mode:?}");
        // A step that stays blocked does not stall the plan: the next one runs.
        let mut p = Pipeline::new(&apm, &m);
        let mut st = AgentState::new(&apm, 0);
        let (_, _, change) = decide(&mut p, &m, &st, &disclose_raw, false);
        st.apply(change);
        let (guard, position, change) = decide(&mut p, &m, &st, &read_raw, true);
        assert_eq!(
            (guard, position),
            (None, 1),
            "{mode:?}: the plan stalled behind a blocked step"
        );
        st.apply(change);
        // Once a later step ran, the blocked one is closed (the plan's order holds).
        let (guard, _, _) = decide(&mut p, &m, &st, &disclose_raw, true);
        assert_eq!(guard, Some(GuardKind::Trajectory), "{mode:?}");
        // The old rules: the blocked copy used the step up; the user's call is refused.
        let mut old = Pipeline::new(&apm, &m).with_rules(knox_types::bundle::MonitorRules::V3);
        let mut st = AgentState::new(&apm, 0);
        let (_, _, change) = decide(&mut old, &m, &st, &disclose_raw, false);
        st.apply(change);
        let (guard, _, _) = decide(&mut old, &m, &st, &disclose_raw, true);
        assert_eq!(guard, Some(GuardKind::Trajectory), "{mode:?}");
    }
}

/// What the pipeline decides on the proposal `bytes` when the regulation guard answers
/// `ok`: the blocking guard (`None`: allowed), the call's position, the state change.
fn decide<'a>(
    p: &mut Pipeline<'a>,
    m: &'a ToolkitManifest,
    st: &AgentState,
    bytes: &'a [u8],
    ok: bool,
) -> (Option<GuardKind>, u32, StateChange) {
    let mut source = Fixed {
        asked: Vec::new(),
        answer: Some(regulation(ok)),
    };
    let e = p.evaluate(
        st,
        Proposal::classify(bytes, m),
        Clock::default(),
        &mut source,
        &[],
    );
    let guard = match &e.decision {
        Decision::Allow { .. } => None,
        Decision::Block { guard, .. } => Some(*guard),
        other => panic!("{other:?}"),
    };
    (guard, e.call.position, e.change())
}
