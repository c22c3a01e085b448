//! Tool execution behind a trait: a runner executes one allowed action; a host (the
//! broker) serves whole runs under its own enforcement. Kernel confinement plugs in
//! behind the same traits.

use knox_types::Action;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use knox_types::payload::KernelEvent;
use serde_json::Value;

/// What executing an action produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolResult {
    /// The tool's output (a tool error is an output too).
    pub output: Value,
    /// Denials the kernel layer or the broker reported while the tool ran.
    pub kernel: Vec<KernelEvent>,
    /// How the tool was confined, when it ran in the kernel sandbox.
    pub confinement: Option<Value>,
}

impl ToolResult {
    /// `who` (the broker, a host) refused to run the call, for `reason`: the agent
    /// reads `{"error": "WHO refused: REASON"}`, the evidence a `refusal` kernel event.
    pub fn refused(who: &str, reason: String) -> Self {
        Self {
            output: serde_json::json!({"error": format!("{who} refused: {reason}")}),
            kernel: vec![KernelEvent::refusal(reason)],
            confinement: None,
        }
    }
}

impl From<Value> for ToolResult {
    fn from(output: Value) -> Self {
        Self {
            output,
            kernel: Vec::new(),
            confinement: None,
        }
    }
}

/// Runs allowed actions. A runner that enforces grants (the broker) refuses an action
/// without a valid, unconsumed one.
pub trait ToolRunner: Send + Sync {
    /// Executes `action` under `grant`.
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult;
}

/// A runner behind a box runs as the one it holds.
impl<R: ToolRunner + ?Sized> ToolRunner for Box<R> {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        (**self).run(action, grant)
    }
}

/// What a tool host learns about the run it serves.
#[derive(Clone, Copy)]
pub struct RunContext<'r> {
    /// The run's APM (its `Auth` is the kernel policy).
    pub apm: &'r knox_types::apm::Apm,
    /// `H(APM)`, which grants must name.
    pub apm_hash: Digest,
    /// The monitor's public key, which signs grants.
    pub monitor_key: &'r knox_types::bundle::PublicKey,
    /// Run identifier.
    pub run_id: &'r str,
    /// Answers, in process, the tools the host does not run for real (a harness's
    /// simulated tools); a host takes a tool's output from it with a `None` grant.
    pub canned: &'r dyn ToolRunner,
}

impl std::fmt::Debug for RunContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("apm_hash", &self.apm_hash)
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

/// Something that runs tools for whole runs under its own enforcement (the broker).
pub trait ToolHost: Send + Sync {
    /// A runner for one run.
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String>;
}

/// A host behind a box hosts as the one it holds.
impl<H: ToolHost + ?Sized> ToolHost for Box<H> {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        (**self).runner(cx)
    }
}

/// A host shared by several sessions (a gateway's one MCP host) hosts as the one it
/// points to.
impl<H: ToolHost + ?Sized> ToolHost for std::sync::Arc<H> {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        (**self).runner(cx)
    }
}
