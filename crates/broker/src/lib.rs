#![doc = include_str!("../README.md")]

pub mod host;
pub mod policy;
pub mod worker;

pub use host::{Broker, BrokerError};
