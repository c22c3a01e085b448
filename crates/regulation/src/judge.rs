//! The interface of an LLM judge for the regulation guard.
//!
//! A judge is asked only about what the deterministic guard cannot see: which
//! information types free text carries and, optionally, for what purpose. It is given
//! the versioned prompt in `regulations/judge-prompt.md` (instructions, step-by-step
//! reasoning, k-shot examples) followed by the flow; what it answers is recorded in the
//! check node with the model's weights hash and the prompt's hash, and the verifier
//! recomputes the deterministic verdict from the flow completed with that answer. A
//! judge's own verdict is recorded as a second opinion and never replaces the
//! deterministic one.

use std::collections::BTreeSet;

use knox_types::bundle::ModelInfo;
use knox_types::digest::{Digest, tag};
use knox_types::payload::JudgeOpinion;
use knox_types::regulation::InfoFlow;

/// The judge prompt Knox ships.
pub const PROMPT: &str = include_str!("../../../regulations/judge-prompt.md");

/// Version of [`PROMPT`] (its first line names it).
pub fn prompt_version() -> &'static str {
    PROMPT
        .lines()
        .next()
        .and_then(|l| l.split("version:").nth(1))
        .map_or("unversioned", str::trim)
}

/// The information types a judge may name (those of the toolkit labels).
pub const INFO_TYPES: [&str; 15] = [
    "health",
    "genetic",
    "financial",
    "payment_method",
    "contact",
    "address",
    "credentials",
    "location",
    "identity",
    "communication",
    "schedule",
    "commercial",
    "device",
    "code",
    "public",
];

/// What the judge is asked about.
#[derive(Clone, Debug)]
pub struct JudgeQuestion<'a> {
    /// Regulations in force.
    pub regulations: &'a [String],
    /// `φ` as far as the labels go.
    pub flow: &'a InfoFlow,
    /// The disclosed content (the content parameters' text).
    pub content: &'a str,
}

impl JudgeQuestion<'_> {
    /// The full prompt text: [`PROMPT`] followed by this flow.
    pub fn prompt(&self) -> String {
        let recipients: Vec<String> = self
            .flow
            .recipients
            .iter()
            .map(|r| format!("{} (role {})", r.party.id, r.party.role))
            .collect();
        format!(
            "{PROMPT}\n## Flow\n\nRegulations: {}\nTool: {}\nSender role: {}\nRecipients: {}\nDeclared purpose: {}\nContent:\n<<<\n{}\n>>>\n",
            self.regulations.join(", "),
            self.flow.tool,
            self.flow.sender.role,
            recipients.join("; "),
            self.flow.purpose,
            self.content
        )
    }
}

/// What a judge answers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct JudgeAnswer {
    /// Information types found (names outside [`INFO_TYPES`] are dropped).
    pub info_types: BTreeSet<String>,
    /// Purpose inferred, if any.
    pub purpose: Option<String>,
    /// `compliant` / `non_compliant` / `not_applicable`, if it gave one.
    pub verdict: Option<String>,
    /// Its reasoning.
    pub rationale: String,
}

/// An LLM judge.
pub trait Judge: Send + Sync {
    /// The judge model, for proof of inference.
    fn model(&self) -> ModelInfo;
    /// Answers `prompt` (the text of [`JudgeQuestion::prompt`]).
    fn ask(&self, prompt: &str) -> Result<JudgeAnswer, String>;
    /// Answers `prompt` with one JSON object constrained by `schema`, as text: the
    /// flow extraction of [`crate::extract`]. A judge that cannot says so.
    fn answer_json(&self, prompt: &str, schema: &serde_json::Value) -> Result<String, String> {
        let _ = (prompt, schema);
        Err("this judge does not fill flows from text".into())
    }
}

/// Asks `judge` about `q` and returns the opinion to record (`agrees` is filled in by
/// the check), or the error in words.
pub fn opinion(judge: &dyn Judge, q: &JudgeQuestion<'_>) -> Result<JudgeOpinion, String> {
    let prompt = q.prompt();
    let answer = judge.ask(&prompt)?;
    let model = judge.model();
    let known = |t: &String| INFO_TYPES.contains(&t.as_str());
    let verdict = answer
        .verdict
        .map(|v| crate::address::label(&v))
        .filter(|v| matches!(v.as_str(), "compliant" | "non_compliant" | "not_applicable"));
    Ok(JudgeOpinion {
        model: model.name,
        weights_hash: model.weights_hash,
        prompt_version: prompt_version().to_string(),
        prompt: Digest::tagged(tag::JUDGE_PROMPT, &[prompt.as_bytes()]),
        info_types: answer
            .info_types
            .iter()
            .map(|t| crate::address::label(t))
            .filter(known)
            .collect(),
        purpose: answer
            .purpose
            .map(|p| crate::address::label(&p))
            .filter(|p| !p.is_empty()),
        verdict,
        agrees: None,
        rationale: answer.rationale.chars().take(2000).collect(),
    })
}
