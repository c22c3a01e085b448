//! `knox gateway mcp`.

use anyhow::Result;

/// Arguments of `knox gateway mcp`.
#[derive(Debug, clap::Args)]
pub struct McpGatewayArgs {}

/// Runs the MCP gateway.
pub fn run(_args: &McpGatewayArgs) -> Result<i32> {
    anyhow::bail!("knox gateway mcp: not built yet")
}
