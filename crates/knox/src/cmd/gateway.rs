//! `knox gateway mcp|openai`: existing agents under Knox. Argument parsing and printing
//! only; the gateways live in `knox-gateway`.

pub mod mcp;
pub mod openai;

/// `--planner SPEC` of either gateway: a model spec for the planner's role.
fn planner_spec(s: &str) -> Result<knox_models::ModelSpec, String> {
    knox_models::ModelSpec::parse_for(s, knox_models::SpecRole::Planner).map_err(|e| e.to_string())
}

/// `knox gateway …`.
#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// Knox as an MCP server fronting upstream MCP servers (stdio, or Streamable HTTP on loopback).
    Mcp(Box<mcp::McpGatewayArgs>),
    /// An OpenAI-compatible proxy (`/v1/chat/completions`, `/v1/models`) in front of an upstream.
    Openai(Box<openai::OpenaiGatewayArgs>),
}
