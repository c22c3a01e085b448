//! InjecAgent's tools as functions returning the dataset's responses.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use knox_agent::{ToolResult, ToolRunner};
use knox_dataset::Dataset;
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use serde_json::{Map, Value, json};

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
