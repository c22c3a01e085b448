//! `knox eval --guard regulation-cases`: the regulation norms on public, labelled
//! cases — GoldCoin's HIPAA cases (`data/privacy/goldcoin/`, train and validation
//! splits) — mapped to φ by a fixed rule from their structured contextual-integrity
//! fields only (never the prose), and decided by the embedded policy set with no judge.
//!
//! **The mapping** (decided before scoring, applied to every case alike; documented in
//! `docs/regulation.md`, "Evaluation on labelled cases"):
//!
//! - every field is read through the vocabulary as the decision API reads a string
//!   (`knox_regulation::vocab`: the key, stated absence, then the phrase — lemmas,
//!   stop words, runs of words that are keys): a *role* is the head of the phrase (the
//!   last word before its first post-modifier, a comma or a parenthesis: "Family
//!   Physician" is a physician, "Caseworker at the unemployment agency" a
//!   caseworker), a *purpose* the most specific run (the longest, the leftmost of
//!   equally long ones; a generic one — a request, a review — only when alone), the
//!   *information types* every run the field does not exclude; a value that states
//!   absence ("None", "N/A", "Not specified") is *not stated* (`unknown` role,
//!   `unspecified` purpose, no type); a value that names nothing known is an *unknown
//!   term*, reported with its field and counted, and the field *unmapped*;
//! - a holder's workforce acts for it (45 CFR 160.103): an `employee` or `agent` head
//!   with a covered entity or business associate term anywhere in the phrase
//!   ("Hospital Employee", "Office staff at ABC Medical Clinic") is that holder;
//! - `Sender Role` → sender role, `Recipient Role` → recipient role, `About Role` →
//!   subject role, `Type` → information types, `Purpose` → purpose;
//! - conditions: every vocabulary condition a run of words names in `Purpose`, `In
//!   Reply To`, `Belief`, `Consented By`, `Type` or `About Role`, but those the field
//!   excludes ("no court order");
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
//! A case is *unmappable* when its characteristics are missing, its sender role,
//! recipient role or type is an unknown term, it states no type, or it states neither
//! role; it is still decided and counted.
//!
//! **The scores** ([`SplitScore`]): compliance on the `Permit` / `Forbid` cases and
//! every case with its three labels, each *strict* (`not_applicable` is wrong) and
//! *lenient* (`not_applicable` counts as a permit), accuracy and balanced accuracy
//! (the mean of each label's recall), against the majority class; violations caught,
//! permits allowed; the unknown terms and the fields not stated.

use std::collections::BTreeSet;

use knox_regulation::phi::{Party, Phi};
use knox_regulation::vocab::{
    AGENT, NOT_STATED_PURPOSE, NOT_STATED_ROLE, Reading, TermKind, UnknownTerm, Vocabulary, key,
};
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
    parse_lines(text)
}

/// Parses JSON Lines, a value per non-blank line.
pub fn parse_lines<T: serde::de::DeserializeOwned>(text: &str) -> Result<Vec<T>, EvalError> {
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
    /// Fields whose value names nothing the vocabulary defines (or `characteristics`
    /// when the case has none).
    pub unmapped: Vec<String>,
    /// The unknown terms, by field.
    pub unknown: Vec<UnknownTerm>,
    /// Fields that state that nothing is given ("None", "N/A", "Not specified", or
    /// missing).
    pub not_stated: Vec<String>,
    /// Whether sender and recipient were swapped (the recipient holds the PHI).
    pub swapped: bool,
}

impl Mapped {
    /// Whether a field the decision needs maps to nothing: the characteristics are
    /// missing, the sender role, recipient role or type is unknown, no type is stated,
    /// or neither role is.
    pub fn unmappable(&self) -> bool {
        let in_ = |l: &[String], f: &str| l.iter().any(|x| x == f);
        ["characteristics", "Sender Role", "Recipient Role", "Type"]
            .iter()
            .any(|f| in_(&self.unmapped, f))
            || in_(&self.not_stated, "Type")
            || (in_(&self.not_stated, "Sender Role") && in_(&self.not_stated, "Recipient Role"))
    }
}

/// The role a phrase names ([`Vocabulary::read`]: its head) — except that a holder's
/// workforce ("Hospital Employee", "Employee of the clinic", "Office staff at ABC
/// Medical Clinic") acts for the holder (45 CFR 160.103, *workforce*: employees,
/// volunteers, trainees and other persons whose conduct is under the covered entity's
/// direct control), so an `employee` or `agent` head with a holder term anywhere in the
/// phrase is that holder.
fn role_of<'v>(v: &'v Vocabulary, text: &str) -> Reading<'v> {
    match v.read(TermKind::Role, text) {
        Reading::Term(t) if t == "employee" || t == AGENT => {
            let holder = v
                .runs(TermKind::Role, text)
                .into_iter()
                .rev()
                .find(|r| HOLDERS.contains(&r.term));
            Reading::Term(holder.map_or(t, |r| r.term))
        }
        r => r,
    }
}

/// [`role_of`], except for two ways a role field states no role: it gives a name — one
/// of the case's parties (`Sender`, `Recipient`, `About`), or an acronym (a single word
/// in capitals the vocabulary does not know, "JHR") — which is *not stated*; and an
/// adjective phrase that describes the party by its task ("Responsible for processing
/// workers' compensation claims", "in charge of …") has no head noun, so it names the
/// last role its complement names.
fn unnamed_role<'v>(
    v: &'v Vocabulary,
    ch: &std::collections::BTreeMap<String, String>,
    text: &str,
) -> Reading<'v> {
    let reading = role_of(v, text);
    if !matches!(reading, Reading::Unknown) {
        return reading;
    }
    let k = key(text);
    let a_party = ["Sender", "Recipient", "About"]
        .iter()
        .any(|f| ch.get(*f).is_some_and(|n| key(n) == k));
    let acronym = !text.trim().contains(char::is_whitespace)
        && (2..=6).contains(&text.trim().len())
        && text.trim().chars().all(|c| c.is_ascii_uppercase());
    if a_party || acronym {
        return Reading::NotStated;
    }
    let task = [
        "responsible_for_",
        "in_charge_of_",
        "tasked_with_",
        "charged_with_",
    ]
    .iter()
    .find_map(|p| k.strip_prefix(p));
    match task.and_then(|rest| v.runs(TermKind::Role, rest).into_iter().last()) {
        Some(r) => Reading::Term(r.term),
        None => reading,
    }
}

/// Whether a field says nothing (`None`, `N/A`, `not specified`, `none (…)`, `not
/// given`, `no`): the consent rule's reading.
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
    let mut unknown = Vec::new();
    let mut not_stated = Vec::new();
    let empty = std::collections::BTreeMap::new();
    let ch = case.characteristics.as_ref().unwrap_or_else(|| {
        unmapped.push("characteristics".to_string());
        &empty
    });
    let field = |name: &str| ch.get(name).map_or("", |s| s.trim());
    // How a field read: its terms, or the field recorded as unknown or not stated.
    let mut note = |name: &str, kind: TermKind, reading: Reading<'_>| -> Vec<String> {
        match reading {
            Reading::Term(t) => vec![t.to_string()],
            Reading::Terms(ts) => ts.into_iter().map(str::to_string).collect(),
            Reading::NotStated => {
                not_stated.push(name.to_string());
                vec![]
            }
            Reading::Unknown => {
                unmapped.push(name.to_string());
                unknown.push(UnknownTerm {
                    kind: kind.as_str(),
                    field: name.to_string(),
                    term: field(name).to_string(),
                });
                vec![]
            }
        }
    };
    let mut role = |name: &str| {
        let t = note(name, TermKind::Role, unnamed_role(v, ch, field(name)));
        match t.into_iter().next() {
            Some(t) if t == NOT_STATED_ROLE => {
                note(name, TermKind::Role, Reading::NotStated);
                t
            }
            Some(t) => t,
            None => NOT_STATED_ROLE.to_string(),
        }
    };
    let mut sender_role = role("Sender Role");
    let mut recipient_role = role("Recipient Role");
    let subject_role = role("About Role");
    let info_types = note(
        "Type",
        TermKind::InfoType,
        v.read(TermKind::InfoType, field("Type")),
    );
    let purpose = match note(
        "Purpose",
        TermKind::Purpose,
        v.read(TermKind::Purpose, field("Purpose")),
    )
    .into_iter()
    .next()
    {
        Some(t) if t == NOT_STATED_PURPOSE => {
            note("Purpose", TermKind::Purpose, Reading::NotStated);
            t
        }
        Some(t) => t,
        None => NOT_STATED_PURPOSE.to_string(),
    };
    let mut conditions: BTreeSet<String> = BTreeSet::new();
    for f in [
        "Purpose",
        "In Reply To",
        "Belief",
        "Consented By",
        "Type",
        "About Role",
    ] {
        conditions.extend(
            v.every(TermKind::Condition, field(f))
                .into_iter()
                .map(str::to_string),
        );
    }
    let about = field("About");
    let consented = field("Consented By");
    // "Jane (declined)", "None (revoked)": no consent.
    let refused = v
        .every(TermKind::Condition, consented)
        .iter()
        .any(|c| *c == "objected" || *c == "consent_withdrawn");
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
            obligations: std::collections::BTreeMap::new(),
            regulations: vec!["HIPAA".into()],
            tool: "GoldCoin".into(),
        },
        unmapped,
        unknown,
        not_stated,
        swapped,
    }
}

/// Scores of one split.
///
/// *Compliance* reads the `Permit` and `Forbid` cases; *all cases* reads every case
/// with its three labels. *Strict*: a case is right only when decided as labelled
/// (`Permit` compliant, `Forbid` non-compliant, `Not Applicable` not applicable), so a
/// `not_applicable` verdict on a `Permit` or `Forbid` case is wrong. *Lenient*:
/// `not_applicable` counts as a permit (nothing forbids the flow), and so does the `Not
/// Applicable` label: a case is right when it is forbidden exactly when labelled
/// `Forbid`. *Balanced*: the mean of each label's recall (a constant answer scores
/// 1 / the number of labels). *Majority*: the accuracy of always answering the most
/// frequent label.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SplitScore {
    /// `train` or `validation`.
    pub split: String,
    /// Cases.
    pub cases: usize,
    /// Cases whose sender role, recipient role or type maps to nothing
    /// ([`Mapped::unmappable`]).
    pub unmappable: usize,
    /// Fields (`Sender Role`, `Recipient Role`, `About Role`, `Purpose`, `Type`) whose
    /// value names nothing the vocabulary defines.
    pub unknown_terms: usize,
    /// Those values, distinct, with their field.
    pub unknown: Vec<String>,
    /// Fields of the same five that state that nothing is given ("None", "N/A", "Not
    /// specified", missing).
    pub not_stated: usize,
    /// Applicability: cases decided right (applicable vs not applicable) / all.
    pub applicability_accuracy: f64,
    /// Applicability: mean recall of `Not Applicable` and of the others.
    pub applicability_balanced: f64,
    /// Applicability cases.
    pub applicability_cases: usize,
    /// Applicability: the majority class's accuracy.
    pub applicability_majority: f64,
    /// All cases, strict: decided exactly as labelled / all.
    pub all_strict: f64,
    /// All cases, lenient: forbidden exactly when labelled `Forbid` / all.
    pub all_lenient: f64,
    /// All cases, strict, balanced over the three labels.
    pub all_balanced: f64,
    /// All cases, lenient, balanced over forbidden and not forbidden.
    pub all_balanced_lenient: f64,
    /// All cases: the most frequent label's share.
    pub all_majority: f64,
    /// All cases, lenient: the larger of `Forbid` and the rest, as a share.
    pub all_majority_lenient: f64,
    /// `Not Applicable` cases.
    pub not_applicable: usize,
    /// `Not Applicable` cases decided not applicable / `Not Applicable` cases.
    pub not_applicable_recognised: f64,
    /// Compliance (Permit / Forbid cases), strict: decided right / all
    /// (`not_applicable` is wrong).
    pub compliance_accuracy: f64,
    /// Compliance, lenient: `not_applicable` counts as a permit.
    pub compliance_lenient: f64,
    /// Compliance, strict, balanced: the mean of violations caught and permits
    /// allowed.
    pub compliance_balanced: f64,
    /// Compliance, lenient, balanced.
    pub compliance_balanced_lenient: f64,
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
    /// Permit cases decided compliant or not applicable / Permit cases.
    pub permits_allowed_lenient: f64,
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
    let mut outcomes = Vec::with_capacity(cases.len());
    let (mut unmappable, mut unknown_terms, mut not_stated) = (0, 0, 0);
    let mut unknown = BTreeSet::new();
    for case in cases {
        let mapped = map_case(v, case);
        unmappable += usize::from(mapped.unmappable());
        unknown_terms += mapped.unknown.len();
        unknown.extend(
            mapped
                .unknown
                .iter()
                .map(|u| format!("{}: {}", u.field, u.term)),
        );
        not_stated += mapped.not_stated.len();
        let decision = norms
            .decide_phi(&mapped.phi, false)
            .map_err(|e| EvalError::Invalid(format!("{split} row {}: {e}", case.row)))?;
        let verdict = decision.verdict.clone();
        outcomes.push(CaseOutcome {
            split: split.to_string(),
            row: case.row,
            label: case.label.clone(),
            right: wanted(split, case.row, &case.label)? == verdict,
            verdict,
            mapped,
            decision,
        });
    }
    let labelled: Vec<(&str, &str)> = outcomes
        .iter()
        .map(|o| (o.label.as_str(), o.verdict.as_str()))
        .collect();
    let mut s = score(split, &labelled)?;
    s.unmappable = unmappable;
    s.unknown_terms = unknown_terms;
    s.unknown = unknown.into_iter().collect();
    s.not_stated = not_stated;
    Ok((s, outcomes))
}

/// The verdict label `label` asks for: `Permit` compliant, `Forbid` non-compliant,
/// `Not Applicable` not applicable.
fn wanted(split: &str, row: usize, label: &str) -> Result<&'static str, EvalError> {
    match label {
        "Permit" => Ok("compliant"),
        "Forbid" => Ok("non_compliant"),
        "Not Applicable" => Ok("not_applicable"),
        other => Err(EvalError::Invalid(format!(
            "{split} row {row}: unknown label `{other}`"
        ))),
    }
}

/// The scores of `split` from its cases' `(label, verdict)` pairs (the fields about
/// the mapping — unmappable, unknown terms, not stated — are left at zero).
pub fn score(split: &str, labelled: &[(&str, &str)]) -> Result<SplitScore, EvalError> {
    let mut s = SplitScore {
        split: split.to_string(),
        cases: labelled.len(),
        ..SplitScore::default()
    };
    // Per label (Permit, Forbid, Not Applicable): cases, decided exactly so, decided
    // not forbidden.
    let mut n = [0usize; 3];
    let mut exact = [0usize; 3];
    let mut not_forbidden = [0usize; 3];
    let mut applicable_right = 0;
    for (i, (label, verdict)) in labelled.iter().enumerate() {
        let want = wanted(split, i, label)?;
        let label = match want {
            "compliant" => 0,
            "non_compliant" => 1,
            _ => 2,
        };
        let applicable = *verdict != "not_applicable";
        if let (Some(n), Some(e), Some(f)) = (
            n.get_mut(label),
            exact.get_mut(label),
            not_forbidden.get_mut(label),
        ) {
            *n += 1;
            *e += usize::from(*verdict == want);
            *f += usize::from(*verdict != "non_compliant");
        }
        applicable_right += usize::from(applicable == (label != 2));
        if label != 2 {
            s.compliance_not_applicable += usize::from(!applicable);
        }
    }
    let [permit, forbid, na] = n;
    let [permit_right, forbid_right, na_right] = exact;
    let [permit_free, _, na_free] = not_forbidden;
    let all = labelled.len();
    s.permit = permit;
    s.forbid = forbid;
    s.not_applicable = na;
    s.applicability_cases = all;
    s.compliance_cases = permit + forbid;
    let mean = |r: &[f64]| {
        #[expect(clippy::cast_precision_loss, reason = "two or three labels")]
        let k = r.len() as f64;
        r.iter().sum::<f64>() / k
    };
    // Applicability.
    s.applicability_accuracy = ratio(applicable_right, all);
    s.applicability_balanced = mean(&[
        ratio(na_right, na),
        ratio(
            s.compliance_cases - s.compliance_not_applicable,
            s.compliance_cases,
        ),
    ]);
    s.applicability_majority = ratio(na.max(s.compliance_cases), all);
    // Compliance.
    s.violations_caught = ratio(forbid_right, forbid);
    s.permits_allowed = ratio(permit_right, permit);
    s.permits_allowed_lenient = ratio(permit_free, permit);
    s.compliance_accuracy = ratio(permit_right + forbid_right, s.compliance_cases);
    s.compliance_lenient = ratio(permit_free + forbid_right, s.compliance_cases);
    s.compliance_balanced = mean(&[s.violations_caught, s.permits_allowed]);
    s.compliance_balanced_lenient = mean(&[s.violations_caught, s.permits_allowed_lenient]);
    s.compliance_majority = ratio(permit.max(forbid), s.compliance_cases);
    // All cases.
    s.not_applicable_recognised = ratio(na_right, na);
    s.all_strict = ratio(permit_right + forbid_right + na_right, all);
    s.all_lenient = ratio(permit_free + forbid_right + na_free, all);
    s.all_balanced = mean(&[
        s.permits_allowed,
        s.violations_caught,
        s.not_applicable_recognised,
    ]);
    s.all_balanced_lenient = mean(&[
        s.violations_caught,
        ratio(permit_free + na_free, permit + na),
    ]);
    s.all_majority = ratio(permit.max(forbid).max(na), all);
    s.all_majority_lenient = ratio(forbid.max(permit + na), all);
    Ok(s)
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
    report_of(scores, "judge off")
}

/// The summary as Markdown, its title saying how the facts were read (`how`).
pub fn report_of(scores: &[SplitScore], how: &str) -> String {
    let mut out = format!("# Regulation guard on labelled cases (GoldCoin HIPAA, {how})\n\n");
    out.push_str(
        "\
         Strict: a case is right only when decided as labelled (`not_applicable` on a \
         Permit or Forbid case is wrong). Lenient: `not_applicable` counts as a permit. \
         Balanced: the mean of each label's recall. Majority: always the most frequent \
         label.\n\n\
         ## Compliance (Permit and Forbid cases)\n\n\
         | split | cases | strict (majority) | lenient | balanced strict / lenient | violations caught | permits allowed strict / lenient | decided not applicable |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for s in scores {
        out.push_str(&format!(
            "| {} | {} | {:.3} ({:.3}) | {:.3} | {:.3} / {:.3} | {} / {} | {} / {} of {} | {} |\n",
            s.split,
            s.compliance_cases,
            s.compliance_accuracy,
            s.compliance_majority,
            s.compliance_lenient,
            s.compliance_balanced,
            s.compliance_balanced_lenient,
            count(s.violations_caught, s.forbid),
            s.forbid,
            count(s.permits_allowed, s.permit),
            count(s.permits_allowed_lenient, s.permit),
            s.permit,
            s.compliance_not_applicable,
        ));
    }
    out.push_str(
        "\n## All cases (Permit, Forbid, Not Applicable)\n\n\
         | split | cases | strict (majority) | lenient (majority) | balanced strict / lenient | applicability (majority) | applicability balanced | not applicable recognised |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for s in scores {
        out.push_str(&format!(
            "| {} | {} | {:.3} ({:.3}) | {:.3} ({:.3}) | {:.3} / {:.3} | {:.3} ({:.3}) | {:.3} | {} / {} |\n",
            s.split,
            s.cases,
            s.all_strict,
            s.all_majority,
            s.all_lenient,
            s.all_majority_lenient,
            s.all_balanced,
            s.all_balanced_lenient,
            s.applicability_accuracy,
            s.applicability_majority,
            s.applicability_balanced,
            count(s.not_applicable_recognised, s.not_applicable),
            s.not_applicable,
        ));
    }
    out.push_str(
        "\n## Mapping (Sender Role, Recipient Role, About Role, Purpose, Type)\n\n\
         | split | unknown terms | not stated | unmappable cases |\n\
         |---|---|---|---|\n",
    );
    for s in scores {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            s.split, s.unknown_terms, s.not_stated, s.unmappable
        ));
    }
    for s in scores.iter().filter(|s| !s.unknown.is_empty()) {
        out.push_str(&format!("\nUnknown terms, {}:\n\n", s.split));
        for u in &s.unknown {
            out.push_str(&format!("- {u}\n"));
        }
    }
    out
}

/// The count a share of `n` stands for.
fn count(share: f64, n: usize) -> usize {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a share of a case count"
    )]
    let c = (share * n as f64).round() as usize;
    c
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
        // A case with nothing HIPAA knows of is not applicable: its parties and
        // information are read (a copyright holder is a business, films intellectual
        // property), none of them a holder or health information.
        let c = case(
            "Not Applicable",
            &[
                ("Sender Role", "Copyright Holder"),
                ("Recipient Role", "Court"),
                ("About Role", "None"),
                ("Type", "Copyrighted Films"),
            ],
        );
        let m = map_case(n.vocabulary(), &c);
        assert!(!m.unmappable() && m.unknown.is_empty(), "{m:?}");
        assert_eq!(m.phi.sender.role, "business");
        assert_eq!(m.phi.info_types, ["intellectual_property"]);
        assert_eq!(m.not_stated, ["About Role", "Purpose"]);
        assert_eq!(
            n.decide_phi(&m.phi, false).unwrap().verdict,
            "not_applicable"
        );
        // A value naming nothing known is an unknown term, reported by field and value.
        let c = case(
            "Not Applicable",
            &[
                ("Sender Role", "Astrologer"),
                ("Recipient Role", "Court"),
                ("Type", "Horoscope"),
            ],
        );
        let m = map_case(n.vocabulary(), &c);
        assert!(m.unmappable());
        assert_eq!(m.unmapped, ["Sender Role", "Type"]);
        assert_eq!(
            m.unknown.first().map(|u| u.term.as_str()),
            Some("Astrologer")
        );
    }

    #[test]
    fn a_holders_workforce_discloses_for_the_holder() {
        let n = Norms::embedded().unwrap();
        let v = n.vocabulary();
        let role = |s: &str| match role_of(v, s) {
            Reading::Term(t) => Some(t),
            _ => None,
        };
        assert_eq!(role("Hospital Employee"), Some("health_care_provider"));
        assert_eq!(
            role("Health Care Clearinghouse Employee"),
            Some("health_care_clearinghouse")
        );
        assert_eq!(role("Employee of the clinic"), Some("health_care_provider"));
        assert_eq!(
            role("Office Staff at ABC Medical Clinic"),
            Some("health_care_provider")
        );
        // An employee of no holder stays an employee; the head decides the rest.
        assert_eq!(role("Employee"), Some("employee"));
        assert_eq!(role("Employee of Sprint"), Some("employee"));
        assert_eq!(
            role("Doctor at the correctional institution"),
            Some("health_care_provider")
        );
        assert_eq!(role("Astrologer"), None);
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
            assert_eq!(v.every(TermKind::Condition, text), [want], "{text}");
        }
    }

    #[test]
    fn the_splits_parse_and_scores_count_every_case() {
        let n = Norms::embedded().unwrap();
        let val = parse_split(VALIDATION).unwrap();
        assert_eq!(val.len(), 40);
        let (s, o) = evaluate(&n, "validation", &val).unwrap();
        assert_eq!((s.permit, s.forbid, s.applicability_cases), (10, 10, 40));
        assert_eq!(s.not_applicable, 20);
        assert_eq!(o.len(), 40);
        assert!((s.compliance_majority - 0.5).abs() < 1e-9);
        assert!((s.all_majority - 0.5).abs() < 1e-9);
        assert!((s.all_majority_lenient - 0.75).abs() < 1e-9);
        // Lenient counts every not-applicable verdict on a Permit case as a permit, so
        // it is never below strict; balanced accuracy is the mean of two recalls.
        assert!(s.compliance_lenient >= s.compliance_accuracy);
        assert!(
            (s.compliance_balanced - (s.violations_caught + s.permits_allowed) / 2.0).abs() < 1e-9
        );
        // Every structured field of the validation split maps, or states absence.
        assert_eq!(s.unknown_terms, 0, "{:?}", s.unknown);
        let train = parse_split(TRAIN).unwrap();
        assert_eq!(train.len(), 618);
        assert_eq!(
            train.iter().filter(|c| c.label == "Forbid").count(),
            40,
            "the vendored train split"
        );
    }
}
