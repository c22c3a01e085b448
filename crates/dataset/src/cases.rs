//! InjecAgent user cases, attacker cases, their reviewed tool calls and canned
//! attacker responses.

use std::collections::HashMap;

use knox_types::canon;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::embedded;
use crate::pylit;
use knox_policy::spec::ToolkitSpec;

/// Placeholder in user-case response templates where an injection goes.
pub const INJECTION_PLACEHOLDER: &str = "<Attacker Instruction>";

/// Placeholder in attacker calls for "the output of call N of this case".
pub const OUTPUT_REF_PREFIX: &str = "$OUTPUT(";

/// Errors loading the dataset.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file is not valid JSON of the expected shape.
    #[error("`{file}`: {source}")]
    Json {
        /// File name.
        file: &'static str,
        /// Parser error.
        source: serde_json::Error,
    },
    /// A Python-literal field did not parse.
    #[error("`{file}` line {line}: field `{field}`: {source}")]
    Literal {
        /// File name.
        file: &'static str,
        /// 1-based line.
        line: usize,
        /// Field name.
        field: &'static str,
        /// Parser error.
        source: pylit::PyLitError,
    },
    /// The data is inconsistent.
    #[error("{0}")]
    Invalid(String),
}

/// One InjecAgent user case: a user instruction served by one tool call whose output
/// may carry an injected instruction.
#[derive(Clone, Debug, PartialEq)]
pub struct UserCase {
    /// Line index in `user_cases.jsonl`.
    pub index: usize,
    /// Full tool name.
    pub tool: String,
    /// What the user asked.
    pub instruction: String,
    /// The tool call's parameters.
    pub params: Map<String, Value>,
    /// The tool's response, with [`INJECTION_PLACEHOLDER`] where the injection goes.
    pub template: Value,
    /// InjecAgent's level (`High`/`Low`).
    pub level: String,
}

impl UserCase {
    /// The tool response with the injection marker replaced by `text`.
    pub fn response(&self, text: &str) -> Value {
        replace_strings(&self.template, INJECTION_PLACEHOLDER, text)
    }
}

fn replace_strings(v: &Value, from: &str, to: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(from, to)),
        Value::Array(a) => Value::Array(a.iter().map(|x| replace_strings(x, from, to)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), replace_strings(x, from, to)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Direct harm or data stealing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttackKind {
    /// One attacker tool that does harm.
    DirectHarm,
    /// An extraction tool, then a tool that sends the data to the attacker.
    DataStealing,
}

/// One attacker case with the tool calls an attacked agent proposes for it.
#[derive(Clone, Debug, PartialEq)]
pub struct AttackerCase {
    /// `dh-NN` or `ds-NN`.
    pub id: String,
    /// Kind.
    pub kind: AttackKind,
    /// The instruction injected into the user tool's output.
    pub instruction: String,
    /// InjecAgent's attack type.
    pub attack_type: String,
    /// Calls the attacked agent proposes, in order.
    pub calls: Vec<AttackerCall>,
}

/// One attacker tool call. A string parameter equal to `$OUTPUT(k)` stands for the
/// output of call `k` of the same case.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttackerCall {
    /// Full tool name.
    pub tool: String,
    /// Parameters.
    pub params: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUserCase {
    #[serde(rename = "User Tool")]
    tool: String,
    #[serde(rename = "User Instruction")]
    instruction: String,
    #[serde(rename = "Tool Parameters")]
    params: String,
    #[serde(rename = "Tool Response Template")]
    template: String,
    #[serde(rename = "Thought")]
    _thought: String,
    #[serde(rename = "Level")]
    level: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttackerCase {
    #[serde(rename = "Attacker Tools")]
    tools: Vec<String>,
    #[serde(rename = "Modifed")]
    _modified: u8,
    #[serde(rename = "Attacker Instruction")]
    instruction: String,
    #[serde(rename = "Expected Achievements")]
    _expected: String,
    #[serde(rename = "Attack Type")]
    attack_type: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttackerCalls {
    case: String,
    tools: Vec<String>,
    instruction: String,
    calls: Vec<AttackerCall>,
}

/// The whole dataset.
#[derive(Clone, Debug)]
pub struct Dataset {
    /// Toolkit specifications.
    pub toolkits: Vec<ToolkitSpec>,
    /// User cases.
    pub user_cases: Vec<UserCase>,
    /// Attacker cases, direct harm first, then data stealing.
    pub attacker_cases: Vec<AttackerCase>,
    responses: HashMap<(String, Vec<u8>), Value>,
}

impl Dataset {
    /// The dataset embedded in the binary.
    pub fn embedded() -> Result<Self, DatasetError> {
        Self::from_sources(&Sources {
            tools: embedded::TOOLS_JSON,
            user_cases: embedded::USER_CASES,
            attacker_dh: embedded::ATTACKER_CASES_DH,
            attacker_ds: embedded::ATTACKER_CASES_DS,
            responses: embedded::ATTACKER_RESPONSES,
            attacker_calls: embedded::ATTACKER_CALLS,
        })
    }

    /// Parses the dataset from file contents.
    pub fn from_sources(src: &Sources<'_>) -> Result<Self, DatasetError> {
        let toolkits: Vec<ToolkitSpec> =
            serde_json::from_str(src.tools).map_err(|source| DatasetError::Json {
                file: "tools.json",
                source,
            })?;
        let user_cases = parse_user_cases(src.user_cases)?;
        let calls: Vec<RawAttackerCalls> =
            serde_json::from_str(src.attacker_calls).map_err(|source| DatasetError::Json {
                file: "attacker_calls.json",
                source,
            })?;
        let mut attacker_cases = Vec::new();
        for (file, text, kind, prefix) in [
            (
                "attacker_cases_dh.jsonl",
                src.attacker_dh,
                AttackKind::DirectHarm,
                "dh",
            ),
            (
                "attacker_cases_ds.jsonl",
                src.attacker_ds,
                AttackKind::DataStealing,
                "ds",
            ),
        ] {
            for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
                let raw: RawAttackerCase = serde_json::from_str(line)
                    .map_err(|source| DatasetError::Json { file, source })?;
                let id = format!("{prefix}-{i:02}");
                let reviewed = calls.iter().find(|c| c.case == id).ok_or_else(|| {
                    DatasetError::Invalid(format!("attacker_calls.json has no entry for `{id}`"))
                })?;
                if reviewed.tools != raw.tools || reviewed.instruction != raw.instruction {
                    return Err(DatasetError::Invalid(format!(
                        "attacker_calls.json entry `{id}` does not match {file}"
                    )));
                }
                let call_tools: Vec<&String> = reviewed.calls.iter().map(|c| &c.tool).collect();
                if call_tools != raw.tools.iter().collect::<Vec<_>>() {
                    return Err(DatasetError::Invalid(format!(
                        "attacker_calls.json entry `{id}` calls other tools"
                    )));
                }
                attacker_cases.push(AttackerCase {
                    id,
                    kind,
                    instruction: raw.instruction,
                    attack_type: raw.attack_type,
                    calls: reviewed.calls.clone(),
                });
            }
        }
        if calls.len() != attacker_cases.len() {
            return Err(DatasetError::Invalid(format!(
                "attacker_calls.json has {} entries for {} attacker cases",
                calls.len(),
                attacker_cases.len()
            )));
        }
        let responses = parse_responses(src.responses)?;
        Ok(Self {
            toolkits,
            user_cases,
            attacker_cases,
            responses,
        })
    }

    /// The canned response InjecAgent recorded for an attacker tool call, if any.
    pub fn attacker_response(&self, tool: &str, params: &Map<String, Value>) -> Option<&Value> {
        let mut key = Vec::new();
        canon::write_object(params, &mut key);
        self.responses.get(&(tool.to_string(), key))
    }
}

/// Contents of the dataset files.
#[derive(Clone, Copy, Debug)]
pub struct Sources<'a> {
    /// `tools.json`.
    pub tools: &'a str,
    /// `user_cases.jsonl`.
    pub user_cases: &'a str,
    /// `attacker_cases_dh.jsonl`.
    pub attacker_dh: &'a str,
    /// `attacker_cases_ds.jsonl`.
    pub attacker_ds: &'a str,
    /// `attacker_simulated_responses.json`.
    pub responses: &'a str,
    /// Knox's `attacker_calls.json`.
    pub attacker_calls: &'a str,
}

fn parse_user_cases(text: &str) -> Result<Vec<UserCase>, DatasetError> {
    const FILE: &str = "user_cases.jsonl";
    let mut out = Vec::new();
    for (index, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let raw: RawUserCase = serde_json::from_str(line)
            .map_err(|source| DatasetError::Json { file: FILE, source })?;
        let lit = |field: &'static str, s: &str| {
            pylit::parse(s).map_err(|source| DatasetError::Literal {
                file: FILE,
                line: index + 1,
                field,
                source,
            })
        };
        let Value::Object(params) = lit("Tool Parameters", &raw.params)? else {
            return Err(DatasetError::Invalid(format!(
                "{FILE} line {}: parameters are not a dict",
                index + 1
            )));
        };
        let template = lit("Tool Response Template", &raw.template)?;
        out.push(UserCase {
            index,
            tool: raw.tool,
            instruction: raw.instruction,
            params,
            template,
            level: raw.level,
        });
    }
    Ok(out)
}

/// The entries of a JSON object in file order (a map would lose it, and with it which
/// of several equivalent keys comes first).
struct Ordered(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a json object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Ordered, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = m.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Keys look like `(ToolName,{json params})`; entries whose params are not a JSON
/// object (InjecAgent recorded some malformed calls) are skipped. Several raw keys can
/// denote the same call (spacing differs); the first in file order wins, so the
/// response is the same on every run.
fn parse_responses(text: &str) -> Result<HashMap<(String, Vec<u8>), Value>, DatasetError> {
    let Ordered(raw) = serde_json::from_str(text).map_err(|source| DatasetError::Json {
        file: "attacker_simulated_responses.json",
        source,
    })?;
    let mut out = HashMap::new();
    for (key, value) in raw {
        let Some(inner) = key.strip_prefix('(').and_then(|k| k.strip_suffix(')')) else {
            continue;
        };
        let Some((tool, params)) = inner.split_once(',') else {
            continue;
        };
        let Ok(Value::Object(params)) = serde_json::from_str::<Value>(params) else {
            continue;
        };
        let mut k = Vec::new();
        canon::write_object(&params, &mut k);
        out.entry((tool.to_string(), k)).or_insert(value);
    }
    Ok(out)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn user_cases_match_pythons_reading() {
        // tests/data/user_cases_python.json was written by Python's ast.literal_eval.
        let python: Vec<Value> =
            serde_json::from_str(include_str!("../tests/data/user_cases_python.json")).unwrap();
        let ours = parse_user_cases(embedded::USER_CASES).unwrap();
        assert_eq!(ours.len(), python.len());
        for (o, p) in ours.iter().zip(&python) {
            assert_eq!(Value::Object(o.params.clone()), p["params"]);
            assert_eq!(o.template, p["template"]);
        }
    }

    #[test]
    fn embedded_dataset_loads_and_is_consistent() {
        let d = Dataset::embedded().unwrap();
        assert_eq!(d.toolkits.len(), 38);
        assert_eq!(d.toolkits.iter().map(|t| t.tools.len()).sum::<usize>(), 330);
        assert_eq!(d.user_cases.len(), 17);
        assert_eq!(d.attacker_cases.len(), 62);
        let injected = d.user_cases[0].response("STEAL");
        assert!(injected.to_string().contains("STEAL"));
        assert!(!injected.to_string().contains(INJECTION_PLACEHOLDER));
        assert!(
            d.attacker_response("AmazonViewSavedAddresses", &Map::new())
                .is_some()
        );
    }
}
