//! Obligations beside flows: what a regulation asks of the controller rather than of
//! one disclosure — a transparency notice given (GDPR art. 12–14), records of
//! processing kept (art. 30), a DPIA on file (art. 35), a DPO designated (art. 37), a
//! breach notified in time (art. 33), a HIPAA notice of privacy practices (45 CFR
//! 164.520), … They are facts of the regulation context, stated per obligation as
//! `met`, `unmet` or `not_required` (the last only where the regulation itself exempts
//! some controllers or situations).
//!
//! They never make a flow lawful: a flow the norms forbid stays non-compliant. They can
//! only take a permit away:
//!
//! - an obligation stated `unmet` makes every in-scope flow of its regulation
//!   non-compliant, citing the obligation's provision;
//! - a flow the norms permit under a regulation whose *required* obligations are not all
//!   stated is `not_applicable`, with a warning naming each one — Knox cannot tell a
//!   lawful flow from one of a controller that never informed its data subjects, so it
//!   says so instead of passing it silently.
//!
//! Each regulation's manifest lists its obligations (`[[obligation]]`: `name`,
//! `provision`, `summary`, `required`, `exemptible`).

use std::collections::BTreeMap;

use knox_types::regulation::RegulationDecision;
use serde::{Deserialize, Serialize};

use crate::vocab::{UnknownTerm, key};

/// One obligation as a manifest declares it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ObligationDef {
    pub(crate) name: String,
    pub(crate) provision: String,
    pub(crate) summary: String,
    pub(crate) required: bool,
    #[serde(default)]
    pub(crate) exemptible: bool,
}

/// An obligation of one regulation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Obligation {
    /// `<regulation>-obligation-<name>` (lower case): the id a decision cites.
    pub id: String,
    /// The name a context states it under (`transparency`, `dpia`, …).
    pub name: String,
    /// The provision it encodes.
    pub provision: String,
    /// One line for readers.
    pub summary: String,
    /// Whether a flow is decided `compliant` only when it is stated.
    pub required: bool,
    /// Whether `not_required` is an acceptable statement (the regulation exempts some
    /// controllers or situations).
    pub exemptible: bool,
}

impl Obligation {
    pub(crate) fn new(regulation: &str, d: ObligationDef) -> Result<Self, String> {
        if key(&d.name) != d.name || d.provision.trim().is_empty() {
            return Err(format!(
                "obligation `{}`: the name must be normalised (`{}`) and the provision set",
                d.name,
                key(&d.name)
            ));
        }
        Ok(Self {
            id: format!("{}-obligation-{}", regulation.to_ascii_lowercase(), d.name),
            name: d.name,
            provision: d.provision,
            summary: d.summary,
            required: d.required,
            exemptible: d.exemptible,
        })
    }
}

/// What a context says of one obligation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stated {
    /// Fulfilled.
    Met,
    /// Not fulfilled: every in-scope flow of its regulation is non-compliant.
    Unmet,
    /// The regulation does not ask it of this controller or situation.
    NotRequired,
}

impl Stated {
    /// `met`, `unmet`, `not_required`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Met => "met",
            Self::Unmet => "unmet",
            Self::NotRequired => "not_required",
        }
    }

    fn parse(raw: &str) -> Option<Self> {
        match key(raw).as_str() {
            "met" => Some(Self::Met),
            "unmet" | "not_met" => Some(Self::Unmet),
            "not_required" => Some(Self::NotRequired),
            _ => None,
        }
    }
}

/// The statements of a flow or context, by obligation name, checked against the
/// obligations `all` regulations define: an obligation no regulation defines, a value
/// other than `met` / `unmet` / `not_required`, or `not_required` for an obligation no
/// regulation exempts, is reported like an unknown term.
pub(crate) fn statements<'a>(
    all: impl Iterator<Item = &'a Obligation> + Clone,
    stated: &BTreeMap<String, String>,
    unknown: &mut Vec<UnknownTerm>,
) -> BTreeMap<String, Stated> {
    let mut out = BTreeMap::new();
    for (name, value) in stated {
        let name = key(name);
        let mut defs = all.clone().filter(|o| o.name == name).peekable();
        if defs.peek().is_none() {
            unknown.push(UnknownTerm {
                kind: "obligation",
                field: "obligations".into(),
                term: name,
            });
            continue;
        }
        let exemptible = defs.any(|o| o.exemptible);
        match Stated::parse(value) {
            Some(Stated::NotRequired) if !exemptible => unknown.push(UnknownTerm {
                kind: "obligation statement (met or unmet: no regulation exempts it)",
                field: format!("obligations.{name}"),
                term: value.clone(),
            }),
            Some(s) => {
                out.insert(name, s);
            }
            None => unknown.push(UnknownTerm {
                kind: "obligation statement (met, unmet or not_required)",
                field: format!("obligations.{name}"),
                term: value.clone(),
            }),
        }
    }
    out
}

/// Applies one regulation's `obligations`, given the `stated` ones, to its decision
/// `d` of a flow (module documentation).
pub(crate) fn apply(
    obligations: &[Obligation],
    stated: &BTreeMap<String, Stated>,
    d: &mut RegulationDecision,
) {
    if d.verdict == "not_applicable" {
        return;
    }
    let unmet: Vec<&Obligation> = obligations
        .iter()
        .filter(|o| stated.get(&o.name) == Some(&Stated::Unmet))
        .collect();
    if !unmet.is_empty() {
        if d.verdict == "compliant" {
            d.policies.clear();
            d.provisions.clear();
        }
        d.verdict = "non_compliant".into();
        for o in unmet {
            d.policies.push(o.id.clone());
            d.provisions.push(o.provision.clone());
        }
        return;
    }
    if d.verdict != "compliant" {
        return;
    }
    let missing: Vec<String> = obligations
        .iter()
        .filter(|o| o.required && !stated.contains_key(&o.name))
        .map(|o| format!("{} ({})", o.name, o.provision))
        .collect();
    if !missing.is_empty() {
        d.verdict = "not_applicable".into();
        d.policies.clear();
        d.provisions.clear();
        d.warnings.push(format!(
            "{} obligations not stated: {} — the norms permit the flow, but a {} flow is \
             decided compliant only when the controller's obligations are stated (met, or \
             not_required where the regulation allows it)",
            d.regulation,
            missing.join(", "),
            d.regulation
        ));
    }
}

/// One obligation of a decided regulation and what the flow stated of it
/// (`--explain`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ObligationStatus {
    /// Regulation.
    pub regulation: String,
    /// Obligation name.
    pub name: String,
    /// Provision.
    pub provision: String,
    /// Whether a compliant decision needs it stated.
    pub required: bool,
    /// `met`, `unmet`, `not_required`, or `not stated`.
    pub stated: String,
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn ob(name: &str, required: bool, exemptible: bool) -> Obligation {
        Obligation::new(
            "GDPR",
            ObligationDef {
                name: name.into(),
                provision: format!("art. {name}"),
                summary: String::new(),
                required,
                exemptible,
            },
        )
        .unwrap()
    }

    fn decision(verdict: &str) -> RegulationDecision {
        RegulationDecision {
            regulation: "GDPR".into(),
            recipient: "r".into(),
            verdict: verdict.into(),
            policies: vec!["gdpr-6-1-a-consent".into()],
            provisions: vec!["art. 6(1)(a)".into()],
            warnings: vec![],
        }
    }

    fn stated(pairs: &[(&str, &str)], set: &[Obligation]) -> (BTreeMap<String, Stated>, usize) {
        let mut unknown = Vec::new();
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        let s = statements(set.iter(), &m, &mut unknown);
        (s, unknown.len())
    }

    #[test]
    fn a_permit_needs_every_required_obligation_stated() {
        let set = [
            ob("transparency", true, false),
            ob("dpia", true, true),
            ob("representative", false, true),
        ];
        let (s, bad) = stated(&[("transparency", "met")], &set);
        assert_eq!(bad, 0);
        let mut d = decision("compliant");
        apply(&set, &s, &mut d);
        assert_eq!(d.verdict, "not_applicable");
        assert!(d.policies.is_empty());
        assert!(
            d.warnings[0].contains("dpia (art. dpia)"),
            "{:?}",
            d.warnings
        );
        assert!(
            !d.warnings[0].contains("transparency"),
            "stated: {:?}",
            d.warnings
        );
        assert!(
            !d.warnings[0].contains("representative"),
            "optional: {:?}",
            d.warnings
        );
        // stated (not_required where exemptible) → the permit stands
        let (s, _) = stated(&[("transparency", "Met"), ("DPIA", "not required")], &set);
        let mut d = decision("compliant");
        apply(&set, &s, &mut d);
        assert_eq!(d.verdict, "compliant");
        assert_eq!(d.policies, ["gdpr-6-1-a-consent"]);
    }

    #[test]
    fn an_unmet_obligation_makes_the_flow_non_compliant_and_never_a_forbid_compliant() {
        let set = [
            ob("transparency", true, false),
            ob("representative", false, true),
        ];
        let (s, _) = stated(
            &[("transparency", "met"), ("representative", "unmet")],
            &set,
        );
        let mut d = decision("compliant");
        apply(&set, &s, &mut d);
        assert_eq!(d.verdict, "non_compliant");
        assert_eq!(d.policies, ["gdpr-obligation-representative"]);
        assert_eq!(d.provisions, ["art. representative"]);
        // a forbidden flow stays forbidden whatever is stated, with the unmet cited too
        let mut d = decision("non_compliant");
        apply(&set, &s, &mut d);
        assert_eq!(d.verdict, "non_compliant");
        assert_eq!(
            d.policies,
            ["gdpr-6-1-a-consent", "gdpr-obligation-representative"]
        );
        // nothing stated: a forbidden flow is still non-compliant, not "not stated"
        let mut d = decision("non_compliant");
        apply(&set, &BTreeMap::new(), &mut d);
        assert_eq!(d.verdict, "non_compliant");
        // out of scope stays out of scope
        let mut d = decision("not_applicable");
        apply(&set, &s, &mut d);
        assert_eq!(d.verdict, "not_applicable");
    }

    #[test]
    fn unknown_obligations_and_statements_are_named() {
        let set = [ob("transparency", true, false), ob("dpia", true, true)];
        let mut unknown = Vec::new();
        let m: BTreeMap<String, String> = [
            ("horoscope", "met"),
            ("transparency", "not_required"),
            ("dpia", "probably"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
        let s = statements(set.iter(), &m, &mut unknown);
        assert!(s.is_empty());
        let text: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        assert_eq!(text.len(), 3, "{text:?}");
        assert!(text.iter().any(|t| t.contains("`horoscope`")), "{text:?}");
        assert!(
            text.iter()
                .any(|t| t.contains("`not_required` in obligations.transparency")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("`probably` in obligations.dpia")),
            "{text:?}"
        );
    }
}
