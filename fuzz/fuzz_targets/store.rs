//! Fuzz target: `knox_verify::fuzz::store` (a store's bundle with its shared part) must
//! not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_verify::fuzz::store(data));
