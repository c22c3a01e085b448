//! Fuzz target: `knox_contract::fuzz::contract` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_contract::fuzz::contract(data));
