//! Policy slicing: the necessary condition of every Cedar policy, read off its `when` /
//! `unless` clauses when the set loads, so that a decision hands Cedar only the policies
//! whose condition can hold for the flow — and the same verdict, deciding policies and
//! errors as the whole set.
//!
//! A policy's **guard** is the conjunction of the leading conjuncts of its conditions
//! that this module can evaluate exactly: comparisons of a context fact with string
//! literals (`context.purpose == "marketing"`, `["coroner", "funeral_director"]
//! .contains(context.recipient.role)`), membership in the two set facts
//! (`context.conditions.contains("court_order")`, `containsAny`, `containsAll`), the
//! boolean facts, and `!`, `&&`, `||` of these. Cedar evaluates a policy's condition as
//! one `&&` chain, left to right, short-circuiting; the exact forms cannot err on a
//! context the request builder filled (every fact a policy reads present, with its
//! schema type: [`Read`]). So
//! when the guard is false, a conjunct before any inexact one is false and Cedar
//! evaluates the policy to `false` **without error**: leaving it out changes neither the
//! decision, nor its reasons, nor its errors. A conjunct the module cannot read ends the
//! guard (what follows it might err, and the whole set would report that error); a
//! policy with no readable leading conjunct is always in the slice.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use cedar_policy::{Policy, PolicySet};
use serde_json::Value;

/// The string facts of the context, by their path (`sender.role`).
pub(crate) const STRINGS: [&str; 13] = [
    "tool",
    "subject",
    "subject_role",
    "purpose",
    "collected_for",
    "sender.id",
    "sender.role",
    "sender.organisation",
    "sender.jurisdiction",
    "recipient.id",
    "recipient.role",
    "recipient.organisation",
    "recipient.jurisdiction",
];

/// The boolean facts of the context.
pub(crate) const BOOLS: [&str; 14] = [
    "consent",
    "explicit_consent",
    "authorization",
    "to_subject",
    "sender.listed",
    "sender.in_eea",
    "sender.adequacy",
    "sender.baa",
    "sender.safeguards",
    "recipient.listed",
    "recipient.in_eea",
    "recipient.adequacy",
    "recipient.baa",
    "recipient.safeguards",
];

/// The set facts of the context.
pub(crate) const SETS: [&str; 2] = ["info_types", "conditions"];

/// The facts of one request, as the guards read them — filled from the same values the
/// Cedar context is built from (`Norms::request`).
#[derive(Debug)]
pub(crate) struct Facts<'a> {
    /// Values of [`STRINGS`], in order.
    pub strings: [&'a str; STRINGS.len()],
    /// Values of [`BOOLS`], in order.
    pub bools: [bool; BOOLS.len()],
    /// Values of [`SETS`], in order.
    pub sets: [&'a BTreeSet<String>; SETS.len()],
}

/// How a set fact meets a literal set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Quant {
    Any,
    All,
}

/// A condition on the facts, evaluated exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Guard {
    /// The string fact is one of these.
    OneOf(usize, Vec<String>),
    /// The set fact meets these literals (`containsAny` / `containsAll`).
    Set(usize, Quant, Vec<String>),
    /// The boolean fact is true.
    Bool(usize),
    /// A boolean constant.
    Const(bool),
    Not(Box<Guard>),
    All(Vec<Guard>),
    Any(Vec<Guard>),
}

impl Guard {
    fn holds(&self, f: &Facts<'_>) -> bool {
        match self {
            Self::OneOf(i, lits) => f
                .strings
                .get(*i)
                .is_some_and(|v| lits.iter().any(|l| l == v)),
            Self::Set(i, q, lits) => f.sets.get(*i).is_some_and(|s| match q {
                Quant::Any => lits.iter().any(|l| s.contains(l)),
                Quant::All => lits.iter().all(|l| s.contains(l)),
            }),
            Self::Bool(i) => f.bools.get(*i).copied().unwrap_or(false),
            Self::Const(b) => *b,
            Self::Not(g) => !g.holds(f),
            Self::All(gs) => gs.iter().all(|g| g.holds(f)),
            Self::Any(gs) => gs.iter().any(|g| g.holds(f)),
        }
    }
}

/// The index of a fact's path in `table`, for a `context.a.b` expression.
fn fact(e: &Value, table: &[&str]) -> Option<usize> {
    let path = path(e)?;
    table.iter().position(|p| *p == path)
}

/// `context.a` → `a`, `context.a.b` → `a.b` (an access, not a `has` test).
fn path(e: &Value) -> Option<String> {
    e.get(".")?;
    context_path(e).map(|p| p.join("."))
}

fn string_lit(e: &Value) -> Option<String> {
    e.get("Value")?.as_str().map(str::to_string)
}

/// `["a", "b"]` of string literals.
fn string_set(e: &Value) -> Option<Vec<String>> {
    e.get("Set")?.as_array()?.iter().map(string_lit).collect()
}

fn binary(e: &Value, op: &str) -> Option<(Value, Value)> {
    let b = e.get(op)?;
    Some((b.get("left")?.clone(), b.get("right")?.clone()))
}

/// The exact guard of expression `e` (EST JSON), if every part of it is readable.
fn exact(e: &Value) -> Option<Guard> {
    if let Some(v) = e.get("Value") {
        return v.as_bool().map(Guard::Const);
    }
    if let Some(i) = fact(e, &BOOLS) {
        return Some(Guard::Bool(i));
    }
    if let Some(arg) = e.get("!").and_then(|n| n.get("arg")) {
        return exact(arg).map(|g| Guard::Not(Box::new(g)));
    }
    if let Some((l, r)) = binary(e, "&&") {
        return Some(Guard::All(vec![exact(&l)?, exact(&r)?]));
    }
    if let Some((l, r)) = binary(e, "||") {
        return Some(Guard::Any(vec![exact(&l)?, exact(&r)?]));
    }
    if let Some((l, r)) = binary(e, "==") {
        return equality(&l, &r).or_else(|| equality(&r, &l));
    }
    if let Some((l, r)) = binary(e, "!=") {
        let eq = equality(&l, &r).or_else(|| equality(&r, &l))?;
        return Some(Guard::Not(Box::new(eq)));
    }
    if let Some((l, r)) = binary(e, "contains") {
        if let (Some(lits), Some(i)) = (string_set(&l), fact(&r, &STRINGS)) {
            return Some(Guard::OneOf(i, lits));
        }
        let (i, lit) = (fact(&l, &SETS)?, string_lit(&r)?);
        return Some(Guard::Set(i, Quant::Any, vec![lit]));
    }
    for (op, q) in [("containsAny", Quant::Any), ("containsAll", Quant::All)] {
        if let Some((l, r)) = binary(e, op) {
            return Some(Guard::Set(fact(&l, &SETS)?, q, string_set(&r)?));
        }
    }
    None
}

/// `fact == "literal"` or `bool-fact == true|false`.
fn equality(fact_side: &Value, lit_side: &Value) -> Option<Guard> {
    if let Some(i) = fact(fact_side, &STRINGS) {
        return Some(Guard::OneOf(i, vec![string_lit(lit_side)?]));
    }
    let i = fact(fact_side, &BOOLS)?;
    let b = lit_side.get("Value")?.as_bool()?;
    let g = Guard::Bool(i);
    Some(if b { g } else { Guard::Not(Box::new(g)) })
}

/// The conjuncts of an `&&` chain, left to right.
fn conjuncts(e: &Value, out: &mut Vec<Value>) {
    match binary(e, "&&") {
        Some((l, r)) => {
            conjuncts(&l, out);
            conjuncts(&r, out);
        }
        None => out.push(e.clone()),
    }
}

/// A policy's guard: its leading exactly-readable conjuncts (the head constraints are
/// not read: they cannot err, and leaving them out only weakens the guard); and whether
/// the guard is the whole policy — every conjunct read, and a head every request of
/// the schema meets (any principal and resource, the action `disclose` or any) — so
/// that the guard holds exactly when Cedar finds the policy satisfied.
fn guard_of(policy: &Policy) -> (Guard, bool) {
    let Ok(est) = policy.to_json() else {
        return (Guard::All(vec![]), false);
    };
    let any = |k: &str| est.get(k).and_then(|h| h.get("op")).and_then(Value::as_str) == Some("All");
    let disclose = est.get("action").is_some_and(|a| {
        a.get("op").and_then(Value::as_str) == Some("All")
            || (a.get("op").and_then(Value::as_str) == Some("==")
                && a.pointer("/entity/type").and_then(Value::as_str) == Some("Knox::Action")
                && a.pointer("/entity/id").and_then(Value::as_str) == Some("disclose"))
    });
    let head = any("principal") && any("resource") && disclose;
    let mut chain = Vec::new();
    for clause in est
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(body) = clause.get("body") else {
            break;
        };
        match clause.get("kind").and_then(Value::as_str) {
            Some("when") => conjuncts(body, &mut chain),
            Some("unless") => chain.push(serde_json::json!({"!": {"arg": body}})),
            _ => return (exact_lead(&chain), false),
        }
    }
    let lead = exact_lead(&chain);
    let complete = head && matches!(&lead, Guard::All(g) if g.len() == chain.len());
    (lead, complete)
}

/// The leading conjuncts of `chain` read exactly.
fn exact_lead(chain: &[Value]) -> Guard {
    let mut lead = Vec::new();
    for c in chain {
        match exact(c) {
            Some(g) => lead.push(g),
            None => break,
        }
    }
    Guard::All(lead)
}

/// Which facts the policies of a set read. Building Cedar's context is most of a first
/// decision's cost, so a fact no policy reads is left out of it: a policy cannot tell
/// (its condition never names it). Read from each policy's JSON form (Cedar's EST),
/// conservatively: every `context.a.b` access or `has` test marks its path, and a use
/// of `context` or of a record (`context.sender`) other than through an access marks
/// everything under it. A policy whose JSON form cannot be had marks every fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// Per [`STRINGS`] fact.
    pub strings: [bool; STRINGS.len()],
    /// Per [`BOOLS`] fact.
    pub bools: [bool; BOOLS.len()],
    /// Per [`SETS`] fact.
    pub sets: [bool; SETS.len()],
}

impl Read {
    /// Every fact: the context the schema describes.
    pub(crate) const ALL: Self = Self {
        strings: [true; STRINGS.len()],
        bools: [true; BOOLS.len()],
        sets: [true; SETS.len()],
    };

    /// The facts some policy of `policies` reads.
    pub(crate) fn of<'p>(policies: impl IntoIterator<Item = &'p Policy>) -> Self {
        let mut paths: Vec<Vec<String>> = Vec::new();
        for p in policies {
            match p.to_json() {
                Ok(est) => context_paths(&est, &mut paths),
                Err(_) => return Self::ALL,
            }
        }
        // A path read covers the facts under it; a fact covers the paths under it.
        let read = |fact: &str| {
            paths
                .iter()
                .any(|p| p.iter().zip(fact.split('.')).all(|(a, b)| a == b))
        };
        Self {
            strings: STRINGS.map(read),
            bools: BOOLS.map(read),
            sets: SETS.map(read),
        }
    }
}

/// Every context path `v` reads (see [`Read`]), outermost access first.
fn context_paths(v: &Value, out: &mut Vec<Vec<String>>) {
    if let Some(path) = context_path(v) {
        out.push(path);
        return;
    }
    match v {
        Value::Object(m) => m.values().for_each(|x| context_paths(x, out)),
        Value::Array(a) => a.iter().for_each(|x| context_paths(x, out)),
        _ => {}
    }
}

/// The path of `v` when it is `context` or an access into it (`.` or `has`, whose
/// `attr` may be one name or a sequence): the one reader of context paths, for the
/// guards ([`path`]) and for [`Read`].
fn context_path(v: &Value) -> Option<Vec<String>> {
    let o = v.as_object().filter(|o| o.len() == 1)?;
    if o.get("Var").and_then(Value::as_str) == Some("context") {
        return Some(Vec::new());
    }
    let access = o.get(".").or_else(|| o.get("has"))?.as_object()?;
    let mut path = context_path(access.get("left")?)?;
    match access.get("attr")? {
        Value::String(a) => path.push(a.clone()),
        Value::Array(attrs) => {
            for a in attrs {
                path.push(a.as_str()?.to_string());
            }
        }
        _ => return None,
    }
    Some(path)
}

/// How many distinct slices of one policy set are kept for reuse. Flows that hold the
/// same guards get the same slice; past this many patterns a slice is built for its
/// decision and dropped (a bound, so that hostile flows cannot grow memory).
pub(crate) const KEPT_SLICES: usize = 1024;

/// A policy set with the guard of each policy, and the slices built so far.
#[derive(Debug, Default)]
pub(crate) struct Sliced {
    policies: Vec<(Guard, Policy)>,
    /// Per policy: its guard is the whole policy ([`guard_of`]).
    complete: Vec<bool>,
    /// Slices by the set of policies they hold (one bit per policy, in order).
    kept: Mutex<HashMap<Box<[u64]>, Arc<Slice>>>,
}

/// The policies of a set whose guards hold for some facts; and, when every one of them
/// is complete ([`guard_of`]) — so each is satisfied — Cedar's answer without asking
/// Cedar: a satisfied forbid denies (the forbids are the reasons), else a satisfied
/// permit allows (the permits are the reasons). The property test
/// `equivalence::the_sliced_decision_is_the_whole_sets` proves it against Cedar on the
/// whole set.
#[derive(Debug)]
pub(crate) struct Slice {
    /// The policies.
    pub set: PolicySet,
    /// Cedar's answer, when the guards decide: allowed, and the reasons (policy ids,
    /// sorted).
    pub decided: Option<(bool, Vec<String>)>,
}

impl Sliced {
    /// Reads the guard of every policy of `set`, and whether it is the whole policy.
    pub(crate) fn new(set: &PolicySet) -> Self {
        let (policies, complete) = set
            .policies()
            .map(|p| {
                let (guard, complete) = guard_of(p);
                ((guard, p.clone()), complete)
            })
            .unzip();
        Self {
            policies,
            complete,
            kept: Mutex::default(),
        }
    }

    /// The policies whose guard holds for `facts`: every one that can be satisfied.
    /// A slice is a function of which guards hold, so the slice of a pattern seen
    /// before is the one built then ([`KEPT_SLICES`] patterns at most).
    /// (The set cannot refuse them — they come from a valid set with unique ids — but
    /// Cedar's API says it may, and why, as text.)
    pub(crate) fn slice(&self, facts: &Facts<'_>) -> Result<Arc<Slice>, String> {
        let mut holding = vec![0u64; self.policies.len().div_ceil(64)].into_boxed_slice();
        for (i, (g, _)) in self.policies.iter().enumerate() {
            if g.holds(facts)
                && let Some(word) = holding.get_mut(i / 64)
            {
                *word |= 1 << (i % 64);
            }
        }
        let seen = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&holding)
            .cloned();
        if let Some(set) = seen {
            return Ok(set);
        }
        // Built outside the lock: other decisions are not held up meanwhile.
        let held: Vec<usize> = (0..self.policies.len())
            .filter(|i| {
                holding
                    .get(i / 64)
                    .is_some_and(|w| w & (1 << (i % 64)) != 0)
            })
            .collect();
        let policies = || {
            held.iter()
                .filter_map(|i| self.policies.get(*i).map(|(_, p)| p))
        };
        let decided = (!held.is_empty()
            && held
                .iter()
                .all(|i| self.complete.get(*i).copied().unwrap_or(false)))
        .then(|| {
            let ids = |effect: cedar_policy::Effect| {
                let mut v: Vec<String> = policies()
                    .filter(|p| p.effect() == effect)
                    .map(|p| p.id().to_string())
                    .collect();
                v.sort();
                v
            };
            let forbids = ids(cedar_policy::Effect::Forbid);
            if forbids.is_empty() {
                (true, ids(cedar_policy::Effect::Permit))
            } else {
                (false, forbids)
            }
        });
        let set = Arc::new(Slice {
            set: PolicySet::from_policies(policies().cloned()).map_err(|e| e.to_string())?,
            decided,
        });
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < KEPT_SLICES {
            kept.entry(holding).or_insert_with(|| Arc::clone(&set));
        }
        Ok(set)
    }

    /// How many policies have a guard that reads at least one conjunct.
    #[cfg(test)]
    pub(crate) fn guarded(&self) -> usize {
        self.policies
            .iter()
            .filter(|(g, _)| *g != Guard::All(vec![]))
            .count()
    }

    /// How many policies the guards read whole ([`guard_of`]).
    #[cfg(test)]
    pub(crate) fn complete(&self) -> usize {
        self.complete.iter().filter(|c| **c).count()
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn guard(src: &str) -> Guard {
        let set = PolicySet::from_str(src).unwrap();
        guard_of(set.policies().next().unwrap()).0
    }

    fn facts<'a>(sets: [&'a BTreeSet<String>; 2]) -> Facts<'a> {
        let mut strings = [""; STRINGS.len()];
        strings[3] = "marketing";
        strings[10] = "coroner";
        let mut bools = [false; BOOLS.len()];
        bools[2] = true;
        Facts {
            strings,
            bools,
            sets,
        }
    }

    /// The facts `r` marks read, by path.
    fn read_paths(r: &Read) -> BTreeSet<&'static str> {
        STRINGS
            .iter()
            .zip(r.strings)
            .chain(BOOLS.iter().zip(r.bools))
            .chain(SETS.iter().zip(r.sets))
            .filter(|(_, r)| *r)
            .map(|(f, _)| *f)
            .collect()
    }

    #[test]
    fn a_context_holds_the_facts_some_policy_reads() {
        let set = PolicySet::from_str(
            r#"permit(principal, action, resource) when { context.purpose == "x" && context.recipient.role == "y" };
               forbid(principal, action, resource) when { context has consent && context.recipient has baa };
               permit(principal, action, resource) when { context.sender == context.recipient };"#,
        )
        .unwrap();
        // A party compared whole is read whole.
        let mut want: BTreeSet<&str> = STRINGS
            .iter()
            .chain(&BOOLS)
            .copied()
            .filter(|f| f.starts_with("sender.") || f.starts_with("recipient."))
            .collect();
        want.extend(["purpose", "consent"]);
        assert_eq!(read_paths(&Read::of(set.policies())), want);
        // Otherwise only the fields accessed or tested (`has`, one name or a path).
        let set = PolicySet::from_str(
            r#"permit(principal, action, resource) when { context.recipient.role == "y" && context has sender.baa };"#,
        )
        .unwrap();
        assert_eq!(
            read_paths(&Read::of(set.policies())),
            BTreeSet::from(["recipient.role", "sender.baa"])
        );
        // `context` used whole reads every fact.
        let set =
            PolicySet::from_str(r#"permit(principal, action, resource) when { context == {} };"#)
                .unwrap();
        assert_eq!(Read::of(set.policies()), Read::ALL);
        // The embedded set names no tool and no party's identifier: a decision's
        // context leaves them out, and keeps what its policies read.
        let n = crate::Norms::embedded().unwrap();
        let read = read_paths(n.read_facts());
        for f in ["tool", "sender.id", "recipient.id"] {
            assert!(!read.contains(f), "{f}: {read:?}");
        }
        for f in [
            "purpose",
            "recipient.role",
            "consent",
            "info_types",
            "conditions",
        ] {
            assert!(read.contains(f), "{f}: {read:?}");
        }
    }

    #[test]
    fn guards_read_the_leading_exact_conjuncts() {
        let c: BTreeSet<String> = ["court_order".to_string()].into();
        let none = BTreeSet::new();
        let f = facts([&none, &c]);
        let g = guard(
            r#"permit (principal, action, resource) when {
                 context.purpose == "marketing" && ["coroner", "x"].contains(context.recipient.role) &&
                 context.conditions.containsAny(["court_order"]) && context.authorization };"#,
        );
        assert!(g.holds(&f));
        let g = guard(
            r#"permit (principal, action, resource) when { context.purpose == "treatment" };"#,
        );
        assert!(!g.holds(&f));
        let g = guard(
            r#"permit (principal, action, resource) when { context.purpose != "treatment" }
               unless { context.conditions.contains("court_order") };"#,
        );
        assert!(!g.holds(&f), "unless is read as a negated conjunct");
        // After an unreadable conjunct nothing is read: it could err first.
        let g = guard(
            r#"permit (principal, action, resource) when {
                 context.tool like "x*" && context.purpose == "treatment" };"#,
        );
        assert_eq!(g, Guard::All(vec![]));
        assert!(g.holds(&f));
    }

    /// Property: for random flows over the whole vocabulary (every term and synonym of
    /// every kind, unknown terms, every jurisdiction class, every boolean fact), the
    /// sliced decision is the whole set's — verdict, deciding policies, provisions and
    /// warnings, under each regulation. The flows start from the policy examples (so
    /// that every policy is often near its condition) and mutate any fact.
    mod equivalence {
        use proptest::prelude::*;
        use proptest::sample::{Index, select};
        use serde::Deserialize;

        use crate::norms::{EMBEDDED, Norms};
        use crate::phi::Phi;
        use crate::vocab::TermKind;

        #[derive(Deserialize)]
        struct Manifest {
            example: Vec<Example>,
        }

        #[derive(Deserialize)]
        struct Example {
            flow: Phi,
        }

        fn examples() -> Vec<Phi> {
            EMBEDDED
                .iter()
                .filter(|(n, _)| n.ends_with(".toml") && *n != "vocabulary.toml")
                .flat_map(|(_, t)| toml::from_str::<Manifest>(t).unwrap().example)
                .map(|e| e.flow)
                .collect()
        }

        /// Every key of `kind` (terms and synonyms) and a few words no vocabulary has.
        fn words(norms: &Norms, kind: TermKind) -> Vec<String> {
            let mut w: Vec<String> = norms
                .vocabulary()
                .keys(kind)
                .map(|(k, _)| k.to_string())
                .collect();
            w.sort();
            w.extend(["astrologer", "Mystery Purpose", "x"].map(String::from));
            w
        }

        /// One fact of a flow changed; `None` keeps the example's.
        #[derive(Clone, Debug)]
        enum Change {
            SenderRole(Index),
            RecipientRole(Index),
            SubjectRole(Index),
            Purpose(Index),
            CollectedFor(Index),
            InfoTypes(Vec<Index>),
            AddCondition(Index),
            DropConditions,
            SenderJurisdiction(Index),
            RecipientJurisdiction(Index),
            Flags(u8),
            Subject(Index),
        }

        fn change() -> impl Strategy<Value = Change> {
            let i = any::<Index>;
            prop_oneof![
                i().prop_map(Change::SenderRole),
                i().prop_map(Change::RecipientRole),
                i().prop_map(Change::SubjectRole),
                i().prop_map(Change::Purpose),
                i().prop_map(Change::CollectedFor),
                prop::collection::vec(i(), 0..4).prop_map(Change::InfoTypes),
                i().prop_map(Change::AddCondition),
                Just(Change::DropConditions),
                i().prop_map(Change::SenderJurisdiction),
                i().prop_map(Change::RecipientJurisdiction),
                any::<u8>().prop_map(Change::Flags),
                i().prop_map(Change::Subject),
            ]
        }

        struct World {
            norms: Norms,
            examples: Vec<Phi>,
            roles: Vec<String>,
            purposes: Vec<String>,
            types: Vec<String>,
            conditions: Vec<String>,
        }

        const COUNTRIES: [&str; 7] = ["us", "de", "fr", "no", "jp", "cn", "unknown"];
        const SUBJECTS: [&str; 4] = ["user", "third_party", "mixed", "unknown"];

        impl World {
            fn new() -> Self {
                let norms = Norms::embedded().unwrap();
                Self {
                    examples: examples(),
                    roles: words(&norms, TermKind::Role),
                    purposes: words(&norms, TermKind::Purpose),
                    types: words(&norms, TermKind::InfoType),
                    conditions: words(&norms, TermKind::Condition),
                    norms,
                }
            }

            fn apply(&self, p: &mut Phi, c: &Change) {
                let pick = |v: &[String], i: &Index| i.get(v).clone();
                match c {
                    Change::SenderRole(i) => p.sender.role = pick(&self.roles, i),
                    Change::RecipientRole(i) => p.recipient.role = pick(&self.roles, i),
                    Change::SubjectRole(i) => p.subject_role = pick(&self.roles, i),
                    Change::Purpose(i) => p.purpose = pick(&self.purposes, i),
                    Change::CollectedFor(i) => p.collected_for = pick(&self.purposes, i),
                    Change::InfoTypes(is) => {
                        p.info_types = is.iter().map(|i| pick(&self.types, i)).collect();
                    }
                    Change::AddCondition(i) => p.conditions.push(pick(&self.conditions, i)),
                    Change::DropConditions => p.conditions.clear(),
                    Change::SenderJurisdiction(i) => {
                        p.sender.jurisdiction = (*i.get(&COUNTRIES)).to_string();
                    }
                    Change::RecipientJurisdiction(i) => {
                        p.recipient.jurisdiction = (*i.get(&COUNTRIES)).to_string();
                    }
                    Change::Flags(b) => {
                        let bit = |n: u8| b & (1 << n) != 0;
                        p.consent = bit(0);
                        p.explicit_consent = bit(1);
                        p.authorization = bit(2);
                        p.to_subject = bit(3);
                        p.sender.baa = bit(4);
                        p.recipient.baa = bit(5);
                        p.recipient.safeguards = bit(6);
                        p.recipient.listed = !bit(7);
                    }
                    Change::Subject(i) => p.subject = (*i.get(&SUBJECTS)).to_string(),
                }
            }
        }

        fn world() -> &'static World {
            static W: std::sync::OnceLock<World> = std::sync::OnceLock::new();
            W.get_or_init(World::new)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]
            #[test]
            fn the_sliced_decision_is_the_whole_sets(
                start in any::<Index>(),
                changes in prop::collection::vec(change(), 0..6),
                order in select(vec![vec!["GDPR", "HIPAA"], vec!["HIPAA", "GDPR"]]),
            ) {
                let w = world();
                let mut phi = start.get(&w.examples).clone();
                for c in &changes {
                    w.apply(&mut phi, c);
                }
                let names: Vec<String> = order.iter().map(|s| (*s).to_string()).collect();
                let (flow, extra) = phi.to_flow();
                let sliced = w.norms.decide_sliced(&names, &flow, 0, &extra, true).unwrap();
                let whole = w.norms.decide_sliced(&names, &flow, 0, &extra, false).unwrap();
                prop_assert_eq!(sliced, whole, "{:?}", phi);
            }
        }
    }

    #[test]
    fn every_embedded_policy_is_guarded() {
        let n = crate::norms::Norms::embedded().unwrap();
        let (guarded, all) = n.slicing();
        assert_eq!(
            guarded, all,
            "a policy whose condition the slicer cannot read"
        );
        // Every embedded policy's condition but one is read whole, so a first decision
        // asks Cedar only when that one is in its slice (the property test below proves
        // the guards' answers equal Cedar's on the whole set): GDPR art. 5(1)(b)
        // compares two facts (`purpose != collected_for`), which the guards do not read.
        // A policy written beyond the fragment is still decided — by Cedar.
        assert_eq!(
            n.completeness(),
            all - 1,
            "a policy the guards do not read whole"
        );
    }

    #[test]
    fn a_policy_beyond_the_guards_fragment_is_asked_of_cedar() {
        let set = PolicySet::from_str(
            r#"permit (principal, action, resource) when { context.purpose == "treatment" };
               permit (principal, action, resource) when { context.purpose like "treat*" };
               permit (principal == Knox::Party::"sender", action, resource) when { context.consent };"#,
        )
        .unwrap();
        let s = Sliced::new(&set);
        assert_eq!(
            s.complete(),
            1,
            "a `like` and a principal constraint are not read whole"
        );
        let empty = BTreeSet::new();
        let mut f = facts([&empty, &empty]);
        f.strings[3] = "treatment";
        f.bools[0] = false;
        // the `like` policy is kept (its guard reads nothing), so Cedar answers
        assert!(s.slice(&f).unwrap().decided.is_none());
        let only = PolicySet::from_str(
            r#"permit (principal, action, resource) when { context.purpose == "treatment" };
               forbid (principal, action, resource) when { context.purpose == "treatment" && !context.consent };"#,
        )
        .unwrap();
        let s = Sliced::new(&only);
        let d = s.slice(&f).unwrap();
        assert_eq!(
            d.decided,
            Some((false, vec!["policy1".to_string()])),
            "a forbid wins"
        );
        f.strings[3] = "payment";
        let d = s.slice(&f).unwrap();
        assert!(
            d.set.is_empty() && d.decided.is_none(),
            "nothing holds: Cedar's empty answer"
        );
    }
}
