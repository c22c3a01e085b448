mod mcp_concurrency;
mod mcp_contract;
mod mcp_sequences;
mod mcp_sessions;
mod mcp_support;
mod openai;
mod openai_sequences;
mod openai_support;
