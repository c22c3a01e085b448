//! `knox eval --guard regulation-cases --judge SPEC`: facts from text. Each case's prose
//! account (GoldCoin's `generate_background`, never its structured fields) is given to
//! the judge, which fills the public flow format's fields
//! ([`knox_regulation::extract`]); the norms decide that flow, and the case is scored
//! as the structured mapping's are ([`super::regulation_cases::score`]). A judge that
//! fails to answer a case leaves it undecided (`not_applicable`, counted wrong under
//! strict scoring; counted as *unmappable*) and the failure is kept in the case's line;
//! the *unknown terms* are the terms the judge wrote that the vocabulary does not
//! define (each makes its decision `not_applicable`).

use knox_regulation::extract::{self, FromText};
use knox_regulation::{FlowDecision, Judge, Norms};
use serde::{Deserialize, Serialize};

use super::regulation_cases::{self as rc, SplitScore};
use crate::EvalError;

/// One account of a split.
#[derive(Clone, Debug, Deserialize)]
pub struct Account {
    /// Row in the source split.
    pub row: usize,
    /// `Permit`, `Forbid` or `Not Applicable`.
    pub label: String,
    /// The prose.
    #[serde(default)]
    pub background: String,
}

/// Parses a split's accounts (JSON Lines).
pub fn parse_accounts(text: &str) -> Result<Vec<Account>, EvalError> {
    rc::parse_lines(text)
}

/// One account's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct TextOutcome {
    /// Split.
    pub split: String,
    /// Row.
    pub row: usize,
    /// Label.
    pub label: String,
    /// The verdict.
    pub verdict: String,
    /// What the judge read, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_text: Option<FromText>,
    /// The decision of that flow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<FlowDecision>,
    /// Why the case is undecided, when the judge failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Reads and decides the accounts of `split` (at most `limit`), reporting progress to
/// `each` after every case.
pub fn evaluate(
    norms: &Norms,
    judge: &dyn Judge,
    split: &str,
    accounts: &[Account],
    mut each: impl FnMut(&TextOutcome),
) -> Result<(SplitScore, Vec<TextOutcome>), EvalError> {
    let hipaa = ["HIPAA".to_string()];
    let mut out = Vec::with_capacity(accounts.len());
    for a in accounts {
        let (verdict, from_text, decision, error) =
            match extract::read(judge, &a.background, &hipaa, "us") {
                Ok((phi, record)) => {
                    let d = norms
                        .decide_phi(&phi, false)
                        .map_err(|e| EvalError::Invalid(format!("{split} row {}: {e}", a.row)))?;
                    (d.verdict.clone(), Some(record), Some(d), None)
                }
                Err(e) => ("not_applicable".to_string(), None, None, Some(e)),
            };
        let o = TextOutcome {
            split: split.to_string(),
            row: a.row,
            label: a.label.clone(),
            verdict,
            from_text,
            decision,
            error,
        };
        each(&o);
        out.push(o);
    }
    let labelled: Vec<(&str, &str)> = out
        .iter()
        .map(|o| (o.label.as_str(), o.verdict.as_str()))
        .collect();
    let mut score = rc::score(split, &labelled)?;
    // What the judge wrote that the vocabulary does not define, by field.
    let mut unknown = std::collections::BTreeSet::new();
    for d in out.iter().filter_map(|o| o.decision.as_ref()) {
        score.unknown_terms += d
            .warnings
            .iter()
            .filter(|w| w.starts_with("unknown "))
            .count();
        unknown.extend(
            d.warnings
                .iter()
                .filter(|w| w.starts_with("unknown "))
                .cloned(),
        );
    }
    score.unknown = unknown.into_iter().collect();
    score.unmappable = out.iter().filter(|o| o.error.is_some()).count();
    Ok((score, out))
}

/// The validation split's accounts.
pub fn validation() -> Result<Vec<Account>, EvalError> {
    parse_accounts(rc::VALIDATION)
}
