//! Wall-clock time per model call, whatever the backend: what a planner's plan or an
//! executor's step costs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Calls timed so far.
#[derive(Debug, Default)]
pub struct Latency {
    inner: Mutex<Totals>,
}

/// A snapshot of [`Latency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Calls.
    pub calls: u64,
    /// Their total time.
    pub total: Duration,
    /// The longest one.
    pub max: Duration,
}

impl Totals {
    /// Mean time per call.
    pub fn mean(&self) -> Duration {
        u32::try_from(self.calls)
            .ok()
            .and_then(|n| self.total.checked_div(n))
            .unwrap_or_default()
    }
}

impl Latency {
    /// Runs `f`, adding its time.
    pub fn time<T>(&self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        let took = t.elapsed();
        let mut g = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.calls += 1;
        g.total += took;
        g.max = g.max.max(took);
        out
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        *self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
