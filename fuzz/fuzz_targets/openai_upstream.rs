//! Fuzz target: `knox::fuzz::openai_upstream` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::openai_upstream(data));
