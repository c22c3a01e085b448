#![doc = include_str!("../README.md")]

pub mod cli;
pub mod client;
pub mod config;
pub mod confine;
pub mod fuzz;
pub mod host;
pub mod import;

pub use config::{Needs, Reach, Server, ServerSpec, ServersFile};
pub use host::{Connection, McpHost};

/// Errors of the MCP tool host.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// `servers.toml` (or a server given on the command line) is invalid.
    #[error("MCP servers: {0}")]
    Config(String),
    /// The kernel sandbox is unavailable or refused the server's policy.
    #[error("MCP sandbox: {0}")]
    Sandbox(String),
    /// The async runtime could not be created.
    #[error("MCP runtime: {0}")]
    Runtime(String),
    /// A server could not be started or did not complete the MCP handshake.
    #[error("MCP server `{server}` did not start: {why}")]
    Start {
        /// The server.
        server: String,
        /// Why.
        why: String,
    },
    /// A request to a server failed.
    #[error("MCP server `{server}`: {why}")]
    Call {
        /// The server.
        server: String,
        /// Why.
        why: String,
    },
    /// The session with a server is closed.
    #[error("MCP server `{0}`: the session is closed")]
    Closed(String),
}
