//! Fuzz target: `knox::fuzz::openai_request` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::openai_request(data));
