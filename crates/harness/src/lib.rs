#![doc = include_str!("../README.md")]

pub mod executor;
pub mod planner;
pub mod run;
pub mod suite;
pub mod tools;
pub mod workload;

pub use executor::{BenignFactory, InjectedFactory, Origin, ParaphraseFactory};
pub use planner::DatasetPlanner;
pub use run::{GroundTruth, Harness, HarnessError, bundles, run_bundle};
pub use suite::{ExecutorKind, Suite, SuiteRun, TerminalTask, terminal_tasks};
pub use tools::SimulatedTools;
pub use workload::{PAPER_WORKLOADS, Workload};
