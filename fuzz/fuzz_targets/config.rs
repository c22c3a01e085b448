//! Fuzz target: the parsers below must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    knox_mcp::fuzz::servers_file(data);
    knox_server::fuzz::access(data);
});
