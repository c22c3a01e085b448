//! Fuzz target: `knox_gateway::openai::fuzz::request` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_gateway::openai::fuzz::request(data));
