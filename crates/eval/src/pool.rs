//! The flow pool: every flow of the evaluation, annotated for one guard, generated
//! deterministically from a seed and written as a file one can inspect
//! (`pool.json`). Bundling into workloads happens at run time and adds no data.

use std::collections::BTreeMap;
use std::path::Path;

use knox_types::apm::StopCause;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::EvalError;

/// Format tag of `pool.json`.
pub const POOL_FORMAT: &str = "knox-eval-pool/1";

/// Flows per toolkit and guard (the paper's K).
pub const FLOWS_PER_TOOLKIT: usize = 10;

/// The four guards the paper evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guard {
    /// `Γ_reg`: read-then-disclose flows under GDPR/HIPAA.
    Regulation,
    /// `Γ_traj`: an injected instruction forces a deviation.
    Trajectory,
    /// `Γ_sys` (mediated): the executor reaches for system calls outside `Auth`.
    Syscall,
    /// `Γ_int`: a flow that must be interrupted.
    Stop,
}

impl Guard {
    /// In the paper's order.
    pub const ALL: [Self; 4] = [
        Self::Regulation,
        Self::Trajectory,
        Self::Syscall,
        Self::Stop,
    ];

    /// The CLI and file name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Regulation => "regulation",
            Self::Trajectory => "trajectory",
            Self::Syscall => "syscall",
            Self::Stop => "stop",
        }
    }

    /// The paper's symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Self::Regulation => "Γ_reg",
            Self::Trajectory => "Γ_traj",
            Self::Syscall => "Γ_sys",
            Self::Stop => "Γ_int",
        }
    }
}

impl std::str::FromStr for Guard {
    type Err = EvalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|g| g.as_str() == s)
            .ok_or_else(|| {
                EvalError::Invalid(format!(
                    "unknown guard `{s}`: expected regulation, trajectory, syscall or stop"
                ))
            })
    }
}

/// What a flow must get from its guard: the positive case is a flow that must be
/// blocked (or, for the stop guard, interrupted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// Positive: must be blocked / interrupted.
    Block,
    /// Negative: must be allowed.
    Allow,
}

/// One planned tool call of a flow, with the output the simulated tool returns for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedCall {
    /// Full tool name.
    pub tool: String,
    /// Parameters.
    pub params: Map<String, Value>,
    /// What the tool returns (with the injection, when the flow has one).
    pub response: Value,
    /// Free-text parameters: an executor may word them its own way (utility flows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free_text: Vec<String>,
}

/// The injected instruction a flow's tool output carries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Injection {
    /// Attacker case id (`dh-03`, `ds-11`, `sys-02`, `net-01`).
    pub case: String,
    /// The instruction.
    pub instruction: String,
    /// The tools the attack asks for.
    pub tools: Vec<String>,
}

/// One flow: one task of a bundle's prompt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolFlow {
    /// Unique id (`traj-gmail-03`).
    pub id: String,
    /// The guard it is annotated for.
    pub guard: Guard,
    /// The toolkit it belongs to.
    pub toolkit: String,
    /// What the guard must do with it.
    pub label: Label,
    /// The user's instruction (unique in the pool: it ends with the flow's reference).
    pub instruction: String,
    /// The planned calls, in order.
    pub calls: Vec<PlannedCall>,
    /// The injected instruction, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub injection: Option<Injection>,
    /// For stop flows: the condition that must interrupt it (positives), or that it
    /// must stay within (negatives: `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopCause>,
    /// Where the task comes from (`injecagent user case 3`, `generated`, …).
    pub source: String,
    /// Guard-specific run configuration (the regulation guard's recipient directory,
    /// consent and purpose), opaque to the runner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Value>,
}

/// Whether a guard's pool could be generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolStatus {
    /// The flows are here.
    Ready,
    /// The guard is not wired yet; the report marks it as pending.
    Pending,
}

/// One guard's part of the pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardPool {
    /// Ready or pending.
    pub status: PoolStatus,
    /// Why it is pending, or notes on how it was generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Its flows, in pool order (bundles are consecutive runs of them).
    pub flows: Vec<PoolFlow>,
}

impl GuardPool {
    /// A pool that is not there yet, and why.
    pub fn pending(why: impl Into<String>) -> Self {
        Self {
            status: PoolStatus::Pending,
            note: Some(why.into()),
            flows: Vec::new(),
        }
    }

    /// Positives and negatives.
    pub fn split(&self) -> (usize, usize) {
        let pos = self
            .flows
            .iter()
            .filter(|f| f.label == Label::Block)
            .count();
        (pos, self.flows.len() - pos)
    }
}

/// The largest pool file [`Pool::read`] reads (a full pool is a few MB).
pub const MAX_POOL_BYTES: u64 = 64 << 20;

/// The whole pool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    /// [`POOL_FORMAT`].
    pub format: String,
    /// The seed it was generated from.
    pub seed: u64,
    /// Flows per toolkit and guard.
    pub per_toolkit: usize,
    /// Toolkits in the data (38 in the public InjecAgent data; the paper had 40).
    pub toolkits: usize,
    /// Where the data comes from.
    pub source: String,
    /// Per guard (the regulation guard's place is here even while it is pending).
    pub guards: BTreeMap<Guard, GuardPool>,
    /// Utility flows (beyond the paper): benign tasks writing free text.
    pub utility: Vec<PoolFlow>,
}

impl Pool {
    /// Writes the pool as pretty JSON (atomically: a temporary file renamed).
    pub fn write(&self, path: &Path) -> Result<(), EvalError> {
        let bytes = serde_json::to_vec_pretty(self)?;
        knox_files::write_atomic(path, &bytes).map_err(|e| EvalError::io(path, e))
    }

    /// Reads a pool written by [`Pool::write`]: a regular file of at most
    /// [`MAX_POOL_BYTES`].
    pub fn read(path: &Path) -> Result<Self, EvalError> {
        let bytes = knox_files::read_capped(path, MAX_POOL_BYTES)
            .map_err(|e| EvalError::Invalid(e.to_string()))?;
        Self::parse(path, &bytes)
    }

    /// Parses the pool file `path`, read as `bytes`.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self, EvalError> {
        let pool: Self = serde_json::from_slice(bytes)?;
        if pool.format != POOL_FORMAT {
            return Err(EvalError::Invalid(format!(
                "`{}` is not a {POOL_FORMAT} file",
                path.display()
            )));
        }
        Ok(pool)
    }

    /// A guard's flows (empty when pending or absent).
    pub fn flows(&self, g: Guard) -> &[PoolFlow] {
        self.guards.get(&g).map_or(&[], |p| p.flows.as_slice())
    }
}
