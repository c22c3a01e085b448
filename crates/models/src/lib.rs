#![doc = include_str!("../README.md")]

pub mod openai;

pub use openai::{Endpoint, ModelError, OpenAiExecutor};
