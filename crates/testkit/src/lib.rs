//! Fixtures shared by Knox's test suites and benches, written once: the toolkits the
//! suites run (a mail toolkit in the InjecAgent format, a bank server in a user's
//! `knox-toolkit/1` manifest), their plans and a fixed planner.
//!
//! A dev-dependency only: nothing here is part of Knox, and a fixture that fails to
//! build fails the test that asked for it.

#![allow(
    clippy::expect_used,
    reason = "fixtures: a fixture that does not build is a failed test"
)]

pub mod bank;
pub mod mail;

use knox_types::bundle::ModelInfo;

/// A model taking part in a run, as the bundle lists it: `role` (`planner`,
/// `executor`, `judge`), `name`, no weights hash, not declared.
pub fn model(role: &str, name: &str) -> ModelInfo {
    ModelInfo {
        role: role.into(),
        name: name.into(),
        weights_hash: None,
        declared: false,
    }
}
