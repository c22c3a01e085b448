//! The one strict JSON reader for evidence input (bundles, journals, receipts, proofs).
//!
//! `serde_json` accepts a member name twice in one object and keeps the last value, so a
//! reader that keeps the first would see other evidence than the verifier checked. This
//! module scans the bytes once before `serde_json` reads them: it checks the JSON
//! grammar (RFC 8259, UTF-8), refuses a repeated member name at any depth (names are
//! compared after unescaping, so `"a"` and `"\u0061"` are the same name) and nesting
//! deeper than [`MAX_DEPTH`], and reports where, as a byte offset, a line and column and
//! the RFC 6901 pointer of the value. It also returns the byte spans of the values a
//! caller asks for, so those can be checked and hashed exactly as written.

use std::collections::HashSet;
use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::canon;

/// Deepest nesting of arrays and objects accepted (`serde_json`'s own limit).
pub const MAX_DEPTH: usize = 127;

/// One step of a path into a JSON document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    /// A member of an object.
    Key(String),
    /// An element of an array.
    Index(usize),
}

/// The RFC 6901 pointer of a path (`""` for the whole document).
pub fn pointer(path: &[Seg]) -> String {
    let mut out = String::new();
    for s in path {
        out.push('/');
        match s {
            Seg::Key(k) => out.push_str(&k.replace('~', "~0").replace('/', "~1")),
            Seg::Index(i) => out.push_str(&i.to_string()),
        }
    }
    out
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JsonErrorKind {
    /// Not JSON.
    Syntax(&'static str),
    /// A member name repeated in one object.
    DuplicateKey(String),
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
}

/// A fault in a JSON document, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonError {
    /// What.
    pub kind: JsonErrorKind,
    /// Byte offset in the document.
    pub offset: usize,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in bytes).
    pub column: usize,
    /// RFC 6901 pointer of the value (for a duplicate, of the object holding it).
    pub pointer: String,
    /// The path of that value.
    pub path: Vec<Seg>,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "the document".to_string()
        } else {
            format!("`{}`", self.pointer)
        };
        match &self.kind {
            JsonErrorKind::Syntax(what) => write!(f, "invalid JSON ({what}) in {at}")?,
            JsonErrorKind::DuplicateKey(k) => write!(f, "duplicate key `{k}` in {at}")?,
            JsonErrorKind::TooDeep => write!(f, "JSON nested deeper than {MAX_DEPTH} in {at}")?,
        }
        write!(
            f,
            " at byte {} (line {}, column {})",
            self.offset, self.line, self.column
        )
    }
}

impl std::error::Error for JsonError {}

/// 1-based line and column of `offset` in `bytes`.
pub fn line_column(bytes: &[u8], offset: usize) -> (usize, usize) {
    let before = bytes.get(..offset).unwrap_or(bytes);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

/// A value's bytes as written: `bytes[start..end]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// Where the value is.
    pub path: Vec<Seg>,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// The result of a scan that found no syntax error.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The spans asked for, in document order.
    pub spans: Vec<Span>,
    /// The first repeated member name, if any.
    pub duplicate: Option<JsonError>,
}

/// Scans `bytes`: syntax, depth, duplicate names; returns the spans of the values whose
/// path `want` selects (a selected value's own content is still scanned).
pub fn scan(bytes: &[u8], want: &dyn Fn(&[Seg]) -> bool) -> Result<Scan, JsonError> {
    let mut s = Scanner {
        b: bytes,
        i: 0,
        path: Vec::new(),
        scan: Scan::default(),
        want,
    };
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(s.error_at(JsonErrorKind::Syntax("not UTF-8"), e.valid_up_to()));
    }
    s.ws();
    s.value(0)?;
    s.ws();
    if s.i != bytes.len() {
        return Err(s.error(JsonErrorKind::Syntax("trailing characters")));
    }
    Ok(s.scan)
}

/// Scans and refuses any fault, duplicates included.
pub fn check(bytes: &[u8]) -> Result<(), JsonError> {
    match scan(bytes, &|_| false)?.duplicate {
        Some(d) => Err(d),
        None => Ok(()),
    }
}

/// Why strict reading failed.
#[derive(Debug, thiserror::Error)]
pub enum StrictError {
    /// Not strict JSON (syntax, depth, a duplicate name), with its position.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// JSON, but not of the expected shape.
    #[error(transparent)]
    Shape(#[from] serde_json::Error),
}

/// Reads `T` from bytes that must be strict JSON: the one entry point for evidence
/// input that needs no as-written checks of its parts.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StrictError> {
    check(bytes)?;
    Ok(serde_json::from_slice(bytes)?)
}

/// Reads `T` from bytes already scanned: when the scan found a repeated key (which the
/// caller reports as tampering), the document is read with the last value of each
/// repeated key, also where `T`'s own fields repeat, so the finding can be reported
/// with the rest of the evidence rather than as an unreadable file.
pub fn from_scanned<T: DeserializeOwned>(bytes: &[u8], scan: &Scan) -> serde_json::Result<T> {
    if scan.duplicate.is_none() {
        return serde_json::from_slice(bytes);
    }
    let v: Value = serde_json::from_slice(bytes)?;
    serde_json::from_value(v)
}

/// Where `written` first differs from its canonical (RFC 8785) form, `None` when it is
/// canonical. `Err` when it is not JSON. Returns the canonical bytes too.
pub fn canonical_difference(written: &[u8]) -> Result<(Vec<u8>, Option<usize>), serde_json::Error> {
    let v: Value = serde_json::from_slice(written)?;
    let c = canon::canonical(&v);
    let diff = first_difference(written, &c);
    Ok((c, diff))
}

/// The first offset where `a` and `b` differ (`None` when equal).
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a == b {
        return None;
    }
    Some(
        a.iter()
            .zip(b)
            .position(|(x, y)| x != y)
            .unwrap_or_else(|| a.len().min(b.len())),
    )
}

/// Serializes a field as its canonical JSON bytes, verbatim (also inside a pretty
/// printer): `#[serde(serialize_with = "knox_types::json::canonical")]`.
pub fn canonical<T: Serialize, S: serde::Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    let bytes = canon::to_canonical(value).map_err(serde::ser::Error::custom)?;
    raw(bytes, s)
}

/// [`canonical`] for a `serde_json::Value` (no intermediate copy).
pub fn canonical_value<S: serde::Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
    raw(canon::canonical(value), s)
}

pub(crate) fn raw<S: serde::Serializer>(bytes: Vec<u8>, s: S) -> Result<S::Ok, S::Error> {
    let text = String::from_utf8(bytes).map_err(serde::ser::Error::custom)?;
    let raw = RawValue::from_string(text).map_err(serde::ser::Error::custom)?;
    raw.serialize(s)
}

/// The member names of one object seen so far: a short list searched in order (most
/// objects have a few members), a hash set once it grows, so that an object with very
/// many members costs no more than linear time.
#[derive(Default)]
struct Seen {
    few: Vec<String>,
    many: HashSet<String>,
}

impl Seen {
    /// The most names searched in order.
    const FEW: usize = 16;

    /// Records `key`; `false` when it was already seen.
    fn insert(&mut self, key: &str) -> bool {
        if self.many.is_empty() {
            if self.few.iter().any(|k| k == key) {
                return false;
            }
            if self.few.len() < Self::FEW {
                self.few.push(key.to_owned());
                return true;
            }
            self.many.extend(self.few.drain(..));
        }
        self.many.insert(key.to_owned())
    }
}

struct Scanner<'a, 'w> {
    b: &'a [u8],
    i: usize,
    path: Vec<Seg>,
    scan: Scan,
    want: &'w dyn Fn(&[Seg]) -> bool,
}

impl Scanner<'_, '_> {
    fn error_at(&self, kind: JsonErrorKind, offset: usize) -> JsonError {
        let (line, column) = line_column(self.b, offset);
        JsonError {
            kind,
            offset,
            line,
            column,
            pointer: pointer(&self.path),
            path: self.path.clone(),
        }
    }

    fn error(&self, kind: JsonErrorKind) -> JsonError {
        self.error_at(kind, self.i)
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.error(JsonErrorKind::Syntax(what)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<(), JsonError> {
        let start = self.i;
        let wanted = (self.want)(&self.path);
        match self.peek() {
            Some(b'{') => self.object(depth + 1)?,
            Some(b'[') => self.array(depth + 1)?,
            Some(b'"') => self.skip_string()?,
            Some(b't') => self.literal(b"true")?,
            Some(b'f') => self.literal(b"false")?,
            Some(b'n') => self.literal(b"null")?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => return Err(self.error(JsonErrorKind::Syntax("expected a value"))),
        }
        if wanted {
            self.scan.spans.push(Span {
                path: self.path.clone(),
                start,
                end: self.i,
            });
        }
        Ok(())
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), JsonError> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(self.error(JsonErrorKind::Syntax("invalid literal")))
        }
    }

    fn digits(&mut self) -> usize {
        let from = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        self.i - from
    }

    fn number(&mut self) -> Result<(), JsonError> {
        let start = self.i;
        self.number_grammar()?;
        // Like serde_json: a number too large for an IEEE double is refused.
        let text = self
            .b
            .get(start..self.i)
            .and_then(|t| std::str::from_utf8(t).ok());
        match text.map(str::parse::<f64>) {
            Some(Ok(f)) if f.is_finite() => Ok(()),
            _ => Err(self.error_at(JsonErrorKind::Syntax("number out of range"), start)),
        }
    }

    fn number_grammar(&mut self) -> Result<(), JsonError> {
        let bad = JsonErrorKind::Syntax("invalid number");
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.error(bad)),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return Err(self.error(bad));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return Err(self.error(bad));
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = match self.peek() {
                Some(c @ b'0'..=b'9') => c - b'0',
                Some(c @ b'a'..=b'f') => c - b'a' + 10,
                Some(c @ b'A'..=b'F') => c - b'A' + 10,
                _ => return Err(self.error(JsonErrorKind::Syntax("invalid \\u escape"))),
            };
            v = v * 16 + u32::from(d);
            self.i += 1;
        }
        Ok(v)
    }

    /// A string, unescaped (a member name; values are only checked, [`Self::skip_string`]).
    fn string(&mut self) -> Result<String, JsonError> {
        let mut out = Vec::new();
        self.read_string(Some(&mut out))?;
        // The input was checked to be UTF-8 and escapes produce UTF-8.
        String::from_utf8(out).map_err(|_| self.error(JsonErrorKind::Syntax("not UTF-8")))
    }

    /// Checks a string without building it.
    fn skip_string(&mut self) -> Result<(), JsonError> {
        self.read_string(None)
    }

    /// Reads a string (escapes, control characters, surrogates checked), appending its
    /// unescaped bytes to `out` when there is one.
    fn read_string(&mut self, mut out: Option<&mut Vec<u8>>) -> Result<(), JsonError> {
        self.expect(b'"', "expected a string")?;
        loop {
            let Some(c) = self.peek() else {
                return Err(self.error(JsonErrorKind::Syntax("unterminated string")));
            };
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.i += 1;
                    let esc = self.peek();
                    self.i += 1;
                    let ch = match esc {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => self.unicode_escape()?,
                        _ => {
                            self.i -= 1;
                            return Err(self.error(JsonErrorKind::Syntax("invalid escape")));
                        }
                    };
                    if let Some(out) = out.as_deref_mut() {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                    }
                }
                0x00..=0x1f => {
                    return Err(self.error(JsonErrorKind::Syntax("control character in a string")));
                }
                _ => {
                    if let Some(out) = out.as_deref_mut() {
                        out.push(c);
                    }
                    self.i += 1;
                }
            }
        }
    }

    fn unicode_escape(&mut self) -> Result<char, JsonError> {
        let lone = JsonErrorKind::Syntax("lone surrogate in a \\u escape");
        let hi = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&hi) {
            if self.b.get(self.i..self.i + 2) != Some(b"\\u") {
                return Err(self.error(lone));
            }
            self.i += 2;
            let lo = self.hex4()?;
            if !(0xDC00..0xE000).contains(&lo) {
                return Err(self.error(lone));
            }
            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
        } else if (0xDC00..0xE000).contains(&hi) {
            return Err(self.error(lone));
        } else {
            hi
        };
        char::from_u32(code).ok_or_else(|| self.error(lone))
    }

    fn array(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error(JsonErrorKind::TooDeep));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        let mut index = 0;
        loop {
            self.ws();
            self.path.push(Seg::Index(index));
            let r = self.value(depth);
            self.path.pop();
            r?;
            index += 1;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.error(JsonErrorKind::Syntax("expected `,` or `]`"))),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.error(JsonErrorKind::TooDeep));
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        let mut seen = Seen::default();
        loop {
            self.ws();
            let key_at = self.i;
            let key = self.string()?;
            if !seen.insert(&key) && self.scan.duplicate.is_none() {
                let e = self.error_at(JsonErrorKind::DuplicateKey(key.clone()), key_at);
                self.scan.duplicate = Some(e);
            }
            self.ws();
            self.expect(b':', "expected `:`")?;
            self.ws();
            self.path.push(Seg::Key(key));
            let r = self.value(depth);
            self.path.pop();
            r?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.error(JsonErrorKind::Syntax("expected `,` or `}`"))),
            }
        }
    }
}

/// Deserializes an `Option` member that must be written, `null` when there is no
/// value (`#[serde(deserialize_with = "crate::json::present")]`): serde's derive would
/// read a missing member as `None`, so evidence with the member left out would read
/// the same as evidence with `null` — while the evidence format measures the member,
/// and an independent verifier would compute another hash.
///
/// # Errors
/// The member's own deserialization error; a missing member is serde's "missing field".
pub fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_at_any_depth_even_escaped() {
        let doc = br#"{"a": [1, {"b": {"passed": false, "x": 1, "passed": true}}]}"#;
        let e = check(doc).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::DuplicateKey("passed".into()));
        assert_eq!(e.pointer, "/a/1/b");
        assert_eq!(&doc[e.offset..e.offset + 8], b"\"passed\"");
        let e = check(br#"{"a": 1, "\u0061": 2}"#).unwrap_err();
        assert_eq!(e.kind, JsonErrorKind::DuplicateKey("a".into()));
        check(br#"{"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]}"#).unwrap();
    }

    #[test]
    fn duplicates_are_found_in_objects_of_many_members() {
        let members: Vec<String> = (0..40).map(|i| format!("\"k{i}\": {i}")).collect();
        let all = members.join(", ");
        check(format!("{{{all}}}").as_bytes()).unwrap();
        for (again, at) in [("k3", 40), ("k30", 40), ("k0", 17), ("k16", 17)] {
            let mut m = members.clone();
            m.insert(at, format!("\"{again}\": true"));
            let e = check(format!("{{{}}}", m.join(", ")).as_bytes()).unwrap_err();
            assert_eq!(e.kind, JsonErrorKind::DuplicateKey(again.into()), "{again}");
        }
    }

    #[test]
    fn agrees_with_serde_json_on_what_is_json() {
        let cases: &[&[u8]] = &[
            b"1",
            b" [1, -0, 0.5, 1e5, -1E-3, 2e+2] ",
            b"\"\\ud83d\\ude00 \\u00e9 \\n\"",
            b"{}",
            b"[]",
            b"01",
            b"1.",
            b".5",
            b"-",
            b"1e",
            b"[1,]",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\\x\"",
            b"\"a\x01\"",
            b"tru",
            b"nul",
            b"[1] 2",
            b"",
            b"\"\xff\"",
            b"{1:2}",
            b"1e400",
            b"-1e400",
            b"1e-400",
            b"100000000000000000000000000000",
        ];
        for c in cases {
            let ours = check(c).is_ok();
            let theirs = serde_json::from_slice::<Value>(c).is_ok();
            assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(c));
        }
    }

    #[test]
    fn depth_limit_is_serde_jsons() {
        for depth in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1] {
            let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(
                check(doc.as_bytes()).is_ok(),
                serde_json::from_str::<Value>(&doc).is_ok(),
                "depth {depth}"
            );
        }
    }

    proptest::proptest! {
        /// No parser differential: on JSON documents and byte-level mutations of them,
        /// the strict scanner accepts exactly what serde_json accepts (duplicates aside).
        #[test]
        fn scanner_and_serde_json_agree_on_mutants(
            v in json_value(),
            edits in proptest::collection::vec((0usize..4096, 0u8..=255, 0u8..3), 0..4),
        ) {
            let mut doc = serde_json::to_vec(&v).unwrap();
            for (at, byte, how) in edits {
                let at = at % (doc.len() + 1);
                match how {
                    0 => doc.insert(at, byte),
                    1 if at < doc.len() => { doc.remove(at); }
                    _ if at < doc.len() => doc[at] = byte,
                    _ => {}
                }
            }
            let ours = scan(&doc, &|_| false).is_ok();
            let theirs = serde_json::from_slice::<Value>(&doc).is_ok();
            proptest::prop_assert_eq!(ours, theirs, "{}", String::from_utf8_lossy(&doc));
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| serde_json::json!(i)),
            (-1e6f64..1e6).prop_map(|f| serde_json::json!(f)),
            "[a-z\\\"\\u{0}-\\u{1f}é😀]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-c]{1,2}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[test]
    fn depth_is_bounded_without_recursion_trouble() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            check(deep.as_bytes()).unwrap_err().kind,
            JsonErrorKind::TooDeep
        );
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        check(ok.as_bytes()).unwrap();
    }

    #[test]
    fn spans_and_positions() {
        let doc =
            b"{\"nodes\": [{\"payload\": {\"b\":1,\"a\":2}}, {\"payload\": 3}],\n \"apm\": {}}";
        let s = scan(doc, &|p| {
            matches!(p, [Seg::Key(n), Seg::Index(_), Seg::Key(k)] if n == "nodes" && k == "payload")
                || matches!(p, [Seg::Key(a)] if a == "apm")
        })
        .unwrap();
        let texts: Vec<&[u8]> = s.spans.iter().map(|s| &doc[s.start..s.end]).collect();
        assert_eq!(texts, [&b"{\"b\":1,\"a\":2}"[..], b"3", b"{}"]);
        assert_eq!(pointer(&s.spans[1].path), "/nodes/1/payload");
        let (_, diff) = canonical_difference(texts[0]).unwrap();
        assert_eq!(diff, Some(2));
        let e = check(b"{\"a\": 1,\n  \"a\": 2}").unwrap_err();
        assert_eq!((e.line, e.column), (2, 3));
    }

    #[test]
    fn canonical_fields_are_written_verbatim_even_pretty() {
        #[derive(Serialize)]
        struct W {
            #[serde(serialize_with = "canonical_value")]
            v: Value,
        }
        let w = W {
            v: serde_json::json!({"z": 1, "a": [1.0, "é"]}),
        };
        let pretty = serde_json::to_string_pretty(&w).unwrap();
        assert!(pretty.contains(r#"{"a":[1,"é"],"z":1}"#), "{pretty}");
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(v["v"]["z"], 1);
    }
}
