//! What models are shown of the toolkit manifest: tool definitions with parameter
//! schemas, the JSON schemas that constrain a reply to a valid tool call or plan, and a
//! lexical shortlist of toolkits so a planner's prompt stays small.

use std::collections::{BTreeMap, BTreeSet};

use knox_policy::ToolkitManifest;
use serde_json::{Map, Value, json};

use crate::chat::ToolDef;

/// The definition of manifest tool `name`: its parameters as a closed object schema.
pub fn tool_def(manifest: &ToolkitManifest, name: &str) -> Option<ToolDef> {
    let t = manifest.tool(name)?;
    let mut props = Map::new();
    let mut required = Vec::new();
    for p in &t.spec.parameters {
        props.insert(
            p.name.clone(),
            json!({"type": p.ty, "description": p.description}),
        );
        if p.required.unwrap_or(false) {
            required.push(Value::String(p.name.clone()));
        }
    }
    Some(ToolDef {
        name: name.to_string(),
        description: t.spec.summary.clone(),
        parameters: json!({"type": "object", "properties": props, "required": required,
            "additionalProperties": false}),
    })
}

/// Definitions of `names`, skipping names the manifest does not hold.
pub fn tool_defs<'a>(
    manifest: &ToolkitManifest,
    names: impl IntoIterator<Item = &'a String>,
) -> Vec<ToolDef> {
    names
        .into_iter()
        .filter_map(|n| tool_def(manifest, n))
        .collect()
}

/// The schema of one call: `{"tool": NAME, "params": {...}}`, one `anyOf` branch per
/// tool with the name as `const`, so a grammar built from it admits only known tools
/// with their declared parameters.
pub fn call_schema(tools: &[ToolDef]) -> Value {
    let branches: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"type": "object",
                "properties": {"tool": {"const": t.name}, "params": for_grammar(&t.parameters)},
                "required": ["tool", "params"], "additionalProperties": false})
        })
        .collect();
    json!({"anyOf": branches})
}

/// An executor's reply: one call, or `{"final": TEXT}` when the tasks are done.
pub fn step_schema(tools: &[ToolDef]) -> Value {
    let mut branches = call_schema(tools)
        .get("anyOf")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    branches.push(
        json!({"type": "object", "properties": {"final": {"type": "string", "maxLength": MAX_STRING}},
        "required": ["final"], "additionalProperties": false}),
    );
    json!({"anyOf": branches})
}

/// Most calls a model planner's task may hold by default (`--max-calls`; a planner may
/// set its own bound).
pub const MAX_PLANNED_CALLS: usize = 16;

/// Most calls a task of a plan the user wrote may hold: a bound on the APM's size, not
/// on the user (`--max-calls` bounds what a model plans).
pub const MAX_USER_PLAN_CALLS: usize = 1024;

/// A plan: `{"calls": [call, …]}`, one to [`MAX_PLANNED_CALLS`] calls.
pub fn plan_schema(tools: &[ToolDef]) -> Value {
    plan_schema_bounded(tools, MAX_PLANNED_CALLS)
}

/// A plan of one to `max_calls` calls.
pub fn plan_schema_bounded(tools: &[ToolDef], max_calls: usize) -> Value {
    // A planned call may also declare which earlier calls' outputs its text carries.
    let mut calls = call_schema(tools);
    if let Some(Value::Array(branches)) = calls.get_mut("anyOf") {
        for b in branches {
            if let Some(Value::Object(props)) = b.get_mut("properties") {
                props.insert(
                    "carries".into(),
                    json!({"type": "object", "additionalProperties": {"type": "array",
                        "items": {"type": "integer", "minimum": 0}, "maxItems": MAX_ITEMS}}),
                );
                // And which of its parameters are typed values extracted from an
                // earlier call's output.
                props.insert(
                    "extract".into(),
                    json!({"type": "object", "additionalProperties": {"type": "object",
                        "properties": {"from": {"type": "integer", "minimum": 0},
                            "type": {"enum": ["email", "date", "integer", "one_of"]},
                            "min": {"type": "integer"}, "max": {"type": "integer"},
                            "values": {"type": "array", "items": {"type": "string"},
                                "minItems": 1, "maxItems": MAX_ITEMS}},
                        "required": ["from", "type"], "additionalProperties": false}}),
                );
            }
        }
    }
    json!({"type": "object",
        "properties": {"calls": {"type": "array", "items": calls,
            "minItems": 1, "maxItems": max_calls}},
        "required": ["calls"], "additionalProperties": false})
}

/// Longest string a constrained reply may hold: a small model that falls into a loop
/// inside a string would otherwise write until its token budget runs out.
pub const MAX_STRING: usize = 160;

/// Most items of an array in a constrained reply.
pub const MAX_ITEMS: usize = 8;

/// A parameter schema as a grammar sees it: without descriptions (they are for the
/// prompt), with strings and arrays bounded.
fn for_grammar(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => {
            let mut out: Map<String, Value> = o
                .iter()
                .filter(|(k, _)| k.as_str() != "description")
                .map(|(k, v)| (k.clone(), for_grammar(v)))
                .collect();
            match o.get("type").and_then(Value::as_str) {
                Some("string") => {
                    out.entry("maxLength").or_insert(json!(MAX_STRING));
                }
                // A free-form object: scalar values, bounded like the rest.
                Some("object") if !o.contains_key("properties") => {
                    out.entry("additionalProperties")
                        .or_insert(json!({"anyOf": [
                        {"type": "string", "maxLength": MAX_STRING},
                        {"type": "number"}, {"type": "boolean"}]}));
                }
                Some("array") => {
                    out.entry("maxItems").or_insert(json!(MAX_ITEMS));
                    // The manifest does not say what arrays hold; scalars keep a
                    // small model from nesting without end.
                    out.entry("items").or_insert(json!({"anyOf": [
                        {"type": "string", "maxLength": MAX_STRING},
                        {"type": "number"}, {"type": "boolean"}]}));
                }
                _ => {}
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(for_grammar).collect()),
        other => other.clone(),
    }
}

/// One line per tool: `Name(param: type, optional?: type) — summary`.
pub fn catalogue(tools: &[ToolDef]) -> String {
    let mut lines = Vec::with_capacity(tools.len());
    for t in tools {
        let required: BTreeSet<&str> = t
            .parameters
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let params: Vec<String> = t
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .map(|(name, p)| {
                        let ty = p.get("type").and_then(Value::as_str).unwrap_or("any");
                        let opt = if required.contains(name.as_str()) {
                            ""
                        } else {
                            "?"
                        };
                        format!("{name}{opt}: {ty}")
                    })
                    .collect()
            })
            .unwrap_or_default();
        lines.push(format!(
            "{}({}) — {}",
            t.name,
            params.join(", "),
            t.description
        ));
    }
    lines.join("\n")
}

/// Lower-case words of `text`, camel case split (`GoogleHome` → `google`, `home`),
/// without words shorter than three letters or common stop words.
fn words(text: &str) -> BTreeSet<String> {
    const STOP: &[&str] = &[
        "the", "and", "for", "can", "you", "please", "with", "from", "that", "this", "what", "are",
        "all", "any", "has", "have", "will", "into", "about", "your", "our", "out", "get", "its",
        "their", "there", "which", "who", "how", "also", "them", "then", "than",
    ];
    let mut out = BTreeSet::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && prev_lower && !cur.is_empty() {
                out.insert(std::mem::take(&mut cur));
            }
            prev_lower = c.is_lowercase();
            cur.extend(c.to_lowercase());
        } else {
            prev_lower = false;
            if !cur.is_empty() {
                out.insert(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.insert(cur);
    }
    out.retain(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()));
    out
}

/// `names` ordered by how many words each tool's full name (toolkit included) and
/// description share with `instruction`, most first; ties by name. Small models tend
/// to pick the first plausible tool, so the likeliest comes first.
pub fn rank(manifest: &ToolkitManifest, names: &[String], instruction: &str) -> Vec<String> {
    let asked = words(instruction);
    let mut scored: Vec<(usize, &String)> = names
        .iter()
        .map(|n| {
            let overlap = manifest.tool(n).map_or(0, |t| {
                let mut text = t.name.clone();
                text.push(' ');
                text.push_str(&t.spec.summary);
                words(&text).intersection(&asked).count()
            });
            (overlap, n)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    scored.into_iter().map(|(_, n)| n.clone()).collect()
}

/// The tools of the `k` toolkits whose names, tool names and descriptions share the
/// most words with `instruction` (ties broken by name), ranked by [`rank`]. A planner
/// shown 330 tools would spend most of its time reading; the plan is still validated
/// against the whole manifest.
pub fn shortlist(manifest: &ToolkitManifest, instruction: &str, k: usize) -> Vec<String> {
    let asked = words(instruction);
    let mut score: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for t in manifest.tools() {
        let entry = score.entry(t.toolkit.as_str()).or_default();
        // A toolkit named in the instruction ("on Amazon", "my Gmail") outweighs
        // words that happen to occur in some description.
        entry.0 += u32::from(
            words(&t.toolkit)
                .iter()
                .all(|w| asked.contains(w) || asked.contains(&format!("{w}s"))),
        ) * 100;
        let mut text = t.name.clone();
        text.push(' ');
        text.push_str(&t.spec.summary);
        entry.1 += u32::try_from(words(&text).intersection(&asked).count()).unwrap_or(u32::MAX);
    }
    let mut ranked: Vec<(&str, u32)> = score
        .into_iter()
        .map(|(kit, (named, overlap))| (kit, named.saturating_add(overlap)))
        .collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    let chosen: BTreeSet<&str> = ranked.iter().take(k).map(|(kit, _)| *kit).collect();
    let names: Vec<String> = manifest
        .tools()
        .filter(|t| chosen.contains(t.toolkit.as_str()))
        .map(|t| t.name.clone())
        .collect();
    rank(manifest, &names, instruction)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn manifest() -> ToolkitManifest {
        knox_policy::shipped::current().unwrap()
    }

    #[test]
    fn words_split_camel_case_and_drop_noise() {
        let w = words("Can you fetch GoogleHome's B08KFQ9HK5 on the AugustSmartLock?");
        for want in [
            "fetch",
            "google",
            "home",
            "b08kfq9hk5",
            "august",
            "smart",
            "lock",
        ] {
            assert!(w.contains(want), "{want} in {w:?}");
        }
        assert!(!w.contains("the") && !w.contains("on") && !w.contains("can"));
    }

    #[test]
    fn the_toolkit_the_instruction_names_is_shortlisted() {
        let m = manifest();
        let s = shortlist(
            &m,
            "Can you fetch me the details and reviews of the Dell laptop with product ID B08KFQ9HK5 from Amazon?",
            2,
        );
        assert_eq!(
            s[0], "AmazonGetProductDetails",
            "the likeliest tool first: {s:?}"
        );
        let kits: BTreeSet<&str> = s
            .iter()
            .map(|t| m.tool(t).unwrap().toolkit.as_str())
            .collect();
        assert_eq!(kits.len(), 2);
    }

    #[test]
    fn schemas_name_each_tool_as_a_constant_and_close_the_parameters() {
        let m = manifest();
        let defs = tool_defs(&m, &["GmailSendEmail".to_string(), "Nope".to_string()]);
        assert_eq!(defs.len(), 1);
        let s = step_schema(&defs);
        let branches = s["anyOf"].as_array().unwrap();
        assert_eq!(branches.len(), 2);
        assert_eq!(branches[0]["properties"]["tool"]["const"], "GmailSendEmail");
        assert_eq!(
            branches[0]["properties"]["params"]["additionalProperties"],
            false
        );
        assert!(
            !branches[0].to_string().contains("description"),
            "descriptions stay out of grammars"
        );
        let to = &branches[0]["properties"]["params"]["properties"]["to"];
        assert_eq!(to["maxLength"], MAX_STRING, "strings are bounded");
        let plan = plan_schema(&defs);
        assert_eq!(plan["properties"]["calls"]["maxItems"], MAX_PLANNED_CALLS);
        let line = catalogue(&defs);
        assert!(
            line.starts_with("GmailSendEmail(") && line.contains("to: string"),
            "{line}"
        );
    }
}
