//! RFC 8785 JSON Canonicalization Scheme (JCS) over `serde_json::Value`.
//!
//! Objects are written with members sorted by the UTF-16 code units of their names,
//! no insignificant whitespace, strings with the minimal JSON escapes, and numbers in
//! the ECMAScript `Number.prototype.toString` form (integers that fit exactly are
//! written as integers). Everything Knox hashes or signs goes through here.

use serde::Serialize;
use serde_json::Value;

/// Errors while producing canonical JSON.
#[derive(Debug, thiserror::Error)]
pub enum CanonError {
    /// The value could not be turned into JSON.
    #[error("cannot serialize value to json: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Canonical bytes of any serializable value.
pub fn to_canonical<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonError> {
    let v = serde_json::to_value(value)?;
    Ok(canonical(&v))
}

/// Rewrites every number of `value` as its canonical form reads back: an integral
/// number within ±2^53 becomes an integer (`2000.0` is `2000`), any other number the
/// IEEE double canonical JSON writes. Canonical JSON does not tell `2000.0` from `2000`,
/// so neither may any decision recomputed from it: values entering the monitor (tool
/// outputs, proposals, the APM) are normalized so that it decides on what the verifier
/// will read.
pub fn normalize_numbers(value: &mut Value) {
    match value {
        Value::Number(n) => {
            let exact = n.as_i64().is_some_and(|i| i.unsigned_abs() <= (1u64 << 53))
                || n.as_u64().is_some_and(|u| u <= (1u64 << 53));
            if !exact {
                let mut text = Vec::new();
                write_number(n, &mut text);
                if let Ok(read) = serde_json::from_slice::<serde_json::Number>(&text) {
                    *n = read;
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// [`normalize_numbers`] over every value of a JSON object.
pub fn normalize_map(map: &mut serde_json::Map<String, Value>) {
    map.values_mut().for_each(normalize_numbers);
}

/// A value as it reads back from its canonical bytes (see [`normalize_numbers`]).
pub fn normalized<T: Serialize + serde::de::DeserializeOwned>(value: &T) -> Result<T, CanonError> {
    Ok(serde_json::from_slice(&to_canonical(value)?)?)
}

/// Deserializes a JSON object with its numbers normalized (see [`normalize_numbers`]).
pub fn deserialize_normalized_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<serde_json::Map<String, Value>, D::Error> {
    let mut map = <serde_json::Map<String, Value> as serde::Deserialize>::deserialize(d)?;
    normalize_map(&mut map);
    Ok(map)
}

/// Canonical bytes of a JSON value.
pub fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(value, &mut out);
    out
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(map, out),
    }
}

/// Appends the canonical form of a JSON object.
pub fn write_object(map: &serde_json::Map<String, Value>, out: &mut Vec<u8>) {
    // Without serde_json's `preserve_order` the map iterates in byte order, which is
    // UTF-16 order for ASCII names: write directly. Otherwise (insertion order, or a
    // name where byte and UTF-16 order differ) sort first.
    let mut prev: Option<&String> = None;
    let direct = map.keys().all(|k| {
        let ok = k.is_ascii() && prev.is_none_or(|p| p < k);
        prev = Some(k);
        ok
    });
    out.push(b'{');
    if direct {
        for (i, (key, value)) in map.iter().enumerate() {
            write_member(i, key, value, out);
        }
    } else {
        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        for (i, (key, value)) in entries.into_iter().enumerate() {
            write_member(i, key, value, out);
        }
    }
    out.push(b'}');
}

fn write_member(i: usize, key: &str, value: &Value, out: &mut Vec<u8>) {
    if i > 0 {
        out.push(b',');
    }
    write_string(key, out);
    out.push(b':');
    write_value(value, out);
}

/// Numbers: integers up to 2^53 exactly, everything else as the IEEE double ECMAScript
/// would print (integers beyond 2^53 lose precision, as they do in every JCS
/// implementation; Knox's own records never carry such integers).
fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) {
    if let Some(i) = n.as_i64()
        && i.unsigned_abs() <= (1u64 << 53)
    {
        out.extend_from_slice(i.to_string().as_bytes());
        return;
    }
    if let Some(u) = n.as_u64()
        && u <= (1u64 << 53)
    {
        out.extend_from_slice(u.to_string().as_bytes());
        return;
    }
    // serde_json (without arbitrary_precision) never holds a non-finite number.
    let f = n.as_f64().unwrap_or(0.0);
    if f == 0.0 || !f.is_finite() {
        out.push(b'0');
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(f).as_bytes());
}

/// Appends a canonical JSON string.
pub fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let mut rest = s.as_bytes();
    while let Some(i) = rest
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
    {
        let (plain, tail) = rest.split_at(i);
        out.extend_from_slice(plain);
        let Some((&b, tail)) = tail.split_first() else {
            break;
        };
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x0a => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x0d => out.extend_from_slice(b"\\r"),
            _ => {
                // Control characters: `\u00` and two lowercase hex digits.
                let hex = |d: u8| if d < 10 { b'0' + d } else { b'a' + d - 10 };
                out.extend_from_slice(b"\\u00");
                out.push(hex(b >> 4));
                out.push(hex(b & 0x0f));
            }
        }
        rest = tail;
    }
    out.extend_from_slice(rest);
    out.push(b'"');
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    fn c(v: Value) -> String {
        String::from_utf8(canonical(&v)).unwrap()
    }

    #[test]
    fn rfc8785_primitive_example() {
        // RFC 8785 section 3.2.2 example input (numbers and strings).
        let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]}"#;
        let v: Value = serde_json::from_str(input).unwrap();
        assert_eq!(
            c(v),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn rfc8785_sorting_by_utf16() {
        // RFC 8785 section 3.2.3: property sorting uses UTF-16 code units.
        let input = "{\"\\u20ac\": \"Euro Sign\", \"\\r\": \"Carriage Return\", \"\\ufb33\": \"Hebrew Letter Dalet With Dagesh\", \"1\": \"One\", \"\\ud83d\\ude00\": \"Emoji: Grinning Face\", \"\\u0080\": \"Control\", \"\\u00f6\": \"Latin Small Letter O With Diaeresis\"}";
        let v: Value = serde_json::from_str(input).unwrap();
        let out = c(v);
        let order: Vec<&str> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small",
            "Euro Sign",
            "Emoji",
            "Hebrew",
        ]
        .to_vec();
        let mut last = 0;
        for o in order {
            let pos = out.find(o).unwrap();
            assert!(pos > last, "{o} out of order in {out}");
            last = pos;
        }
    }

    #[test]
    fn numbers_normalize_to_what_canonical_json_reads_back() {
        let mut v =
            serde_json::json!({"a": [2000.0, -0.0, 1.5, 1e21, 9007199254740993u64], "b": 7});
        normalize_numbers(&mut v);
        let back: Value = serde_json::from_slice(&canonical(&v)).unwrap();
        assert_eq!(v, back);
        assert_eq!(v["a"][0], serde_json::json!(2000));
        assert_eq!(v["a"][1], serde_json::json!(0));
        assert_eq!(v["b"], serde_json::json!(7));
    }

    #[test]
    fn integers_and_nested() {
        assert_eq!(
            c(json!({"b": [1, -2, 0], "a": {"y": 1, "x": 0.5}})),
            r#"{"a":{"x":0.5,"y":1},"b":[1,-2,0]}"#
        );
        assert_eq!(c(json!(-0.0)), "0");
        assert_eq!(c(json!(1.0)), "1");
    }
}
