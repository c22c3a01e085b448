//! External stop signals: a flag set through a channel-like handle, a Unix signal
//! handler, or the existence of a file.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The external stop condition watched by the stop guard.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    flag: Arc<AtomicBool>,
    file: Option<PathBuf>,
}

impl StopSignal {
    /// A signal that fires only when triggered through a handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// A signal that fires when `flag` is set: a flag the process's signal handlers
    /// were registered with before any work began (so a signal arriving while the
    /// run starts up still stops it, with evidence, instead of killing the process).
    pub fn from_flag(flag: Arc<AtomicBool>) -> Self {
        Self { flag, file: None }
    }

    /// Also fire when `path` exists.
    pub fn with_file(mut self, path: PathBuf) -> Self {
        self.file = Some(path);
        self
    }

    /// A handle other threads (or a Unix signal handler through [`StopSignal::flag`]) use
    /// to stop the run.
    pub fn handle(&self) -> StopHandle {
        StopHandle(self.flag.clone())
    }

    /// The shared flag, for registration with a signal handler
    /// (e.g. `signal_hook::flag::register`).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }

    /// Whether the stop condition is present now.
    pub fn is_set(&self) -> bool {
        self.flag.load(Ordering::Acquire) || self.file.as_ref().is_some_and(|p| p.exists())
    }
}

/// Sends the external stop.
#[derive(Clone, Debug)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Stops the run: every agent is interrupted at its next proposal.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn handle_and_file_both_fire() {
        let s = StopSignal::new();
        assert!(!s.is_set());
        s.handle().stop();
        assert!(s.is_set());
        let dir = std::env::temp_dir().join(format!("knox-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("STOP");
        let s = StopSignal::new().with_file(f.clone());
        assert!(!s.is_set());
        std::fs::write(&f, b"").unwrap();
        assert!(s.is_set());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
