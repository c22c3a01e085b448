//! Knox gateways for agents Knox does not run itself.
//!
//! - [`mcp`]: Knox as an MCP server fronting upstream MCP servers (`knox gateway mcp`).
//! - [`openai`]: an OpenAI-compatible proxy in front of any chat-completions upstream
//!   (`knox gateway openai`).
//!
//! Each gateway session is one run of the [`knox_engine`] front door: its policy is
//! planned (or contracted) when the session opens, every tool call is mediated through
//! [`knox_engine::LiveRun`], and the session ends with a sealed, verifiable bundle.

pub mod mcp;
pub mod openai;
