//! The engine end to end (sessions, contracts, MCP tool hosts, workloads): one test binary, suites under `suite/`.

mod suite;
