//! One parser for every model the CLI names: `dataset` (plans from the data), `benign`
//! and `injected` (the deterministic executors), `local:NAME` or `local:PATH.gguf`, and
//! `openai:URL#MODEL`.

use std::fmt;
use std::str::FromStr;

use crate::chat::ModelError;
use crate::local::LocalSource;
use crate::openai::Endpoint;

/// A model as the CLI names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSpec {
    /// Plans taken from the dataset (planner only).
    Dataset,
    /// The deterministic executor that follows the plan (executor only).
    Benign,
    /// The deterministic executor that obeys injected instructions (executor only).
    Injected,
    /// A GGUF model run here.
    Local(LocalSource),
    /// An OpenAI-compatible chat-completions server.
    OpenAi(Endpoint),
}

/// What a spec is asked to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecRole {
    /// `--planner`.
    Planner,
    /// `--executor`.
    Executor,
    /// `--judge`: a model, never a deterministic stand-in.
    Judge,
}

impl ModelSpec {
    /// Parses `s` for `role`, refusing the deterministic stand-ins of the other role.
    pub fn parse_for(s: &str, role: SpecRole) -> Result<Self, ModelError> {
        let spec: Self = s.parse()?;
        let fits = match role {
            SpecRole::Planner => !matches!(spec, Self::Benign | Self::Injected),
            SpecRole::Executor => !matches!(spec, Self::Dataset),
            SpecRole::Judge => spec.is_model(),
        };
        if fits {
            Ok(spec)
        } else {
            Err(ModelError::Spec {
                spec: s.into(),
                why: match role {
                    SpecRole::Planner => "a planner is dataset, local:… or openai:…".into(),
                    SpecRole::Executor => {
                        "an executor is benign, injected, local:… or openai:…".into()
                    }
                    SpecRole::Judge => "a judge is local:… or openai:…".into(),
                },
            })
        }
    }

    /// Whether a model (rather than a deterministic stand-in) is named.
    pub fn is_model(&self) -> bool {
        matches!(self, Self::Local(_) | Self::OpenAi(_))
    }
}

impl FromStr for ModelSpec {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Self, ModelError> {
        match s {
            "dataset" => return Ok(Self::Dataset),
            "benign" => return Ok(Self::Benign),
            "injected" => return Ok(Self::Injected),
            _ => {}
        }
        if s.starts_with("openai:") {
            return Endpoint::parse(s).map(Self::OpenAi);
        }
        if let Some(rest) = s.strip_prefix("local:") {
            return LocalSource::parse(rest)
                .map(Self::Local)
                .ok_or_else(|| ModelError::Spec {
                    spec: s.into(),
                    why: format!(
                        "not a known model ({}) nor a path to a .gguf file",
                        crate::catalog::CATALOG
                            .iter()
                            .map(|e| e.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
        }
        Err(ModelError::Spec {
            spec: s.into(),
            why: "expected dataset, benign, injected, local:NAME, local:PATH.gguf or openai:URL#MODEL"
                .into(),
        })
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dataset => f.write_str("dataset"),
            Self::Benign => f.write_str("benign"),
            Self::Injected => f.write_str("injected"),
            Self::Local(l) => f.write_str(&l.spec()),
            Self::OpenAi(e) => f.write_str(&e.spec()),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn every_form_parses_and_prints_back() {
        for s in [
            "dataset",
            "benign",
            "injected",
            "local:smollm2",
            "local:gemma3-270m",
            "local:/models/x.gguf",
            "openai:http://127.0.0.1:8080#qwen3",
        ] {
            assert_eq!(s.parse::<ModelSpec>().unwrap().to_string(), s);
        }
        assert_eq!(
            "local:./m.gguf".parse::<ModelSpec>().unwrap(),
            ModelSpec::Local(LocalSource::File(PathBuf::from("./m.gguf")))
        );
        for bad in ["", "local:", "local:nosuchmodel", "openai:x", "gpt"] {
            assert!(bad.parse::<ModelSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn stand_ins_belong_to_their_role() {
        assert!(ModelSpec::parse_for("dataset", SpecRole::Executor).is_err());
        assert!(ModelSpec::parse_for("benign", SpecRole::Planner).is_err());
        assert!(ModelSpec::parse_for("local:smollm2", SpecRole::Planner).is_ok());
        assert!(ModelSpec::parse_for("injected", SpecRole::Executor).is_ok());
    }
}
