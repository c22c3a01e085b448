//! The regulations in force for a session and the policy set deciding them.

use std::sync::Arc;

use knox_agent::Regulations;
use knox_regulation::{Judge, Norms};
use knox_types::regulation::RegulationContext;

use crate::error::EngineError;

/// The regulations in force for a run and the policy set deciding them.
///
/// Cloning shares the policy set and the judge: a gateway hands one setup to each of
/// its sessions.
#[derive(Clone)]
pub struct RegulationSetup {
    /// Names, policy hash and context (they go into every APM).
    pub regulations: Regulations,
    /// The policy set whose hash `regulations` names.
    pub norms: Arc<Norms>,
    /// A judge for disclosures no data label reaches.
    pub judge: Option<Arc<dyn Judge>>,
}

impl std::fmt::Debug for RegulationSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegulationSetup")
            .field("regulations", &self.regulations)
            .field("judge", &self.judge.as_ref().map(|j| j.model().name))
            .finish_non_exhaustive()
    }
}

impl RegulationSetup {
    /// `names` (case-insensitive, duplicates dropped) decided by `norms` in `context`;
    /// a name the set does not define is refused.
    pub fn new<S: AsRef<str>>(
        names: impl IntoIterator<Item = S>,
        norms: Norms,
        context: RegulationContext,
    ) -> Result<Self, EngineError> {
        let mut upper = Vec::new();
        for r in names {
            let r = r.as_ref();
            let name = r.trim().to_ascii_uppercase();
            if !norms.defines(&name) {
                return Err(EngineError::UndefinedRegulation {
                    name: r.to_owned(),
                    defined: norms.regulations().collect::<Vec<_>>().join(", "),
                });
            }
            if !upper.contains(&name) {
                upper.push(name);
            }
        }
        Ok(Self {
            regulations: Regulations::decided_by(upper, &norms, context),
            norms: Arc::new(norms),
            judge: None,
        })
    }

    /// The same setup with `judge` classifying what no data label reaches.
    pub fn with_judge(mut self, judge: impl Into<Arc<dyn Judge>>) -> Self {
        self.judge = Some(judge.into());
        self
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn names_are_normalised_deduplicated_and_undefined_ones_refused() {
        let s = RegulationSetup::new(
            ["gdpr", " GDPR", "hipaa"],
            Norms::embedded().unwrap(),
            RegulationContext::default(),
        )
        .unwrap();
        assert_eq!(s.regulations.names, ["GDPR", "HIPAA"]);
        assert_eq!(s.regulations.policy_hash, Some(s.norms.hash()));
        let e = RegulationSetup::new(
            ["CCPA"],
            Norms::embedded().unwrap(),
            RegulationContext::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&e, EngineError::UndefinedRegulation { name, .. } if name == "CCPA"),
            "{e}"
        );
        assert!(e.is_usage());
    }
}
