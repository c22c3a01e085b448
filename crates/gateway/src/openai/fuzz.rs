//! Entry points for the fuzz targets (`fuzz/`, and the corpus smoke test): what an OpenAI-compatible
//! client and an upstream send, through the proxy's own readers, without a live run.
//! Not an API.
//!
//! The monitor's place is taken by a deterministic decision on the action bytes the
//! proxy proposes ([`super::conversation::action`]): allowed when the monitor's
//! proposal parser accepts them against the manifest, blocked otherwise. Both
//! directions then check what the client would receive: no call it holds was blocked.

use knox_policy::ToolkitManifest;
use serde_json::Value;

use super::conversation::{self, Decision, ProposedCall};
use super::error::ApiError;
use super::mediate;
use super::proxy;
use super::textcalls;

const RUN: &str = "run-fuzz";
const URL: &str = "http://127.0.0.1:1/v1/chat/completions";

/// A client's `POST /v1/chat/completions` body: parsed as the proxy does, keyed into a
/// conversation (by prefix, and by its first line taken as the conversation header),
/// its prompt and its tool results read.
pub fn request(data: &[u8]) {
    let Ok(req) = proxy::parse(data) else {
        return;
    };
    let messages = req.messages();
    let _ = conversation::key(None, messages);
    let header = data.split(|&b| b == b'\n').next().unwrap_or_default();
    let _ = conversation::key(Some(&String::from_utf8_lossy(header)), messages);
    let _ = conversation::prompt(messages);
    let _ = proxy::tool_results(messages);
}

fn decide(manifest: &ToolkitManifest, call: &ProposedCall) -> Decision {
    match knox_policy::proposal::parse(&conversation::action(manifest, call), manifest) {
        Ok(_) => Decision::RELEASED,
        Err(m) => Decision::Blocked {
            guard: "malformed".into(),
            reason: m.error,
        },
    }
}

/// Panics if a message (or delta) the client receives carries a call the monitor did
/// not allow: a blocked `tool_calls` entry, a `tool_calls` that is not an array, or a
/// legacy `function_call` (never mediated).
fn check_released(manifest: &ToolkitManifest, message: Option<&Value>, stream: bool) {
    let Some(message) = message else {
        return;
    };
    assert!(
        mediate::unmediable(message).is_none(),
        "an unmediated call reached the client (stream: {stream}): {message}"
    );
    let Some(Value::Array(entries)) = message.get("tool_calls") else {
        return;
    };
    for entry in entries {
        let (_, call) = mediate::read_call(entry);
        assert_eq!(
            decide(manifest, &call),
            Decision::RELEASED,
            "a blocked call reached the client (stream: {stream}): {entry}"
        );
    }
}

/// An upstream's answer to a chat completion, both as a whole completion and as an
/// event stream, mediated as the proxy does. Panics if the client would receive a
/// call the monitor did not allow (blocked, or in a form the proxy does not mediate),
/// or a stream frame that is not `data: JSON`; or if its content, whole or assembled
/// from the stream, reads as a call written as text the monitor did not allow.
#[expect(
    clippy::expect_used,
    reason = "a fuzz oracle: its panic is the finding"
)]
pub fn upstream(data: &[u8], manifest: &ToolkitManifest) {
    let mut mediate = |calls: Vec<(String, ProposedCall)>| -> Result<Vec<Decision>, ApiError> {
        Ok(calls.iter().map(|(_, c)| decide(manifest, c)).collect())
    };
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok((body, _)) =
            proxy::mediate_completion(text, RUN, URL, &mut mediate, Some(manifest))
    {
        let v: Value = serde_json::from_str(&body).expect("the proxy writes JSON");
        for choice in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            check_released(manifest, choice.get("message"), false);
            if let Some(c) = choice
                .get("message")
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
            {
                check_written(manifest, c, false);
            }
        }
    }
    let mut frames = Vec::new();
    proxy::relay(
        data,
        RUN,
        URL,
        &mut mediate,
        &mut |f| {
            frames.push(f);
            true
        },
        Some(manifest),
    );
    // Each choice's content as the client assembles it from the stream.
    let mut contents: std::collections::BTreeMap<u64, String> = std::collections::BTreeMap::new();
    for f in frames {
        let text = std::str::from_utf8(&f).expect("frames are text");
        let data = text
            .strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("a frame is `data: …` and a blank line");
        if data == "[DONE]" {
            continue;
        }
        let chunk: Value = serde_json::from_str(data).expect("a frame's data is JSON");
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            check_released(manifest, choice.get("delta"), true);
            if let Some(c) = choice
                .get("delta")
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str)
            {
                let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
                contents.entry(index).or_default().push_str(c);
            }
        }
    }
    for content in contents.values() {
        check_written(manifest, content, true);
    }
}

/// Panics if `content`, as a text-based framework would read it, carries a call the
/// monitor did not allow.
fn check_written(manifest: &ToolkitManifest, content: &str, stream: bool) {
    for c in textcalls::detect(content, manifest) {
        let call = ProposedCall {
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        };
        assert_eq!(
            decide(manifest, &call),
            Decision::RELEASED,
            "a blocked text call reached the client (stream: {stream}): {content}"
        );
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]

    use super::*;

    const MANIFEST: &str = r#"format = "knox-toolkit/1"
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }
[[servers]]
name = "Gmail"
remote = true
needs = { profile = "network-client", endpoints = [{ host = "mail.example", port = 443 }] }
[[servers.tools]]
name = "GmailSendEmail"
effect = "disclose"
inputSchema = { type = "object", properties = { to = { type = "string" } }, required = ["to"], additionalProperties = false }
"#;

    fn seed(name: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/openai_upstream")
            .join(name);
        std::fs::read(p).unwrap()
    }

    /// A legacy `function_call` (whole or streamed) and a `tool_calls` object never
    /// reach the client: the proxy's answer is a malformed-upstream error instead, and
    /// the fuzz oracle, which checks every message and delta released, holds.
    #[test]
    fn calls_the_proxy_would_not_mediate_never_reach_the_client() {
        let m = ToolkitManifest::from_toolkit_text(MANIFEST).unwrap();
        let mut allow_all = |calls: Vec<(String, ProposedCall)>| {
            Ok::<_, ApiError>(vec![Decision::RELEASED; calls.len()])
        };
        for name in [
            "completion_function_call.json",
            "completion_tool_calls_object.json",
        ] {
            let text = String::from_utf8(seed(name)).unwrap();
            let answer = proxy::mediate_completion(&text, RUN, URL, &mut allow_all, Some(&m));
            assert!(
                matches!(answer, Err(ApiError::Malformed { .. })),
                "{name}: {answer:?}"
            );
            upstream(text.as_bytes(), &m);
        }
        let stream = seed("stream_function_call.sse");
        let mut frames = Vec::new();
        proxy::relay(
            stream.as_slice(),
            RUN,
            URL,
            &mut allow_all,
            &mut |f| {
                frames.push(String::from_utf8(f.to_vec()).unwrap());
                true
            },
            Some(&m),
        );
        assert!(
            frames.iter().all(|f| !f.contains("function_call\":{")),
            "{frames:?}"
        );
        assert!(
            frames.last().unwrap().contains("function_call"),
            "the error names why: {frames:?}"
        );
        upstream(&stream, &m);
    }

    /// Answers whose content is spliced from the pieces text calls are written with
    /// (random order, random stream cuts): whatever the pieces form, the client never
    /// receives, whole or streamed, a text call the monitor blocked (the oracle of
    /// [`upstream`] reads the content as a text-based framework would).
    #[test]
    fn spliced_text_calls_never_reach_the_client_unmediated() {
        const PIECES: [&str; 25] = [
            "Action: ",
            "Action Input: ",
            "GmailSendEmail",
            "Gmail__ReadEmail",
            "\n",
            "<tool_call>",
            "</tool_call>",
            "<function=GmailSendEmail>",
            "</function>",
            "{\"name\": \"GmailSendEmail\", \"arguments\": ",
            "{\"to\": \"a@b.c\"}",
            "{\"to\": 5}",
            "}",
            "{",
            "[",
            "]",
            "\"",
            "\\",
            "Act",
            "ion: ",
            "Observation: ok",
            "```json\n",
            "```",
            "Thought: hm. ",
            "Now action: ",
        ];
        let m = ToolkitManifest::from_toolkit_text(MANIFEST).unwrap();
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            usize::try_from(seed % n as u64).unwrap()
        };
        for _ in 0..3000 {
            let content: String = (0..1 + next(14))
                .filter_map(|_| PIECES.get(next(PIECES.len())).copied())
                .collect();
            let whole = serde_json::json!({"id": "t", "choices": [{"index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": content}}]});
            upstream(whole.to_string().as_bytes(), &m);
            let mut sse = String::new();
            let mut pieces = Vec::new();
            let mut at = 0;
            while at < content.len() {
                let mut end = (at + 1 + next(9)).min(content.len());
                while !content.is_char_boundary(end) {
                    end += 1;
                }
                pieces.push(&content[at..end]);
                at = end;
            }
            // Half the streams finish in a chunk that carries content too (vLLM, one-chunk
            // streams): its text must come out after what was held before it.
            let last = if next(2) == 0 { pieces.pop() } else { None };
            for piece in pieces {
                let c = serde_json::json!({"id": "t", "choices": [{"index": 0,
                    "delta": {"content": piece}, "finish_reason": null}]});
                sse.push_str(&format!("data: {c}\n\n"));
            }
            let delta = last.map_or_else(
                || serde_json::json!({}),
                |l| serde_json::json!({"content": l}),
            );
            let fin = serde_json::json!({"id": "t", "choices": [{"index": 0, "delta": delta, "finish_reason": "stop"}]});
            sse.push_str(&format!("data: {fin}\n\ndata: [DONE]\n\n"));
            upstream(sse.as_bytes(), &m);
        }
    }
}
