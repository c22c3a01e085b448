//! What the client gets when the monitor blocks a call: the call is removed from
//! `tool_calls` (never released, not even its name in a `tool_calls` entry), and the
//! assistant message says so in its `content`:
//!
//! ```text
//! [knox] blocked tool call `send_money` (trajectory): <reason>. It was not run; continue without it.
//! ```
//!
//! appended (after a blank line) to any text the model wrote. When no call is left, the
//! `tool_calls` key is dropped and a `finish_reason` of `tool_calls` becomes `stop`: the
//! client's loop sees a final answer naming the refusal, never a call it must answer.
//! When some calls are left, they pass with the same ids and names, and `finish_reason`
//! stays `tool_calls`; their arguments are the model's, except where the monitor
//! executes a call as its plan step writes it (an APM with `closed.planned`) and that
//! differs from what the model wrote (a folded text's case, a set's order): the planned
//! arguments are released instead, so the client runs what the evidence records. The response also carries
//! `"knox": {"run": RUN, "blocked": [{"id", "name", "guard", "reason"}]}` (SDKs ignore
//! unknown fields).

use serde_json::{Map, Value, json};

use super::conversation::{Decision, ProposedCall};
use super::textcalls::{self, TextCall};

/// The note naming one blocked call, as the assistant's content carries it.
pub fn note(name: &str, guard: &str, reason: &str) -> String {
    format!(
        "[knox] blocked tool call `{name}` ({guard}): {reason}. It was not run; continue without it."
    )
}

/// The guard named for a call allowed as its plan step writes it whose text could not
/// be written anew in place ([`textcalls::Released::unwritable`]).
pub(crate) const UNWRITABLE_GUARD: &str = "planned";

/// Why such a call is withheld.
pub(crate) fn unwritable_reason(arguments: &str) -> String {
    format!(
        "the plan writes this call with the arguments {arguments}, and a call written in this form cannot be rewritten in place; write it with those arguments"
    )
}

/// Why an assistant message (or a streamed choice's delta) cannot reach the client:
/// it carries a call the proxy would not mediate — a legacy `function_call` (the API
/// before `tools`), or `tool_calls` that is not an array. A client could run either
/// without the monitor seeing it, so the whole answer is refused as malformed.
pub(crate) fn unmediable(message: &Value) -> Option<&'static str> {
    if message.get("function_call").is_some_and(|v| !v.is_null()) {
        return Some(
            "it carries a legacy `function_call`, which Knox does not mediate: ask with `tools`",
        );
    }
    if message
        .get("tool_calls")
        .is_some_and(|v| !v.is_null() && !v.is_array())
    {
        return Some("its `tool_calls` is not an array");
    }
    None
}

/// One `tool_calls` entry as the proxy reads it: its id and the call. An entry that is
/// not a function call with a string name is proposed with an empty name (and blocked).
pub(crate) fn read_call(entry: &Value) -> (String, ProposedCall) {
    let id = super::string_member(Some(entry), "id");
    let f = entry.get("function");
    let name = super::string_member(f, "name");
    let arguments = match f.and_then(|f| f.get("arguments")) {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    (id, ProposedCall { name, arguments })
}

/// A blocked call, as the `knox.blocked` list reports it.
pub(crate) fn blocked_entry(id: &str, name: &str, d: &Decision) -> Option<Value> {
    match d {
        Decision::Allowed { .. } => None,
        Decision::Blocked { guard, reason } => {
            Some(json!({"id": id, "name": name, "guard": guard, "reason": reason}))
        }
    }
}

/// Rewrites one assistant `message` (and its choice's `finish_reason`) after the
/// decisions on its `tool_calls`, in order; returns the notes of the blocked ones.
pub(crate) fn apply(
    choice: &mut Map<String, Value>,
    calls: &[(String, ProposedCall)],
    decisions: &[Decision],
) -> Vec<Value> {
    let mut blocked = Vec::new();
    let mut notes = Vec::new();
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return blocked;
    };
    let Some(Value::Array(entries)) = message.remove("tool_calls") else {
        return blocked;
    };
    let mut kept = Vec::new();
    for ((entry, (id, call)), d) in entries.into_iter().zip(calls).zip(decisions) {
        match d {
            Decision::Allowed { arguments: None } => kept.push(entry),
            Decision::Allowed { arguments: Some(a) } => {
                // Released as the plan writes it: the arguments the monitor executes.
                let mut entry = entry;
                if let Some(Value::Object(f)) = entry.get_mut("function") {
                    f.insert("arguments".into(), Value::String(a.clone()));
                }
                kept.push(entry);
            }
            Decision::Blocked { guard, reason } => {
                notes.push(note(&call.name, guard, reason));
                blocked.extend(blocked_entry(id, &call.name, d));
            }
        }
    }
    let any_kept = !kept.is_empty();
    if any_kept {
        message.insert("tool_calls".into(), Value::Array(kept));
    }
    if !notes.is_empty() {
        let before = match message.get("content") {
            Some(Value::String(s)) if !s.is_empty() => format!("{s}\n\n"),
            _ => String::new(),
        };
        message.insert(
            "content".into(),
            Value::String(format!("{before}{}", notes.join("\n"))),
        );
        if !any_kept && choice.get("finish_reason").and_then(Value::as_str) == Some("tool_calls") {
            choice.insert("finish_reason".into(), json!("stop"));
        }
    }
    blocked
}

/// Rewrites one assistant `message`'s content after the decisions on the calls
/// written in it (`proposed` holds their ids, in order): a blocked call's text is
/// removed and a note names it; returns the `knox.blocked` entries.
pub(crate) fn apply_written(
    choice: &mut Map<String, Value>,
    written: &[TextCall],
    proposed: &[(String, ProposedCall)],
    decisions: &[Decision],
) -> Vec<Value> {
    let Some(Value::Object(message)) = choice.get_mut("message") else {
        return Vec::new();
    };
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        _ => String::new(),
    };
    let released = textcalls::release(&text, written, decisions);
    let (notes, blocked) = written_notes(written, proposed, decisions, &released.unwritable);
    if released.text == text && notes.is_empty() {
        return blocked;
    }
    let content = released.text;
    let before = if content.is_empty() || notes.is_empty() {
        content
    } else {
        format!("{content}\n\n")
    };
    message.insert(
        "content".into(),
        Value::String(format!("{before}{}", notes.join("\n"))),
    );
    blocked
}

/// The notes and `knox.blocked` entries of the calls written in a text: the blocked
/// ones, and those allowed as planned that could not be written anew (`unwritable`).
pub(crate) fn written_notes(
    written: &[TextCall],
    proposed: &[(String, ProposedCall)],
    decisions: &[Decision],
    unwritable: &[usize],
) -> (Vec<String>, Vec<Value>) {
    let mut notes = Vec::new();
    let mut blocked = Vec::new();
    for (i, ((w, (id, call)), d)) in written.iter().zip(proposed).zip(decisions).enumerate() {
        let d = if unwritable.contains(&i) {
            &Decision::Blocked {
                guard: UNWRITABLE_GUARD.into(),
                reason: unwritable_reason(d.arguments(call)),
            }
        } else {
            d
        };
        if let Decision::Blocked { guard, reason } = d {
            notes.push(note(&w.name, guard, reason));
            blocked.extend(blocked_entry(id, &w.name, d));
        }
    }
    (notes, blocked)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    }

    fn blocked() -> Decision {
        Decision::Blocked {
            guard: "trajectory".into(),
            reason: "off plan".into(),
        }
    }

    #[test]
    fn a_lone_blocked_call_becomes_a_final_answer_naming_it() {
        let mut choice = json!({"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [call("c1", "send")]}});
        let c = choice.as_object_mut().unwrap();
        let calls = vec![read_call(&call("c1", "send"))];
        let b = apply(c, &calls, &[blocked()]);
        assert_eq!(b.len(), 1);
        assert_eq!(c["finish_reason"], "stop");
        assert!(c["message"].get("tool_calls").is_none());
        let content = c["message"]["content"].as_str().unwrap();
        assert!(
            content.contains("blocked tool call `send` (trajectory): off plan"),
            "{content}"
        );
    }

    #[test]
    fn allowed_calls_pass_unchanged_beside_a_blocked_one() {
        let mut choice = json!({"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": "Working on it.",
                "tool_calls": [call("c1", "send"), call("c2", "read")]}});
        let c = choice.as_object_mut().unwrap();
        let calls = vec![
            read_call(&call("c1", "send")),
            read_call(&call("c2", "read")),
        ];
        apply(c, &calls, &[blocked(), Decision::RELEASED]);
        assert_eq!(c["finish_reason"], "tool_calls");
        assert_eq!(c["message"]["tool_calls"], json!([call("c2", "read")]));
        assert!(
            c["message"]["content"]
                .as_str()
                .unwrap()
                .starts_with("Working on it.\n\n[knox]")
        );
    }

    #[test]
    fn a_call_allowed_as_planned_is_released_with_the_planned_arguments() {
        let mut choice = json!({"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "read", "arguments": "{\"q\": \"INBOX\"}"}}]}});
        let c = choice.as_object_mut().unwrap();
        let calls = vec![read_call(&c["message"]["tool_calls"][0].clone())];
        let planned = Decision::Allowed {
            arguments: Some(r#"{"q":"Inbox"}"#.into()),
        };
        assert!(apply(c, &calls, &[planned]).is_empty());
        assert_eq!(
            c["message"]["tool_calls"][0],
            json!({"id": "c1", "type": "function",
                "function": {"name": "read", "arguments": "{\"q\":\"Inbox\"}"}})
        );
        assert_eq!(c["finish_reason"], "tool_calls");
    }
}
