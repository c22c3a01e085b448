//! Facts from text: a judge fills the public flow format's fields ([`Phi`]) from a
//! prose account of a disclosure, and the norms decide — the judge never decides.
//!
//! The judge is given the versioned prompt `regulations/extract-prompt.md`
//! (instructions and k-shot examples taken from GoldCoin's training split) followed by
//! the account, and answers one JSON object constrained by [`answer_schema`]. What it
//! wrote is read leniently ([`phi_from_answer`]: unknown fields and values of the wrong
//! type are dropped, nothing is invented) and every term goes through the vocabulary
//! like any flow's, so a role the vocabulary does not know is reported by name and the
//! decision is `not_applicable`. The record of a decision from text ([`FromText`]) names
//! the text's SHA-256, the judge model and weights, the prompt's version and digest, and
//! the φ the judge filled in, so a reader can re-decide that φ and see what was read.

use serde::Serialize;
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use knox_types::digest::{Digest, tag};

use crate::phi::{Party, Phi};

/// The extraction prompt Knox ships.
pub const PROMPT: &str = include_str!("../../../regulations/extract-prompt.md");

/// Largest account read (bytes); a longer one is refused, not cut.
pub const MAX_TEXT: usize = 64 * 1024;

/// Version of [`PROMPT`] (its first line names it).
pub fn prompt_version() -> &'static str {
    PROMPT
        .lines()
        .next()
        .and_then(|l| l.split("version:").nth(1))
        .map_or("unversioned", |v| v.trim().trim_end_matches("-->").trim())
}

/// The whole prompt for `text`: [`PROMPT`], then the account.
pub fn prompt(text: &str) -> String {
    format!(
        "{PROMPT}\n## The account\n\nAccount: \"{}\"\nAnswer:",
        text.trim()
    )
}

/// Longest string the judge may write in a field (a role, a purpose, a term): a
/// phrase, not prose — and the whole answer stays within a small model's reply.
pub const MAX_FIELD: usize = 48;

/// Most items of a list field.
pub const MAX_ITEMS: usize = 6;

/// The JSON schema the judge's answer is constrained by.
pub fn answer_schema() -> Value {
    let text = json!({"type": "string", "maxLength": MAX_FIELD});
    let list = json!({"type": "array", "items": text, "maxItems": MAX_ITEMS});
    let party = json!({
        "type": "object",
        "properties": {"role": text, "jurisdiction": {"type": "string", "maxLength": 2}},
        "required": ["role"],
        "additionalProperties": false
    });
    json!({
        "type": "object",
        "properties": {
            "sender": party,
            "recipient": party,
            "subject_role": text,
            "info_types": list,
            "purpose": text,
            "consent": {"type": "boolean"},
            "authorization": {"type": "boolean"},
            "to_subject": {"type": "boolean"},
            "conditions": list
        },
        "required": ["sender", "recipient", "info_types", "purpose"],
        "additionalProperties": false
    })
}

/// Reads the first JSON object of a judge's `answer` as a flow, keeping only the
/// fields [`answer_schema`] names with values of their type; `regulations` and
/// `jurisdiction` (used where the judge names none) come from the caller.
pub fn phi_from_answer(
    answer: &str,
    regulations: &[String],
    jurisdiction: &str,
) -> Result<Phi, String> {
    let start = answer
        .find('{')
        .ok_or("the judge answered no JSON object")?;
    let mut de = serde_json::Deserializer::from_str(answer.get(start..).unwrap_or_default());
    let v: Map<String, Value> = serde::Deserialize::deserialize(&mut de)
        .map_err(|e| format!("the judge's answer is not a JSON object: {e}"))?;
    let text = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let list = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|x| text(Some(x))).take(32).collect())
            .unwrap_or_default()
    };
    let flag = |k: &str| v.get(k).and_then(Value::as_bool).unwrap_or(false);
    let party = |k: &str| {
        let p = v.get(k).and_then(Value::as_object);
        Party {
            role: text(p.and_then(|p| p.get("role"))).unwrap_or_else(|| "unknown".into()),
            jurisdiction: text(p.and_then(|p| p.get("jurisdiction")))
                .unwrap_or_else(|| jurisdiction.to_string()),
            id: k.to_string(),
            listed: true,
            organisation: String::new(),
            baa: false,
            safeguards: false,
        }
    };
    Ok(Phi {
        id: None,
        sender: party("sender"),
        recipient: party("recipient"),
        subject: "third_party".into(),
        subject_role: text(v.get("subject_role")).unwrap_or_else(|| "unknown".into()),
        info_types: list(v.get("info_types")),
        purpose: text(v.get("purpose")).unwrap_or_else(|| "unspecified".into()),
        collected_for: "unspecified".into(),
        consent: flag("consent"),
        explicit_consent: false,
        authorization: flag("authorization"),
        to_subject: flag("to_subject"),
        conditions: list(v.get("conditions")),
        obligations: std::collections::BTreeMap::new(),
        regulations: regulations.to_vec(),
        tool: "text".into(),
    })
}

/// Asks `judge` to fill a flow in from `text` (decided under `regulations`; a party it
/// places nowhere is in `jurisdiction`): the flow, and the record of how it was read.
pub fn read(
    judge: &dyn crate::Judge,
    text: &str,
    regulations: &[String],
    jurisdiction: &str,
) -> Result<(Phi, FromText), String> {
    let prompt = prompt(text);
    let answer = judge
        .answer_json(&prompt, &answer_schema())
        .map_err(|e| format!("the judge did not answer: {e}"))?;
    let phi = phi_from_answer(&answer, regulations, jurisdiction)
        .map_err(|e| format!("the judge's answer: {e}"))?;
    let record = FromText::new(text, &prompt, judge.model(), &answer, phi.clone());
    Ok((phi, record))
}

/// What a decision from text records beside the decision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FromText {
    /// SHA-256 of the account as read (hex).
    pub text_sha256: String,
    /// The judge model.
    pub model: String,
    /// Its weights' hash (none for a remote model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights_hash: Option<Digest>,
    /// [`prompt_version`].
    pub prompt_version: String,
    /// Digest of the whole prompt sent (`knox/judge-prompt`).
    pub prompt: Digest,
    /// The flow the judge filled in, as the norms decided it.
    pub phi: Phi,
    /// The judge's answer as it came (at most 4,000 characters).
    pub answer: String,
}

impl FromText {
    /// The record of `phi`, read from `answer` to `prompt_text` about `text`.
    pub fn new(
        text: &str,
        prompt_text: &str,
        model: knox_types::bundle::ModelInfo,
        answer: &str,
        phi: Phi,
    ) -> Self {
        Self {
            text_sha256: hex::encode(Sha256::digest(text.as_bytes())),
            model: model.name,
            weights_hash: model.weights_hash,
            prompt_version: prompt_version().to_string(),
            prompt: Digest::tagged(tag::JUDGE_PROMPT, &[prompt_text.as_bytes()]),
            phi,
            answer: answer.chars().take(4000).collect(),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::Norms;

    #[test]
    fn the_prompt_is_versioned_and_ends_with_the_account() {
        assert_eq!(prompt_version(), "extract-v1");
        let p = prompt("  A nurse told the police.  ");
        assert!(p.starts_with(PROMPT));
        assert!(p.ends_with("Account: \"A nurse told the police.\"\nAnswer:"));
    }

    #[test]
    fn an_answer_is_read_leniently_and_decided_by_the_norms() {
        let hipaa = ["HIPAA".to_string()];
        let phi = phi_from_answer(
            "Here: {\"sender\": {\"role\": \"nurse\"}, \"recipient\": {\"role\": \"police officer\"}, \
             \"subject_role\": \"patient\", \"info_types\": [\"medical records\", 7], \
             \"purpose\": \"law enforcement investigation\", \"conditions\": [\"court order\"], \
             \"verdict\": \"compliant\", \"consent\": \"yes\"} trailing",
            &hipaa,
            "us",
        )
        .unwrap();
        assert_eq!(phi.sender.role, "nurse");
        assert_eq!(phi.info_types, ["medical records"]);
        assert!(!phi.consent, "a string is not a boolean");
        assert_eq!(phi.sender.jurisdiction, "us");
        let norms = Norms::embedded().unwrap();
        let d = norms.decide_phi(&phi, false).unwrap();
        assert_eq!(d.verdict, "compliant", "{d:?}");
        // the same account without the court order is the norms' call, not the judge's
        let mut bare = phi.clone();
        bare.conditions.clear();
        assert_eq!(
            norms.decide_phi(&bare, false).unwrap().verdict,
            "non_compliant"
        );
        // a role nobody defines stays unknown and is named
        let odd = phi_from_answer(
            "{\"sender\": {\"role\": \"nurse\"}, \"recipient\": {\"role\": \"zqxv\"}, \"info_types\": [\"diagnosis\"], \"purpose\": \"treatment\"}",
            &hipaa,
            "us",
        )
        .unwrap();
        let d = norms.decide_phi(&odd, false).unwrap();
        assert_eq!(d.verdict, "not_applicable");
        assert!(d.warnings.iter().any(|w| w.contains("zqxv")), "{d:?}");
        assert!(phi_from_answer("no json here", &hipaa, "us").is_err());
        assert!(phi_from_answer("{\"sender\": ", &hipaa, "us").is_err());
    }
}
