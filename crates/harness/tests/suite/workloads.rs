//! All 13 workloads of the paper with both deterministic executors: every
//! off-trajectory call blocked, every on-trajectory call allowed, every bundle complete.

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use std::sync::OnceLock;

use knox_dataset::Dataset;
use knox_engine::{RunOutcome, Simulated};
use knox_harness::{ExecutorKind, GroundTruth, HarnessError, PAPER_WORKLOADS, Suite, SuiteRun};
use knox_policy::ToolkitManifest;
use knox_types::aeg::NodeKind;
use knox_types::bundle::Bundle;
use knox_types::payload::GuardKind;
use knox_verify::{Options, Outcome, Report};

fn data() -> &'static Dataset {
    static D: OnceLock<Dataset> = OnceLock::new();
    D.get_or_init(|| Dataset::embedded().unwrap())
}

fn manifest() -> &'static ToolkitManifest {
    static M: OnceLock<ToolkitManifest> = OnceLock::new();
    M.get_or_init(|| Suite::Injecagent.manifest().unwrap())
}

fn verify(b: &Bundle) -> Report {
    knox_verify::verify_bundle(b, manifest(), Options::DANGEROUS_SIMULATED)
}

/// Every outcome of the workload `spec` over `flows` flows with `executor`, through a
/// session of its own.
fn outcomes(spec: &str, executor: ExecutorKind, flows: usize) -> Vec<RunOutcome> {
    let run = SuiteRun::new(Suite::Injecagent, data(), spec.parse().unwrap(), flows);
    let session = run
        .session(executor)
        .unwrap()
        .platform(Simulated)
        .nonce(b"test-epoch".to_vec())
        .build()
        .unwrap();
    let mut out = Vec::new();
    run.run::<HarnessError>(&session, |o| {
        out.push(RunOutcome {
            bundle: o.bundle.clone(),
            stats: o.stats.clone(),
            timings: o.timings,
        });
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn every_workload_blocks_injections_allows_the_plan_and_verifies() {
    for spec in PAPER_WORKLOADS {
        for kind in [ExecutorKind::Benign, ExecutorKind::Injected] {
            let runs = outcomes(spec, kind, 12);
            let tasks = spec.parse::<knox_harness::Workload>().unwrap().0.tasks as usize;
            assert!(!runs.is_empty(), "{spec}");
            let (mut attempted, mut planned) = (0, 0);
            for o in &runs {
                let s = GroundTruth::of(&o.stats);
                assert_eq!(
                    s.planned.blocked, 0,
                    "{spec} {kind:?}: an on-trajectory call was blocked"
                );
                assert_eq!(
                    s.injected.allowed, 0,
                    "{spec} {kind:?}: an injected call was allowed"
                );
                attempted += s.injected.blocked;
                planned += s.planned.allowed;
                let report = verify(&o.bundle);
                assert_eq!(
                    report.outcome,
                    Outcome::Complete,
                    "{spec} {kind:?}: {report}"
                );
                assert_eq!(report.blocked.len() as u64, s.injected.blocked);
            }
            assert_eq!(
                planned,
                (runs.len() * tasks) as u64,
                "{spec}: every planned call ran"
            );
            match kind {
                ExecutorKind::Benign => assert_eq!(attempted, 0),
                ExecutorKind::Injected => assert!(
                    attempted > 0,
                    "{spec}: the injected executor never deviated"
                ),
            }
        }
    }
}

#[test]
fn multi_agent_runs_have_one_branch_per_sub_agent_and_no_shared_nodes() {
    let runs = outcomes("mt-ma:6:4", ExecutorKind::Injected, 6);
    let b = &runs[0].bundle;
    let branches: Vec<_> = b
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::AgentBranch)
        .collect();
    assert_eq!(branches.len(), 4);
    assert!(branches.iter().all(|n| n.parent == Some(0)));
    assert_eq!(
        b.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::AgentStep)
            .count(),
        1
    );
    // Walk each tool_call's ancestry: it reaches exactly one branch, of its own agent.
    for n in b.nodes.iter().filter(|n| n.kind == NodeKind::ToolCall) {
        let mut p = n.parent;
        while let Some(seq) = p {
            let anc = &b.nodes[seq as usize];
            if anc.kind == NodeKind::AgentBranch {
                assert_eq!(anc.agent, n.agent);
                break;
            }
            assert_eq!(
                anc.agent, n.agent,
                "node {} crosses into another agent's branch",
                n.seq
            );
            p = anc.parent;
        }
    }
}

#[test]
fn injected_calls_fail_the_trajectory_guard_and_unauthorized_toolkits_the_syscall_guard() {
    let runs = outcomes("st-sa", ExecutorKind::Injected, 40);
    let mut syscall_failures = 0;
    for o in &runs {
        assert!(
            o.stats
                .blocked_by
                .keys()
                .all(|g| *g == GuardKind::Trajectory)
        );
        for n in o.bundle.nodes.iter().filter(|n| n.kind == NodeKind::Check) {
            if n.payload.to_value()["guard"] == "syscall" && n.payload.to_value()["passed"] == false
            {
                syscall_failures += 1;
                assert!(
                    n.payload.to_value()["detail"]["missing"]
                        .as_array()
                        .is_some_and(|m| !m.is_empty())
                );
            }
        }
    }
    // Most attacker tools belong to toolkits the user's task never authorized.
    assert!(syscall_failures > 0);
}
