#![doc = include_str!("../README.md")]

pub mod contract;
pub mod error;
pub mod live;
pub mod regulation;
pub mod session;

pub use error::EngineError;
pub use live::{LiveRun, OpenRun};
pub use regulation::RegulationSetup;
pub use session::{
    Encoding, Session, SessionBuilder, bundle_bytes, encoded_bundle, stored_bundle, write_bundle,
    write_parts,
};

// Every type the builder takes, and every type a run hands back, from its own crate:
// an embedder needs `knox-engine` alone.
pub use knox_agent::{
    AgentTask, Executor, ExecutorFactory, Following, Judge, Label, Observation, Plan, PlanError,
    PlannedCall, Planner, Prompt, Regulations, RunContext, Step, ToolHost, ToolResult, ToolRunner,
};
pub use knox_attest::TeeKey;
pub use knox_attest::platform::PlatformBackend;
pub use knox_attest::simulated::Simulated;
pub use knox_contract::Verified;
pub use knox_monitor::aeg::Checkpoints;
pub use knox_monitor::guard::stop::StopSignal;
pub use knox_monitor::monitor::{ApprovalSource, Ticket, Verdict};
pub use knox_monitor::run::{RunOutcome, RunStats, Runtime};
pub use knox_policy::ToolkitManifest;
pub use knox_regulation::Norms;
pub use knox_types::Action;
pub use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind, TrajectoryMode};
pub use knox_types::bundle::{Bundle, ModelInfo};
pub use knox_types::regulation::RegulationContext;
