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

/// Panics if a `tool_calls` entry the client receives is a call the monitor blocked.
fn check_released(manifest: &ToolkitManifest, tool_calls: Option<&Value>, stream: bool) {
    let Some(Value::Array(entries)) = tool_calls else {
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
/// blocked call, or a stream frame that is not `data: JSON`.
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
            let message = choice.get("message");
            check_released(manifest, message.and_then(|m| m.get("tool_calls")), false);
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
            let delta = choice.get("delta");
            check_released(manifest, delta.and_then(|d| d.get("tool_calls")), true);
        }
    }
}
