#![doc = include_str!("../README.md")]

pub mod aeg;
pub mod apm;
pub mod guard;
pub mod key;
pub mod monitor;
pub mod run;

pub use monitor::{Monitor, Verdict};
