//! Entry points for the fuzz targets (`knox::fuzz`, `fuzz/`): what an OpenAI-compatible
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
        Ok(_) => Decision::Allowed,
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
            Decision::Allowed,
            "a blocked call reached the client (stream: {stream}): {entry}"
        );
    }
}

/// An upstream's answer to a chat completion, both as a whole completion and as an
/// event stream, mediated as the proxy does. Panics if the client would receive a
/// call the monitor did not allow (blocked, or in a form the proxy does not mediate),
/// or a stream frame that is not `data: JSON`.
#[expect(
    clippy::expect_used,
    reason = "a fuzz oracle: its panic is the finding"
)]
pub fn upstream(data: &[u8], manifest: &ToolkitManifest) {
    let mut mediate = |calls: Vec<(String, ProposedCall)>| -> Result<Vec<Decision>, ApiError> {
        Ok(calls.iter().map(|(_, c)| decide(manifest, c)).collect())
    };
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(body) = proxy::mediate_completion(text, RUN, URL, &mut mediate)
    {
        let v: Value = serde_json::from_str(&body).expect("the proxy writes JSON");
        for choice in v
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            check_released(manifest, choice.get("message"), false);
        }
    }
    let mut frames = Vec::new();
    proxy::relay(data, RUN, URL, &mut mediate, &mut |f| {
        frames.push(f);
        true
    });
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
        }
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
            Ok::<_, ApiError>(vec![Decision::Allowed; calls.len()])
        };
        for name in [
            "completion_function_call.json",
            "completion_tool_calls_object.json",
        ] {
            let text = String::from_utf8(seed(name)).unwrap();
            let answer = proxy::mediate_completion(&text, RUN, URL, &mut allow_all);
            assert!(
                matches!(answer, Err(ApiError::Malformed { .. })),
                "{name}: {answer:?}"
            );
            upstream(text.as_bytes(), &m);
        }
        let stream = seed("stream_function_call.sse");
        let mut frames = Vec::new();
        proxy::relay(stream.as_slice(), RUN, URL, &mut allow_all, &mut |f| {
            frames.push(String::from_utf8(f.to_vec()).unwrap());
            true
        });
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
}
