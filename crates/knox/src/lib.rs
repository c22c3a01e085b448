#![doc = include_str!("../README.md")]

pub mod cmd;
pub mod fuzz;
pub mod session;
