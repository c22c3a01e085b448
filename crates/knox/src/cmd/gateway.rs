//! `knox gateway mcp|openai`: existing agents under Knox. Argument parsing and printing
//! only; the gateways live in `knox-gateway`.

pub mod mcp;
pub mod openai;

/// `knox gateway …`.
#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// Knox as an MCP server fronting upstream MCP servers (stdio, or Streamable HTTP on loopback).
    Mcp(Box<mcp::McpGatewayArgs>),
    /// An OpenAI-compatible proxy (`/v1/chat/completions`, `/v1/models`) in front of an upstream.
    Openai(Box<openai::OpenaiGatewayArgs>),
}
