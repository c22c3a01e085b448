//! The attested policy manifest: `(p, C, R, stop) ↦ APM = (T, Γ)`.
//!
//! The APM says, for one prompt, which tool calls each agent is expected to make (the
//! trajectory `T`, with optional parameter constraints) and what the guards permit
//! (`Γ`: the stop policy, the authorization `Auth` for the system-call guard, the
//! regulations). It is hashed canonically and signed; every decision in the AEG is
//! recomputable from it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::action::hash_call;
use crate::canon;
use crate::digest::{Digest, tag};

/// Version of the APM layout.
pub const APM_VERSION: u32 = 1;

/// The attested policy manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Apm {
    /// [`APM_VERSION`].
    pub version: u32,
    /// Hashes of the inputs the APM was derived from.
    pub inputs: ApmInputs,
    /// Tasks and sub-agents.
    pub topology: Topology,
    /// The tasks of the prompt.
    pub tasks: Vec<TaskPlan>,
    /// One plan per executing agent.
    pub agents: Vec<AgentPlan>,
    /// What each guard permits.
    pub guards: Guards,
    /// Set when the planner gave no valid plan: every trajectory is then empty, `Auth`
    /// names no toolkit, and the run's only event is the attested `plan_failed`
    /// interrupt under the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planning: Option<PlanningFailure>,
}

/// Why the planner produced no plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanningFailure {
    /// The planner's error, as it reported it.
    pub reason: String,
}

impl PlanningFailure {
    /// The block reason of the run's `plan_failed` interrupt.
    pub fn interrupt_reason(&self) -> String {
        format!("planning failed: {}", self.reason)
    }
}

impl Apm {
    /// `H("knox/apm", canonical(apm))`.
    pub fn hash(&self) -> Result<Digest, canon::CanonError> {
        Digest::of_json(tag::APM, self)
    }

    /// The plan of agent `id`.
    pub fn agent(&self, id: &str) -> Option<&AgentPlan> {
        self.agents.iter().find(|a| a.id == id)
    }
}

/// Hashes of `(p, C, R, stop)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApmInputs {
    /// `H("knox/prompt", canonical(prompt))`.
    pub prompt: Digest,
    /// `H("knox/manifest", canonical(toolkit manifest))`.
    pub manifest: Digest,
    /// `H("knox/regulations", canonical(regulations))`.
    pub regulations: Digest,
    /// `H("knox/stop", canonical(stop condition))`.
    pub stop: Digest,
    /// `H("knox/contract", canonical(contract))` of the signed capability contract the
    /// run is bounded by (`knox-contract`), when one is: its `contract` guard decides
    /// every action and the bundle embeds the signed envelope. Absent otherwise, so an
    /// APM without a contract hashes as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<Digest>,
}

/// Workload shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TopologyKind {
    /// One task, one agent.
    StSa,
    /// Several tasks, one agent, one after the other.
    MtSaSeq,
    /// Several tasks, one agent, tool calls interleaved.
    MtSaInt,
    /// Several tasks over several concurrent sub-agents.
    MtMa,
}

/// `(kind, t, m)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Shape.
    pub kind: TopologyKind,
    /// Number of tasks `t`.
    pub tasks: u32,
    /// Number of executor sub-agents `m`.
    pub agents: u32,
}

/// One task of the prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskPlan {
    /// Index of the task in the prompt.
    pub id: u32,
    /// The user's instruction for this task.
    pub instruction: String,
}

/// The trajectory one agent must follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentPlan {
    /// Agent id (`agent-0`, …).
    pub id: String,
    /// Tasks assigned to it.
    pub tasks: Vec<u32>,
    /// Expected calls `e_1 … e_n` in order.
    pub trajectory: Vec<ExpectedCall>,
}

/// One expected call `e_j`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedCall {
    /// The task it belongs to.
    pub task: u32,
    /// Full tool name.
    pub tool: String,
    /// Expected parameters (for exact matching, and the planner's example values).
    pub params: Map<String, Value>,
    /// When present, parameters are matched by these constraints instead of exactly;
    /// every expected parameter has one and no other parameter is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraints: Option<BTreeMap<String, ParamConstraint>>,
    /// `H(e_j)`: the action hash for exact calls, `H("knox/expected", …)` otherwise.
    pub hash: Digest,
}

impl ExpectedCall {
    /// Builds an exact expected call (matched by `H(α) = H(e_j)`).
    pub fn exact(task: u32, tool: impl Into<String>, params: Map<String, Value>) -> Self {
        let tool = tool.into();
        let hash = hash_call(&tool, &params);
        Self {
            task,
            tool,
            params,
            constraints: None,
            hash,
        }
    }

    /// Builds an expected call matched by declared parameter constraints.
    pub fn constrained(
        task: u32,
        tool: impl Into<String>,
        params: Map<String, Value>,
        constraints: BTreeMap<String, ParamConstraint>,
    ) -> Self {
        let tool = tool.into();
        let mut call = Self {
            task,
            tool,
            params,
            constraints: Some(constraints),
            hash: Digest::default(),
        };
        call.hash = call.compute_hash();
        call
    }

    /// The expected call for `params` where `bound(name, value)` gives the constraints
    /// of the parameters not fixed: exact when it bounds none, otherwise constrained,
    /// every parameter it does not bound held to its value.
    pub fn bounded(
        task: u32,
        tool: impl Into<String>,
        params: Map<String, Value>,
        bound: impl Fn(&str, &Value) -> Option<ParamConstraint>,
    ) -> Self {
        let mut any = false;
        let constraints: BTreeMap<String, ParamConstraint> = params
            .iter()
            .map(|(k, v)| {
                let c = bound(k, v).inspect(|_| any = true);
                let c = c.unwrap_or_else(|| ParamConstraint::Exact { value: v.clone() });
                (k.clone(), c)
            })
            .collect();
        if any {
            Self::constrained(task, tool, params, constraints)
        } else {
            Self::exact(task, tool, params)
        }
    }

    /// Recomputes `H(e_j)` from the call's content.
    pub fn compute_hash(&self) -> Digest {
        match &self.constraints {
            None => hash_call(&self.tool, &self.params),
            Some(c) => {
                let body =
                    serde_json::json!({"tool": self.tool, "params": self.params, "constraints": c});
                Digest::tagged(tag::EXPECTED, &[&canon::canonical(&body)])
            }
        }
    }
}

/// A declared constraint on one parameter of an expected call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ParamConstraint {
    /// Equal to this value (canonically).
    Exact {
        /// The value.
        value: Value,
    },
    /// Equal to one of these values.
    OneOf {
        /// The accepted values.
        values: Vec<Value>,
    },
    /// A string fully matching this regular expression (RE2 syntax, linear time).
    Pattern {
        /// The expression; it is anchored at both ends when checked.
        regex: String,
    },
    /// A string whose length in characters lies within the bounds (free text).
    Length {
        /// Minimum length.
        min: u32,
        /// Maximum length.
        max: u32,
    },
    /// A value taken from the output of an earlier expected call `e_k` of the same
    /// agent: equal to the value at `pointer` (RFC 6901) when given, otherwise equal
    /// to some scalar found in that output.
    FromOutput {
        /// Trajectory position `k` (0-based) of the call whose output it comes from.
        call: u32,
        /// JSON pointer into that output.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pointer: Option<String>,
    },
    /// Any value at all (a parameter the manifest lets vary freely).
    Any,
    /// A number within the inclusive bounds (either may be absent).
    Range {
        /// Smallest accepted value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<f64>,
        /// Largest accepted value.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<f64>,
    },
    /// A string equal to one of `values` after folding: letter case (Unicode lower
    /// case) when `ignore_case`, runs of white space to one space and the ends trimmed
    /// when `ignore_whitespace`.
    Text {
        /// The accepted strings.
        values: Vec<String>,
        /// Compare case-insensitively.
        #[serde(default)]
        ignore_case: bool,
        /// Compare with white space collapsed and trimmed.
        #[serde(default)]
        ignore_whitespace: bool,
    },
    /// An array holding exactly the elements of `values` as a set: order and repeats do
    /// not matter, every element must be one of them and each of them must appear.
    Set {
        /// The elements.
        values: Vec<Value>,
    },
    /// Free text (a string whose length in characters lies within the bounds) that may
    /// carry what the listed earlier calls of the same agent returned: the plan's
    /// declaration that this parameter is cleared for those outputs (a summary of an
    /// email the plan read), under an APM deciding flows by provenance
    /// ([`Closed::provenance`]).
    Carries {
        /// Trajectory positions (0-based) of the earlier calls whose outputs it may carry.
        calls: Vec<u32>,
        /// Minimum length.
        min: u32,
        /// Maximum length.
        max: u32,
    },
    /// An optional parameter: omitted, or equal (canonically) to the manifest's
    /// `default` (which means the same), or satisfying `inner`.
    Omittable {
        /// The value the tool uses when the parameter is omitted.
        default: Value,
        /// The constraint on a value that is given.
        inner: Box<ParamConstraint>,
    },
    /// A value valid against a JSON-Schema fragment (the keywords Knox's matcher knows:
    /// `type`, `enum`, `const`, `minimum`, `maximum`, `exclusiveMinimum`,
    /// `exclusiveMaximum`, `multipleOf`, `minLength`, `maxLength`, `pattern`, `items`,
    /// `minItems`, `maxItems`, `uniqueItems`, `properties`, `required`,
    /// `additionalProperties`, `anyOf`, `allOf`, `oneOf`, `not`; any other keyword
    /// makes the fragment match nothing).
    Schema {
        /// The fragment.
        schema: Value,
    },
    /// A typed value the executor extracts from the output of earlier call `call`
    /// (issue 36, item 4): where the plan needs a value out of data the user did not
    /// write (an address from an email, a date from a calendar entry), the value must
    /// be of the declared type — an e-mail address or a date that occurs in that
    /// output, an integer in a range, one of a list — so what it can carry is bounded by
    /// its type (`log2` of the values it could take), not free text. It carries that
    /// output (its labels), and the declaration clears it for that output.
    Extract {
        /// Trajectory position `k` (0-based) of the call whose output it comes from.
        call: u32,
        /// The type.
        of: Typed,
    },
}

/// The types of an [`ParamConstraint::Extract`] value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Typed {
    /// An e-mail address (`local@domain`, ASCII, at most 254 bytes) that occurs as a
    /// token of the output's text.
    Email,
    /// A calendar date written `YYYY-MM-DD` that occurs in the output's text.
    Date,
    /// An integer within the inclusive bounds.
    Integer {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// One of these strings, exactly.
    OneOf {
        /// The accepted strings (1 to 256).
        values: Vec<String>,
    },
}

impl Typed {
    /// Its name (`email`, `date`, `integer`, `one_of`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Date => "date",
            Self::Integer { .. } => "integer",
            Self::OneOf { .. } => "one_of",
        }
    }
}

impl ParamConstraint {
    /// The earlier calls of the same agent this constraint takes values from or clears
    /// the parameter for (`from_output`, `extract`, `carries`; inside `omittable`).
    pub fn linked_calls(&self) -> &[u32] {
        match self {
            Self::FromOutput { call, .. } | Self::Extract { call, .. } => {
                std::slice::from_ref(call)
            }
            Self::Carries { calls, .. } => calls,
            Self::Omittable { inner, .. } => inner.linked_calls(),
            _ => &[],
        }
    }

    /// [`Self::linked_calls`], to renumber.
    pub fn linked_calls_mut(&mut self) -> &mut [u32] {
        match self {
            Self::FromOutput { call, .. } | Self::Extract { call, .. } => {
                std::slice::from_mut(call)
            }
            Self::Carries { calls, .. } => calls,
            Self::Omittable { inner, .. } => inner.linked_calls_mut(),
            _ => &mut [],
        }
    }

    /// The constraint's kind name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Exact { .. } => "exact",
            Self::OneOf { .. } => "one_of",
            Self::Pattern { .. } => "pattern",
            Self::Length { .. } => "length",
            Self::Carries { .. } => "carries",
            Self::FromOutput { .. } => "from_output",
            Self::Any => "any",
            Self::Range { .. } => "range",
            Self::Text { .. } => "text",
            Self::Set { .. } => "set",
            Self::Omittable { .. } => "omittable",
            Self::Schema { .. } => "schema",
            Self::Extract { .. } => "extract",
        }
    }
}

/// `Γ`: what each guard permits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Guards {
    /// `Γ_int`.
    pub stop: StopPolicy,
    /// `Γ_sys`: the authorization.
    pub syscall: Authorization,
    /// `Γ_reg`.
    pub regulation: RegulationSpec,
    /// `Γ_traj`'s mode; absent in the APM (every APM before the field existed): exact.
    #[serde(default, skip_serializing_if = "TrajectoryMode::is_exact")]
    pub trajectory: TrajectoryMode,
    /// The channels adaptive attackers use that the guards close; absent (all off) in
    /// APMs written before, whose evidence replays under the rules it was made under.
    #[serde(default, skip_serializing_if = "Closed::is_open")]
    pub closed: Closed,
    /// The models outside the TEE that Knox sends the run's data to: their operators
    /// are recipients ([`Closed::models`]). Absent when there are none (and in every
    /// APM written before the field existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remote: Vec<RemoteModel>,
}

/// A model behind an endpoint outside the TEE (`openai:URL#MODEL`): whatever Knox
/// sends it — an executor hears every tool output of its agent — is disclosed to the
/// endpoint's operator, the party the regulation context lists for `endpoint`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteModel {
    /// What the model is to the run (`executor`, `judge`, `planner`).
    pub role: crate::bundle::ModelRole,
    /// The model as the bundle's `models` list names it.
    pub model: String,
    /// The endpoint's base URL: the address its operator is resolved by.
    pub endpoint: String,
}

impl RemoteModel {
    /// The remote model `info` names, if its name is `openai:URL#MODEL`.
    pub fn of(info: &crate::bundle::ModelInfo) -> Option<Self> {
        let rest = info.name.strip_prefix("openai:")?;
        let (url, _) = rest.split_once('#')?;
        (!url.is_empty()).then(|| Self {
            role: info.role.clone(),
            model: info.name.clone(),
            endpoint: url.to_owned(),
        })
    }
}

/// How the trajectory guard follows a plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum TrajectoryMode {
    /// The paper's strict sequence: call `j` must be `e_j`, one after the other.
    #[default]
    Exact,
    /// The plan as an automaton: steps in a partial order (data links; a
    /// write/disclose/execute step after every earlier step and before every later
    /// one), read steps repeatable up to `read_repeats` extra times and reorderable
    /// among independent reads, every other step allowed its planned number of times;
    /// an off-plan call is blocked without moving the automaton.
    Tolerant {
        /// Extra times each read step may run beyond its planned once.
        read_repeats: u32,
        /// Most bits the run's free choices may carry (issue 36, item 3): each allowed
        /// call that had several enabled steps to match ([`crate::payload::CheckDetail::Trajectory`]'s
        /// `options`) spends `log2(options)` of it — which read runs next, whether a
        /// read repeats, whether the plan moves on — and once another such choice would
        /// exceed it, only the plan's own next step is enabled (the exact mode's
        /// order), which carries nothing. Counted per agent. `None`: unbounded (APMs
        /// from before the bound; written only when set, so their bytes stay).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity_bits: Option<u32>,
        /// Strict after labelled data (issue 36, item 3): once the agent's model has
        /// read (or, with the run's outputs shared, the run read or its model heard) an
        /// output whose tool declares information types other than `public`, its
        /// capacity is 0 — only the plan's own next step is enabled, as in the exact
        /// mode — so what was read can steer no choice of step. Before that the run
        /// keeps the tolerant mode's freedoms (repeats, reorders, case and defaults).
        /// Written only when set.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        strict: bool,
    },
    /// No plan: nobody gave the session a prompt (an MCP gateway session bounded by a
    /// signed capability contract alone). Every trajectory is empty and the trajectory
    /// check passes any call, recording that no plan exists; the contract's decision
    /// bounds the run. Valid only in an APM that names a contract
    /// ([`ApmInputs::contract`]): without one the trajectory check fails every call.
    Unplanned,
}

impl TrajectoryMode {
    /// Extra runs of a read step in tolerant mode when a user does not say.
    pub const DEFAULT_READ_REPEATS: u32 = 3;

    /// Whether this is [`TrajectoryMode::Exact`].
    pub fn is_exact(&self) -> bool {
        matches!(self, Self::Exact)
    }

    /// The capacity of a tolerant run's free choices when a user does not say, in bits
    /// per agent. Measured on the benign-variation suite (`knox eval --guard trajectory
    /// --executor benign`): at 16 bits, 15 of 2,243 benign variants were refused (reads
    /// repeated late in six-task runs, whose plan-order choices had spent it); at 32,
    /// none.
    pub const DEFAULT_CAPACITY_BITS: u32 = 32;

    /// Tolerant mode with [`Self::DEFAULT_READ_REPEATS`] and
    /// [`Self::DEFAULT_CAPACITY_BITS`].
    pub const fn tolerant() -> Self {
        Self::tolerant_with(Self::DEFAULT_READ_REPEATS)
    }

    /// Tolerant mode with `read_repeats` and [`Self::DEFAULT_CAPACITY_BITS`].
    pub const fn tolerant_with(read_repeats: u32) -> Self {
        Self::Tolerant {
            read_repeats,
            capacity_bits: Some(Self::DEFAULT_CAPACITY_BITS),
            strict: false,
        }
    }

    /// The tolerant mode, strict after labelled data (`strict`).
    pub const fn strict() -> Self {
        Self::Tolerant {
            read_repeats: Self::DEFAULT_READ_REPEATS,
            capacity_bits: Some(Self::DEFAULT_CAPACITY_BITS),
            strict: true,
        }
    }

    /// Whether this is [`TrajectoryMode::Unplanned`].
    pub fn is_unplanned(&self) -> bool {
        matches!(self, Self::Unplanned)
    }

    /// The name (`exact`, `tolerant`, `strict`, `unplanned`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Tolerant { strict: true, .. } => "strict",
            Self::Tolerant { .. } => "tolerant",
            Self::Unplanned => "unplanned",
        }
    }
}

impl std::str::FromStr for TrajectoryMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "exact" => Ok(Self::Exact),
            "tolerant" => Ok(Self::tolerant()),
            "strict" => Ok(Self::strict()),
            // Not a choice a user makes for a plan: a session without a prompt is
            // unplanned by construction (and only under a contract).
            _ => Err(format!(
                "unknown trajectory mode `{s}`: expected exact, tolerant or strict"
            )),
        }
    }
}

/// Which channels an attacker who knows the policy uses the guards close (issue 15).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Closed {
    /// The budget is checked as spent + the proposed call's cost.
    #[serde(default)]
    pub budget: bool,
    /// Content is a sink: what a disclosing tool's parameters carry is checked for
    /// flows from the run's earlier outputs, normalised; an undeclared flow blocks.
    #[serde(default)]
    pub content: bool,
    /// Labels propagate per run, content is normalised before label matching, and a
    /// `not_applicable` verdict after a labelled read blocks.
    #[serde(default)]
    pub labels: bool,
    /// A recipient (sink) linked to a field of an untrusted output is refused unless
    /// that field is declared trusted.
    #[serde(default)]
    pub recipients: bool,
    /// Remote models are recipients: a call whose output carries labelled data is
    /// decided, under the regulations in force, as a disclosure to the operator of
    /// every remote executor ([`Guards::remote`]) the output goes to. Written only
    /// when set, so APMs from before the rule keep their bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub models: bool,
    /// Values the plan fixes are executed as the plan wrote them: a call matched to a
    /// plan step runs with the step's own form of every parameter whose constraint
    /// fixes its meaning but lets its form vary (letter case and white space of a
    /// folded text, the order of a set, a number's spelling, an optional parameter at
    /// its default), so the form carries nothing (issue 36, item 3). Written only when
    /// set, so APMs from before the rule keep their bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub planned: bool,
    /// Data goes only where it is cleared, decided by provenance (issue 36, items 1
    /// and 2): every parameter of a disclosing call the executor composed carries every
    /// output its agent read (and, with `labels`, the run read or its model heard),
    /// whatever its form; it runs as composed only when the plan clears it for all of
    /// them (a `carries` or `from_output` constraint naming their calls), otherwise as
    /// the plan wrote it, or not at all. Written only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provenance: bool,
}

impl Closed {
    /// Every channel closed: what new APMs carry.
    pub const ALL: Self = Self {
        budget: true,
        content: true,
        labels: true,
        recipients: true,
        models: true,
        planned: true,
        provenance: true,
    };

    /// Whether no channel is closed (an APM written before they were).
    pub fn is_open(&self) -> bool {
        *self == Self::default()
    }
}

/// The stop guard's static predicate over the run state.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopPolicy {
    /// Wall-clock limit for the run, from its start.
    pub timeout_ms: Option<u64>,
    /// Most actions one agent may propose.
    pub max_actions: Option<u32>,
    /// Most cost units one agent may spend (each tool's cost comes from the manifest).
    pub budget: Option<u64>,
    /// Whether an external stop signal (file, Unix signal, channel) is watched.
    pub external: bool,
}

/// Why a stop guard fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopCause {
    /// `timeout_ms` elapsed.
    Timeout,
    /// `max_actions` reached.
    ActionCap,
    /// `budget` would be exceeded.
    Budget,
    /// An external stop signal arrived.
    Signal,
    /// The planner gave no valid plan: the run stops before any agent acts (the APM
    /// records the failure and permits nothing).
    PlanFailed,
}

impl StopCause {
    /// The JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::ActionCap => "action_cap",
            Self::Budget => "budget",
            Self::Signal => "signal",
            Self::PlanFailed => "plan_failed",
        }
    }
}

/// File-system access rights, as Landlock distinguishes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Read files, list directories.
    Read,
    /// Write existing files.
    Write,
    /// Create files and directories.
    Create,
    /// Remove files and directories.
    Remove,
    /// Replace files: rename a new file over an existing one in the same directory
    /// (an atomic overwrite, as editors and servers write files). Landlock's
    /// make-file and remove-file rights, no directories, no moves between
    /// directories; it also lets the holder delete files.
    Replace,
    /// Execute files.
    Execute,
}

/// Access to a path and everything beneath it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathGrant {
    /// Absolute, normalized path.
    pub path: String,
    /// Rights granted.
    pub access: BTreeSet<Access>,
}

/// A network endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

/// Resource limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Processes and threads (cgroup `pids.max`).
    pub max_processes: u32,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub max_file_bytes: u64,
    /// Memory (cgroup memory limit, `RLIMIT_AS`).
    pub max_memory_bytes: u64,
    /// CPU time (`RLIMIT_CPU`).
    pub cpu_seconds: u32,
    /// Open descriptors (`RLIMIT_NOFILE`).
    pub max_open_files: u32,
}

impl Limits {
    /// Whether every limit of `self` is within `other`.
    pub fn within(&self, other: &Self) -> bool {
        self.max_processes <= other.max_processes
            && self.max_file_bytes <= other.max_file_bytes
            && self.max_memory_bytes <= other.max_memory_bytes
            && self.cpu_seconds <= other.cpu_seconds
            && self.max_open_files <= other.max_open_files
    }

    /// The element-wise maximum.
    pub fn max(&self, other: &Self) -> Self {
        Self {
            max_processes: self.max_processes.max(other.max_processes),
            max_file_bytes: self.max_file_bytes.max(other.max_file_bytes),
            max_memory_bytes: self.max_memory_bytes.max(other.max_memory_bytes),
            cpu_seconds: self.cpu_seconds.max(other.cpu_seconds),
            max_open_files: self.max_open_files.max(other.max_open_files),
        }
    }
}

/// `Auth`: the system calls, paths, endpoints and limits a prompt authorizes — the
/// union of the needs of the toolkits its trajectory uses plus the runtime's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    /// Toolkits the trajectory uses.
    pub toolkits: BTreeSet<String>,
    /// System call names.
    pub syscalls: BTreeSet<String>,
    /// Path grants.
    pub paths: Vec<PathGrant>,
    /// Network endpoints.
    pub endpoints: BTreeSet<Endpoint>,
    /// Resource limits.
    pub limits: Limits,
}

/// What a tool needs to run: its toolkit's needs plus the runtime's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolNeeds {
    /// The toolkit.
    pub toolkit: String,
    /// System call names.
    pub syscalls: BTreeSet<String>,
    /// Path grants.
    pub paths: Vec<PathGrant>,
    /// Network endpoints.
    pub endpoints: BTreeSet<Endpoint>,
    /// Resource limits.
    pub limits: Limits,
    /// Cost units per call.
    pub cost: u64,
}

/// The regulation guard's ground truth: which regulations apply and which policy set
/// decides them.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegulationSpec {
    /// Regulations in force (`GDPR`, `HIPAA`).
    pub regulations: Vec<String>,
    /// Hash of the policy set that decides them, when one is configured.
    pub policy_hash: Option<Digest>,
    /// Recipient directory, consents, senders and purposes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::regulation::RegulationContext>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bounded_call_is_exact_unless_a_parameter_is_bounded() {
        let params = json!({"to": "a@b.example", "body": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let none = ExpectedCall::bounded(0, "MailSend", params.clone(), |_, _| None);
        assert_eq!(none, ExpectedCall::exact(0, "MailSend", params.clone()));
        let length = ParamConstraint::Length { min: 0, max: 10 };
        let body = ExpectedCall::bounded(3, "MailSend", params.clone(), |k, _| {
            (k == "body").then(|| length.clone())
        });
        let c = body.constraints.clone().unwrap_or_default();
        assert_eq!(c.len(), 2, "every parameter has a constraint: {c:?}");
        assert_eq!(c.get("body"), Some(&length));
        assert_eq!(
            c.get("to"),
            Some(&ParamConstraint::Exact {
                value: json!("a@b.example")
            })
        );
        assert_eq!((body.task, body.params.clone()), (3, params));
        assert_eq!(body.hash, body.compute_hash());
        assert_ne!(body.hash, none.hash);
    }

    #[test]
    fn exact_expected_hash_equals_action_hash() {
        let params = json!({"a": 1}).as_object().cloned().unwrap_or_default();
        let e = ExpectedCall::exact(0, "T", params.clone());
        let a = crate::Action {
            tool: "T".into(),
            params,
        };
        assert_eq!(e.hash, a.hash());
        assert_eq!(e.compute_hash(), e.hash);
    }

    #[test]
    fn constrained_hash_differs_and_covers_constraints() {
        let params = json!({"a": "x"}).as_object().cloned().unwrap_or_default();
        let mut c = BTreeMap::new();
        c.insert("a".to_string(), ParamConstraint::Length { min: 1, max: 10 });
        let e = ExpectedCall::constrained(0, "T", params.clone(), c.clone());
        assert_ne!(e.hash, ExpectedCall::exact(0, "T", params.clone()).hash);
        c.insert("a".to_string(), ParamConstraint::Length { min: 1, max: 11 });
        assert_ne!(e.hash, ExpectedCall::constrained(0, "T", params, c).hash);
    }

    #[test]
    fn trajectory_mode_is_absent_when_exact_and_parses() {
        let g = Guards {
            stop: StopPolicy::default(),
            syscall: Authorization {
                toolkits: BTreeSet::new(),
                syscalls: BTreeSet::new(),
                paths: vec![],
                endpoints: BTreeSet::new(),
                limits: Limits {
                    max_processes: 1,
                    max_file_bytes: 1,
                    max_memory_bytes: 1,
                    cpu_seconds: 1,
                    max_open_files: 1,
                },
            },
            regulation: RegulationSpec::default(),
            trajectory: TrajectoryMode::Exact,
            closed: Closed::default(),
            remote: vec![],
        };
        let v = serde_json::to_value(&g).unwrap_or_default();
        // An exact APM is written as before the field existed (same bytes, same hash).
        assert!(v.get("trajectory").is_none());
        let back: Guards = serde_json::from_value(v.clone()).unwrap_or(g.clone());
        assert_eq!(back.trajectory, TrajectoryMode::Exact);
        let mut t = g;
        t.trajectory = TrajectoryMode::tolerant();
        let v = serde_json::to_value(&t).unwrap_or_default();
        assert_eq!(
            v.get("trajectory").cloned().unwrap_or_default(),
            json!({"mode": "tolerant", "read_repeats": 3, "capacity_bits": 32})
        );
        assert!(serde_json::from_value::<Guards>(v).is_ok_and(|b| b == t));
        // An APM from before the capacity reads back unbounded, its bytes unchanged.
        let old = json!({"mode": "tolerant", "read_repeats": 3});
        let back: TrajectoryMode = serde_json::from_value(old.clone()).unwrap_or_default();
        assert_eq!(
            back,
            TrajectoryMode::Tolerant {
                read_repeats: 3,
                capacity_bits: None,
                strict: false,
            }
        );
        assert_eq!(serde_json::to_value(back).unwrap_or_default(), old);
        assert_eq!(
            "tolerant".parse::<TrajectoryMode>(),
            Ok(TrajectoryMode::tolerant())
        );
        let strict: TrajectoryMode = "strict".parse().unwrap_or_default();
        assert_eq!(strict, TrajectoryMode::strict());
        assert_eq!(strict.as_str(), "strict");
        assert_eq!(
            serde_json::to_value(strict).unwrap_or_default(),
            json!({"mode": "tolerant", "read_repeats": 3, "capacity_bits": 32, "strict": true})
        );
        assert!("loose".parse::<TrajectoryMode>().is_err());
        let bad = json!({"mode": "tolerant"});
        assert!(serde_json::from_value::<TrajectoryMode>(bad).is_err());
    }
}
