#![doc = include_str!("../README.md")]

pub mod adaptive;
pub mod cli;
pub mod contract_demo;
pub mod corpus;
pub mod generate;
pub mod guards;
pub mod overhead;
pub mod paper;
pub mod pool;
pub mod report;
pub mod rng;
pub mod run;
pub mod scenario;
pub mod score;
pub mod trace;
pub mod utility;
pub mod variation;

use std::path::Path;

/// Why an evaluation could not run (never a verdict on a flow: those are scores).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A bundle could not be run.
    #[error(transparent)]
    Run(#[from] knox_monitor::run::RunError),
    /// The harness could not start or run a bundle.
    #[error(transparent)]
    Harness(#[from] knox_harness::HarnessError),
    /// The data is invalid.
    #[error(transparent)]
    Dataset(#[from] knox_dataset::cases::DatasetError),
    /// Platform evidence could not be produced.
    #[error(transparent)]
    Platform(#[from] knox_attest::platform::PlatformError),
    /// Hashing or signing failed.
    #[error(transparent)]
    Canon(#[from] knox_types::canon::CanonError),
    /// A file could not be read or written.
    #[error("`{path}`: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// JSON (de)serialization failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// A plot could not be drawn.
    #[error("plot `{0}`")]
    Plot(String),
    /// Anything else inconsistent.
    #[error("{0}")]
    Invalid(String),
}

impl EvalError {
    /// An I/O error on `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl From<knox_types::action::ActionError> for EvalError {
    fn from(e: knox_types::action::ActionError) -> Self {
        Self::Invalid(e.to_string())
    }
}

/// Progress of a long run, for a progress bar (the library draws nothing itself).
pub trait Progress: Sync {
    /// A phase of `total` steps begins.
    fn begin(&self, phase: &str, total: u64);
    /// `n` steps are done.
    fn advance(&self, n: u64);
    /// A line for the user.
    fn note(&self, line: &str);
    /// The phase ended.
    fn end(&self);
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _: &str, _: u64) {}
    fn advance(&self, _: u64) {}
    fn note(&self, _: &str) {}
    fn end(&self) {}
}
