//! The monitor's run loop and its dependency graph: one test binary, suites under `suite/`.

mod suite;
