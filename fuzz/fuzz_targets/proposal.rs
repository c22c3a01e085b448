//! Fuzz target: `knox::fuzz::proposal` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::proposal(data));
