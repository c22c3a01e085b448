#![doc = include_str!("../README.md")]

pub mod catalog;
pub mod chat;
pub mod cli;
pub mod executor;
pub mod judge;
pub mod latency;
pub mod local;
pub mod openai;
pub mod planner;
pub mod pull;
pub mod registry;
pub mod spec;
pub mod tools;

pub use chat::{Chat, Format, Message, ModelError, Reply, Role, ToolCall, ToolDef};
pub use executor::ChatExecutor;
pub use judge::ChatJudge;
pub use local::{InferenceStats, LocalModel, LocalOptions, LocalSource};
pub use openai::Endpoint;
pub use planner::{ChatPlanner, UserPlans};
pub use registry::{Models, OpenError};
pub use spec::{ModelSpec, SpecRole};
