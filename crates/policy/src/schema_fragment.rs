//! The JSON-Schema fragments of [`ParamConstraint::Schema`]: a value is valid when it
//! satisfies every keyword of the fragment. Only the keywords listed on the constraint
//! are known; a fragment with any other keyword (or a malformed one) matches nothing,
//! so a constraint the matcher does not understand can only block, never admit.
//! Nesting is bounded ([`MAX_DEPTH`]): a deeper fragment matches nothing.
//!
//! [`ParamConstraint::Schema`]: knox_types::apm::ParamConstraint::Schema

use knox_types::canon;
use serde_json::{Map, Value};

use crate::trajectory::RegexCache;

/// Deepest nesting of sub-schemas evaluated.
pub const MAX_DEPTH: usize = 32;

/// Whether `v` is valid against the fragment `schema`.
pub fn valid(schema: &Value, v: &Value, regexes: &mut RegexCache) -> bool {
    check(schema, v, regexes, 0)
}

fn check(schema: &Value, v: &Value, regexes: &mut RegexCache, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match schema {
        Value::Bool(b) => *b,
        Value::Object(m) => m
            .iter()
            .all(|(k, arg)| keyword(k, arg, m, v, regexes, depth)),
        _ => false,
    }
}

fn keyword(
    k: &str,
    arg: &Value,
    schema: &Map<String, Value>,
    v: &Value,
    regexes: &mut RegexCache,
    depth: usize,
) -> bool {
    let sub = |s: &Value, x: &Value, r: &mut RegexCache| check(s, x, r, depth + 1);
    let num = || arg.as_f64();
    let count = || {
        arg.as_u64()
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    };
    match k {
        // Annotations change nothing.
        "description" | "title" | "default" | "examples" | "$comment" => true,
        "type" => match arg {
            Value::String(t) => has_type(t, v),
            Value::Array(ts) => ts
                .iter()
                .any(|t| t.as_str().is_some_and(|t| has_type(t, v))),
            _ => false,
        },
        "enum" => arg
            .as_array()
            .is_some_and(|xs| xs.iter().any(|x| same(x, v))),
        "const" => same(arg, v),
        "minimum" => num().is_some_and(|m| v.as_f64().is_none_or(|x| x >= m)),
        "maximum" => num().is_some_and(|m| v.as_f64().is_none_or(|x| x <= m)),
        "exclusiveMinimum" => num().is_some_and(|m| v.as_f64().is_none_or(|x| x > m)),
        "exclusiveMaximum" => num().is_some_and(|m| v.as_f64().is_none_or(|x| x < m)),
        "multipleOf" => num().is_some_and(|m| {
            m > 0.0
                && v.as_f64()
                    .is_none_or(|x| (x / m - (x / m).round()).abs() < 1e-9)
        }),
        "minLength" => count().is_some_and(|n| v.as_str().is_none_or(|s| s.chars().count() >= n)),
        "maxLength" => count().is_some_and(|n| v.as_str().is_none_or(|s| s.chars().count() <= n)),
        "pattern" => match (arg, v) {
            // JSON Schema patterns search (they are not anchored).
            (Value::String(p), Value::String(s)) => regexes
                .get(&format!("(?s:.*)(?:{p})(?s:.*)"))
                .is_some_and(|r| r.is_match(s)),
            (Value::String(p), _) => regexes.get(&format!("(?s:.*)(?:{p})(?s:.*)")).is_some(),
            _ => false,
        },
        "items" => match v {
            Value::Array(items) => items.iter().all(|x| sub(arg, x, regexes)),
            _ => arg.is_object() || arg.is_boolean(),
        },
        "minItems" => count().is_some_and(|n| v.as_array().is_none_or(|a| a.len() >= n)),
        "maxItems" => count().is_some_and(|n| v.as_array().is_none_or(|a| a.len() <= n)),
        "uniqueItems" => match (arg, v) {
            (Value::Bool(true), Value::Array(a)) => {
                let set: std::collections::BTreeSet<Vec<u8>> =
                    a.iter().map(canon::canonical).collect();
                set.len() == a.len()
            }
            (Value::Bool(_), _) => true,
            _ => false,
        },
        "properties" => match (arg, v) {
            (Value::Object(props), Value::Object(o)) => props
                .iter()
                .all(|(name, s)| o.get(name).is_none_or(|x| sub(s, x, regexes))),
            (Value::Object(_), _) => true,
            _ => false,
        },
        "required" => match arg {
            Value::Array(names) => names.iter().all(|n| {
                n.as_str()
                    .is_some_and(|n| v.as_object().is_none_or(|o| o.contains_key(n)))
            }),
            _ => false,
        },
        "additionalProperties" => match v {
            Value::Object(o) => {
                let declared = schema.get("properties").and_then(Value::as_object);
                o.iter()
                    .filter(|(name, _)| declared.is_none_or(|d| !d.contains_key(*name)))
                    .all(|(_, x)| sub(arg, x, regexes))
            }
            _ => arg.is_object() || arg.is_boolean(),
        },
        "anyOf" => arg
            .as_array()
            .is_some_and(|xs| !xs.is_empty() && xs.iter().any(|s| sub(s, v, regexes))),
        "allOf" => arg
            .as_array()
            .is_some_and(|xs| xs.iter().all(|s| sub(s, v, regexes))),
        "oneOf" => arg
            .as_array()
            .is_some_and(|xs| xs.iter().filter(|s| sub(s, v, regexes)).count() == 1),
        "not" => (arg.is_object() || arg.is_boolean()) && !sub(arg, v, regexes),
        _ => false,
    }
}

fn has_type(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.fract() == 0.0),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => false,
    }
}

fn same(a: &Value, b: &Value) -> bool {
    a == b || canon::canonical(a) == canon::canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(schema: Value, v: Value) -> bool {
        valid(&schema, &v, &mut RegexCache::default())
    }

    #[test]
    fn known_keywords_decide() {
        let s = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10}, "tag": {"enum": ["a", "b"]}}, "required": ["n"], "additionalProperties": false});
        assert!(ok(s.clone(), json!({"n": 3, "tag": "a"})));
        assert!(!ok(s.clone(), json!({"n": 11})));
        assert!(!ok(s.clone(), json!({"n": 3, "tag": "c"})));
        assert!(!ok(s.clone(), json!({"tag": "a"})));
        assert!(!ok(s, json!({"n": 3, "x": 1})));
        assert!(ok(json!({"type": ["string", "null"]}), json!(null)));
        assert!(!ok(
            json!({"type": "string", "maxLength": 3}),
            json!("abcd")
        ));
        assert!(ok(json!({"pattern": "^re:"}), json!("re: hi")));
        assert!(!ok(json!({"pattern": "^re:"}), json!("fw: re: hi")));
        let list = json!({"type": "array", "items": {"type": "string"}, "maxItems": 2, "uniqueItems": true});
        assert!(ok(list.clone(), json!(["a", "b"])));
        assert!(!ok(list.clone(), json!(["a", "a"])));
        assert!(!ok(list, json!(["a", 1])));
        assert!(ok(
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
            json!("x")
        ));
        assert!(!ok(json!({"not": {"type": "string"}}), json!("x")));
    }

    #[test]
    fn unknown_or_malformed_fragments_match_nothing() {
        assert!(!ok(json!({"$ref": "#/defs/x"}), json!("x")));
        assert!(!ok(json!({"format": "email"}), json!("a@b")));
        assert!(!ok(json!({"minimum": "1"}), json!(2)));
        assert!(!ok(json!({"pattern": "("}), json!("(")));
        assert!(!ok(json!({"anyOf": []}), json!(1)));
        assert!(!ok(json!(3), json!(3)));
        let (mut deep, mut value) = (json!({"type": "array"}), json!([]));
        for _ in 0..40 {
            deep = json!({"items": deep});
            value = json!([value]);
        }
        assert!(!ok(deep, value));
    }
}
