//! `knox quote verify` and `knox gpu verify`: hardware evidence on its own — the
//! commands shared with `knox-verify` (`knox_verify_cli::hardware`).

pub use knox_verify_cli::hardware::*;
