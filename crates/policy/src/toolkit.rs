//! User toolkit manifests, format `knox-toolkit/1` (TOML or JSON; `docs/toolkits.md`,
//! JSON Schema for editors in `schemas/knox-toolkit-1.schema.json`).
//!
//! A manifest lists servers (a toolkit: tools served together under one confinement)
//! and, per tool, its name as MCP and OpenAI write it, a description, the full MCP
//! `inputSchema` (JSON Schema 2020-12, compiled once when the manifest loads) and Knox's
//! annotations: effect, labels of the output, sinks, disclosure fields and the prose
//! parameters the executor may compose. Everything else about a tool is controlled.
//!
//! [`ToolkitDoc`] is the file; [`ToolkitManifest::from_doc`] validates and loads it.
//! [`skeleton_from_tools`] and [`skeleton_from_openai`] write a reviewable skeleton
//! from an MCP `tools/list` answer or OpenAI function definitions: every guess is
//! listed in the tool's `review`, which `knox toolkit check` reports until removed.

use std::collections::{BTreeMap, BTreeSet};

use knox_types::apm::{Endpoint, Limits, PathGrant};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::manifest::{
    Disclosure, Effect, ManifestError, NEEDS_VERSION, NeedsFile, PARAM_TYPES, Profile, Returns,
    RuntimeNeeds, ToolAnnotations, ToolkitManifest, ToolkitNeeds,
};
use crate::spec::{FieldSpec, ToolSpec, ToolkitSpec};

/// The format identifier this crate reads.
pub const FORMAT: &str = "knox-toolkit/1";

/// A user toolkit manifest as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolkitDoc {
    /// [`FORMAT`].
    pub format: String,
    /// What the toolkit is for.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// What every tool worker needs (the runtime baseline).
    pub runtime: RuntimeNeeds,
    /// The servers, each with its tools.
    pub servers: Vec<Server>,
}

/// One server: tools served together, confined together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// Server name, `[A-Za-z0-9_-]{1,64}`; every tool's name begins with it.
    pub name: String,
    /// What the server does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The server runs elsewhere (an HTTP MCP server, a SaaS API): it needs nothing
    /// locally beyond the runtime baseline and the endpoints listed in `needs`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub remote: bool,
    /// What the server's tools need locally.
    pub needs: ServerNeeds,
    /// Cost units per call (the stop policy's budget).
    #[serde(default = "one")]
    pub cost: u64,
    /// The tools.
    pub tools: Vec<Tool>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn one() -> u64 {
    1
}

/// A server's needs: the system-call profile family, system calls, paths, endpoints
/// and limits beyond the runtime's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerNeeds {
    /// Profile family.
    pub profile: Profile,
    /// System calls beyond the runtime's.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub syscalls: BTreeSet<String>,
    /// Paths beyond the runtime's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<PathGrant>,
    /// Network endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// Limits beyond the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

/// The MCP tool annotations (hints: the server's claims, never trusted beyond the
/// default effect they suggest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpHints {
    /// `readOnlyHint`: the tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`: the tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`: repeating the call has no additional effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`: the tool interacts with an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl McpHints {
    /// The effect these hints suggest: read-only → `read`; open world (and not
    /// read-only) → `disclose`; destructive or unknown → `write`.
    pub fn effect(&self) -> Effect {
        if self.read_only_hint == Some(true) {
            Effect::Read
        } else if self.open_world_hint == Some(true) {
            Effect::Disclose
        } else {
            Effect::Write
        }
    }
}

/// One tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Full name as the agent calls it, `[A-Za-z0-9_.-]{1,128}`, beginning with the
    /// server's name (`github.create_issue`, `GmailSendEmail`).
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The parameters: a JSON Schema 2020-12 object schema, as MCP's `inputSchema`.
    #[serde(rename = "inputSchema", alias = "input_schema")]
    pub input_schema: Value,
    /// What it returns: a JSON Schema object schema, as MCP's `outputSchema` (optional).
    /// Its top-level properties are the output fields shown to models and given shape
    /// by simulated tools; Knox does not check outputs against it.
    #[serde(
        rename = "outputSchema",
        alias = "output_schema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    /// What the tool does to the world; absent: from `hints`, else derived
    /// conservatively (`disclose` when it discloses, else `write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// The MCP annotations the server declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<McpHints>,
    /// Set when the tool transmits data to a recipient outside the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discloses: Option<Disclosure>,
    /// Labels of the tool's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Returns>,
    /// Sensitive parameters that must not take untrusted values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sinks: Vec<String>,
    /// Parameters the executor may compose freely; every other one is controlled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prose: Vec<String>,
    /// JSON pointers into the tool's output whose values the user or the service writes,
    /// never a third party: a recipient linked to one of them is trusted although the
    /// tool returns external content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted: Vec<String>,
    /// Guesses an importer made that a person must review (empty once reviewed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub review: Vec<String>,
}

impl Tool {
    /// The effect in force: declared, else from the hints, else conservative.
    pub fn effect(&self) -> Effect {
        match (self.effect, self.hints, &self.discloses) {
            (Some(e), _, _) => e,
            (None, Some(h), _) => h.effect(),
            (None, None, Some(_)) => Effect::Disclose,
            (None, None, None) => Effect::Write,
        }
    }

    fn annotations(&self) -> ToolAnnotations {
        ToolAnnotations {
            discloses: self.discloses.clone(),
            returns: self.returns.clone(),
            sinks: self.sinks.clone(),
            effect: Some(self.effect()),
            prose: self.prose.clone(),
            trusted: self.trusted.clone(),
        }
    }
}

/// A document lowered to the legacy parts: tool specifications, the needs file, and
/// each tool's input schema by full name.
pub(crate) type Lowered = (Vec<ToolkitSpec>, NeedsFile, BTreeMap<String, Value>);

impl ToolkitDoc {
    /// Reads a manifest: JSON when `text` starts with `{`, else TOML.
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        if text.trim_start().starts_with('{') {
            Ok(serde_json::from_str(text)?)
        } else {
            Ok(toml::from_str(text)?)
        }
    }

    /// Checks the format, the server and tool names and each input schema's shape,
    /// and lowers the document to the tool specifications, the needs file and each
    /// tool's input schema (by full name).
    pub(crate) fn lower(&self) -> Result<Lowered, ManifestError> {
        if self.format != FORMAT {
            return Err(ManifestError::Format(self.format.clone()));
        }
        let mut toolkits = Vec::new();
        let mut kits = BTreeMap::new();
        let mut schemas = BTreeMap::new();
        for server in &self.servers {
            let ok = !server.name.is_empty()
                && server.name.len() <= 64
                && server
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !ok {
                return Err(ManifestError::ServerName(server.name.clone()));
            }
            if kits.contains_key(&server.name) {
                return Err(ManifestError::Duplicate(server.name.clone()));
            }
            if server.remote
                && (!server.needs.syscalls.is_empty() || !server.needs.paths.is_empty())
            {
                return Err(ManifestError::Remote(server.name.clone()));
            }
            let mut specs = Vec::new();
            let mut notes = BTreeMap::new();
            for tool in &server.tools {
                let Some(short) = tool
                    .name
                    .strip_prefix(server.name.as_str())
                    .filter(|s| !s.is_empty())
                else {
                    return Err(ManifestError::Namespace {
                        server: server.name.clone(),
                        tool: tool.name.clone(),
                    });
                };
                let parameters = parameters_of(&tool.name, &tool.input_schema)?;
                let returns = match &tool.output_schema {
                    None => vec![],
                    Some(s) => parameters_of(&tool.name, s)
                        .map_err(|e| match e {
                            ManifestError::InputSchema { tool, reason } => {
                                ManifestError::InputSchema {
                                    tool,
                                    reason: format!("outputSchema: {reason}"),
                                }
                            }
                            other => other,
                        })?
                        .into_iter()
                        // Output fields are not required or optional: they are shown.
                        .map(|f| FieldSpec {
                            required: None,
                            ..f
                        })
                        .collect(),
                };
                specs.push(ToolSpec {
                    name: short.to_string(),
                    summary: tool.description.clone(),
                    parameters,
                    returns,
                    exceptions: None,
                });
                notes.insert(short.to_string(), tool.annotations());
                schemas.insert(tool.name.clone(), tool.input_schema.clone());
            }
            toolkits.push(ToolkitSpec {
                toolkit: server.name.clone(),
                category: None,
                name_for_model: server.name.clone(),
                name_for_human: server.name.clone(),
                description_for_model: server.description.clone(),
                description_for_human: server.description.clone(),
                tools: specs,
            });
            let n = &server.needs;
            kits.insert(
                server.name.clone(),
                ToolkitNeeds {
                    profile: n.profile,
                    syscalls: n.syscalls.clone(),
                    paths: n.paths.clone(),
                    endpoints: n.endpoints.clone(),
                    cost: server.cost,
                    limits: n.limits,
                    tools: notes,
                },
            );
        }
        let needs = NeedsFile {
            version: NEEDS_VERSION,
            runtime: self.runtime.clone(),
            toolkits: kits,
        };
        Ok((toolkits, needs, schemas))
    }

    /// The document of a legacy manifest (InjecAgent's `tools.json` with a needs
    /// file): each toolkit a server, each parameter a property of an object schema
    /// (optional ones also admit `null`, as the legacy check does; no other property),
    /// the annotations as they are. Loaded, it decides every proposal as the legacy
    /// manifest does.
    pub fn from_legacy(m: &ToolkitManifest) -> Self {
        let needs = m.needs();
        let servers = m
            .toolkits()
            .iter()
            .map(|kit| {
                let kn = needs.toolkits.get(&kit.toolkit);
                let tools = kit
                    .tools
                    .iter()
                    .map(|spec| {
                        let a = kn
                            .and_then(|k| k.tools.get(&spec.name))
                            .cloned()
                            .unwrap_or_default();
                        Tool {
                            name: format!("{}{}", kit.toolkit, spec.name),
                            description: spec.summary.clone(),
                            input_schema: legacy_schema(&spec.parameters),
                            output_schema: (!spec.returns.is_empty())
                                .then(|| legacy_output_schema(&spec.returns)),
                            effect: a.effect,
                            hints: None,
                            discloses: a.discloses,
                            returns: a.returns,
                            sinks: a.sinks,
                            prose: a.prose,
                            trusted: a.trusted,
                            review: vec![],
                        }
                    })
                    .collect();
                let server_needs = kn.map_or(
                    ServerNeeds {
                        profile: Profile::Offline,
                        syscalls: BTreeSet::new(),
                        paths: vec![],
                        endpoints: vec![],
                        limits: None,
                    },
                    |k| ServerNeeds {
                        profile: k.profile,
                        syscalls: k.syscalls.clone(),
                        paths: k.paths.clone(),
                        endpoints: k.endpoints.clone(),
                        limits: k.limits,
                    },
                );
                Server {
                    name: kit.toolkit.clone(),
                    description: kit.description_for_model.clone(),
                    remote: false,
                    needs: server_needs,
                    cost: kn.map_or(1, |k| k.cost),
                    tools,
                }
            })
            .collect();
        Self {
            format: FORMAT.into(),
            description: String::new(),
            runtime: needs.runtime.clone(),
            servers,
        }
    }

    /// The document as TOML. TOML has no `null`: a schema's `null`s are written in an
    /// equivalent form ([`without_nulls`]) — an annotation (`default`, `examples`,
    /// `title`, `description`) of `null` left out, `const: null` as `type: "null"`, a
    /// `null` in an `enum` as an `anyOf` branch of `type: "null"` — and a `null` that
    /// has no such form is an error naming where (write JSON then).
    pub fn to_toml(&self) -> Result<String, String> {
        let mut doc = self.clone();
        for (s, server) in doc.servers.iter_mut().enumerate() {
            for (t, tool) in server.tools.iter_mut().enumerate() {
                let at = format!("servers[{s}].tools[{t}] (`{}`)", tool.name);
                without_nulls(&mut tool.input_schema, &format!("{at}.inputSchema"))?;
                if let Some(o) = &mut tool.output_schema {
                    without_nulls(o, &format!("{at}.outputSchema"))?;
                }
            }
        }
        toml::to_string(&doc).map_err(|e| e.to_string())
    }

    /// Every guess still marked for review, as `(tool, note)`.
    pub fn pending_review(&self) -> Vec<(&str, &str)> {
        self.servers
            .iter()
            .flat_map(|s| &s.tools)
            .flat_map(|t| t.review.iter().map(|r| (t.name.as_str(), r.as_str())))
            .collect()
    }
}

/// Rewrites the JSON Schema `schema` without `null` values, keeping what it accepts:
/// annotations whose value is `null` are left out, `const: null` becomes `type: "null"`,
/// and the `null`s of an `enum` become an `anyOf` branch `{"type": "null"}` beside the
/// rest of the enum (inside an `allOf` when the schema has an `anyOf` already). Any
/// other `null` (in a keyword whose value cannot be rewritten) is an error naming its
/// place (`at`).
pub fn without_nulls(schema: &mut Value, at: &str) -> Result<(), String> {
    match schema {
        Value::Object(o) => {
            // Annotations: they change nothing a schema accepts.
            for k in ["default", "examples", "title", "description", "$comment"] {
                if o.get(k).is_some_and(holds_null) {
                    o.remove(k);
                }
            }
            if o.get("const").is_some_and(Value::is_null) {
                o.remove("const");
                o.insert("type".into(), json!("null"));
            }
            if let Some(Value::Array(values)) = o.get("enum")
                && values.iter().any(Value::is_null)
            {
                let rest: Vec<Value> = values.iter().filter(|v| !v.is_null()).cloned().collect();
                o.remove("enum");
                let branch = if rest.is_empty() {
                    json!([{"type": "null"}])
                } else {
                    json!([{"enum": rest}, {"type": "null"}])
                };
                if o.contains_key("anyOf") {
                    let mut all = match o.remove("allOf") {
                        Some(Value::Array(a)) => a,
                        _ => Vec::new(),
                    };
                    all.push(json!({ "anyOf": branch }));
                    o.insert("allOf".into(), Value::Array(all));
                } else {
                    o.insert("anyOf".into(), branch);
                }
            }
            for (k, v) in o.iter_mut() {
                // `properties`, `$defs` and the like map names to schemas; `enum`-like
                // keywords hold values, whose `null`s are rewritten above or refused.
                without_nulls(v, &format!("{at}/{k}"))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                without_nulls(v, &format!("{at}/{i}"))?;
            }
            Ok(())
        }
        Value::Null => Err(format!(
            "`null` at {at}, which TOML cannot write and no equivalent schema replaces"
        )),
        _ => Ok(()),
    }
}

/// Whether `v` is or holds a `null`.
fn holds_null(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.iter().any(holds_null),
        Value::Object(o) => o.values().any(holds_null),
        _ => false,
    }
}

/// The object schema of legacy parameters.
fn legacy_schema(params: &[FieldSpec]) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for p in params {
        let req = p.required.unwrap_or(false);
        let ty = if req {
            json!(p.ty)
        } else {
            json!([p.ty, "null"])
        };
        props.insert(
            p.name.clone(),
            json!({"type": ty, "description": p.description}),
        );
        if req {
            required.push(Value::String(p.name.clone()));
        }
    }
    json!({"type": "object", "properties": props, "required": required,
        "additionalProperties": false})
}

/// A legacy tool's return fields as an object schema, each field a property of its
/// declared type, in their order.
fn legacy_output_schema(fields: &[FieldSpec]) -> Value {
    let props: Map<String, Value> = fields
        .iter()
        .map(|f| {
            (
                f.name.clone(),
                json!({"type": f.ty, "description": f.description}),
            )
        })
        .collect();
    json!({"type": "object", "properties": props})
}

/// The top-level parameters an object schema declares, each with the JSON type shown
/// to models (the first non-null type it admits; `string` when it names none).
fn parameters_of(tool: &str, schema: &Value) -> Result<Vec<FieldSpec>, ManifestError> {
    let bad = |why: &str| ManifestError::InputSchema {
        tool: tool.to_string(),
        reason: why.to_string(),
    };
    let obj = schema.as_object().ok_or_else(|| bad("not a JSON object"))?;
    if obj.get("type").and_then(Value::as_str) != Some("object") {
        return Err(bad("`type` must be \"object\""));
    }
    let required: BTreeSet<&str> = match obj.get("required") {
        None => BTreeSet::new(),
        Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
        Some(_) => return Err(bad("`required` must be an array")),
    };
    let props = match obj.get("properties") {
        None => return Ok(vec![]),
        Some(Value::Object(p)) => p,
        Some(_) => return Err(bad("`properties` must be an object")),
    };
    Ok(props
        .iter()
        .map(|(name, p)| FieldSpec {
            name: name.clone(),
            ty: shown_type(p).to_string(),
            description: p
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            required: Some(required.contains(name.as_str())),
        })
        .collect())
}

/// The first non-null JSON type a property schema admits (through `type`, `anyOf`,
/// `oneOf`, `enum` or `const`), `string` when it names none.
fn shown_type(p: &Value) -> &'static str {
    let named = |t: &str| PARAM_TYPES.iter().copied().find(|k| *k == t);
    match p.get("type") {
        Some(Value::String(t)) => {
            if let Some(k) = named(t) {
                return k;
            }
        }
        Some(Value::Array(ts)) => {
            if let Some(k) = ts.iter().filter_map(Value::as_str).find_map(named) {
                return k;
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = p.get(key)
            && let Some(k) = branches
                .iter()
                .map(shown_type)
                .find(|k| *k != "string" || branches.len() == 1)
        {
            return k;
        }
    }
    let sample = p
        .get("const")
        .or_else(|| p.get("enum").and_then(|e| e.as_array()?.first()));
    match sample.map(knox_types::action::json_type) {
        Some(t) if t != "null" => named(t).unwrap_or("string"),
        _ => "string",
    }
}

/// One tool as an MCP server lists it (`tools/list`): name, description, input schema
/// and annotations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpTool {
    /// The server's name for it.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// JSON Schema 2020-12 of its arguments.
    pub input_schema: Value,
    /// The server's hints.
    #[serde(default)]
    pub annotations: Option<McpHints>,
}

/// Names under which a guessed annotation is marked for review.
const GUESS_EFFECT: &str = "effect: guessed";
const GUESS_NEEDS: &str =
    "needs: guessed `remote` (no local system calls or paths); list the endpoints it reaches";
const GUESS_PROSE: &str = "prose: none declared, so every parameter is controlled; list the free-text parameters the agent may compose";
const GUESS_LABELS: &str =
    "returns/discloses/sinks: none declared; say what the output carries and who receives data";

/// Names that suggest running code: such a tool is guessed `execute`.
const EXECUTE_WORDS: [&str; 6] = ["exec", "run_command", "shell", "eval", "command", "script"];

/// The effect an importer guesses for a tool it knows only by name and MCP hints, with
/// the reason, for a person to review. Conservative where [`McpHints::effect`] (the
/// default in force for a manifest that declares no effect) follows the hints: a name
/// that says it runs code is `execute` whatever the hints claim, and absent hints take
/// MCP's defaults (not read-only, open world), so a read of the open world, which sends
/// its parameters there, is `disclose`; only a read-only, closed-world tool is `read`.
pub fn guess_effect(name: &str, hints: Option<McpHints>) -> (Effect, String) {
    let h = hints.unwrap_or_default();
    let lower = name.to_ascii_lowercase();
    if let Some(w) = EXECUTE_WORDS.iter().find(|w| lower.contains(**w)) {
        return (
            Effect::Execute,
            format!("{GUESS_EFFECT} `execute` from the name (`{w}`); hints are not trusted for it"),
        );
    }
    let show = |v: Option<bool>| v.map_or_else(|| "absent".to_owned(), |b| b.to_string());
    let basis = match hints {
        None => "no hints (MCP's defaults: not read-only, open world)".to_owned(),
        Some(_) => format!(
            "readOnlyHint={}, destructiveHint={}, openWorldHint={}",
            show(h.read_only_hint),
            show(h.destructive_hint),
            show(h.open_world_hint)
        ),
    };
    let (effect, why) = match (
        h.read_only_hint.unwrap_or(false),
        h.open_world_hint.unwrap_or(true),
    ) {
        (true, false) => (Effect::Read, "read-only, closed world"),
        // A read of the open world sends its parameters there (a URL, a query).
        (true, true) => (
            Effect::Disclose,
            "read-only but open world: its parameters leave the machine",
        ),
        (false, true) => (Effect::Disclose, "changes the open world"),
        (false, false) => (Effect::Write, "changes local state only"),
    };
    let name = match effect {
        Effect::Read => "read",
        Effect::Write => "write",
        Effect::Disclose => "disclose",
        Effect::Execute => "execute",
    };
    (
        effect,
        format!("{GUESS_EFFECT} `{name}` from {basis} ({why}); hints are the server's own claims"),
    )
}

/// A manifest skeleton for the tools one MCP server lists (`server` becomes the server
/// name and the tools' namespace: `server.tool`). The server is marked `remote` and
/// every guess — the effect ([`guess_effect`]), the needs, the absent prose parameters
/// and labels — is listed in the tool's `review`. Used by
/// `knox toolkit import --mcp-*` (after `tools/list`) and [`skeleton_from_openai`].
pub fn skeleton_from_tools(server: &str, tools: &[McpTool], runtime: RuntimeNeeds) -> ToolkitDoc {
    let tools = tools
        .iter()
        .map(|t| {
            let hints = t.annotations;
            let (effect, why) = guess_effect(&t.name, hints);
            let mut schema = t.input_schema.clone();
            if !schema.is_object() {
                schema = json!({"type": "object"});
            }
            Tool {
                name: format!("{server}.{}", t.name),
                description: t.description.clone().unwrap_or_default(),
                input_schema: schema,
                output_schema: None,
                effect: Some(effect),
                hints,
                discloses: None,
                returns: None,
                sinks: vec![],
                prose: vec![],
                trusted: vec![],
                review: vec![
                    why,
                    GUESS_NEEDS.into(),
                    GUESS_PROSE.into(),
                    GUESS_LABELS.into(),
                ],
            }
        })
        .collect();
    ToolkitDoc {
        format: FORMAT.into(),
        description: String::new(),
        runtime,
        servers: vec![Server {
            name: server.to_string(),
            description: String::new(),
            remote: true,
            needs: ServerNeeds {
                profile: Profile::NetworkClient,
                syscalls: BTreeSet::new(),
                paths: vec![],
                endpoints: vec![],
                limits: None,
            },
            cost: 1,
            tools,
        }],
    }
}

/// Why OpenAI function definitions could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Not a list of functions.
    #[error(
        "expected a JSON array of function definitions (or {{\"tools\"|\"functions\": [...]}})"
    )]
    Shape,
    /// A definition without a name.
    #[error("definition {0} has no `name`")]
    Name(usize),
}

/// The tools of OpenAI function definitions: an array of `{"type": "function",
/// "function": {name, description, parameters}}` or of bare `{name, description,
/// parameters}` (also wrapped as `{"tools": [...]}` or `{"functions": [...]}`).
pub fn tools_from_openai(text: &str) -> Result<Vec<McpTool>, ImportError> {
    let v: Value = serde_json::from_str(text)?;
    let list = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("tools")
            .or_else(|| o.get("functions"))
            .and_then(Value::as_array)
            .ok_or(ImportError::Shape)?,
        _ => return Err(ImportError::Shape),
    };
    list.iter()
        .enumerate()
        .map(|(i, d)| {
            let f = d.get("function").unwrap_or(d);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or(ImportError::Name(i))?;
            Ok(McpTool {
                name: name.to_string(),
                description: f
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                input_schema: f
                    .get("parameters")
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object"})),
                annotations: None,
            })
        })
        .collect()
}

/// A manifest skeleton from OpenAI function definitions (see [`tools_from_openai`],
/// [`skeleton_from_tools`]).
pub fn skeleton_from_openai(
    server: &str,
    text: &str,
    runtime: RuntimeNeeds,
) -> Result<ToolkitDoc, ImportError> {
    Ok(skeleton_from_tools(
        server,
        &tools_from_openai(text)?,
        runtime,
    ))
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
mod tests {
    use super::*;
    use crate::schema::{SchemaError, validate};

    pub(crate) const DOC: &str = r#"
format = "knox-toolkit/1"
description = "A bank and a mailbox"

[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }

[[servers]]
name = "bank"
remote = true
needs = { profile = "network-client", endpoints = [{ host = "bank.example", port = 443 }] }
cost = 3

[[servers.tools]]
name = "bank.send_money"
description = "Send money"
effect = "write"
sinks = ["to_account"]
prose = ["memo"]
[servers.tools.inputSchema]
type = "object"
required = ["to_account", "amount"]
additionalProperties = false
[servers.tools.inputSchema.properties]
to_account = { type = "string", pattern = "^[A-Z]{2}[0-9]{6}$" }
amount = { type = "number", exclusiveMinimum = 0, maximum = 10000 }
currency = { enum = ["EUR", "USD"], default = "EUR" }
memo = { type = "string", maxLength = 140 }
tags = { type = "array", items = { type = "string" } }
when = { anyOf = [{ type = "string", format = "date" }, { type = "integer" }] }

[[servers.tools]]
name = "bank.list-transactions"
description = "List transactions"
hints = { readOnlyHint = true }
returns = { info_types = ["financial"], subject = "user", source = "user" }
inputSchema = { type = "object", properties = { limit = { type = "integer", minimum = 1 } } }
"#;

    fn load() -> ToolkitManifest {
        ToolkitManifest::from_doc(ToolkitDoc::parse(DOC).unwrap()).unwrap()
    }

    fn p(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn an_output_schema_gives_the_output_fields() {
        let mut doc = ToolkitDoc::parse(DOC).unwrap();
        let t = &mut doc.servers[0].tools[0];
        t.output_schema = Some(json!({"type": "object", "properties": {
            "balance": {"type": "number", "description": "What is left"},
            "currency": {"type": "string"}}}));
        let name = t.name.clone();
        let m = ToolkitManifest::from_doc(doc.clone()).unwrap();
        let returns = &m.tool(&name).unwrap().spec.returns;
        let mut fields: Vec<(&str, &str)> = returns
            .iter()
            .map(|f| (f.name.as_str(), f.ty.as_str()))
            .collect();
        fields.sort_unstable();
        assert_eq!(fields, [("balance", "number"), ("currency", "string")]);
        assert!(returns.iter().all(|f| f.required.is_none()));
        // Not an object schema: refused, naming the output schema.
        doc.servers[0].tools[0].output_schema = Some(json!({"type": "string"}));
        let e = ToolkitManifest::from_doc(doc).unwrap_err().to_string();
        assert!(e.contains("outputSchema"), "{e}");
    }

    #[test]
    fn loads_names_effects_and_needs() {
        let m = load();
        let send = m.tool("bank.send_money").unwrap();
        assert_eq!(send.toolkit, "bank");
        assert_eq!(send.effect(), Effect::Write);
        assert_eq!(send.needs.cost, 3);
        assert!(
            send.needs
                .endpoints
                .iter()
                .any(|e| e.host == "bank.example")
        );
        let list = m.tool("bank.list-transactions").unwrap();
        assert_eq!(list.effect(), Effect::Read, "readOnlyHint maps to read");
        assert_eq!(
            send.spec
                .parameters
                .iter()
                .map(|p| (p.name.as_str(), p.ty.as_str()))
                .collect::<Vec<_>>(),
            [
                ("amount", "number"),
                ("currency", "string"),
                ("memo", "string"),
                ("tags", "array"),
                ("to_account", "string"),
                ("when", "integer")
            ]
        );
        // Canonical bytes read back to the same manifest.
        let back = ToolkitManifest::from_canonical(m.canonical_bytes()).unwrap();
        assert_eq!(back.hash(), m.hash());
        assert!(back.tool("bank.send_money").unwrap().input_schema.is_some());
        // JSON and TOML are one format.
        let as_json = serde_json::to_string(&ToolkitDoc::parse(DOC).unwrap()).unwrap();
        let j = ToolkitManifest::from_doc(ToolkitDoc::parse(&as_json).unwrap()).unwrap();
        assert_eq!(j.hash(), m.hash());
    }

    #[test]
    fn the_input_schema_decides_parameters() {
        let m = load();
        let send = m.tool("bank.send_money").unwrap();
        let ok = p(
            json!({"to_account": "DE123456", "amount": 12.5, "currency": "USD",
            "tags": ["rent"], "when": "2025-01-01", "memo": "rent"}),
        );
        assert_eq!(validate(send, &ok), Ok(()));
        // A parameter left out, or one the schema does not declare, is named plainly.
        assert_eq!(
            validate(send, &p(json!({"to_account": "DE123456"}))),
            Err(SchemaError::Missing("amount".into()))
        );
        assert_eq!(
            validate(
                send,
                &p(json!({"to_account": "DE123456", "amount": 1, "extra": 1}))
            ),
            Err(SchemaError::Unknown("extra".into()))
        );
        // The wording of evidence formats before v5 (their bundles' block reasons).
        for (bad, keyword) in [
            (json!({"to_account": "DE123456"}), "required"),
            (
                json!({"to_account": "DE123456", "amount": 1, "extra": 1}),
                "additionalProperties",
            ),
        ] {
            assert_eq!(
                crate::schema::validate_with(send, &p(bad), false),
                Err(SchemaError::Schema {
                    at: String::new(),
                    keyword: keyword.into()
                })
            );
        }
        for (bad, at) in [
            (json!({"to_account": "x", "amount": 1}), "/to_account"),
            (json!({"to_account": "DE123456", "amount": 0}), "/amount"),
            (
                json!({"to_account": "DE123456", "amount": 20000}),
                "/amount",
            ),
            (
                json!({"to_account": "DE123456", "amount": 1, "currency": "GBP"}),
                "/currency",
            ),
            (
                json!({"to_account": "DE123456", "amount": 1, "tags": [1]}),
                "/tags/0",
            ),
            (
                json!({"to_account": "DE123456", "amount": 1, "when": true}),
                "/when",
            ),
        ] {
            let Err(SchemaError::Schema { at: got, .. }) = validate(send, &p(bad.clone())) else {
                panic!("{bad} accepted")
            };
            assert_eq!(got, at, "{bad}");
        }
    }

    #[test]
    fn rejects_bad_documents_with_clear_errors() {
        let cases = [
            (DOC.replace("knox-toolkit/1", "knox-toolkit/9"), "knox-toolkit/9"),
            (
                DOC.replace("name = \"bank.send_money\"", "name = \"other.send_money\""),
                "does not begin with its server",
            ),
            (
                DOC.replace("name = \"bank.send_money\"", "name = \"bank.send money\""),
                "invalid tool name",
            ),
            (DOC.replace("name = \"bank\"", "name = \"ba.nk\""), "server name"),
            (DOC.replace("prose = [\"memo\"]", "prose = [\"mem\"]"), "no parameter `mem`"),
            (
                DOC.replace("prose = [\"memo\"]", "prose = [\"to_account\"]"),
                "both prose and controlled",
            ),
            (
                DOC.replace("exclusiveMinimum = 0", "exclusiveMinimum = \"zero\""),
                "input schema",
            ),
            (
                DOC.replace("needs = { profile = \"network-client\", ", "needs = { profile = \"network-client\", paths = [{ path = \"/etc\", access = [\"read\"] }], "),
                "remote",
            ),
            (DOC.replace("effect = \"write\"", "effect = \"peek\""), "unknown variant"),
        ];
        for (doc, want) in cases {
            let err = ToolkitDoc::parse(&doc)
                .and_then(ToolkitManifest::from_doc)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
        // A backtracking pattern (a look-ahead) is refused: patterns run in linear time.
        let lookahead = DOC.replace("^[A-Z]{2}[0-9]{6}$", "^(?=DE)[A-Z]{2}[0-9]{6}$");
        let err = ToolkitDoc::parse(&lookahead)
            .and_then(ToolkitManifest::from_doc)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid input schema"), "{err}");
        // A schema that refers outside itself is refused (no retrieval, ever).
        let remote_ref = DOC.replace(
            "memo = { type = \"string\", maxLength = 140 }",
            "memo = { \"$ref\" = \"https://evil.example/s.json\" }",
        );
        assert!(
            ToolkitDoc::parse(&remote_ref)
                .and_then(ToolkitManifest::from_doc)
                .is_err()
        );
    }

    #[test]
    fn the_legacy_manifest_converts_and_decides_the_same() {
        let legacy = crate::manifest::tests::manifest();
        let doc = ToolkitDoc::from_legacy(&legacy);
        let m = ToolkitManifest::from_doc(doc).unwrap();
        assert_eq!(m.tools().count(), legacy.tools().count());
        let cases = [
            json!({"id": "e1"}),
            json!({"id": "e1", "limit": 3}),
            json!({"id": "e1", "limit": null}),
            json!({}),
            json!({"id": "e1", "x": 1}),
            json!({"id": "e1", "limit": 2.5}),
            json!({"id": null}),
            json!({"id": 5}),
        ];
        for name in ["MailRead", "MailSend", "TerminalExecute"] {
            let (a, b) = (legacy.tool(name).unwrap(), m.tool(name).unwrap());
            assert_eq!(a.needs, b.needs, "{name}");
            assert_eq!(a.effect(), b.effect(), "{name}");
            assert_eq!(a.annotations.sinks, b.annotations.sinks);
            assert_eq!(a.annotations.discloses, b.annotations.discloses);
            for c in &cases {
                let c = p(c.clone());
                assert_eq!(
                    validate(a, &c).is_ok(),
                    validate(b, &c).is_ok(),
                    "{name} {c:?}"
                );
            }
        }
    }

    /// #34: a schema with `null`s (nullable types, a `null` default, `const: null`, a
    /// `null` in an `enum`) is written as TOML in a form without them, which accepts and
    /// refuses exactly what the original does; a `null` with no such form is an error
    /// naming where.
    #[test]
    fn a_schema_holding_nulls_is_written_as_toml_accepting_the_same() {
        let functions = r#"[{"type": "function", "function": {"name": "send", "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "default": null, "examples": [null, "x"]},
                "memo": {"type": ["string", "null"], "enum": ["a", "b", null]},
                "nothing": {"const": null},
                "either": {"anyOf": [{"type": "string"}, {"type": "integer"}], "enum": [1, null]}
            },
            "required": ["to"]}}}]"#;
        let runtime = crate::manifest::tests::manifest().needs().runtime.clone();
        let doc = skeleton_from_openai("bank", functions, runtime).unwrap();
        let text = doc.to_toml().unwrap();
        let back = ToolkitDoc::parse(&text).unwrap();
        let (a, b) = (
            &doc.servers[0].tools[0].input_schema,
            &back.servers[0].tools[0].input_schema,
        );
        let (va, vb) = (
            jsonschema::validator_for(a).unwrap(),
            jsonschema::validator_for(b).unwrap(),
        );
        for case in [
            json!({"to": "x"}),
            json!({"to": null}),
            json!({"to": "x", "memo": "a"}),
            json!({"to": "x", "memo": null}),
            json!({"to": "x", "memo": "c"}),
            json!({"to": "x", "nothing": null}),
            json!({"to": "x", "nothing": 0}),
            json!({"to": "x", "either": 1}),
            json!({"to": "x", "either": null}),
            json!({"to": "x", "either": "s"}),
            json!({"to": "x", "either": 2}),
        ] {
            assert_eq!(va.is_valid(&case), vb.is_valid(&case), "{case}");
        }
        // A `null` inside an `enum` of objects has no such form.
        let mut odd = json!({"enum": [{"a": null}]});
        let e = without_nulls(&mut odd, "x").unwrap_err();
        assert!(e.contains("x/enum/0/a"), "{e}");
    }

    #[test]
    fn skeletons_mark_every_guess_for_review() {
        let functions = r#"[
          {"type": "function", "function": {"name": "send_money", "description": "Send",
            "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                           "required": ["to"]}}},
          {"name": "get_balance", "parameters": {"type": "object", "properties": {}}}
        ]"#;
        let runtime = crate::manifest::tests::manifest().needs().runtime.clone();
        let doc = skeleton_from_openai("bank", functions, runtime.clone()).unwrap();
        let names: Vec<&str> = doc.servers[0]
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(names, ["bank.send_money", "bank.get_balance"]);
        assert!(
            doc.servers[0]
                .tools
                .iter()
                .all(|t| t.effect() == Effect::Disclose),
            "no hints: MCP's defaults (open world), so a guessed disclosure"
        );
        assert!(doc.pending_review().len() >= 8);
        // A skeleton is a valid manifest as it stands.
        let m = ToolkitManifest::from_doc(doc).unwrap();
        assert!(m.tool("bank.send_money").is_some());
        // MCP hints become the effect, still marked for review.
        let tools = [McpTool {
            name: "read_file".into(),
            description: None,
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            annotations: Some(McpHints {
                read_only_hint: Some(true),
                open_world_hint: Some(false),
                ..McpHints::default()
            }),
        }];
        let doc = skeleton_from_tools("fs", &tools, runtime);
        assert_eq!(doc.servers[0].tools[0].effect(), Effect::Read);
        assert!(doc.pending_review()[0].1.contains("readOnlyHint=true"));
    }

    #[test]
    fn an_importers_guess_is_conservative() {
        let h = |read_only, destructive, open_world| {
            Some(McpHints {
                read_only_hint: read_only,
                destructive_hint: destructive,
                idempotent_hint: None,
                open_world_hint: open_world,
            })
        };
        let guess = |name, hints| guess_effect(name, hints).0;
        assert_eq!(
            guess("read_file", h(Some(true), None, Some(false))),
            Effect::Read
        );
        assert_eq!(
            guess("write_file", h(Some(false), Some(true), Some(false))),
            Effect::Write
        );
        assert_eq!(guess("post", h(None, None, None)), Effect::Disclose);
        assert_eq!(guess("post", None), Effect::Disclose);
        // A read of the open world sends its parameters there.
        assert_eq!(guess("fetch", h(Some(true), None, None)), Effect::Disclose);
        // A name that says it runs code outweighs the hints.
        let (e, why) = guess_effect("run_command", h(Some(true), None, Some(false)));
        assert_eq!(e, Effect::Execute);
        assert!(why.contains("run_command"), "{why}");
        // The default in force for a manifest that declares no effect follows the hints.
        assert_eq!(h(Some(true), None, None).unwrap().effect(), Effect::Read);
        assert!(tools_from_openai("{\"x\": 1}").is_err());
        assert!(tools_from_openai("[{\"description\": \"no name\"}]").is_err());
    }
}
