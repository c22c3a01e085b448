#![doc = include_str!("../README.md")]

pub mod openai;
pub mod planner;

pub use openai::{Endpoint, ModelError, OpenAiExecutor};
pub use planner::OpenAiPlanner;
