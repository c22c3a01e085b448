//! Knox's kernel sandbox: confines one tool process and records every denied system call.
#![doc = include_str!("../README.md")]

pub mod audit;
pub mod bpf;
mod cgroup;
mod child;
mod decode;
pub mod filter;
pub mod frame;
mod identity;
mod idmap;
mod launch;
pub mod layers;
mod output;
pub mod policy;
pub mod profile;
pub mod ruleset;
mod spawn;
pub mod supervisor;
mod sys;
mod worker;
mod workers;

pub use cgroup::{CgroupError, CgroupVersion, own_pids_dir};
pub use child::{ConfinedChild, Enforcement, LimitHit, Outcome};

/// What a tool's confinement record says (`denial_audit`) when Landlock's denials of a
/// call may not all be in the evidence ([`ConfinedChild::audit_barrier`] was `false`).
pub const AUDIT_INCOMPLETE: &str = "incomplete: Landlock's audit records of this call may be missing (the audit barrier did not come back in time, or the kernel or the reader lost records); the denials recorded are those read";
pub use identity::{RUN_AS_ENV, RunAs};
pub use layers::{Degraded, Layer, Layers, Protection};
pub use policy::{Access, Limits, PathRule, PolicyError, SandboxPolicy};
pub use profile::{Family, Profile, ProfileError};
pub use spawn::{CgroupMode, PreparedPolicy, Sandbox, SandboxConfig, SandboxError};
pub use supervisor::DeniedSyscall;
pub use sys::ChildStep;
pub use worker::{CallFailure, SHUTDOWN_GRACE, Worker, WorkerReply};
