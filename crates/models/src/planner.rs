//! A planner on an OpenAI-compatible endpoint: the model writes each task's expected
//! calls as JSON; every call is validated against the toolkit manifest, and a plan that
//! names unknown tools or violates a schema is sent back with the fault, a bounded
//! number of times.

use knox_monitor::apm::Regulations;
use knox_monitor::planner::{Plan, PlanError, Planner, Prompt};
use knox_policy::ToolkitManifest;
use knox_types::apm::{ExpectedCall, StopPolicy};
use knox_types::bundle::ModelInfo;
use serde_json::{Value, json};

use crate::openai::{Endpoint, Reply};

/// Attempts per task before planning fails.
pub const PLAN_ATTEMPTS: usize = 3;

/// Plans with a model.
#[derive(Debug)]
pub struct OpenAiPlanner {
    endpoint: Endpoint,
}

impl OpenAiPlanner {
    /// A planner calling `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint }
    }
}

const SYSTEM: &str = "You are a planner. Given a user's task and the tools available, write the exact \
tool calls that complete the task, in order, as JSON: {\"calls\": [{\"tool\": NAME, \"params\": {...}}]}. \
Use only the listed tools and only parameters they declare. Reply with the JSON object only.";

fn catalogue(manifest: &ToolkitManifest) -> String {
    let mut lines: Vec<String> = manifest
        .tools()
        .map(|t| {
            let params: Vec<String> = t
                .spec
                .parameters
                .iter()
                .map(|p| {
                    format!(
                        "{}: {}{}",
                        p.name,
                        p.ty,
                        if p.required.unwrap_or(false) { "" } else { "?" }
                    )
                })
                .collect();
            format!("{}({}) — {}", t.name, params.join(", "), t.spec.summary)
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// Parses and validates a model's plan for task `task`.
fn validate(
    text: &str,
    task: u32,
    manifest: &ToolkitManifest,
) -> Result<Vec<ExpectedCall>, String> {
    let trimmed = text
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```");
    let v: Value = serde_json::from_str(trimmed).map_err(|e| format!("not JSON: {e}"))?;
    let calls = v
        .get("calls")
        .and_then(Value::as_array)
        .ok_or("no `calls` array")?;
    if calls.is_empty() {
        return Err("the plan has no calls".into());
    }
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let tool = c
            .get("tool")
            .and_then(Value::as_str)
            .ok_or("a call has no `tool`")?;
        let params = c
            .get("params")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let entry = manifest
            .tool(tool)
            .ok_or_else(|| format!("unknown tool `{tool}`"))?;
        knox_policy::schema::validate(entry, &params).map_err(|e| format!("`{tool}`: {e}"))?;
        out.push(ExpectedCall::exact(task, tool, params));
    }
    Ok(out)
}

impl Planner for OpenAiPlanner {
    fn plan(
        &self,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        _: &Regulations,
        _: &StopPolicy,
    ) -> Result<Plan, PlanError> {
        let tools = catalogue(manifest);
        let mut tasks = Vec::with_capacity(prompt.tasks.len());
        for (i, instruction) in prompt.tasks.iter().enumerate() {
            let task = u32::try_from(i).unwrap_or(u32::MAX);
            let mut messages = vec![
                json!({"role": "system", "content": SYSTEM}),
                json!({"role": "user", "content": format!("Tools:\n{tools}\n\nTask: {instruction}")}),
            ];
            let mut last = String::new();
            let mut planned = None;
            for _ in 0..PLAN_ATTEMPTS {
                let text = match self.endpoint.chat(&messages, &[]) {
                    Ok(Reply::Final(t)) => t,
                    Ok(Reply::ToolCall { .. }) => "a tool call instead of a plan".into(),
                    Err(e) => return Err(PlanError::Model(e.to_string())),
                };
                match validate(&text, task, manifest) {
                    Ok(calls) => {
                        planned = Some(calls);
                        break;
                    }
                    Err(fault) => {
                        messages.push(json!({"role": "assistant", "content": text}));
                        messages.push(json!({"role": "user", "content": format!("That plan is invalid: {fault}. Reply with a corrected plan.")}));
                        last = fault;
                    }
                }
            }
            let calls = planned.ok_or_else(|| {
                PlanError::Model(format!(
                    "task {i}: no valid plan in {PLAN_ATTEMPTS} attempts: {last}"
                ))
            })?;
            tasks.push(calls);
        }
        Ok(Plan { tasks })
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: "planner".into(),
            name: self.endpoint.spec(),
            weights_hash: self.endpoint.declared_weights,
            declared: true,
        }
    }
}
