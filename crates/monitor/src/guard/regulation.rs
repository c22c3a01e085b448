//! The regulation guard's interface.
//!
//! A regulation guard decides whether a disclosing action complies with the
//! regulations in force. The deterministic GDPR/HIPAA norms and the judge come with
//! their own implementation; until one is configured, [`NotEvaluated`] stands in: it
//! returns `not_applicable` for every disclosure and says so, so the action is flagged
//! for manual review rather than silently passed as compliant.

use knox_policy::ToolEntry;
use knox_types::Action;
use knox_types::apm::RegulationSpec;

/// A regulation verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegulationVerdict {
    /// `compliant`, `non_compliant` or `not_applicable`.
    pub verdict: &'static str,
    /// Ids of the deciding policies.
    pub policies: Vec<String>,
    /// Facts and explanation recorded in the check node.
    pub note: Option<String>,
}

impl RegulationVerdict {
    /// Whether the action must be blocked.
    pub fn blocks(&self) -> bool {
        self.verdict == "non_compliant"
    }
}

/// Decides disclosures under the regulations in force.
pub trait RegulationGuard: Send + Sync {
    /// Evaluates a disclosing `action` of `tool`.
    fn evaluate(
        &self,
        spec: &RegulationSpec,
        tool: &ToolEntry,
        action: &Action,
    ) -> RegulationVerdict;
}

/// Stand-in used until a regulation policy set is configured: every disclosure is
/// `not_applicable` and flagged for manual review.
#[derive(Clone, Copy, Debug, Default)]
pub struct NotEvaluated;

/// The note [`NotEvaluated`] records.
pub const NOT_EVALUATED_NOTE: &str =
    "no regulation policy set configured: flagged for manual review";

impl RegulationGuard for NotEvaluated {
    fn evaluate(&self, _: &RegulationSpec, _: &ToolEntry, _: &Action) -> RegulationVerdict {
        RegulationVerdict {
            verdict: "not_applicable",
            policies: vec![],
            note: Some(NOT_EVALUATED_NOTE.into()),
        }
    }
}
