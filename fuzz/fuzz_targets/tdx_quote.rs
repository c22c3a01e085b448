//! Fuzz target: `knox::fuzz::tdx_quote` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::tdx_quote(data));
