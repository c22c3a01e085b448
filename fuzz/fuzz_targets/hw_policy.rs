//! Fuzz target: `knox_hw::fuzz::hw_policy` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_hw::fuzz::hw_policy(data));
