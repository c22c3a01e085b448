//! #36 item 3: under an APM that executes planned values as planned (`closed.planned`,
//! what new APMs carry), a call the tolerant mode matches in a form its plan step
//! allows but did not write runs as the plan writes it. The trajectory check records
//! the executed parameters; the verifier recomputes them, so an insider who edits them
//! (to claim the tool ran what the executor wrote, or anything else) is caught.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::sync::Arc;

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::TeeKey;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_policy::ToolkitManifest;
use knox_types::aeg::{NodeKind, chain_start, chain_step};
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind, TrajectoryMode};
use knox_types::bundle::Bundle;
use knox_types::payload::{Body, CheckDetail};
use knox_verify::{Options, Outcome, Report};
use serde_json::{Value, json};

fn manifest() -> ToolkitManifest {
    knox_policy::shipped::current().unwrap()
}

/// A tolerant run planning one read of two calendar events; the executor proposes
/// them in another order with a repeat. Returns the bundle and what the tool was
/// given to run.
fn run(rt: &Runtime) -> (Bundle, Value) {
    let plan = vec![ExpectedCall::exact(
        0,
        "GoogleCalendarReadEvents",
        json!({"event_ids": ["a", "b"]})
            .as_object()
            .cloned()
            .unwrap(),
    )];
    let (b, mut ran) = run_with(rt, plan, &[json!({"event_ids": ["b", "a", "b"]})]);
    (b, ran.remove(0))
}

/// A tolerant run of `plan` (one task) whose executor proposes `proposals` (calendar
/// reads), each allowed; the bundle and what the tool was given to run each time.
fn run_with(rt: &Runtime, plan: Vec<ExpectedCall>, proposals: &[Value]) -> (Bundle, Vec<Value>) {
    run_in(rt, TrajectoryMode::tolerant(), plan, proposals)
}

/// [`run_with`] in trajectory mode `mode`.
fn run_in(
    rt: &Runtime,
    mode: TrajectoryMode,
    plan: Vec<ExpectedCall>,
    proposals: &[Value],
) -> (Bundle, Vec<Value>) {
    let prompt = Prompt {
        tasks: vec!["read my events a and b".into()],
    };
    let plan = Plan { tasks: vec![plan] };
    let mut apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        plan,
        Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
    )
    .unwrap();
    assert!(
        apm.guards.closed.planned,
        "new APMs execute planned values as planned"
    );
    apm.guards.trajectory = mode;
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let regulator = knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap();
    let m = Monitor::start(
        MonitorConfig {
            grants: true,
            ..MonitorConfig::new(
                &apm,
                apm_hash,
                "planned",
                &rt.manifest,
                rt.monitor_key(),
                &[],
            )
        },
        regulator,
        None,
    );
    let mut ran = Vec::new();
    for params in proposals {
        let raw =
            serde_json::to_vec(&json!({"tool": "GoogleCalendarReadEvents", "params": params}))
                .unwrap();
        let Verdict::Allow(t) = m.mediate(&apm.agents[0].id, &raw) else {
            panic!("{params} is a read the plan allows");
        };
        ran.push(Value::Object(t.action.params.clone()));
        // The grant is for what runs.
        assert_eq!(
            t.grant.as_ref().map(|g| g.body.action_hash),
            Some(t.action.hash())
        );
        m.record_output(t, json!({"events": []}));
    }
    let aeg = m.finish();
    let b = knox_monitor::run::seal(rt, "planned", Some(&prompt), apm.clone(), att, vec![], aeg)
        .unwrap();
    (b, ran)
}

fn verify(b: &Bundle) -> Report {
    let bytes = serde_json::to_vec(b).unwrap();
    let b = knox_verify::parse_bundle(&bytes).unwrap();
    knox_verify::verify_bundle(&b, &manifest(), Options::DANGEROUS_SIMULATED)
}

/// Renumber, re-measure, re-chain and re-sign, as an insider holding the key would.
fn reseal(b: &mut Bundle, key: &TeeKey) {
    let mut c = chain_start();
    let mut leaves = Vec::new();
    for (i, n) in b.nodes.iter_mut().enumerate() {
        n.seq = i as u64;
        n.measurement = n.compute_measurement();
        c = chain_step(&c, n.seq, &n.measurement);
        leaves.push(n.leaf_hash());
    }
    b.summary.chain_head = c;
    b.summary.structure_root = knox_types::merkle::root(&leaves);
    b.envelope = knox_attest::dsse::sign(key, &b.summary.to_statement().unwrap()).unwrap();
}

/// The recorded executed parameters of the run's trajectory check.
fn executed(b: &mut Bundle) -> &mut Option<serde_json::Map<String, Value>> {
    b.nodes
        .iter_mut()
        .filter(|n| n.kind == NodeKind::Check)
        .find_map(|n| match &mut n.payload {
            Body::Check(c) => match &mut c.detail {
                CheckDetail::Trajectory { executed, .. } => Some(executed),
                _ => None,
            },
            _ => None,
        })
        .unwrap()
}

#[test]
fn a_tolerated_form_runs_as_planned_and_the_record_of_it_is_checked() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"planned", manifest()).unwrap();
    let (mut b, ran) = run(&rt);
    assert_eq!(ran, json!({"event_ids": ["a", "b"]}));
    let r = verify(&b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert_eq!(
        executed(&mut b).clone().map(Value::Object),
        Some(json!({"event_ids": ["a", "b"]}))
    );
    for edit in [
        None,
        Some(json!({"event_ids": ["b", "a", "b"]})),
        Some(json!({"event_ids": ["a", "b", "attacker"]})),
    ] {
        let mut t = b.clone();
        *executed(&mut t) = edit.map(|v| v.as_object().cloned().unwrap());
        reseal(&mut t, &key);
        let r = verify(&t);
        assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
        assert!(
            r.to_string()
                .contains("recorded `trajectory` check differs from the recomputed decision"),
            "{r}"
        );
    }
}

/// #36 item 3: the tolerant mode's free choices are recorded (`options`, how many steps
/// were enabled when a call matched one) and the verifier recomputes them: the report
/// gives the bits the run's choices carried, and an edited count is tampering.
#[test]
fn the_free_choices_are_counted_and_the_count_is_checked() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"planned", manifest()).unwrap();
    let read = |id: &str| {
        ExpectedCall::exact(
            0,
            "GoogleCalendarReadEvents",
            json!({"event_ids": [id]}).as_object().cloned().unwrap(),
        )
    };
    // The second read first, then the first: each a choice of two enabled reads.
    let (b, _) = run_with(
        &rt,
        vec![read("a"), read("b")],
        &[json!({"event_ids": ["b"]}), json!({"event_ids": ["a"]})],
    );
    let r = verify(&b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert_eq!(r.choice_bits, Some(2), "two choices of two");
    assert!(
        r.to_string().contains("free choices: at most 2 bits"),
        "{r}"
    );
    for edit in [None, Some(1), Some(3)] {
        let mut t = b.clone();
        let first = t
            .nodes
            .iter_mut()
            .find_map(|n| match &mut n.payload {
                Body::Check(c) => match &mut c.detail {
                    CheckDetail::Trajectory { options, .. } => Some(options),
                    _ => None,
                },
                _ => None,
            })
            .unwrap();
        assert_eq!(*first, Some(2));
        *first = edit;
        reseal(&mut t, &key);
        let r = verify(&t);
        assert!(
            matches!(r.outcome, Outcome::Tampered { .. }),
            "{edit:?}: {r}"
        );
    }
}

/// #36 item 3, `strict`: after the first read (the calendar: labelled) no choice is
/// admitted, so the reorder before it is the run's one choice; the verifier recomputes
/// that from the APM's `strict`, and a run edited to claim a second choice is tampering.
#[test]
fn a_strict_run_records_no_choice_after_a_labelled_read_and_the_verifier_checks_it() {
    let key = Arc::new(TeeKey::generate().unwrap());
    let rt = Runtime::simulated_with_key(Arc::clone(&key), b"planned", manifest()).unwrap();
    let read = |id: &str| {
        ExpectedCall::exact(
            0,
            "GoogleCalendarReadEvents",
            json!({"event_ids": [id]}).as_object().cloned().unwrap(),
        )
    };
    let (b, _) = run_in(
        &rt,
        TrajectoryMode::strict(),
        vec![read("a"), read("b")],
        &[json!({"event_ids": ["b"]}), json!({"event_ids": ["a"]})],
    );
    let r = verify(&b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert_eq!(
        r.choice_bits,
        Some(1),
        "one choice, before the labelled read"
    );
    let recorded: Vec<Option<u32>> = b
        .nodes
        .iter()
        .filter_map(|n| match &n.payload {
            Body::Check(c) => match &c.detail {
                CheckDetail::Trajectory { options, .. } => Some(*options),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(recorded, vec![Some(2), None]);
    let mut t = b.clone();
    let second = t
        .nodes
        .iter_mut()
        .filter_map(|n| match &mut n.payload {
            Body::Check(c) => match &mut c.detail {
                CheckDetail::Trajectory { options, .. } => Some(options),
                _ => None,
            },
            _ => None,
        })
        .nth(1)
        .unwrap();
    *second = Some(2);
    reseal(&mut t, &key);
    let r = verify(&t);
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
}
