//! `φ = derive(α)`: a disclosing action as a contextual-integrity information flow.
//!
//! - **Which tools disclose**, which parameters name the recipient and which carry the
//!   content come from the toolkit manifest (`discloses` in the shipped
//!   `data/manifests/injecagent.toolkit.json`, or the user's manifest).
//! - **Information types and data subject** come from data labels: the `returns` labels
//!   of every earlier tool output of the same agent that reaches the content — through
//!   the plan's data link (`from_output` constraint on a content parameter) or because a
//!   value of that output occurs in the content — plus the types the disclosure
//!   `carries` by itself.
//! - **Recipients** are resolved through the run's recipient directory (role,
//!   organisation, jurisdiction); an address nobody listed is `unknown`.
//! - **Transmission principle**: the task's declared purpose and the consent records
//!   that cover the recipient for that purpose.

use std::collections::{BTreeSet, HashMap};

use knox_policy::ToolEntry;
use knox_policy::manifest::{Returns, Subject};
use knox_types::Action;
use knox_types::apm::{ExpectedCall, ParamConstraint};
use knox_types::regulation::{
    DirectoryEntry, InfoFlow, PartyFacts, RecipientFacts, RegulationContext, TaskContext,
};
use serde_json::Value;

use crate::address;

/// Shortest output value whose occurrence in disclosed content carries the output's
/// labels (shorter values, such as `12` or `yes`, occur in any text).
pub const MIN_MATCH_LEN: usize = 4;

/// One tool output an agent received before the disclosure.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    /// Sequence number of the `tool_output` node.
    pub node: u64,
    /// Trajectory position of the call that produced it.
    pub position: u32,
    /// Labels of the producing tool, if it has any.
    pub labels: Option<&'a Returns>,
    /// The output.
    pub output: &'a Value,
    /// Not an output of this run: labelled data of the producing tool the run's remote
    /// model heard in another run (a `heard` node; `output` is null). It reaches every
    /// disclosure with content the model composed (a parameter the plan does not fix),
    /// since no match here can show it absent.
    pub heard: bool,
    /// Whether the disclosure's content carries this output by provenance: `Some` when
    /// the call's parameters were decided by where their data came from
    /// (`knox_policy::provenance`) — a content parameter that runs as the executor
    /// composed it carries every output its model had read, whatever its text looks
    /// like, and one the plan fixes carries none. `None`: no provenance decision (a call
    /// no plan step matched), so what its content visibly holds decides.
    ///
    /// Either way, an output the content visibly holds (verbatim, or in a form the
    /// normalised match undoes) reaches it too: a value the user's plan wrote is still a
    /// disclosure of what it holds.
    pub carried: Option<bool>,
}

/// The run's recipient directory and consent records, indexed once per run.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    ctx: RegulationContext,
    by_address: HashMap<String, usize>,
}

/// Largest regulation context file read.
pub const MAX_CONTEXT_BYTES: usize = 1 << 20;

/// Parses a regulation context (TOML; see `regulations/examples/clinic.toml`).
pub fn context_from_toml(text: &str) -> Result<RegulationContext, String> {
    if text.len() > MAX_CONTEXT_BYTES {
        return Err(format!("larger than {MAX_CONTEXT_BYTES} bytes"));
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        directory: Vec<DirectoryEntry>,
        #[serde(default)]
        consents: Vec<knox_types::regulation::ConsentRecord>,
        #[serde(default)]
        tasks: std::collections::BTreeMap<String, TaskContext>,
        #[serde(default)]
        default_task: Option<TaskContext>,
        #[serde(default)]
        obligations: std::collections::BTreeMap<String, String>,
    }
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut tasks = std::collections::BTreeMap::new();
    for (k, v) in f.tasks {
        let i: u32 = k
            .parse()
            .map_err(|_| format!("task key `{k}` is not a task number"))?;
        tasks.insert(i, v);
    }
    for e in &f.directory {
        if e.addresses.is_empty() && e.domains.is_empty() {
            return Err(format!(
                "directory entry `{}` ({}) has no address or domain",
                e.organisation, e.role
            ));
        }
    }
    Ok(RegulationContext {
        directory: f.directory,
        consents: f.consents,
        tasks,
        default_task: f.default_task,
        obligations: f.obligations,
    })
}

/// The facts of a party.
pub fn party_facts(
    id: &str,
    listed: bool,
    role: &str,
    organisation: &str,
    jurisdiction: &str,
    baa: bool,
    safeguards: bool,
) -> PartyFacts {
    let j = address::jurisdiction(jurisdiction);
    PartyFacts {
        id: id.to_string(),
        listed,
        role: address::label(role),
        organisation: organisation.trim().to_string(),
        in_eea: address::in_eea(&j),
        adequacy: address::adequacy(&j),
        jurisdiction: j,
        baa,
        safeguards,
    }
}

fn unknown(id: &str) -> PartyFacts {
    party_facts(id, false, "unknown", "", "unknown", false, false)
}

impl Directory {
    /// Indexes `ctx`.
    pub fn new(ctx: &RegulationContext) -> Self {
        let mut by_address = HashMap::new();
        for (i, e) in ctx.directory.iter().enumerate() {
            for a in &e.addresses {
                by_address.entry(address::canonical(a)).or_insert(i);
            }
        }
        Self {
            ctx: ctx.clone(),
            by_address,
        }
    }

    fn entry(&self, canonical: &str) -> Option<&DirectoryEntry> {
        if let Some(i) = self.by_address.get(canonical) {
            return self.ctx.directory.get(*i);
        }
        let host = address::host(canonical)?;
        self.ctx
            .directory
            .iter()
            .find(|e| e.domains.iter().any(|d| address::in_domain(host, d)))
    }

    /// The party `raw` reaches.
    pub fn resolve(&self, raw: &str) -> PartyFacts {
        let id = address::canonical(raw);
        match self.entry(&id) {
            Some(e) => party_facts(
                &id,
                true,
                &e.role,
                &e.organisation,
                &e.jurisdiction,
                e.baa,
                e.safeguards,
            ),
            None => unknown(&id),
        }
    }

    /// The task's sender and purpose.
    pub fn task(&self, task: Option<u32>) -> Option<&TaskContext> {
        task.and_then(|t| self.ctx.tasks.get(&t))
            .or(self.ctx.default_task.as_ref())
    }

    /// `(consent, explicit consent, authorization)` covering `party` for `purpose`.
    fn consents(&self, party: &PartyFacts, purpose: &str) -> (bool, bool, bool) {
        let entry = party.listed.then(|| self.entry(&party.id)).flatten();
        let mut out = (false, false, false);
        for c in &self.ctx.consents {
            let who = address::canonical(&c.recipient);
            let names_it = who == party.id
                || entry.is_some_and(|e| {
                    (!e.organisation.is_empty()
                        && e.organisation
                            .trim()
                            .eq_ignore_ascii_case(c.recipient.trim()))
                        || e.addresses.iter().any(|a| address::canonical(a) == who)
                });
            let covers = c
                .purposes
                .iter()
                .any(|p| p.trim() == "*" || address::label(p) == purpose);
            if !(names_it && covers) {
                continue;
            }
            match address::label(&c.kind).as_str() {
                "consent" => out.0 = true,
                "explicit" | "explicit_consent" => {
                    out.0 = true;
                    out.1 = true;
                }
                "authorization" => out.2 = true,
                _ => {}
            }
        }
        out
    }
}

/// The content of a disclosure: every content parameter's scalar text, and the
/// earlier calls whose outputs the plan links into a content parameter.
fn content_of(
    d: &knox_policy::manifest::Disclosure,
    action: &Action,
    expected: Option<&ExpectedCall>,
) -> (Vec<String>, BTreeSet<u32>) {
    let mut content = Vec::new();
    let mut linked = BTreeSet::new();
    for name in &d.content {
        let Some(v) = action.params.get(name) else {
            continue;
        };
        scalars(v, &mut content);
        if let Some(ParamConstraint::FromOutput { call, .. }) = expected
            .and_then(|e| e.constraints.as_ref())
            .and_then(|c| c.get(name))
        {
            linked.insert(*call);
        }
    }
    (content, linked)
}

/// The recipients of a disclosure: every address in its recipient parameters (split
/// at `,` and `;`), else the public for a public audience, else an implicit party of
/// the tool; once each, with what the directory says of their consent to `purpose`.
fn recipients(
    tool: &ToolEntry,
    d: &knox_policy::manifest::Disclosure,
    action: &Action,
    dir: &Directory,
    purpose: &str,
    subject: &str,
) -> Vec<RecipientFacts> {
    let mut ids = Vec::new();
    for name in &d.recipient {
        let Some(v) = action.params.get(name) else {
            continue;
        };
        let mut raw = Vec::new();
        scalars(v, &mut raw);
        for r in raw {
            for part in r.split([',', ';']) {
                if !part.trim().is_empty() {
                    ids.push(dir.resolve(part));
                }
            }
        }
    }
    if ids.is_empty() {
        ids.push(if d.audience.as_deref() == Some("public") {
            party_facts("public", true, "public", "", "public", false, false)
        } else {
            unknown(&format!("implicit:{}", tool.name))
        });
    }
    let mut recipients: Vec<RecipientFacts> = Vec::new();
    for party in ids {
        if recipients.iter().any(|r| r.party.id == party.id) {
            continue;
        }
        let (consent, explicit_consent, authorization) = dir.consents(&party, purpose);
        let to_subject = party.role == "self" && subject == "user";
        recipients.push(RecipientFacts {
            party,
            consent,
            explicit_consent,
            authorization,
            to_subject,
        });
    }
    recipients
}

/// `φ` of `action` by `tool`, or `None` when the tool does not disclose.
///
/// `task` is the task the action belongs to (the expected call's, or the agent's
/// current one); `seen` the outputs the agent received before it, in order.
pub fn derive(
    tool: &ToolEntry,
    action: &Action,
    expected: Option<&ExpectedCall>,
    task: Option<u32>,
    dir: &Directory,
    seen: &[Seen<'_>],
) -> Option<InfoFlow> {
    let d = tool.annotations.discloses.as_ref()?;
    let mut info_types = BTreeSet::new();
    let mut subjects = BTreeSet::new();
    let mut sources = Vec::new();
    if !d.carries.is_empty() {
        info_types.extend(d.carries.iter().map(|t| info_name(*t)));
        subjects.insert("user");
        sources.push("tool".to_string());
    }
    let (content, linked) = content_of(d, action, expected);
    // The content as the normalised comparison reads it (each content value one part,
    // so a value split across parameters is found too).
    let parts: Vec<(String, Value)> = content
        .iter()
        .enumerate()
        .map(|(i, c)| (i.to_string(), Value::String(c.clone())))
        .collect();
    let parts: Vec<(&str, &Value)> = parts.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let candidates = knox_policy::content::candidates(&parts);
    // Asked only when something was heard elsewhere and provenance did not decide (no
    // cost on other disclosures).
    let composed = seen.iter().any(|s| s.heard && s.carried.is_none())
        && action
            .params
            .iter()
            .any(|(n, v)| !knox_policy::dataflow::fixed(n, v, expected));
    for s in seen {
        let Some(labels) = s.labels.filter(|l| !l.info_types.is_empty()) else {
            continue;
        };
        let reaches = match s.carried {
            Some(carried) => carried,
            None => s.heard && composed,
        } || linked.contains(&s.position)
            || occurs(s.output, &content)
            || normalized_occurs(s.output, &candidates);
        if reaches {
            info_types.extend(labels.info_types.iter().map(|t| info_name(*t)));
            subjects.insert(subject_name(labels.subject));
            sources.push(s.node.to_string());
        }
    }
    let subject = match (subjects.len(), subjects.first()) {
        (0, _) => "unknown",
        (1, Some(s)) => s,
        _ => "mixed",
    };
    let ctx = dir.task(task);
    let purpose = ctx.map_or_else(|| "unspecified".to_string(), |c| address::label(&c.purpose));
    let sender = ctx.map_or_else(|| unknown("unknown"), |c| dir.resolve(&c.sender));
    let recipients = recipients(tool, d, action, dir, &purpose, subject);
    Some(InfoFlow {
        tool: tool.name.clone(),
        sender,
        recipients,
        subject: subject.to_string(),
        info_types,
        purpose,
        sources,
    })
}

/// The text of the content parameters of a disclosing `action` (what a judge reads).
/// `φ` of handing `tool`'s output to the operator of a remote model at `endpoint`:
/// the output's declared labels (`returns`) as its information types and subject, the
/// task's sender and purpose, and the operator resolved through the directory (an
/// endpoint nobody listed is `unknown`). `None` when the output carries no labelled
/// information type.
pub fn egress(
    tool: &ToolEntry,
    task: Option<u32>,
    dir: &Directory,
    endpoint: &str,
) -> Option<InfoFlow> {
    let labels = tool
        .annotations
        .returns
        .as_ref()
        .filter(|l| !l.info_types.is_empty())?;
    let subject = subject_name(labels.subject);
    let ctx = dir.task(task);
    let purpose = ctx.map_or_else(|| "unspecified".to_string(), |c| address::label(&c.purpose));
    let sender = ctx.map_or_else(|| unknown("unknown"), |c| dir.resolve(&c.sender));
    let party = dir.resolve(endpoint);
    let (consent, explicit_consent, authorization) = dir.consents(&party, &purpose);
    let to_subject = party.role == "self" && subject == "user";
    Some(InfoFlow {
        tool: tool.name.clone(),
        sender,
        recipients: vec![RecipientFacts {
            party,
            consent,
            explicit_consent,
            authorization,
            to_subject,
        }],
        subject: subject.to_string(),
        info_types: labels.info_types.iter().map(|t| info_name(*t)).collect(),
        purpose,
        sources: vec!["returns".into()],
    })
}

fn subject_name(s: Subject) -> &'static str {
    match s {
        Subject::User => "user",
        Subject::ThirdParty => "third_party",
        Subject::Mixed => "mixed",
    }
}

pub fn content_text(tool: &ToolEntry, action: &Action) -> String {
    let mut parts = Vec::new();
    if let Some(d) = &tool.annotations.discloses {
        for name in &d.content {
            if let Some(v) = action.params.get(name) {
                scalars(v, &mut parts);
            }
        }
    }
    parts.join("\n")
}

/// The snake-case name of an information type.
pub fn info_name(t: knox_policy::manifest::InfoType) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn scalars(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|x| scalars(x, out)),
        Value::Object(m) => m.values().for_each(|x| scalars(x, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

/// Whether some value of `output` (at least [`MIN_MATCH_LEN`] characters) occurs as a
/// token in the content.
fn occurs(output: &Value, content: &[String]) -> bool {
    if content.is_empty() {
        return false;
    }
    let mut leaves = Vec::new();
    scalars(output, &mut leaves);
    leaves.iter().any(|leaf| {
        let leaf = leaf.trim();
        leaf.chars().count() >= MIN_MATCH_LEN
            && content
                .iter()
                .any(|c| knox_policy::dataflow::contains_token(c, leaf))
    })
}

/// Whether some value of `output` reaches the content after normalisation: case,
/// confusables, zero-width and other invisible characters, whitespace, values split
/// across parameters, base64, hex and URL encodings ([`knox_policy::content`]).
fn normalized_occurs(output: &Value, candidates: &[knox_policy::content::Candidate]) -> bool {
    if candidates.is_empty() {
        return false;
    }
    let items = knox_policy::content::Items::new(knox_policy::content::items(output), Vec::new());
    knox_policy::content::reaches(&items, candidates).is_some()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use knox_types::regulation::ConsentRecord;
    use serde_json::json;

    fn manifest() -> knox_policy::ToolkitManifest {
        knox_policy::shipped::current().unwrap()
    }

    fn ctx() -> RegulationContext {
        RegulationContext {
            directory: vec![
                DirectoryEntry {
                    addresses: vec!["Dr.Lee@StMary.example".into()],
                    domains: vec![],
                    role: "Health Care Provider".into(),
                    organisation: "St Mary".into(),
                    jurisdiction: "US".into(),
                    baa: false,
                    safeguards: false,
                },
                DirectoryEntry {
                    addresses: vec![],
                    domains: vec!["clinic.example".into()],
                    role: "covered_entity".into(),
                    organisation: "Clinic".into(),
                    jurisdiction: "us".into(),
                    baa: false,
                    safeguards: false,
                },
            ],
            consents: vec![ConsentRecord {
                recipient: "St Mary".into(),
                purposes: vec!["treatment".into()],
                kind: "authorization".into(),
            }],
            tasks: [(
                0,
                TaskContext {
                    sender: "records@clinic.example".into(),
                    purpose: "Treatment".into(),
                },
            )]
            .into(),
            default_task: None,
            obligations: Default::default(),
        }
    }

    #[test]
    fn labels_reach_an_email_through_its_content_and_recipients_resolve() {
        let m = manifest();
        let read = m.tool("EpicFHIRGetPatientDetails").unwrap();
        let send = m.tool("GmailSendEmail").unwrap();
        let out = json!({"patient_data": {"name": "Jane Doe", "conditions": ["Hypertension"]}});
        let seen = [Seen {
            node: 9,
            position: 0,
            labels: read.annotations.returns.as_ref(),
            output: &out,
            heard: false,
            carried: None,
        }];
        let a = Action::new(
            "GmailSendEmail",
            json!({"to": "dr.lee@stmary.example, x@y.example", "subject": "Referral",
                   "body": "Patient Jane Doe, history of hypertension."}),
        )
        .unwrap();
        let dir = Directory::new(&ctx());
        let f = derive(send, &a, None, Some(0), &dir, &seen).unwrap();
        assert!(f.info_types.contains("health"), "{f:?}");
        assert_eq!(f.sources, ["9"]);
        assert_eq!(f.purpose, "treatment");
        assert_eq!(f.sender.role, "covered_entity");
        assert_eq!(f.recipients.len(), 2);
        let lee = &f.recipients[0];
        assert!(lee.party.listed && lee.party.role == "health_care_provider");
        assert!(lee.authorization && !lee.consent);
        let other = &f.recipients[1];
        assert!(!other.party.listed && other.party.role == "unknown");
        // Content that carries nothing of the output has no labels.
        let a = Action::new(
            "GmailSendEmail",
            json!({"to": "dr.lee@stmary.example", "subject": "Hi", "body": "See you Monday."}),
        )
        .unwrap();
        let f = derive(send, &a, None, Some(0), &dir, &seen).unwrap();
        assert!(f.info_types.is_empty() && f.subject == "unknown");
    }

    /// Issue 36, item 5: under provenance the labels a disclosure carries are those of
    /// the outputs its composed content carries, whatever that content looks like — a
    /// paraphrase with no value of the record in it still carries the record's labels,
    /// so the norms decide the referral.
    #[test]
    fn provenance_carries_labels_into_content_that_holds_no_value() {
        let m = manifest();
        let read = m.tool("EpicFHIRGetPatientDetails").unwrap();
        let send = m.tool("GmailSendEmail").unwrap();
        let out = json!({"patient_data": {"name": "Jane Doe", "conditions": ["Hypertension"]}});
        let seen = |carried| {
            [Seen {
                node: 9,
                position: 0,
                labels: read.annotations.returns.as_ref(),
                output: &out,
                heard: false,
                carried,
            }]
        };
        let a = Action::new(
            "GmailSendEmail",
            json!({"to": "dr.lee@stmary.example", "subject": "Referral",
                   "body": "Our patient has raised blood pressure; please see her this week."}),
        )
        .unwrap();
        let dir = Directory::new(&ctx());
        let by_content = derive(send, &a, None, Some(0), &dir, &seen(None)).unwrap();
        assert!(by_content.info_types.is_empty(), "{by_content:?}");
        let carried = derive(send, &a, None, Some(0), &dir, &seen(Some(true))).unwrap();
        assert!(carried.info_types.contains("health"), "{carried:?}");
        assert_eq!(carried.sources, ["9"]);
        // Content the plan fixed carries nothing by provenance; what it visibly holds
        // still counts.
        let planned = derive(send, &a, None, Some(0), &dir, &seen(Some(false))).unwrap();
        assert!(planned.info_types.is_empty(), "{planned:?}");
        let named = Action::new(
            "GmailSendEmail",
            json!({"to": "dr.lee@stmary.example", "subject": "Referral",
                   "body": "Jane Doe, hypertension."}),
        )
        .unwrap();
        let f = derive(send, &named, None, Some(0), &dir, &seen(Some(false))).unwrap();
        assert!(f.info_types.contains("health"), "{f:?}");
    }

    #[test]
    fn labels_reach_content_that_hides_the_value() {
        // Issue 15, class 5: PHI as base64, with zero-width characters inside words, in
        // confusable letters, or split across subject and body reached no label before
        // (exact tokens only), so the verdict was `not_applicable`.
        use base64::Engine;
        let m = manifest();
        let read = m.tool("EpicFHIRGetPatientDetails").unwrap();
        let send = m.tool("GmailSendEmail").unwrap();
        let out = json!({"patient_data": {"name": "Jane Doe", "ssn": "078-05-1120",
                         "conditions": ["Hypertension"]}});
        let seen = [Seen {
            node: 9,
            position: 0,
            labels: read.annotations.returns.as_ref(),
            output: &out,
            heard: false,
            carried: None,
        }];
        let dir = Directory::new(&ctx());
        let b64 = base64::engine::general_purpose::STANDARD.encode("Jane Doe 078-05-1120");
        for (subject, body) in [
            ("Hi", b64.as_str()),
            ("Hi", "J\u{200b}ane D\u{200c}oe, hyper\u{200b}tension"),
            ("Hi", "\u{0406}\u{0430}ne Do\u{0435}: HYPER TENSION"),
            ("ssn 078-05", "-1120 thanks"),
            ("Hi", "30373830353131323"),
        ] {
            let a = Action::new(
                "GmailSendEmail",
                json!({"to": "x@y.example", "subject": subject, "body": body}),
            )
            .unwrap();
            let f = derive(send, &a, None, Some(0), &dir, &seen).unwrap();
            let old = occurs(&out, &[subject.to_string(), body.to_string()]);
            if body == "30373830353131323" {
                // Not valid hex of anything in the output: nothing reaches.
                assert!(f.info_types.is_empty(), "{body}: {f:?}");
                continue;
            }
            assert!(!old, "the exact-token match missed it before: {body}");
            assert!(f.info_types.contains("health"), "{body}: {f:?}");
            assert_eq!(f.sources, ["9"]);
        }
    }

    #[test]
    fn the_example_context_parses() {
        let c =
            context_from_toml(include_str!("../../../regulations/examples/clinic.toml")).unwrap();
        assert_eq!(c.tasks.get(&1).unwrap().purpose, "marketing");
        assert_eq!(c.directory.len(), 4);
        let dir = Directory::new(&c);
        let p = dir.resolve("someone@Lakeside-Cardiology.example");
        assert!(p.listed && p.role == "health_care_provider");
        assert!(context_from_toml("[tasks.x]\nsender='a'\npurpose='b'").is_err());
        assert!(context_from_toml("bogus = 1").is_err());
    }

    #[test]
    fn implicit_content_and_public_audiences() {
        let m = manifest();
        let share = m.tool("The23andMeShareData").unwrap();
        let a = Action::new("The23andMeShareData", json!({"app_id": "genealogy_app"})).unwrap();
        let f = derive(share, &a, None, None, &Directory::default(), &[]).unwrap();
        assert!(f.info_types.contains("genetic") && f.subject == "user");
        assert_eq!(f.recipients[0].party.id, "genealogy_app");
        assert_eq!(f.purpose, "unspecified");
        let tweet = m.tool("TwitterManagerPostTweet").unwrap();
        let a = Action::new("TwitterManagerPostTweet", json!({"content": "hello world"})).unwrap();
        let f = derive(tweet, &a, None, None, &Directory::default(), &[]).unwrap();
        assert_eq!(f.recipients[0].party.id, "public");
        assert!(
            derive(
                m.tool("GmailSearchEmails").unwrap(),
                &a,
                None,
                None,
                &Directory::default(),
                &[]
            )
            .is_none()
        );
    }
}
