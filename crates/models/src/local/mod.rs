//! The local backend: GGUF model files — a catalogue name resolved in the model cache,
//! or a path — run on llama.cpp when Knox is built with the `local` feature. Without
//! it, loading a local model is refused with a message naming the feature.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::catalog::{self, Entry};
use crate::chat::ModelError;

#[cfg(feature = "local")]
mod engine;
#[cfg(feature = "local")]
pub use engine::LocalModel;

#[cfg(not(feature = "local"))]
mod stub;
#[cfg(not(feature = "local"))]
pub use stub::LocalModel;

/// Whether this build runs local models.
pub const AVAILABLE: bool = cfg!(feature = "local");

/// Which local model: a catalogue entry (looked up in the cache) or a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalSource {
    /// A model `knox model pull` knows.
    Catalog(&'static Entry),
    /// A GGUF file.
    File(PathBuf),
}

impl LocalSource {
    /// Parses what follows `local:`: a catalogue name, or a path to a `.gguf` file.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(e) = catalog::find(s) {
            return Some(Self::Catalog(e));
        }
        let looks_like_path = s.contains('/') || s.ends_with(".gguf");
        looks_like_path.then(|| Self::File(PathBuf::from(s)))
    }

    /// The name in the evidence: `local:smollm2` or `local:PATH`.
    pub fn spec(&self) -> String {
        match self {
            Self::Catalog(e) => format!("local:{}", e.name),
            Self::File(p) => format!("local:{}", p.display()),
        }
    }

    /// The model file: a catalogue entry's in `cache`, which must have been pulled.
    pub fn resolve(&self, cache: &Path) -> Result<PathBuf, ModelError> {
        let path = match self {
            Self::Catalog(e) => crate::pull::cached_path(cache, e),
            Self::File(p) => p.clone(),
        };
        if path.is_file() {
            return Ok(path);
        }
        Err(match self {
            Self::Catalog(e) => ModelError::NotPulled {
                name: e.name.into(),
                dir: cache.display().to_string(),
            },
            Self::File(p) => ModelError::Local(format!("no model file `{}`", p.display())),
        })
    }

    /// Resolves and loads the model.
    pub fn load(&self, cache: &Path, options: LocalOptions) -> Result<LocalModel, ModelError> {
        if !AVAILABLE {
            // Said first: pulling the weights would not help a build that cannot run them.
            return LocalModel::load(&self.spec(), Path::new(""), options);
        }
        LocalModel::load(&self.spec(), &self.resolve(cache)?, options)
    }
}

/// How the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalOptions {
    /// CPU threads for prompt evaluation and generation. One by default: on a busy
    /// two-core machine two threads made generation collapse.
    pub threads: i32,
    /// Context size in tokens (capped at the model's training context).
    pub context: u32,
    /// Most tokens generated per reply.
    pub max_tokens: usize,
}

impl Default for LocalOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            context: 4096,
            max_tokens: 384,
        }
    }
}

impl LocalOptions {
    /// The defaults, with `KNOX_MODEL_THREADS` when it is a positive number.
    pub fn from_env() -> Self {
        let threads = std::env::var("KNOX_MODEL_THREADS")
            .ok()
            .and_then(|t| t.parse::<i32>().ok())
            .filter(|t| (1..=256).contains(t))
            .unwrap_or(1);
        Self {
            threads,
            ..Self::default()
        }
    }
}

/// Token counts and times of the requests served so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InferenceStats {
    /// Requests.
    pub requests: u64,
    /// Prompt tokens evaluated.
    pub prompt_tokens: u64,
    /// Prompt tokens whose evaluation was reused from the previous request.
    pub reused_tokens: u64,
    /// Time evaluating prompts.
    pub prompt_time: Duration,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Time generating (sampling with the grammar included).
    pub generation_time: Duration,
}

impl InferenceStats {
    fn rate(tokens: u64, time: Duration) -> f64 {
        let s = time.as_secs_f64();
        if s > 0.0 { tokens as f64 / s } else { 0.0 }
    }

    /// Prompt evaluation, tokens per second.
    pub fn prompt_rate(&self) -> f64 {
        Self::rate(self.prompt_tokens, self.prompt_time)
    }

    /// Generation, tokens per second.
    pub fn generation_rate(&self) -> f64 {
        Self::rate(self.generated_tokens, self.generation_time)
    }
}

#[cfg(all(test, not(feature = "local")))]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    /// #34: a build without local models says so for a catalogue model not yet
    /// pulled, rather than telling the user to pull weights it could not run
    /// (`cargo test -p knox-models`, without the workspace's `local` feature).
    #[test]
    fn a_build_without_local_models_names_the_feature_not_the_pull() {
        let src = LocalSource::parse("smollm2").unwrap();
        let empty = std::env::temp_dir().join("knox-models-no-local-cache");
        let e = src.load(&empty, LocalOptions::default()).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("--features knox/local"), "{text}");
        assert!(!text.contains("model pull"), "{text}");
    }
}
