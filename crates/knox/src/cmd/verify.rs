//! `knox verify`: offline verification of bundles and journals — the command shared
//! with `knox-verify` (`knox_verify_cli::verify`; the verification itself is
//! `knox_verify`).

pub use knox_verify_cli::verify::*;
