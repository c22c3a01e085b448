//! The shape of InjecAgent's `tools.json`, parsed strictly.

use serde::{Deserialize, Serialize};

/// One toolkit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolkitSpec {
    /// Toolkit name (`Gmail`).
    pub toolkit: String,
    /// Category, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Name shown to models.
    pub name_for_model: String,
    /// Name shown to people.
    pub name_for_human: String,
    /// Description for models.
    pub description_for_model: String,
    /// Description for people.
    pub description_for_human: String,
    /// Tools.
    pub tools: Vec<ToolSpec>,
}

/// One tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Tool name without the toolkit prefix (`SendEmail`).
    pub name: String,
    /// What it does.
    pub summary: String,
    /// Parameters.
    pub parameters: Vec<FieldSpec>,
    /// Returned fields.
    pub returns: Vec<FieldSpec>,
    /// Exceptions it may raise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exceptions: Option<Vec<ExceptionSpec>>,
}

/// A parameter or returned field.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Field name.
    pub name: String,
    /// JSON type name (`string`, `integer`, `number`, `boolean`, `array`, `object`).
    #[serde(rename = "type")]
    pub ty: String,
    /// Description.
    pub description: String,
    /// Whether it must be present (parameters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<bool>,
}

/// An exception a tool may raise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExceptionSpec {
    /// Exception name.
    pub name: String,
    /// When it is raised.
    pub description: String,
}
