//! Fuzz target: `knox::fuzz::config` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::config(data));
