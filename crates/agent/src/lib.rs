#![doc = include_str!("../README.md")]

pub mod executor;
pub mod planner;
pub mod tools;

pub use executor::{AgentTask, Executor, ExecutorFactory, Label, Observation, Step};
pub use knox_regulation::{Judge, JudgeAnswer};
pub use planner::{
    Following, Plan, PlanError, PlanRequest, PlannedCall, Planner, Prompt, Regulations,
    plan_from_table, planned_entry, task_id, task_plan,
};
pub use tools::{RunContext, ToolHost, ToolResult, ToolRunner};
