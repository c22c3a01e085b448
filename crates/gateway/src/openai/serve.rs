//! `knox serve-model`: a [`Chat`] backend (a local GGUF model on llama.cpp, or any
//! registry model) served as an OpenAI-compatible endpoint —
//! `POST /v1/chat/completions` and `GET /v1/models` — so the proxy, tests and demos have
//! an upstream without a GPU server.
//!
//! What it answers: with `tools` in the request, the backend is asked for one step in
//! the knox executor's format (for a local model, a grammar-constrained JSON step:
//! a call to one of the tools, or a final answer); a call comes back as a native
//! `tool_calls` entry (`id` `call_<n>`, `finish_reason: "tool_calls"`), a final answer
//! as `content` (`finish_reason: "stop"`). Output that is neither (a truncated or
//! unparsable step) comes back verbatim as `content` with `finish_reason: "stop"`. A
//! `response_format` of `json_schema` asks for a document following the schema. With
//! `stream: true` the whole reply is sent as one chunk followed by `[DONE]` (not token
//! by token). `usage` is not reported.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use knox_models::{Chat, Format, Message, Reply, Role, ToolCall, ToolDef};
use serde_json::{Value, json};

use super::error::ApiError;

/// A model served over the OpenAI protocol.
#[derive(Debug)]
pub struct ModelServer {
    chat: Arc<dyn Chat>,
    name: String,
    max_body: usize,
    calls: AtomicU64,
}

impl ModelServer {
    /// Serves `chat` under the model name `name`.
    pub fn new(chat: Arc<dyn Chat>, name: impl Into<String>, max_body: usize) -> Arc<Self> {
        Arc::new(Self {
            chat,
            name: name.into(),
            max_body,
            calls: AtomicU64::new(0),
        })
    }

    /// The routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/chat/completions", post(complete))
            .route("/v1/models", get(models))
            .fallback(not_found)
            .with_state(self.clone())
    }

    /// Serves on the loopback `addr` (port 0: any) on its own runtime until `stop()`
    /// turns true (polled every 100 ms). `ready` gets the bound address.
    pub fn run_until(
        self: Arc<Self>,
        addr: SocketAddr,
        stop: impl Fn() -> bool + Send + 'static,
        ready: impl FnOnce(SocketAddr),
    ) -> std::io::Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let listener = rt.block_on(super::Proxy::bind(addr))?;
        ready(listener.local_addr()?);
        rt.block_on(async move {
            axum::serve(crate::no_delay(listener), self.router())
                .with_graceful_shutdown(super::proxy::until(stop))
                .await
        })
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn models(State(s): State<Arc<ModelServer>>) -> Response {
    let body = json!({"object": "list", "data": [
        {"id": s.name, "object": "model", "created": 0, "owned_by": "knox"}]});
    json_response(&body)
}

fn json_response(v: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

async fn complete(State(s): State<Arc<ModelServer>>, body: Body) -> Result<Response, ApiError> {
    let bytes = axum::body::to_bytes(body, s.max_body)
        .await
        .map_err(|_| ApiError::TooLarge { limit: s.max_body })?;
    let req: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    let messages = messages(&req)?;
    let format = format(&req)?;
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    let chat = s.chat.clone();
    let reply = tokio::task::spawn_blocking(move || chat.complete(&messages, &format))
        .await
        .map_err(|_| ApiError::ShuttingDown)?
        .map_err(|e| ApiError::Upstream {
            url: format!("model `{}`", s.name),
            why: e.to_string(),
            timeout: false,
        })?;
    let n = s.calls.fetch_add(1, Ordering::Relaxed);
    let (message, finish) = match reply {
        Reply::Call(c) => (
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": format!("call_{n}"), "type": "function",
                "function": {"name": c.name, "arguments": c.arguments}}]}),
            "tool_calls",
        ),
        Reply::Text(t) | Reply::Malformed(t) => {
            (json!({"role": "assistant", "content": t}), "stop")
        }
    };
    let id = format!("chatcmpl-knox-{n}");
    if !stream {
        return Ok(json_response(&json!({
            "id": id, "object": "chat.completion", "created": 0, "model": s.name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]})));
    }
    let mut delta = message;
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, c) in calls.iter_mut().enumerate() {
            if let Some(o) = c.as_object_mut() {
                o.insert("index".into(), json!(i));
            }
        }
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": s.name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let text = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(delta, Value::Null),
        chunk(json!({}), json!(finish))
    );
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        text,
    )
        .into_response())
}

/// The request's messages as the backend takes them.
fn messages(req: &Value) -> Result<Vec<Message>, ApiError> {
    let Some(Value::Array(list)) = req.get("messages") else {
        return Err(ApiError::BadRequest("`messages` must be an array".into()));
    };
    let mut out = Vec::with_capacity(list.len());
    let mut names = std::collections::HashMap::new();
    for m in list {
        let text = super::conversation::text(m);
        let role = match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => Role::System,
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unknown message role `{}`",
                    other.unwrap_or("(none)")
                )));
            }
        };
        let call = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
            .map(|c| {
                let (id, p) = super::mediate::read_call(c);
                ToolCall {
                    id,
                    name: p.name,
                    arguments: p.arguments,
                }
            });
        let result_of = (role == Role::Tool).then(|| {
            let id = super::string_member(Some(m), "tool_call_id");
            let name = names.get(&id).cloned().unwrap_or_default();
            (id, name)
        });
        if let Some(c) = &call {
            names.insert(c.id.clone(), c.name.clone());
        }
        out.push(Message {
            role,
            content: text,
            call,
            result_of,
        });
    }
    Ok(out)
}

/// What the reply must be: a tool step when tools are offered, a JSON document for a
/// `json_schema` response format, else text.
fn format(req: &Value) -> Result<Format, ApiError> {
    if let Some(Value::Array(tools)) = req.get("tools") {
        let defs = tools
            .iter()
            .map(|t| {
                let f = t
                    .get("function")
                    .ok_or_else(|| ApiError::BadRequest("a tool without `function`".into()))?;
                Ok(ToolDef {
                    name: f
                        .get("name")
                        .and_then(Value::as_str)
                        .ok_or_else(|| ApiError::BadRequest("a function without `name`".into()))?
                        .to_owned(),
                    description: f
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    parameters: f
                        .get("parameters")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        return Ok(Format::Tools(defs));
    }
    let schema = req
        .get("response_format")
        .filter(|f| f.get("type").and_then(Value::as_str) == Some("json_schema"))
        .and_then(|f| f.get("json_schema"))
        .and_then(|j| j.get("schema"));
    Ok(schema.map_or(Format::Text, |s| Format::Json(s.clone())))
}
