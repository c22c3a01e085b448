//! A planner that gives no valid plan: the run still ends in signed evidence. The APM
//! records the failure and permits nothing, the one event is an attested `plan_failed`
//! interrupt under the root, nothing runs, and the verifier accepts exactly that shape
//! and rejects a monitor that misstates it.

use knox_types::payload::Body;
use std::sync::Arc;

use knox::session::ExecutorKind;
use knox_agent::{PlanError, PlanRequest, Planner, Prompt, Regulations};
use knox_models::{ChatPlanner, Endpoint};
use knox_monitor::aeg::{AegBuilder, NewNode};
use knox_monitor::apm as apm_mod;
use knox_monitor::run::seal;
use knox_types::aeg::{NodeKind, PLANNER_AGENT};
use knox_types::apm::{ExpectedCall, StopPolicy};
use knox_types::bundle::{Bundle, ModelInfo, ModelRole};
use knox_verify::Outcome;
use serde_json::{Value, json};

use super::support::{assert_tampered, knox, outcomes_with, read_json, runtime, succeeds, verify};

/// A planner that always fails, as a model planner does after its retries.
struct Refuses;

impl Planner for Refuses {
    fn plan(&self, _: &PlanRequest<'_>) -> Result<knox_agent::Plan, PlanError> {
        Err(PlanError::Model(
            "task 0: no valid plan in 3 attempts: unknown tool `RootShell`".into(),
        ))
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Planner,
            name: "refuses".into(),
            weights_hash: None,
            declared: false,
        }
    }
}

/// The bundle of a run of `workload` whose planning failed (the tamper suite mutates it
/// too).
pub(super) fn refused_bundle(workload: &str) -> Bundle {
    refused(workload).bundle
}

fn refused(workload: &str) -> knox_monitor::run::RunOutcome {
    let w: knox_harness::Workload = workload.parse().unwrap();
    let run = super::support::workload(workload, w.0.tasks as usize);
    outcomes_with(&run, ExecutorKind::Injected, |b| b.planner(Refuses)).remove(0)
}

#[test]
fn a_failed_plan_ends_in_one_attested_interrupt_and_the_bundle_verifies() {
    for workload in ["st-sa", "mt-sa-int:2", "mt-ma:4:2"] {
        let o = refused(workload);
        let b = &o.bundle;
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{workload}: {r}");
        let failure = b.apm.planning.as_ref().unwrap();
        assert!(failure.reason.contains("unknown tool `RootShell`"));
        assert!(b.apm.agents.iter().all(|a| a.trajectory.is_empty()));
        assert!(b.apm.guards.syscall.toolkits.is_empty());
        // root, one proof of inference per model, the interrupt: nothing else.
        let kinds: Vec<NodeKind> = b.nodes.iter().map(|n| n.kind).collect();
        assert_eq!(
            kinds,
            [
                NodeKind::Root,
                NodeKind::ProofOfInference,
                NodeKind::ProofOfInference,
                NodeKind::Interrupt
            ],
            "{workload}"
        );
        let stop = &b.nodes[3];
        assert_eq!(stop.parent, Some(0));
        assert_eq!(stop.agent, PLANNER_AGENT);
        assert_eq!(stop.payload.to_value()["cause"], "plan_failed");
        assert_eq!(
            stop.block_reason.as_deref(),
            Some(failure.interrupt_reason().as_str())
        );
        assert_eq!(stop.attestations.len(), 1, "the interrupt is signed");
        assert_eq!(
            r.interrupts,
            [format!("planner: {}", failure.interrupt_reason())]
        );
        assert_eq!(
            (o.stats.plan_failures, o.stats.interrupts, o.stats.proposals),
            (1, 1, 0)
        );
    }
}

#[test]
fn a_model_planner_out_of_attempts_is_recorded_not_an_error() {
    // A server that only ever plans a tool the manifest does not have.
    let (url, seen) = super::models::serve_with(|_| {
        json!({"role": "assistant",
               "content": "{\"calls\": [{\"tool\": \"RootShellExecute\", \"params\": {}}]}"})
    });
    let planner = ChatPlanner::new(Arc::new(
        Endpoint::parse(&format!("openai:{url}#stubborn-planner")).unwrap(),
    ));
    let b = &outcomes_with(
        &super::support::workload("st-sa", 1),
        ExecutorKind::Benign,
        |b| b.planner(planner),
    )[0]
    .bundle;
    assert_eq!(verify(b).outcome, Outcome::Complete);
    let reason = &b.apm.planning.as_ref().unwrap().reason;
    assert!(
        reason.contains(&format!(
            "no valid plan in {} attempts",
            knox_models::planner::PLAN_ATTEMPTS
        )) && reason.contains("unknown tool `RootShellExecute`"),
        "{reason}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        knox_models::planner::PLAN_ATTEMPTS,
        "every attempt was asked, and then no more"
    );
    assert!(
        b.models
            .iter()
            .any(|m| m.role == ModelRole::Planner && m.name.ends_with("#stubborn-planner"))
    );
}

/// What a monitor holding the key could sign: `nodes` committed as given (interrupts
/// attested), under `apm` attested anew.
fn forge(apm: &knox_types::apm::Apm, nodes: &[knox_types::aeg::Node]) -> Bundle {
    let rt = runtime();
    let apm_hash = apm.hash().unwrap();
    let att = apm_mod::attest(apm, apm_hash, rt.monitor_key()).unwrap();
    let mut aeg = AegBuilder::new(None);
    for n in nodes {
        let mut payload = n.payload.clone();
        if n.kind == NodeKind::Root {
            let mut v = payload.to_value();
            v["apm_hash"] = json!(apm_hash);
            v["run_id"] = json!("forged");
            payload = Body::read(n.kind, v);
        }
        aeg.commit(
            NewNode {
                parent: n.parent,
                kind: n.kind,
                agent: &n.agent,
                payload,
                allowed: n.allowed,
                block_reason: n.block_reason.clone(),
            },
            (!n.attestations.is_empty()).then_some(rt.monitor_key()),
        );
    }
    let models = nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ProofOfInference)
        .map(|n| ModelInfo {
            role: n.payload.to_value()["role"].as_str().unwrap().into(),
            name: n.payload.to_value()["model"].as_str().unwrap().into(),
            weights_hash: None,
            declared: false,
        })
        .collect();
    seal(rt, "forged", None, apm.clone(), att, models, aeg.finish()).unwrap()
}

#[test]
fn a_monitor_misstating_a_planning_failure_is_caught() {
    let b = refused("mt-ma:2:2").bundle;
    // The forger's own rendition of the true evidence verifies: every rejection below is
    // the edit's doing.
    assert_eq!(verify(&forge(&b.apm, &b.nodes)).outcome, Outcome::Complete);

    let mut other_reason = b.nodes.clone();
    other_reason[3].block_reason = Some("planning failed: the user asked for nothing".into());
    assert_eq!(
        assert_tampered(&forge(&b.apm, &other_reason), "reason"),
        Some(3)
    );

    let mut other_cause = b.nodes.clone();
    other_cause[3].payload = Body::read(NodeKind::Interrupt, json!({"cause": "signal"}));
    assert_eq!(
        assert_tampered(&forge(&b.apm, &other_cause), "cause"),
        Some(3)
    );

    let mut unsigned = b.nodes.clone();
    unsigned[3].attestations.clear();
    assert_eq!(
        assert_tampered(&forge(&b.apm, &unsigned), "unsigned"),
        Some(3)
    );

    assert_tampered(&forge(&b.apm, &b.nodes[..3]), "interrupt dropped");

    // Something ran after the plan failed.
    let mut ran = b.nodes.clone();
    let good = super::support::bundle("st-sa");
    let call = good
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::ToolCall)
        .unwrap()
        .clone();
    ran.push(knox_types::aeg::Node {
        parent: Some(3),
        agent: "agent-0".into(),
        ..call.clone()
    });
    assert_eq!(assert_tampered(&forge(&b.apm, &ran), "ran anyway"), Some(4));

    // The APM records a failure but permits a call.
    let mut permissive = b.apm.clone();
    permissive.agents[0].trajectory = vec![ExpectedCall::exact(0, "GmailReadEmail", params())];
    assert_eq!(
        assert_tampered(&forge(&permissive, &b.nodes), "permissive APM"),
        Some(0)
    );

    // A plan_failed interrupt in a run whose APM holds a plan.
    let mut claimed = good.nodes[..3].to_vec();
    claimed.push(knox_types::aeg::Node {
        parent: Some(0),
        ..b.nodes[3].clone()
    });
    assert_tampered(&forge(&good.apm, &claimed), "interrupt without a failure");

    // And a failure the APM records, with the interrupt, and nothing else: the true
    // shape, with any reason the APM names.
    let mut apm = b.apm.clone();
    apm.planning = Some(knox_types::apm::PlanningFailure {
        reason: "the model timed out".into(),
    });
    let mut nodes = b.nodes.clone();
    nodes[3].block_reason = Some(apm.planning.as_ref().unwrap().interrupt_reason());
    assert_eq!(verify(&forge(&apm, &nodes)).outcome, Outcome::Complete);
}

fn params() -> serde_json::Map<String, Value> {
    json!({"email_id": "1"}).as_object().cloned().unwrap()
}

#[test]
fn knox_run_reports_a_failed_plan_and_knox_verify_accepts_its_bundle() {
    let (url, _) = super::models::serve_with(|_| json!({"role": "assistant", "content": "no"}));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let text = succeeds(
        knox()
            .args(["run", "--workload", "st-sa", "--flows", "1", "--planner"])
            .arg(format!("openai:{url}#says-no"))
            .arg("--out")
            .arg(&out),
    );
    assert!(text.contains("planning failed in 1 bundle(s)"), "{text}");
    assert!(text.contains("1/1 complete"), "{text}");
    assert_eq!(read_json(&out.join("summary.json"))["plan_failures"], 1);
    let bundle = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().is_some_and(|n| n != "summary.json"))
        .unwrap();
    let verified = knox()
        .arg("verify")
        .arg(&bundle)
        .arg("--allow-simulated")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&verified.stdout);
    assert_eq!(verified.status.code(), Some(0), "{report}");
    assert!(report.contains("planning failed: "), "{report}");
    assert!(report.contains("not JSON"), "{report}");
}

#[test]
fn a_model_planned_data_link_is_enforced_at_its_trajectory_position() {
    use knox_monitor::monitor::Verdict;
    use knox_types::apm::{ParamConstraint, Topology, TopologyKind};
    // Two tasks, each a search and a read of what the search found; the model links
    // the read's id to the field of the search's output that holds it (a link always
    // names its field).
    let (url, _) = super::models::serve_with(|_| {
        json!({"role": "assistant", "content": json!({"calls": [
            {"tool": "GmailSearchEmails", "params": {"keywords": ["invoice"]}},
            {"tool": "GmailReadEmail", "params": {"email_id": "$output:0/emails/0/id"}}]}).to_string()})
    });
    let planner = ChatPlanner::new(Arc::new(
        Endpoint::parse(&format!("openai:{url}#linking-planner")).unwrap(),
    ));
    let prompt = Prompt {
        tasks: vec![
            "Find my invoice email and read it".into(),
            "Find my other invoice email and read it".into(),
        ],
    };
    let plan = planner
        .plan(&PlanRequest {
            prompt: &prompt,
            manifest: super::support::manifest(),
            regulations: &Regulations::default(),
            stop: &StopPolicy::default(),
        })
        .unwrap();
    let h = super::support::harness_for(
        prompt,
        plan.tasks,
        Topology {
            kind: TopologyKind::MtSaSeq,
            tasks: 2,
            agents: 1,
        },
        StopPolicy::default(),
    );
    // In the one agent's trajectory, task 1's read takes the output of position 2.
    let t = &h.apm.agents[0].trajectory;
    assert_eq!(
        t[3].constraints.as_ref().unwrap()["email_id"],
        ParamConstraint::FromOutput {
            call: 2,
            pointer: Some("/emails/0/id".into())
        }
    );
    let m = h.monitor(
        knox_monitor::guard::stop::StopSignal::new(),
        AegBuilder::new(None),
    );
    let raw = |tool: &str, p: Value| super::support::raw(tool, p);
    let search = raw("GmailSearchEmails", json!({"keywords": ["invoice"]}));
    let read = |id: &str| raw("GmailReadEmail", json!({"email_id": id}));
    let run = |proposal: &[u8], output: Value| match m.mediate("agent-0", proposal) {
        Verdict::Allow(ticket) => {
            m.record_output(ticket, output);
            true
        }
        _ => false,
    };
    assert!(run(&search, json!({"emails": [{"id": "a1"}]})));
    assert!(run(&read("a1"), json!({"email": {"body": "first"}})));
    assert!(run(&search, json!({"emails": [{"id": "b2"}]})));
    // Task 0's id is not what task 1's search found.
    assert!(!run(&read("a1"), Value::Null), "linked to the wrong output");
    assert!(run(&read("b2"), json!({"email": {"body": "second"}})));
    let b = h.seal(m.finish());
    let r = verify(&b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    assert_eq!(r.blocked.len(), 1);
    assert_eq!(r.blocked[0].guard, "trajectory");
}
