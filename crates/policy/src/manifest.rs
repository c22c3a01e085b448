//! The toolkit manifest `C`: tool specifications plus what each toolkit's tools need.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use knox_types::apm::{Access, Endpoint, Limits, PathGrant, ToolNeeds};
use knox_types::digest::{Digest, tag};
use serde::{Deserialize, Serialize};

use crate::spec::{ToolSpec, ToolkitSpec};

/// Version of the needs file this crate reads.
pub const NEEDS_VERSION: u32 = 1;

/// JSON types a parameter may declare.
pub const PARAM_TYPES: [&str; 6] = ["string", "integer", "number", "boolean", "array", "object"];

/// Errors loading or validating a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// `tools.json` is not valid.
    #[error("tools.json: {0}")]
    Json(#[from] serde_json::Error),
    /// The needs file is not valid TOML of the expected shape.
    #[error("toolkit needs: {0}")]
    Toml(#[from] toml::de::Error),
    /// Unsupported needs file version.
    #[error("toolkit needs: version {got} is not supported (expected {expected})")]
    Version {
        /// Found.
        got: u32,
        /// Supported.
        expected: u32,
    },
    /// The needs file names a toolkit that `tools.json` does not have.
    #[error("toolkit needs: unknown toolkit `{0}`")]
    UnknownToolkit(String),
    /// A toolkit of `tools.json` has no needs entry.
    #[error("toolkit needs: toolkit `{0}` has no entry")]
    MissingToolkit(String),
    /// The needs file annotates a tool the toolkit does not have.
    #[error("toolkit needs: toolkit `{toolkit}` has no tool `{tool}`")]
    UnknownTool {
        /// Toolkit.
        toolkit: String,
        /// Tool.
        tool: String,
    },
    /// An annotation names a parameter the tool does not have.
    #[error("tool `{tool}` has no parameter `{param}`")]
    UnknownParam {
        /// Full tool name.
        tool: String,
        /// Parameter.
        param: String,
    },
    /// A parameter declares a type outside [`PARAM_TYPES`].
    #[error("tool `{tool}` parameter `{param}`: unknown type `{ty}`")]
    BadType {
        /// Full tool name.
        tool: String,
        /// Parameter.
        param: String,
        /// Declared type.
        ty: String,
    },
    /// Two tools share one full name, or a tool two parameters one name.
    #[error("duplicate name `{0}`")]
    Duplicate(String),
    /// A malformed system call name.
    #[error("invalid system call name `{0}`")]
    Syscall(String),
    /// A path that is not absolute and normalized.
    #[error("invalid path `{0}`: must be absolute, without `.`, `..`, `//` or a trailing `/`")]
    Path(String),
    /// A value could not be canonicalized.
    #[error(transparent)]
    Canon(#[from] knox_types::canon::CanonError),
    /// A tool name outside `[A-Za-z0-9_.-]{1,128}` (see `knox_types::action::check_tool_name`).
    #[error("invalid tool name `{0}`")]
    ToolName(String),
    /// A toolkit manifest of another format than `knox-toolkit/1`.
    #[error("toolkit manifest: format `{0}` is not supported (expected `knox-toolkit/1`)")]
    Format(String),
    /// A server name outside `[A-Za-z0-9_-]{1,64}`.
    #[error("invalid server name `{0}`: 1-64 of A-Z a-z 0-9 _ -")]
    ServerName(String),
    /// A tool whose name does not begin with its server's.
    #[error("tool `{tool}` does not begin with its server's name `{server}`")]
    Namespace {
        /// Server.
        server: String,
        /// Tool.
        tool: String,
    },
    /// A remote server that declares local system calls or paths.
    #[error("server `{0}` is remote: it may not declare local system calls or paths")]
    Remote(String),
    /// An input schema that is not a valid JSON Schema 2020-12 object schema.
    #[error("tool `{tool}`: invalid input schema: {reason}")]
    InputSchema {
        /// Full tool name.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// A parameter declared prose that is also a sink or a recipient.
    #[error(
        "tool `{tool}` parameter `{param}` is both prose and controlled (a sink or a recipient)"
    )]
    ProseControlled {
        /// Full tool name.
        tool: String,
        /// Parameter.
        param: String,
    },
    /// Bytes that describe a manifest but are not its canonical form.
    #[error(
        "manifest bytes are not canonical: they hash to {written}, the manifest they describe to {read}"
    )]
    NotCanonical {
        /// `H("knox/manifest", bytes)`.
        written: Digest,
        /// The hash of the manifest read from them.
        read: Digest,
    },
}

/// A legacy needs file: the TOML that, beside InjecAgent's `tools.json`, once held
/// Knox's reviewed needs (`data/manifests/toolkits-*.toml`, frozen).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeedsFile {
    /// [`NEEDS_VERSION`].
    pub version: u32,
    /// What every tool worker needs.
    pub runtime: RuntimeNeeds,
    /// Per toolkit.
    pub toolkits: BTreeMap<String, ToolkitNeeds>,
}

/// The runtime baseline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeNeeds {
    /// System calls.
    pub syscalls: BTreeSet<String>,
    /// Paths.
    pub paths: Vec<PathGrant>,
    /// Default limits.
    pub limits: Limits,
}

/// Seccomp profile family of a toolkit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// No network.
    Offline,
    /// Outbound connections to listed endpoints.
    NetworkClient,
    /// Runs programs.
    Terminal,
}

/// One toolkit's needs and per-tool annotations.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolkitNeeds {
    /// Profile family.
    pub profile: Profile,
    /// System calls beyond the runtime's.
    pub syscalls: BTreeSet<String>,
    /// Paths beyond the runtime's.
    #[serde(default)]
    pub paths: Vec<PathGrant>,
    /// Network endpoints.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// Cost units per call.
    pub cost: u64,
    /// Limits beyond the runtime's, when needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
    /// Annotations per tool (name without the toolkit prefix).
    #[serde(default)]
    pub tools: BTreeMap<String, ToolAnnotations>,
}

/// What a tool does with data.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolAnnotations {
    /// Set when the tool transmits data to a recipient outside the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discloses: Option<Disclosure>,
    /// Set when the tool's output carries labelled data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returns: Option<Returns>,
    /// Sensitive parameters that must not take untrusted values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sinks: Vec<String>,
    /// What the tool does to the world (see [`Effect`]); absent: derived by
    /// [`ToolEntry::effect`], conservatively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// Parameters the executor may compose freely (prose: an email body, a tweet). Every
    /// other parameter is controlled: a plan fixes it exactly, to an enumerated set, a
    /// bounded range or a named field of an earlier output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prose: Vec<String>,
    /// JSON pointers into the tool's output whose values the user or the service writes,
    /// never a third party (an account's own address, a message id): a recipient linked
    /// to one of them is trusted although the tool returns external content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted: Vec<String>,
}

/// What a tool does to the world, from the least to the most consequential. The
/// trajectory policy lets `read` calls repeat and reorder; the others stay exactly as
/// planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Observes state the user may see; changes nothing and sends nothing anywhere.
    Read,
    /// Changes state (creates, updates, deletes), without sending data to anyone.
    Write,
    /// Transmits data to a recipient outside the user.
    Disclose,
    /// Runs code or a command.
    Execute,
}

/// Which parameters name the recipient and carry the content of a disclosure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Disclosure {
    /// Recipient parameters.
    pub recipient: Vec<String>,
    /// Content parameters.
    pub content: Vec<String>,
    /// `public` when the recipient is implicit and everyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// Information types the disclosure carries by itself, whatever its parameters (the
    /// whole genetic profile The23andMe shares, a password autofilled into a site, a
    /// consultation reason sent to a doctor); the data subject is the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carries: Vec<InfoType>,
}

/// Information types a tool's output may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InfoType {
    /// Health records.
    Health,
    /// Genetic data.
    Genetic,
    /// Financial accounts and transactions.
    Financial,
    /// Cards and payment methods.
    PaymentMethod,
    /// Contact details.
    Contact,
    /// Postal addresses.
    Address,
    /// Passwords, keys, tokens.
    Credentials,
    /// Geolocation.
    Location,
    /// Identity documents and personal identifiers.
    Identity,
    /// Messages and emails.
    Communication,
    /// Calendars and appointments.
    Schedule,
    /// Orders, products, business data.
    Commercial,
    /// Device and system state.
    Device,
    /// Source code.
    Code,
    /// Public information.
    Public,
}

/// Whose data a tool returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Subject {
    /// The user's own.
    User,
    /// Other people's.
    ThirdParty,
    /// Both.
    Mixed,
}

/// Who can write a tool's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Someone other than the user (untrusted: may carry an injection).
    External,
    /// The user's own account records.
    User,
    /// Device or system state.
    System,
}

/// The labels of a tool's output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Returns {
    /// Information types.
    pub info_types: Vec<InfoType>,
    /// Data subject.
    pub subject: Subject,
    /// Provenance.
    pub source: Source,
}

/// One tool with everything Knox knows about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolEntry {
    /// Full name (`GmailSendEmail`).
    pub name: String,
    /// Toolkit (`Gmail`).
    pub toolkit: String,
    /// Its specification.
    pub spec: ToolSpec,
    /// Disclosure, labels and sinks.
    pub annotations: ToolAnnotations,
    /// Toolkit needs plus the runtime's.
    pub needs: ToolNeeds,
    /// `H("knox/needs", canonical(needs))`, recorded in syscall checks.
    pub needs_hash: Digest,
    /// The tool's JSON Schema (2020-12) input schema, compiled, for tools of a
    /// `knox-toolkit/1` manifest; `None` for legacy tools (checked by their parameter
    /// list).
    pub input_schema: Option<InputSchema>,
}

/// A tool's input schema and its compiled validator (compiled once, when the manifest
/// loads).
#[derive(Clone)]
pub struct InputSchema {
    /// The schema as written.
    pub schema: serde_json::Value,
    /// Compiled.
    pub validator: std::sync::Arc<jsonschema::Validator>,
}

impl InputSchema {
    /// Checks the schema against the JSON Schema 2020-12 meta-schema and compiles it
    /// (no reference is ever retrieved: a `$ref` outside the schema fails; `pattern`s
    /// are RE2 syntax, matched in linear time: a look-around is refused).
    pub fn compile(tool: &str, schema: &serde_json::Value) -> Result<Self, ManifestError> {
        let bad = |reason: String| ManifestError::InputSchema {
            tool: tool.to_string(),
            reason,
        };
        jsonschema::meta::validate(schema).map_err(|e| bad(e.to_string()))?;
        // Patterns run on untrusted proposals, also in a verifier replaying a bundle's
        // embedded manifest: the linear-time engine (RE2 syntax, as `pattern`
        // constraints), never a backtracking one.
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(schema)
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            schema: schema.clone(),
            validator: std::sync::Arc::new(validator),
        })
    }
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PartialEq for InputSchema {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl ToolEntry {
    /// The tool's effect: the declared one, else `disclose` for a tool that discloses,
    /// else `write` (an undeclared tool is never assumed harmless).
    pub fn effect(&self) -> Effect {
        match (self.annotations.effect, &self.annotations.discloses) {
            (Some(e), _) => e,
            (None, Some(_)) => Effect::Disclose,
            (None, None) => Effect::Write,
        }
    }

    /// Whether the tool's output can carry content written by someone other than the
    /// user (an injection vector, and the data-flow guard's taint).
    pub fn returns_external(&self) -> bool {
        self.annotations
            .returns
            .as_ref()
            .is_some_and(|r| r.source == Source::External)
    }
}

/// The toolkit manifest `C`.
#[derive(Clone, Debug)]
pub struct ToolkitManifest {
    toolkits: Vec<ToolkitSpec>,
    needs: NeedsFile,
    tools: HashMap<String, ToolEntry>,
    hash: Digest,
    canonical: Vec<u8>,
    doc: Option<Box<crate::toolkit::ToolkitDoc>>,
}

impl ToolkitManifest {
    /// Parses and validates `tools.json` and the needs TOML.
    pub fn from_sources(tools_json: &str, needs_toml: &str) -> Result<Self, ManifestError> {
        let toolkits: Vec<ToolkitSpec> = serde_json::from_str(tools_json)?;
        let needs: NeedsFile = toml::from_str(needs_toml)?;
        Self::from_parts(toolkits, needs)
    }

    /// Validates parsed parts.
    pub fn from_parts(toolkits: Vec<ToolkitSpec>, needs: NeedsFile) -> Result<Self, ManifestError> {
        let tools = entries(&toolkits, &needs)?;
        let body = serde_json::json!({"tools": toolkits, "needs": needs});
        let canonical = knox_types::canon::canonical(&body);
        let hash = Digest::tagged(tag::MANIFEST, &[&canonical]);
        Ok(Self {
            toolkits,
            needs,
            tools,
            hash,
            canonical,
            doc: None,
        })
    }

    /// Validates and loads a `knox-toolkit/1` manifest: names, needs, annotations, and
    /// every tool's input schema (checked against the JSON Schema 2020-12 meta-schema
    /// and compiled once). Its hash is `H("knox/manifest", canonical(document))`.
    pub fn from_doc(doc: crate::toolkit::ToolkitDoc) -> Result<Self, ManifestError> {
        let (toolkits, needs, schemas) = doc.lower()?;
        let mut tools = entries(&toolkits, &needs)?;
        for (name, schema) in &schemas {
            let compiled = InputSchema::compile(name, schema)?;
            if let Some(t) = tools.get_mut(name) {
                t.input_schema = Some(compiled);
            }
        }
        let body = serde_json::to_value(&doc)?;
        let canonical = knox_types::canon::canonical(&body);
        let hash = Digest::tagged(tag::MANIFEST, &[&canonical]);
        Ok(Self {
            toolkits,
            needs,
            tools,
            hash,
            canonical,
            doc: Some(Box::new(doc)),
        })
    }

    /// Reads a manifest file: a `knox-toolkit/1` document (TOML or JSON).
    pub fn from_toolkit_text(text: &str) -> Result<Self, ManifestError> {
        Self::from_doc(crate::toolkit::ToolkitDoc::parse(text)?)
    }

    /// The `knox-toolkit/1` document this manifest was loaded from (`None` for a
    /// legacy manifest).
    pub fn doc(&self) -> Option<&crate::toolkit::ToolkitDoc> {
        self.doc.as_deref()
    }

    /// Reads a manifest back from its canonical bytes ([`Self::canonical_bytes`], as a
    /// bundle embeds them). The bytes must be exactly the canonical form of what they
    /// describe: a manifest whose hash differs from `H("knox/manifest", bytes)` (a field
    /// this build drops, a non-canonical encoding) is refused, so the hash of the bytes
    /// is the hash of the manifest used.
    pub fn from_canonical(bytes: &[u8]) -> Result<Self, ManifestError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Body {
            tools: Vec<ToolkitSpec>,
            needs: NeedsFile,
        }
        let value: serde_json::Value = serde_json::from_slice(bytes)?;
        let m = if value.get("format").is_some() {
            Self::from_doc(serde_json::from_value(value)?)?
        } else {
            let body: Body = serde_json::from_value(value)?;
            Self::from_parts(body.tools, body.needs)?
        };
        if m.canonical != bytes {
            return Err(ManifestError::NotCanonical {
                written: Digest::tagged(tag::MANIFEST, &[bytes]),
                read: m.hash,
            });
        }
        Ok(m)
    }

    /// The manifest's canonical bytes: what [`Self::hash`] is computed over, and what a
    /// bundle embeds so that a verifier can check a run with tools it does not know.
    pub fn canonical_bytes(&self) -> &[u8] {
        &self.canonical
    }

    /// This manifest with every information-type label removed: no tool output carries
    /// a labelled type and no disclosure carries one by itself (subjects, provenance,
    /// sinks and disclosure parameters stay). Under it the regulation guard learns what
    /// a disclosure carries only from a judge — how `knox eval --judge` measures one. It
    /// is a manifest of its own, with its own hash, which the APMs derived from it name.
    pub fn without_info_types(&self) -> Result<Self, ManifestError> {
        if let Some(doc) = &self.doc {
            let mut doc = (**doc).clone();
            for t in doc.servers.iter_mut().flat_map(|s| s.tools.iter_mut()) {
                if let Some(r) = t.returns.as_mut() {
                    r.info_types.clear();
                }
                if let Some(d) = t.discloses.as_mut() {
                    d.carries.clear();
                }
            }
            return Self::from_doc(doc);
        }
        let mut needs = self.needs.clone();
        for kit in needs.toolkits.values_mut() {
            for a in kit.tools.values_mut() {
                if let Some(r) = a.returns.as_mut() {
                    r.info_types.clear();
                }
                if let Some(d) = a.discloses.as_mut() {
                    d.carries.clear();
                }
            }
        }
        Self::from_parts(self.toolkits.clone(), needs)
    }

    /// The needs file of this manifest as TOML: with the same `tools.json`, it loads
    /// back into a manifest with the same hash (how a verifier is handed a manifest
    /// such as [`Self::without_info_types`]'s: `knox verify --needs`).
    pub fn needs_toml(&self) -> Result<String, toml::ser::Error> {
        toml::to_string(&self.needs)
    }

    /// `H("knox/manifest", canonical({"needs": …, "tools": …}))`.
    pub fn hash(&self) -> Digest {
        self.hash
    }

    /// A tool by full name.
    pub fn tool(&self, name: &str) -> Option<&ToolEntry> {
        self.tools.get(name)
    }

    /// All tools, in no particular order.
    pub fn tools(&self) -> impl Iterator<Item = &ToolEntry> {
        self.tools.values()
    }

    /// The toolkit specifications, in file order.
    pub fn toolkits(&self) -> &[ToolkitSpec] {
        &self.toolkits
    }

    /// The needs file.
    pub fn needs(&self) -> &NeedsFile {
        &self.needs
    }
}

/// Validates the parts and builds every tool's entry.
fn entries(
    toolkits: &[ToolkitSpec],
    needs: &NeedsFile,
) -> Result<HashMap<String, ToolEntry>, ManifestError> {
    if needs.version != NEEDS_VERSION {
        return Err(ManifestError::Version {
            got: needs.version,
            expected: NEEDS_VERSION,
        });
    }
    validate_needs(&needs.runtime.syscalls, &needs.runtime.paths)?;
    let known: BTreeSet<&str> = toolkits.iter().map(|t| t.toolkit.as_str()).collect();
    if let Some(extra) = needs.toolkits.keys().find(|k| !known.contains(k.as_str())) {
        return Err(ManifestError::UnknownToolkit(extra.clone()));
    }
    let mut tools = HashMap::new();
    for kit in toolkits {
        let kn = needs
            .toolkits
            .get(&kit.toolkit)
            .ok_or_else(|| ManifestError::MissingToolkit(kit.toolkit.clone()))?;
        validate_needs(&kn.syscalls, &kn.paths)?;
        if let Some(extra) = kn
            .tools
            .keys()
            .find(|t| !kit.tools.iter().any(|s| &s.name == *t))
        {
            return Err(ManifestError::UnknownTool {
                toolkit: kit.toolkit.clone(),
                tool: extra.clone(),
            });
        }
        let base = tool_needs(&kit.toolkit, &needs.runtime, kn);
        let needs_hash = Digest::of_json(tag::NEEDS, &base)?;
        for spec in &kit.tools {
            let name = format!("{}{}", kit.toolkit, spec.name);
            knox_types::action::check_tool_name(&name)
                .map_err(|_| ManifestError::ToolName(name.clone()))?;
            validate_spec(&name, spec)?;
            let annotations = kn.tools.get(&spec.name).cloned().unwrap_or_default();
            validate_annotations(&name, spec, &annotations)?;
            let entry = ToolEntry {
                name: name.clone(),
                toolkit: kit.toolkit.clone(),
                spec: spec.clone(),
                annotations,
                needs: base.clone(),
                needs_hash,
                input_schema: None,
            };
            if tools.insert(name.clone(), entry).is_some() {
                return Err(ManifestError::Duplicate(name));
            }
        }
    }
    Ok(tools)
}

fn tool_needs(toolkit: &str, runtime: &RuntimeNeeds, kn: &ToolkitNeeds) -> ToolNeeds {
    let syscalls = runtime.syscalls.union(&kn.syscalls).cloned().collect();
    let paths = merge_paths(runtime.paths.iter().chain(&kn.paths));
    let limits = kn.limits.map_or(runtime.limits, |l| runtime.limits.max(&l));
    ToolNeeds {
        toolkit: toolkit.to_string(),
        syscalls,
        paths,
        endpoints: kn.endpoints.iter().cloned().collect(),
        limits,
        cost: kn.cost,
    }
}

/// Merges grants on the same path (union of access), sorted by path.
pub fn merge_paths<'a>(grants: impl IntoIterator<Item = &'a PathGrant>) -> Vec<PathGrant> {
    let mut by_path: BTreeMap<&str, BTreeSet<Access>> = BTreeMap::new();
    for g in grants {
        by_path
            .entry(g.path.as_str())
            .or_default()
            .extend(g.access.iter().copied());
    }
    by_path
        .into_iter()
        .map(|(path, access)| PathGrant {
            path: path.to_string(),
            access,
        })
        .collect()
}

fn validate_needs(syscalls: &BTreeSet<String>, paths: &[PathGrant]) -> Result<(), ManifestError> {
    for s in syscalls {
        let ok = !s.is_empty()
            && s.len() <= 32
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !ok {
            return Err(ManifestError::Syscall(s.clone()));
        }
    }
    for p in paths {
        if !is_normalized_absolute(&p.path) {
            return Err(ManifestError::Path(p.path.clone()));
        }
    }
    Ok(())
}

/// Whether `p` is absolute and lexically normalized.
pub fn is_normalized_absolute(p: &str) -> bool {
    if p == "/" {
        return true;
    }
    p.starts_with('/')
        && !p.ends_with('/')
        && p.split('/')
            .skip(1)
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

fn validate_spec(name: &str, spec: &ToolSpec) -> Result<(), ManifestError> {
    let mut seen = BTreeSet::new();
    for p in &spec.parameters {
        if !PARAM_TYPES.contains(&p.ty.as_str()) {
            return Err(ManifestError::BadType {
                tool: name.to_string(),
                param: p.name.clone(),
                ty: p.ty.clone(),
            });
        }
        if !seen.insert(p.name.as_str()) {
            return Err(ManifestError::Duplicate(format!("{name}.{}", p.name)));
        }
    }
    Ok(())
}

fn validate_annotations(
    name: &str,
    spec: &ToolSpec,
    a: &ToolAnnotations,
) -> Result<(), ManifestError> {
    let mut named: Vec<&String> = a.sinks.iter().chain(&a.prose).collect();
    if let Some(d) = &a.discloses {
        named.extend(d.recipient.iter().chain(&d.content));
    }
    let recipients = a.discloses.iter().flat_map(|d| &d.recipient);
    if let Some(p) = a
        .sinks
        .iter()
        .chain(recipients)
        .find(|p| a.prose.contains(p))
    {
        return Err(ManifestError::ProseControlled {
            tool: name.to_string(),
            param: p.clone(),
        });
    }
    for param in named {
        if !spec.parameters.iter().any(|p| &p.name == param) {
            return Err(ManifestError::UnknownParam {
                tool: name.to_string(),
                param: param.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
pub(crate) mod tests {
    use super::*;

    pub(crate) const TOOLS: &str = r#"[
      {"toolkit": "Mail", "name_for_model": "Mail", "name_for_human": "Mail", "description_for_model": "d", "description_for_human": "d",
       "tools": [
         {"name": "Send", "summary": "s", "parameters": [
            {"name": "to", "type": "string", "description": "d", "required": true},
            {"name": "body", "type": "string", "description": "d", "required": true},
            {"name": "cc", "type": "array", "description": "d", "required": false}],
          "returns": [{"name": "success", "type": "boolean", "description": "d"}]},
         {"name": "Read", "summary": "s", "parameters": [
            {"name": "id", "type": "string", "description": "d", "required": true},
            {"name": "limit", "type": "integer", "description": "d"}],
          "returns": [{"name": "email", "type": "object", "description": "d"}]}]},
      {"toolkit": "Terminal", "name_for_model": "T", "name_for_human": "T", "description_for_model": "d", "description_for_human": "d",
       "tools": [{"name": "Execute", "summary": "s", "parameters": [{"name": "command", "type": "string", "description": "d", "required": true}],
                  "returns": []}]}
    ]"#;

    pub(crate) const NEEDS: &str = r#"
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
discloses = { recipient = ["to", "cc"], content = ["body"] }
sinks = ["to"]
[toolkits.Mail.tools.Read]
returns = { info_types = ["communication"], subject = "user", source = "external" }

[toolkits.Terminal]
profile = "terminal"
syscalls = ["execve", "clone", "wait4"]
paths = [{ path = "/usr/bin", access = ["read", "execute"] }]
cost = 1
limits = { max_processes = 64, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }
"#;

    pub(crate) fn manifest() -> ToolkitManifest {
        ToolkitManifest::from_sources(TOOLS, NEEDS).unwrap()
    }

    #[test]
    fn loads_and_merges_runtime_needs() {
        let m = manifest();
        let send = m.tool("MailSend").unwrap();
        assert!(send.needs.syscalls.contains("read") && send.needs.syscalls.contains("connect"));
        assert_eq!(send.needs.cost, 2);
        assert_eq!(
            m.tool("TerminalExecute")
                .unwrap()
                .needs
                .limits
                .max_processes,
            64
        );
        assert!(m.tool("MailDelete").is_none());
    }

    #[test]
    fn effects_are_declared_or_derived_conservatively() {
        let m = manifest();
        assert_eq!(m.tool("MailSend").unwrap().effect(), Effect::Disclose);
        // Not declared, not disclosing: never assumed to be a harmless read.
        assert_eq!(m.tool("MailRead").unwrap().effect(), Effect::Write);
        let declared = NEEDS.replace(
            "[toolkits.Mail.tools.Read]\n",
            "[toolkits.Mail.tools.Read]\neffect = \"read\"\n",
        );
        let m = ToolkitManifest::from_sources(TOOLS, &declared).unwrap();
        assert_eq!(m.tool("MailRead").unwrap().effect(), Effect::Read);
        let bad = NEEDS.replace(
            "[toolkits.Mail.tools.Read]\n",
            "[toolkits.Mail.tools.Read]\neffect = \"peek\"\n",
        );
        assert!(ToolkitManifest::from_sources(TOOLS, &bad).is_err());
    }

    #[test]
    fn rejects_bad_files_with_clear_errors() {
        let cases = [
            (
                NEEDS.replace("[toolkits.Mail.tools.Read]", "[toolkits.Mail.tools.Nope]"),
                "has no tool `Nope`",
            ),
            (
                NEEDS.replace("sinks = [\"to\"]", "sinks = [\"too\"]"),
                "no parameter `too`",
            ),
            (
                NEEDS.replace("\"wait4\"", "\"Wait4!\""),
                "invalid system call name",
            ),
            (NEEDS.replace("/usr/bin", "/usr/../bin"), "invalid path"),
            (
                NEEDS.replace(
                    "[toolkits.Terminal]\nprofile = \"terminal\"",
                    "[toolkits.Terminal]\nprofile = \"gpu\"",
                ),
                "unknown variant",
            ),
            (NEEDS.replace("version = 1", "version = 2"), "version 2"),
            (
                NEEDS.replace("cost = 2", "cost = 2\nbogus = 1"),
                "unknown field",
            ),
            (
                format!(
                    "{NEEDS}\n[toolkits.Ghost]\nprofile = \"offline\"\nsyscalls = []\ncost = 0\n"
                ),
                "unknown toolkit `Ghost`",
            ),
        ];
        for (needs, want) in cases {
            let err = ToolkitManifest::from_sources(TOOLS, &needs)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{err} should contain {want}");
        }
        let no_terminal = NEEDS.split("[toolkits.Terminal]").next().unwrap();
        let err = ToolkitManifest::from_sources(TOOLS, no_terminal)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`Terminal` has no entry"), "{err}");
        let bad_type = TOOLS.replace("\"type\": \"integer\"", "\"type\": \"int\"");
        let err = ToolkitManifest::from_sources(&bad_type, NEEDS)
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown type `int`"), "{err}");
    }

    #[test]
    fn hash_changes_with_content() {
        let a = manifest().hash();
        let b = ToolkitManifest::from_sources(TOOLS, &NEEDS.replace("cost = 2", "cost = 3"))
            .unwrap()
            .hash();
        assert_ne!(a, b);
    }

    #[test]
    fn without_info_types_keeps_everything_but_the_types() {
        let m = manifest();
        let blind = m.without_info_types().unwrap();
        assert_ne!(blind.hash(), m.hash());
        let read = blind.tool("MailRead").unwrap();
        let r = read.annotations.returns.as_ref().unwrap();
        assert!(r.info_types.is_empty());
        assert_eq!(r.source, Source::External);
        assert!(read.returns_external());
        let send = blind.tool("MailSend").unwrap();
        assert_eq!(send.annotations, m.tool("MailSend").unwrap().annotations);
        assert_eq!(blind.tools().count(), m.tools().count());
        // Handed over as a needs file, it is the same manifest.
        let back = ToolkitManifest::from_sources(TOOLS, &blind.needs_toml().unwrap()).unwrap();
        assert_eq!(back.hash(), blind.hash());
    }
}
