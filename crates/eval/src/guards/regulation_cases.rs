//! `knox eval --guard regulation-cases`: the regulation norms on public, labelled
//! cases — GoldCoin's HIPAA cases (`data/privacy/goldcoin/`, train and validation
//! splits) — mapped to φ by a fixed rule from their structured contextual-integrity
//! fields only (never the prose), and decided by the embedded policy set with no judge.
//!
//! **The mapping** (decided before scoring, applied to every case alike; documented in
//! `docs/regulation.md`, "Evaluation on labelled cases"):
//!
//! - every field is read as words (the vocabulary's normalisation key); a *role*,
//!   *purpose* or *information type* is a vocabulary term (or synonym) that occurs in
//!   the field as a run of 1–4 words, the longest at each place: for a role the last
//!   one outside parentheses (the head of the phrase: "Family Physician" is a
//!   physician), for a purpose the most specific (the longest run, the leftmost of
//!   equally long ones), for `Type` every one; nothing found is
//!   `unknown` (roles), `unspecified` (purpose) or no type, and the field is counted
//!   *unmapped*;
//! - a holder's workforce acts for it (45 CFR 160.103): `employee` after a covered
//!   entity or business associate term ("Hospital Employee") is that holder;
//! - `Sender Role` → sender role, `Recipient Role` → recipient role, `About Role` →
//!   subject role, `Type` → information types, `Purpose` → purpose;
//! - conditions: every vocabulary condition occurring in `Purpose`, `In Reply To`,
//!   `Belief`, `Consented By`, `Type` or `About Role`;
//! - who discloses: HIPAA regulates the party that holds the information. When the
//!   sender's role is not a covered entity or business associate and the recipient's
//!   is, the flow is the recipient's disclosure to the sender (the sender asked for
//!   it); `requested_by_subject` holds then when the sender is the subject;
//! - consent: `Consented By` names someone (it is not `None`, `N/A`, `not …`, and it
//!   does not say the consent was declined or revoked); it is a HIPAA authorization when it names the subject (the `About` person, or the words
//!   *patient* or *individual*) or says *authoriz…*;
//! - a party whose role is business associate is under a business associate
//!   agreement (45 CFR 160.103 defines it by that arrangement);
//! - to the subject: the recipient is the `About` person (same name) or has the role
//!   of patient while the subject does;
//! - the cases are HIPAA cases: they are decided under HIPAA.
//!
//! A case is *unmappable* when its characteristics are missing, or its sender role,
//! recipient role or type maps to nothing; it is still decided (on `unknown` terms)
//! and counted.

use std::collections::BTreeSet;

use knox_regulation::phi::{Party, Phi};
use knox_regulation::vocab::{TermKind, Vocabulary, key};
use knox_regulation::{FlowDecision, Norms};
use serde::{Deserialize, Serialize};

use crate::EvalError;

/// GoldCoin's HIPAA training split (applicability; its Permit / Forbid rows are the
/// compliance split).
pub const TRAIN: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/privacy/goldcoin/train_generate_cases_hipaa_applicability.jsonl"
));
/// GoldCoin's HIPAA validation split.
pub const VALIDATION: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../data/privacy/goldcoin/val_generate_cases_hipaa_applicability.jsonl"
));

/// Roles that hold protected health information under HIPAA (45 CFR 160.103).
const HOLDERS: [&str; 6] = [
    "covered_entity",
    "health_care_provider",
    "health_plan",
    "health_care_clearinghouse",
    "business_associate",
    "subcontractor",
];

/// Longest run of words looked up as one term.
const MAX_WORDS: usize = 4;

/// One labelled case.
#[derive(Clone, Debug, Deserialize)]
pub struct Case {
    /// Row in the source split.
    pub row: usize,
    /// `Permit`, `Forbid` or `Not Applicable`.
    pub label: String,
    /// The structured characteristics (`Sender`, `Sender Role`, …), as given.
    pub characteristics: Option<std::collections::BTreeMap<String, String>>,
}

/// Parses a split (JSON Lines).
pub fn parse_split(text: &str) -> Result<Vec<Case>, EvalError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(EvalError::from))
        .collect()
}

/// A case mapped to φ.
#[derive(Clone, Debug, Serialize)]
pub struct Mapped {
    /// The flow.
    pub phi: Phi,
    /// Fields that mapped to no vocabulary term.
    pub unmapped: Vec<String>,
    /// Whether sender and recipient were swapped (the recipient holds the PHI).
    pub swapped: bool,
}

impl Mapped {
    /// Whether a field the decision needs mapped to nothing.
    pub fn unmappable(&self) -> bool {
        self.unmapped.iter().any(|f| {
            ["characteristics", "Sender Role", "Recipient Role", "Type"].contains(&f.as_str())
        })
    }
}

/// The vocabulary terms of `kind` occurring in `text` as runs of words, leftmost
/// first, the longest run at each place: `(words in the run, term)`.
fn matches(v: &Vocabulary, kind: TermKind, text: &str) -> Vec<(usize, String)> {
    let k = key(text);
    let words: Vec<&str> = k.split('_').filter(|w| !w.is_empty()).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let mut step = 1;
        for n in (1..=MAX_WORDS.min(words.len() - i)).rev() {
            let Some(run) = words.get(i..i + n) else {
                continue;
            };
            if let Some(t) = v.term(kind, &run.join("_")) {
                out.push((n, t.to_string()));
                step = n;
                break;
            }
        }
        i += step;
    }
    out
}

/// The distinct terms of [`matches`], in order.
fn terms_in(v: &Vocabulary, kind: TermKind, text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, t) in matches(v, kind, text) {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// The most specific term: the longest run, the leftmost of equally long ones.
fn most_specific(v: &Vocabulary, kind: TermKind, text: &str) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for (n, t) in matches(v, kind, text) {
        if best.as_ref().is_none_or(|(b, _)| n > *b) {
            best = Some((n, t));
        }
    }
    best.map(|(_, t)| t)
}

/// The role a phrase names: its last role term — except that a holder's workforce
/// ("Hospital Employee", "Clearinghouse Staff Member") acts for the holder (45 CFR
/// 160.103, *workforce*: conduct under the covered entity's direct control), so an
/// `employee` after a holder term is that holder.
fn head_role(v: &Vocabulary, text: &str) -> Option<String> {
    let terms = terms_in(v, TermKind::Role, text);
    let last = terms.last()?;
    if last == "employee"
        && let Some(holder) = terms.iter().rev().find(|t| HOLDERS.contains(&t.as_str()))
    {
        return Some(holder.clone());
    }
    Some(last.clone())
}

/// `text` without its parenthesised parts.
fn without_parentheses(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether a field says nothing (`None`, `N/A`, `not specified`, `none (…)`).
fn absent(text: &str) -> bool {
    let k = key(text);
    k.is_empty()
        || ["none", "n_a", "na", "not", "no", "unknown", "unspecified"]
            .iter()
            .any(|w| k == *w || k.starts_with(&format!("{w}_")))
}

fn same_person(a: &str, b: &str) -> bool {
    let (a, b) = (key(a), key(b));
    !a.is_empty() && !absent(&a) && (a == b || a.split('_').next() == b.split('_').next())
}

/// Maps one case to φ by the fixed rule of the module documentation.
pub fn map_case(v: &Vocabulary, case: &Case) -> Mapped {
    let mut unmapped = Vec::new();
    let empty = std::collections::BTreeMap::new();
    let ch = case.characteristics.as_ref().unwrap_or_else(|| {
        unmapped.push("characteristics".to_string());
        &empty
    });
    let field = |name: &str| ch.get(name).map_or("", |s| s.trim());
    let role = |name: &str, unmapped: &mut Vec<String>| {
        let text = field(name);
        // The head of a noun phrase is its last word ("Family Physician" is a
        // physician); a parenthesis only qualifies it, unless it is all there is.
        let head = without_parentheses(text);
        let found = head_role(v, &head).or_else(|| head_role(v, text));
        match found {
            Some(t) => t,
            None => {
                if !absent(text) {
                    unmapped.push(name.to_string());
                }
                "unknown".to_string()
            }
        }
    };
    let mut sender_role = role("Sender Role", &mut unmapped);
    let mut recipient_role = role("Recipient Role", &mut unmapped);
    let subject_role = role("About Role", &mut unmapped);
    if ["Sender Role", "Recipient Role"]
        .iter()
        .all(|f| absent(field(f)))
    {
        // Neither role stated: nothing says who the parties are.
        unmapped.push("Sender Role".into());
    }
    let info_types = terms_in(v, TermKind::InfoType, field("Type"));
    if info_types.is_empty() {
        unmapped.push("Type".into());
    }
    let purpose = most_specific(v, TermKind::Purpose, field("Purpose")).unwrap_or_else(|| {
        if !absent(field("Purpose")) {
            unmapped.push("Purpose".into());
        }
        "unspecified".to_string()
    });
    let mut conditions: BTreeSet<String> = BTreeSet::new();
    for f in [
        "Purpose",
        "In Reply To",
        "Belief",
        "Consented By",
        "Type",
        "About Role",
    ] {
        conditions.extend(terms_in(v, TermKind::Condition, field(f)));
    }
    let about = field("About");
    let consented = field("Consented By");
    // "Jane (declined)", "None (revoked)": no consent.
    let refused = terms_in(v, TermKind::Condition, consented)
        .iter()
        .any(|c| c == "objected" || c == "consent_withdrawn");
    let consent = !absent(consented) && !refused;
    let authorization = consent
        && (same_person(consented, about)
            || key(consented).contains("authoriz")
            || ["patient", "individual"].iter().any(|w| {
                key(consented)
                    .split('_')
                    .any(|x| x == *w || x == format!("{w}s"))
            }));
    let mut sender = field("Sender");
    let mut recipient = field("Recipient");
    let swapped =
        !HOLDERS.contains(&sender_role.as_str()) && HOLDERS.contains(&recipient_role.as_str());
    if swapped {
        std::mem::swap(&mut sender_role, &mut recipient_role);
        std::mem::swap(&mut sender, &mut recipient);
        if same_person(recipient, about) || recipient_role == "patient" {
            conditions.insert("requested_by_subject".into());
        }
    }
    let to_subject = same_person(recipient, about)
        || (recipient_role == "patient" && subject_role == "patient" && !swapped);
    // A business associate is one by its arrangement with the covered entity
    // (45 CFR 160.103): a party the case calls so is under an agreement.
    let party = |role: String| Party {
        baa: role == "business_associate" || role == "subcontractor",
        role,
        jurisdiction: "us".into(),
        id: String::new(),
        listed: true,
        organisation: String::new(),
        safeguards: false,
    };
    Mapped {
        phi: Phi {
            id: Some(format!("row {}", case.row)),
            sender: party(sender_role),
            recipient: party(recipient_role),
            subject: "third_party".into(),
            subject_role,
            info_types,
            purpose,
            collected_for: "unspecified".into(),
            consent,
            explicit_consent: false,
            authorization,
            to_subject,
            conditions: conditions.into_iter().collect(),
            regulations: vec!["HIPAA".into()],
            tool: "GoldCoin".into(),
        },
        unmapped,
        swapped,
    }
}

/// Scores of one split.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SplitScore {
    /// `train` or `validation`.
    pub split: String,
    /// Cases.
    pub cases: usize,
    /// Cases whose sender role, recipient role or type mapped to nothing.
    pub unmappable: usize,
    /// Applicability: cases decided right (applicable vs not applicable) / all.
    pub applicability_accuracy: f64,
    /// Applicability cases.
    pub applicability_cases: usize,
    /// Applicability: the majority class's accuracy.
    pub applicability_majority: f64,
    /// Compliance (Permit / Forbid cases): decided right / all.
    pub compliance_accuracy: f64,
    /// Compliance cases.
    pub compliance_cases: usize,
    /// Compliance: the majority class's accuracy.
    pub compliance_majority: f64,
    /// Forbid cases decided non-compliant / Forbid cases.
    pub violations_caught: f64,
    /// Forbid cases.
    pub forbid: usize,
    /// Permit cases decided compliant / Permit cases.
    pub permits_allowed: f64,
    /// Permit cases.
    pub permit: usize,
    /// Permit or Forbid cases decided `not_applicable`.
    pub compliance_not_applicable: usize,
}

/// One case's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct CaseOutcome {
    /// Split.
    pub split: String,
    /// Row.
    pub row: usize,
    /// Label.
    pub label: String,
    /// The verdict.
    pub verdict: String,
    /// Whether it is right (applicability for Not Applicable cases, compliance else).
    pub right: bool,
    /// The mapped flow and what did not map.
    pub mapped: Mapped,
    /// The decision.
    pub decision: FlowDecision,
}

fn ratio(n: usize, d: usize) -> f64 {
    if d == 0 {
        0.0
    } else {
        #[expect(clippy::cast_precision_loss, reason = "case counts")]
        let r = n as f64 / d as f64;
        r
    }
}

/// Maps and decides every case of a split.
pub fn evaluate(
    norms: &Norms,
    split: &str,
    cases: &[Case],
) -> Result<(SplitScore, Vec<CaseOutcome>), EvalError> {
    let v = norms.vocabulary();
    let mut s = SplitScore {
        split: split.to_string(),
        cases: cases.len(),
        ..SplitScore::default()
    };
    let mut outcomes = Vec::with_capacity(cases.len());
    let (mut app_right, mut comp_right, mut caught, mut allowed) = (0, 0, 0, 0);
    let mut na = 0;
    for case in cases {
        let mapped = map_case(v, case);
        if mapped.unmappable() {
            s.unmappable += 1;
        }
        let decision = norms
            .decide_phi(&mapped.phi, false)
            .map_err(|e| EvalError::Invalid(format!("{split} row {}: {e}", case.row)))?;
        let verdict = decision.verdict.clone();
        let applicable = verdict != "not_applicable";
        let right = match case.label.as_str() {
            "Not Applicable" => {
                na += 1;
                !applicable
            }
            "Permit" => {
                s.permit += 1;
                let ok = verdict == "compliant";
                allowed += usize::from(ok);
                ok
            }
            "Forbid" => {
                s.forbid += 1;
                let ok = verdict == "non_compliant";
                caught += usize::from(ok);
                ok
            }
            other => {
                return Err(EvalError::Invalid(format!(
                    "{split} row {}: unknown label `{other}`",
                    case.row
                )));
            }
        };
        if case.label != "Not Applicable" {
            comp_right += usize::from(right);
            app_right += usize::from(applicable);
            s.compliance_not_applicable += usize::from(!applicable);
        } else {
            app_right += usize::from(right);
        }
        outcomes.push(CaseOutcome {
            split: split.to_string(),
            row: case.row,
            label: case.label.clone(),
            verdict,
            right,
            mapped,
            decision,
        });
    }
    s.applicability_cases = cases.len();
    s.compliance_cases = s.permit + s.forbid;
    s.applicability_accuracy = ratio(app_right, s.applicability_cases);
    s.applicability_majority = ratio(na.max(s.compliance_cases), s.applicability_cases);
    s.compliance_accuracy = ratio(comp_right, s.compliance_cases);
    s.compliance_majority = ratio(s.permit.max(s.forbid), s.compliance_cases);
    s.violations_caught = ratio(caught, s.forbid);
    s.permits_allowed = ratio(allowed, s.permit);
    Ok((s, outcomes))
}

/// Both splits of the vendored cases, decided by `norms`.
pub fn run(norms: &Norms) -> Result<(Vec<SplitScore>, Vec<CaseOutcome>), EvalError> {
    let mut scores = Vec::new();
    let mut all = Vec::new();
    for (name, text) in [("validation", VALIDATION), ("train", TRAIN)] {
        let (s, o) = evaluate(norms, name, &parse_split(text)?)?;
        scores.push(s);
        all.extend(o);
    }
    Ok((scores, all))
}

/// The summary as Markdown.
pub fn report(scores: &[SplitScore]) -> String {
    let mut out = String::from(
        "# Regulation guard on labelled cases (GoldCoin HIPAA, judge off)\n\n\
         | split | compliance acc. (majority) | violations caught | permits allowed | applicability acc. (majority) | unmappable |\n\
         |---|---|---|---|---|---|\n",
    );
    for s in scores {
        out.push_str(&format!(
            "| {} | {:.3} ({:.3}) of {} | {:.3} of {} | {:.3} of {} | {:.3} ({:.3}) of {} | {} |\n",
            s.split,
            s.compliance_accuracy,
            s.compliance_majority,
            s.compliance_cases,
            s.violations_caught,
            s.forbid,
            s.permits_allowed,
            s.permit,
            s.applicability_accuracy,
            s.applicability_majority,
            s.applicability_cases,
            s.unmappable
        ));
    }
    out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn case(label: &str, ch: &[(&str, &str)]) -> Case {
        Case {
            row: 0,
            label: label.into(),
            characteristics: Some(
                ch.iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn the_mapping_reads_structured_fields_through_the_vocabulary() {
        let n = Norms::embedded().unwrap();
        let c = case(
            "Permit",
            &[
                ("Sender", "Dr. Smith"),
                ("Sender Role", "Primary Care Physician"),
                ("Recipient", "Officer Jones"),
                ("Recipient Role", "Law Enforcement Official"),
                ("About", "John"),
                ("About Role", "Patient"),
                ("Type", "Protected Health Information (PHI), Name"),
                ("Purpose", "Law enforcement investigation"),
                ("In Reply To", "Court order"),
                ("Consented By", "None"),
                ("Belief", "None"),
            ],
        );
        let m = map_case(n.vocabulary(), &c);
        assert_eq!(m.phi.sender.role, "health_care_provider");
        assert_eq!(m.phi.recipient.role, "law_enforcement");
        assert_eq!(m.phi.info_types, ["health", "identity"]);
        assert_eq!(m.phi.purpose, "law_enforcement");
        assert_eq!(m.phi.conditions, ["court_order"]);
        assert!(!m.phi.consent && !m.unmappable());
        assert_eq!(n.decide_phi(&m.phi, false).unwrap().verdict, "compliant");
    }

    #[test]
    fn a_request_to_a_holder_is_the_holders_disclosure() {
        let n = Norms::embedded().unwrap();
        let c = case(
            "Permit",
            &[
                ("Sender", "Jane"),
                ("Sender Role", "Patient"),
                ("Recipient", "City Hospital"),
                ("Recipient Role", "Hospital"),
                ("About", "Jane"),
                ("About Role", "Patient"),
                ("Type", "Medical records"),
                ("Purpose", "Request for records"),
                ("Consented By", "Jane"),
            ],
        );
        let m = map_case(n.vocabulary(), &c);
        assert!(m.swapped);
        assert_eq!(m.phi.sender.role, "health_care_provider");
        assert!(m.phi.to_subject && m.phi.authorization);
        assert!(
            m.phi
                .conditions
                .contains(&"requested_by_subject".to_string())
        );
        // A case with nothing HIPAA knows of is not applicable, and unmappable.
        let c = case(
            "Not Applicable",
            &[
                ("Sender Role", "Copyright Holder"),
                ("Recipient Role", "Court"),
                ("Type", "Copyrighted Films"),
            ],
        );
        let m = map_case(n.vocabulary(), &c);
        assert!(m.unmappable());
        assert_eq!(
            n.decide_phi(&m.phi, false).unwrap().verdict,
            "not_applicable"
        );
    }

    #[test]
    fn a_holders_workforce_discloses_for_the_holder() {
        let n = Norms::embedded().unwrap();
        let v = n.vocabulary();
        assert_eq!(
            head_role(v, "Hospital Employee").as_deref(),
            Some("health_care_provider")
        );
        assert_eq!(
            head_role(v, "Health Care Clearinghouse Employee").as_deref(),
            Some("health_care_clearinghouse")
        );
        // An employee of no holder stays an employee.
        assert_eq!(head_role(v, "Employee").as_deref(), Some("employee"));
        assert_eq!(head_role(v, "Astrologer"), None);
    }

    #[test]
    fn a_stated_absence_of_objection_is_not_an_objection() {
        let n = Norms::embedded().unwrap();
        let v = n.vocabulary();
        for (text, want) in [
            ("Implied by Jane Doe's lack of objections", "agreed"),
            ("The patient did not object", "agreed"),
            ("Jane (no objections raised)", "agreed"),
            ("Jane objected to the disclosure", "objected"),
            ("Jane (declined)", "objected"),
        ] {
            assert_eq!(
                terms_in(v, TermKind::Condition, text),
                [want.to_string()],
                "{text}"
            );
        }
    }

    #[test]
    fn the_splits_parse_and_scores_count_every_case() {
        let n = Norms::embedded().unwrap();
        let val = parse_split(VALIDATION).unwrap();
        assert_eq!(val.len(), 40);
        let (s, o) = evaluate(&n, "validation", &val).unwrap();
        assert_eq!((s.permit, s.forbid, s.applicability_cases), (10, 10, 40));
        assert_eq!(o.len(), 40);
        assert!((s.compliance_majority - 0.5).abs() < 1e-9);
        let train = parse_split(TRAIN).unwrap();
        assert_eq!(train.len(), 618);
        assert_eq!(
            train.iter().filter(|c| c.label == "Forbid").count(),
            40,
            "the vendored train split"
        );
    }
}
