//! Typed extraction (issue 36, item 4): whether a value the executor extracted from an
//! earlier output is of the type the plan declared ([`Typed`]). What such a value can
//! carry is bounded by its type — one of the output's own addresses or dates, an
//! integer of the range, one of the list — where free text carries anything.
//!
//! An address or a date must occur in the output, written exactly as there (a token of
//! one of its strings: not glued to a letter or digit on either side), so neither its
//! letter case nor its spelling is a further choice.

use knox_types::apm::Typed;
use serde_json::Value;

/// Longest e-mail address (RFC 5321's path limit less the brackets).
const MAX_EMAIL: usize = 254;

/// Whether `v` is a value of type `of` extracted from `output` (the earlier call's
/// output; `None` when it has none recorded).
pub fn holds(of: &Typed, v: &Value, output: Option<&Value>) -> bool {
    match of {
        Typed::Email => v
            .as_str()
            .is_some_and(|s| is_email(s) && output.is_some_and(|o| occurs(o, s, in_address))),
        Typed::Date => v.as_str().is_some_and(|s| {
            is_date(s) && output.is_some_and(|o| occurs(o, s, char::is_alphanumeric))
        }),
        Typed::Integer { min, max } => {
            (v.is_i64() || v.is_u64()) && v.as_i64().is_some_and(|x| *min <= x && x <= *max)
        }
        Typed::OneOf { values } => v.as_str().is_some_and(|s| values.iter().any(|x| x == s)),
    }
}

/// Whether `of` is well formed: a range with `min ≤ max`, a list of 1 to 256 values.
pub fn valid(of: &Typed) -> Result<(), String> {
    match of {
        Typed::Integer { min, max } if min > max => Err(format!(
            "an integer range needs min ≤ max, not {min} > {max}"
        )),
        Typed::OneOf { values } if values.is_empty() || values.len() > 256 => {
            Err("a list of values needs 1 to 256 of them".into())
        }
        _ => Ok(()),
    }
}

/// Whether `needle` occurs, exactly, in a string of `hay` with no character `glued`
/// right before or after it.
fn occurs(hay: &Value, needle: &str, glued: fn(char) -> bool) -> bool {
    match hay {
        Value::String(s) => s.match_indices(needle).any(|(at, m)| {
            let before = s.get(..at).and_then(|h| h.chars().next_back());
            let after = s.get(at + m.len()..).and_then(|h| h.chars().next());
            !before.is_some_and(glued) && !after.is_some_and(glued)
        }),
        Value::Array(items) => items.iter().any(|x| occurs(x, needle, glued)),
        Value::Object(m) => m.values().any(|x| occurs(x, needle, glued)),
        _ => false,
    }
}

/// A character that can continue an address (so `lee@x.example` is not a token of
/// `ann.lee@x.example`).
fn in_address(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~-.@".contains(c)
}

/// `local@domain`: a local part of 1–64 of the characters RFC 5322 allows unquoted
/// (no leading, trailing or doubled dot), a domain of two or more dot-separated labels
/// of letters, digits and inner hyphens; ASCII, at most 254 bytes.
fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+/=?^_`{|}~-".contains(c);
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    s.len() <= MAX_EMAIL
        && (1..=64).contains(&local.len())
        && local
            .split('.')
            .all(|p| !p.is_empty() && p.chars().all(atext))
        && domain.split('.').count() >= 2
        && domain.split('.').all(label)
}

/// `YYYY-MM-DD`, a day of the proleptic Gregorian calendar (years 0001–9999).
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .filter(|d| d.iter().all(u8::is_ascii_digit))
            .and_then(|_| s.get(r))
            .and_then(|d| d.parse::<u32>().ok())
    };
    if b.len() != 10 || b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return false;
    }
    let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    y >= 1 && (1..=days).contains(&d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_address_or_a_date_must_be_one_the_output_holds_as_written() {
        let out = json!({"email": {"from": "Ann Lee <ann.lee@clinic.example>",
            "body": "Meet on 2024-02-29 16:00; cc bob@x.example"}});
        let o = Some(&out);
        for ok in ["ann.lee@clinic.example", "bob@x.example"] {
            assert!(holds(&Typed::Email, &json!(ok), o), "{ok}");
        }
        for no in [
            "ANN.LEE@clinic.example", // another spelling: a choice that carries bits
            "ann@clinic.example",     // not in the output
            "lee@clinic.example",     // glued to a letter there
            "not an address",
            "a@b",
        ] {
            assert!(!holds(&Typed::Email, &json!(no), o), "{no}");
        }
        assert!(!holds(&Typed::Email, &json!("bob@x.example"), None));
        assert!(holds(&Typed::Date, &json!("2024-02-29"), o));
        for no in [
            "2023-02-29",
            "2024-13-01",
            "2024-2-29",
            "29.02.2024",
            "2024-03-01",
        ] {
            assert!(!holds(&Typed::Date, &json!(no), o), "{no}");
        }
    }

    #[test]
    fn integers_and_lists_bound_the_value_by_their_type() {
        let r = Typed::Integer { min: 1, max: 12 };
        assert!(holds(&r, &json!(12), None));
        for no in [json!(0), json!(13), json!(2.5), json!("3"), json!(null)] {
            assert!(!holds(&r, &no, None), "{no}");
        }
        let l = Typed::OneOf {
            values: vec!["low".into(), "high".into()],
        };
        assert!(holds(&l, &json!("high"), None));
        assert!(!holds(&l, &json!("High"), None));
        assert!(valid(&Typed::Integer { min: 2, max: 1 }).is_err());
        assert!(valid(&Typed::OneOf { values: vec![] }).is_err());
        assert!(valid(&l).is_ok());
    }
}
