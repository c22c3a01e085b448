//! `knox receipts`: regulators' receipts checked against a bundle — the command shared
//! with `knox-verify` (`knox_verifier::receipts`).

pub use knox_verifier::receipts::*;
