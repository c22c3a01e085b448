//! Fuzz target: `knox_dataset::fuzz::pylit` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_dataset::fuzz::pylit(data));
