//! Fuzz target: `knox::fuzz::gpu_evidence` must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::gpu_evidence(data));
