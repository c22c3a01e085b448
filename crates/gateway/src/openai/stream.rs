//! Streaming: content deltas pass as they come; a choice's `tool_calls` deltas are held
//! until the choice finishes (its `finish_reason` chunk, else the stream's end), then
//! mediated together. Allowed calls are released whole in one chunk (each call's id,
//! name and complete arguments, re-indexed from 0) before the finishing chunk; blocked
//! ones are never released — a content chunk names them instead, and a `finish_reason`
//! of `tool_calls` with nothing left becomes `stop`, as in [`super::mediate`].
//!
//! With text calls read ([`super::textcalls`]), a choice's content passes as it comes
//! up to the first place a call could be written (a `{`, a `<`, an `Action` line); the
//! rest is held until the choice finishes, read for calls, and released in one chunk
//! with any blocked call's text removed.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use knox_policy::ToolkitManifest;

use super::conversation::{Decision, ProposedCall};
use super::error::ApiError;
use super::mediate::{blocked_entry, note, written_notes};
use super::textcalls;

/// One call's deltas, accumulated.
#[derive(Default, Debug)]
struct Held {
    id: String,
    name: String,
    arguments: String,
}

/// Proposes the calls of one choice; one decision each, in order.
pub(crate) type Mediate<'a> =
    dyn FnMut(Vec<(String, ProposedCall)>) -> Result<Vec<Decision>, ApiError> + 'a;

/// One choice's content, as far as it came, and how much of it was released.
#[derive(Default, Debug)]
struct Text {
    text: String,
    released: usize,
    /// The text is held from `released` on for good (a `{`, `[`, `<` or `action` stands
    /// there): later deltas need not be read for a release point.
    held: bool,
}

/// The state of one streamed completion.
#[derive(Default, Debug)]
pub(crate) struct StreamMediator<'m> {
    /// Held calls, by choice index then call index.
    held: BTreeMap<u64, BTreeMap<u64, Held>>,
    /// Each choice's content, when text calls are read.
    texts: BTreeMap<u64, Text>,
    /// The manifest text calls are read against; `None`: they are not read.
    text_calls: Option<&'m ToolkitManifest>,
    /// `id`, `object`, `created`, `model` of the stream's chunks (for the chunks the
    /// proxy writes).
    template: Map<String, Value>,
    /// The run, named in the chunk reporting blocked calls.
    run: String,
}

impl<'m> StreamMediator<'m> {
    /// A stream of run `run`; text calls read against `text_calls` unless `None`.
    pub(super) fn new(run: &str, text_calls: Option<&'m ToolkitManifest>) -> Self {
        Self {
            run: run.to_owned(),
            text_calls,
            ..Self::default()
        }
    }

    /// Takes one upstream chunk; returns the chunks to send, in order.
    pub(super) fn feed(
        &mut self,
        mut chunk: Value,
        mediate: &mut Mediate<'_>,
    ) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        if let Value::Object(o) = &chunk {
            for k in ["id", "object", "created", "model", "system_fingerprint"] {
                if let Some(v) = o.get(k) {
                    self.template.insert(k.into(), v.clone());
                }
            }
        }
        let Some(Value::Array(choices)) = chunk.get_mut("choices") else {
            out.push(chunk);
            return Ok(out);
        };
        let had_choices = !choices.is_empty();
        let mut kept = Vec::new();
        for mut choice in std::mem::take(choices) {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let finish = choice
                .get("finish_reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
            // A finishing chunk's content is held whole: the flush releases it after the
            // rest held before it, in order.
            self.hold(index, &mut choice, finish.is_some());
            if let Some(reason) = finish {
                let (chunks, all_blocked) = self.flush(index, mediate)?;
                out.extend(chunks);
                if all_blocked
                    && reason == "tool_calls"
                    && let Some(o) = choice.as_object_mut()
                {
                    o.insert("finish_reason".into(), json!("stop"));
                }
                kept.push(choice);
            } else if choice
                .get("delta")
                .and_then(Value::as_object)
                .is_some_and(|d| !d.is_empty())
            {
                kept.push(choice);
            }
        }
        if !had_choices || !kept.is_empty() {
            if let Some(c) = chunk.get_mut("choices") {
                *c = Value::Array(kept);
            }
            out.push(chunk);
        }
        Ok(out)
    }

    /// At the stream's end: mediates and releases the calls of choices that never
    /// finished.
    pub(super) fn finish(&mut self, mediate: &mut Mediate<'_>) -> Result<Vec<Value>, ApiError> {
        let mut out = Vec::new();
        let mut choices: Vec<u64> = self.held.keys().copied().collect();
        choices.extend(self.texts.keys().copied());
        choices.sort_unstable();
        choices.dedup();
        for index in choices {
            out.extend(self.flush(index, mediate)?.0);
        }
        Ok(out)
    }

    /// Moves a choice's `tool_calls` deltas into the held calls, and (text calls read)
    /// its content into the choice's text, leaving in the delta what may be released.
    fn hold(&mut self, index: u64, choice: &mut Value, finishing: bool) {
        let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) else {
            return;
        };
        if self.text_calls.is_some()
            && let Some(Value::String(content)) = delta.get("content")
        {
            let t = self.texts.entry(index).or_default();
            t.text.push_str(content);
            let upto = if finishing || t.held {
                t.released
            } else {
                textcalls::releasable(&t.text, t.released).max(t.released)
            };
            // Held for good unless only an ending that may become `action` holds it.
            let rest = t.text.get(upto..).unwrap_or_default();
            t.held = rest.starts_with(['{', '[', '<'])
                || rest
                    .get(..6)
                    .is_some_and(|w| w.eq_ignore_ascii_case("action"));
            let release = t.text[t.released..upto].to_owned();
            t.released = upto;
            if release.is_empty() && !content.is_empty() {
                delta.remove("content");
            } else {
                delta.insert("content".into(), Value::String(release));
            }
        }
        let Some(Value::Array(deltas)) = delta.remove("tool_calls") else {
            return;
        };
        let held = self.held.entry(index).or_default();
        for (pos, d) in deltas.iter().enumerate() {
            let i = d
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(u64::try_from(pos).unwrap_or(u64::MAX));
            let h = held.entry(i).or_default();
            if let Some(id) = d.get("id").and_then(Value::as_str) {
                id.clone_into(&mut h.id);
            }
            let f = d.get("function");
            if let Some(n) = f.and_then(|f| f.get("name")).and_then(Value::as_str) {
                h.name.push_str(n);
            }
            if let Some(a) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                h.arguments.push_str(a);
            }
        }
    }

    /// Mediates a choice's held calls (those written in its held text first); returns
    /// the chunks releasing its held text and the allowed calls and naming the blocked
    /// ones, and whether every `tool_calls` call was blocked.
    fn flush(
        &mut self,
        index: u64,
        mediate: &mut Mediate<'_>,
    ) -> Result<(Vec<Value>, bool), ApiError> {
        let held = self.held.remove(&index).unwrap_or_default();
        let text = self.texts.remove(&index);
        let written = match (&text, self.text_calls) {
            (Some(t), Some(m)) => textcalls::detect(&t.text, m),
            _ => Vec::new(),
        };
        let mut calls: Vec<(String, ProposedCall)> =
            written.iter().map(textcalls::proposed).collect();
        let n_written = calls.len();
        calls.extend(held.into_values().map(|h| {
            let call = ProposedCall {
                name: h.name,
                arguments: h.arguments,
            };
            (h.id, call)
        }));
        let decisions = if calls.is_empty() {
            Vec::new()
        } else {
            mediate(calls.clone())?
        };
        let mut released = Vec::new();
        let written_decisions = decisions.get(..n_written).unwrap_or_default();
        let released_upto = text.as_ref().map_or(0, |t| t.released);
        // The held rest of the text: the blocked calls' text struck from it (and calls
        // allowed as planned written anew), the notes after it, and then anything in
        // it that still reads as a call not allowed.
        let (mut whole, unwritable) = match &text {
            Some(t) => {
                let r = textcalls::release(&t.text, &written, written_decisions);
                (r.text, r.unwritable)
            }
            None => (String::new(), Vec::new()),
        };
        let (mut notes, mut blocked) = written_notes(
            &written,
            calls.get(..n_written).unwrap_or_default(),
            written_decisions,
            &unwritable,
        );
        for ((id, call), d) in calls.iter().zip(&decisions).skip(n_written) {
            match d {
                Decision::Allowed { .. } => released.push(json!({
                    "index": released.len(), "id": id, "type": "function",
                    "function": {"name": call.name, "arguments": d.arguments(call)}})),
                Decision::Blocked { guard, reason } => {
                    notes.push(note(&call.name, guard, reason));
                    blocked.extend(blocked_entry(id, &call.name, d));
                }
            }
        }
        let rewritten = written_decisions.iter().any(|d| *d != Decision::RELEASED);
        if !notes.is_empty() {
            whole.push_str("\n\n");
            whole.push_str(&notes.join("\n"));
        }
        // Nothing struck or written anew and no note: the text is what was read, every
        // call in it allowed as written.
        if let (Some(m), true) = (self.text_calls, rewritten || !notes.is_empty()) {
            let allowed: Vec<(String, String)> = written
                .iter()
                .zip(&calls)
                .zip(&decisions)
                .filter(|(_, d)| d.is_allowed())
                .map(|((w, (_, call)), d)| (w.name.clone(), d.arguments(call).to_owned()))
                .collect();
            whole = textcalls::settled(whole, m, &allowed, released_upto);
        }
        let content = whole.get(released_upto..).unwrap_or_default().to_owned();
        let mut out = Vec::new();
        if !content.is_empty() {
            let mut c = self.chunk(index, json!({ "content": content }));
            if !blocked.is_empty()
                && let Some(o) = c.as_object_mut()
            {
                o.insert("knox".into(), json!({"run": self.run, "blocked": blocked}));
            }
            out.push(c);
        }
        let native = calls.len() - n_written;
        let all_blocked = native > 0 && released.is_empty();
        if !released.is_empty() {
            out.push(self.chunk(index, json!({"tool_calls": released})));
        }
        Ok((out, all_blocked))
    }

    /// A chunk the proxy writes for choice `index`.
    fn chunk(&self, index: u64, delta: Value) -> Value {
        let mut c = self.template.clone();
        c.insert(
            "choices".into(),
            json!([{"index": index, "delta": delta, "finish_reason": null}]),
        );
        Value::Object(c)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn delta(d: Value, finish: Option<&str>) -> Value {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})
    }

    #[test]
    fn held_calls_are_released_only_after_mediation_and_blocked_ones_never() {
        let mut m = StreamMediator::new("run-0000", None);
        let mut seen = Vec::new();
        let mut mediate = |calls: Vec<(String, ProposedCall)>| {
            seen.extend(calls.iter().map(|(_, c)| c.arguments.clone()));
            Ok(calls
                .iter()
                .map(|(_, c)| {
                    if c.name == "send" {
                        Decision::Blocked {
                            guard: "trajectory".into(),
                            reason: "off plan".into(),
                        }
                    } else {
                        Decision::RELEASED
                    }
                })
                .collect())
        };
        let mut out = Vec::new();
        for c in [
            delta(json!({"role": "assistant", "content": ""}), None),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "send", "arguments": "{\"to\""}}]}),
                None,
            ),
            delta(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": ": \"x\"}"}}]}),
                None,
            ),
            delta(
                json!({"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}),
                None,
            ),
        ] {
            let chunks = m.feed(c, &mut mediate).unwrap();
            assert!(
                chunks.iter().all(|c| !c.to_string().contains("tool_calls")),
                "released early: {chunks:?}"
            );
            out.extend(chunks);
        }
        out.extend(
            m.feed(delta(json!({}), Some("tool_calls")), &mut mediate)
                .unwrap(),
        );
        assert_eq!(seen, vec!["{\"to\": \"x\"}".to_string(), "{}".to_string()]);
        let text = serde_json::to_string(&out).unwrap();
        let released_ids: Vec<&Value> = out
            .iter()
            .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
            .flat_map(|t| t.as_array().unwrap())
            .map(|t| &t["id"])
            .collect();
        assert_eq!(released_ids, vec![&json!("b")], "{text}");
        let released = out
            .iter()
            .find(|c| c["choices"][0]["delta"].get("tool_calls").is_some())
            .unwrap();
        assert_eq!(released["choices"][0]["delta"]["tool_calls"][0]["id"], "b");
        assert_eq!(released["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(
            out.last().unwrap()["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert!(text.contains("blocked tool call `send`"));
    }

    /// #36 item 3: a held call the monitor executes as its plan step writes it is
    /// released with the planned arguments, never the model's.
    #[test]
    fn a_held_call_allowed_as_planned_is_released_with_the_planned_arguments() {
        let mut m = StreamMediator::new("run-0000", None);
        let mut mediate = |calls: Vec<(String, ProposedCall)>| {
            Ok(calls
                .iter()
                .map(|_| Decision::Allowed {
                    arguments: Some(r#"{"q":"Inbox"}"#.into()),
                })
                .collect())
        };
        let mut out = Vec::new();
        for c in [
            delta(json!({"role": "assistant", "content": ""}), None),
            delta(
                json!({"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "read", "arguments": "{\"q\": \"INBOX\"}"}}]}),
                None,
            ),
            delta(json!({}), Some("tool_calls")),
        ] {
            out.extend(m.feed(c, &mut mediate).unwrap());
        }
        let released: Vec<&Value> = out
            .iter()
            .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
            .flat_map(|t| t.as_array().unwrap())
            .collect();
        assert_eq!(released.len(), 1, "{out:?}");
        assert_eq!(released[0]["function"]["arguments"], r#"{"q":"Inbox"}"#);
        assert!(!serde_json::to_string(&out).unwrap().contains("INBOX"));
    }
}
