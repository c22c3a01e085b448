//! Test suites.

mod adaptive;
mod cli;
mod confined;
mod contracts;
mod conventions;
mod crate_graph;
mod eval;
mod evidence_bytes;
mod files;
mod fuzz_corpus;
mod gateway_mcp;
mod gateway_openai;
mod guards;
mod hardware;
mod journal;
mod mcp;
mod mcp_http;
mod models;
mod planning;
mod regulation;
mod repository;
mod robustness;
mod server;
mod support;
mod tamper;
mod toolkit;
