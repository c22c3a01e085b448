//! Property: the verifier's replay of the monitor's evidence is `complete` for any run —
//! random APMs (trajectories over the embedded InjecAgent manifest's tools, stop
//! policies, with or without regulation, exact or tolerant trajectory mode) and random proposal sequences (planned,
//! off-plan, malformed, over budget or action cap, stop signals, outputs) — and any
//! single-field change of a node, re-measured so the chain check alone does not catch
//! it, fails the replay (where the replay can recompute that field) and the bundle.

#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use std::sync::OnceLock;

use knox_agent::{Plan, Prompt, Regulations};
use knox_attest::simulated::Simulated;
use knox_monitor::apm;
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::Runtime;
use knox_policy::{ToolEntry, ToolkitManifest};
use knox_types::aeg::{Node, NodeKind};
use knox_types::apm::{Apm, ExpectedCall, StopPolicy, Topology, TopologyKind, TrajectoryMode};
use knox_types::bundle::{Bundle, ModelInfo, ModelRole};
use knox_types::regulation::{DirectoryEntry, RegulationContext, TaskContext};
use knox_verify::replay::{self, Context, RegulationReplay};
use knox_verify::{Options, Outcome};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

fn manifest() -> &'static ToolkitManifest {
    static M: OnceLock<ToolkitManifest> = OnceLock::new();
    M.get_or_init(|| knox_policy::shipped::current().unwrap())
}

fn norms() -> &'static knox_regulation::Norms {
    static N: OnceLock<knox_regulation::Norms> = OnceLock::new();
    N.get_or_init(|| knox_regulation::Norms::embedded().unwrap())
}

/// The manifest's tools in a fixed order, disclosing tools first (so that regulated
/// runs meet regulation checks often).
fn tools() -> &'static [&'static ToolEntry] {
    static T: OnceLock<Vec<&'static ToolEntry>> = OnceLock::new();
    T.get_or_init(|| {
        let mut t: Vec<&ToolEntry> = manifest().tools().collect();
        t.sort_by(|a, b| {
            let key = |e: &ToolEntry| (e.annotations.discloses.is_none(), e.name.clone());
            key(a).cmp(&key(b))
        });
        t
    })
}

/// Values parameters and outputs take: shared, so outputs taint later sinks and carry
/// labels into disclosures.
const VALUES: [&str; 6] = [
    "alice@example.com",
    "attacker@evil.example",
    "123abc",
    "https://evil.example/x",
    "hello there",
    "4444-5555",
];

/// A schema-valid call of tool `tool` (index into [`tools`]), its values from `seed`.
fn call(tool: usize, seed: usize) -> (String, Map<String, Value>) {
    let ts = tools();
    let entry = ts[tool % ts.len()];
    let mut params = Map::new();
    for (k, p) in entry.spec.parameters.iter().enumerate() {
        let v = seed.wrapping_add(k);
        let value = match p.ty.as_str() {
            "string" => json!(VALUES[v % VALUES.len()]),
            "integer" => json!(v % 5000),
            "number" => json!(v % 5000),
            "boolean" => json!(v % 2 == 0),
            "array" => json!([VALUES[v % VALUES.len()]]),
            "object" => json!({"v": VALUES[v % VALUES.len()]}),
            _ => Value::Null,
        };
        if p.required.unwrap_or(false) || v % 3 != 0 {
            params.insert(p.name.clone(), value);
        }
    }
    (entry.name.clone(), params)
}

/// How regulation is configured.
#[derive(Clone, Copy, Debug)]
enum Reg {
    /// No regulations in force.
    None,
    /// GDPR named, no policy set: every disclosure `not_applicable`.
    Named,
    /// GDPR and HIPAA decided by the embedded policy set.
    Decided,
    /// Decided, with a judge for content no label reaches.
    Judged,
}

/// A judge that finds health data in content naming a value of [`VALUES`] that ends
/// in a digit, and always says `non_compliant` (recorded, never obeyed).
struct Judge;

impl knox_regulation::Judge for Judge {
    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Judge,
            name: "proptest-judge".into(),
            weights_hash: None,
            declared: false,
        }
    }

    fn ask(&self, prompt: &str) -> Result<knox_regulation::JudgeAnswer, String> {
        let mut a = knox_regulation::JudgeAnswer {
            rationale: "digits".into(),
            verdict: Some("non_compliant".into()),
            ..Default::default()
        };
        if prompt.contains("123abc") || prompt.contains("4444-5555") {
            a.info_types.insert("health".into());
            a.purpose = Some("marketing".into());
        }
        Ok(a)
    }
}

/// One step of the executors.
#[derive(Clone, Debug)]
enum Step {
    /// Agent `a` proposes its next planned call.
    Planned(usize),
    /// Agent `a` proposes planned call `k` (mod its length), in whatever order: a repeat,
    /// a reordering, a skip (the tolerant mode's automaton decides).
    Reorder(usize, usize),
    /// Agent `a` proposes call `(tool, seed)`.
    OffPlan(usize, usize, usize),
    /// Agent `a` proposes these bytes.
    Malformed(usize, Vec<u8>),
    /// The external stop signal is raised.
    Signal,
    /// The run's remote model heard labelled output `k` (mod their number: the
    /// manifest's labelled tools) in another run: a `heard` node.
    Heard(usize),
}

/// A random run.
#[derive(Clone, Debug)]
struct Scenario {
    kind: TopologyKind,
    tasks: Vec<Vec<(usize, usize)>>,
    stop: StopPolicy,
    reg: Reg,
    steps: Vec<Step>,
    /// Output of each allowed call: a value index.
    outputs: Vec<usize>,
    /// The trajectory mode: tolerant with this many read repeats, or exact.
    tolerant: Option<u32>,
    /// The executor is a remote model ([`REMOTE_EXECUTOR`]), whose operator nobody
    /// listed: under a policy set, a labelled output handed to it is refused.
    remote: bool,
}

/// The remote executor of a scenario that has one.
const REMOTE_EXECUTOR: &str = "openai:https://llm.vendor.example/v1#proptest";

fn scenario() -> impl Strategy<Value = Scenario> {
    let kind = prop_oneof![
        Just(TopologyKind::StSa),
        Just(TopologyKind::MtSaSeq),
        Just(TopologyKind::MtSaInt),
        Just(TopologyKind::MtMa)
    ];
    let stop = (
        prop::option::of(1u32..10),
        prop::option::of(0u64..6),
        any::<bool>(),
    )
        .prop_map(|(max_actions, budget, external)| StopPolicy {
            timeout_ms: None,
            max_actions,
            budget,
            external,
        });
    let reg = prop_oneof![
        Just(Reg::None),
        Just(Reg::Named),
        Just(Reg::Decided),
        Just(Reg::Judged)
    ];
    let call = (0usize..40, 0usize..100);
    let step = prop_oneof![
        4 => (0usize..2).prop_map(Step::Planned),
        3 => (0usize..2, 0usize..8).prop_map(|(a, k)| Step::Reorder(a, k)),
        2 => (0usize..2, 0usize..40, 0usize..100).prop_map(|(a, t, s)| Step::OffPlan(a, t, s)),
        1 => (0usize..2, prop_oneof![
            prop::collection::vec(any::<u8>(), 0..24),
            Just(b"{\"tool\":\"NoSuchTool\",\"params\":{}}".to_vec()),
            Just(vec![b'x'; 5000]),
        ]).prop_map(|(a, b)| Step::Malformed(a, b)),
        1 => Just(Step::Signal),
        1 => (0usize..200).prop_map(Step::Heard),
    ];
    (
        kind,
        prop::collection::vec(prop::collection::vec(call, 0..4), 1..3),
        stop,
        reg,
        prop::collection::vec(step, 0..12),
        prop::collection::vec(0usize..VALUES.len(), 12),
        prop::option::of(0u32..3),
        any::<bool>(),
    )
        .prop_map(
            |(kind, mut tasks, stop, reg, steps, outputs, tolerant, remote)| {
                if kind == TopologyKind::StSa {
                    tasks.truncate(1);
                } else if tasks.len() < 2 {
                    tasks.push(Vec::new());
                }
                Scenario {
                    kind,
                    tasks,
                    stop,
                    reg,
                    steps,
                    outputs,
                    tolerant,
                    remote,
                }
            },
        )
}

/// The APM of a scenario.
fn apm_of(s: &Scenario) -> Apm {
    let tasks: Vec<Vec<ExpectedCall>> = s
        .tasks
        .iter()
        .enumerate()
        .map(|(t, calls)| {
            calls
                .iter()
                .map(|&(tool, seed)| {
                    let (name, params) = call(tool, seed);
                    ExpectedCall::exact(t as u32, name, params)
                })
                .collect()
        })
        .collect();
    let n = tasks.len() as u32;
    let topology = Topology {
        kind: s.kind,
        tasks: n,
        agents: if s.kind == TopologyKind::MtMa { n } else { 1 },
    };
    let prompt = Prompt {
        tasks: (0..n).map(|i| format!("task {i}: hello there")).collect(),
    };
    let regulations = match s.reg {
        Reg::None => Regulations::default(),
        Reg::Named => Regulations {
            names: vec!["GDPR".into()],
            policy_hash: None,
            context: None,
        },
        Reg::Decided | Reg::Judged => Regulations {
            names: vec!["GDPR".into(), "HIPAA".into()],
            policy_hash: Some(norms().hash()),
            // With a remote executor, a controller in the EU sends: personal data is in
            // GDPR's scope, and the unlisted operator has no lawful basis for it.
            context: s.remote.then(|| eu_controller(s.outputs.len() % 3)),
        },
    };
    let mut apm = apm::from_plan(
        &prompt,
        manifest(),
        &regulations,
        &s.stop,
        Plan { tasks },
        topology,
    )
    .unwrap();
    if let Some(read_repeats) = s.tolerant {
        apm.guards.trajectory = TrajectoryMode::Tolerant {
            read_repeats,
            capacity_bits: None,
            strict: false,
        };
    }
    apm.guards.remote = knox_monitor::run::remote_models(&executor(s));
    apm
}

/// A regulation context whose tasks are a German controller's, which states its GDPR
/// obligations not at all (`obligations` 0), all met (1), or one unmet (2): the
/// verifier recomputes each the monitor's way.
fn eu_controller(obligations: usize) -> RegulationContext {
    let stated = |dpia: &str| {
        [
            ("transparency", "met"),
            ("records_of_processing", "met"),
            ("cooperation_with_authority", "met"),
            ("dpia", dpia),
            ("dpo", "not_required"),
            ("breach_notification", "not_required"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    RegulationContext {
        directory: vec![DirectoryEntry {
            addresses: vec!["office@example.de".into()],
            domains: vec![],
            role: "controller".into(),
            organisation: "Example GmbH".into(),
            jurisdiction: "DE".into(),
            baa: false,
            safeguards: false,
        }],
        consents: vec![],
        tasks: std::collections::BTreeMap::new(),
        default_task: Some(TaskContext {
            sender: "office@example.de".into(),
            purpose: "service".into(),
        }),
        obligations: match obligations {
            0 => std::collections::BTreeMap::new(),
            1 => stated("met"),
            _ => stated("unmet"),
        },
    }
}

/// The executor of a scenario, as the bundle lists it.
fn executor(s: &Scenario) -> Vec<ModelInfo> {
    vec![ModelInfo {
        role: ModelRole::Executor,
        name: if s.remote {
            REMOTE_EXECUTOR
        } else {
            "proptest"
        }
        .into(),
        weights_hash: None,
        declared: s.remote,
    }]
}

/// Runs the scenario under the monitor and seals its bundle: the one place that builds
/// evidence (the runtime and sealing move elsewhere at merge; adapt here only).
fn run(s: &Scenario) -> Bundle {
    run_edited(s, |_| {})
}

/// [`run`] under the scenario's APM changed by `edit` before it is signed.
fn run_edited(s: &Scenario, edit: fn(&mut Apm)) -> Bundle {
    static RT: OnceLock<Runtime> = OnceLock::new();
    let rt = RT.get_or_init(|| {
        Runtime::start(&Simulated, b"pipeline-proptest", manifest().clone()).unwrap()
    });
    let mut apm = apm_of(s);
    edit(&mut apm);
    let apm_hash = apm.hash().unwrap();
    let att = apm::attest(&apm, apm_hash, rt.monitor_key()).unwrap();
    let mut models = executor(s);
    let judge = matches!(s.reg, Reg::Judged).then_some(&Judge as &dyn knox_regulation::Judge);
    if let Some(j) = judge {
        models.push(j.model());
    }
    let (run_apm, run_models) = (apm.clone(), models.clone());
    let signal = StopSignal::new();
    let spec = &apm.guards.regulation;
    let regulator =
        knox_regulation::Regulator::new(spec, spec.policy_hash.map(|_| norms())).unwrap();
    let m = Monitor::start(
        MonitorConfig {
            signal: signal.clone(),
            ..MonitorConfig::new(
                &run_apm,
                apm_hash,
                "pipeline",
                manifest(),
                rt.monitor_key(),
                &run_models,
            )
        },
        regulator,
        judge,
    );
    let agents: Vec<&str> = apm.agents.iter().map(|a| a.id.as_str()).collect();
    let mut pointers = vec![0usize; agents.len()];
    let mut outputs = s.outputs.iter().cycle();
    for step in &s.steps {
        let planned = matches!(step, Step::Planned(a)
            if apm.agents[a % agents.len()].trajectory.len() > pointers[a % agents.len()]);
        let (a, raw) = match step {
            Step::Signal => {
                signal.handle().stop();
                continue;
            }
            Step::Heard(k) => {
                let labelled: Vec<&ToolEntry> = tools()
                    .iter()
                    .copied()
                    .filter(|t| {
                        t.annotations
                            .returns
                            .as_ref()
                            .is_some_and(|r| !r.info_types.is_empty())
                    })
                    .collect();
                m.heard(knox_types::payload::HeardPayload {
                    endpoint: "https://llm.vendor.example/v1".into(),
                    run: "another-run".into(),
                    node: *k as u64,
                    tool: labelled[k % labelled.len()].name.clone(),
                })
                .unwrap();
                continue;
            }
            Step::Planned(a) => {
                let a = a % agents.len();
                let plan = &apm.agents[a].trajectory;
                let (tool, params) = match plan.get(pointers[a]) {
                    Some(e) => (e.tool.clone(), e.params.clone()),
                    None => call(a, pointers[a]),
                };
                (
                    a,
                    serde_json::to_vec(&json!({"tool": tool, "params": params})).unwrap(),
                )
            }
            Step::Reorder(a, k) => {
                let a = a % agents.len();
                let plan = &apm.agents[a].trajectory;
                let (tool, params) = match plan.len() {
                    0 => call(a, *k),
                    n => (plan[k % n].tool.clone(), plan[k % n].params.clone()),
                };
                (
                    a,
                    serde_json::to_vec(&json!({"tool": tool, "params": params})).unwrap(),
                )
            }
            Step::OffPlan(a, tool, seed) => {
                let (tool, params) = call(*tool, *seed);
                let raw = serde_json::to_vec(&json!({"tool": tool, "params": params})).unwrap();
                (a % agents.len(), raw)
            }
            Step::Malformed(a, bytes) => (a % agents.len(), bytes.clone()),
        };
        match m.mediate(agents[a], &raw) {
            Verdict::Allow(t) => {
                pointers[a] += 1;
                let v = VALUES[*outputs.next().unwrap_or(&0)];
                m.record_output(t, json!({"result": v, "n": 1.5}));
            }
            // A planned call refused by a later guard moves the plan on too.
            Verdict::Block { .. } if planned => pointers[a] += 1,
            Verdict::Block { .. } => {}
            Verdict::Interrupt { .. } | Verdict::Stopped => {}
        }
    }
    let aeg = m.finish();
    knox_monitor::run::seal(rt, "pipeline", None, apm, att, models, aeg).unwrap()
}

fn verify(b: &Bundle) -> Outcome {
    knox_verify::verify_bundle(b, manifest(), Options::DANGEROUS_SIMULATED).outcome
}

/// The replay alone (chain and measurements, then the policy replay) of `nodes`.
fn replays(b: &Bundle, nodes: &[Node]) -> Result<(), String> {
    replay::chain(nodes).map_err(|e| e.reason)?;
    let spec = &b.apm.guards.regulation;
    let regulation = match spec.policy_hash {
        None => RegulationReplay::NotConfigured,
        Some(_) => RegulationReplay::Recompute(Box::new(
            knox_regulation::Regulator::new(spec, Some(norms())).unwrap(),
        )),
    };
    let cx = Context {
        contract: None,
        apm: &b.apm,
        apm_hash: b.apm.hash().unwrap(),
        manifest: manifest(),
        run_id: &b.run_id,
        models: &b.models,
        key: &b.key,
        regulation: &regulation,
        rules: knox_types::bundle::MonitorRules::of_bundle_format(&b.format),
    };
    replay::replay(&cx, nodes, true)
        .map(|_| ())
        .map_err(|e| e.reason)
}

/// Every leaf of `v` (empty containers included) as a JSON pointer.
fn leaves(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                leaves(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{at}/{i}"), out);
            }
        }
        _ => out.push(at),
    }
}

/// A different value of the same leaf.
fn changed(v: &Value) -> Value {
    match v {
        Value::Bool(b) => json!(!b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => json!(u.wrapping_add(1)),
            (_, Some(i)) => json!(i.wrapping_add(1)),
            _ => json!(n.as_f64().unwrap_or_default() + 1.0),
        },
        Value::String(s) => json!(format!("{s}x")),
        Value::Null => json!("x"),
        Value::Array(_) => json!(["x"]),
        Value::Object(_) => json!({"x": "x"}),
    }
}

/// Fields the replay cannot recompute (only the summary signature covers them): a
/// tool's output and confinement report, the clock the stop check recorded, a
/// proposal's recorded size and raw prefix (a changed prefix reads as truncated), the
/// judge's question digest and rationale, with no policy set to recompute with, a
/// regulation check's content beyond its verdict, and where a `heard` node's data was
/// heard (its endpoint, run and node there; its tool is checked).
fn replay_blind(node: &Node, pointer: &str, reg: Reg) -> bool {
    let p = &node.payload.to_value();
    match node.kind {
        NodeKind::ToolOutput => {
            pointer.starts_with("/payload/output") || pointer.starts_with("/payload/confinement")
        }
        NodeKind::Check if p["guard"] == "stop" => pointer == "/payload/detail/elapsed_ms",
        NodeKind::Heard => matches!(
            pointer,
            "/payload/endpoint" | "/payload/run" | "/payload/node"
        ),
        // What the judge was asked and why it answered so are recorded, not recomputed
        // (its answer is a model's output); its model, what it found and its verdict
        // are checked.
        NodeKind::Check
            if p["guard"] == "regulation" && pointer.starts_with("/payload/detail/judge/") =>
        {
            matches!(
                pointer,
                "/payload/detail/judge/prompt_version"
                    | "/payload/detail/judge/prompt"
                    | "/payload/detail/judge/rationale"
            )
            // The purpose it found fills in only an unspecified one: beside the
            // purpose the task context declares (the flow's, then not the judge's) it
            // is recorded, not used.
            || (pointer == "/payload/detail/judge/purpose"
                && p["detail"]["flow"]["purpose"] != p["detail"]["judge"]["purpose"])
        }
        NodeKind::Check if p["guard"] == "regulation" => {
            matches!(reg, Reg::Named)
                && !matches!(
                    pointer,
                    "/payload/detail/verdict" | "/payload/detail/policies" | "/payload/passed"
                )
                && !pointer.starts_with("/payload/detail/policies")
                && pointer != "/payload/guard"
                && pointer.starts_with("/payload/")
        }
        NodeKind::Check if p["guard"] == "input" => {
            // A truncated proposal's recorded input failure is taken as recorded.
            pointer == "/payload/detail/error"
        }
        NodeKind::ToolCall => {
            let truncated = p["raw"]
                .as_str()
                .is_some_and(|r| Some(r.len() as u64) != p["raw_len"].as_u64());
            // A changed raw prefix no longer has the recorded size: it reads as truncated.
            matches!(pointer, "/payload/raw_len" | "/payload/raw")
                || (truncated && pointer == "/payload/actual_hash")
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn replay_of_the_monitors_evidence_is_complete_and_catches_every_change(
        s in scenario(),
        pick in any::<prop::sample::Index>(),
        leaf in any::<prop::sample::Index>(),
    ) {
        let b = run(&s);
        prop_assert_eq!(verify(&b), Outcome::Complete, "scenario {:?}", s);
        prop_assert_eq!(replays(&b, &b.nodes), Ok(()));

        // One field of one node changed, the node re-measured.
        let i = pick.index(b.nodes.len());
        let mut as_json = serde_json::to_value(&b.nodes[i]).unwrap();
        let mut paths = Vec::new();
        leaves(&as_json, String::new(), &mut paths);
        paths.retain(|p| !p.starts_with("/measurement") && !p.starts_with("/attestations"));
        let path = leaf.get(&paths).clone();
        let slot = as_json.pointer_mut(&path).unwrap();
        *slot = changed(slot);
        // A change the node's type rejects (its kind) is caught by the reader.
        let Ok(mut node) = serde_json::from_value::<Node>(as_json) else {
            return Ok(());
        };
        node.measurement = node.compute_measurement();
        let mut t = b.clone();
        t.nodes[i] = node;
        if !replay_blind(&t.nodes[i], &path, s.reg) {
            prop_assert!(
                replays(&t, &t.nodes).is_err(),
                "replay accepted node {} ({:?}) with {} changed",
                i,
                t.nodes[i].kind,
                path
            );
        }
        prop_assert!(
            matches!(verify(&t), Outcome::Tampered { .. }),
            "bundle with node {} {} changed: {:?}",
            i,
            path,
            verify(&t)
        );
    }
}

/// The tolerant mode, directed: two reads swapped and one repeated, an off-plan call
/// between them; the replay is `complete`, and a recorded position or expected call the
/// automaton did not choose fails it.
#[test]
fn tolerant_runs_replay_complete_and_a_changed_choice_fails() {
    let index = |name: &str| tools().iter().position(|t| t.name == name).unwrap();
    let (a, b) = (index("GmailReadEmail"), index("GoogleCalendarReadEvents"));
    let s = Scenario {
        kind: TopologyKind::StSa,
        tasks: vec![vec![(a, 1), (b, 2)]],
        stop: StopPolicy::default(),
        reg: Reg::None,
        steps: vec![
            Step::Reorder(0, 1),
            Step::OffPlan(0, index("GmailSendEmail"), 3),
            Step::Reorder(0, 0),
            Step::Reorder(0, 0),
        ],
        outputs: vec![0; 12],
        tolerant: Some(1),
        remote: false,
    };
    let bundle = run(&s);
    assert_eq!(verify(&bundle), Outcome::Complete);
    let calls: Vec<usize> = (0..bundle.nodes.len())
        .filter(|i| bundle.nodes[*i].kind == NodeKind::ToolCall)
        .collect();
    let allowed: Vec<bool> = calls.iter().map(|i| bundle.nodes[*i].allowed).collect();
    assert_eq!(allowed, [true, false, true, true]);
    let position = |i: usize| bundle.nodes[i].payload.to_value()["position"].clone();
    assert_eq!(position(calls[0]), json!(1));
    assert_eq!(position(calls[2]), json!(0));
    // The same evidence under the exact mode's reading is refused.
    for (path, value) in [
        ("/payload/position", json!(0)),
        ("/payload/expected", Value::Null),
    ] {
        let mut t = bundle.clone();
        let mut node = serde_json::to_value(&t.nodes[calls[0]]).unwrap();
        *node.pointer_mut(path).unwrap() = value;
        let mut node: Node = serde_json::from_value(node).unwrap();
        node.measurement = node.compute_measurement();
        t.nodes[calls[0]] = node;
        assert!(replays(&t, &t.nodes).is_err(), "{path}");
        assert!(matches!(verify(&t), Outcome::Tampered { .. }), "{path}");
    }
}

/// A remote executor, directed: under a policy set, the planned read of labelled data
/// (a calendar) is refused because its output would go to the executor's operator,
/// whom nobody listed; an unlabelled read passes. The replay recomputes the refusal:
/// the evidence is `complete`, and a refusal turned into a pass (re-measured) fails
/// it; a bundle whose remote executor the APM does not name is refused.
#[test]
fn a_remote_executor_is_refused_labelled_data_its_operator_may_not_receive() {
    let index = |name: &str| tools().iter().position(|t| t.name == name).unwrap();
    let (labelled, plain) = (
        index("GoogleCalendarReadEvents"),
        index("AmazonGetProductDetails"),
    );
    let s = Scenario {
        kind: TopologyKind::StSa,
        tasks: vec![vec![(labelled, 1), (plain, 2)]],
        stop: StopPolicy::default(),
        reg: Reg::Decided,
        steps: vec![Step::Planned(0), Step::Planned(0)],
        outputs: vec![0; 12],
        tolerant: None,
        remote: true,
    };
    let bundle = run(&s);
    assert_eq!(verify(&bundle), Outcome::Complete);
    let calls: Vec<&Node> = bundle
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ToolCall)
        .collect();
    let allowed: Vec<bool> = calls.iter().map(|n| n.allowed).collect();
    assert_eq!(allowed, [false, true]);
    let why = calls[0].block_reason.clone().unwrap();
    assert!(
        why.contains(
            "would go to the remote executor `openai:https://llm.vendor.example/v1#proptest`"
        ) && why.contains("schedule"),
        "{why}"
    );
    // The refusing check: the last of the call's checks, naming the model.
    let check = bundle
        .nodes
        .iter()
        .rposition(|n| n.kind == NodeKind::Check && n.parent == Some(calls[0].seq))
        .unwrap();
    let v = bundle.nodes[check].payload.to_value();
    assert_eq!(v["guard"], "regulation");
    assert_eq!(v["passed"], false);
    assert_eq!(
        v["detail"]["model"]["endpoint"],
        "https://llm.vendor.example/v1"
    );
    // Recorded as passed instead (re-measured): the replay decides again and refuses.
    let mut t = bundle.clone();
    let mut node = serde_json::to_value(&t.nodes[check]).unwrap();
    *node.pointer_mut("/payload/passed").unwrap() = json!(true);
    *node.pointer_mut("/allowed").unwrap() = json!(true);
    let mut node: Node = serde_json::from_value(node).unwrap();
    node.measurement = node.compute_measurement();
    t.nodes[check] = node;
    assert!(replays(&t, &t.nodes).is_err());
    assert!(matches!(verify(&t), Outcome::Tampered { .. }));
    // A remote executor the APM does not name (so nothing was decided against it, and
    // the read ran): refused at the models step.
    let t = run_edited(&s, |a| a.guards.remote.clear());
    assert!(
        t.nodes
            .iter()
            .filter(|n| n.kind == NodeKind::ToolCall)
            .all(|n| n.allowed)
    );
    let r = knox_verify::verify_bundle(&t, manifest(), Options::DANGEROUS_SIMULATED);
    assert!(
        matches!(&r.outcome, Outcome::Refused { reason } if reason.contains("the APM does not name it")),
        "{:?}",
        r.outcome
    );
}
