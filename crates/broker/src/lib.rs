#![doc = include_str!("../README.md")]

pub mod contract;
pub mod host;
pub mod pinned;
pub mod policy;
pub mod worker;

pub use host::{Broker, BrokerError};
