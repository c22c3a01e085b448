mod contract;
mod engine;
mod mcp;
