#![doc = include_str!("../README.md")]

pub mod contract;
pub mod error;
pub mod live;
pub mod mcp;
pub mod regulation;
pub mod session;
pub mod workload;

pub use error::EngineError;
pub use knox_agent::{Prompt, ToolResult};
pub use knox_attest::simulated::Simulated;
pub use knox_monitor::monitor::{Ticket, Verdict};
pub use knox_monitor::run::{RunOutcome, RunStats};
pub use live::{LiveRun, OpenRun};
pub use regulation::RegulationSetup;
pub use session::{Session, SessionBuilder};
pub use workload::{ExecutorKind, TerminalTask, WorkloadRun};
