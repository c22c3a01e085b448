//! Fuzz target: `knox_policy::fuzz::toolkit_manifest` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox_policy::fuzz::toolkit_manifest(data));
