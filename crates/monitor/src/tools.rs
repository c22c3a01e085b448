//! Tool execution behind a trait, and InjecAgent's tools as functions returning the
//! dataset's responses. Kernel confinement plugs in behind the same trait.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use knox_dataset::Dataset;
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use knox_types::payload::KernelEvent;
use serde_json::{Map, Value, json};

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

/// What a tool host learns about the run it serves.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'r> {
    /// The run's APM (its `Auth` is the kernel policy).
    pub apm: &'r knox_types::apm::Apm,
    /// `H(APM)`, which grants must name.
    pub apm_hash: Digest,
    /// The monitor's public key, which signs grants.
    pub monitor_key: &'r knox_types::bundle::PublicKey,
    /// Run identifier.
    pub run_id: &'r str,
    /// Canned responses of the simulated tools.
    pub canned: &'r SimulatedTools<'r>,
}

/// Something that runs tools for whole runs under its own enforcement (the broker).
pub trait ToolHost: Send + Sync {
    /// A runner for one run.
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String>;
}

/// InjecAgent tools as functions: a planned user-tool call returns its case's response
/// template with the injection placed in it; attacker tools return InjecAgent's canned
/// response when one was recorded for exactly these parameters, and otherwise a
/// response shaped by the tool's declared return fields.
#[derive(Debug)]
pub struct SimulatedTools<'a> {
    data: &'a Dataset,
    manifest: &'a ToolkitManifest,
    responses: Mutex<HashMap<Digest, VecDeque<Value>>>,
}

impl<'a> SimulatedTools<'a> {
    /// Tools for a run with no planned responses yet.
    pub fn new(data: &'a Dataset, manifest: &'a ToolkitManifest) -> Self {
        Self {
            data,
            manifest,
            responses: Mutex::new(HashMap::new()),
        }
    }

    /// Makes the next call of `action` return `output`. Responses for the same action
    /// are returned in the order given; the last one repeats.
    pub fn respond(&mut self, action: &Action, output: Value) {
        let map = self
            .responses
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        map.entry(action.hash()).or_default().push_back(output);
    }
}

impl ToolRunner for SimulatedTools<'_> {
    fn run(&self, action: &Action, _: Option<&Grant>) -> ToolResult {
        ToolResult::from(self.respond_to(action))
    }
}

impl SimulatedTools<'_> {
    /// The simulated response to `action`.
    pub fn respond_to(&self, action: &Action) -> Value {
        {
            let mut map = self
                .responses
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(q) = map.get_mut(&action.hash()) {
                let next = if q.len() > 1 {
                    q.pop_front()
                } else {
                    q.front().cloned()
                };
                if let Some(v) = next {
                    return v;
                }
            }
        }
        if let Some(v) = self.data.attacker_response(&action.tool, &action.params) {
            return v.clone();
        }
        let Some(entry) = self.manifest.tool(&action.tool) else {
            return json!({"error": format!("unknown tool `{}`", action.tool)});
        };
        let mut out = Map::new();
        for r in &entry.spec.returns {
            let v = match r.ty.as_str() {
                "boolean" => json!(true),
                "integer" | "number" => json!(0),
                "array" => json!([]),
                "object" => json!({}),
                _ => json!(format!("{}-1", r.name)),
            };
            out.insert(r.name.clone(), v);
        }
        Value::Object(out)
    }
}
