//! The engine end to end (sessions, contracts, MCP tool hosts): one test binary, suites under `suite/`.

mod suite;
