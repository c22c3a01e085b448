//! The harness end to end (the paper's workloads through a session, the suites'
//! manifests and run ids): one test binary, suites under `suite/`.

mod suite;
