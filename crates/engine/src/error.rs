//! The engine's errors: typed, so a front end can classify them (a missing piece of
//! the session is the caller's mistake; a platform that cannot bind the key is
//! unavailable; a journal that cannot be written is I/O).

use knox_monitor::run::RunError;

/// Errors that prevent building a session or running one (never a decision about an
/// action: those are [`Verdict`](crate::Verdict)s, recorded as evidence).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The session lacks a piece this needs (named as the builder method that sets it).
    #[error("the session has no {0}: set it with `SessionBuilder::{0}`")]
    Missing(&'static str),
    /// Two pieces of the session contradict each other.
    #[error("invalid session: {0}")]
    Invalid(&'static str),
    /// The key could not be bound through the platform backend.
    #[error("binding the key through `{mode}`")]
    Platform {
        /// The backend's mode.
        mode: knox_types::bundle::PlatformMode,
        /// Why.
        #[source]
        source: Box<RunError>,
    },
    /// A regulation name the policy set does not define.
    #[error("--regulations: `{name}` is not defined by the policy set (it defines {defined})")]
    UndefinedRegulation {
        /// The name as given.
        name: String,
        /// The names the set defines, comma-separated.
        defined: String,
    },
    /// One run failed.
    #[error("running bundle {run_id}")]
    Bundle {
        /// The run.
        run_id: String,
        /// Why.
        #[source]
        source: Box<RunError>,
    },
    /// A ticket handed back to a run none of whose agents it was issued to.
    #[error("the ticket was not issued by this run")]
    UnknownTicket,
    /// A `heard` record the run refuses (an agent it does not have, a malformed one).
    #[error("recording what the run's model heard: {0}")]
    Heard(String),
    /// A live run was started twice, or used after it was finished.
    #[error("this run was already started")]
    AlreadyStarted,
    /// Writing a bundle to the session's output directory failed.
    #[error("writing {path}")]
    Output {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serialising a bundle failed.
    #[error("serialising the bundle")]
    Serialize(#[source] serde_json::Error),
    /// Compacting a bundle failed (a bug: every bundle Knox writes compacts).
    #[error("compacting the bundle")]
    Compact(#[source] knox_types::compact::CompactError),
}

impl EngineError {
    /// Whether the caller's own choices are at fault (a missing or contradictory piece,
    /// an undefined regulation), as opposed to the environment or a bug.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Missing(_)
                | Self::Invalid(_)
                | Self::UndefinedRegulation { .. }
                | Self::AlreadyStarted
        )
    }

    pub(crate) fn bundle(run_id: &str, source: impl Into<RunError>) -> Self {
        Self::Bundle {
            run_id: run_id.into(),
            source: Box::new(source.into()),
        }
    }
}
