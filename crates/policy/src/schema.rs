//! Checking a proposal's parameters against the tool's schema.

use serde_json::{Map, Value};

use knox_types::action::json_type;

use crate::manifest::ToolEntry;

/// Why parameters do not fit a tool's schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A required parameter is absent.
    #[error("missing required parameter `{0}`")]
    Missing(String),
    /// A parameter the tool does not declare.
    #[error("unknown parameter `{0}`")]
    Unknown(String),
    /// A parameter of the wrong JSON type.
    #[error("parameter `{name}`: expected {expected}, got {got}")]
    Type {
        /// Parameter.
        name: String,
        /// Declared type.
        expected: String,
        /// Actual type.
        got: &'static str,
    },
    /// Parameters that do not match the tool's JSON Schema input schema: where (a JSON
    /// pointer into the parameters; empty for the object itself) and which keyword.
    #[error("parameters do not match the input schema at `{at}` ({keyword})")]
    Schema {
        /// JSON pointer of the offending value.
        at: String,
        /// The schema keyword that failed (`type`, `required`, `enum`, …).
        keyword: String,
    },
}

/// Checks `params` against the tool's input schema when it has one (a
/// `knox-toolkit/1` tool: the compiled JSON Schema decides; the first fault is named by
/// where and which keyword, never by the value — a required parameter left out as
/// [`SchemaError::Missing`], an undeclared one as [`SchemaError::Unknown`]), else against
/// its declared parameters: required ones present, no undeclared ones, JSON types as
/// declared (`number` accepts integers; `null` is accepted only for optional parameters).
pub fn validate(tool: &ToolEntry, params: &Map<String, Value>) -> Result<(), SchemaError> {
    validate_with(tool, params, true)
}

/// [`validate`], with the wording of evidence formats before v5 when `!plain`: every
/// input-schema fault as [`SchemaError::Schema`] (a missing parameter read "at ``
/// (required)"). The monitor's `block_reason`s quote it, so a verifier replaying an
/// older bundle must word it as the monitor did
/// ([`knox_types::bundle::MonitorRules::plain_reasons`]).
pub fn validate_with(
    tool: &ToolEntry,
    params: &Map<String, Value>,
    plain: bool,
) -> Result<(), SchemaError> {
    if let Some(schema) = &tool.input_schema {
        let value = Value::Object(params.clone());
        // The usual case first: a valid call needs no error worked out.
        if schema.validator.is_valid(&value) {
            return Ok(());
        }
        let Some(e) = schema.validator.iter_errors(&value).next() else {
            return Ok(());
        };
        let at = e.instance_path().to_string();
        // A name below the object itself is written as its JSON pointer's path.
        let under = |name: &str| match at.trim_start_matches('/') {
            "" => name.to_owned(),
            parent => format!("{parent}/{name}"),
        };
        use jsonschema::error::ValidationErrorKind as Kind;
        return Err(match e.kind() {
            Kind::Required { property } if plain => {
                SchemaError::Missing(under(property.as_str().unwrap_or_default()))
            }
            Kind::AdditionalProperties { unexpected } if plain && !unexpected.is_empty() => {
                SchemaError::Unknown(under(unexpected.first().map_or("", String::as_str)))
            }
            kind => SchemaError::Schema {
                at,
                keyword: kind.keyword().to_string(),
            },
        });
    }
    for p in &tool.spec.parameters {
        let required = p.required.unwrap_or(false);
        match params.get(&p.name) {
            None if required => return Err(SchemaError::Missing(p.name.clone())),
            None => {}
            Some(Value::Null) if !required => {}
            Some(v) => {
                let got = json_type(v);
                let ok = got == p.ty || (p.ty == "number" && got == "integer");
                if !ok {
                    return Err(SchemaError::Type {
                        name: p.name.clone(),
                        expected: p.ty.clone(),
                        got,
                    });
                }
            }
        }
    }
    if let Some(extra) = params
        .keys()
        .find(|k| !tool.spec.parameters.iter().any(|p| &p.name == *k))
    {
        return Err(SchemaError::Unknown(extra.clone()));
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::manifest::tests::manifest;
    use serde_json::json;

    fn p(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn accepts_valid_and_names_each_fault() {
        let m = manifest();
        let read = m.tool("MailRead").unwrap();
        assert_eq!(validate(read, &p(json!({"id": "e1"}))), Ok(()));
        assert_eq!(validate(read, &p(json!({"id": "e1", "limit": 3}))), Ok(()));
        assert_eq!(
            validate(read, &p(json!({"id": "e1", "limit": null}))),
            Ok(())
        );
        assert_eq!(
            validate(read, &p(json!({}))),
            Err(SchemaError::Missing("id".into()))
        );
        assert_eq!(
            validate(read, &p(json!({"id": "e1", "x": 1}))),
            Err(SchemaError::Unknown("x".into()))
        );
        assert_eq!(
            validate(read, &p(json!({"id": "e1", "limit": 2.5}))),
            Err(SchemaError::Type {
                name: "limit".into(),
                expected: "integer".into(),
                got: "number"
            })
        );
        assert!(validate(read, &p(json!({"id": null}))).is_err());
    }
}
