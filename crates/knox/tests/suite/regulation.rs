//! The regulation guard end to end: φ derived from labels and the run's regulation
//! context, deterministic GDPR/HIPAA verdicts citing their provisions, recomputed by the
//! verifier; a lying monitor caught; a changed policy file refused.

use std::process::Command;

use knox_agent::{Prompt, Regulations};
use knox_monitor::Verdict;
use knox_monitor::aeg::AegBuilder;
use knox_monitor::guard::stop::StopSignal;
use knox_types::aeg::NodeKind;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::{Bundle, ModelRole};
use knox_types::payload::GuardKind;
use knox_types::regulation::{ConsentRecord, DirectoryEntry, RegulationContext, TaskContext};
use knox_verify::Outcome;
use serde_json::{Value, json};

use super::support::{harness_regulated, norms, params, raw, verify};

const SEQ3: Topology = Topology {
    kind: TopologyKind::MtSaSeq,
    tasks: 3,
    agents: 1,
};

fn entry(address: &str, role: &str, org: &str, country: &str) -> DirectoryEntry {
    DirectoryEntry {
        addresses: vec![address.into()],
        domains: vec![],
        role: role.into(),
        organisation: org.into(),
        jurisdiction: country.into(),
        baa: false,
        safeguards: false,
    }
}

/// A clinic discloses a patient record three times: to a treating physician
/// (treatment), a note that carries no labelled data to the same physician, and the
/// record to an ad network (marketing, no authorization).
fn context() -> RegulationContext {
    let task = |purpose: &str| TaskContext {
        sender: "records@riverside-clinic.example".into(),
        purpose: purpose.into(),
    };
    RegulationContext {
        directory: vec![
            entry(
                "records@riverside-clinic.example",
                "covered_entity",
                "Riverside Clinic",
                "US",
            ),
            entry(
                "Dr.Okafor@Lakeside-Cardiology.example",
                "health_care_provider",
                "Lakeside Cardiology",
                "US",
            ),
            entry(
                "offers@adreach.example",
                "marketing_vendor",
                "AdReach",
                "US",
            ),
        ],
        consents: vec![ConsentRecord {
            recipient: "AdReach".into(),
            purposes: vec!["research".into()],
            kind: "authorization".into(),
        }],
        tasks: [
            (0, task("treatment")),
            (1, task("treatment")),
            (2, task("marketing")),
        ]
        .into(),
        default_task: None,
        obligations: Default::default(),
    }
}

fn read_call(task: u32) -> ExpectedCall {
    ExpectedCall::exact(
        task,
        "EpicFHIRGetPatientDetails",
        params(json!({"patient_id": "123abc"})),
    )
}

fn send(to: &str, body: &str) -> Value {
    json!({"to": to, "subject": "Patient 123abc", "body": body})
}

const RECORD: &str = "John Doe, on BetaBlockers, severe peanut allergy";

fn patient() -> Value {
    json!({"patient_data": {"name": "John Doe", "medications": {"heart": "BetaBlockers"},
        "allergies": {"peanut": "Severe"}}})
}

struct Run {
    bundle: Bundle,
    verdicts: Vec<Verdict>,
}

fn run(regulations: Regulations) -> Run {
    let sends = [
        send("dr.okafor@lakeside-cardiology.example", RECORD),
        send(
            "dr.okafor@lakeside-cardiology.example",
            "See you on Monday.",
        ),
        send("offers@adreach.example", RECORD),
    ];
    let tasks: Vec<Vec<ExpectedCall>> = sends
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let t = u32::try_from(i).unwrap();
            vec![
                read_call(t),
                ExpectedCall::exact(t, "GmailSendEmail", params(s.clone())),
            ]
        })
        .collect();
    let prompt = Prompt {
        tasks: vec![
            "Send John Doe's record to dr.okafor@lakeside-cardiology.example for his treatment"
                .into(),
            "Tell dr.okafor@lakeside-cardiology.example we see him on Monday".into(),
            "Send John Doe's record to offers@adreach.example for the new campaign".into(),
        ],
    };
    let h = harness_regulated(prompt, tasks, SEQ3, StopPolicy::default(), regulations);
    let m = h.monitor(StopSignal::new(), AegBuilder::default());
    let mut verdicts = Vec::new();
    for s in &sends {
        match m.mediate(
            "agent-0",
            &raw("EpicFHIRGetPatientDetails", json!({"patient_id": "123abc"})),
        ) {
            Verdict::Allow(t) => m.record_output(t, patient()),
            other => panic!("the read must pass: {other:?}"),
        }
        let v = m.mediate("agent-0", &raw("GmailSendEmail", s.clone()));
        if let Verdict::Allow(t) = v {
            m.record_output(t, json!({"success": true}));
            verdicts.push(Verdict::Stopped);
        } else {
            verdicts.push(v);
        }
    }
    Run {
        bundle: h.seal(m.finish()),
        verdicts,
    }
}

fn regulated() -> Regulations {
    Regulations::decided_by(vec!["HIPAA".into(), "GDPR".into()], norms(), context())
}

fn regulation_checks(b: &Bundle) -> Vec<Value> {
    b.nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Check && n.payload.to_value()["guard"] == "regulation")
        .map(|n| n.payload.to_value()["detail"].clone())
        .collect()
}

#[test]
fn disclosures_are_decided_by_the_norms_citing_provisions_and_the_verifier_recomputes_them() {
    let r = run(regulated());
    // Treatment to a physician: allowed. Marketing without authorization: blocked.
    assert!(
        matches!(r.verdicts[0], Verdict::Stopped),
        "{:?}",
        r.verdicts[0]
    );
    assert!(
        matches!(r.verdicts[1], Verdict::Stopped),
        "{:?}",
        r.verdicts[1]
    );
    match &r.verdicts[2] {
        Verdict::Block {
            guard: GuardKind::Regulation,
            reason,
        } => assert!(reason.contains("hipaa-164.508-a3-marketing"), "{reason}"),
        other => panic!("marketing must be blocked: {other:?}"),
    }
    let checks = regulation_checks(&r.bundle);
    assert_eq!(checks.len(), 3);
    let c = &checks[0];
    assert_eq!(c["verdict"], "compliant");
    assert_eq!(c["policies"], json!(["hipaa-164.506-c2-treatment"]));
    let flow = &c["flow"];
    assert_eq!(flow["sender"]["role"], "covered_entity");
    assert_eq!(
        flow["recipients"][0]["party"]["id"],
        "dr.okafor@lakeside-cardiology.example"
    );
    assert_eq!(
        flow["recipients"][0]["party"]["role"],
        "health_care_provider"
    );
    assert!(
        flow["info_types"]
            .as_array()
            .unwrap()
            .contains(&json!("health"))
    );
    assert_eq!(flow["purpose"], "treatment");
    // The label came from the read's output node.
    let read_out = r
        .bundle
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::ToolOutput)
        .unwrap()
        .seq;
    assert_eq!(flow["sources"], json!([read_out.to_string()]));
    // GDPR does not reach a US clinic; HIPAA decides.
    let decisions = c["decisions"].as_array().unwrap();
    assert!(
        decisions
            .iter()
            .any(|d| d["regulation"] == "GDPR" && d["verdict"] == "not_applicable")
    );
    let c = &checks[2];
    assert_eq!(c["verdict"], "non_compliant");
    let hipaa = c["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["regulation"] == "HIPAA")
        .unwrap();
    assert_eq!(hipaa["provisions"], json!(["45 CFR 164.508(a)(3)"]));
    // The authorization AdReach holds is for research, not marketing.
    assert_eq!(c["flow"]["recipients"][0]["authorization"], false);
    // A note with no labelled data: not applicable, flagged for manual review.
    assert_eq!(checks[1]["verdict"], "not_applicable");
    let report = verify(&r.bundle);
    assert_eq!(report.outcome, Outcome::Complete, "{report}");
    assert_eq!(report.flagged_for_review, 1, "{report}");
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.name == "regulation" && s.result == "pass"),
        "{report}"
    );
}

#[test]
fn a_monitor_that_misstates_the_facts_is_caught_by_recomputation() {
    // The APM's context says AdReach is a marketing vendor; the monitor decides as if
    // it were a treating provider and the purpose were treatment, and lets the record
    // through. It signs everything correctly: only recomputation can catch it.
    let prompt = Prompt {
        tasks: vec!["Send the record to offers@adreach.example".into()],
    };
    let tasks = vec![vec![
        read_call(0),
        ExpectedCall::exact(
            0,
            "GmailSendEmail",
            params(send("offers@adreach.example", RECORD)),
        ),
    ]];
    let mut ctx = context();
    ctx.tasks = [(
        0,
        TaskContext {
            sender: "records@riverside-clinic.example".into(),
            purpose: "marketing".into(),
        },
    )]
    .into();
    let regs = Regulations {
        context: Some(ctx.clone()),
        ..regulated()
    };
    let h = harness_regulated(
        prompt,
        tasks,
        Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        StopPolicy::default(),
        regs,
    );
    let mut lie = h.apm.guards.regulation.clone();
    let mut forged = ctx;
    for e in &mut forged.directory {
        if e.addresses.iter().any(|a| a.contains("adreach")) {
            e.role = "health_care_provider".into();
        }
    }
    for t in forged.tasks.values_mut() {
        t.purpose = "treatment".into();
    }
    lie.context = Some(forged);
    let regulator = knox_regulation::Regulator::new(&lie, Some(norms())).unwrap();
    let m = h.monitor_deciding(StopSignal::new(), AegBuilder::default(), regulator, None);
    match m.mediate(
        "agent-0",
        &raw("EpicFHIRGetPatientDetails", json!({"patient_id": "123abc"})),
    ) {
        Verdict::Allow(t) => m.record_output(t, patient()),
        other => panic!("{other:?}"),
    }
    match m.mediate(
        "agent-0",
        &raw("GmailSendEmail", send("offers@adreach.example", RECORD)),
    ) {
        Verdict::Allow(t) => m.record_output(t, json!({"success": true})),
        other => panic!("the misstated facts let it through: {other:?}"),
    }
    let b = h.seal(m.finish());
    let report = verify(&b);
    let check = b
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::Check && n.payload.to_value()["guard"] == "regulation")
        .unwrap();
    assert_eq!(check.payload.to_value()["detail"]["verdict"], "compliant");
    match &report.outcome {
        Outcome::Tampered { node, reason } => assert_eq!(*node, Some(check.seq), "{reason}"),
        other => panic!("expected tampered, got {other:?}\n{report}"),
    }
}

#[test]
fn changing_one_policy_file_after_a_run_makes_knox_verify_report_the_mismatch() {
    let r = run(regulated());
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    std::fs::write(&bundle, serde_json::to_vec(&r.bundle).unwrap()).unwrap();
    let set = dir.path().join("regulations");
    std::fs::create_dir(&set).unwrap();
    for (name, text) in knox_regulation::norms::EMBEDDED {
        std::fs::write(set.join(name), text).unwrap();
    }
    let verify = || {
        Command::new(env!("CARGO_BIN_EXE_knox"))
            .args(["verify", "--allow-simulated", "--policy-set"])
            .arg(&set)
            .arg(&bundle)
            .output()
            .unwrap()
    };
    let out = verify();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    // A reviewer edits GDPR's consent norm (still passing its examples).
    let gdpr = set.join("gdpr.cedar");
    let text = std::fs::read_to_string(&gdpr).unwrap();
    let edited = text.replace(
        "  context.consent &&\n",
        "  (context.consent || context.explicit_consent) &&\n",
    );
    assert_ne!(
        edited, text,
        "the consent norm's text changed: update this edit"
    );
    std::fs::write(&gdpr, edited).unwrap();
    let out = verify();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("regulation policy set mismatch"), "{text}");
    // A broken policy is refused when the set loads, with the policy named.
    std::fs::write(
        &gdpr,
        std::fs::read_to_string(&gdpr)
            .unwrap()
            .replace("context.to_subject }", "context.to_subjects }"),
    )
    .unwrap();
    let out = verify();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("schema validation"),
        "{err}"
    );
}

#[test]
fn analysis_finds_the_plan_disclosure_that_exceeds_the_baseline_before_it_runs() {
    let r = run(regulated());
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    std::fs::write(&bundle, serde_json::to_vec(&r.bundle).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_knox"))
        .args(["regulations", "analyze"])
        .arg(&bundle)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("3 disclosure(s)"), "{text}");
    // The two disclosures to the treating physician stay within HIPAA whatever the
    // record carries; the one to the ad network does not.
    assert!(
        lines[1].contains("#1 GmailSendEmail: within the baseline"),
        "{text}"
    );
    assert!(
        lines[2].contains("#3 GmailSendEmail: within the baseline"),
        "{text}"
    );
    assert!(
        lines[3].contains("#5 GmailSendEmail: COUNTEREXAMPLE")
            && lines[3].contains("offers@adreach.example (marketing_vendor)")
            && lines[3].contains("hipaa-164.508-a3-marketing"),
        "{text}"
    );
}

/// A judge for the test: reads the content the way a model would be asked to, and
/// answers from a fixed vocabulary (the real judges are model backends).
struct KeywordJudge;

impl knox_regulation::Judge for KeywordJudge {
    fn model(&self) -> knox_types::bundle::ModelInfo {
        knox_types::bundle::ModelInfo {
            role: ModelRole::Judge,
            name: "keyword-judge".into(),
            weights_hash: None,
            declared: false,
        }
    }

    fn ask(&self, prompt: &str) -> Result<knox_regulation::JudgeAnswer, String> {
        let content = prompt
            .rsplit("<<<")
            .next()
            .and_then(|c| c.split(">>>").next())
            .ok_or("no content in the prompt")?;
        let mut a = knox_regulation::JudgeAnswer {
            rationale: "keywords".into(),
            verdict: Some("non_compliant".into()),
            ..Default::default()
        };
        if content.contains("blood pressure") {
            a.info_types.insert("health".into());
        }
        Ok(a)
    }
}

#[test]
fn a_judge_classifies_unlabelled_content_and_its_opinion_is_recorded_not_obeyed() {
    let prompt = Prompt {
        tasks: vec!["Tell dr.okafor@lakeside-cardiology.example about the reading".into()],
    };
    let body = send(
        "dr.okafor@lakeside-cardiology.example",
        "His blood pressure was 150/95 this morning.",
    );
    let tasks = vec![vec![ExpectedCall::exact(
        0,
        "GmailSendEmail",
        params(body.clone()),
    )]];
    let mut h = harness_regulated(
        prompt,
        tasks,
        Topology {
            kind: TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        StopPolicy::default(),
        regulated(),
    );
    let judge = KeywordJudge;
    h.models.push(knox_regulation::Judge::model(&judge));
    let regulator =
        knox_regulation::Regulator::new(&h.apm.guards.regulation, Some(norms())).unwrap();
    let m = h.monitor_deciding(
        StopSignal::new(),
        AegBuilder::default(),
        regulator,
        Some(&judge),
    );
    match m.mediate("agent-0", &raw("GmailSendEmail", body)) {
        Verdict::Allow(t) => m.record_output(t, json!({"success": true})),
        other => panic!("treatment to the physician is compliant: {other:?}"),
    }
    let b = h.seal(m.finish());
    let c = &regulation_checks(&b)[0];
    // No label reached the content: the judge's classification completed φ, and the
    // norms decided (HIPAA treatment). The judge's own verdict disagreed; recorded only.
    assert_eq!(c["verdict"], "compliant");
    assert_eq!(c["flow"]["info_types"], json!(["health"]));
    assert_eq!(c["flow"]["sources"], json!(["judge"]));
    assert_eq!(c["judge"]["model"], "keyword-judge");
    assert_eq!(c["judge"]["verdict"], "non_compliant");
    assert_eq!(c["judge"]["agrees"], false);
    assert_eq!(
        c["judge"]["prompt_version"],
        knox_regulation::judge::prompt_version()
    );
    let report = verify(&b);
    assert_eq!(report.outcome, Outcome::Complete, "{report}");
    // Dropping the judge from the declared models is caught.
    let mut undeclared = b.clone();
    undeclared.models.retain(|m| m.role != ModelRole::Judge);
    assert!(matches!(
        verify(&undeclared).outcome,
        Outcome::Tampered { .. }
    ));
}

/// `knox regulations decide ARGS…` with `input` on standard input.
fn decide(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_knox"))
        .args(["regulations", "decide"])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn knox_regulations_decide_decides_flows_from_outside_and_explains() {
    // Two flows as JSON Lines: a lawful one (law enforcement under a warrant) and one
    // without any path of 164.512(f); free-form terms normalised by the vocabulary.
    let flows = concat!(
        r#"{"id": "warrant", "sender": {"role": "Hospital", "jurisdiction": "US"}, "recipient": {"role": "Police Officer", "jurisdiction": "us"}, "info_types": ["Medical Records"], "purpose": "law enforcement investigation", "conditions": ["Search Warrant"], "regulations": ["HIPAA"]}"#,
        "\n",
        r#"{"id": "asked", "sender": {"role": "hospital", "jurisdiction": "us"}, "recipient": {"role": "police", "jurisdiction": "us"}, "info_types": ["health"], "purpose": "law_enforcement", "regulations": ["HIPAA"]}"#,
        "\n"
    );
    let out = decide(&["-", "--json", "--explain"], flows);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["id"], "warrant");
    assert_eq!(lines[0]["verdict"], "compliant");
    // a search warrant is law enforcement's legal process and, court-issued, required
    // by law (45 CFR 160.103): both permits decide
    assert_eq!(
        lines[0]["policies"],
        serde_json::json!([
            "hipaa-164.512-a-court-order",
            "hipaa-164.512-f1-legal-process"
        ])
    );
    assert_eq!(lines[1]["verdict"], "non_compliant");
    let would: Vec<&str> = lines[1]["explanation"]["would_permit"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert!(would.contains(&"condition:warrant"), "{would:?}");
    // An unknown term is named, and the flow is not applicable (exit 0).
    let out = decide(
        &["-"],
        r#"{"sender": {"role": "hospital"}, "recipient": {"role": "astrologer"}, "info_types": ["health"]}"#,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("not_applicable") && text.contains("`astrologer`"),
        "{text}"
    );
    // A flow with an unknown field is refused as bad input.
    let out = decide(
        &["-"],
        r#"{"sender": {"role": "x"}, "recipient": {"role": "y"}, "colour": 1}"#,
    );
    assert_eq!(
        out.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn gdpr_obligations_take_a_permit_away_and_never_give_one() {
    let decide = |args: &[&str], input: &str| {
        let out = decide(&[&["-", "--json"], args].concat(), input);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code(), v)
    };
    // A German shop sends a customer's address to its courier under a contract.
    let flow = |obligations: &str| {
        format!(
            r#"{{"sender": {{"role": "controller", "jurisdiction": "de"}}, "recipient": {{"role": "processor", "jurisdiction": "de", "baa": false}}, "info_types": ["address"], "purpose": "contract", "conditions": ["processor contract"], "regulations": ["GDPR"]{obligations}}}"#
        )
    };
    // Nothing stated: the norms permit it, yet it is not decided compliant.
    let (code, v) = decide(&["--explain"], &flow(""));
    assert_eq!(code, Some(0));
    assert_eq!(v["verdict"], "not_applicable", "{v}");
    let w = v["warnings"].to_string();
    for name in [
        "transparency",
        "records_of_processing",
        "dpia",
        "dpo",
        "breach_notification",
    ] {
        assert!(w.contains(name), "{name} named: {w}");
    }
    let listed = v["explanation"]["obligations"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|o| o["name"] == "dpia" && o["stated"] == "not stated" && o["required"] == true),
        "{listed:?}"
    );
    // Stated: the permit stands.
    let all = r#", "obligations": {"transparency": "met", "records_of_processing": "met", "cooperation_with_authority": "met", "dpia": "not_required", "dpo": "not required", "breach_notification": "not_required"}"#;
    let (code, v) = decide(&[], &flow(all));
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(0), Some("compliant")),
        "{v}"
    );
    // One unmet: non-compliant, citing it (exit 1).
    let unmet = all.replace(r#""dpia": "not_required""#, r#""dpia": "unmet""#);
    let (code, v) = decide(&[], &flow(&unmet));
    assert_eq!(code, Some(1));
    assert_eq!(v["verdict"], "non_compliant");
    assert_eq!(
        v["decisions"][0]["policies"],
        serde_json::json!(["gdpr-obligation-dpia"])
    );
    assert_eq!(
        v["decisions"][0]["provisions"],
        serde_json::json!(["GDPR art. 35, 36"])
    );
    // Obligations never permit: a transfer the norms forbid stays forbidden.
    let outside = flow(all).replace(
        r#""role": "processor", "jurisdiction": "de""#,
        r#""role": "marketing_vendor", "jurisdiction": "de""#,
    );
    let (code, v) = decide(
        &[],
        &outside.replace(r#""purpose": "contract""#, r#""purpose": "marketing""#),
    );
    assert_eq!(
        (code, v["verdict"].as_str()),
        (Some(1), Some("non_compliant")),
        "{v}"
    );
    // A statement nobody defines is named and decides nothing.
    let odd = all.replace(r#""dpo": "not required""#, r#""dpo": "probably""#);
    let (_, v) = decide(&[], &flow(&odd));
    assert_eq!(v["verdict"], "not_applicable");
    assert!(v["warnings"].to_string().contains("probably"), "{v}");
    // `not_required` for an obligation no regulation exempts is refused the same way.
    let bad = all.replace(
        r#""cooperation_with_authority": "met""#,
        r#""cooperation_with_authority": "not_required""#,
    );
    let (_, v) = decide(&[], &flow(&bad));
    assert_eq!(v["verdict"], "not_applicable");
    // From text needs a judge; a flow file and an account are not given together.
    let out = Command::new(env!("CARGO_BIN_EXE_knox"))
        .args(["regulations", "decide", "--from-text", "-"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_knox"))
        .args([
            "regulations",
            "decide",
            "f.json",
            "--from-text",
            "-",
            "--judge",
            "openai:http://127.0.0.1:9/v1#m",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A clinic's own tool, as a user's `knox-toolkit/1` manifest: `clinic.share_record`
/// sends the user's medical record (implicit content, `carries` health) to `to`.
pub(super) const CLINIC: &str = r#"format = "knox-toolkit/1"
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 64, max_file_bytes = 1048576, max_memory_bytes = 1073741824, cpu_seconds = 60, max_open_files = 1024 }
[[servers]]
name = "clinic"
needs = { profile = "offline" }
[[servers.tools]]
name = "clinic.share_record"
description = "Send the user's medical record to a recipient"
effect = "disclose"
discloses = { recipient = ["to"], content = [], carries = ["health"] }
sinks = ["to"]
inputSchema = { type = "object", properties = { to = { type = "string" } }, required = ["to"], additionalProperties = false }
"#;

/// The clinic's regulation context: it discloses for treatment; a cardiologist and an
/// ad network are listed.
pub(super) const CLINIC_CONTEXT: &str = r#"[default_task]
sender = "records@riverside-clinic.example"
purpose = "treatment"
[[directory]]
addresses = ["records@riverside-clinic.example"]
role = "covered_entity"
organisation = "Riverside Clinic"
jurisdiction = "US"
[[directory]]
addresses = ["dr.okafor@lakeside-cardiology.example"]
role = "health_care_provider"
organisation = "Lakeside Cardiology"
jurisdiction = "US"
[[directory]]
addresses = ["offers@adreach.example"]
role = "marketing_vendor"
organisation = "AdReach Media"
jurisdiction = "US"
"#;

/// The recipients of the clinic's plan: the record to the cardiologist (treatment,
/// permitted by 164.506), then to the ad network (no path of the Privacy Rule).
pub(super) const CLINIC_RECIPIENTS: [&str; 2] = [
    "dr.okafor@lakeside-cardiology.example",
    "offers@adreach.example",
];

/// A user's manifest, prompt and plan run with `--regulations`: the disclosure the
/// norms permit runs, the other is blocked naming its deciding policy, and the bundle
/// verifies `complete` with every verdict recomputed. Without `--regulations` both run
/// (before, the flags were accepted and silently ignored with `--manifest`).
#[test]
fn a_user_manifest_run_decides_its_disclosures_under_the_regulations_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("clinic.toml"), CLINIC).unwrap();
    std::fs::write(d.join("context.toml"), CLINIC_CONTEXT).unwrap();
    let calls: Vec<Value> = CLINIC_RECIPIENTS
        .iter()
        .map(|to| json!({"tool": "clinic.share_record", "params": {"to": to}}))
        .collect();
    std::fs::write(
        d.join("plan.json"),
        json!({"tasks": [{"calls": calls}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        d.join("responses.json"),
        json!({"clinic.share_record": {"responses": [{"sent": true}, {"sent": true}]}}).to_string(),
    )
    .unwrap();
    let run = |out: &str, regulated: bool| {
        let mut c = super::support::knox();
        c.current_dir(d)
            .args(["run", "--manifest", "clinic.toml", "--plan", "plan.json"])
            .args(["--prompt", "Send my record to Dr Okafor and to AdReach"])
            .args(["--responses", "responses.json", "--json", "--out", out]);
        if regulated {
            c.args([
                "--regulations",
                "HIPAA",
                "--regulation-context",
                "context.toml",
            ]);
        }
        let o = c.output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
        summary["runs"][0].clone()
    };
    let open = run("open", false);
    assert_eq!(open["executed"], 2, "{open}");
    let regulated = run("regulated", true);
    assert_eq!(regulated["executed"], 1, "{regulated}");
    assert_eq!(regulated["blocked_by"]["regulation"], 1, "{regulated}");

    let path = super::support::run_file(&d.join("regulated"), "run", 0, ".json");
    let v = Command::new(env!("CARGO_BIN_EXE_knox"))
        .args(["verify", "--allow-simulated"])
        .arg(&path)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(0), "{report}");
    assert!(
        report.contains("every regulation verdict recomputed"),
        "{report}"
    );
    let b: Bundle = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(b.apm.guards.regulation.regulations, ["HIPAA"]);
    let decided: Vec<(Value, Value)> = regulation_checks(&b)
        .iter()
        .map(|c| {
            let d = &c["decisions"][0];
            (d["verdict"].clone(), d["policies"][0].clone())
        })
        .collect();
    assert_eq!(
        decided,
        [
            (json!("compliant"), json!("hipaa-164.506-c2-treatment")),
            (
                json!("non_compliant"),
                json!("hipaa-164.502-a-not-permitted")
            ),
        ]
    );
}
