//! The front door end to end: a prompt run with a tiny manifest and a scripted
//! executor, a live run driven from outside, builder errors, the embedded suite's
//! workloads — every bundle checked by the offline verifier.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::sync::{Arc, Mutex};

use knox_agent::{
    AgentTask, Executor, ExecutorFactory, Label, Observation, Plan, Step, ToolRunner,
};
use knox_engine::{EngineError, Prompt, Session, Simulated, ToolResult, Verdict};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::ExpectedCall;
use knox_types::bundle::{Bundle, ModelInfo};
use knox_types::grant::Grant;
use knox_types::payload::GuardKind;
use knox_verify::{Options, report::Outcome};
use serde_json::{Value, json};

use knox_testkit::mail::{NEEDS, ReadPlanner, TOOLS, manifest};
use knox_testkit::model;

fn complete(bundle: &Bundle, manifest: &ToolkitManifest) {
    let report = knox_verify::verify_bundle(bundle, manifest, Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
}

/// Proposes its plan, then an off-plan send, then garbage; records what it saw.
struct Scripted {
    script: std::vec::IntoIter<Vec<u8>>,
    seen: Arc<Mutex<Vec<Observation>>>,
}

impl Executor for Scripted {
    fn next(&mut self, last: Option<&Observation>) -> Step {
        if let Some(o) = last {
            self.seen.lock().unwrap().push(o.clone());
        }
        self.script
            .next()
            .map_or(Step::Finish, |raw| Step::Propose(raw, Label::NONE))
    }
}

#[derive(Clone, Default)]
struct ScriptedFactory {
    seen: Arc<Mutex<Vec<Observation>>>,
}

impl ExecutorFactory for ScriptedFactory {
    fn build(&self, task: AgentTask) -> Box<dyn Executor> {
        let mut script: Vec<Vec<u8>> = task
            .plan
            .iter()
            .map(|a| serde_json::to_vec(a).unwrap())
            .collect();
        script.push(send());
        script.push(b"not a proposal".to_vec());
        Box::new(Scripted {
            script: script.into_iter(),
            seen: self.seen.clone(),
        })
    }

    fn model(&self) -> ModelInfo {
        model("executor", "scripted")
    }
}

fn send() -> Vec<u8> {
    let a = Action::new("MailSend", json!({"to": "eve@x", "body": "hi"})).unwrap();
    serde_json::to_vec(&a).unwrap()
}

fn read() -> Vec<u8> {
    br#"{"tool": "MailRead", "params": {"id": "1"}}"#.to_vec()
}

/// Answers every call in process and counts the calls.
#[derive(Clone, Default)]
struct Echo {
    calls: Arc<Mutex<Vec<String>>>,
}

impl ToolRunner for Echo {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        assert!(grant.is_none(), "no host: no grants");
        self.calls.lock().unwrap().push(action.tool.clone());
        ToolResult::from(json!({"email": {"from": "bob@x", "text": "lunch?"}}))
    }
}

fn tiny() -> knox_engine::SessionBuilder {
    Session::builder()
        .platform(Simulated)
        .nonce(b"epoch".to_vec())
        .manifest(manifest())
        .planner(ReadPlanner)
}

#[test]
fn a_prompt_run_with_a_tiny_manifest_and_a_scripted_executor_verifies_complete() {
    let out_dir = tempfile_dir("prompt");
    let (tools, factory) = (Echo::default(), ScriptedFactory::default());
    let session = tiny()
        .executor(factory.clone())
        .tools(tools.clone())
        .output(&out_dir)
        .run_prefix("tiny")
        .build()
        .unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let out = session.run_prompt(&prompt).unwrap();
    assert_eq!(*tools.calls.lock().unwrap(), ["MailRead"]);
    assert_eq!(out.stats.proposals, 3);
    assert_eq!(out.stats.blocked_by.get(&GuardKind::Trajectory), Some(&1));
    assert_eq!(out.stats.blocked_by.get(&GuardKind::Input), Some(&1));
    let seen = factory.seen.lock().unwrap().clone();
    assert!(matches!(&seen[0], Observation::Output(Value::Object(_))));
    // Run ids carry the session's key (the first 8 hex digits of its id).
    let key = session.runtime().key_id().to_hex();
    let tag = key.get(..8).unwrap();
    assert_eq!(out.bundle.run_id, format!("tiny-{tag}-0000"));
    complete(&out.bundle, session.manifest());
    let models: Vec<&str> = out.bundle.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(models, ["fixed", "scripted"]);
    // The output directory holds the same bundle, and it verifies as read back.
    let written = std::fs::read(out_dir.join(format!("tiny-{tag}-0000.json"))).unwrap();
    let back = knox_verify::parse_bundle(&written).unwrap();
    complete(&back, &manifest());

    // A second prompt with two tasks: the next run id, the tasks run in sequence.
    let two = Prompt {
        tasks: vec!["read my mail".into(), "read it again".into()],
    };
    let out = session.run_prompt(&two).unwrap();
    assert_eq!(out.bundle.run_id, format!("tiny-{tag}-0001"));
    assert_eq!(out.bundle.summary.counts.executed, 2);
    complete(&out.bundle, session.manifest());
    std::fs::remove_dir_all(&out_dir).unwrap();
}

#[test]
fn a_live_run_driven_from_outside_records_blocks_and_seals_a_complete_bundle() {
    let session = tiny().build().unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let mut open = session
        .open(&prompt, Some(model("executor", "gateway")))
        .unwrap();
    assert_eq!(open.agents(), ["agent-0"]);
    assert!(!open.plan_failed());
    let live = open.live().unwrap();

    // The planned read is allowed with a ticket for exactly that action.
    let Verdict::Allow(ticket) = live.propose("agent-0", &read()) else {
        panic!("the planned read was not allowed")
    };
    assert_eq!(ticket.action.tool, "MailRead");
    assert!(ticket.grant.is_none(), "no tool host: no grant");
    live.record(ticket, ToolResult::from(json!({"email": {"text": "hi"}})))
        .unwrap();
    // Off the plan: blocked by the trajectory guard.
    assert!(matches!(
        live.propose("agent-0", &send()),
        Verdict::Block {
            guard: GuardKind::Trajectory,
            ..
        }
    ));
    // Not a proposal at all: blocked by the input guard, no panic.
    for bad in [&b"\xff\xfe garbage"[..], b"{\"tool\": 3}", b""] {
        assert!(matches!(
            live.propose("agent-0", bad),
            Verdict::Block {
                guard: GuardKind::Input,
                ..
            }
        ));
    }
    // An agent the APM does not name is refused without a record.
    assert!(matches!(live.propose("agent-9", &read()), Verdict::Stopped));
    let bundle = live.finish().unwrap();
    assert_eq!(bundle.summary.counts.executed, 1);
    assert_eq!(bundle.summary.counts.blocked, 4);
    let models: Vec<&str> = bundle.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(models, ["fixed", "gateway"]);
    complete(&bundle, &manifest());

    // A run starts once.
    assert!(matches!(open.live(), Err(EngineError::AlreadyStarted)));
}

#[test]
fn a_live_run_that_proposes_nothing_still_seals_a_complete_bundle() {
    let session = tiny().build().unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let mut open = session.open(&prompt, None).unwrap();
    let bundle = open.live().unwrap().finish().unwrap();
    assert_eq!(bundle.summary.counts.tool_calls, 0);
    complete(&bundle, &manifest());
}

#[test]
fn the_builder_names_the_missing_piece() {
    let missing = |b: knox_engine::SessionBuilder| match b.build() {
        Err(EngineError::Missing(what)) => what,
        other => panic!("expected a missing piece, got {other:?}"),
    };
    assert_eq!(missing(Session::builder()), "platform");
    assert_eq!(missing(Session::builder().platform(Simulated)), "manifest");
    // A prompt run needs a planner; a host that brings its plans does not.
    let planless = Session::builder()
        .platform(Simulated)
        .manifest(manifest())
        .build()
        .unwrap();
    let e = planless
        .run_prompt(&Prompt {
            tasks: vec!["read my mail".into()],
        })
        .unwrap_err();
    assert!(matches!(e, EngineError::Missing("planner")), "{e}");
    assert!(matches!(
        planless.open(
            &Prompt {
                tasks: vec!["read my mail".into()]
            },
            None
        ),
        Err(EngineError::Missing("planner"))
    ));
    // A prompt run needs an executor and tools; a live run needs neither.
    let session = tiny().build().unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let e = session.run_prompt(&prompt).unwrap_err();
    assert!(matches!(e, EngineError::Missing("executor")), "{e}");
    assert!(e.is_usage());
    let session = tiny().executor(ScriptedFactory::default()).build().unwrap();
    let e = session.run_prompt(&prompt).unwrap_err();
    assert!(matches!(e, EngineError::Missing("tools")), "{e}");
    // Regulations naming another policy set than the one given are refused.
    let mut setup = knox_engine::RegulationSetup::new(
        ["GDPR"],
        knox_regulation::Norms::embedded().unwrap(),
        Default::default(),
    )
    .unwrap();
    setup.regulations.policy_hash = Some(knox_types::Digest([7; 32]));
    assert!(matches!(
        tiny().regulations(setup).build(),
        Err(EngineError::Invalid(_))
    ));
    // A topology with no agent is refused.
    let none = knox_types::apm::Topology {
        kind: knox_types::apm::TopologyKind::StSa,
        tasks: 1,
        agents: 0,
    };
    assert!(matches!(
        tiny().topology(none).build(),
        Err(EngineError::Invalid(_))
    ));
}

#[test]
fn the_readme_embed_example_is_the_crate_docs() {
    let snippet = |text: &str| -> String {
        let start = text.find("## Embed Knox").unwrap();
        let rest = &text[start..];
        let open = rest.find("```rust\n").unwrap() + "```rust\n".len();
        let close = rest[open..].find("```").unwrap();
        rest[open..open + close]
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let here = env!("CARGO_MANIFEST_DIR");
    let crate_doc = std::fs::read_to_string(format!("{here}/README.md")).unwrap();
    let top = std::fs::read_to_string(format!("{here}/../../README.md")).unwrap();
    assert_eq!(
        snippet(&top),
        snippet(&crate_doc),
        "the top-level README's \"Embed Knox\" code differs from crates/engine/README.md (the doc-tested one)"
    );
}

#[test]
fn a_store_session_writes_its_shared_part_once_and_never_replaces_one() {
    let out_dir = tempfile_dir("store");
    let session = tiny()
        .executor(ScriptedFactory::default())
        .tools(Echo::default())
        .output(&out_dir)
        .run_prefix("s")
        .encoding(knox_engine::Encoding::Store)
        .build()
        .unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let first = session.run_prompt(&prompt).unwrap();
    let second = session.run_prompt(&prompt).unwrap();
    // Two bundles, one part: the guards both runs' APMs hold.
    let parts: Vec<_> = std::fs::read_dir(out_dir.join("parts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(parts.len(), 1, "{parts:?}");
    let store = |d: &knox_types::digest::Digest| {
        std::fs::read(out_dir.join(knox_types::compact::part_file_name(d))).ok()
    };
    for out in [&first, &second] {
        let file = out_dir.join(format!("{}.cbor", out.bundle.run_id));
        let bytes = std::fs::read(&file).unwrap();
        let back = knox_verify::parse_bundle_in(&bytes, &store).unwrap();
        assert_eq!(back.apm, out.bundle.apm);
        complete(&back, &manifest());
        // Alone, the file names the part it needs.
        let alone = knox_verify::parse_bundle(&bytes).unwrap_err().to_string();
        assert!(alone.contains("which its store does not hold"), "{alone}");
    }
    // Another file under the part's name: the next run's write is refused, and the
    // file is left as it was.
    std::fs::write(&parts[0], b"not the part").unwrap();
    let e = session.run_prompt(&prompt).unwrap_err();
    let why = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        why.as_deref().is_some_and(|w| w.contains("never replaced")),
        "{e}: {why:?}"
    );
    assert_eq!(std::fs::read(&parts[0]).unwrap(), b"not the part");
    std::fs::remove_dir_all(&out_dir).unwrap();
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("knox-engine-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sub_agents_of_a_live_run_propose_from_their_own_threads() {
    fn shared<T: Sync + Send>(_: &T) {}
    let session = tiny()
        .topology(knox_types::apm::Topology {
            kind: knox_types::apm::TopologyKind::MtMa,
            tasks: 2,
            agents: 2,
        })
        .build()
        .unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into(), "read it again".into()],
    };
    let mut open = session.open(&prompt, None).unwrap();
    let agents: Vec<String> = open.agents().iter().map(|a| a.to_string()).collect();
    assert_eq!(agents, ["agent-0", "agent-1"]);
    let live = open.live().unwrap();
    shared(&live);
    std::thread::scope(|s| {
        for agent in &agents {
            let live = &live;
            s.spawn(move || {
                let Verdict::Allow(ticket) = live.propose(agent, &read()) else {
                    panic!("{agent}: the planned read was not allowed")
                };
                live.record(ticket, ToolResult::from(json!({"email": {}})))
                    .unwrap();
                assert!(matches!(
                    live.propose(agent, &send()),
                    Verdict::Block { .. }
                ));
            });
        }
    });
    let bundle = live.finish().unwrap();
    assert_eq!(
        (
            bundle.summary.counts.executed,
            bundle.summary.counts.blocked
        ),
        (2, 2)
    );
    complete(&bundle, &manifest());
}

#[test]
fn a_host_brings_its_own_plan_and_a_plan_that_does_not_fit_fails_attested() {
    let session = tiny().build().unwrap();
    let prompt = Prompt {
        tasks: vec!["read message 2".into()],
    };
    let params = json!({"id": "2"}).as_object().cloned().unwrap();
    let plan = Plan {
        tasks: vec![vec![ExpectedCall::exact(0, "MailRead", params)]],
    };
    let mut open = session.open_plan(&prompt, plan, None).unwrap();
    assert!(!open.plan_failed());
    let live = open.live().unwrap();
    // The session's planner would read message 1: the host's plan says 2.
    assert!(matches!(
        live.propose("agent-0", &read()),
        Verdict::Block {
            guard: GuardKind::Trajectory,
            ..
        }
    ));
    let two = br#"{"tool": "MailRead", "params": {"id": "2"}}"#;
    let Verdict::Allow(ticket) = live.propose("agent-0", two) else {
        panic!("the host's planned read was not allowed")
    };
    live.record(ticket, ToolResult::from(json!({"email": {}})))
        .unwrap();
    let bundle = live.finish().unwrap();
    let models: Vec<&str> = bundle.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(models, ["host-plan"]);
    complete(&bundle, &manifest());

    // A plan for a tool the manifest lacks: the run opens, refuses every proposal, and
    // its bundle holds the attested `plan_failed` interrupt.
    let params = json!({"id": "2"}).as_object().cloned().unwrap();
    let bad = Plan {
        tasks: vec![vec![ExpectedCall::exact(0, "NoSuchTool", params)]],
    };
    let mut open = session.open_plan(&prompt, bad, None).unwrap();
    assert!(open.plan_failed());
    let live = open.live().unwrap();
    assert!(matches!(live.propose("agent-0", two), Verdict::Stopped));
    let bundle = live.finish().unwrap();
    assert_eq!(bundle.summary.counts.interrupts, 1);
    complete(&bundle, &manifest());

    // A plan of two tasks for a prompt of one does not fit it either: the same attested
    // failure, naming both counts, not an error of the session.
    let params = json!({"id": "2"}).as_object().cloned().unwrap();
    let call = |task| ExpectedCall::exact(task, "MailRead", params.clone());
    let long = Plan {
        tasks: vec![vec![call(0)], vec![call(1)]],
    };
    let mut open = session.open_plan(&prompt, long, None).unwrap();
    assert!(open.plan_failed());
    let reason = serde_json::to_string(&open.apm().planning).unwrap();
    assert!(
        reason.contains("the plan has 2 task(s), the prompt 1"),
        "{reason}"
    );
    let live = open.live().unwrap();
    assert!(matches!(live.propose("agent-0", two), Verdict::Stopped));
    complete(&live.finish().unwrap(), &manifest());
}

#[test]
fn a_custom_manifest_travels_in_its_bundle_and_only_with_the_apms_hash() {
    let session = tiny()
        .executor(ScriptedFactory::default())
        .tools(Echo::default())
        .build()
        .unwrap();
    let prompt = Prompt {
        tasks: vec!["read my mail".into()],
    };
    let bundle = session.run_prompt(&prompt).unwrap().bundle;
    // A manifest no build ships: the bundle carries its canonical bytes.
    let carried = bundle.manifest.clone().unwrap();
    assert_eq!(carried.as_bytes(), manifest().canonical_bytes());
    // A verifier handed no manifest at all checks it from the bundle alone, and says so.
    let nothing = knox_verify::manifests::Manifests::new();
    let bytes = serde_json::to_vec(&bundle).unwrap();
    let read = knox_verify::parse_bundle(&bytes).unwrap();
    let report = knox_verify::verify_bundle(&read, &nothing, Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.contains("taken from the bundle")),
        "{:?}",
        report.warnings
    );
    // An embedded manifest that is not the APM's (a sink removed): bytes nothing signs,
    // tampered (#35), naming both — whether or not the verifier trusts the APM's own.
    let mut swapped = bundle.clone();
    let other =
        ToolkitManifest::from_sources(TOOLS, &NEEDS.replace("sinks = [\"to\"]", "")).unwrap();
    swapped.manifest = Some(String::from_utf8(other.canonical_bytes().to_vec()).unwrap());
    let trusting = knox_verify::manifests::Manifests::new().with(manifest());
    for set in [&nothing, &trusting] {
        let report = knox_verify::verify_bundle(&swapped, set, Options::DANGEROUS_SIMULATED);
        let Outcome::Tampered { reason, .. } = &report.outcome else {
            panic!("{report:?}")
        };
        assert!(reason.contains(&other.hash().to_string()), "{reason}");
        assert!(reason.contains(&manifest().hash().to_string()), "{reason}");
    }
    let report = knox_verify::verify_bundle(&swapped, &nothing, Options::DANGEROUS_SIMULATED);
    let Outcome::Tampered { reason, .. } = &report.outcome else {
        panic!("{report:?}")
    };
    assert!(reason.contains(&other.hash().to_string()), "{reason}");
    assert!(reason.contains(&manifest().hash().to_string()), "{reason}");
    // No manifest in the bundle and none trusted: refused, naming the APM's.
    let mut bare = bundle.clone();
    bare.manifest = None;
    let report = knox_verify::verify_bundle(&bare, &nothing, Options::DANGEROUS_SIMULATED);
    let Outcome::Refused { reason } = &report.outcome else {
        panic!("{report:?}")
    };
    assert!(reason.contains(&manifest().hash().to_string()), "{reason}");
    // Handed the manifest, the verifier needs nothing from the bundle.
    let handed = knox_verify::manifests::Manifests::new().with(manifest());
    let report = knox_verify::verify_bundle(&bare, &handed, Options::DANGEROUS_SIMULATED);
    assert_eq!(report.outcome, Outcome::Complete, "{report:?}");
    assert!(
        report
            .warnings
            .iter()
            .all(|w| !w.contains("taken from the bundle"))
    );
}
