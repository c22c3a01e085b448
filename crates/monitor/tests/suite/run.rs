//! The run loop end to end with no dataset: a tiny hand-written manifest, a fixed
//! planner, a scripted executor and an in-process tool runner; the bundle it seals
//! verifies `complete`, and proposals are tallied per executor label.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::sync::Mutex;
use std::time::Instant;

use knox_agent::{
    AgentTask, Executor, ExecutorFactory, Label, Observation, Prompt, Regulations, Step,
    ToolResult, ToolRunner,
};
use knox_attest::simulated::Simulated;
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::{RunConfig, RunOutcome, Runtime, Tally, run_prompt};
use knox_types::Action;
use knox_types::apm::{StopPolicy, Topology, TopologyKind};
use knox_types::bundle::ModelInfo;
use knox_types::grant::Grant;
use knox_types::payload::GuardKind;
use knox_verify::{Options, report::Outcome};
use serde_json::{Value, json};

use knox_testkit::mail::{ReadPlanner, manifest};
use knox_testkit::model;

/// Proposes its plan (labelled `plan`), then an off-plan send (`extra`), then bytes that
/// are no proposal at all (no label), then finishes; records what it observed.
struct Scripted {
    script: std::vec::IntoIter<(Vec<u8>, Label)>,
    seen: std::sync::Arc<Mutex<Vec<Observation>>>,
}

impl Executor for Scripted {
    fn next(&mut self, last: Option<&Observation>) -> Step {
        if let Some(o) = last {
            self.seen.lock().unwrap().push(o.clone());
        }
        self.script
            .next()
            .map_or(Step::Finish, |(raw, label)| Step::Propose(raw, label))
    }
}

#[derive(Default)]
struct ScriptedFactory {
    seen: std::sync::Arc<Mutex<Vec<Observation>>>,
}

impl ExecutorFactory for ScriptedFactory {
    fn build(&self, task: AgentTask) -> Box<dyn Executor> {
        let mut script: Vec<(Vec<u8>, Label)> = task
            .plan
            .iter()
            .map(|a| (serde_json::to_vec(a).unwrap(), Label("plan")))
            .collect();
        let send = Action::new("MailSend", json!({"to": "eve@x", "body": "hi"})).unwrap();
        script.push((serde_json::to_vec(&send).unwrap(), Label("extra")));
        script.push((b"not a proposal".to_vec(), Label::NONE));
        Box::new(Scripted {
            script: script.into_iter(),
            seen: self.seen.clone(),
        })
    }

    fn model(&self) -> ModelInfo {
        model("executor", "scripted")
    }
}

/// Answers every call in process and counts the calls.
#[derive(Default)]
struct Echo {
    calls: Mutex<Vec<String>>,
}

impl ToolRunner for Echo {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        assert!(grant.is_none(), "no host: no grants");
        self.calls.lock().unwrap().push(action.tool.clone());
        ToolResult::from(json!({"email": {"from": "bob@x", "text": "lunch?"}}))
    }
}

fn run(rt: &Runtime, stop: StopPolicy, tools: &Echo, factory: &ScriptedFactory) -> RunOutcome {
    let cfg = RunConfig {
        contract: None,
        approvals: None,
        topology: Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        planner: &ReadPlanner,
        executor: factory,
        norms: None,
        judge: None,
        regulations: Regulations::default(),
        stop,
        signal: StopSignal::new(),
        journal_dir: None,
        host: None,
        refresh: None,
    };
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    run_prompt(rt, &prompt, tools, &cfg, "tiny-0000", Instant::now()).unwrap()
}

#[test]
fn a_dataset_free_run_is_mediated_tallied_per_label_and_verifies_complete() {
    let rt = Runtime::start(&Simulated, b"epoch", manifest()).unwrap();
    let (tools, factory) = (Echo::default(), ScriptedFactory::default());
    let out = run(&rt, StopPolicy::default(), &tools, &factory);

    // Only the planned read ran; the send and the garbage were blocked.
    assert_eq!(*tools.calls.lock().unwrap(), ["MailRead"]);
    let s = &out.stats;
    assert_eq!(s.proposals, 3);
    let t = |allowed, blocked| Tally { allowed, blocked };
    assert_eq!(s.tally(Label("plan")), t(1, 0));
    assert_eq!(s.tally(Label("extra")), t(0, 1));
    assert_eq!(s.tally(Label::NONE), t(0, 1));
    assert_eq!(s.tally(Label("unused")), t(0, 0));
    assert_eq!(s.blocked_by.get(&GuardKind::Trajectory), Some(&1));
    assert_eq!(s.blocked_by.get(&GuardKind::Input), Some(&1));
    assert_eq!((s.interrupts, s.plan_failures), (0, 0));
    // The executor saw the output, then the two blocks.
    let seen = factory.seen.lock().unwrap();
    assert!(matches!(&seen[0], Observation::Output(Value::Object(_))));
    assert!(matches!(
        seen[1..],
        [Observation::Blocked(_), Observation::Blocked(_)]
    ));

    let report = knox_verify::verify_bundle(&out.bundle, &manifest(), Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
    let models: Vec<&str> = out.bundle.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(models, ["fixed", "scripted"]);
}

#[test]
fn an_interrupted_proposal_is_in_no_tally() {
    let rt = Runtime::start(&Simulated, b"epoch", manifest()).unwrap();
    let (tools, factory) = (Echo::default(), ScriptedFactory::default());
    let stop = StopPolicy {
        max_actions: Some(1),
        ..StopPolicy::default()
    };
    let out = run(&rt, stop, &tools, &factory);
    let s = &out.stats;
    assert_eq!(s.proposals, 2);
    assert_eq!(s.interrupts, 1);
    assert_eq!(s.tally(Label("plan")).allowed, 1);
    assert_eq!(s.tally(Label("extra")), Tally::default());
    assert_eq!(s.labels.len(), 1);
    let report = knox_verify::verify_bundle(&out.bundle, &manifest(), Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
}

/// The run above, journaled into `dir` with a checkpoint after every `every` nodes: the
/// journal's bytes and the sealed bundle.
fn journaled(every: u64, dir: &std::path::Path) -> (Vec<u8>, knox_types::bundle::Bundle) {
    journaled_with(
        knox_monitor::aeg::Checkpoints {
            every_nodes: every,
            every_ms: u64::MAX,
        },
        dir,
    )
}

fn journaled_with(
    checkpoints: knox_monitor::aeg::Checkpoints,
    dir: &std::path::Path,
) -> (Vec<u8>, knox_types::bundle::Bundle) {
    // A folder of its own under `dir`: a journal is never replaced, and the callers
    // journal the same run id several times.
    let sub = tempfile::tempdir_in(dir).unwrap();
    let dir = sub.path();
    let mut rt = Runtime::start(&Simulated, b"epoch", manifest()).unwrap();
    rt.checkpoints = checkpoints;
    let (tools, factory) = (Echo::default(), ScriptedFactory::default());
    let cfg = RunConfig {
        topology: Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        planner: &ReadPlanner,
        executor: &factory,
        norms: None,
        judge: None,
        regulations: Regulations::default(),
        stop: StopPolicy::default(),
        signal: StopSignal::new(),
        journal_dir: Some(dir),
        host: None,
        refresh: None,
        contract: None,
        approvals: None,
    };
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let out = run_prompt(&rt, &prompt, &tools, &cfg, "tiny-0000", Instant::now()).unwrap();
    let bytes = std::fs::read(dir.join("tiny-0000.journal.jsonl")).unwrap();
    (bytes, out.bundle)
}

fn verify_journal(bytes: &[u8]) -> knox_verify::Report {
    knox_verify::journal::verify_journal(bytes, &manifest(), Options::DANGEROUS_SIMULATED).unwrap()
}

/// Lines of a journal as text.
fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec())
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

fn join(lines: &[String]) -> Vec<u8> {
    (lines.join("\n") + "\n").into_bytes()
}

#[test]
fn the_journal_carries_a_signed_checkpoint_every_n_nodes() {
    let dir = tempfile::tempdir().unwrap();
    for every in [1, 2, 5] {
        let (bytes, bundle) = journaled(every, dir.path());
        let n = bundle.nodes.len() as u64;
        let checkpoints: Vec<knox_types::checkpoint::Checkpoint> = lines(&bytes)
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        assert_eq!(checkpoints.len() as u64, n / every, "every {every}");
        for (i, c) in checkpoints.iter().enumerate() {
            let c = &c.checkpoint;
            assert_eq!(c.nodes, (i as u64 + 1) * every);
            assert_eq!(
                (c.run_id.as_str(), c.apm_hash),
                ("tiny-0000", bundle.summary.apm_hash)
            );
            // What the sealed graph says of the same nodes.
            let leaves: Vec<_> = bundle.nodes[..c.nodes as usize]
                .iter()
                .map(knox_types::aeg::Node::leaf_hash)
                .collect();
            assert_eq!(c.structure_root, knox_types::merkle::root(&leaves));
        }
        let r = verify_journal(&bytes);
        assert_eq!(r.outcome, Outcome::Prefix, "{r}");
        assert_eq!(r.authenticated, Some(n / every * every), "{r}");
        assert!(
            r.to_string().contains(&format!(
                "authenticated: {} of the {n} nodes",
                n / every * every
            )),
            "{r}"
        );
    }
}

#[test]
fn a_checkpoint_is_also_due_after_every_ms_since_the_last() {
    let dir = tempfile::tempdir().unwrap();
    // No node count is ever reached; 0 ms have always passed: one after every node.
    let every_node_by_time = knox_monitor::aeg::Checkpoints {
        every_nodes: u64::MAX,
        every_ms: 0,
    };
    let (bytes, bundle) = journaled_with(every_node_by_time, dir.path());
    let counts: Vec<u64> = lines(&bytes)
        .iter()
        .filter_map(|l| serde_json::from_str::<knox_types::checkpoint::Checkpoint>(l).ok())
        .map(|c| c.checkpoint.nodes)
        .collect();
    let n = bundle.nodes.len() as u64;
    assert_eq!(counts, (1..=n).collect::<Vec<_>>());
    // Neither due: no checkpoint at all, and nothing authenticated.
    let never = knox_monitor::aeg::Checkpoints {
        every_nodes: u64::MAX,
        every_ms: u64::MAX,
    };
    let (bytes, _) = journaled_with(never, dir.path());
    assert!(
        !lines(&bytes)
            .iter()
            .any(|l| l.starts_with("{\"checkpoint\""))
    );
    assert_eq!(verify_journal(&bytes).authenticated, Some(0));
}

#[test]
fn a_forged_moved_or_foreign_checkpoint_is_tampered_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = journaled(2, dir.path());
    let text = lines(&bytes);
    let at = text
        .iter()
        .position(|l| l.starts_with("{\"checkpoint\""))
        .unwrap();
    let tampered = |forged: Vec<String>, what: &str, why: &str| {
        let r = verify_journal(&join(&forged));
        match &r.outcome {
            Outcome::Tampered { reason, .. } => {
                assert!(
                    reason.contains(&format!("checkpoint on line {}", at + 1)),
                    "{what}: {r}"
                );
                assert!(reason.contains(why), "{what}: {r}");
            }
            other => panic!("{what}: {other:?}"),
        }
    };
    // A signature byte changed.
    let mut forged = text.clone();
    let mut c: knox_types::checkpoint::Checkpoint = serde_json::from_str(&text[at]).unwrap();
    c.sig.0[0] ^= 1;
    forged[at] = serde_json::to_string(&c).unwrap();
    tampered(forged, "signature", "signature");
    // The count changed (the signature no longer covers it).
    let mut forged = text.clone();
    forged[at] = text[at].replace("\"nodes\":2", "\"nodes\":1");
    tampered(forged, "count", "signature");
    // Moved after the next node: it counts fewer nodes than precede it.
    let mut forged = text.clone();
    forged.swap(at, at + 1);
    let r = verify_journal(&join(&forged));
    match &r.outcome {
        Outcome::Tampered { reason, .. } => assert!(reason.contains("precede it"), "{r}"),
        other => panic!("moved: {other:?}"),
    }
    // Signed by another key over the same run (another execution's checkpoint).
    let other = tempfile::tempdir().unwrap();
    let (theirs, _) = journaled(2, other.path());
    let mut forged = text.clone();
    forged[at] = lines(&theirs)[at].clone();
    tampered(forged, "foreign", "signature");
}

/// #35: the checkpoint cadence is signed (journal v4), so checkpoints deleted to hide
/// what they sign leave a journal `tampered`, not the `prefix` of a crash; every honest
/// cut still verifies as a prefix.
#[test]
fn a_journal_with_checkpoints_deleted_is_tampered() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, bundle) = journaled(2, dir.path());
    assert!(bundle.nodes.len() > 4, "enough nodes for gaps");
    let text = lines(&bytes);
    let is_checkpoint = |l: &String| l.starts_with("{\"checkpoint\"");
    let cadence_broken = |forged: &[String], what: &str| {
        let r = verify_journal(&join(forged));
        match &r.outcome {
            Outcome::Tampered { reason, .. } => {
                assert!(reason.contains("checkpoints were removed"), "{what}: {r}");
            }
            other => panic!("{what}: {other:?} {r}"),
        }
    };
    // Every checkpoint deleted.
    let none: Vec<String> = text.iter().filter(|l| !is_checkpoint(l)).cloned().collect();
    cadence_broken(&none, "all deleted");
    // One deleted in the middle.
    let first = text.iter().position(is_checkpoint).unwrap();
    let mut one = text.clone();
    one.remove(first);
    cadence_broken(&one, "first deleted");
    // The last one deleted, with nodes after it.
    let last = text.iter().rposition(is_checkpoint).unwrap();
    if last + 1 < text.len() {
        let mut tail = text.clone();
        tail.remove(last);
        cadence_broken(&tail, "last deleted");
    }
    // Every honest cut at a line boundary: a prefix, never tampered.
    for k in 1..=text.len() {
        let r = verify_journal(&join(&text[..k]));
        assert_eq!(r.outcome, Outcome::Prefix, "cut after line {k}: {r}");
    }
}

#[test]
fn a_journal_relabelled_as_an_earlier_format_still_owes_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, _) = journaled(1, dir.path());
    let v3 = knox_types::bundle::JOURNAL_FORMAT;
    let v2 = knox_types::bundle::JOURNAL_FORMAT_V2;
    let text = lines(&bytes);
    assert!(text[0].contains(v3));
    // Relabelled as version 2 with its checkpoint lines removed, it still owes them: its
    // APM attestation signs the cadence (only a v4 writer signs one). Tampered.
    let mut old: Vec<String> = text
        .iter()
        .filter(|l| !l.starts_with("{\"checkpoint\""))
        .cloned()
        .collect();
    old[0] = old[0].replace(v3, v2);
    let r = verify_journal(&join(&old));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    assert!(
        format!("{r}").contains("the header's format was changed"),
        "{r}"
    );
    // The same as version 3 (checkpoints, cadence unsigned): tampered too.
    let mut v3_label = old.clone();
    v3_label[0] = v3_label[0].replace(v2, knox_types::bundle::JOURNAL_FORMAT_V3);
    let r = verify_journal(&join(&v3_label));
    assert!(matches!(r.outcome, Outcome::Tampered { .. }), "{r}");
    // Relabelled as version 2, a journal's checkpoint lines are not nodes.
    let mut relabelled = text.clone();
    relabelled[0] = relabelled[0].replace(v3, v2);
    assert!(
        knox_verify::journal::verify_journal(
            &join(&relabelled),
            &manifest(),
            Options::DANGEROUS_SIMULATED
        )
        .is_err()
    );
    // A sealed bundle says nothing of checkpoints.
    let (_, bundle) = journaled(1, dir.path());
    let r = knox_verify::verify_bundle(&bundle, &manifest(), Options::DANGEROUS_SIMULATED);
    assert_eq!((r.outcome, r.authenticated), (Outcome::Complete, None));
}
