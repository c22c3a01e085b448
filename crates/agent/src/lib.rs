#![doc = include_str!("../README.md")]

pub mod executor;
pub mod planner;
pub mod tools;

pub use executor::{AgentTask, Executor, ExecutorFactory, Label, Observation, Step};
pub use knox_regulation::{Judge, JudgeAnswer};
pub use planner::{Following, Plan, PlanError, PlannedCall, Planner, Prompt, Regulations, task_id};
pub use tools::{RunContext, ToolHost, ToolResult, ToolRunner};
