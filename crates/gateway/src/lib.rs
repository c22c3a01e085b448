//! Knox gateways for agents Knox does not run itself.
//!
//! - [`mcp`]: Knox as an MCP server fronting upstream MCP servers (`knox gateway mcp`).
//! - [`openai`]: an OpenAI-compatible proxy in front of any chat-completions upstream
//!   (`knox gateway openai`).
//! - [`heard`]: the label store both keep of what their models heard across runs.
//!
//! Each gateway session is one run of the [`knox_engine`] front door: its policy is
//! planned (or contracted) when the session opens, every tool call is mediated through
//! [`knox_engine::LiveRun`], and the session ends with a sealed, verifiable bundle.

pub mod heard;
pub mod mcp;
pub mod openai;

/// The listener every gateway serves HTTP on: each accepted connection has Nagle's
/// algorithm off (`TCP_NODELAY`). An answer written in more than one piece — the
/// MCP gateway's event stream (its priming event, then the tool result), the proxy's
/// streamed chunks — otherwise waits for the client's delayed acknowledgement of the
/// previous piece: about 40 ms per answer on Linux, as measured behind an MCP
/// upstream that leaves Nagle on (docs/gateway-mcp.md, "Measured").
pub(crate) fn no_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|tcp| {
        // Best effort: a socket that refuses the option still serves, only slower.
        let _ = tcp.set_nodelay(true);
    })
}
