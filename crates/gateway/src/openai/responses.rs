//! `POST /v1/responses`: the OpenAI Responses API (the OpenAI Agents SDK's default),
//! served by the proxy over the upstream's chat completions, with the same mediation
//! and evidence as `POST /v1/chat/completions`.
//!
//! A Responses request is read as the chat-completions request it means — its
//! `instructions` a system message, its `input` (text, or items: messages,
//! `function_call`, `function_call_output`) messages, its function tools chat tools,
//! the history of `previous_response_id` (which the proxy keeps) before them — and runs
//! through the conversation that request belongs to, as a chat request would: the tool
//! results it carries recorded, the upstream asked (never streamed: the proxy holds
//! every call until it is decided anyway), every `tool_calls` entry of the answer
//! mediated, blocked ones withheld and named. The mediated answer is returned as a
//! Responses object: an assistant `message` output item when there is text, one
//! `function_call` item per released call (`call_id` the call's id). With `stream:
//! true` the same response is sent as the Responses event stream
//! (`response.created` … `response.completed`), built from the decided answer.
//!
//! Only function tools are mediated; a request naming another tool type (web search,
//! file search, computer use) is refused (400), since the proxy could not see those
//! calls.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

use super::error::ApiError;

/// How many responses the proxy remembers for `previous_response_id` (the oldest are
/// forgotten first; a request naming one forgotten is refused, 400).
pub(crate) const MAX_REMEMBERED: usize = 10_000;

/// The histories of the responses the proxy gave: for each response id, the messages
/// up to and including its answer (without the request's `instructions`, which a
/// follow-up gives anew, as the Responses API does).
#[derive(Default)]
pub(crate) struct Histories {
    inner: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    by_id: HashMap<String, Vec<Value>>,
    order: VecDeque<String>,
}

impl Histories {
    fn get(&self, id: &str) -> Option<Vec<Value>> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_id
            .get(id)
            .cloned()
    }

    fn insert(&self, id: String, messages: Vec<Value>) {
        let mut r = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if r.by_id.insert(id.clone(), messages).is_none() {
            r.order.push_back(id);
        }
        while r.order.len() > MAX_REMEMBERED {
            if let Some(old) = r.order.pop_front() {
                r.by_id.remove(&old);
            }
        }
    }
}

/// A Responses request read as a chat-completions request.
#[derive(Debug)]
pub(crate) struct Translated {
    /// The chat-completions body sent upstream (not streamed).
    pub chat: Value,
    /// Its messages without the `instructions` system message (the history a
    /// follow-up continues).
    pub history: Vec<Value>,
    /// The request's `model`.
    pub model: String,
    /// Whether the client asked for the event stream.
    pub stream: bool,
    /// The request's `tools`, echoed in the response.
    pub tools: Value,
    /// The request's `tool_choice`, echoed in the response.
    pub tool_choice: Value,
    /// The request's `instructions`, echoed in the response.
    pub instructions: Value,
    /// The request's `previous_response_id`, echoed in the response.
    pub previous: Value,
}

impl Translated {
    /// The chat messages (the upstream body's).
    pub(super) fn messages(&self) -> &[Value] {
        super::proxy::messages(&self.chat)
    }
}

fn bad(why: impl Into<String>) -> ApiError {
    ApiError::BadRequest(why.into())
}

/// The text of a Responses content: a string, or its parts' `text` joined (input and
/// output text; other parts — images, files — carry no text the proxy can relay).
fn content_text(content: &Value) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        texts.push(p.get("text").and_then(Value::as_str).unwrap_or_default());
                    }
                    Some("refusal") => {
                        texts.push(p.get("refusal").and_then(Value::as_str).unwrap_or_default());
                    }
                    Some(other) => {
                        return Err(bad(format!(
                            "a content part of type `{other}`: the proxy relays text parts only"
                        )));
                    }
                    None => return Err(bad("a content part without a `type`")),
                }
            }
            Ok(texts.join("\n"))
        }
        Value::Null => Ok(String::new()),
        _ => Err(bad(
            "a message's `content` must be a string or an array of parts",
        )),
    }
}

/// The chat messages of a Responses `input`.
fn input_messages(input: &Value) -> Result<Vec<Value>, ApiError> {
    let items = match input {
        Value::String(s) => return Ok(vec![json!({"role": "user", "content": s})]),
        Value::Array(items) => items,
        _ => return Err(bad("`input` must be a string or an array of items")),
    };
    let mut out: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            None | Some("message") => {
                let role = item
                    .get("role")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("input item {i}: a message needs a `role`")))?;
                if !matches!(role, "user" | "system" | "developer" | "assistant") {
                    return Err(bad(format!("input item {i}: unknown role `{role}`")));
                }
                let text = content_text(item.get("content").unwrap_or(&Value::Null))
                    .map_err(|e| bad(format!("input item {i}: {e}")))?;
                out.push(json!({"role": role, "content": text}));
            }
            Some("function_call") => {
                let field = |k: &str| {
                    item.get(k)
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad(format!("input item {i}: `function_call` needs `{k}`")))
                };
                let call = json!({"id": field("call_id")?, "type": "function",
                    "function": {"name": field("name")?, "arguments": field("arguments")?}});
                // Calls of one answer are one assistant message's `tool_calls`.
                let joined = out.last_mut().and_then(|m| {
                    let open = m.get("role").and_then(Value::as_str) == Some("assistant");
                    open.then(|| m.get_mut("tool_calls").and_then(Value::as_array_mut))
                        .flatten()
                });
                match joined {
                    Some(calls) => calls.push(call),
                    None => out
                        .push(json!({"role": "assistant", "content": null, "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => {
                let id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| {
                    bad(format!(
                        "input item {i}: `function_call_output` needs `call_id`"
                    ))
                })?;
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => {
                        content_text(v).map_err(|e| bad(format!("input item {i}: {e}")))?
                    }
                    Some(other) => other.to_string(),
                    None => String::new(),
                };
                out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
            // What a model reasoned: not relayed to a chat-completions upstream.
            Some("reasoning") => {}
            Some(other) => {
                return Err(bad(format!(
                    "input item {i} of type `{other}`: the proxy mediates messages and function calls only"
                )));
            }
        }
    }
    Ok(out)
}

/// The chat tools of Responses function tools; any other tool type is refused.
fn chat_tools(tools: &Value) -> Result<Option<Value>, ApiError> {
    let list = match tools {
        Value::Null => return Ok(None),
        Value::Array(l) if l.is_empty() => return Ok(None),
        Value::Array(l) => l,
        _ => return Err(bad("`tools` must be an array")),
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("tool {i}: a function tool needs a `name`")))?;
                let mut f = Map::new();
                f.insert("name".into(), json!(name));
                for k in ["description", "parameters", "strict"] {
                    if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                        f.insert(k.into(), v.clone());
                    }
                }
                out.push(json!({"type": "function", "function": f}));
            }
            Some(other) => {
                return Err(bad(format!(
                    "tool {i} of type `{other}`: the proxy mediates function tools only (it could not see those calls)"
                )));
            }
            None => return Err(bad(format!("tool {i} has no `type`"))),
        }
    }
    Ok(Some(Value::Array(out)))
}

/// Reads a Responses request body: the chat request it means, with the history of
/// its `previous_response_id` from `histories`.
pub(crate) fn translate(bytes: &[u8], histories: &Histories) -> Result<Translated, ApiError> {
    let body: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("the body is not JSON: {e}")))?;
    if !body.is_object() {
        return Err(bad("the body must be a JSON object"));
    }
    let (model, stream) = super::proxy::model_and_stream(&body);
    let previous = body
        .get("previous_response_id")
        .cloned()
        .unwrap_or(Value::Null);
    let mut history = match &previous {
        Value::Null => Vec::new(),
        Value::String(id) => histories.get(id).ok_or_else(|| {
            bad(format!(
                "previous response `{id}` is not known to this proxy (it remembers the last {MAX_REMEMBERED} responses it gave)"
            ))
        })?,
        _ => return Err(bad("`previous_response_id` must be a string")),
    };
    history.extend(input_messages(body.get("input").unwrap_or(&Value::Null))?);
    if history.is_empty() {
        return Err(bad("`input` is empty"));
    }
    let instructions = body.get("instructions").cloned().unwrap_or(Value::Null);
    let mut messages = Vec::with_capacity(history.len() + 1);
    match &instructions {
        Value::Null => {}
        Value::String(s) => messages.push(json!({"role": "system", "content": s})),
        _ => return Err(bad("`instructions` must be a string")),
    }
    messages.extend(history.iter().cloned());
    let mut chat = Map::new();
    chat.insert("model".into(), json!(model));
    chat.insert("messages".into(), Value::Array(messages));
    let tools = body.get("tools").cloned().unwrap_or(Value::Null);
    if let Some(t) = chat_tools(&tools)? {
        chat.insert("tools".into(), t);
    }
    let tool_choice = body.get("tool_choice").cloned().unwrap_or(Value::Null);
    match &tool_choice {
        Value::Null => {}
        Value::String(_) => {
            chat.insert("tool_choice".into(), tool_choice.clone());
        }
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
            let name = o.get("name").cloned().unwrap_or(Value::Null);
            chat.insert(
                "tool_choice".into(),
                json!({"type": "function", "function": {"name": name}}),
            );
        }
        _ => return Err(bad("`tool_choice` must be a string or a function choice")),
    }
    for (from, to) in [
        ("parallel_tool_calls", "parallel_tool_calls"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("max_output_tokens", "max_tokens"),
        ("user", "user"),
    ] {
        if let Some(v) = body.get(from).filter(|v| !v.is_null()) {
            chat.insert(to.into(), v.clone());
        }
    }
    Ok(Translated {
        chat: Value::Object(chat),
        history,
        model,
        stream,
        tools: if tools.is_null() { json!([]) } else { tools },
        tool_choice: if tool_choice.is_null() {
            json!("auto")
        } else {
            tool_choice
        },
        instructions,
        previous,
    })
}

/// A fresh identifier: `prefix` and 24 random hex digits.
pub(crate) fn fresh_id(prefix: &str) -> String {
    let mut b = [0u8; 12];
    // Without randomness, the time still makes it unique within the process.
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b.copy_from_slice(&t.to_be_bytes()[4..]);
    }
    format!("{prefix}_{}", hex::encode(b))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The Responses object of a mediated chat completion (its first choice), and the
/// assistant message the history keeps. `completion` is the proxy's rewritten answer,
/// with its `knox` report.
pub(crate) fn response(
    t: &Translated,
    completion: &Value,
    histories: &Histories,
) -> Result<Value, ApiError> {
    let message = completion
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|c| c.get("message"))
        .ok_or_else(|| bad("the upstream's answer has no choice"))?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let calls: Vec<&Value> = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let mut output = Vec::new();
    if !text.is_empty() {
        output.push(json!({
            "type": "message", "id": fresh_id("msg"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }));
    }
    for c in &calls {
        let f = c.get("function");
        let arguments = match f.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        };
        output.push(json!({
            "type": "function_call", "id": fresh_id("fc"), "status": "completed",
            "call_id": c.get("id").cloned().unwrap_or(Value::Null),
            "name": f.and_then(|f| f.get("name")).cloned().unwrap_or(Value::Null),
            "arguments": arguments,
        }));
    }
    let usage = completion.get("usage").map(|u| {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        json!({"input_tokens": n("prompt_tokens"), "output_tokens": n("completion_tokens"),
               "total_tokens": n("total_tokens")})
    });
    let id = fresh_id("resp");
    let mut history = t.history.clone();
    let mut kept = Map::new();
    kept.insert("role".into(), json!("assistant"));
    kept.insert(
        "content".into(),
        if text.is_empty() {
            Value::Null
        } else {
            json!(text)
        },
    );
    if !calls.is_empty() {
        kept.insert(
            "tool_calls".into(),
            Value::Array(calls.iter().map(|c| (*c).clone()).collect()),
        );
    }
    history.push(Value::Object(kept));
    histories.insert(id.clone(), history);
    Ok(json!({
        "id": id,
        "object": "response",
        "created_at": unix_now(),
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "instructions": t.instructions,
        "model": if t.model.is_empty() { completion.get("model").cloned().unwrap_or(Value::Null) } else { json!(t.model) },
        "output": output,
        "parallel_tool_calls": t.chat.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
        "previous_response_id": t.previous,
        "tool_choice": t.tool_choice,
        "tools": t.tools,
        "usage": usage,
        "knox": completion.get("knox").cloned().unwrap_or(Value::Null),
    }))
}

/// The Responses event stream of a finished `response`: `(event type, data)` in
/// order, each with its `sequence_number`.
pub(crate) fn events(response: &Value) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut push = |kind: &str, mut data: Value| {
        if let Some(o) = data.as_object_mut() {
            o.insert("type".into(), json!(kind));
            o.insert("sequence_number".into(), json!(out.len()));
        }
        out.push((kind.to_owned(), data));
    };
    let mut started = response.clone();
    if let Some(o) = started.as_object_mut() {
        o.insert("status".into(), json!("in_progress"));
        o.insert("output".into(), json!([]));
        o.insert("usage".into(), Value::Null);
    }
    push("response.created", json!({"response": started.clone()}));
    push("response.in_progress", json!({"response": started}));
    let items = response
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        let id = item.get("id").cloned().unwrap_or(Value::Null);
        let mut pending = item.clone();
        if let Some(o) = pending.as_object_mut() {
            o.insert("status".into(), json!("in_progress"));
            if o.contains_key("content") {
                o.insert("content".into(), json!([]));
            }
            if o.contains_key("arguments") {
                o.insert("arguments".into(), json!(""));
            }
        }
        push(
            "response.output_item.added",
            json!({"output_index": i, "item": pending}),
        );
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let text = item
                    .pointer("/content/0/text")
                    .cloned()
                    .unwrap_or_else(|| json!(""));
                let empty = json!({"type": "output_text", "text": "", "annotations": []});
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                let at = |extra: Value| {
                    let mut v = json!({"item_id": id, "output_index": i, "content_index": 0});
                    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
                        o.extend(e);
                    }
                    v
                };
                push("response.content_part.added", at(json!({"part": empty})));
                push(
                    "response.output_text.delta",
                    at(json!({"delta": text, "logprobs": []})),
                );
                push(
                    "response.output_text.done",
                    at(json!({"text": text, "logprobs": []})),
                );
                push("response.content_part.done", at(json!({"part": part})));
            }
            Some("function_call") => {
                let arguments = item.get("arguments").cloned().unwrap_or_else(|| json!(""));
                push(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": i, "delta": arguments}),
                );
                push(
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": i, "arguments": arguments}),
                );
            }
            _ => {}
        }
        push(
            "response.output_item.done",
            json!({"output_index": i, "item": item}),
        );
    }
    push("response.completed", json!({"response": response}));
    out
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn items_become_the_chat_messages_they_mean() {
        let h = Histories::default();
        let body = json!({
            "model": "m", "instructions": "Be careful.",
            "input": [
                {"role": "user", "content": "pay"},
                {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{\"a\":1}"},
                {"type": "function_call_output", "call_id": "c1", "output": "7"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and?"}]},
            ],
            "tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}}],
            "max_output_tokens": 50,
        });
        let t = translate(body.to_string().as_bytes(), &h).unwrap();
        let m = t.messages();
        assert_eq!(m[0], json!({"role": "system", "content": "Be careful."}));
        assert_eq!(m[1], json!({"role": "user", "content": "pay"}));
        assert_eq!(
            m[2]["tool_calls"].as_array().unwrap().len(),
            2,
            "one answer's calls"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "7"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "and?"}));
        assert_eq!(t.chat["tools"][0]["function"]["name"], "read");
        assert_eq!(t.chat["max_tokens"], 50);
        assert_eq!(t.history.len(), 4, "the instructions are not history");
    }

    #[test]
    fn a_follow_up_continues_the_history_and_unknown_ids_and_tools_are_refused() {
        let h = Histories::default();
        let t = translate(br#"{"model":"m","input":"hi"}"#, &h).unwrap();
        let completion = json!({"choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}}],
            "knox": {"run": "conv-x-0000", "blocked": []}});
        let r = response(&t, &completion, &h).unwrap();
        assert_eq!(r["output"][0]["type"], "function_call");
        assert_eq!(r["output"][0]["call_id"], "c9");
        let id = r["id"].as_str().unwrap();
        let next = json!({"model": "m", "previous_response_id": id,
            "input": [{"type": "function_call_output", "call_id": "c9", "output": "ok"}]});
        let t2 = translate(next.to_string().as_bytes(), &h).unwrap();
        let m = t2.messages();
        assert_eq!(m.len(), 3);
        assert_eq!(m[1]["tool_calls"][0]["id"], "c9");
        assert_eq!(m[2]["role"], "tool");
        for (body, what) in [
            (
                json!({"input": "x", "previous_response_id": "resp_nope"}),
                "not known",
            ),
            (
                json!({"input": "x", "tools": [{"type": "web_search"}]}),
                "function tools only",
            ),
            (
                json!({"input": [{"type": "computer_call"}]}),
                "messages and function calls only",
            ),
            (json!({"input": 3}), "`input` must be"),
            (json!({"input": []}), "empty"),
        ] {
            let e = translate(body.to_string().as_bytes(), &h).unwrap_err();
            assert!(e.to_string().contains(what), "{e}");
        }
    }

    #[test]
    fn the_event_stream_carries_every_item_and_ends_completed() {
        let h = Histories::default();
        let t = translate(br#"{"model":"m","input":"hi","stream":true}"#, &h).unwrap();
        let completion = json!({"choices": [{"message": {"role": "assistant", "content": "Done.",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}}]});
        let r = response(&t, &completion, &h).unwrap();
        let ev = events(&r);
        let kinds: Vec<&str> = ev.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"response.created"));
        assert_eq!(kinds.last(), Some(&"response.completed"));
        assert!(kinds.contains(&"response.output_text.delta"));
        assert!(kinds.contains(&"response.function_call_arguments.done"));
        let seq: Vec<u64> = ev
            .iter()
            .map(|(_, d)| d["sequence_number"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, (0..ev.len() as u64).collect::<Vec<_>>());
    }
}
