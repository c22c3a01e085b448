//! `knox receipts`: regulators' receipts checked against a bundle — the command shared
//! with `knox-verify` (`knox_verify_cli::receipts`).

pub use knox_verify_cli::receipts::*;
