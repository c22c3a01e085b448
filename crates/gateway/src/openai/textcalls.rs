//! Tool calls written as text in an assistant's `content`, as text-based agent
//! frameworks (ReAct prompts, models without native tool calling) have the model write
//! them. The framework, not the API, parses such a call and runs it, so the proxy reads
//! the same text the framework will and proposes each call it finds to the run's
//! monitor, like a `tool_calls` entry. Three forms are read:
//!
//! - **ReAct**: a line `Action: NAME` followed by `Action Input: INPUT` (INPUT runs to
//!   the end of the text or to an `Observation:` line);
//! - **tags**: `<tool_call>{"name": …, "arguments": …}</tool_call>` (Hermes, Qwen) and
//!   `<function=NAME>{…}</function>` (Llama 3.1);
//! - **JSON objects**: an object (bare, or in a code fence) with a name key (`name`,
//!   `tool`, `tool_name`, `action`, or `function: {name, arguments}`) and an arguments
//!   key (`arguments`, `parameters`, `args`, `input`, `tool_input`, `action_input`).
//!   JSON is also how answers carry data, so an object is read as a call only when its
//!   name is a tool of the manifest; the ReAct and tag forms are calls whatever they
//!   name (a name the manifest lacks is then blocked).
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

use super::conversation::ProposedCall;

/// One call found in text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TextCall {
    /// Where it is written: removed from the text when the call is blocked.
    pub span: Range<usize>,
    /// The tool it names.
    pub name: String,
    /// Its arguments, as JSON text (an object).
    pub arguments: String,
    /// `react`, `tool_call`, `function` or `json`.
    pub form: &'static str,
}

/// Text calls proposed by this process: each gets the id `text-<n>`, which no client
/// sees and no answer can name (the framework reports its output in text the proxy
/// cannot attribute: an allowed text call seals as `unanswered`).
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

/// The calls written in `text`, in the order they appear, none overlapping (but the
/// calls of one JSON array, which share its span).
pub(crate) fn detect(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let mut found = react(text, manifest);
    found.extend(tags(text, manifest));
    found.extend(json_objects(text, manifest));
    found.sort_by_key(|c| (c.span.start, std::cmp::Reverse(c.span.end)));
    let mut calls: Vec<TextCall> = Vec::new();
    for c in found {
        if calls
            .last()
            .is_none_or(|l| c.span.start >= l.span.end || c.span == l.span)
        {
            calls.push(c);
        }
    }
    calls
}

/// How much of a text still being streamed can be released before the rest is seen:
/// everything before the first place a call could begin (a `{`, a `<`, a line starting
/// `Action`, or a last line that may yet become one). Every call [`detect`] finds
/// starts at or after this point.
pub(crate) fn releasable(text: &str, from: usize) -> usize {
    let brace = text[from..]
        .find(['{', '<'])
        .map_or(text.len(), |p| from + p);
    // Each line from the one holding `from` on: an `Action` line, or a last line that
    // may still become one, holds the text from its start.
    let mut line_start = text[..from].rfind('\n').map_or(0, |p| p + 1);
    while line_start < brace {
        let line_end = text[line_start..]
            .find('\n')
            .map_or(text.len(), |p| line_start + p);
        let complete = line_end < text.len();
        if action_line(&text[line_start..line_end], complete) {
            return line_start.max(from).min(brace);
        }
        if !complete {
            break;
        }
        line_start = line_end + 1;
    }
    brace
}

/// Whether `line` starts as [`label`] reads an `Action` label, or (not `complete`)
/// may still become one.
fn action_line(line: &str, complete: bool) -> bool {
    let t = line.trim_start_matches(['*', '#', ' ', '\t']);
    let head: String = t.chars().take(6).flat_map(char::to_lowercase).collect();
    head == "action" || (!complete && "action".starts_with(&head))
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

/// ReAct: `Action: NAME` then `Action Input: INPUT` (on the next non-blank line, or on
/// the same line after the name).
fn react(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let mut calls = Vec::new();
    let lines = line_spans(text);
    let mut i = 0;
    while let Some(&(start, end)) = lines.get(i) {
        let Some(named) = label(&text[start..end], "Action").filter(|n| !n.is_empty()) else {
            i += 1;
            continue;
        };
        let (name, first, in_end, mut k) = if let Some(p) = same_line_input(named) {
            (
                &named[..p],
                input_label(&named[p..]).unwrap_or_default(),
                end,
                i + 1,
            )
        } else {
            // The next non-blank line must be the input.
            let mut j = i + 1;
            while lines
                .get(j)
                .is_some_and(|&(a, b)| text[a..b].trim().is_empty())
            {
                j += 1;
            }
            let Some(&(in_start, in_end)) = lines.get(j) else {
                break;
            };
            let Some(first) = input_label(&text[in_start..in_end]) else {
                i += 1;
                continue;
            };
            (named, first, in_end, j + 1)
        };
        // The input runs on to an `Observation:`, `Thought:` or `Action` line, or the
        // end of the text.
        let mut input = first.to_owned();
        let mut span_end = in_end;
        while let Some(&(l_start, l_end)) = lines.get(k) {
            let l = &text[l_start..l_end];
            if label(l, "Observation").is_some()
                || label(l, "Thought").is_some()
                || action_line(l, true)
            {
                break;
            }
            input.push('\n');
            input.push_str(l);
            span_end = l_end;
            k += 1;
        }
        let name = name
            .trim()
            .trim_matches(['`', '"', '\'', '*'])
            .trim()
            .to_owned();
        let arguments = arguments(manifest, &name, strip_fence(&input));
        calls.push(TextCall {
            span: start..span_end,
            name,
            arguments,
            form: "react",
        });
        i = k;
    }
    calls
}

/// Where an `Action Input` label starts in the rest of an `Action:` line, if it does.
fn same_line_input(named: &str) -> Option<usize> {
    let lower = named.to_ascii_lowercase();
    let mut at = 0;
    while let Some(p) = lower[at..].find("action") {
        let pos = at + p;
        if input_label(&named[pos..]).is_some() {
            return Some(pos);
        }
        at = pos + 1;
    }
    None
}

/// `LABEL:` (any case, spaces around the colon, an optional step number: `Action 1:`,
/// markdown emphasis or heading marks around it) at the start of `line`: what follows,
/// trimmed.
fn label<'a>(line: &'a str, label: &str) -> Option<&'a str> {
    let line = line.trim_start_matches(['*', '#', ' ', '\t']);
    let head = line.get(..label.len())?;
    if !head.eq_ignore_ascii_case(label) {
        return None;
    }
    let rest = line[label.len()..].trim_start_matches(number);
    let rest = rest.strip_prefix(':')?;
    Some(rest.trim_start_matches('*').trim())
}

/// An `Action Input:` label (`Action 1 Input:`, `action_input:`, any case) at the start
/// of `line`: what follows, trimmed.
fn input_label(line: &str) -> Option<&str> {
    let line = line.trim_start_matches(['*', '#', ' ', '\t']);
    let head = line.get(..6)?;
    if !head.eq_ignore_ascii_case("action") {
        return None;
    }
    let rest = line[6..].trim_start_matches(|c: char| number(c) || c == '_');
    label(rest, "Input")
}

/// What may stand between a label's word and its colon.
fn number(c: char) -> bool {
    c.is_ascii_digit() || c == ' ' || c == '*' || c == '\t'
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

/// Each line's byte span (without its newline).
fn line_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            spans.push((start, i));
            start = i + 1;
        }
    }
    if start <= text.len() {
        spans.push((start, text.len()));
    }
    spans
}

/// `<tool_call>{…}</tool_call>` and `<function=NAME>{…}</function>`; a tag the text
/// ends inside (the model stopped there) runs to the end.
fn tags(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
    let mut calls = Vec::new();
    let mut at = 0;
    while let Some(off) = text[at..].find('<') {
        let start = at + off;
        let rest = &text[start..];
        if let Some(body) = rest.strip_prefix("<tool_call>") {
            let (inner, len) = until_close(body, "</tool_call>");
            let end = start + "<tool_call>".len() + len;
            if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(strip_fence(inner))
                && let Some((name, args)) = call_object(&o, manifest, false)
            {
                calls.push(TextCall {
                    span: start..end,
                    name,
                    arguments: args,
                    form: "tool_call",
                });
            }
            at = end.max(start + 1);
            continue;
        }
        if let Some(after) = rest.strip_prefix("<function=")
            && let Some(close) = after.find('>')
        {
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

/// A JSON object read as a call: its tool name and arguments. With `needs_tool`, the
/// name must be a tool of the manifest.
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
    let name = NAME_KEYS
        .iter()
        .find_map(|k| o.get(*k).and_then(Value::as_str))?
        .trim()
        .to_owned();
    let args = ARGUMENT_KEYS.iter().find_map(|k| o.get(*k))?;
    let known =
        manifest.tool(&name).is_some() || manifest.tool(&name.replacen("__", ".", 1)).is_some();
    if name.is_empty() || (needs_tool && !known) {
        return None;
    }
    let arguments = match args {
        Value::Object(_) => args.to_string(),
        Value::String(s) => arguments(manifest, &name, s),
        other => wrap(manifest, &name, other.clone()),
    };
    Some((name, arguments))
}

/// The name proposed for text that could not be read for calls within bounds (see
/// [`json_objects`]): no tool has it, so the monitor blocks it and its text is struck.
pub(crate) const UNREADABLE: &str = "knox:unreadable-text";

/// How many bytes [`json_objects`] may scan for each byte of text (plus 1 MiB):
/// ordinary answers scan each byte a few times at most; text built to be scanned
/// again and again (many unclosed, nested openings) is refused instead.
const SCAN_FACTOR: usize = 8;

/// JSON values in `text` (each `{` or `[` not inside an earlier call) that are call
/// objects, or arrays of them, naming tools of the manifest. A value's extent is found
/// by one scan of its brackets and strings before it is parsed; when the scans would
/// exceed the bound, the rest of the text from the first unscanned opening is one
/// [`UNREADABLE`] call.
fn json_objects(text: &str, manifest: &ToolkitManifest) -> Vec<TextCall> {
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
            calls.push(TextCall {
                span: start..text.len(),
                name: UNREADABLE.to_owned(),
                arguments: "{}".to_owned(),
                form: "json",
            });
            break;
        };
        budget = left;
        let parsed = len.and_then(|l| {
            serde_json::from_str::<Value>(&text[start..start + l])
                .ok()
                .map(|v| (v, l))
        });
        let Some((v, len)) = parsed else {
            at = start + 1;
            continue;
        };
        let span = start..start + len;
        let objects: Vec<&Map<String, Value>> = match &v {
            Value::Object(o) => vec![o],
            Value::Array(a) => a.iter().filter_map(Value::as_object).collect(),
            _ => Vec::new(),
        };
        let found: Vec<(String, String)> = objects
            .iter()
            .filter_map(|o| call_object(o, manifest, true))
            .collect();
        if found.is_empty() {
            // Not a call: a call may still be nested in it.
            at = start + 1;
            continue;
        }
        // An array is one span, shared by its calls: when one of them is blocked, the
        // whole array is struck.
        for (name, arguments) in found {
            calls.push(TextCall {
                span: span.clone(),
                name,
                arguments,
                form: "json",
            });
        }
        at = span.end;
    }
    calls
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

/// What stands in an answer's text where a blocked call was written.
pub(crate) const WITHHELD: &str = "[knox: call withheld]";

/// The text with the spans of `blocked` calls replaced by [`WITHHELD`] (which joins
/// with nothing around it into a call; calls sharing a span strike it once).
pub(crate) fn without(text: &str, blocked: &[&TextCall]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut spans: Vec<&Range<usize>> = blocked.iter().map(|c| &c.span).collect();
    spans.sort_by_key(|s| s.start);
    for s in spans {
        if s.start < at {
            continue;
        }
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
    // Each round strikes every stray call found; striking can form a new one only
    // where text was struck, so rounds are few. Past the bound, the rest is struck.
    for _ in 0..8 {
        let stray: Vec<TextCall> = detect(&text, manifest)
            .into_iter()
            .filter(|c| {
                c.span.start >= from
                    && !allowed
                        .iter()
                        .any(|(n, a)| *n == c.name && *a == c.arguments)
            })
            .collect();
        if stray.is_empty() {
            return text;
        }
        text = without(&text, &stray.iter().collect::<Vec<_>>());
    }
    let keep = text.get(..from).unwrap_or_default().to_owned();
    keep + WITHHELD
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn manifest() -> ToolkitManifest {
        ToolkitManifest::from_toolkit_text(include_str!("../../../../examples/bank/bank.toml"))
            .unwrap()
    }

    #[test]
    fn react_calls_are_read_with_json_or_plain_input() {
        let m = manifest();
        let text = "Thought: I need the balance.\nAction: bank.get_balance\nAction Input: {\"account\": \"A1\"}\nObservation:";
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
        let other = detect("**Action:** bank.send_money\n**Action Input:** \"Eve\"", &m);
        assert_eq!(other[0].arguments, r#"{"input":"Eve"}"#);
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
        let fenced = "{\"type\": \"function\", \"function\": {\"name\": \"bank.get_balance\", \"arguments\": \"{\\\"account\\\": \\\"A\\\"}\"}}";
        assert_eq!(detect(fenced, &m)[0].arguments, r#"{"account":"A"}"#);
        // Data that happens to have a name and an input is not a call of a tool.
        assert!(detect("{\"name\": \"Alice\", \"input\": \"x\"}", &m).is_empty());
        assert!(
            detect(
                "{\"action\": \"Final Answer\", \"action_input\": \"done\"}",
                &m
            )
            .is_empty()
        );
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

    #[test]
    fn striking_a_call_forms_no_other_and_stray_calls_are_struck() {
        let m = manifest();
        // Removing the object would join `Act` and `ion` into an Action line.
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
    }

    #[test]
    fn every_call_starts_at_or_after_what_a_stream_may_release() {
        let m = manifest();
        for text in [
            "Thought: pay.\nAction: bank.send_money\nAction Input: {\"to\": \"Eve\", \"amount\": 5}",
            "I will call <tool_call>{\"name\": \"bank.send_money\", \"arguments\": {}}</tool_call>",
            "Here: {\"name\": \"bank.get_balance\", \"arguments\": {\"account\": \"A\"}} done",
            "  Action: bank.get_balance\n  Action Input: A",
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
