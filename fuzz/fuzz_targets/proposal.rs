//! Fuzz target: `knox_policy::fuzz::proposal` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_policy::fuzz::proposal(data));
