//! Fuzz target: the parsers below must not panic on any input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(m) = knox_policy::fuzz::manifest() {
        knox_gateway::openai::fuzz::upstream(data, m);
    }
});
