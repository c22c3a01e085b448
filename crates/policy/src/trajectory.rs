//! The trajectory guard `Γ_traj`: is `α` the expected call `e_j`?
//!
//! Exact calls match by hash, `H(α) = H(e_j)`. Calls with declared constraints match
//! when the tool is the same, the parameter names are exactly the constrained ones
//! (an [`ParamConstraint::Omittable`] one may be left out), and every constraint holds;
//! each parameter's result is recorded.
//!
//! In the exact mode (the paper's) the calls follow the plan one after the other. In
//! the tolerant mode a plan compiles into an [`Automaton`] (see its documentation): the
//! steps form a partial order, read steps may repeat and reorder, every other step runs
//! its planned number of times, and an off-plan call moves nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use knox_types::Action;
use knox_types::apm::{AgentPlan, ExpectedCall, ParamConstraint};
use knox_types::canon;
use knox_types::digest::Digest;
use knox_types::payload::ParamCheck;
use regex::Regex;
use serde_json::{Map, Value};

use crate::manifest::{Effect, ToolEntry, ToolkitManifest};

/// Largest compiled regular expression accepted in a constraint.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The guard's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Whether `α` is on trajectory.
    pub matched: bool,
    /// `exact`, `constraints` or `none`.
    pub mode: &'static str,
    /// Per-parameter results in constraint mode.
    pub params: Vec<ParamCheck>,
    /// Why it did not match.
    pub reason: Option<String>,
    /// When the call matched by constraints: its parameters as the plan writes them
    /// ([`as_planned`]), if they differ from the proposal's.
    pub executed: Option<Map<String, Value>>,
    /// In the tolerant mode under a capacity: how many steps were enabled when the
    /// call matched one, when more than one ([`Automaton::select`]).
    pub options: Option<u32>,
}

impl Outcome {
    fn fail(mode: &'static str, params: Vec<ParamCheck>, reason: String) -> Self {
        Self {
            matched: false,
            mode,
            params,
            reason: Some(reason),
            executed: None,
            options: None,
        }
    }
}

/// Compiled regular expressions, by source, so a verifier replaying many calls
/// compiles each once. An invalid expression is remembered as such and never matches.
#[derive(Debug, Default)]
pub struct RegexCache(HashMap<String, Option<Regex>>);

impl RegexCache {
    pub(crate) fn get(&mut self, src: &str) -> Option<&Regex> {
        self.0
            .entry(src.to_string())
            .or_insert_with(|| {
                regex::RegexBuilder::new(&format!("^(?:{src})$"))
                    .size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .ok()
            })
            .as_ref()
    }
}

/// Compares `action` (whose hash is `action_hash`) with `expected`. `outputs(k)` gives
/// the output of this agent's executed trajectory call `k`, for `from_output`.
pub fn check(
    expected: Option<&ExpectedCall>,
    action: &Action,
    action_hash: &Digest,
    outputs: &dyn Fn(u32) -> Option<Value>,
    regexes: &mut RegexCache,
) -> Outcome {
    let Some(e) = expected else {
        return Outcome::fail(
            "none",
            vec![],
            "no further call is expected on this trajectory".into(),
        );
    };
    if e.tool != action.tool {
        let mode = if e.constraints.is_some() {
            "constraints"
        } else {
            "exact"
        };
        return Outcome::fail(
            mode,
            vec![],
            format!("expected tool `{}`, got `{}`", e.tool, action.tool),
        );
    }
    let Some(constraints) = &e.constraints else {
        return exact(e, action_hash);
    };
    by_constraints("constraints", constraints, e, action, outputs, regexes)
}

/// `H(α) = H(e_j)`.
fn exact(e: &ExpectedCall, action_hash: &Digest) -> Outcome {
    if *action_hash == e.hash {
        return Outcome {
            matched: true,
            mode: "exact",
            params: vec![],
            reason: None,
            executed: None,
            options: None,
        };
    }
    Outcome::fail(
        "exact",
        vec![],
        "parameters differ from the expected call".into(),
    )
}

/// Matches `action`'s parameters against `constraints` (recorded under `mode`), the
/// constraints of (or relaxed from) the expected call `e`.
fn by_constraints(
    mode: &'static str,
    constraints: &BTreeMap<String, ParamConstraint>,
    e: &ExpectedCall,
    action: &Action,
    outputs: &dyn Fn(u32) -> Option<Value>,
    regexes: &mut RegexCache,
) -> Outcome {
    if let Some(extra) = action.params.keys().find(|k| !constraints.contains_key(*k)) {
        return Outcome::fail(mode, vec![], format!("parameter `{extra}` is not expected"));
    }
    let mut params = Vec::with_capacity(constraints.len());
    let mut first_failure = None;
    for (name, c) in constraints {
        let ok = match action.params.get(name) {
            Some(v) => holds(c, v, outputs, regexes),
            None => matches!(c, ParamConstraint::Omittable { .. }),
        };
        if !ok && first_failure.is_none() {
            first_failure = Some(match action.params.get(name) {
                Some(_) => format!("parameter `{name}` violates its `{}` constraint", c.kind()),
                None => format!("expected parameter `{name}` is missing"),
            });
        }
        params.push(ParamCheck {
            name: name.clone(),
            constraint: c.kind().to_string(),
            ok,
        });
    }
    match first_failure {
        None => {
            let planned = as_planned(constraints, &e.params, &action.params, outputs);
            Outcome {
                matched: true,
                mode,
                params,
                reason: None,
                executed: (planned != action.params).then_some(planned),
                options: None,
            }
        }
        Some(reason) => Outcome::fail(mode, params, reason),
    }
}

/// The parameters of a call that satisfies `constraints` (its plan step's, whose
/// example values are `planned`), written as the plan writes them: where a constraint
/// fixes a parameter's meaning but lets its form vary, the plan's form replaces the
/// proposal's, so that the form carries nothing the executor chose —
///
/// - `exact`: the plan's value (a number spelt `1.0` or `1e0` is the plan's `1`);
/// - `one_of`, `text`: the listed value the proposal matched (letter case and white
///   space of a folded text are the plan's);
/// - `set`: the plan's elements in the plan's order, each once;
/// - `from_output` with a pointer: the output's own value at the pointer;
/// - `omittable`: the default — given as the plan gives it, left out where the plan
///   leaves it out; a value other than the default, as its inner constraint writes it.
///
/// Values the plan leaves free (`length`, `pattern`, `range`, `any`, `schema`, and
/// `from_output` without a pointer, which is some value of that output) stay as
/// proposed: their capacity is the plan's to bound.
pub fn as_planned(
    constraints: &BTreeMap<String, ParamConstraint>,
    planned: &Map<String, Value>,
    proposed: &Map<String, Value>,
    outputs: &dyn Fn(u32) -> Option<Value>,
) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, v) in proposed {
        let Some(c) = constraints.get(name) else {
            out.insert(name.clone(), v.clone());
            continue;
        };
        if let ParamConstraint::Omittable { default, .. } = c
            && same(v, default)
        {
            if let Some(p) = planned.get(name).filter(|p| same(p, default)) {
                out.insert(name.clone(), p.clone());
            }
            continue;
        }
        out.insert(name.clone(), planned_form(c, v, outputs));
    }
    // A parameter left out that the plan gives at its default is given as planned.
    for (name, c) in constraints {
        if proposed.contains_key(name) {
            continue;
        }
        if let (ParamConstraint::Omittable { default, .. }, Some(p)) = (c, planned.get(name))
            && same(p, default)
        {
            out.insert(name.clone(), p.clone());
        }
    }
    out
}

/// `v` (which satisfies `c`) in the form `c` writes it ([`as_planned`]).
fn planned_form(c: &ParamConstraint, v: &Value, outputs: &dyn Fn(u32) -> Option<Value>) -> Value {
    match c {
        ParamConstraint::Exact { value } => value.clone(),
        ParamConstraint::OneOf { values } => {
            values.iter().find(|x| same(v, x)).unwrap_or(v).clone()
        }
        ParamConstraint::Text {
            values,
            ignore_case,
            ignore_whitespace,
        } => text_match(values, *ignore_case, *ignore_whitespace, v)
            .map_or_else(|| v.clone(), |x| Value::String(x.clone())),
        ParamConstraint::Set { values } => {
            let mut seen = BTreeSet::new();
            Value::Array(
                values
                    .iter()
                    .filter(|x| seen.insert(canon::canonical(x)))
                    .cloned()
                    .collect(),
            )
        }
        ParamConstraint::FromOutput {
            call,
            pointer: Some(p),
        } => outputs(*call)
            .and_then(|o| o.pointer(p).cloned())
            .filter(|x| same(v, x))
            .unwrap_or_else(|| v.clone()),
        ParamConstraint::Omittable { inner, .. } => planned_form(inner, v, outputs),
        ParamConstraint::FromOutput { pointer: None, .. }
        | ParamConstraint::Pattern { .. }
        | ParamConstraint::Length { .. }
        | ParamConstraint::Carries { .. }
        | ParamConstraint::Any
        | ParamConstraint::Range { .. }
        | ParamConstraint::Extract { .. }
        | ParamConstraint::Schema { .. } => v.clone(),
    }
}

fn holds(
    c: &ParamConstraint,
    v: &Value,
    outputs: &dyn Fn(u32) -> Option<Value>,
    regexes: &mut RegexCache,
) -> bool {
    match c {
        ParamConstraint::Exact { value } => same(v, value),
        ParamConstraint::OneOf { values } => values.iter().any(|x| same(v, x)),
        ParamConstraint::Pattern { regex } => match v {
            Value::String(s) => regexes.get(regex).is_some_and(|r| r.is_match(s)),
            _ => false,
        },
        ParamConstraint::Length { min, max } | ParamConstraint::Carries { min, max, .. } => match v
        {
            Value::String(s) => {
                let n = s.chars().count();
                n >= *min as usize && n <= *max as usize
            }
            _ => false,
        },
        ParamConstraint::FromOutput { call, pointer } => {
            let Some(out) = outputs(*call) else {
                return false;
            };
            match pointer {
                Some(p) => out.pointer(p).is_some_and(|x| same(v, x)),
                None => contains(&out, v),
            }
        }
        ParamConstraint::Any => true,
        ParamConstraint::Range { min, max } => v.as_f64().is_some_and(|x| {
            v.is_number() && min.is_none_or(|m| x >= m) && max.is_none_or(|m| x <= m)
        }),
        ParamConstraint::Text {
            values,
            ignore_case,
            ignore_whitespace,
        } => text_match(values, *ignore_case, *ignore_whitespace, v).is_some(),
        ParamConstraint::Set { values } => match v {
            Value::Array(items) => {
                let want: BTreeSet<Vec<u8>> = values.iter().map(canon::canonical).collect();
                let got: BTreeSet<Vec<u8>> = items.iter().map(canon::canonical).collect();
                want == got
            }
            _ => false,
        },
        ParamConstraint::Omittable { default, inner } => {
            same(v, default) || holds(inner, v, outputs, regexes)
        }
        ParamConstraint::Schema { schema } => crate::schema_fragment::valid(schema, v, regexes),
        ParamConstraint::Extract { call, of } => {
            crate::typed::holds(of, v, outputs(*call).as_ref())
        }
    }
}

/// The first of a `text` constraint's `values` that `v` equals after folding.
fn text_match<'a>(values: &'a [String], case: bool, space: bool, v: &Value) -> Option<&'a String> {
    let Value::String(s) = v else {
        return None;
    };
    let got = fold(s, case, space);
    values.iter().find(|x| fold(x, case, space) == got)
}

/// `s` with letter case folded (Unicode lower case) and/or runs of white space made one
/// space, the ends trimmed.
fn fold(s: &str, case: bool, space: bool) -> String {
    let s = if case {
        s.to_lowercase()
    } else {
        s.to_string()
    };
    if space {
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    } else {
        s
    }
}

/// Canonical equality (so `1` and `1.0`, or key order, do not matter).
fn same(a: &Value, b: &Value) -> bool {
    a == b || canon::canonical(a) == canon::canonical(b)
}

/// Whether `needle` equals `hay` or any value nested in it.
fn contains(hay: &Value, needle: &Value) -> bool {
    if same(hay, needle) {
        return true;
    }
    match hay {
        Value::Array(items) => items.iter().any(|x| contains(x, needle)),
        Value::Object(m) => m.values().any(|x| contains(x, needle)),
        _ => false,
    }
}

/// A plan compiled for the tolerant mode: one step per expected call of an agent's
/// trajectory, in a partial order.
///
/// - Step `j` comes after step `k < j` when `j` takes a value from `k`'s output
///   (`from_output`, also inside an omittable constraint), when `j` is not a read (a
///   write, disclose or execute step comes after every earlier step), or when `k` is not
///   a read (every later step comes after it). Effects are the manifest's
///   ([`ToolEntry::effect`]; an unknown tool counts as a write).
/// - A step is *enabled* when every step before it has run at least once — or was
///   attempted: matched by a call a later guard blocked, which moves the plan on without
///   using the step up (evidence format v4) — no step after it has run yet (all runs of
///   a step precede all runs of the steps after it), and it has runs left: `1 +
///   read_repeats` for a read step, one for any other (each planned occurrence of a
///   write is its own step, so it is allowed its planned number of times).
/// - A proposal matches an enabled step of the same tool: by its declared constraints,
///   else — for a read step — by [`Step::relaxed`], else by hash. Steps not yet run are
///   tried first, in plan order, then repeats. An off-plan call matches no step and
///   changes nothing: later planned calls still pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Automaton {
    steps: Vec<Step>,
    /// The plan's tools, by step (named in plain reasons).
    tools: Vec<String>,
    /// Whether reasons name steps 1-based with their tools (evidence format v5)
    /// rather than by 0-based position.
    plain: bool,
}

/// One compiled step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The tool's effect.
    pub effect: Effect,
    /// Steps that must have run before it.
    pub after: Vec<usize>,
    /// Steps that must not have run when it runs.
    pub before: Vec<usize>,
    /// How many times it may run.
    pub runs: u32,
    /// For an exact read step: the equivalent forms of its parameters the manifest
    /// allows — a list as a set, an optional parameter omitted or given at its declared
    /// default, a `prose` string with case and white space folded. `None` for any other
    /// step, which matches as planned.
    pub relaxed: Option<BTreeMap<String, ParamConstraint>>,
}

/// Which step a proposal was matched with (or is attributed to), and the check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The step's trajectory position; the trajectory's length when no step is enabled.
    pub position: u32,
    /// The trajectory check.
    pub outcome: Outcome,
}

/// What a tolerant run's free choices may still carry (issue 36, item 3;
/// [`knox_types::apm::TrajectoryMode::Tolerant`]'s `capacity_bits`).
///
/// A call matched while `n > 1` steps were enabled chose one of `n`: the choice carries
/// at most `log2(n)` bits (which read runs next, whether one repeats, whether the plan
/// moves on). The agent's choices so far are counted as the product of their `n`s —
/// the number of distinct trajectories of that length it could have taken — so the
/// bound is exact integer arithmetic, the same on every machine that replays it:
/// a choice is admitted while the product stays at most `2^bits`. Once it would not,
/// only the plan's own next step ([`Automaton::next`]) is enabled, a choice of one,
/// which carries nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// The declared capacity, in bits.
    pub bits: u32,
    /// The product of the options of the choices admitted so far (1 before any).
    pub used: u128,
    /// Whether `bits` is 0 because the run is strict and labelled data was read
    /// ([`knox_types::apm::TrajectoryMode::Tolerant`]'s `strict`): the refusal says so.
    pub strict: bool,
}

impl Capacity {
    /// Whether a choice among `options` steps still fits.
    pub fn admits(&self, options: u32) -> bool {
        let bound = 1u128.checked_shl(self.bits.min(127)).unwrap_or(u128::MAX);
        self.used.saturating_mul(u128::from(options)) <= bound
    }
}

impl Automaton {
    /// Compiles `plan` with the effects and defaults of `manifest` (a default its
    /// specification states in prose, or its input schema's `default`).
    pub fn compile(plan: &AgentPlan, manifest: &ToolkitManifest, read_repeats: u32) -> Self {
        Self::compile_with(
            plan,
            manifest,
            read_repeats,
            knox_types::bundle::MonitorRules::CURRENT,
        )
    }

    /// [`Automaton::compile`] under the monitor's `rules` of an evidence format: input
    /// schemas' `default`s count only with `schema_defaults` (from v4; before, only
    /// prose stated a default), reasons are worded plainly only with `plain_reasons`.
    pub fn compile_with(
        plan: &AgentPlan,
        manifest: &ToolkitManifest,
        read_repeats: u32,
        rules: knox_types::bundle::MonitorRules,
    ) -> Self {
        let schema_defaults = rules.schema_defaults;
        let n = plan.trajectory.len();
        let entries: Vec<Option<&ToolEntry>> = plan
            .trajectory
            .iter()
            .map(|e| manifest.tool(&e.tool))
            .collect();
        let effects: Vec<Effect> = entries
            .iter()
            .map(|t| t.map_or(Effect::Write, ToolEntry::effect))
            .collect();
        let mut steps: Vec<Step> = plan
            .trajectory
            .iter()
            .zip(entries.iter().zip(&effects))
            .map(|(e, (entry, effect))| {
                let read = *effect == Effect::Read;
                Step {
                    effect: *effect,
                    after: Vec::new(),
                    before: Vec::new(),
                    runs: if read {
                        read_repeats.saturating_add(1)
                    } else {
                        1
                    },
                    relaxed: match (read, entry, &e.constraints) {
                        (true, Some(t), None) => Some(relaxed(e, t, schema_defaults)),
                        _ => None,
                    },
                }
            })
            .collect();
        for (j, e) in plan.trajectory.iter().enumerate() {
            let links = links(e);
            for k in 0..j {
                let ordered = links.contains(&k)
                    || effects.get(j).is_some_and(|x| *x != Effect::Read)
                    || effects.get(k).is_some_and(|x| *x != Effect::Read);
                if ordered {
                    if let Some(s) = steps.get_mut(j) {
                        s.after.push(k);
                    }
                    if let Some(s) = steps.get_mut(k) {
                        s.before.push(j);
                    }
                }
            }
        }
        debug_assert_eq!(steps.len(), n);
        Self {
            steps,
            tools: plan.trajectory.iter().map(|e| e.tool.clone()).collect(),
            plain: rules.plain_reasons,
        }
    }

    /// The steps, in plan order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Whether step `j` may run now, `runs[k]` being how often step `k` has run (been
    /// allowed) and `attempted[k]` whether a call matched it and was blocked by a later
    /// guard (missing entries: not attempted).
    pub fn enabled(&self, j: usize, runs: &[u32], attempted: &[bool]) -> bool {
        let ran = |k: &usize| runs.get(*k).copied().unwrap_or(0);
        let tried = |k: &usize| ran(k) > 0 || attempted.get(*k).copied().unwrap_or(false);
        self.steps.get(j).is_some_and(|s| {
            ran(&j) < s.runs && s.after.iter().all(tried) && s.before.iter().all(|k| ran(k) == 0)
        })
    }

    /// How many steps are enabled in state `runs` and `attempted`.
    pub fn options(&self, runs: &[u32], attempted: &[bool]) -> u32 {
        let n = (0..self.steps.len())
            .filter(|j| self.enabled(*j, runs, attempted))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Matches `action` against the enabled steps of `plan` (the plan this automaton
    /// was compiled from) in state `runs` and `attempted` (see [`Automaton::enabled`]).
    ///
    /// Under a `capacity`, a match among several enabled steps records their number
    /// ([`Outcome::options`]) when the capacity admits the choice; when it does not,
    /// only the plan's next step is enabled ([`Capacity`]).
    #[expect(
        clippy::too_many_arguments,
        reason = "the automaton's state and the call"
    )]
    pub fn select(
        &self,
        plan: &AgentPlan,
        runs: &[u32],
        attempted: &[bool],
        capacity: Option<Capacity>,
        action: &Action,
        action_hash: &Digest,
        outputs: &dyn Fn(u32) -> Option<Value>,
        regexes: &mut RegexCache,
    ) -> Selection {
        let ran = |k: usize| runs.get(k).copied().unwrap_or(0);
        let options = match capacity {
            Some(_) => self.options(runs, attempted),
            None => 1,
        };
        let spent = options > 1 && capacity.is_some_and(|c| !c.admits(options));
        let only = if spent {
            self.next(runs, attempted)
        } else {
            None
        };
        let mut candidates: Vec<usize> = (0..self.steps.len())
            .filter(|j| {
                plan.trajectory
                    .get(*j)
                    .is_some_and(|e| e.tool == action.tool)
                    && self.enabled(*j, runs, attempted)
            })
            .collect();
        // Steps not yet run first (plan order), then repeats.
        candidates.sort_by_key(|j| (ran(*j) > 0, *j));
        let mut first_failure = None;
        // With the capacity spent, a call that matches an enabled step other than the
        // plan's next is refused for that.
        let mut refused_by_capacity = None;
        for j in candidates {
            let (Some(e), Some(step)) = (plan.trajectory.get(j), self.steps.get(j)) else {
                continue;
            };
            let outcome = match (&e.constraints, &step.relaxed) {
                (Some(c), _) => by_constraints("constraints", c, e, action, outputs, regexes),
                (None, Some(r)) => match exact(e, action_hash) {
                    o if o.matched => o,
                    _ => by_constraints("tolerant", r, e, action, outputs, regexes),
                },
                (None, None) => exact(e, action_hash),
            };
            let position = u32::try_from(j).unwrap_or(u32::MAX);
            if outcome.matched && spent && only != Some(j) {
                refused_by_capacity.get_or_insert(j);
                continue;
            }
            if outcome.matched {
                let mut outcome = outcome;
                outcome.options = (options > 1 && !spent).then_some(options);
                return Selection { position, outcome };
            }
            first_failure.get_or_insert(Selection { position, outcome });
        }
        if let (Some(_), Some(c)) = (refused_by_capacity, capacity) {
            return self.capacity_spent(only, c);
        }
        if let Some(s) = first_failure {
            return s;
        }
        self.unmatched(plan, runs, attempted, action)
    }

    /// The refusal of a call that matched an enabled step other than the plan's next
    /// (`only`) once the capacity `c` is spent: only that step may run now.
    fn capacity_spent(&self, only: Option<usize>, c: Capacity) -> Selection {
        let next = only.unwrap_or(self.steps.len());
        let step = match self.tools.get(next) {
            Some(t) => format!("plan step {} (`{t}`)", next + 1),
            None => "no step".into(),
        };
        let reason = if c.strict {
            format!(
                "the run is strict and its model has read labelled data: only {step} \
                 may run now, in the plan's order"
            )
        } else {
            format!(
                "the run's free choices are spent (its capacity is {} bits): only {step} \
                 may run now, in the plan's order",
                c.bits
            )
        };
        Selection {
            position: u32::try_from(next).unwrap_or(u32::MAX),
            outcome: Outcome::fail("tolerant", vec![], reason),
        }
    }

    /// The failure of a call no enabled step of its tool serves, attributed to the
    /// next step to run, saying why its tool's step cannot run now (or that the tool
    /// is not in the plan, or that nothing more is expected).
    fn unmatched(
        &self,
        plan: &AgentPlan,
        runs: &[u32],
        attempted: &[bool],
        action: &Action,
    ) -> Selection {
        let next = self.next(runs, attempted);
        let planned = plan
            .trajectory
            .iter()
            .enumerate()
            .find(|(_, e)| e.tool == action.tool)
            .map(|(j, _)| j);
        let (position, mode, reason) = match (next, planned) {
            (_, Some(k)) if self.plain => (
                next.unwrap_or(self.steps.len()),
                "tolerant",
                format!(
                    "`{}` (plan step {}) cannot run now: {}",
                    action.tool,
                    k + 1,
                    self.why(k, runs, attempted)
                ),
            ),
            (_, Some(k)) => (
                next.unwrap_or(self.steps.len()),
                "tolerant",
                format!(
                    "`{}` (step {k}) is not enabled now: {}",
                    action.tool,
                    self.why(k, runs, attempted)
                ),
            ),
            (Some(j), None) => (
                j,
                "tolerant",
                format!("`{}` is not in the plan", action.tool),
            ),
            (None, None) => (
                self.steps.len(),
                "none",
                "no further call is expected on this trajectory".into(),
            ),
        };
        Selection {
            position: u32::try_from(position).unwrap_or(u32::MAX),
            outcome: Outcome::fail(mode, vec![], reason),
        }
    }

    /// The step a call that matches none is attributed to: the first enabled step not
    /// yet run, else the first enabled step; `None` when no step is enabled.
    pub fn next(&self, runs: &[u32], attempted: &[bool]) -> Option<usize> {
        let ran = |k: usize| runs.get(k).copied().unwrap_or(0);
        (0..self.steps.len())
            .filter(|j| self.enabled(*j, runs, attempted))
            .min_by_key(|j| (ran(*j) > 0, *j))
    }

    /// Why step `j` is not enabled.
    fn why(&self, j: usize, runs: &[u32], attempted: &[bool]) -> String {
        let ran = |k: usize| runs.get(k).copied().unwrap_or(0);
        let Some(s) = self.steps.get(j) else {
            return "no such step".into();
        };
        // Plainly: 1-based, as the plan lists its steps, with the step's tool.
        let step = |k: usize| match (self.plain, self.tools.get(k)) {
            (true, Some(tool)) => format!("plan step {} (`{tool}`)", k + 1),
            _ => format!("step {k}"),
        };
        if let Some(k) = s
            .after
            .iter()
            .find(|k| ran(**k) == 0 && !attempted.get(**k).copied().unwrap_or(false))
        {
            return format!("{} must run before it", step(*k));
        }
        if let Some(k) = s.before.iter().find(|k| ran(**k) > 0) {
            return format!("{}, which comes after it, has run", step(*k));
        }
        format!("it has run its {} allowed time(s)", s.runs)
    }
}

/// The trajectory positions `e` takes values from.
fn links(e: &ExpectedCall) -> BTreeSet<usize> {
    e.constraints
        .iter()
        .flat_map(|c| c.values())
        .flat_map(ParamConstraint::linked_calls)
        .map(|c| *c as usize)
        .collect()
}

/// The equivalent forms of an exact read's parameters the manifest allows (see
/// [`Step::relaxed`]).
fn relaxed(
    e: &ExpectedCall,
    entry: &ToolEntry,
    schema_defaults: bool,
) -> BTreeMap<String, ParamConstraint> {
    let default_of = |name: &str| {
        declared_default(entry, name).or_else(|| {
            schema_defaults
                .then(|| schema_default(entry, name))
                .flatten()
        })
    };
    let mut out = BTreeMap::new();
    for (name, v) in &e.params {
        let inner = match v {
            Value::String(s) if entry.annotations.prose.iter().any(|p| p == name) => {
                ParamConstraint::Text {
                    values: vec![s.clone()],
                    ignore_case: true,
                    ignore_whitespace: true,
                }
            }
            Value::Array(items) => ParamConstraint::Set {
                values: items.clone(),
            },
            _ => ParamConstraint::Exact { value: v.clone() },
        };
        let c = match default_of(name) {
            Some(d) if same(&d, v) => ParamConstraint::Omittable {
                default: d,
                inner: Box::new(inner),
            },
            _ => inner,
        };
        out.insert(name.clone(), c);
    }
    for p in &entry.spec.parameters {
        if e.params.contains_key(&p.name) {
            continue;
        }
        if let Some(d) = default_of(&p.name) {
            out.insert(
                p.name.clone(),
                ParamConstraint::Omittable {
                    default: d.clone(),
                    inner: Box::new(ParamConstraint::Exact { value: d }),
                },
            );
        }
    }
    out
}

/// The `default` of optional parameter `name` in `entry`'s input schema (a
/// `knox-toolkit/1` tool): the property's `default` keyword, when the property is not
/// `required`.
pub fn schema_default(entry: &ToolEntry, name: &str) -> Option<Value> {
    let schema = &entry.input_schema.as_ref()?.schema;
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| r.iter().any(|n| n.as_str() == Some(name)));
    if required {
        return None;
    }
    schema.get("properties")?.get(name)?.get("default").cloned()
}

/// The default of optional parameter `name` of `entry`, when its specification states a
/// literal one: `Default is 10.`, `default is false`, `defaults to 0` for an integer,
/// number or boolean parameter (the InjecAgent manifest's descriptions). A parameter
/// that is required, of another type, or whose default is not a literal has none.
pub fn declared_default(entry: &ToolEntry, name: &str) -> Option<Value> {
    let p = entry.spec.parameters.iter().find(|p| p.name == name)?;
    if p.required != Some(false) {
        return None;
    }
    let d = p.description.to_lowercase();
    let at = ["default is ", "defaults to "]
        .iter()
        .find_map(|k| d.find(k).map(|i| i + k.len()))?;
    let word: String = d
        .get(at..)?
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
        .collect();
    let word = word.trim_end_matches('.');
    match p.ty.as_str() {
        "integer" => word.parse::<i64>().ok().map(Value::from),
        "number" => word
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number),
        "boolean" => word.parse::<bool>().ok().map(Value::Bool),
        _ => None,
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::{Map, json};

    fn action(v: Value) -> Action {
        Action::new("MailSend", v).unwrap()
    }

    fn run(e: &ExpectedCall, a: &Action) -> Outcome {
        let out = json!({"emails": [{"from": "bob@example.com", "id": "e7"}]});
        let outputs = move |k: u32| (k == 0).then(|| out.clone());
        check(Some(e), a, &a.hash(), &outputs, &mut RegexCache::default())
    }

    #[test]
    fn exact_match_by_hash_and_order() {
        let e = ExpectedCall::exact(
            0,
            "MailSend",
            json!({"to": "a@x", "body": "hi"})
                .as_object()
                .cloned()
                .unwrap(),
        );
        assert!(run(&e, &action(json!({"body": "hi", "to": "a@x"}))).matched);
        let r = run(&e, &action(json!({"body": "hi!", "to": "a@x"})));
        assert!(!r.matched && r.reason.unwrap().contains("parameters differ"));
        let other = Action::new("MailRead", json!({"id": "x"})).unwrap();
        let r = check(
            Some(&e),
            &other,
            &other.hash(),
            &|_| None,
            &mut RegexCache::default(),
        );
        assert!(r.reason.unwrap().contains("expected tool `MailSend`"));
        let r = check(
            None,
            &other,
            &other.hash(),
            &|_| None,
            &mut RegexCache::default(),
        );
        assert_eq!(r.mode, "none");
    }

    fn constrained() -> ExpectedCall {
        let mut c = BTreeMap::new();
        c.insert(
            "to".into(),
            ParamConstraint::FromOutput {
                call: 0,
                pointer: Some("/emails/0/from".into()),
            },
        );
        c.insert("body".into(), ParamConstraint::Length { min: 1, max: 200 });
        c.insert(
            "cc".into(),
            ParamConstraint::OneOf {
                values: vec![json!([]), json!(["boss@example.com"])],
            },
        );
        c.insert(
            "subject".into(),
            ParamConstraint::Pattern {
                regex: "Re: .*".into(),
            },
        );
        ExpectedCall::constrained(0, "MailSend", json!({}).as_object().cloned().unwrap(), c)
    }

    #[test]
    fn free_text_passes_constraints_but_injected_values_do_not() {
        let e = constrained();
        let ok = json!({"to": "bob@example.com", "body": "Thanks, see you Monday.", "cc": [], "subject": "Re: lunch"});
        assert!(run(&e, &action(ok.clone())).matched);
        let mut attacker = ok.clone();
        attacker["to"] = json!("amy.watson@gmail.com");
        let r = run(&e, &action(attacker));
        assert!(
            !r.matched && r.reason.as_deref().unwrap().contains("`to`"),
            "{r:?}"
        );
        let mut long = ok.clone();
        long["body"] = json!("x".repeat(201));
        assert!(!run(&e, &action(long)).matched);
        let mut subj = ok.clone();
        subj["subject"] = json!("Fwd: Re: lunch");
        assert!(!run(&e, &action(subj)).matched);
        let mut extra = ok.clone();
        extra["bcc"] = json!("x");
        assert!(
            run(&e, &action(extra))
                .reason
                .unwrap()
                .contains("`bcc` is not expected")
        );
        let mut missing = ok;
        missing.as_object_mut().unwrap().remove("cc");
        assert!(
            run(&e, &action(missing))
                .reason
                .unwrap()
                .contains("`cc` is missing")
        );
    }

    #[test]
    fn invalid_regex_never_matches_and_never_panics() {
        let mut c = BTreeMap::new();
        c.insert(
            "body".into(),
            ParamConstraint::Pattern { regex: "(".into() },
        );
        let e = ExpectedCall::constrained(0, "MailSend", serde_json::Map::new(), c);
        assert!(!run(&e, &action(json!({"body": "("}))).matched);
    }

    fn tolerant_manifest() -> crate::ToolkitManifest {
        let tools = crate::manifest::tests::TOOLS.replace(
            r#"{"name": "limit", "type": "integer", "description": "d"}"#,
            r#"{"name": "limit", "type": "integer", "description": "Most results. Default is 10.", "required": false},
            {"name": "tags", "type": "array", "description": "d", "required": false},
            {"name": "query", "type": "string", "description": "d", "required": false}"#,
        );
        let needs = crate::manifest::tests::NEEDS.replace(
            "[toolkits.Mail.tools.Read]\n",
            "[toolkits.Mail.tools.Read]\neffect = \"read\"\nprose = [\"query\"]\n",
        );
        crate::ToolkitManifest::from_sources(&tools, &needs).unwrap()
    }

    fn call(tool: &str, v: Value) -> ExpectedCall {
        ExpectedCall::exact(0, tool, v.as_object().cloned().unwrap())
    }

    /// read a, read b, send, read c.
    fn plan() -> AgentPlan {
        AgentPlan {
            id: "agent-0".into(),
            tasks: vec![0],
            trajectory: vec![
                call(
                    "MailRead",
                    json!({"id": "a", "tags": ["x", "y"], "query": "Lunch  plans"}),
                ),
                call("MailRead", json!({"id": "b"})),
                call("MailSend", json!({"to": "x@example.com", "body": "hi"})),
                call("MailRead", json!({"id": "c"})),
            ],
        }
    }

    /// Feeds `calls` through the automaton; the allowed/blocked pattern.
    fn feed(a: &Automaton, p: &AgentPlan, calls: &[(&str, Value)]) -> Vec<bool> {
        let mut runs = vec![0; p.trajectory.len()];
        let mut regexes = RegexCache::default();
        calls
            .iter()
            .map(|(tool, v)| {
                let act = Action::new(*tool, v.clone()).unwrap();
                let s = a.select(
                    p,
                    &runs,
                    &[],
                    None,
                    &act,
                    &act.hash(),
                    &|_| None,
                    &mut regexes,
                );
                if s.outcome.matched {
                    runs[s.position as usize] += 1;
                }
                s.outcome.matched
            })
            .collect()
    }

    /// Issue 36, item 3: the free choices a tolerant run makes are counted (the number
    /// of enabled steps each matched call chose among), and once another would pass the
    /// declared capacity only the plan's next step is enabled: a run of reads in the
    /// plan's order always passes, a repeat or a reorder only while the capacity lasts.
    #[test]
    fn the_capacity_bounds_the_choices_then_only_the_plans_order_runs() {
        let m = tolerant_manifest();
        let p = plan();
        let a = Automaton::compile(&p, &m, 2);
        // Each step as the plan writes it.
        let step = |k: usize| {
            let e = &p.trajectory[k];
            Action::new(e.tool.clone(), Value::Object(e.params.clone())).unwrap()
        };
        let read = |id: &str| match id {
            "a" => step(0),
            "b" => step(1),
            "c" => step(3),
            other => Action::new("MailRead", json!({"id": other})).unwrap(),
        };
        let send = step(2);
        // Returns (matched, options, reason) per call, charging the admitted choices.
        let feed = |bits: u32, calls: &[Action]| {
            let mut runs = vec![0; p.trajectory.len()];
            let mut cap = Capacity {
                bits,
                used: 1,
                strict: false,
            };
            let mut regexes = RegexCache::default();
            calls
                .iter()
                .map(|act| {
                    let s = a.select(
                        &p,
                        &runs,
                        &[],
                        Some(cap),
                        act,
                        &act.hash(),
                        &|_| None,
                        &mut regexes,
                    );
                    if s.outcome.matched {
                        runs[s.position as usize] += 1;
                        cap.used *= u128::from(s.outcome.options.unwrap_or(1));
                    }
                    (s.outcome.matched, s.outcome.options, s.outcome.reason)
                })
                .collect::<Vec<_>>()
        };
        // Unbounded enough: a repeat and a reorder, each a choice among the enabled steps.
        let roomy = feed(16, &[read("b"), read("b"), read("a"), send.clone()]);
        assert!(roomy.iter().all(|r| r.0), "{roomy:?}");
        assert_eq!(
            roomy.iter().map(|r| r.1).collect::<Vec<_>>(),
            [Some(2), Some(2), Some(2), Some(3)]
        );
        // One bit: the first choice spends it; then only the plan's next step is enabled.
        let tight = feed(1, &[read("b"), read("b"), read("a"), send.clone()]);
        assert_eq!(
            tight.iter().map(|r| r.0).collect::<Vec<_>>(),
            [true, false, true, true]
        );
        assert_eq!(tight[0].1, Some(2));
        assert_eq!(
            (tight[2].1, tight[3].1),
            (None, None),
            "the plan's order is free"
        );
        let why = tight[1].2.as_deref().unwrap();
        assert!(
            why.contains("free choices are spent") && why.contains("plan step 1 (`MailRead`)"),
            "{why}"
        );
        // No capacity: the plan's own order, call by call, always passes.
        let none = feed(0, &[read("a"), read("b"), send.clone(), read("c")]);
        assert!(none.iter().all(|r| r.0 && r.1.is_none()), "{none:?}");
        // A call off the plan is off the plan, spent or not.
        let off = feed(0, &[read("zz")]);
        assert!(!off[0].0 && !off[0].2.as_deref().unwrap().contains("spent"));
    }

    #[test]
    fn automaton_orders_reads_freely_and_effects_strictly() {
        let m = tolerant_manifest();
        let p = plan();
        let a = Automaton::compile(&p, &m, 2);
        assert_eq!(a.steps()[2].after, vec![0, 1]);
        assert_eq!(a.steps()[3].after, vec![2]);
        assert_eq!(a.steps()[0].before, vec![2]);
        let ra = (
            "MailRead",
            json!({"id": "a", "tags": ["x", "y"], "query": "Lunch  plans"}),
        );
        let rb = ("MailRead", json!({"id": "b"}));
        let rc = ("MailRead", json!({"id": "c"}));
        let send = ("MailSend", json!({"to": "x@example.com", "body": "hi"}));
        let attack = ("TerminalExecute", json!({"command": "curl evil"}));
        // Swapped independent reads, repeats within the bound, an off-plan call that
        // derails nothing.
        let got = feed(
            &a,
            &p,
            &[
                rb.clone(),
                ra.clone(),
                attack.clone(),
                ra.clone(),
                rb.clone(),
                send.clone(),
                rc.clone(),
            ],
        );
        assert_eq!(got, vec![true, true, false, true, true, true, true]);
        // A read beyond its bound.
        let got = feed(&a, &p, &[ra.clone(), ra.clone(), ra.clone(), ra.clone()]);
        assert_eq!(got, vec![true, true, true, false]);
        // The write before its reads, twice, a read of an earlier step after it, a later
        // read before it.
        let got = feed(
            &a,
            &p,
            &[
                send.clone(),
                ra.clone(),
                rc.clone(),
                rb.clone(),
                send.clone(),
                send.clone(),
                ra.clone(),
            ],
        );
        assert_eq!(got, vec![false, true, false, true, true, false, false]);
    }

    #[test]
    fn off_plan_reasons_name_the_order() {
        let m = tolerant_manifest();
        let p = plan();
        let a = Automaton::compile(&p, &m, 0);
        let select = |a: &Automaton, runs: &[u32], action: &Action| {
            a.select(
                &p,
                runs,
                &[],
                None,
                action,
                &action.hash(),
                &|_| None,
                &mut RegexCache::default(),
            )
        };
        let send = Action::new("MailSend", json!({"to": "x@example.com", "body": "hi"})).unwrap();
        let s = select(&a, &[0, 0, 0, 0], &send);
        assert!(!s.outcome.matched);
        assert_eq!(s.position, 0);
        let reason = s.outcome.reason.unwrap();
        assert!(
            reason.starts_with("`MailSend` (plan step ")
                && reason.contains("cannot run now: plan step 1 (`")
                && reason.ends_with("`) must run before it"),
            "{reason}"
        );
        // Under the rules of format v4, the wording its bundles were sealed with.
        let v4 = Automaton::compile_with(&p, &m, 0, knox_types::bundle::MonitorRules::V4);
        let reason = select(&v4, &[0, 0, 0, 0], &send).outcome.reason.unwrap();
        assert!(
            reason.contains("is not enabled now: step 0 must run before it"),
            "{reason}"
        );
        let other = Action::new("TerminalExecute", json!({"command": "ls"})).unwrap();
        let s = select(&a, &[1, 1, 1, 1], &other);
        assert_eq!((s.position, s.outcome.mode), (4, "none"));
        let s = select(&a, &[1, 0, 0, 0], &other);
        assert_eq!(s.position, 1);
        assert!(s.outcome.reason.unwrap().contains("not in the plan"));
    }

    #[test]
    fn read_arguments_vary_only_as_the_manifest_allows() {
        let m = tolerant_manifest();
        let p = plan();
        let a = Automaton::compile(&p, &m, 1);
        let ok = |v: Value| feed(&a, &p, &[("MailRead", v)])[0];
        // The list as a set, the default given explicitly, prose folded.
        assert!(ok(
            json!({"id": "a", "tags": ["y", "x"], "query": "lunch plans", "limit": 10})
        ));
        assert!(ok(
            json!({"id": "a", "tags": ["x", "y", "x"], "query": " LUNCH plans "})
        ));
        // Another value of the optional parameter, an identifier in another case, a
        // list with another element, prose with other words, a parameter left out.
        assert!(!ok(
            json!({"id": "a", "tags": ["x", "y"], "query": "lunch plans", "limit": 11})
        ));
        assert!(!ok(
            json!({"id": "A", "tags": ["x", "y"], "query": "lunch plans"})
        ));
        assert!(!ok(
            json!({"id": "a", "tags": ["x", "z"], "query": "lunch plans"})
        ));
        assert!(!ok(
            json!({"id": "a", "tags": ["x", "y"], "query": "dinner plans"})
        ));
        assert!(!ok(json!({"id": "a", "query": "lunch plans"})));
        // Writes stay exact.
        let send = ("MailSend", json!({"to": "X@example.com", "body": "hi"}));
        let got = feed(
            &a,
            &p,
            &[
                (
                    "MailRead",
                    json!({"id": "a", "tags": ["x", "y"], "query": "Lunch  plans"}),
                ),
                ("MailRead", json!({"id": "b"})),
                send,
            ],
        );
        assert_eq!(got, vec![true, true, false]);
    }

    #[test]
    fn defaults_are_read_only_from_literal_statements() {
        let m = tolerant_manifest();
        let read = m.tool("MailRead").unwrap();
        assert_eq!(declared_default(read, "limit"), Some(json!(10)));
        assert_eq!(declared_default(read, "id"), None);
        assert_eq!(declared_default(read, "query"), None);
    }

    #[test]
    fn new_constraint_kinds() {
        let out = |_: u32| None;
        let mut r = RegexCache::default();
        let mut h = |c: ParamConstraint, v: Value| holds(&c, &v, &out, &mut r);
        assert!(h(ParamConstraint::Any, json!({"x": [1]})));
        let range = ParamConstraint::Range {
            min: Some(1.0),
            max: Some(5.0),
        };
        assert!(h(range.clone(), json!(5)) && h(range.clone(), json!(1.5)));
        assert!(!h(range.clone(), json!(6)) && !h(range, json!("3")));
        let text = ParamConstraint::Text {
            values: vec!["Open Now".into()],
            ignore_case: true,
            ignore_whitespace: false,
        };
        assert!(h(text.clone(), json!("open now")));
        assert!(!h(text, json!("open  now")));
        let set = ParamConstraint::Set {
            values: vec![json!("a"), json!(1)],
        };
        assert!(h(set.clone(), json!([1, "a", 1])));
        assert!(!h(set.clone(), json!(["a"])) && !h(set, json!("a")));
        let opt = ParamConstraint::Omittable {
            default: json!(false),
            inner: Box::new(ParamConstraint::Exact { value: json!(true) }),
        };
        assert!(h(opt.clone(), json!(false)) && h(opt.clone(), json!(true)));
        assert!(!h(opt, json!("yes")));
        let schema = ParamConstraint::Schema {
            schema: json!({"type": "integer", "minimum": 0, "maximum": 10}),
        };
        assert!(h(schema.clone(), json!(3)));
        assert!(!h(schema, json!(30)));
        // An omittable parameter may be missing; another may not.
        let mut c = BTreeMap::new();
        c.insert(
            "limit".to_string(),
            ParamConstraint::Omittable {
                default: json!(10),
                inner: Box::new(ParamConstraint::Exact { value: json!(10) }),
            },
        );
        c.insert(
            "id".to_string(),
            ParamConstraint::Exact { value: json!("a") },
        );
        let e = ExpectedCall::constrained(0, "MailRead", Map::new(), c);
        assert!(run(&e, &Action::new("MailRead", json!({"id": "a"})).unwrap()).matched);
        assert!(!run(&e, &Action::new("MailRead", json!({"limit": 10})).unwrap()).matched);
    }

    /// #34: a read step accepts an optional parameter left out at the default its input
    /// schema states (`"default": 10`), from evidence format v4; compiled under the
    /// rules before (prose defaults only), it does not.
    #[test]
    fn a_schema_default_makes_a_parameter_omittable_from_format_v4() {
        let m = crate::ToolkitManifest::from_toolkit_text(
            r#"format = "knox-toolkit/1"
[runtime]
syscalls = ["read"]
paths = []
limits = { max_processes = 1, max_file_bytes = 1, max_memory_bytes = 1048576, cpu_seconds = 1, max_open_files = 8 }
[[servers]]
name = "docs"
remote = true
needs = { profile = "network-client", endpoints = [{ host = "docs.example", port = 443 }] }
[[servers.tools]]
name = "docs.search"
effect = "read"
inputSchema = { type = "object", properties = { query = { type = "string" }, limit = { type = "integer", default = 10 } }, required = ["query"], additionalProperties = false }
"#,
        )
        .unwrap();
        let p = AgentPlan {
            id: "agent-0".into(),
            tasks: vec![0],
            trajectory: vec![call("docs.search", json!({"query": "q", "limit": 10}))],
        };
        let left_out = Action::new("docs.search", json!({"query": "q"})).unwrap();
        let select = |a: &Automaton| {
            a.select(
                &p,
                &[0],
                &[],
                None,
                &left_out,
                &left_out.hash(),
                &|_| None,
                &mut RegexCache::default(),
            )
            .outcome
            .matched
        };
        assert!(select(&Automaton::compile(&p, &m, 0)));
        assert!(!select(&Automaton::compile_with(
            &p,
            &m,
            0,
            knox_types::bundle::MonitorRules::V3
        )));
        // A required parameter's default does not make it omittable.
        let entry = m.tool("docs.search").unwrap();
        assert_eq!(schema_default(entry, "limit"), Some(json!(10)));
        assert_eq!(schema_default(entry, "query"), None);
    }

    /// #36 item 3: a call matched by constraints that fix a value's meaning but let its
    /// form vary runs in the plan's form — the letter case and spacing of a folded
    /// text, a set's order and repeats, a listed value, a default given or left out as
    /// the plan does — so the form carries no bit the executor chose; free values stay.
    #[test]
    fn a_matched_call_runs_as_the_plan_writes_it() {
        let mut c = BTreeMap::new();
        c.insert(
            "folder".to_string(),
            ParamConstraint::Text {
                values: vec!["Inbox".into(), "Archive".into()],
                ignore_case: true,
                ignore_whitespace: true,
            },
        );
        c.insert(
            "labels".to_string(),
            ParamConstraint::Set {
                values: vec![json!("a"), json!("b")],
            },
        );
        c.insert(
            "kind".to_string(),
            ParamConstraint::OneOf {
                values: vec![json!(1), json!("x")],
            },
        );
        c.insert(
            "limit".to_string(),
            ParamConstraint::Omittable {
                default: json!(10),
                inner: Box::new(ParamConstraint::Range {
                    min: Some(1.0),
                    max: Some(50.0),
                }),
            },
        );
        c.insert(
            "note".to_string(),
            ParamConstraint::Length { min: 0, max: 40 },
        );
        let planned = json!({"folder": "Inbox", "labels": ["a", "b"], "kind": 1,
            "limit": 10, "note": "hi"});
        let e = ExpectedCall::constrained(
            0,
            "MailSend",
            planned.as_object().unwrap().clone(),
            c.clone(),
        );
        let proposed = json!({"folder": "  iNbOx ", "labels": ["b", "a", "b"], "kind": 1,
            "note": "Hi There"});
        let o = run(&e, &action(proposed));
        assert!(o.matched, "{o:?}");
        assert_eq!(
            Value::Object(o.executed.unwrap()),
            json!({"folder": "Inbox", "labels": ["a", "b"], "kind": 1, "limit": 10,
                "note": "Hi There"})
        );
        // A value other than the default runs as given; the default given where the
        // plan leaves it out is left out.
        let e2 = ExpectedCall::constrained(
            0,
            "MailSend",
            json!({"folder": "Inbox", "labels": ["a", "b"], "kind": "x", "note": ""})
                .as_object()
                .unwrap()
                .clone(),
            c,
        );
        let o = run(
            &e2,
            &action(
                json!({"folder": "archive", "labels": ["a", "b"], "kind": "x",
                "limit": 10, "note": ""}),
            ),
        );
        assert_eq!(
            Value::Object(o.executed.unwrap()),
            json!({"folder": "Archive", "labels": ["a", "b"], "kind": "x", "note": ""})
        );
        let o = run(
            &e2,
            &action(
                json!({"folder": "Archive", "labels": ["a", "b"], "kind": "x",
                "limit": 20, "note": ""}),
            ),
        );
        assert_eq!(o.executed, None, "already as planned: nothing to replace");
        // Exact matching by hash runs the proposal, which is the plan's call itself.
        let exact = ExpectedCall::exact(0, "MailSend", Map::new());
        assert_eq!(run(&exact, &action(json!({}))).executed, None);
    }
}
