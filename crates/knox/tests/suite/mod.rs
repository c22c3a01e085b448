//! Test suites.

mod cli;
mod guards;
mod journal;
mod support;
mod tamper;
mod workloads;
