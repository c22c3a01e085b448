mod concurrent;
mod key_chain;
mod manifests;
mod mutants;
mod parallel;
mod pipeline;
mod tamper;
mod typed_bodies;
