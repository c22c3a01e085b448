//! Integration suites, one file per layer.

mod abi;
mod corpus;
mod exec;
mod filesystem;
mod identity;
mod limits;
mod network;
mod support;
mod syscalls;
mod worker;
