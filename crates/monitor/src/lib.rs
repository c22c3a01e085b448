#![doc = include_str!("../README.md")]

pub mod aeg;
pub mod apm;
pub mod executor;
pub mod files;
pub mod guard;
pub mod monitor;
pub mod planner;
pub mod run;
pub mod tools;
pub mod workload;

pub use monitor::{Monitor, Verdict};
