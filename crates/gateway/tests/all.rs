//! Both gateways driven by real clients: one test binary, suites under `suite/`.

mod suite;
