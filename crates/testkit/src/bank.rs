//! A user's own tools in a `knox-toolkit/1` manifest: one remote `bank` server with a
//! read (`bank.get_balance`, financial data about the user) and a write
//! (`bank.send_money`: `to` a sink, `amount` at most 100, `memo` prose), and the plan
//! that reads the balance, then pays `DE001` 20.

use knox_policy::ToolkitManifest;
use serde_json::{Value, json};

/// The manifest's text.
pub const TOOLKIT: &str = r#"
format = "knox-toolkit/1"

[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }

[[servers]]
name = "bank"
remote = true
needs = { profile = "network-client", endpoints = [{ host = "bank.example", port = 443 }] }

[[servers.tools]]
name = "bank.get_balance"
effect = "read"
returns = { info_types = ["financial"], subject = "user", source = "user" }
inputSchema = { type = "object", properties = { account = { type = "string" } }, required = ["account"], additionalProperties = false }

[[servers.tools]]
name = "bank.send_money"
effect = "write"
sinks = ["to"]
prose = ["memo"]
inputSchema = { type = "object", properties = { to = { type = "string" }, amount = { type = "number", maximum = 100 }, memo = { type = "string" } }, required = ["to", "amount"], additionalProperties = false }
"#;

/// The manifest.
pub fn manifest() -> ToolkitManifest {
    ToolkitManifest::from_toolkit_text(TOOLKIT).expect("the bank toolkit")
}

/// The user's plan (as `knox run --plan` takes it): read the balance of `main`, then
/// pay `DE001` 20.
pub fn plan() -> Value {
    json!({"calls": [
        {"tool": "bank.get_balance", "params": {"account": "main"}},
        {"tool": "bank.send_money", "params": {"to": "DE001", "amount": 20}}]})
}
