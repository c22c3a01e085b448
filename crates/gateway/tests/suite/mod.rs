mod mcp_concurrency;
mod mcp_contract;
mod mcp_sessions;
mod mcp_support;
mod openai;
mod openai_support;
