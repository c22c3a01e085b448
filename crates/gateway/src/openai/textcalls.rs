//! Tool calls written as text in an assistant's `content`, as text-based agent
//! frameworks (ReAct prompts, models without native tool calling) have the model write
//! them. The framework, not the API, parses such a call and runs it, so the proxy reads
//! the text at least as widely as the frameworks' own parsers do, and proposes each call
//! it finds to the run's monitor, like a `tool_calls` entry. Three forms are read:
//!
//! - **ReAct**: `Action: NAME` then, anywhere after it, `Action Input: INPUT` (labels
//!   anywhere in the text, any case, `Action 1:` numbered; the name is what lies
//!   between, its first line; INPUT runs to the end of the text, as LangChain reads it);
//! - **tags**: `<tool_call>{"name": …, "arguments": …}</tool_call>` (Hermes, Qwen) and
//!   `<function=NAME>{…}</function>` (Llama 3.1); a tag that does not close runs to the
//!   end, and a `<tool_call>` whose body does not parse is text that cannot be read
//!   (below);
//! - **JSON objects**: an object or array of objects (bare, or in a code fence) with a
//!   name key (`name`, `tool`, `tool_name`, `action`, or `function: {name, arguments}`)
//!   and an arguments key (`arguments`, `parameters`, `args`, `input`, `tool_input`,
//!   `action_input`). JSON is also how answers carry data, so an object is read as a
//!   call only when one of its names is a tool of the manifest; the ReAct and tag forms
//!   are calls whatever they name (a name the manifest lacks is then blocked).
//!
//! Text that cannot be read exactly — an object whose name keys or arguments keys
//! disagree, a bracketed region naming a tool that does not parse as JSON (Python
//! literals, unclosed objects, nesting past the parser's depth), text built to be
//! scanned again and again — is proposed as one call of the tool [`UNREADABLE`], which
//! no manifest has: it is blocked and struck. Every call found is proposed, calls
//! nested in others included; a blocked call is struck with every call overlapping it.
//!
//! An input that is not a JSON object (a ReAct `Action Input: Paris`) is proposed as
//! the value of the tool's only parameter, or as `{"input": …}` when the tool has
//! several (which its input check then refuses).
//!
//! This is a reading of text, and text can be written in forms no reader lists: the
//! monitor's enforcement of what a framework actually runs is at the tool side, the MCP
//! gateway (`docs/gateway-openai.md`, "Tool calls written as text").

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use knox_policy::ToolkitManifest;
use serde_json::{Map, Value};

use super::conversation::{Decision, ProposedCall};

/// One call found in text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TextCall {
    /// Where it is written: struck from the text when the call is blocked.
    pub span: Range<usize>,
    /// The tool it names.
    pub name: String,
    /// Its arguments, as JSON text (an object).
    pub arguments: String,
    /// `react`, `tool_call`, `function` or `json`.
    pub form: &'static str,
}

/// Text calls proposed by this process: each gets the id `knox-text-<n>`, which no
/// client sees and no answer can name (the framework reports its output in text the
/// proxy cannot attribute: an allowed text call seals as `unanswered`).
static PROPOSED: AtomicU64 = AtomicU64::new(1);

/// A text call as the monitor is asked about it, under an id of its own.
pub(crate) fn proposed(c: &TextCall) -> (String, ProposedCall) {
    let n = PROPOSED.fetch_add(1, Ordering::Relaxed);
    let call = ProposedCall {
        name: c.name.clone(),
        arguments: c.arguments.clone(),
    };
    (format!("knox-text-{n}"), call)
}

/// Keys naming the tool of a JSON call object.
const NAME_KEYS: [&str; 4] = ["name", "tool", "tool_name", "action"];
/// Keys holding a JSON call object's arguments.
const ARGUMENT_KEYS: [&str; 6] = [
    "arguments",
    "parameters",
    "args",
    "input",
    "tool_input",
    "action_input",
];

/// The name proposed for text that cannot be read exactly: no tool has it, so the
/// monitor blocks it and its text is struck.
pub(crate) const UNREADABLE: &str = "knox:unreadable-text";

/// How many bytes [`json_objects`] may scan for each byte of text (plus 1 MiB):
/// ordinary answers scan each byte a few times at most; text built to be scanned
/// again and again (many unclosed, nested openings) is unreadable instead.
const SCAN_FACTOR: usize = 8;

/// Every call written in `text`, in the order they begin (an enclosing call before
/// those nested in it); calls may overlap.
pub(crate) fn detect(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let mut found = react(text, manifest);
    found.extend(tags(text, manifest));
    found.extend(json_objects(text, manifest));
    found.sort_by_key(|c| (c.span.start, std::cmp::Reverse(c.span.end)));
    found.dedup();
    // The same call read twice, once inside the other (an object in an array, the
    // chat-completions shape's inner `function`), is one call: the enclosing reading.
    let mut out: Vec<TextCall> = Vec::with_capacity(found.len());
    for c in found {
        let again = out.iter().any(|o| {
            o.name == c.name
                && o.arguments == c.arguments
                && o.span.start <= c.span.start
                && c.span.end <= o.span.end
        });
        if !again {
            out.push(c);
        }
    }
    out
}

/// The calls to strike: the blocked ones and, transitively, every call overlapping one
/// (an allowed call whose text holds a blocked one would reach the framework changed).
pub(crate) fn struck<'a>(written: &'a [TextCall], decisions: &[Decision]) -> Vec<&'a TextCall> {
    let mut out: Vec<&TextCall> = written
        .iter()
        .zip(decisions)
        .filter(|(_, d)| !d.is_allowed())
        .map(|(c, _)| c)
        .collect();
    loop {
        let more: Vec<&TextCall> = written
            .iter()
            .filter(|c| !out.iter().any(|o| std::ptr::eq(*o, *c)))
            .filter(|c| out.iter().any(|o| overlap(&o.span, &c.span)))
            .collect();
        if more.is_empty() {
            return out;
        }
        out.extend(more);
    }
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// How much of a text still being streamed can be released before the rest is seen:
/// everything before the first place a call could begin — a `{`, `[` or `<`, the word
/// `action` in any case (a ReAct label may stand anywhere), or an ending that may yet
/// become it. Every call [`detect`] finds starts at or after this point.
pub(crate) fn releasable(text: &str, from: usize) -> usize {
    let rest = text.get(from..).unwrap_or_default();
    let bracket = rest.find(['{', '[', '<']).map_or(text.len(), |p| from + p);
    let lower = rest.to_ascii_lowercase();
    let word = lower.find("action").map_or(text.len(), |p| from + p);
    // An ending that is a proper prefix of `action` (`Act`) may become one.
    let tail = (1..6)
        .filter(|n| lower.len() >= *n)
        .find(|n| {
            lower
                .get(lower.len() - n..)
                .is_some_and(|t| "action".starts_with(t))
        })
        .map_or(text.len(), |n| text.len() - n);
    bracket.min(word).min(tail)
}

/// The arguments of a call of `name` given `input` (JSON text, or plain text).
fn arguments(manifest: &ToolkitManifest, name: &str, input: &str) -> String {
    let input = input.trim();
    match serde_json::from_str::<Value>(input) {
        Ok(v @ Value::Object(_)) => v.to_string(),
        Ok(Value::String(s)) => wrap(manifest, name, Value::String(s)),
        Ok(other) => wrap(manifest, name, other),
        Err(_) => wrap(
            manifest,
            name,
            Value::String(input.trim_matches(['"', '\'', '`']).to_owned()),
        ),
    }
}

/// A value that is not an object, as the arguments of tool `name`.
fn wrap(manifest: &ToolkitManifest, name: &str, value: Value) -> String {
    let params = manifest
        .tool(name)
        .or_else(|| manifest.tool(&name.replacen("__", ".", 1)))
        .map(|t| t.spec.parameters.as_slice())
        .unwrap_or_default();
    let key = match params {
        [only] => only.name.clone(),
        _ => "input".to_owned(),
    };
    let mut m = Map::new();
    m.insert(key, value);
    Value::Object(m).to_string()
}

/// An `Action` label at byte `at` of `text` (whose ASCII-lowercased copy is `lower`):
/// `action`, spaces or a step number, `:`; the label's end. With `input`, the
/// `Action Input:` label (`Action 1 Input:`, `action_input:`) instead.
fn label_at(text: &str, lower: &str, at: usize, input: bool) -> Option<usize> {
    if !lower.get(at..)?.starts_with("action") {
        return None;
    }
    let skip = |from: usize, also: &[u8]| {
        let bytes = text.as_bytes();
        let mut i = from;
        while bytes.get(i).is_some_and(|b| {
            b.is_ascii_digit() || matches!(b, b' ' | b'\t' | b'*') || also.contains(b)
        }) {
            i += 1;
        }
        i
    };
    let mut i = skip(at + "action".len(), if input { b"_" } else { b"" });
    if input {
        if !lower.get(i..)?.starts_with("input") {
            return None;
        }
        i = skip(i + "input".len(), b"");
    }
    (text.as_bytes().get(i) == Some(&b':')).then_some(i + 1)
}

/// ReAct: `Action: NAME` then, anywhere after it, `Action Input: INPUT` to the end.
fn react(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let lower = text.to_ascii_lowercase();
    let starts: Vec<usize> = lower.match_indices("action").map(|(p, _)| p).collect();
    let mut calls = Vec::new();
    for (k, &at) in starts.iter().enumerate() {
        if label_at(text, &lower, at, true).is_some() {
            continue;
        }
        let Some(name_from) = label_at(text, &lower, at, false) else {
            continue;
        };
        // The first input label after it.
        let Some((input_at, input_from)) = starts
            .iter()
            .skip(k + 1)
            .filter(|p| **p >= name_from)
            .find_map(|p| label_at(text, &lower, *p, true).map(|e| (*p, e)))
        else {
            continue;
        };
        let between = &text[name_from..input_at];
        let name = between
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default()
            .trim_matches(['`', '"', '\'', '*'])
            .trim()
            .to_owned();
        let input = text[input_from..].trim_end();
        let input = input.trim_start_matches(['*', ' ', '\t']);
        let arguments = arguments(manifest, &name, strip_fence(input));
        calls.push(TextCall {
            span: at..text.trim_end().len().max(input_from),
            name,
            arguments,
            form: "react",
        });
    }
    calls
}

/// The text inside a code fence, when `s` is one.
fn strip_fence(s: &str) -> &str {
    let t = s.trim();
    let Some(inner) = t.strip_prefix("```") else {
        return t;
    };
    let inner = inner.split_once('\n').map_or(inner, |(_, body)| body);
    inner.trim_end().strip_suffix("```").unwrap_or(inner).trim()
}

/// `<tool_call>{…}</tool_call>` and `<function=NAME>{…}</function>`; a tag the text
/// ends inside (the model stopped there) runs to the end.
fn tags(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let mut calls = Vec::new();
    let mut at = 0;
    let mut no_close_bracket_after = usize::MAX;
    while let Some(off) = text[at..].find('<') {
        let start = at + off;
        let rest = &text[start..];
        if let Some(body) = rest.strip_prefix("<tool_call>") {
            let (inner, len) = until_close(body, "</tool_call>");
            let end = start + "<tool_call>".len() + len;
            let read = match serde_json::from_str::<Value>(strip_fence(inner)) {
                Ok(Value::Object(o)) => call_object(&o, manifest, false),
                _ => None,
            };
            let (name, arguments) =
                read.unwrap_or_else(|| (UNREADABLE.to_owned(), "{}".to_owned()));
            calls.push(TextCall {
                span: start..end,
                name,
                arguments,
                form: "tool_call",
            });
            at = end.max(start + 1);
            continue;
        }
        if let Some(after) = rest.strip_prefix("<function=")
            && start < no_close_bracket_after
        {
            let Some(close) = after.find('>') else {
                // No `>` anywhere after: none after any later `<function=` either.
                no_close_bracket_after = start;
                at = start + 1;
                continue;
            };
            let name = after[..close].trim().trim_matches(['"', '\'']).to_owned();
            let body = &after[close + 1..];
            let (inner, len) = until_close(body, "</function>");
            let end = start + "<function=".len() + close + 1 + len;
            if !name.is_empty() {
                calls.push(TextCall {
                    span: start..end,
                    arguments: arguments(manifest, &name, strip_fence(inner)),
                    name,
                    form: "function",
                });
            }
            at = end.max(start + 1);
            continue;
        }
        at = start + 1;
    }
    calls
}

/// The text before `close` in `body` and the length consumed (through `close`); all of
/// `body` when it never closes.
fn until_close<'a>(body: &'a str, close: &str) -> (&'a str, usize) {
    match body.find(close) {
        Some(p) => (&body[..p], p + close.len()),
        None => (body, body.len()),
    }
}

/// Whether tool `name` is in the manifest (a `__` standing for the first `.`).
fn known(manifest: &ToolkitManifest, name: &str) -> bool {
    manifest.tool(name).is_some() || manifest.tool(&name.replacen("__", ".", 1)).is_some()
}

/// A JSON object read as a call: its tool name and arguments. With `needs_tool`, one
/// of its names must be a tool of the manifest. An object whose name keys, or whose
/// arguments keys, disagree (a framework may read either) is [`UNREADABLE`].
fn call_object(
    o: &Map<String, Value>,
    manifest: &ToolkitManifest,
    needs_tool: bool,
) -> Option<(String, String)> {
    // The chat-completions shape: {"type": "function", "function": {"name", "arguments"}}.
    if let Some(Value::Object(f)) = o.get("function")
        && let Some(r) = call_object(f, manifest, needs_tool)
    {
        return Some(r);
    }
    let mut names: Vec<&str> = NAME_KEYS
        .iter()
        .filter_map(|k| o.get(*k).and_then(Value::as_str))
        .map(str::trim)
        .collect();
    names.dedup();
    let mut args: Vec<&Value> = ARGUMENT_KEYS.iter().filter_map(|k| o.get(*k)).collect();
    args.dedup();
    let first = *names.first()?;
    if args.is_empty() || first.is_empty() {
        return None;
    }
    if needs_tool && !names.iter().any(|n| known(manifest, n)) {
        return None;
    }
    if names.len() > 1 || args.len() > 1 {
        return Some((UNREADABLE.to_owned(), "{}".to_owned()));
    }
    let args = args.first()?;
    let arguments = match args {
        Value::Object(_) => args.to_string(),
        Value::String(s) => arguments(manifest, first, s),
        other => wrap(manifest, first, (*other).clone()),
    };
    Some((first.to_owned(), arguments))
}

/// JSON values in `text` (each `{` or `[`, nested ones too) that are call objects, or
/// arrays of them, naming tools of the manifest; a bracketed region that names a tool
/// but does not parse (or never closes) is [`UNREADABLE`]. A value's extent is found by
/// one scan of its brackets and strings before it is parsed; when the scans would
/// exceed the bound, the rest of the text from the first unscanned opening is one
/// [`UNREADABLE`] call.
fn json_objects(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let names: Vec<String> = manifest
        .tools()
        .flat_map(|t| [t.name.clone(), t.name.replacen('.', "__", 1)])
        .collect();
    // A region that quotes a name key and holds a tool's name reads as a call attempt.
    let names_a_tool = |region: &str| {
        NAME_KEYS
            .iter()
            .any(|k| region.contains(&format!("\"{k}\"")) || region.contains(&format!("'{k}'")))
            && names.iter().any(|n| region.contains(n.as_str()))
    };
    let mut calls = Vec::new();
    let mut at = 0;
    let mut budget = text
        .len()
        .saturating_mul(SCAN_FACTOR)
        .saturating_add(1 << 20);
    while let Some(off) = text[at..].find(['{', '[']) {
        let start = at + off;
        let (len, scanned) = extent(&text[start..]);
        let Some(left) = budget.checked_sub(scanned) else {
            calls.push(unreadable(start..text.len()));
            break;
        };
        budget = left;
        let region = &text[start..len.map_or(text.len(), |l| start + l)];
        let span = start..start + region.len();
        match serde_json::from_str::<Value>(region) {
            Ok(v) => {
                let objects: Vec<&Map<String, Value>> = match &v {
                    Value::Object(o) => vec![o],
                    Value::Array(a) => a.iter().filter_map(Value::as_object).collect(),
                    _ => Vec::new(),
                };
                // An array is one span, shared by its calls: when one of them is
                // blocked, the whole array is struck.
                for (name, arguments) in objects
                    .iter()
                    .filter_map(|o| call_object(o, manifest, true))
                {
                    calls.push(TextCall {
                        span: span.clone(),
                        name,
                        arguments,
                        form: "json",
                    });
                }
            }
            // Brackets that do not parse, or never close, yet name a tool: a framework
            // with a laxer parser might run them.
            Err(_) if names_a_tool(region) => calls.push(unreadable(span)),
            Err(_) => {}
        }
        // Calls nested inside are read too.
        at = start + 1;
    }
    calls
}

fn unreadable(span: Range<usize>) -> TextCall {
    TextCall {
        span,
        name: UNREADABLE.to_owned(),
        arguments: "{}".to_owned(),
        form: "json",
    }
}

/// The length of the JSON value `s` opens with (its first byte is `{` or `[`), by its
/// brackets and strings alone — `None` when it never closes (or closes with the other
/// bracket) — and how many bytes were scanned to find out.
fn extent(s: &str) -> (Option<usize>, usize) {
    let mut stack: Vec<u8> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                if stack.pop() != Some(b) {
                    return (None, i + 1);
                }
                if stack.is_empty() {
                    return (Some(i + 1), i + 1);
                }
            }
            _ => {}
        }
    }
    (None, s.len())
}

/// A text once the calls written in it are decided ([`release`]).
#[derive(Debug)]
pub(crate) struct Released {
    /// The text as released: struck calls replaced by [`WITHHELD`], calls allowed as
    /// their plan step writes them written anew with those arguments.
    pub text: String,
    /// Indices (into the written calls) of calls allowed as planned that cannot be
    /// written anew in place: a JSON object (which keys its reader takes is unknown),
    /// or a call overlapping another. Struck, so that nothing runs in a form the
    /// monitor did not execute.
    pub unwritable: Vec<usize>,
}

/// The call `c` written anew in its own form with `arguments` (JSON text); `None` for
/// a JSON object, whose reader's keys are unknown.
fn written_anew(c: &TextCall, arguments: &str) -> Option<String> {
    match c.form {
        "react" => Some(format!("Action: {}\nAction Input: {arguments}", c.name)),
        "function" => Some(format!("<function={}>{arguments}</function>", c.name)),
        "tool_call" => {
            let args = serde_json::from_str::<Value>(arguments).ok()?;
            let body = serde_json::json!({"name": c.name, "arguments": args});
            Some(format!("<tool_call>{body}</tool_call>"))
        }
        _ => None,
    }
}

/// `text` once its `written` calls are decided (`decisions`, in order): blocked calls
/// struck — with those allowed as planned that cannot be written anew in place (see
/// [`Released`]) and every call overlapping one — and calls allowed as their plan step
/// writes them written anew in place.
pub(crate) fn release(text: &str, written: &[TextCall], decisions: &[Decision]) -> Released {
    let overlaps_another = |i: usize, c: &TextCall| {
        written
            .iter()
            .enumerate()
            .any(|(k, o)| k != i && overlap(&o.span, &c.span))
    };
    let mut anew: Vec<(usize, String)> = Vec::new();
    let mut unwritable = Vec::new();
    for (i, (c, d)) in written.iter().zip(decisions).enumerate() {
        if let Decision::Allowed { arguments: Some(a) } = d {
            match written_anew(c, a).filter(|_| !overlaps_another(i, c)) {
                Some(t) => anew.push((i, t)),
                None => unwritable.push(i),
            }
        }
    }
    let effective: Vec<Decision> = decisions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if unwritable.contains(&i) {
                Decision::Blocked {
                    guard: String::new(),
                    reason: String::new(),
                }
            } else {
                d.clone()
            }
        })
        .collect();
    let struck = struck(written, &effective);
    // Struck spans (merged) become WITHHELD; a call written anew (which overlaps no
    // other call, so no struck span) becomes its new text.
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut spans: Vec<Range<usize>> = struck.iter().map(|c| c.span.clone()).collect();
    spans.sort_by_key(|s| s.start);
    for s in spans {
        match edits.last_mut() {
            Some((m, _)) if s.start < m.end => m.end = m.end.max(s.end),
            _ => edits.push((s, WITHHELD.to_owned())),
        }
    }
    for (i, t) in anew {
        if let Some(c) = written.get(i) {
            edits.push((c.span.clone(), t));
        }
    }
    edits.sort_by_key(|(s, _)| s.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (s, t) in edits {
        if s.start < at {
            continue;
        }
        out.push_str(text.get(at..s.start).unwrap_or_default());
        out.push_str(&t);
        at = s.end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    Released {
        text: out,
        unwritable,
    }
}

/// What stands in an answer's text where a blocked call was written.
pub(crate) const WITHHELD: &str = "[knox: call withheld]";

/// The text with the spans of `struck` calls (merged where they overlap) replaced by
/// [`WITHHELD`] (which joins with nothing around it into a call).
pub(crate) fn without(text: &str, struck: &[&TextCall]) -> String {
    let mut spans: Vec<Range<usize>> = struck.iter().map(|c| c.span.clone()).collect();
    spans.sort_by_key(|s| s.start);
    let mut merged: Vec<Range<usize>> = Vec::new();
    for s in spans {
        match merged.last_mut() {
            Some(m) if s.start < m.end => m.end = m.end.max(s.end),
            _ => merged.push(s),
        }
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for s in merged {
        out.push_str(&text[at..s.start]);
        out.push_str(WITHHELD);
        at = s.end;
    }
    out.push_str(&text[at..]);
    out
}

/// The text a client is finally given: any call it reads as, from byte `from` on, that
/// is not one of the `allowed` calls (name and arguments) is struck too — a call the
/// rewriting itself formed, or one a note's quoted text carries. A call before `from`
/// was released already (a stream's text; [`releasable`] keeps every call after it).
pub(crate) fn settled(
    mut text: String,
    manifest: &ToolkitManifest,
    allowed: &[(String, String)],
    from: usize,
) -> String {
    // Each round strikes every stray call found (and those overlapping it); striking
    // can form a new one only where text was struck, so rounds are few. Past the bound,
    // the rest is struck.
    for _ in 0..8 {
        let found = detect(&text, manifest);
        let decisions: Vec<Decision> = found
            .iter()
            .map(|c| {
                let ok = c.span.start < from
                    || allowed
                        .iter()
                        .any(|(n, a)| *n == c.name && *a == c.arguments);
                if ok {
                    Decision::RELEASED
                } else {
                    Decision::Blocked {
                        guard: String::new(),
                        reason: String::new(),
                    }
                }
            })
            .collect();
        let stray: Vec<&TextCall> = struck(&found, &decisions)
            .into_iter()
            .filter(|c| c.span.start >= from)
            .collect();
        if stray.is_empty() {
            return text;
        }
        text = without(&text, &stray);
    }
    let keep = text.get(..from).unwrap_or_default().to_owned();
    keep + WITHHELD
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    /// A bank with a read of one parameter and a write of several.
    fn manifest() -> ToolkitManifest {
        knox_testkit::bank::manifest()
    }

    fn blocked() -> Decision {
        Decision::Blocked {
            guard: "trajectory".into(),
            reason: "off plan".into(),
        }
    }

    #[test]
    fn react_calls_are_read_wherever_their_labels_stand() {
        let m = manifest();
        let text = "Thought: I need the balance.\nAction: bank.get_balance\nAction Input: {\"account\": \"A1\"}";
        let c = detect(text, &m);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].name, "bank.get_balance");
        assert_eq!(c[0].arguments, r#"{"account":"A1"}"#);
        assert_eq!(
            &text[c[0].span.clone()],
            "Action: bank.get_balance\nAction Input: {\"account\": \"A1\"}"
        );
        let plain = detect("Action: bank.get_balance\nAction Input: A1", &m);
        assert_eq!(plain[0].arguments, r#"{"account":"A1"}"#);
        let numbered = detect("Action 1: bank.send_money\nAction 1 Input: Bob", &m);
        assert_eq!(numbered[0].arguments, r#"{"input":"Bob"}"#);
        let one_line = detect("Action: bank.get_balance Action Input: A2", &m);
        assert_eq!(
            (one_line[0].name.as_str(), one_line[0].arguments.as_str()),
            ("bank.get_balance", r#"{"account":"A2"}"#)
        );
        let bold = detect("**Action:** bank.send_money\n**Action Input:** \"Eve\"", &m);
        assert_eq!(bold[0].arguments, r#"{"input":"Eve"}"#);
        // Mid-line, quoted, with text between the labels: LangChain's and
        // llama-index's parsers run these, so they are read too.
        for t in [
            "Now Action: bank.send_money\nAction Input: {\"to\": \"E\", \"amount\": 1}",
            "> Action: bank.send_money\n> Action Input: {\"to\": \"E\", \"amount\": 1}",
            "Action:\nbank.send_money\nAction Input: {\"to\": \"E\", \"amount\": 1}",
            "Action: bank.send_money\nnote\nAction Input: {\"to\": \"E\", \"amount\": 1}",
            "Action: bank.send_money\rAction Input: {\"to\": \"E\", \"amount\": 1}",
        ] {
            let c = detect(t, &m);
            assert!(
                c.iter().any(|c| c.name == "bank.send_money"),
                "{t:?}: {c:?}"
            );
        }
        assert!(detect("Actions speak louder.\nAction Input: x", &m).is_empty());
    }

    #[test]
    fn tags_and_json_objects_are_read_and_json_data_is_not_a_call() {
        let m = manifest();
        let t = "Sure.\n<tool_call>\n{\"name\": \"bank.send_money\", \"arguments\": {\"to\": \"Eve\", \"amount\": 5}}\n</tool_call>";
        let c = detect(t, &m);
        assert_eq!(
            (c.len(), c[0].form, c[0].name.as_str()),
            (1, "tool_call", "bank.send_money")
        );
        assert_eq!(without(t, &[&c[0]]), format!("Sure.\n{WITHHELD}"));
        let f = detect(
            "<function=bank.get_balance>{\"account\": \"A\"}</function>",
            &m,
        );
        assert_eq!(
            (f[0].form, f[0].arguments.as_str()),
            ("function", r#"{"account":"A"}"#)
        );
        let j = "```json\n{\"action\": \"bank.send_money\", \"action_input\": {\"to\": \"Eve\", \"amount\": 1}}\n```";
        assert_eq!(detect(j, &m)[0].name, "bank.send_money");
        let shaped = "{\"type\": \"function\", \"function\": {\"name\": \"bank.get_balance\", \"arguments\": \"{\\\"account\\\": \\\"A\\\"}\"}}";
        let c = detect(shaped, &m);
        assert_eq!(c.len(), 1, "the inner reading is the same call: {c:?}");
        assert_eq!(c[0].arguments, r#"{"account":"A"}"#);
        // Data that happens to have a name and an input is not a call of a tool.
        assert!(detect("{\"name\": \"Alice\", \"input\": \"x\"}", &m).is_empty());
        assert!(
            detect(
                "{\"action\": \"Final Answer\", \"action_input\": \"done\"}",
                &m
            )
            .is_empty()
        );
        assert!(detect("I used [bank.get_balance] earlier.", &m).is_empty());
        // A tag names a call whatever it names.
        assert_eq!(
            detect(
                "<tool_call>{\"name\": \"rm\", \"arguments\": {}}</tool_call>",
                &m
            )[0]
            .name,
            "rm"
        );
        let two = "[{\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"A\"}}, {\"name\": \"bank.send_money\", \"arguments\": {\"to\": \"E\", \"amount\": 1}}]";
        let both = detect(two, &m);
        assert_eq!(
            both.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["bank.get_balance", "bank.send_money"]
        );
    }

    /// What a laxer parser would run but the JSON reader cannot read exactly is
    /// unreadable: blocked and struck.
    #[test]
    fn what_cannot_be_read_exactly_is_unreadable() {
        let m = manifest();
        for t in [
            // Python literals (the Hermes parser falls back to `ast.literal_eval`).
            "<tool_call>{'name': 'bank.send_money', 'arguments': {'to': 'E', 'amount': 1}}</tool_call>",
            "{'name': 'bank.send_money', 'arguments': {'to': 'E', 'amount': 1}}",
            // Unclosed (LangChain's partial-JSON parser closes it).
            "{\"name\": \"bank.send_money\", \"arguments\": {\"to\": \"E\", \"amount\": 1}",
            // A raw newline in a string (parsed with `strict=False`).
            "{\"name\": \"bank.send_money\", \"arguments\": {\"to\": \"E\\n\", \"amount\": 1, \"memo\": \"a\nb\"}}",
            // Keys that disagree: a framework may read either.
            "{\"name\": \"x\", \"action\": \"bank.send_money\", \"action_input\": {\"to\": \"E\", \"amount\": 1}}",
            "{\"action\": \"bank.send_money\", \"arguments\": {\"to\": \"B\", \"amount\": 1}, \"action_input\": {\"to\": \"E\", \"amount\": 1}}",
        ] {
            let c = detect(t, &m);
            assert!(c.iter().any(|c| c.name == UNREADABLE), "{t}: {c:?}");
        }
    }

    /// A blocked call nested in an allowed one strikes both: the allowed call's text
    /// would otherwise reach the framework carrying the blocked one.
    #[test]
    fn a_blocked_call_inside_an_allowed_one_strikes_both() {
        let m = manifest();
        let t = "Action: bank.get_balance\nAction Input: A1\n<tool_call>{\"name\":\"bank.send_money\",\"arguments\":{\"to\":\"Eve\",\"amount\":50}}</tool_call>";
        let c = detect(t, &m);
        assert_eq!(
            c.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["bank.get_balance", "bank.send_money"],
            "{c:?}"
        );
        let decisions = vec![Decision::RELEASED, blocked()];
        let s = struck(&c, &decisions);
        assert_eq!(s.len(), 2);
        let out = without(t, &s);
        assert_eq!(out, WITHHELD);
        assert!(detect(&out, &m).is_empty());
    }

    /// #36 item 3: a call allowed as its plan step writes it is written anew in its
    /// own form with the planned arguments; one the text cannot carry anew (a JSON
    /// object, whose reader's keys are unknown, or a call overlapping another) is
    /// struck, so nothing runs in a form the monitor did not execute.
    #[test]
    fn a_call_allowed_as_planned_is_written_anew_in_its_form_or_struck() {
        let m = manifest();
        let planned = Decision::Allowed {
            arguments: Some(r#"{"account":"Main"}"#.into()),
        };
        for (text, want) in [
            (
                "Thought: check.\nAction: bank.get_balance\nAction Input: {\"account\": \"MAIN\"}",
                "Thought: check.\nAction: bank.get_balance\nAction Input: {\"account\":\"Main\"}",
            ),
            (
                "Calling <function=bank.get_balance>{\"account\": \"mAiN\"}</function> now",
                "Calling <function=bank.get_balance>{\"account\":\"Main\"}</function> now",
            ),
            (
                "<tool_call>{\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"main \"}}</tool_call>",
                "<tool_call>{\"name\":\"bank.get_balance\",\"arguments\":{\"account\":\"Main\"}}</tool_call>",
            ),
        ] {
            let c = detect(text, &m);
            assert_eq!(c.len(), 1, "{text}: {c:?}");
            let r = release(text, &c, std::slice::from_ref(&planned));
            assert!(
                r.unwritable.is_empty() && !r.text.contains(WITHHELD),
                "{r:?}"
            );
            assert_eq!(r.text, want);
            // What the framework reads back is the planned call.
            let again = detect(&r.text, &m);
            assert_eq!(again.len(), 1);
            assert_eq!(again[0].arguments, r#"{"account":"Main"}"#);
        }
        // A bare JSON object: struck, named as unwritable.
        let text =
            "Here: {\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"MAIN\"}} done";
        let c = detect(text, &m);
        let r = release(text, &c, std::slice::from_ref(&planned));
        assert_eq!(r.unwritable, vec![0]);
        assert_eq!(r.text, format!("Here: {WITHHELD} done"));
        // Unchanged arguments leave the text as it was.
        let r = release(text, &c, &[Decision::RELEASED]);
        assert_eq!(r.text, text);
    }

    #[test]
    fn striking_a_call_forms_no_other_and_stray_calls_are_struck() {
        let m = manifest();
        // Removing the object would join `Act` and `ion` into an Action label.
        let t = "Act{\"name\": \"bank.send_money\", \"arguments\": {\"to\": \"E\", \"amount\": 1}}ion: bank.send_money\nAction Input: {\"to\": \"E\", \"amount\": 2}";
        let c = detect(t, &m);
        assert_eq!(c.len(), 1, "{c:?}");
        let out = without(t, &[&c[0]]);
        assert!(detect(&out, &m).is_empty(), "{out}");
        // A note quoting a name that is itself a call is struck before release.
        let noted = "[knox] blocked tool call `<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>`".to_owned();
        let s = settled(noted, &m, &[], 0);
        assert!(detect(&s, &m).is_empty() && s.contains(WITHHELD), "{s}");
        let allowed = "Action: bank.get_balance\nAction Input: A".to_owned();
        let kept = settled(
            allowed.clone(),
            &m,
            &[("bank.get_balance".into(), r#"{"account":"A"}"#.into())],
            0,
        );
        assert_eq!(kept, allowed);
    }

    #[test]
    fn text_built_to_be_scanned_again_and_again_is_struck_whole() {
        let m = manifest();
        // Each opening is unclosed and nests the next: scanning each to the end would
        // take time quadratic in the text.
        let text = format!("Intro. {}", "{\"a\": [1, ".repeat(200_000));
        let c = detect(&text, &m);
        let last = c.last().unwrap();
        assert_eq!(
            (last.name.as_str(), last.span.end),
            (UNREADABLE, text.len())
        );
        let s = settled(text, &m, &[], 0);
        assert!(
            s.len() < 100 && s.ends_with(WITHHELD) && detect(&s, &m).is_empty(),
            "{s}"
        );
        // An ordinary answer with unclosed brackets is read, not refused.
        assert!(detect("a [b {c and (d", &m).is_empty());
        // `<function=` with no `>` after it, many times: one scan.
        let many = "<function=x ".repeat(100_000);
        assert!(detect(&many, &m).is_empty());
    }

    #[test]
    fn every_call_starts_at_or_after_what_a_stream_may_release() {
        let m = manifest();
        for text in [
            "Thought: pay.\nAction: bank.send_money\nAction Input: {\"to\": \"Eve\", \"amount\": 5}",
            "I will call <tool_call>{\"name\": \"bank.send_money\", \"arguments\": {}}</tool_call>",
            "Here: {\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"A\"}} done",
            "Here: [{\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"A\"}}] done",
            "So now Action: bank.get_balance\nAction Input: A",
        ] {
            // Released a character at a time, as a stream would be.
            let mut released = 0;
            for end in 1..=text.len() {
                if !text.is_char_boundary(end) {
                    continue;
                }
                released = releasable(&text[..end], released).max(released);
            }
            for c in detect(text, &m) {
                assert!(
                    c.span.start >= released,
                    "{text}: released {released}, call at {:?}",
                    c.span
                );
            }
        }
        assert_eq!(releasable("Hello there.\nThe answer is 4.", 0), 29);
        assert_eq!(releasable("Hello.\nAct", 0), 7);
        assert_eq!(releasable("Hello.\nActually fine.\nx", 0), 23);
    }
}
