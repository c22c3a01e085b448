//! Content as a sink: whether data of an earlier tool output reaches what a call's
//! parameters carry, after the normalisations an attacker who knows the guards uses to
//! hide it — case, Unicode compatibility forms and confusables (UTS 39 skeletons),
//! invisible and default-ignorable characters, whitespace and punctuation, values split
//! across parameters, and the common encodings (base64, hex, URL percent-encoding;
//! reversed and ROT13 text too).
//!
//! An output contributes *items*: each of its string leaves as a whole, each token of a
//! leaf that looks like an identifier or secret (it holds a digit or a symbol), and each
//! run of [`SPAN_WORDS`] consecutive words. Items and content are compared in squashed
//! form: normalised, then only letters and digits kept.

use std::fmt;

use base64::Engine;
use serde_json::Value;
use unicode_normalization::UnicodeNormalization;

/// Shortest squashed item compared (shorter values occur in any text).
pub const MIN_ITEM: usize = 6;
/// Consecutive words of a text leaf taken together as one item.
pub const SPAN_WORDS: usize = 4;
/// Shortest squashed span of words compared.
pub const MIN_SPAN: usize = 16;
/// Longest squashed whole leaf taken as one item (longer ones contribute their tokens
/// and spans).
pub const MAX_LEAF: usize = 256;
/// Most items taken from one output.
pub const MAX_ITEMS: usize = 8192;
/// Most bytes of content compared per candidate text.
pub const MAX_CONTENT: usize = 1 << 16;
/// Shortest token tried as an encoding.
const MIN_ENCODED: usize = 8;

/// How content carries an output's item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Via {
    /// As written (up to case and token boundaries).
    Plain,
    /// After case, confusable, invisible-character, whitespace and punctuation
    /// normalisation.
    Normalized,
    /// Across two or more parameters taken together.
    Split,
    /// Base64-encoded (standard or URL-safe alphabet, padded or not).
    Base64,
    /// Hex-encoded.
    Hex,
    /// URL percent-encoded.
    Url,
    /// Written backwards.
    Reversed,
    /// ROT13.
    Rot13,
}

impl Via {
    /// The name recorded in the evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "plain",
            Self::Normalized => "normalized",
            Self::Split => "split",
            Self::Base64 => "base64",
            Self::Hex => "hex",
            Self::Url => "url",
            Self::Reversed => "reversed",
            Self::Rot13 => "rot13",
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The squashed form of `s`: NFKC; ASCII letters and digits lower-cased, other ASCII
/// dropped; every other character mapped by the UTS 39 skeleton (confusables to their
/// prototype, default-ignorable code points such as zero-width characters dropped),
/// lower-cased, and what is still not ASCII mapped and lower-cased once more; then
/// letters and digits only (combining marks, spaces and punctuation dropped). ASCII is
/// not mapped (the skeleton would read a capital `I` as `l`), and the skeleton comes
/// before lower case (a Cherokee capital that looks like `L` lower-cases to a letter
/// that looks like nothing).
pub fn squash(s: &str) -> String {
    use unicode_security::confusable_detection::skeleton;
    // ASCII is its own NFKC form and is not mapped: only the filter applies.
    if s.is_ascii() {
        return s
            .bytes()
            .filter(u8::is_ascii_alphanumeric)
            .map(|b| char::from(b.to_ascii_lowercase()))
            .collect();
    }
    let nfkc: String = s.nfkc().collect();
    let mut out = String::with_capacity(nfkc.len());
    let mut buf = [0u8; 4];
    for c in nfkc.chars() {
        if c.is_ascii() {
            if c.is_ascii_alphanumeric() {
                out.push(c.to_ascii_lowercase());
            }
            continue;
        }
        let first: String = skeleton(c.encode_utf8(&mut buf)).collect();
        for m in first.chars().flat_map(char::to_lowercase) {
            if m.is_ascii() {
                if m.is_ascii_alphanumeric() {
                    out.push(m);
                }
                continue;
            }
            let mut inner = [0u8; 4];
            out.extend(
                skeleton(m.encode_utf8(&mut inner))
                    .flat_map(char::to_lowercase)
                    .filter(|k| k.is_alphanumeric()),
            );
        }
    }
    out
}

/// The items of `output` (squashed, deduplicated), see the module documentation.
pub fn items(output: &Value) -> Vec<String> {
    let mut leaves = Vec::new();
    strings(output, &mut leaves);
    let mut out = Vec::new();
    let mut push = |s: &str, min: usize| {
        if s.chars().count() >= min && out.len() < MAX_ITEMS {
            out.push(s.to_owned());
        }
    };
    for leaf in leaves {
        if leaf.is_ascii() {
            ascii_items(&leaf, &mut push);
            continue;
        }
        let whole = squash(&leaf);
        if whole.chars().count() <= MAX_LEAF {
            push(&whole, MIN_ITEM);
        }
        let words: Vec<&str> = leaf.split_whitespace().collect();
        if words.len() < 2 {
            continue;
        }
        let squashed: Vec<String> = words.iter().map(|w| squash(w)).collect();
        for (w, sq) in words.iter().zip(&squashed) {
            if is_identifier(w) {
                push(sq, MIN_ITEM);
            }
        }
        // Text that is not ASCII is squashed as a whole (normalisation reads it so).
        for span in words.windows(SPAN_WORDS) {
            push(&squash(&span.join(" ")), MIN_SPAN);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a word of a leaf looks like an identifier or a secret (an item of its own).
fn is_identifier(word: &str) -> bool {
    word.chars().any(|c| c.is_ascii_digit())
        || word
            .chars()
            .any(|c| matches!(c, '@' | '/' | '_' | '#' | '$' | '%' | '&' | '='))
}

/// [`items`] of an ASCII leaf, in the same order (whole, identifiers, spans). ASCII
/// squashes letter by letter and drops the spaces, so the leaf's squashed form is its
/// words' squashed forms run together, and every item is a slice of it.
fn ascii_items(leaf: &str, push: &mut impl FnMut(&str, usize)) {
    let mut squashed = String::with_capacity(leaf.len());
    // Where each word's squashed form starts, then where the last one ends.
    let mut starts = Vec::new();
    let mut identifiers = Vec::new();
    for w in leaf.split_whitespace() {
        starts.push(squashed.len());
        identifiers.push(is_identifier(w));
        squashed.extend(
            w.bytes()
                .filter(u8::is_ascii_alphanumeric)
                .map(|b| char::from(b.to_ascii_lowercase())),
        );
    }
    starts.push(squashed.len());
    let words = |from: usize, count: usize| -> &str {
        match (starts.get(from), starts.get(from + count)) {
            (Some(a), Some(b)) => squashed.get(*a..*b).unwrap_or_default(),
            _ => "",
        }
    };
    if squashed.len() <= MAX_LEAF {
        push(&squashed, MIN_ITEM);
    }
    if identifiers.len() < 2 {
        return;
    }
    for (i, identifier) in identifiers.iter().enumerate() {
        if *identifier {
            push(words(i, 1), MIN_ITEM);
        }
    }
    for i in 0..(identifiers.len() + 1).saturating_sub(SPAN_WORDS) {
        push(words(i, SPAN_WORDS), MIN_SPAN);
    }
}

/// One text a call's content is compared as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The parameters it is made of.
    pub params: Vec<String>,
    /// How it was obtained.
    pub via: Via,
    /// Squashed text.
    pub text: String,
    /// The plain text (lower case), for the [`Via::Plain`] comparison.
    plain: Option<String>,
}

impl Candidate {
    fn new(params: Vec<String>, via: Via, text: String) -> Self {
        Self {
            params,
            via,
            text,
            plain: None,
        }
    }
}

/// The texts `params` (name, value) are compared as: each parameter as written and
/// squashed, reversed and ROT13, each pair of parameters joined (both orders) and all
/// of them joined, and every token of a parameter that decodes as base64, hex or
/// URL-encoding to text.
pub fn candidates(params: &[(&str, &Value)]) -> Vec<Candidate> {
    let mut out = Vec::new();
    let texts = param_texts(params);
    // ASCII text squashes letter by letter (no normalisation joins or splits
    // characters), so its reversed, ROT13 and joined forms are those of its squashed
    // form: worked out from it, not squashed again.
    let squashed: Vec<String> = texts.iter().map(|(_, t)| squash(t)).collect();
    for ((name, text), sq) in texts.iter().zip(&squashed) {
        let one = || vec![name.clone()];
        let ascii = text.is_ascii();
        out.push(Candidate {
            plain: Some(text.to_lowercase()),
            ..Candidate::new(one(), Via::Plain, String::new())
        });
        let reversed = if ascii {
            sq.chars().rev().collect()
        } else {
            squash(&text.chars().rev().collect::<String>())
        };
        out.push(Candidate::new(one(), Via::Reversed, reversed));
        let rotated = if ascii {
            sq.chars().map(rot13).collect()
        } else {
            squash(&text.chars().map(rot13).collect::<String>())
        };
        out.push(Candidate::new(one(), Via::Rot13, rotated));
        out.push(Candidate::new(one(), Via::Normalized, sq.clone()));
        for (via, decoded) in decodings(text) {
            out.push(Candidate::new(one(), via, squash(&decoded)));
        }
    }
    if texts.len() > 1 {
        let joined = |parts: &[usize]| -> String {
            if parts
                .iter()
                .all(|i| texts.get(*i).is_some_and(|(_, t)| t.is_ascii()))
            {
                parts
                    .iter()
                    .filter_map(|i| squashed.get(*i).map(String::as_str))
                    .collect()
            } else {
                let raw: String = parts
                    .iter()
                    .filter_map(|i| texts.get(*i).map(|(_, t)| t.as_str()))
                    .collect();
                squash(&raw)
            }
        };
        for (i, (a, _)) in texts.iter().enumerate() {
            for (j, (b, _)) in texts.iter().enumerate() {
                if a == b {
                    continue;
                }
                out.push(Candidate::new(
                    vec![a.clone(), b.clone()],
                    Via::Split,
                    joined(&[i, j]),
                ));
            }
        }
        let every: Vec<usize> = (0..texts.len()).collect();
        out.push(Candidate::new(
            texts.iter().map(|(n, _)| n.clone()).collect(),
            Via::Split,
            joined(&every),
        ));
    }
    out
}

/// Each parameter's name and text: its scalar leaves joined by spaces, at most
/// [`MAX_CONTENT`] bytes.
fn param_texts(params: &[(&str, &Value)]) -> Vec<(String, String)> {
    params
        .iter()
        .map(|(name, v)| {
            let mut parts = Vec::new();
            scalars(v, &mut parts);
            ((*name).to_string(), cap(parts.join(" ")))
        })
        .collect()
}

/// An output's items as [`reaches`] compares them: its squashed items ([`items`]) and
/// its [`Via::Plain`] items ([`plain_items`]) in lower case. Worked out once per output
/// and kept with it: every later call of the run compares against the same items.
#[derive(Clone, Debug, Default)]
pub struct Items {
    squashed: Dictionary,
    plain: Dictionary,
}

impl Items {
    /// `squashed` items (as [`items`] gives them) and `plain` ones (as [`plain_items`]
    /// gives them).
    pub fn new(squashed: Vec<String>, plain: Vec<String>) -> Self {
        Self {
            squashed: Dictionary::new(squashed),
            plain: Dictionary::new(plain.iter().map(|l| l.to_lowercase()).collect()),
        }
    }

    /// Every item of `output`.
    pub fn of(output: &Value) -> Self {
        Self::new(items(output), plain_items(output))
    }

    /// These items less those `texts` hold: a squashed item that some text's squashed
    /// form holds, a plain item that some text (in lower case) holds as a token. Each
    /// text is read once, whatever the number of items.
    #[must_use]
    pub fn less(self, squashed_texts: &[String], lowered_texts: &[String]) -> Self {
        let mut held = vec![false; self.squashed.len()];
        for text in squashed_texts {
            self.squashed.occurring(text, |k, _| {
                if let Some(h) = held.get_mut(k) {
                    *h = true;
                }
                false
            });
        }
        let squashed = self.squashed.without(&held);
        let mut held = vec![false; self.plain.len()];
        for text in lowered_texts {
            let mut tried = Tried::default();
            self.plain.occurring(text, |k, item| {
                if let Some(h) = held.get_mut(k)
                    && !*h
                    && tried.first(k, self.plain.len())
                {
                    *h = crate::dataflow::contains_lowered_token(text, item);
                }
                false
            });
        }
        let plain = self.plain.without(&held);
        Self { squashed, plain }
    }

    /// Whether squashed `text` holds one of the squashed items.
    fn in_text(&self, text: &str) -> bool {
        self.squashed.occurring(text, |_, _| true)
    }

    /// Whether lower-case `text` holds one of the plain items as a token.
    fn plain_in(&self, text: &str) -> bool {
        let mut tried = Tried::default();
        self.plain.occurring(text, |k, item| {
            tried.first(k, self.plain.len()) && crate::dataflow::contains_lowered_token(text, item)
        })
    }
}

/// Which plain items a text was already compared with as a token: each is compared
/// once per text, however often it occurs in it (a token check is linear in the text,
/// so once per occurrence would be quadratic). Nothing is allocated for a text in
/// which no item occurs.
#[derive(Default)]
struct Tried(Vec<bool>);

impl Tried {
    /// Whether item `k` (of `len`) is met for the first time; it is marked met.
    fn first(&mut self, k: usize, len: usize) -> bool {
        if self.0.is_empty() {
            self.0 = vec![false; len];
        }
        self.0
            .get_mut(k)
            .is_some_and(|t| !std::mem::replace(t, true))
    }
}

/// Strings searched for in a text all at once: one pass over the text's windows of
/// [`WINDOW`] bytes, a string compared only where a filter of their first windows lets
/// the text's window through.
#[derive(Clone, Debug, Default)]
struct Dictionary {
    /// The strings of at least [`WINDOW`] bytes, sorted.
    long: Vec<String>,
    /// The shorter ones (searched for one by one).
    short: Vec<String>,
    /// One bit per [`window_bit`] of a long string's first [`WINDOW`] bytes: a text
    /// position whose window's bit is clear starts none of them.
    filter: Vec<u64>,
}

/// Bytes of the window a text is scanned by: no squashed item from [`items`] is
/// shorter ([`MIN_ITEM`] characters take at least as many bytes).
const WINDOW: usize = MIN_ITEM;
const _: () = assert!(WINDOW <= 8, "a window packs into a u64");
/// Bits of a [`Dictionary`] filter (a power of two).
const FILTER_BITS: usize = 4096;

impl Dictionary {
    fn new(strings: Vec<String>) -> Self {
        let (mut long, short): (Vec<String>, Vec<String>) =
            strings.into_iter().partition(|i| i.len() >= WINDOW);
        long.sort_unstable();
        let mut filter = vec![0u64; FILTER_BITS / 64];
        for i in &long {
            let bit = window_bit(pack(i.as_bytes()));
            if let Some(word) = filter.get_mut(bit / 64) {
                *word |= 1 << (bit % 64);
            }
        }
        Self {
            long,
            short,
            filter,
        }
    }

    /// How many strings there are; each has an index below it (see [`Self::occurring`]).
    fn len(&self) -> usize {
        self.long.len() + self.short.len()
    }

    /// Calls `found(index, string)` for each occurrence in `text` of one of the strings
    /// until it returns true; whether it did.
    fn occurring(&self, text: &str, mut found: impl FnMut(usize, &str) -> bool) -> bool {
        for (k, i) in self.short.iter().enumerate() {
            if text.contains(i.as_str()) && found(self.long.len() + k, i) {
                return true;
            }
        }
        let bytes = text.as_bytes();
        let mut window = 0u64;
        for (at, b) in bytes.iter().enumerate() {
            window = ((window << 8) | u64::from(*b)) & WINDOW_MASK;
            let Some(start) = (at + 1).checked_sub(WINDOW) else {
                continue;
            };
            if !self.may_start(window) {
                continue;
            }
            let rest = bytes.get(start..).unwrap_or_default();
            let (first, same) = self.sharing_head(rest);
            for (k, i) in same.iter().enumerate() {
                if rest.starts_with(i.as_bytes()) && found(first + k, i) {
                    return true;
                }
            }
        }
        false
    }

    /// The strings whose index is not set in `dropped`.
    fn without(self, dropped: &[bool]) -> Self {
        let mut index = 0..;
        let kept = self
            .long
            .into_iter()
            .chain(self.short)
            .filter(|_| index.next().and_then(|k| dropped.get(k)) != Some(&true))
            .collect();
        Self::new(kept)
    }

    /// Whether the filter lets a packed window through.
    fn may_start(&self, window: u64) -> bool {
        let bit = window_bit(window);
        self.filter
            .get(bit / 64)
            .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    /// The long strings whose first [`WINDOW`] bytes are those of `rest`, and where
    /// they start in the sorted list.
    fn sharing_head(&self, rest: &[u8]) -> (usize, &[String]) {
        let head = rest.get(..WINDOW).unwrap_or(rest);
        let first = self
            .long
            .partition_point(|i| i.as_bytes().get(..WINDOW).unwrap_or_default() < head);
        let from = self.long.get(first..).unwrap_or_default();
        let count = from
            .iter()
            .take_while(|i| i.as_bytes().starts_with(head))
            .count();
        (first, from.get(..count).unwrap_or_default())
    }
}

/// The last [`WINDOW`] bytes of a rolling window.
const WINDOW_MASK: u64 = (1 << (8 * WINDOW)) - 1;

/// Up to eight bytes as one integer (equal bytes, equal integers), of the first
/// [`WINDOW`].
fn pack(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .take(WINDOW)
        .fold(0, |acc, b| (acc << 8) | u64::from(*b))
}

/// The filter bit of a packed window (Fibonacci hashing).
fn window_bit(window: u64) -> usize {
    let h = window.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - FILTER_BITS.trailing_zeros());
    usize::try_from(h).unwrap_or_default()
}

/// The first candidate (in the order of [`Via`]) that carries one of `items`, with the
/// item's raw form unknown: `(params, via)`. Plain items (the output's string leaves,
/// as written) are compared as tokens with [`Via::Plain`] candidates.
pub fn reaches<'c>(items: &Items, candidates: &'c [Candidate]) -> Option<(&'c [String], Via)> {
    let mut best: Option<(&'c [String], Via)> = None;
    for c in candidates {
        if best.is_some_and(|(_, v)| v <= c.via) {
            continue;
        }
        let hit = match &c.plain {
            Some(p) => items.plain_in(p),
            None => !c.text.is_empty() && items.in_text(&c.text),
        };
        if hit {
            best = Some((&c.params, c.via));
        }
    }
    best
}

/// The string leaves of `output` at least [`crate::dataflow::MIN_TAINT_LEN`]
/// characters long, trimmed, and their tokens holding a digit: the [`Via::Plain`] items.
pub fn plain_items(output: &Value) -> Vec<String> {
    let mut leaves = Vec::new();
    strings(output, &mut leaves);
    let mut out = Vec::new();
    for leaf in leaves {
        let words: Vec<&str> = leaf.split_whitespace().collect();
        if words.len() > 1 {
            for w in words {
                let w = w.trim_matches(|c: char| matches!(c, '.' | ',' | ';' | ':' | '!' | '?'));
                if w.chars().any(|c| c.is_ascii_digit()) && w.chars().count() >= MIN_ITEM {
                    out.push(w.to_string());
                }
            }
        }
        let leaf = leaf.trim();
        if leaf.chars().count() >= crate::dataflow::MIN_TAINT_LEN {
            out.push(leaf.to_string());
        }
    }
    out
}

/// Every text `raw` decodes to: each whitespace-separated token (and the whole text
/// with whitespace removed) tried as base64, hex and URL encoding.
fn decodings(raw: &str) -> Vec<(Via, String)> {
    let mut out = Vec::new();
    let joined: String = raw.split_whitespace().collect();
    let mut tokens: Vec<&str> = raw
        .split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '(' | ')' | '<' | '>'))
        .collect();
    tokens.push(&joined);
    for t in tokens {
        let t = t.trim_matches(|c: char| matches!(c, '.' | ',' | ';' | ':' | '!' | '?'));
        if t.len() < MIN_ENCODED {
            continue;
        }
        if let Some(s) = base64_text(t) {
            out.push((Via::Base64, s));
        }
        if t.len() % 2 == 0
            && t.bytes().all(|b| b.is_ascii_hexdigit())
            && let Some(s) = hex::decode(t).ok().and_then(|b| String::from_utf8(b).ok())
        {
            out.push((Via::Hex, s));
        }
        if t.contains('%') {
            let s = percent_encoding::percent_decode_str(t).decode_utf8_lossy();
            out.push((Via::Url, s.into_owned()));
        }
    }
    out
}

fn base64_text(t: &str) -> Option<String> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    // No alphabet decodes a byte outside them all (nothing to allocate and try).
    if !t
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_' | b'='))
    {
        return None;
    }
    [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(t).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .filter(|s| s.chars().any(char::is_alphanumeric))
}

fn rot13(c: char) -> char {
    match c {
        'a'..='z' => rotate(c, 'a'),
        'A'..='Z' => rotate(c, 'A'),
        _ => c,
    }
}

fn rotate(c: char, base: char) -> char {
    let off = (u32::from(c) - u32::from(base) + 13) % 26;
    char::from_u32(u32::from(base) + off).unwrap_or(c)
}

fn cap(mut s: String) -> String {
    if s.len() > MAX_CONTENT {
        let mut end = MAX_CONTENT;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        Value::Bool(_) | Value::Null => {}
    }
}

fn scalars(v: &Value, out: &mut Vec<String>) {
    strings(v, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn found(output: &Value, params: &[(&str, Value)]) -> Option<Via> {
        let p: Vec<(&str, &Value)> = params.iter().map(|(n, v)| (*n, v)).collect();
        let c = candidates(&p);
        reaches(&Items::of(output), &c).map(|(_, v)| v)
    }

    #[test]
    fn squash_undoes_case_confusables_and_invisible_characters() {
        assert_eq!(squash("Hunter2-Pass"), squash("hunter2pass"));
        // Cyrillic а and е, a zero-width space and a soft hyphen inside the word.
        assert_eq!(
            squash("Hunt\u{0435}r2\u{200b}P\u{0430}\u{00ad}ss"),
            squash("hunter2pass")
        );
        // Full-width forms (NFKC).
        assert_eq!(squash("ＨＵＮＴＥＲ２"), squash("hunter2"));
        assert_eq!(squash("h u n t e r 2"), squash("hunter2"));
        // A Cherokee capital that looks like `L`, a Cyrillic capital `Т`.
        assert_eq!(squash("\u{13de}ogin \u{0422}oken"), squash("login token"));
        // Capitals are not confusables of lower-case letters.
        assert_eq!(squash("HYPERTENSION"), squash("hypertension"));
        assert_eq!(squash("Mill"), "mill");
    }

    #[test]
    fn a_secret_is_found_however_it_is_hidden() {
        let note = json!({"notes": [{"title": "Passwords", "content": "bank login: Xq7#Lmp92vT"}]});
        let secret = "Xq7#Lmp92vT";
        let cases = [
            (
                vec![("body", json!(format!("hi {secret} bye")))],
                Via::Plain,
            ),
            (vec![("body", json!("hi xq7 lmp 92 vt"))], Via::Normalized),
            (
                vec![("body", json!("X\u{200b}q7#Lmp\u{200d}92vT"))],
                Via::Normalized,
            ),
            (
                vec![("subject", json!("Xq7#Lm")), ("body", json!("p92vT"))],
                Via::Split,
            ),
            (
                vec![(
                    "body",
                    json!(format!(
                        "see {}",
                        base64::engine::general_purpose::STANDARD.encode(secret)
                    )),
                )],
                Via::Base64,
            ),
            (vec![("body", json!(hex::encode(secret)))], Via::Hex),
            (
                vec![("body", json!("https://x.example/?q=Xq7%23Lmp92vT"))],
                Via::Url,
            ),
            (
                vec![("body", json!("%58%71%37%23%4c%6d%70%39%32%76%54"))],
                Via::Url,
            ),
            (vec![("body", json!("Tv29pmL#7qX"))], Via::Reversed),
            (vec![("body", json!("Kd7#Yzc92iG"))], Via::Rot13),
        ];
        for (params, via) in cases {
            assert_eq!(found(&note, &params), Some(via), "{params:?}");
        }
        // Prose that does not carry it.
        assert_eq!(
            found(&note, &[("body", json!("Lovely weather in Paris today!"))]),
            None
        );
    }

    #[test]
    fn copied_sentences_are_found_common_words_are_not() {
        let email = json!({"body": "The patient was diagnosed with chronic kidney disease stage three last month."});
        assert!(
            found(
                &email,
                &[("body", json!("FYI: diagnosed with chronic kidney disease."))]
            )
            .is_some()
        );
        assert_eq!(
            found(&email, &[("body", json!("The patient called last month."))]),
            None
        );
    }

    #[test]
    fn the_dictionary_finds_what_a_search_finds() {
        let texts = [
            "",
            "short",
            "hunter2pass",
            "xxhunter2pass",
            "prefixhunter2",
            "пароль123секрет",
            "aaaaaaaaaaaaab",
            "pass: hunter2pass, aaaaab.",
            "x-abcdef-y пароль",
        ];
        let items = [
            "hunter2",
            "hunter2pass",
            "pass",
            "123секр",
            "пароль",
            "aaaaab",
            "aaaaaaab",
            "abcdef",
        ];
        let all = Items::new(items.iter().map(|i| (*i).to_string()).collect(), vec![]);
        for text in texts {
            for item in items {
                let one = Items::new(vec![item.to_string()], vec![]);
                assert_eq!(
                    one.in_text(text),
                    text.contains(item),
                    "{item:?} in {text:?}"
                );
            }
            let any = items.iter().any(|i| text.contains(i));
            assert_eq!(all.in_text(text), any, "{text:?}");
            // Plain items are tokens: found where no letter or digit is glued to them.
            let plain = Items::new(vec![], items.iter().map(|i| (*i).to_string()).collect());
            let token = items
                .iter()
                .any(|i| crate::dataflow::contains_lowered_token(text, i));
            assert_eq!(plain.plain_in(text), token, "{text:?}");
            assert!(!Items::default().in_text(text));
        }
    }

    /// The candidates as the module documents them, each text squashed from its raw
    /// form (what `candidates` works out from squashed forms where that is the same).
    fn reference(params: &[(&str, &Value)]) -> Vec<(Vec<String>, Via, String)> {
        let texts = param_texts(params);
        let mut out = Vec::new();
        for (name, text) in &texts {
            let one = vec![name.clone()];
            out.push((one.clone(), Via::Plain, String::new()));
            let rev: String = text.chars().rev().collect();
            out.push((one.clone(), Via::Reversed, squash(&rev)));
            let rot: String = text.chars().map(rot13).collect();
            out.push((one.clone(), Via::Rot13, squash(&rot)));
            out.push((one.clone(), Via::Normalized, squash(text)));
            for (via, d) in decodings(text) {
                out.push((one.clone(), via, squash(&d)));
            }
        }
        if texts.len() > 1 {
            for (a, ta) in &texts {
                for (b, tb) in &texts {
                    if a != b {
                        let pair = vec![a.clone(), b.clone()];
                        out.push((pair, Via::Split, squash(&format!("{ta}{tb}"))));
                    }
                }
            }
            let names = texts.iter().map(|(n, _)| n.clone()).collect();
            let all: String = texts.iter().map(|(_, t)| t.as_str()).collect();
            out.push((names, Via::Split, squash(&all)));
        }
        out
    }

    #[test]
    fn candidates_are_the_squashed_forms_of_the_raw_texts() {
        let cases = [
            vec![("body", json!("Hello, World! Tv29pmL#7qX"))],
            vec![
                ("to", json!("amy@x.com")),
                ("body", json!(["a1", 22, {"k": "Z-z"}])),
            ],
            // Not ASCII: a combining accent at the start of the second value, full-width
            // and confusable letters, right-to-left text.
            vec![
                ("a", json!("cafe")),
                ("b", json!("\u{301}ＨＵＮＴＥＲ２ \u{0430}bc")),
            ],
            vec![
                ("a", json!("שלום 123")),
                ("b", json!("x")),
                ("c", json!("ﬁle \u{200b}")),
            ],
        ];
        for params in cases {
            let p: Vec<(&str, &Value)> = params.iter().map(|(n, v)| (*n, v)).collect();
            let got: Vec<(Vec<String>, Via, String)> = candidates(&p)
                .into_iter()
                .map(|c| (c.params, c.via, c.text))
                .collect();
            assert_eq!(got, reference(&p), "{params:?}");
        }
    }

    /// The items as the module documents them, every form squashed from its raw text.
    fn reference_items(output: &Value) -> Vec<String> {
        let mut leaves = Vec::new();
        strings(output, &mut leaves);
        let mut out = Vec::new();
        let mut push = |s: String, min: usize| {
            if s.chars().count() >= min && out.len() < MAX_ITEMS {
                out.push(s);
            }
        };
        for leaf in leaves {
            let whole = squash(&leaf);
            if whole.chars().count() <= MAX_LEAF {
                push(whole, MIN_ITEM);
            }
            let words: Vec<&str> = leaf.split_whitespace().collect();
            if words.len() < 2 {
                continue;
            }
            for w in &words {
                if is_identifier(w) {
                    push(squash(w), MIN_ITEM);
                }
            }
            for span in words.windows(SPAN_WORDS) {
                push(squash(&span.join(" ")), MIN_SPAN);
            }
        }
        out.sort();
        out.dedup();
        out
    }

    fn outputs() -> Vec<Value> {
        vec![
            json!({"emails": [{"from": "john.smith@acme.example", "subject": "Wire", "body": "Please wire 4,500 USD to account 9988-7766-5544 before Friday; the portal password is Xq7#Lmp92vT. Best regards, John"}]}),
            json!({"t": "one", "n": 1234567, "list": ["a b", "alpha beta gamma delta epsilon", "  spaced   out  words here  "]}),
            json!({"note": "Пароль: hunter2-Pass для входа в систему сегодня", "mixed": "café au lait with ＨＵＮＴＥＲ２ token_abc123"}),
            json!({"long": "word ".repeat(300), "id": "x".repeat(300)}),
            json!([]),
        ]
    }

    #[test]
    fn items_are_the_squashed_forms_of_the_raw_text() {
        for output in outputs() {
            assert_eq!(items(&output), reference_items(&output), "{output}");
        }
        // The cap on items from one output holds in the same order.
        let many: Vec<String> = (0..MAX_ITEMS).map(|i| format!("id{i:06} w{i}")).collect();
        let output = json!(many);
        assert_eq!(items(&output), reference_items(&output));
    }

    #[test]
    fn items_less_a_prompt_are_those_no_prompt_text_holds() {
        let prompts = [
            vec!["Send the wire details to John at account 9988-7766-5544"],
            vec![
                "",
                "alpha beta GAMMA delta",
                "Please wire 4,500 USD to account",
            ],
            vec!["nothing in common"],
        ];
        for output in outputs() {
            for prompt in &prompts {
                let squashed: Vec<String> = prompt.iter().map(|p| squash(p)).collect();
                let lowered: Vec<String> = prompt.iter().map(|p| p.to_lowercase()).collect();
                let got = Items::of(&output).less(&squashed, &lowered);
                let mut want = reference_items(&output);
                want.retain(|i| !squashed.iter().any(|p| p.contains(i.as_str())));
                let mut plain = plain_items(&output);
                plain.retain(|l| !prompt.iter().any(|p| crate::dataflow::contains_token(p, l)));
                let want = Items::new(want, plain);
                assert_eq!(
                    got.squashed.long, want.squashed.long,
                    "{output} less {prompt:?}"
                );
                assert_eq!(got.plain.long, want.plain.long, "{output} less {prompt:?}");
                assert_eq!(
                    got.plain.short, want.plain.short,
                    "{output} less {prompt:?}"
                );
            }
        }
    }

    #[test]
    fn hostile_inputs_do_not_panic() {
        let weird = json!({"a": "\u{0}\u{ffff}%zz%%", "b": ["=====", "🙂".repeat(10)], "c": 1e300});
        let p = [
            ("body", json!("%%%% ==== 🙂🙂🙂🙂 ffff \u{202e}abc")),
            ("x", json!({"y": [null, true]})),
        ];
        let _ = found(&weird, &p);
        let big = "a1 ".repeat(100_000);
        let _ = found(&json!({"t": big}), &[("body", json!(big))]);
        // An item that occurs at every position of a long text, glued to letters
        // everywhere (no token): compared as a token once, not once per occurrence.
        let glued = "a".repeat(MAX_CONTENT);
        let items = Items::new(vec![], vec!["a".repeat(8), "aaaa".into()]);
        assert!(!items.plain_in(&glued));
        let less = items.less(&[], std::slice::from_ref(&glued));
        assert_eq!(less.plain.len(), 2);
    }
}
