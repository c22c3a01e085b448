//! The actions a contract governs, as Knox tool calls (`knox_types::Action`): four
//! tools whose parameters name a capability. Parameters are read strictly (unknown
//! fields refused), so a submission means exactly one thing.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Read a file beneath a directory capability: `{"dir", "path"}`.
pub const TOOL_READ: &str = "ContractReadFile";
/// Write (create or truncate) a file beneath a directory capability with write
/// access: `{"dir", "path", "content"}`.
pub const TOOL_WRITE: &str = "ContractWriteFile";
/// Run an executable capability: `{"exe", "args"}` (the arguments after `argv[0]`).
pub const TOOL_EXEC: &str = "ContractExec";
/// Call an endpoint capability: `{"endpoint", "method", "url"}` (+ optional `"body"`).
pub const TOOL_HTTP: &str = "ContractHttp";

/// A parsed contract action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// [`TOOL_READ`].
    Read(FileParams),
    /// [`TOOL_WRITE`].
    Write(WriteParams),
    /// [`TOOL_EXEC`].
    Exec(ExecParams),
    /// [`TOOL_HTTP`].
    Http(HttpParams),
}

/// Parameters of [`TOOL_READ`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    /// Directory capability id.
    pub dir: String,
    /// Path relative to its root.
    pub path: String,
}

/// Parameters of [`TOOL_WRITE`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// Directory capability id.
    pub dir: String,
    /// Path relative to its root.
    pub path: String,
    /// UTF-8 content.
    pub content: String,
}

/// Parameters of [`TOOL_EXEC`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecParams {
    /// Executable capability id.
    pub exe: String,
    /// Arguments after `argv[0]`.
    pub args: Vec<String>,
}

/// Parameters of [`TOOL_HTTP`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpParams {
    /// Endpoint capability id.
    pub endpoint: String,
    /// HTTP method.
    pub method: String,
    /// Full URL.
    pub url: String,
    /// Request body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

impl Request {
    /// Reads a tool call; `Err` says why it is not a contract action.
    pub fn parse(tool: &str, params: &Map<String, Value>) -> Result<Self, String> {
        let v = Value::Object(params.clone());
        let shape = |e: serde_json::Error| format!("parameters of `{tool}`: {e}");
        match tool {
            TOOL_READ => serde_json::from_value(v).map(Self::Read).map_err(shape),
            TOOL_WRITE => serde_json::from_value(v).map(Self::Write).map_err(shape),
            TOOL_EXEC => serde_json::from_value(v).map(Self::Exec).map_err(shape),
            TOOL_HTTP => serde_json::from_value(v).map(Self::Http).map_err(shape),
            other => Err(format!(
                "tool `{}` is not governed by a contract (only {TOOL_READ}, {TOOL_WRITE}, {TOOL_EXEC}, {TOOL_HTTP})",
                other.chars().take(128).collect::<String>()
            )),
        }
    }

    /// The capability id the action names.
    pub fn capability(&self) -> &str {
        match self {
            Self::Read(p) => &p.dir,
            Self::Write(p) => &p.dir,
            Self::Exec(p) => &p.exe,
            Self::Http(p) => &p.endpoint,
        }
    }
}
