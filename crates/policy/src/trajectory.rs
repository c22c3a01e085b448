//! The trajectory guard `Γ_traj`: is `α` the expected call `e_j`?
//!
//! Exact calls match by hash, `H(α) = H(e_j)`. Calls with declared constraints match
//! when the tool is the same, the parameter names are exactly the constrained ones, and
//! every constraint holds; each parameter's result is recorded.

use std::collections::HashMap;

use knox_types::Action;
use knox_types::apm::{ExpectedCall, ParamConstraint};
use knox_types::canon;
use knox_types::digest::Digest;
use knox_types::payload::ParamCheck;
use regex::Regex;
use serde_json::Value;

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
}

impl Outcome {
    fn fail(mode: &'static str, params: Vec<ParamCheck>, reason: String) -> Self {
        Self {
            matched: false,
            mode,
            params,
            reason: Some(reason),
        }
    }
}

/// Compiled regular expressions, by source, so a verifier replaying many calls
/// compiles each once. An invalid expression is remembered as such and never matches.
#[derive(Debug, Default)]
pub struct RegexCache(HashMap<String, Option<Regex>>);

impl RegexCache {
    fn get(&mut self, src: &str) -> Option<&Regex> {
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
        if *action_hash == e.hash {
            return Outcome {
                matched: true,
                mode: "exact",
                params: vec![],
                reason: None,
            };
        }
        return Outcome::fail(
            "exact",
            vec![],
            "parameters differ from the expected call".into(),
        );
    };
    if let Some(extra) = action.params.keys().find(|k| !constraints.contains_key(*k)) {
        return Outcome::fail(
            "constraints",
            vec![],
            format!("parameter `{extra}` is not expected"),
        );
    }
    let mut params = Vec::with_capacity(constraints.len());
    let mut first_failure = None;
    for (name, c) in constraints {
        let ok = match action.params.get(name) {
            Some(v) => holds(c, v, outputs, regexes),
            None => false,
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
        None => Outcome {
            matched: true,
            mode: "constraints",
            params,
            reason: None,
        },
        Some(reason) => Outcome::fail("constraints", params, reason),
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
        ParamConstraint::Length { min, max } => match v {
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

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

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
}
