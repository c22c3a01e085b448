//! The regulation guard: contextual-integrity flows `φ` derived from data labels and
//! decided by GDPR and HIPAA norms written as Cedar policies — the same code in the
//! monitor, which records each decision, and in the offline verifier, which recomputes
//! it from the APM and the recorded outputs.

pub mod address;
pub mod analysis;
pub mod check;
#[cfg(test)]
mod coverage_tests;
pub mod extract;
pub mod flow;
pub mod judge;
pub mod norms;
pub mod obligations;
pub mod phi;
mod slice;
pub mod vocab;

pub use check::{Regulator, RegulatorError};
pub use flow::{Directory, Seen};
pub use judge::{Judge, JudgeAnswer, JudgeQuestion};
pub use norms::{FlowExtra, NormError, Norms};
pub use obligations::Obligation;
pub use phi::{FlowDecision, Phi};
pub use vocab::{TermKind, Vocabulary};
