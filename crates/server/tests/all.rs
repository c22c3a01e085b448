//! The evidence store, its HTTP API, live runs and the UI in a real browser: one test binary, suites under `suite/`.

mod suite;
