//! `knox prove`: inclusion proofs — the command shared with `knox-verify`
//! (`knox_verify_cli::prove`; the proof format is `knox_verify::proof`).

pub use knox_verify_cli::prove::*;
