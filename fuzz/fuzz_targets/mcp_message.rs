//! Fuzz target: `knox::fuzz::mcp_message` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::mcp_message(data));
