//! Test suites.

mod cli;
mod fuzz_corpus;
mod guards;
mod journal;
mod support;
mod tamper;
mod workloads;
