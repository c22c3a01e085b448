//! A proposed tool call `α` and its hash `H(α)`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::canon;
use crate::digest::{Digest, tag};

/// Longest tool name accepted.
pub const MAX_TOOL_NAME: usize = 128;

/// One tool call: the tool's full name (toolkit + tool, e.g. `GmailSendEmail`) and
/// its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// Full tool name.
    pub tool: String,
    /// Parameters as a JSON object; numbers are read as canonical JSON reads them back
    /// ([`canon::normalize_numbers`]), so a decision never depends on `2000.0` vs `2000`.
    #[serde(deserialize_with = "canon::deserialize_normalized_map")]
    pub params: Map<String, Value>,
}

/// A value that cannot be an action.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActionError {
    /// The tool name is empty, too long or not of `[A-Za-z0-9_.-]` (see [`check_tool_name`]).
    #[error("invalid tool name `{0}`")]
    ToolName(String),
    /// The parameters are not a JSON object.
    #[error("parameters must be a json object, got {0}")]
    Params(&'static str),
}

impl Action {
    /// Builds an action, checking the tool name and that `params` is an object.
    pub fn new(tool: impl Into<String>, params: Value) -> Result<Self, ActionError> {
        let tool = tool.into();
        check_tool_name(&tool)?;
        match params {
            Value::Object(params) => Ok(Self { tool, params }),
            other => Err(ActionError::Params(json_type(&other))),
        }
    }

    /// `H("knox/action", canonical({"params": …, "tool": …}))`.
    pub fn hash(&self) -> Digest {
        hash_call(&self.tool, &self.params)
    }
}

/// The action hash of a (tool, params) pair, shared by actions and exact expected calls
/// so that `H(α) = H(e_j)` exactly when they are equal.
pub fn hash_call(tool: &str, params: &Map<String, Value>) -> Digest {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(b"{\"params\":");
    canon::write_object(params, &mut buf);
    buf.extend_from_slice(b",\"tool\":");
    canon::write_string(tool, &mut buf);
    buf.push(b'}');
    Digest::tagged(tag::ACTION, &[&buf])
}

/// Checks a tool name as MCP and OpenAI write them: 1–128 of `[A-Za-z0-9_.-]`
/// (`GmailSendEmail`, `send_money`, `github.create_issue`), the first a letter, digit
/// or `_` (so no name is `.`, `..` or looks like an option).
pub fn check_tool_name(tool: &str) -> Result<(), ActionError> {
    let ok = tool.len() <= MAX_TOOL_NAME
        && tool
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_')
        && tool
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ActionError::ToolName(
            tool.chars().take(MAX_TOOL_NAME).collect(),
        ))
    }
}

/// The JSON type name of a value, as schemas name it.
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hash_is_canonical_and_matches_generic_path() {
        let a = Action::new("GmailSendEmail", json!({"to": "x@y.z", "n": 1.50})).unwrap();
        let generic = Digest::of_json(tag::ACTION, &a).unwrap();
        assert_eq!(a.hash(), generic);
    }

    #[test]
    fn bad_names_and_params_rejected() {
        assert!(Action::new("", json!({})).is_err());
        assert!(Action::new("a b", json!({})).is_err());
        assert_eq!(
            Action::new("T", json!([1])),
            Err(ActionError::Params("array"))
        );
    }
}

#[cfg(test)]
mod tool_name_tests {
    use super::check_tool_name;

    #[test]
    fn tool_names_as_mcp_and_openai_write_them() {
        for ok in [
            "GmailSendEmail",
            "send_money",
            "github.create_issue",
            "fs-read_file.v2",
            "_private",
            "a",
        ] {
            assert!(check_tool_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(129);
        for bad in [
            "",
            ".",
            "..",
            "-rf",
            ".hidden",
            "a/b",
            "../../etc/passwd",
            "Mail Read",
            "é",
            "a\u{0}b",
            long.as_str(),
        ] {
            assert!(check_tool_name(bad).is_err(), "{bad}");
        }
        assert!(check_tool_name(&"a".repeat(128)).is_ok());
    }
}
