//! Parsing an executor's raw proposal in stages: size cap, JSON, the shape
//! `{"tool", "params"}` with no other field, a known tool, the tool's parameter schema.
//! The monitor classifies proposals with this, and the verifier re-classifies the
//! recorded ones with the same code.

use knox_types::Action;

use crate::manifest::{ToolEntry, ToolkitManifest};
use crate::schema;

/// Largest proposal accepted, in bytes; larger ones are denied unparsed.
pub const MAX_PROPOSAL_BYTES: usize = 64 * 1024;

/// A proposal that is not a well-formed call of a known tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Malformed {
    /// The action, when the proposal parsed that far (unknown tool, schema violation).
    pub action: Option<Action>,
    /// Why it is malformed.
    pub error: String,
}

/// Parses a raw proposal.
pub fn parse<'m>(
    raw: &[u8],
    manifest: &'m ToolkitManifest,
) -> Result<(Action, &'m ToolEntry), Malformed> {
    parse_with(raw, manifest, true)
}

/// [`parse`], wording a schema fault as evidence formats before v5 did when `!plain`
/// (see [`schema::validate_with`]).
pub fn parse_with<'m>(
    raw: &[u8],
    manifest: &'m ToolkitManifest,
    plain: bool,
) -> Result<(Action, &'m ToolEntry), Malformed> {
    let fail = |action: Option<Action>, error: String| Malformed { action, error };
    if raw.len() > MAX_PROPOSAL_BYTES {
        return Err(fail(
            None,
            format!(
                "proposal of {} bytes exceeds the {MAX_PROPOSAL_BYTES}-byte limit",
                raw.len()
            ),
        ));
    }
    let action: Action =
        serde_json::from_slice(raw).map_err(|e| fail(None, format!("not a tool call: {e}")))?;
    if let Err(e) = knox_types::action::check_tool_name(&action.tool) {
        return Err(fail(None, e.to_string()));
    }
    check_with(action, manifest, plain)
}

/// The later stages for an already parsed action: known tool, parameter schema.
pub fn check(
    action: Action,
    manifest: &ToolkitManifest,
) -> Result<(Action, &ToolEntry), Malformed> {
    check_with(action, manifest, true)
}

/// [`check`], wording a schema fault as evidence formats before v5 did when `!plain`
/// (see [`schema::validate_with`]).
pub fn check_with(
    action: Action,
    manifest: &ToolkitManifest,
    plain: bool,
) -> Result<(Action, &ToolEntry), Malformed> {
    let Some(entry) = manifest.tool(&action.tool) else {
        let error = format!("unknown tool `{}`", action.tool);
        return Err(Malformed {
            action: Some(action),
            error,
        });
    };
    match schema::validate_with(entry, &action.params, plain) {
        Ok(()) => Ok((action, entry)),
        Err(e) => Err(Malformed {
            action: Some(action),
            error: e.to_string(),
        }),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::manifest::tests::manifest;

    #[test]
    fn each_stage_rejects_with_a_reason() {
        let m = manifest();
        assert!(parse(br#"{"tool":"MailRead","params":{"id":"e"}}"#, &m).is_ok());
        let cases: [(&[u8], &str); 7] = [
            (b"not json", "not a tool call"),
            (br#"{"tool":"MailRead"}"#, "missing field `params`"),
            (
                br#"{"tool":"MailRead","params":{"id":"e"},"x":1}"#,
                "unknown field `x`",
            ),
            (br#"{"tool":"Mail Read","params":{}}"#, "invalid tool name"),
            (
                br#"{"tool":"MailBurn","params":{}}"#,
                "unknown tool `MailBurn`",
            ),
            (
                br#"{"tool":"MailRead","params":{"id":5}}"#,
                "expected string",
            ),
            (br#"{"tool":"MailRead","params":[]}"#, "not a tool call"),
        ];
        for (raw, want) in cases {
            let e = parse(raw, &m).unwrap_err();
            assert!(e.error.contains(want), "{} should contain {want}", e.error);
        }
        let big = vec![b' '; MAX_PROPOSAL_BYTES + 1];
        assert!(parse(&big, &m).unwrap_err().error.contains("exceeds"));
    }
}
