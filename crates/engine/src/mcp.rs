//! MCP servers as the session's tool host (`knox run --mcp servers.toml`): allowed
//! calls named `SERVER.TOOL` go to that server through `knox_mcp::McpHost` — stdio
//! servers confined in the kernel sandbox from their needs, Streamable-HTTP servers
//! at their declared URL — and come back as untrusted `tool_output` nodes, with every
//! kernel denial recorded under the call.

use std::path::{Path, PathBuf};

use crate::EngineError;
use crate::session::SessionBuilder;

impl SessionBuilder {
    /// Serves allowed calls from the MCP servers declared in `servers` (a
    /// `servers.toml`, see `docs/mcp.md`); each run's server workspaces live under
    /// `workspaces` and are removed when the run ends. Replaces any other host.
    pub fn mcp_servers(self, servers: &Path, workspaces: PathBuf) -> Result<Self, EngineError> {
        let host = knox_mcp::McpHost::from_file(servers, workspaces).map_err(EngineError::Mcp)?;
        Ok(self.host(host))
    }

    /// [`mcp_servers`](Self::mcp_servers) with a host built by the caller (its own
    /// sandbox configuration, degraded modes, kept workspaces).
    pub fn mcp_host(self, host: knox_mcp::McpHost) -> Self {
        self.host(host)
    }
}
