//! Sub-agents mediated in parallel (one thread each, no global monitor lock): the
//! graph's order is whatever order their groups were committed in, and the evidence
//! still verifies `complete` — every call's checks and outcome follow it, each agent's
//! steps are in its own order, the chain covers them all.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::simulated::Simulated;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_types::aeg::NodeKind;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_verify::{Options, Outcome};
use serde_json::json;

const AGENTS: usize = 6;
const CALLS: usize = 12;

fn email(agent: usize, i: usize) -> String {
    format!("email{agent}-{i:03}")
}

#[test]
fn parallel_sub_agents_leave_evidence_that_verifies_complete() {
    let manifest = knox_policy::shipped::current().unwrap();
    let rt = Runtime::start(&Simulated, b"concurrent-test", manifest).unwrap();
    let tasks: Vec<Vec<ExpectedCall>> = (0..AGENTS)
        .map(|t| {
            (0..CALLS)
                .map(|i| {
                    let params = json!({"email_id": email(t, i)});
                    ExpectedCall::exact(
                        t as u32,
                        "GmailReadEmail",
                        params.as_object().cloned().unwrap(),
                    )
                })
                .collect()
        })
        .collect();
    let prompt = Prompt {
        tasks: (0..AGENTS)
            .map(|i| format!("task {i}: read my emails"))
            .collect(),
    };
    let topology = Topology {
        kind: TopologyKind::MtMa,
        tasks: AGENTS as u32,
        agents: AGENTS as u32,
    };
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        Plan { tasks },
        topology,
    )
    .unwrap();
    assert_eq!(apm.agents.len(), AGENTS);
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let regulator = knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap();
    let m = Monitor::start(
        MonitorConfig::new(
            &apm,
            apm_hash,
            "concurrent",
            &rt.manifest,
            rt.monitor_key(),
            &[],
        ),
        regulator,
        None,
    );
    std::thread::scope(|s| {
        for (a, plan) in apm.agents.iter().enumerate() {
            let m = &m;
            s.spawn(move || {
                for (i, e) in plan.trajectory.iter().enumerate() {
                    // Every third step, an injected call first: blocked, recorded.
                    if i % 3 == 1 {
                        let raw = serde_json::to_vec(&json!({"tool": "BankManagerTransferFunds",
                            "params": {"from_account_number": "1", "to_account_number": "2", "amount": 3}}))
                        .unwrap();
                        assert!(matches!(m.mediate(&plan.id, &raw), Verdict::Block { .. }));
                    }
                    let raw =
                        serde_json::to_vec(&json!({"tool": e.tool, "params": e.params})).unwrap();
                    let Verdict::Allow(t) = m.mediate(&plan.id, &raw) else {
                        panic!("agent {a} call {i} not allowed");
                    };
                    m.record_output(t, json!({"email": {"id": email(a, i), "body": "hi"}}));
                }
            });
        }
    });
    let aeg = m.finish();
    let b =
        knox_monitor::run::seal(&rt, "concurrent", None, apm.clone(), att, vec![], aeg).unwrap();
    let calls = b
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ToolCall)
        .count();
    assert_eq!(calls, AGENTS * (CALLS + CALLS / 3));
    let r = knox_verify::verify_bundle(&b, &rt.manifest, Options::DANGEROUS_SIMULATED);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    // Each agent's own steps are in its order: its tool outputs name its emails in turn.
    for a in 0..AGENTS {
        let seen: Vec<String> = b
            .nodes
            .iter()
            .filter_map(|n| n.payload.tool_output())
            .filter_map(|o| o.output["email"]["id"].as_str().map(String::from))
            .filter(|id| id.starts_with(&format!("email{a}-")))
            .collect();
        let want: Vec<String> = (0..CALLS).map(|i| email(a, i)).collect();
        assert_eq!(seen, want);
    }
}
