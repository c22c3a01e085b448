//! Integration tests of the whole system: one binary, suites under `suite/`.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

mod suite;
