//! The MCP gateway (`knox gateway mcp`).
