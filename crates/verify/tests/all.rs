//! Verification of real and mutated evidence: one test binary, suites under `suite/`.

mod suite;
