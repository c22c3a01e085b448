mod contract;
mod engine;
mod mcp;
mod workloads;
