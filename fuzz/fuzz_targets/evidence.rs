//! Fuzz target: `knox_verify::fuzz::evidence` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_verify::fuzz::evidence(data));
