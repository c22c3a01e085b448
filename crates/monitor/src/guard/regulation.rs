//! The regulation guard lives in `knox-regulation` (shared with the verifier); the
//! monitor runs it through a per-run [`Regulator`] and, where configured, a [`Judge`].

pub use knox_regulation::check::NOT_EVALUATED_NOTE;
pub use knox_regulation::{Judge, Norms, Regulator, RegulatorError};
