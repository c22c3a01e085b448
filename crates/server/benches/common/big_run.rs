//! A sealed run of just over 10,000 nodes, made by the real monitor: one agent reading
//! e-mails, an injected transfer blocked before every tenth call. Shared by the pages
//! bench and the web UI's browser tests (`#[path]`-included by each).

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::simulated::Simulated;
use knox_monitor::apm;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use serde_json::json;

/// Allowed calls in the big run; with the blocked ones every tenth call, the run has
/// just over 10,000 nodes (checked below).
const CALLS: usize = 1_500;

/// A sealed single-agent run of `CALLS` allowed e-mail reads (and a blocked transfer
/// before every tenth), as bundle bytes, and its node count.
pub(crate) fn big_run() -> (Vec<u8>, usize) {
    let manifest = knox_policy::shipped::current().unwrap();
    let rt = Runtime::start(&Simulated, b"pages-bench", manifest).unwrap();
    let email = |i: usize| format!("email-{i:05}");
    let calls: Vec<ExpectedCall> = (0..CALLS)
        .map(|i| {
            let params = json!({"email_id": email(i)});
            ExpectedCall::exact(0, "GmailReadEmail", params.as_object().cloned().unwrap())
        })
        .collect();
    let prompt = Prompt {
        tasks: vec!["read my e-mails".into()],
    };
    let topology = Topology {
        kind: TopologyKind::StSa,
        tasks: 1,
        agents: 1,
    };
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &StopPolicy::default(),
        Plan { tasks: vec![calls] },
        topology,
    )
    .unwrap();
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let regulator = knox_regulation::Regulator::new(&apm.guards.regulation, None).unwrap();
    let m = Monitor::start(
        MonitorConfig::new(
            &apm,
            apm_hash,
            "pages-bench-10k",
            &rt.manifest,
            rt.monitor_key(),
            &[],
        ),
        regulator,
        None,
    );
    let plan = &apm.agents[0];
    for (i, e) in plan.trajectory.iter().enumerate() {
        if i % 10 == 9 {
            let raw = serde_json::to_vec(&json!({"tool": "BankManagerTransferFunds",
                "params": {"from_account_number": "1", "to_account_number": "2", "amount": 3}}))
            .unwrap();
            assert!(matches!(m.mediate(&plan.id, &raw), Verdict::Block { .. }));
        }
        let raw = serde_json::to_vec(&json!({"tool": e.tool, "params": e.params})).unwrap();
        let Verdict::Allow(t) = m.mediate(&plan.id, &raw) else {
            panic!("call {i} not allowed");
        };
        m.record_output(
            t,
            json!({"email": {"id": email(i), "subject": "minutes", "body": "See you at ten."}}),
        );
    }
    let aeg = m.finish();
    let b = knox_monitor::run::seal(&rt, "pages-bench-10k", None, apm.clone(), att, vec![], aeg)
        .unwrap();
    let nodes = b.nodes.len();
    (serde_json::to_vec(&b).unwrap(), nodes)
}
