//! A mail toolkit in the InjecAgent format: `MailSend` (to, body; `to` a sink) and
//! `MailRead` (id), a network-client toolkit reaching `mail.example:443`.

use knox_agent::{Plan, PlanError, PlanRequest, Planner};
use knox_policy::ToolkitManifest;
use knox_types::apm::ExpectedCall;
use knox_types::bundle::ModelInfo;
use serde_json::{Map, Value};

/// The toolkit's tools (InjecAgent's JSON format).
pub const TOOLS: &str = r#"[
  {"toolkit": "Mail", "name_for_model": "Mail", "name_for_human": "Mail", "description_for_model": "d", "description_for_human": "d",
   "tools": [
     {"name": "Send", "summary": "s", "parameters": [
        {"name": "to", "type": "string", "description": "d", "required": true},
        {"name": "body", "type": "string", "description": "d", "required": true}],
      "returns": [{"name": "success", "type": "boolean", "description": "d"}]},
     {"name": "Read", "summary": "s", "parameters": [
        {"name": "id", "type": "string", "description": "d", "required": true}],
      "returns": [{"name": "email", "type": "object", "description": "d"}]}]}
]"#;

/// What the toolkit needs of the kernel (the needs file beside the tools).
pub const NEEDS: &str = r#"
version = 1
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = [{ path = "/usr/lib", access = ["read", "execute"] }]
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }

[toolkits.Mail]
profile = "network-client"
syscalls = ["socket", "connect"]
endpoints = [{ host = "mail.example", port = 443 }]
cost = 2
[toolkits.Mail.tools.Send]
sinks = ["to"]
"#;

/// The toolkit's manifest.
pub fn manifest() -> ToolkitManifest {
    ToolkitManifest::from_sources(TOOLS, NEEDS).expect("the mail toolkit")
}

/// The parameters of the one call [`ReadPlanner`] plans: `{"id": "1"}`.
pub fn read_params() -> Map<String, Value> {
    let mut params = Map::new();
    params.insert("id".into(), Value::from("1"));
    params
}

/// Plans every task as one `MailRead` of message `1`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadPlanner;

impl Planner for ReadPlanner {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        let tasks = (0..request.prompt.tasks.len())
            .map(|i| {
                let task = knox_agent::task_id(i);
                vec![ExpectedCall::exact(task, "MailRead", read_params())]
            })
            .collect();
        Ok(Plan { tasks })
    }

    fn model(&self) -> ModelInfo {
        crate::model("planner", "fixed")
    }
}
