//! Fuzz target: `knox_hw::fuzz::tdx_quote` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_hw::fuzz::tdx_quote(data));
