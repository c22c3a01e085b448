//! The embedded suites through a session: each under its own manifest, with the
//! session's settings (output, executor), run ids by workload and executor, and a
//! usage error for too few flows.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::sync::OnceLock;

use knox_dataset::Dataset;
use knox_engine::{RunOutcome, Session, Simulated};
use knox_harness::{ExecutorKind, GroundTruth, HarnessError, Suite, SuiteRun, terminal_tasks};
use knox_types::bundle::Bundle;
use knox_verify::{Options, Outcome};

fn data() -> &'static Dataset {
    static D: OnceLock<Dataset> = OnceLock::new();
    D.get_or_init(|| Dataset::embedded().unwrap())
}

fn complete(bundle: &Bundle, manifest: &knox_engine::ToolkitManifest) {
    let report = knox_verify::verify_bundle(bundle, manifest, Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
}

fn session(run: &SuiteRun<'_>, executor: ExecutorKind) -> Session {
    run.session(executor)
        .unwrap()
        .platform(Simulated)
        .build()
        .unwrap()
}

fn all(run: &SuiteRun<'_>, session: &Session) -> Result<Vec<RunOutcome>, HarnessError> {
    let mut out = Vec::new();
    run.run::<HarnessError>(session, |o| {
        out.push(RunOutcome {
            bundle: o.bundle.clone(),
            stats: o.stats.clone(),
            timings: o.timings,
        });
        Ok(())
    })?;
    Ok(out)
}

#[test]
fn the_terminal_suite_runs_under_its_own_manifest() {
    let run = SuiteRun::new(Suite::Terminal, data(), "st-sa".parse().unwrap(), 0);
    let s = session(&run, ExecutorKind::Injected);
    let terminal = knox_policy::shipped::terminal().unwrap();
    assert_eq!(s.manifest().hash(), terminal.hash());
    let runs = all(&run, &s).unwrap();
    assert_eq!(runs.len(), terminal_tasks().unwrap().len());
    for o in &runs {
        // The APM names the terminal manifest, of the one tool the suite calls, and the
        // bundle verifies under it; the suite runs the benign executor whatever was
        // asked.
        assert_eq!(o.bundle.apm.inputs.manifest, terminal.hash());
        assert!(o.bundle.run_id.starts_with("terminal-st-sa-"));
        complete(&o.bundle, &terminal);
    }
    assert_eq!(
        s.executor_model().unwrap().name,
        ExecutorKind::Benign.name()
    );
}

#[test]
fn the_injecagent_suite_runs_workloads_with_the_sessions_settings() {
    let out_dir = tempfile::tempdir().unwrap();
    let run = SuiteRun::new(Suite::Injecagent, data(), "mt-sa-seq:2".parse().unwrap(), 5);
    let s = run
        .session(ExecutorKind::Injected)
        .unwrap()
        .platform(Simulated)
        .output(out_dir.path())
        .build()
        .unwrap();
    let manifest = Suite::Injecagent.manifest().unwrap();
    let runs = all(&run, &s).unwrap();
    let ids: Vec<&str> = runs.iter().map(|o| o.bundle.run_id.as_str()).collect();
    assert_eq!(
        ids,
        ["mt-sa-seq-2-injected-0000", "mt-sa-seq-2-injected-0001"]
    );
    for o in &runs {
        complete(&o.bundle, &manifest);
        let g = GroundTruth::of(&o.stats);
        assert_eq!((g.planned.blocked, g.injected.allowed), (0, 0));
        assert!(g.injected.blocked > 0);
    }
    assert!(
        out_dir
            .path()
            .join("mt-sa-seq-2-injected-0001.json")
            .is_file()
    );
    // Too few flows for the workload: a usage error naming the workload.
    let short = SuiteRun::new(Suite::Injecagent, data(), "mt-sa-seq:4".parse().unwrap(), 2);
    let e = all(&short, &session(&short, ExecutorKind::Benign)).unwrap_err();
    assert!(
        matches!(
            &e,
            HarnessError::TooFewFlows {
                need: 4,
                got: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.is_usage());
}

#[test]
fn bundles_of_the_shipped_manifest_do_not_carry_it() {
    let run = SuiteRun::new(Suite::Injecagent, data(), "st-sa".parse().unwrap(), 1);
    let s = session(&run, ExecutorKind::Injected);
    assert!(knox_policy::shipped::is_known(&s.manifest().hash()));
    let nothing = knox_verify::manifests::Manifests::new();
    let runs = all(&run, &s).unwrap();
    assert_eq!(runs.len(), 1);
    for o in &runs {
        assert!(o.bundle.manifest.is_none());
        let report = knox_verify::verify_bundle(&o.bundle, &nothing, Options::DANGEROUS_SIMULATED);
        assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
    }
}

#[test]
fn an_external_stop_ends_the_workload_after_the_bundle_it_interrupted() {
    let run = SuiteRun::new(Suite::Injecagent, data(), "st-sa".parse().unwrap(), 4);
    let signal = knox_engine::StopSignal::new();
    let s = run
        .session(ExecutorKind::Benign)
        .unwrap()
        .platform(Simulated)
        .stop(knox_engine::StopPolicy {
            external: true,
            ..Default::default()
        })
        .signal(signal.clone())
        .build()
        .unwrap();
    let mut n = 0;
    run.run::<HarnessError>(&s, |_| {
        n += 1;
        signal.handle().stop();
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 1, "no bundle starts after the stop");
}
