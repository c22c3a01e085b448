//! The public flow format: one contextual-integrity flow φ as JSON (or TOML, in the
//! policy examples), decided from outside a run — `knox regulations decide` and
//! [`Norms::decide_phi`]. The format is documented in `docs/regulation.md`, "Deciding
//! a flow from outside".
//!
//! Every string is a vocabulary term or one of its synonyms (`regulations/
//! vocabulary.toml`), in any case and spacing; an unknown term is not guessed: the
//! decision is `not_applicable` with a warning that names it.

use std::collections::{BTreeMap, BTreeSet};

use knox_types::regulation::{InfoFlow, PartyFacts, RecipientFacts, RegulationDecision};
use serde::{Deserialize, Serialize};

use crate::norms::{FlowExtra, NormError, Norms};
use crate::obligations::ObligationStatus;
use crate::vocab::TermKind;

fn yes() -> bool {
    true
}
fn user() -> String {
    "user".into()
}
fn unknown() -> String {
    "unknown".into()
}
fn unspecified() -> String {
    "unspecified".into()
}
fn flow_tool() -> String {
    "Example".into()
}

/// A party of a flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Party {
    /// Role (a vocabulary term or synonym).
    pub role: String,
    /// ISO 3166-1 alpha-2 country code of its establishment (`unknown` by default).
    #[serde(default = "unknown")]
    pub jurisdiction: String,
    /// An address or name (`sender` / `recipient` by default).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Whether the sender knows who it is (a directory lists it); default true.
    #[serde(default = "yes")]
    pub listed: bool,
    /// Organisation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub organisation: String,
    /// A HIPAA business associate agreement is in place.
    #[serde(default)]
    pub baa: bool,
    /// GDPR art. 46 safeguards are in place.
    #[serde(default)]
    pub safeguards: bool,
}

/// One flow φ in the public format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phi {
    /// The caller's name for the flow, echoed in the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Who discloses (for HIPAA: who holds the information, whoever asked for it).
    pub sender: Party,
    /// Who receives.
    pub recipient: Party,
    /// Whose data: `user` (the sender's user), `third_party`, `mixed`, `unknown`.
    #[serde(default = "user")]
    pub subject: String,
    /// The data subject's role (`patient`, `employee`, `child`, …).
    #[serde(default = "unknown")]
    pub subject_role: String,
    /// Information types the flow carries.
    #[serde(default)]
    pub info_types: Vec<String>,
    /// Why it flows.
    #[serde(default = "unspecified")]
    pub purpose: String,
    /// The purpose the data was collected for (GDPR art. 5(1)(b)).
    #[serde(default = "unspecified")]
    pub collected_for: String,
    /// The data subject consented (for this recipient and purpose).
    #[serde(default)]
    pub consent: bool,
    /// Explicit consent (GDPR art. 9(2)(a), 49(1)(a)); implies consent.
    #[serde(default)]
    pub explicit_consent: bool,
    /// A valid HIPAA authorization (45 CFR 164.508).
    #[serde(default)]
    pub authorization: bool,
    /// The recipient is the data subject.
    #[serde(default)]
    pub to_subject: bool,
    /// Facts of the transmission principle (`court_order`, `deidentified`, …).
    #[serde(default)]
    pub conditions: Vec<String>,
    /// The controller's obligations beside the flow, by name: `met`, `unmet` or
    /// `not_required` ([`crate::obligations`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub obligations: BTreeMap<String, String>,
    /// The regulations to decide it under (default: every one of the set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regulations: Vec<String>,
    /// The disclosing tool, when there is one.
    #[serde(default = "flow_tool")]
    pub tool: String,
}

impl Party {
    fn facts(&self, fallback: &str) -> PartyFacts {
        crate::flow::party_facts(
            if self.id.is_empty() {
                fallback
            } else {
                &self.id
            },
            self.listed,
            &self.role,
            &self.organisation,
            &self.jurisdiction,
            self.baa,
            self.safeguards,
        )
    }
}

impl Phi {
    /// The flow as the norms see it: a one-recipient [`InfoFlow`] and the facts beyond.
    pub fn to_flow(&self) -> (InfoFlow, FlowExtra) {
        let flow = InfoFlow {
            tool: self.tool.clone(),
            sender: self.sender.facts("sender"),
            recipients: vec![RecipientFacts {
                party: self.recipient.facts("recipient"),
                consent: self.consent || self.explicit_consent,
                explicit_consent: self.explicit_consent,
                authorization: self.authorization,
                to_subject: self.to_subject,
            }],
            subject: crate::address::label(&self.subject),
            info_types: self
                .info_types
                .iter()
                .map(|t| t.trim().to_string())
                .collect(),
            purpose: self.purpose.trim().to_string(),
            sources: vec![],
        };
        let extra = FlowExtra {
            subject_role: self.subject_role.trim().to_string(),
            collected_for: self.collected_for.trim().to_string(),
            conditions: self
                .conditions
                .iter()
                .map(|c| c.trim().to_string())
                .collect(),
            obligations: self.obligations.clone(),
        };
        (flow, extra)
    }
}

/// A deciding policy, described.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Cited {
    /// Regulation.
    pub regulation: String,
    /// Policy id.
    pub policy: String,
    /// `permit`, `forbid`, or `default`.
    pub effect: String,
    /// Provision.
    pub provision: String,
    /// What it says.
    pub summary: String,
}

/// Why a flow was decided as it was (`--explain`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// The deciding policies of every regulation, with provision and summary.
    pub cited: Vec<Cited>,
    /// Facts the flow left unstated (unknown roles, no purpose, no information type,
    /// no jurisdiction): stating them may change the verdict.
    pub missing: Vec<String>,
    /// Single facts that, added to a non-compliant flow, would make it compliant
    /// (`condition:court_order`, `authorization`, …) — what a lawful flow would need.
    pub would_permit: Vec<String>,
    /// Every obligation of the decided regulations and what the flow stated of it.
    pub obligations: Vec<ObligationStatus>,
}

/// The decision of one flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FlowDecision {
    /// The flow's `id`, if it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `non_compliant` if any regulation finds it so, else `compliant` if any does,
    /// else `not_applicable`.
    pub verdict: String,
    /// The deciding policies of that verdict.
    pub policies: Vec<String>,
    /// One decision per regulation.
    pub decisions: Vec<RegulationDecision>,
    /// Terms the vocabulary does not define (the verdict is then `not_applicable`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why (only when asked).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
}

impl Norms {
    /// Decides one flow in the public format under its `regulations` (default: every
    /// regulation of the set), explaining the decision when `explain` is set.
    pub fn decide_phi(&self, phi: &Phi, explain: bool) -> Result<FlowDecision, NormError> {
        let names: Vec<String> = if phi.regulations.is_empty() {
            self.regulations().map(str::to_string).collect()
        } else {
            phi.regulations.clone()
        };
        let (flow, extra) = phi.to_flow();
        let decisions = self.decide_extra(&names, &flow, 0, &extra)?;
        let (verdict, policies) = crate::check::combine(&decisions, false);
        let mut warnings: Vec<String> = decisions
            .iter()
            .flat_map(|d| d.warnings.iter().cloned())
            .collect();
        warnings.sort();
        warnings.dedup();
        let explanation = if explain {
            Some(self.explain(phi, &names, &decisions, &verdict)?)
        } else {
            None
        };
        Ok(FlowDecision {
            id: phi.id.clone(),
            verdict,
            policies,
            decisions,
            warnings,
            explanation,
        })
    }

    fn explain(
        &self,
        phi: &Phi,
        names: &[String],
        decisions: &[RegulationDecision],
        verdict: &str,
    ) -> Result<Explanation, NormError> {
        let mut cited = Vec::new();
        for d in decisions {
            for (p, provision) in d.policies.iter().zip(&d.provisions) {
                let info = self.policy(p);
                cited.push(Cited {
                    regulation: d.regulation.clone(),
                    policy: p.clone(),
                    effect: info.map_or("default", |i| i.effect).to_string(),
                    provision: provision.clone(),
                    summary: info
                        .map(|i| i.summary.clone())
                        .unwrap_or_else(|| "in scope, and no policy permits the flow".to_string()),
                });
            }
        }
        let vocab = self.vocabulary();
        let mut missing = Vec::new();
        for (field, party) in [("sender", &phi.sender), ("recipient", &phi.recipient)] {
            if vocab.term(TermKind::Role, &party.role) == Some("unknown") {
                missing.push(format!("{field}.role"));
            }
            if crate::address::jurisdiction(&party.jurisdiction) == "unknown" {
                missing.push(format!("{field}.jurisdiction"));
            }
        }
        if vocab.term(TermKind::Purpose, &phi.purpose) == Some("unspecified") {
            missing.push("purpose".into());
        }
        if phi.info_types.is_empty() {
            missing.push("info_types".into());
        }
        if vocab.term(TermKind::Role, &phi.subject_role) == Some("unknown") {
            missing.push("subject_role".into());
        }
        let mut would_permit = Vec::new();
        if verdict == "non_compliant" {
            let mut candidates: Vec<(String, Phi)> = Vec::new();
            let with = |f: &dyn Fn(&mut Phi)| {
                let mut p = phi.clone();
                f(&mut p);
                p
            };
            if !phi.consent {
                candidates.push(("consent".into(), with(&|p| p.consent = true)));
            }
            if !phi.explicit_consent {
                candidates.push((
                    "explicit_consent".into(),
                    with(&|p| p.explicit_consent = true),
                ));
            }
            if !phi.authorization {
                candidates.push(("authorization".into(), with(&|p| p.authorization = true)));
            }
            let present: BTreeSet<&str> = phi
                .conditions
                .iter()
                .filter_map(|c| vocab.term(TermKind::Condition, c))
                .collect();
            let conditions: Vec<&str> = vocab
                .terms(TermKind::Condition)
                .map(|(t, _)| t)
                .filter(|t| !present.contains(t))
                .collect();
            for c in conditions {
                candidates.push((
                    format!("condition:{c}"),
                    with(&|p| p.conditions.push(c.to_string())),
                ));
            }
            for (name, p) in candidates {
                let (flow, extra) = p.to_flow();
                let d = self.decide_extra(names, &flow, 0, &extra)?;
                if crate::check::combine(&d, false).0 == "compliant" {
                    would_permit.push(name);
                }
            }
        }
        let mut obligations = Vec::new();
        for d in decisions {
            for o in self.obligations(&d.regulation).unwrap_or_default() {
                let stated = phi
                    .obligations
                    .iter()
                    .find(|(k, _)| crate::vocab::key(k) == o.name)
                    .map_or_else(|| "not stated".to_string(), |(_, v)| crate::vocab::key(v));
                obligations.push(ObligationStatus {
                    regulation: d.regulation.clone(),
                    name: o.name.clone(),
                    provision: o.provision.clone(),
                    required: o.required,
                    stated,
                });
            }
        }
        Ok(Explanation {
            cited,
            missing,
            would_permit,
            obligations,
        })
    }
}

/// Why a flow document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PhiError {
    /// A line (1-based) is not a flow.
    #[error("line {line}: {error}")]
    Line {
        /// The line.
        line: usize,
        /// Why.
        error: serde_json::Error,
    },
    /// The document is neither one JSON flow nor JSONL of flows.
    #[error("not a flow: {0}")]
    Document(serde_json::Error),
}

/// Parses one JSON flow, or JSON Lines of flows (blank lines skipped).
pub fn parse_flows(text: &str) -> Result<Vec<Phi>, PhiError> {
    match serde_json::from_str::<Phi>(text) {
        Ok(p) => Ok(vec![p]),
        Err(whole) => {
            let lines: Vec<(usize, &str)> = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .collect();
            if lines.len() <= 1 {
                return Err(PhiError::Document(whole));
            }
            lines
                .into_iter()
                .map(|(i, l)| {
                    serde_json::from_str(l).map_err(|error| PhiError::Line { line: i + 1, error })
                })
                .collect()
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn phi(json: &str) -> Phi {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_flow_from_outside_is_normalised_and_decided() {
        let n = Norms::embedded().unwrap();
        // Case, spacing and synonyms: `Doctor`, `Specialist`, `Medical Records`.
        let d = n
            .decide_phi(
                &phi(r#"{"sender": {"role": "Doctor", "jurisdiction": "US"},
                        "recipient": {"role": "Specialist", "jurisdiction": "us"},
                        "info_types": ["Medical Records"], "purpose": " Treatment "}"#),
                true,
            )
            .unwrap();
        assert_eq!(d.verdict, "compliant", "{d:?}");
        assert!(
            d.policies
                .contains(&"hipaa-164.506-c2-treatment".to_string())
        );
        let e = d.explanation.unwrap();
        assert!(e.cited.iter().any(|c| c.provision.contains("164.506")));
        assert!(e.missing.contains(&"subject_role".to_string()));
    }

    #[test]
    fn an_unknown_term_is_named_and_not_applicable() {
        let n = Norms::embedded().unwrap();
        let d = n
            .decide_phi(
                &phi(
                    r#"{"sender": {"role": "covered_entity", "jurisdiction": "us"},
                        "recipient": {"role": "astrologer", "jurisdiction": "us"},
                        "info_types": ["health"], "purpose": "marketing"}"#,
                ),
                false,
            )
            .unwrap();
        assert_eq!(d.verdict, "not_applicable");
        assert!(d.warnings[0].contains("`astrologer`"), "{:?}", d.warnings);
        assert!(d.decisions.iter().all(|r| !r.warnings.is_empty()));
    }

    #[test]
    fn explain_names_what_would_make_a_flow_lawful() {
        let n = Norms::embedded().unwrap();
        let d = n
            .decide_phi(
                &phi(r#"{"sender": {"role": "hospital", "jurisdiction": "us"},
                        "recipient": {"role": "police officer", "jurisdiction": "us"},
                        "info_types": ["health"], "purpose": "law enforcement",
                        "regulations": ["hipaa"]}"#),
                true,
            )
            .unwrap();
        assert_eq!(d.verdict, "non_compliant", "{d:?}");
        let e = d.explanation.unwrap();
        assert!(
            e.would_permit
                .contains(&"condition:court_order".to_string()),
            "{:?}",
            e.would_permit
        );
        assert!(e.would_permit.contains(&"authorization".to_string()));
    }

    #[test]
    fn jsonl_and_bad_documents() {
        let one = r#"{"sender": {"role": "a"}, "recipient": {"role": "b"}}"#;
        assert_eq!(parse_flows(one).unwrap().len(), 1);
        let two = format!("{one}\n\n{one}\n");
        assert_eq!(parse_flows(&two).unwrap().len(), 2);
        let bad = format!("{one}\n{{\"sender\": 1}}\n");
        assert!(
            parse_flows(&bad)
                .unwrap_err()
                .to_string()
                .starts_with("line 2")
        );
        assert!(parse_flows("[]").is_err());
        assert!(
            parse_flows(r#"{"sender": {"role": "a"}, "recipient": {"role": "b"}, "x": 1}"#)
                .is_err()
        );
    }
}
