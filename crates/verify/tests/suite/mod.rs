mod concurrent;
mod key_chain;
mod manifests;
mod mutants;
mod pipeline;
mod tamper;
mod typed_bodies;
