//! Fuzz target: `knox::fuzz::contract` (signed-contract reader, contract validation,
//! the decision function, approval tokens) must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| knox::fuzz::contract(data));
