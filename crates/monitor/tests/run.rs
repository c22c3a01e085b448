//! The run loop end to end with no dataset: a tiny hand-written manifest, a fixed
//! planner, a scripted executor and an in-process tool runner; the bundle it seals
//! verifies `complete`, and proposals are tallied per executor label.

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use std::sync::Mutex;
use std::time::Instant;

use knox_agent::{
    AgentTask, Executor, ExecutorFactory, Label, Observation, Plan, PlanError, Planner, Prompt,
    Regulations, Step, ToolResult, ToolRunner,
};
use knox_attest::simulated::Simulated;
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::{RunConfig, RunOutcome, Runtime, Tally, run_prompt};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::ModelInfo;
use knox_types::grant::Grant;
use knox_types::payload::GuardKind;
use knox_verify::{Options, report::Outcome};
use serde_json::{Value, json};

const TOOLS: &str = r#"[
  {"toolkit": "Mail", "name_for_model": "Mail", "name_for_human": "Mail", "description_for_model": "d", "description_for_human": "d",
   "tools": [
     {"name": "Send", "summary": "s", "parameters": [
        {"name": "to", "type": "string", "description": "d", "required": true},
        {"name": "body", "type": "string", "description": "d", "required": true}],
      "returns": [{"name": "success", "type": "boolean", "description": "d"}]},
     {"name": "Read", "summary": "s", "parameters": [
        {"name": "id", "type": "string", "description": "d", "required": true}],
      "returns": [{"name": "email", "type": "object", "description": "d"}]}]}
]"#;

const NEEDS: &str = r#"
version = 1
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = [{ path = "/usr/lib", access = ["read", "execute"] }]
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }

[toolkits.Mail]
profile = "network-client"
syscalls = ["socket", "connect"]
endpoints = [{ host = "mail.example", port = 443 }]
cost = 2
[toolkits.Mail.tools.Send]
sinks = ["to"]
"#;

fn manifest() -> ToolkitManifest {
    ToolkitManifest::from_sources(TOOLS, NEEDS).unwrap()
}

fn model(role: &str, name: &str) -> ModelInfo {
    ModelInfo {
        role: role.into(),
        name: name.into(),
        weights_hash: None,
        declared: false,
    }
}

/// Plans every task as one `MailRead` of message `1`.
struct ReadPlanner;

impl Planner for ReadPlanner {
    fn plan(
        &self,
        prompt: &Prompt,
        _: &ToolkitManifest,
        _: &Regulations,
        _: &StopPolicy,
    ) -> Result<Plan, PlanError> {
        let read = |i| {
            let params = json!({"id": "1"}).as_object().cloned().unwrap();
            vec![ExpectedCall::exact(i, "MailRead", params)]
        };
        Ok(Plan {
            tasks: (0..prompt.tasks.len()).map(|i| read(i as u32)).collect(),
        })
    }

    fn model(&self) -> ModelInfo {
        model("planner", "fixed")
    }
}

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
