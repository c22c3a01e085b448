//! The regulation judge on any chat backend (a local GGUF model or an OpenAI-compatible
//! server): it is given Knox's versioned judge prompt and must answer one JSON object
//! following a schema (grammar-constrained on the local backend), from which only the
//! known information types, a purpose and a verdict are taken. Its answer is untrusted:
//! anything unparsable is an error, recorded by the monitor as "no opinion".

use std::sync::Arc;

use knox_regulation::judge::INFO_TYPES;
use knox_regulation::{Judge, JudgeAnswer};
use knox_types::bundle::{ModelInfo, ModelRole};
use serde_json::{Value, json};

use crate::chat::{Chat, Format, Message, Reply, Role};
use crate::latency::Latency;

/// Purposes a judge may name.
pub const PURPOSES: [&str; 11] = [
    "treatment",
    "payment",
    "health_care_operations",
    "marketing",
    "sale",
    "research",
    "public_health",
    "contract",
    "legal_obligation",
    "care_involvement",
    "personal",
];

/// The system message of every judge conversation.
pub const SYSTEM: &str = "You are a careful privacy-law assistant. Follow the instructions \
and answer only with the JSON object they ask for.";

/// The system message of a flow extraction (`knox_regulation::extract`).
pub const EXTRACT_SYSTEM: &str = "You read accounts of disclosures of personal information \
and write down their facts. Follow the instructions and answer only with the JSON object \
they ask for.";

/// A judge asking a chat model. Clones share the model and the latency totals.
#[derive(Debug, Clone)]
pub struct ChatJudge {
    chat: Arc<dyn Chat>,
    latency: Arc<Latency>,
}

impl ChatJudge {
    /// A judge asking `chat`.
    pub fn new(chat: Arc<dyn Chat>) -> Self {
        Self {
            chat,
            latency: Arc::default(),
        }
    }

    /// Time spent per question so far.
    pub fn latency(&self) -> &Latency {
        &self.latency
    }
}

/// The JSON schema of a judge's answer.
pub fn answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            "info_types": {"type": "array", "items": {"type": "string", "enum": INFO_TYPES}},
            "purpose": {"anyOf": [{"type": "string", "enum": PURPOSES}, {"type": "null"}]},
            "verdict": {"anyOf": [
                {"type": "string", "enum": ["compliant", "non_compliant", "not_applicable"]},
                {"type": "null"}
            ]}
        },
        "required": ["reasoning", "info_types", "purpose", "verdict"],
        "additionalProperties": false
    })
}

/// Reads a judge's reply: the first JSON object in it.
pub fn parse_answer(text: &str) -> Result<JudgeAnswer, String> {
    let start = text.find('{').ok_or("the judge answered no JSON object")?;
    let mut de = serde_json::Deserializer::from_str(text.get(start..).unwrap_or_default());
    let v: Value = serde::Deserialize::deserialize(&mut de)
        .map_err(|e| format!("the judge's JSON does not parse: {e}"))?;
    let info_types = v
        .get("info_types")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|t| INFO_TYPES.contains(t))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let pick = |key: &str, allowed: &[&str]| {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|s| allowed.contains(s))
            .map(str::to_string)
    };
    Ok(JudgeAnswer {
        info_types,
        purpose: pick("purpose", &PURPOSES),
        verdict: pick("verdict", &["compliant", "non_compliant", "not_applicable"]),
        rationale: v
            .get("reasoning")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

impl Judge for ChatJudge {
    fn model(&self) -> ModelInfo {
        self.chat.info(ModelRole::Judge)
    }

    fn ask(&self, prompt: &str) -> Result<JudgeAnswer, String> {
        let messages = [
            Message::new(Role::System, SYSTEM),
            Message::new(Role::User, prompt),
        ];
        let format = Format::Json(answer_schema());
        match self
            .latency
            .time(|| self.chat.complete(&messages, &format))
            .map_err(|e| e.to_string())?
        {
            Reply::Text(t) | Reply::Malformed(t) => parse_answer(&t),
            Reply::Call(c) => parse_answer(&c.arguments),
        }
    }

    fn answer_json(&self, prompt: &str, schema: &Value) -> Result<String, String> {
        let messages = [
            Message::new(Role::System, EXTRACT_SYSTEM),
            Message::new(Role::User, prompt),
        ];
        let format = Format::Json(schema.clone());
        match self
            .latency
            .time(|| self.chat.complete(&messages, &format))
            .map_err(|e| e.to_string())?
        {
            Reply::Text(t) | Reply::Malformed(t) => Ok(t),
            Reply::Call(c) => Ok(c.arguments),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_leniently_and_only_known_values_kept() {
        let a = parse_answer(
            "Sure! {\"reasoning\": \"a lab value\", \"info_types\": [\"health\", \"dna\", 3], \
             \"purpose\": \"treatment\", \"verdict\": \"maybe\"} trailing",
        )
        .unwrap();
        assert_eq!(a.info_types, ["health".to_string()].into());
        assert_eq!(a.purpose.as_deref(), Some("treatment"));
        assert_eq!(a.verdict, None);
        assert_eq!(a.rationale, "a lab value");
        assert!(parse_answer("no json here").is_err());
        assert!(parse_answer("{\"info_types\": [").is_err());
    }
}
