//! Fuzz target: `knox_server::fuzz::live_delivery` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_server::fuzz::live_delivery(data));
