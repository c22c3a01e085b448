//! The OpenAI-compatible proxy (`knox gateway openai`) and the model server behind
//! `knox serve-model`.
//!
//! The proxy serves `POST /v1/chat/completions` (streaming and not) and `GET /v1/models`
//! on a loopback address, in front of any OpenAI-compatible upstream:
//!
//! - a **conversation** is named by the `x-knox-conversation` request header, else by
//!   the hash of its message prefix (the messages up to its first user message); its
//!   first request is planned from its system and user messages only (never tool or
//!   assistant messages) and opens one engine run — one AEG, one bundle;
//! - every `tool_calls` entry the upstream returns is proposed to the run's monitor as
//!   `{"tool", "params"}` before the client sees it: allowed calls pass unchanged, a
//!   blocked one is removed and named in the assistant's `content` (see [`mediate`]);
//! - calls written as text in an answer's `content` (ReAct lines, `<tool_call>` tags,
//!   JSON call objects), which text-based frameworks parse and run, are read and
//!   proposed the same way, a blocked one struck from the text (see `textcalls`;
//!   [`ProxyConfig::text_calls`] turns this off);
//! - `role: tool` messages answering an allowed call are recorded against its ticket
//!   (untrusted `tool_output` nodes);
//! - a conversation ends — idle timeout, [`Proxy::seal_all`] (the CLI calls it on
//!   SIGUSR1/SIGTERM/SIGINT, the stop file and shutdown) — with its sealed bundle in
//!   the session's output directory; its journal is written as it goes when the
//!   session has a journal directory.
//!
//! [`serve`] is the other direction: any [`knox_models::Chat`] backend (a local GGUF
//! model, an OpenAI-compatible endpoint) served as an OpenAI-compatible endpoint.

mod conversation;
mod error;
#[doc(hidden)]
pub mod fuzz;
pub mod mediate;
pub mod plan;
mod proxy;
mod responses;
pub mod serve;
mod stream;
mod textcalls;
mod upstream;

pub use conversation::{CONVERSATION_HEADER, RUN_HEADER, SealHook, Sealed};
pub use error::ApiError;
pub use proxy::{Proxy, ProxyConfig};

/// Member `key` of `v` when it is a string; empty when `v` is absent, has no such
/// member or it is not a string (what the gateway reads leniently: names, ids, models).
pub(crate) fn string_member(v: Option<&serde_json::Value>, key: &str) -> String {
    v.and_then(|v| v.get(key))
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
