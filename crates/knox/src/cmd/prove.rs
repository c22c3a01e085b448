//! `knox prove`: inclusion proofs — the command shared with `knox-verify`
//! (`knox_verifier::prove`; the proof format is `knox_verify::proof`).

pub use knox_verifier::prove::*;
