//! Fuzz target: `knox::fuzz::evidence` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::evidence(data));
