//! The proxy's routes: `POST /v1/chat/completions`, `POST /v1/responses` (the
//! Responses API, [`super::responses`]), `GET /v1/models`, and a JSON 404 for anything
//! else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use knox_engine::Session;
use knox_policy::ToolkitManifest;
use serde_json::{Value, json};

use super::conversation::{
    self, CONVERSATION_HEADER, Decision, Handle, RUN_HEADER, SealHook, Sealed, Table,
};
use super::error::ApiError;
use super::mediate;
use super::responses::{self, Histories};
use super::stream::{Mediate, StreamMediator};
use super::textcalls;
use super::upstream::{Answer, Events, Upstream};

/// How the proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The upstream's base URL, as an OpenAI SDK's `base_url` (`http://host:port/v1`).
    pub upstream: String,
    /// Sent upstream as `Authorization: Bearer …` when the client sends none.
    pub api_key: Option<String>,
    /// A conversation without a request for this long is sealed.
    pub idle: Duration,
    /// The largest request body accepted (413 above it).
    pub max_body: usize,
    /// The longest an upstream exchange may take (504 after it).
    pub upstream_timeout: Duration,
    /// Where the session writes bundles (reported with each sealed conversation).
    pub out: Option<PathBuf>,
    /// Told of each conversation as it is sealed, from the conversation's own thread
    /// (`knox gateway openai --stream-to` submits the bundle to the store then).
    pub on_seal: Option<SealHook>,
    /// Whether tool calls written as text in an answer's content (ReAct `Action:`
    /// lines, `<tool_call>` tags, JSON call objects) are read and mediated like
    /// `tool_calls` entries (`--no-text-calls` turns it off).
    pub text_calls: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        Self {
            upstream: "http://127.0.0.1:8080/v1".into(),
            api_key: None,
            idle: Duration::from_secs(300),
            max_body: 4 << 20,
            upstream_timeout: Duration::from_secs(300),
            out: None,
            on_seal: None,
            text_calls: true,
        }
    }
}

/// The OpenAI-compatible proxy over one [`Session`]: each conversation one run.
pub struct Proxy {
    table: Table,
    upstream: Upstream,
    max_body: usize,
    /// What `previous_response_id` names (the Responses API).
    histories: Histories,
    /// Whether calls written as text are read.
    text_calls: bool,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("upstream", &self.upstream)
            .field("live", &self.table.live())
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// A proxy whose conversations run in `session` (its planner plans them, its output
    /// directory receives their bundles, its journal directory their journals).
    pub fn new(session: Arc<Session>, config: &ProxyConfig) -> Arc<Self> {
        Arc::new(Self {
            table: Table::new(
                session,
                &config.upstream,
                config.idle,
                config.out.clone(),
                config.on_seal.clone(),
            ),
            upstream: Upstream::new(
                &config.upstream,
                config.api_key.clone(),
                config.upstream_timeout,
            ),
            max_body: config.max_body,
            histories: Histories::default(),
            text_calls: config.text_calls,
        })
    }

    /// The routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/responses", post(respond))
            .route("/v1/models", get(models))
            .fallback(not_found)
            .with_state(self.clone())
    }

    /// Binds `addr`, which must be a loopback address.
    pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        if !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("`{addr}` is not a loopback address: the proxy listens on loopback only"),
            ));
        }
        tokio::net::TcpListener::bind(addr).await
    }

    /// Serves on `listener` until `shutdown` resolves, then seals every conversation.
    pub async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<Vec<Sealed>> {
        axum::serve(crate::no_delay(listener), self.router())
            .with_graceful_shutdown(shutdown)
            .await?;
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.seal_all())
            .await
            .map_err(std::io::Error::other)
    }

    /// Serves on the loopback `addr` (port 0: any) on its own runtime until `stop()`
    /// turns true (polled every 100 ms), then seals every conversation. `ready` gets the
    /// bound address once the proxy accepts connections.
    pub fn run_until(
        self: Arc<Self>,
        addr: SocketAddr,
        stop: impl Fn() -> bool + Send + 'static,
        ready: impl FnOnce(SocketAddr),
    ) -> std::io::Result<Vec<Sealed>> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let listener = rt.block_on(Self::bind(addr))?;
        ready(listener.local_addr()?);
        rt.block_on(self.serve(listener, until(stop)))
    }

    /// Seals every live conversation (SIGUSR1, the stop file, shutdown); returns every
    /// conversation sealed so far, in the order they were sealed.
    pub fn seal_all(&self) -> Vec<Sealed> {
        self.table.seal_all()
    }

    /// The conversations sealed so far (idle ones included).
    pub fn sealed(&self) -> Vec<Sealed> {
        self.table.sealed()
    }

    /// How many conversations are live.
    pub fn live(&self) -> usize {
        self.table.live()
    }

    /// The manifest calls written as text are read against, unless they are not read.
    fn text_calls(&self) -> Option<&ToolkitManifest> {
        self.text_calls.then(|| self.table.session().manifest())
    }
}

/// Resolves once `stop()` is true (polled every 100 ms).
pub(crate) async fn until(stop: impl Fn() -> bool + Send + 'static) {
    while !stop() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

fn authorization(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ApiError::ShuttingDown)?
}

async fn models(State(proxy): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    let auth = authorization(&headers);
    let p = proxy.clone();
    let answer = blocking(move || {
        let mut a = p.upstream.get("/models", auth.as_deref())?;
        let text = p.upstream.text("/models", &mut a.body)?;
        Ok((a.status, text))
    })
    .await;
    match answer {
        Ok((status, text)) => passthrough(status, text),
        Err(e) => e.into_response(),
    }
}

/// An upstream answer relayed as it is.
fn passthrough(status: u16, text: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
}

/// A chat-completions request, checked for what the proxy needs. The body is
/// forwarded upstream as the client sent it (its bytes, not a re-serialization).
pub(crate) struct Request {
    body: Value,
    model: String,
    stream: bool,
}

impl Request {
    /// Its messages (checked non-empty by [`parse`]).
    pub(crate) fn messages(&self) -> &[Value] {
        messages(&self.body)
    }
}

/// A request body's `model` (empty when it names none) and whether it asks for the
/// event stream (`"stream": true`).
pub(crate) fn model_and_stream(body: &Value) -> (String, bool) {
    (
        super::string_member(Some(body), "model"),
        body.get("stream").and_then(Value::as_bool) == Some(true),
    )
}

/// A chat request body's `messages` (none when it has no such array).
pub(crate) fn messages(body: &Value) -> &[Value] {
    body.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub(crate) fn parse(bytes: &[u8]) -> Result<Request, ApiError> {
    let body: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not JSON: {e}")))?;
    if !matches!(body.get("messages"), Some(Value::Array(m)) if !m.is_empty()) {
        return Err(ApiError::BadRequest(
            "`messages` must be a non-empty array".into(),
        ));
    }
    let (model, stream) = model_and_stream(&body);
    Ok(Request {
        body,
        model,
        stream,
    })
}

/// The results of tool calls the request carries: `(tool_call_id, content)`, the content
/// parsed as JSON when it is JSON.
pub(crate) fn tool_results(messages: &[Value]) -> Vec<(String, Value)> {
    messages
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
        .filter_map(|m| {
            let id = m.get("tool_call_id").and_then(Value::as_str)?;
            let text = conversation::text(m);
            let content = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Some((id.to_owned(), content))
        })
        .collect()
}

/// What the blocking part of a request produced.
enum Exchanged {
    /// A non-streamed completion of the run, mediated and rewritten (or an upstream
    /// error relayed).
    Whole(String, Response),
    /// A streamed completion's upstream answer, not yet read.
    Streamed(Handle, Answer),
}

async fn chat(
    State(proxy): State<Arc<Proxy>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = axum::body::to_bytes(body, proxy.max_body)
        .await
        .map_err(|_| ApiError::TooLarge {
            limit: proxy.max_body,
        })?;
    let req = parse(&bytes)?;
    let header = headers
        .get(CONVERSATION_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
    let key = conversation::key(header.as_deref(), req.messages())?;
    let auth = authorization(&headers);
    let client = conversation::client(auth.as_deref());
    let p = proxy.clone();
    // One blocking hop for the whole exchange: the conversation (opened, planned, when
    // it is new), the tool results it carries, the upstream request and — not
    // streamed — the mediation of its calls. Each hop between threads is a wake-up the
    // scheduler of a busy machine may delay (docs/gateway-openai.md, "Measured").
    let exchanged = blocking(move || {
        let conv = p
            .table
            .get_or_open(&key, req.messages(), &req.model, &client)?;
        conv.record(tool_results(req.messages()))?;
        let path = "/chat/completions";
        let answer = p.upstream.post(path, &bytes, auth.as_deref())?;
        if req.stream {
            Ok(Exchanged::Streamed(conv, answer))
        } else {
            let response = whole(&p, &conv, answer)?;
            Ok(Exchanged::Whole(conv.run_id, response))
        }
    })
    .await?;
    let (run, mut response) = match exchanged {
        Exchanged::Whole(run, r) => (run, r),
        Exchanged::Streamed(conv, answer) => {
            (conv.run_id.clone(), streamed(proxy, conv, answer).await?)
        }
    };
    if let Ok(v) = header::HeaderValue::from_str(&run) {
        response.headers_mut().insert(RUN_HEADER, v);
    }
    Ok(response)
}

/// What the blocking part of a Responses request produced.
enum Responded {
    /// The mediated answer as a Responses object; whether the client asked for the
    /// event stream.
    Answer(Value, bool),
    /// An upstream error, relayed: its status and body.
    Relayed(u16, String),
}

/// `POST /v1/responses`: the request read as the chat request it means, run through
/// its conversation as [`chat`] runs one (never streamed upstream), the mediated
/// answer returned as a Responses object or event stream.
async fn respond(
    State(proxy): State<Arc<Proxy>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let bytes = axum::body::to_bytes(body, proxy.max_body)
        .await
        .map_err(|_| ApiError::TooLarge {
            limit: proxy.max_body,
        })?;
    let header = headers
        .get(CONVERSATION_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_owned());
    let auth = authorization(&headers);
    let client = conversation::client(auth.as_deref());
    let p = proxy.clone();
    let (run, responded) = blocking(move || {
        let t = responses::translate(&bytes, &p.histories)?;
        let key = conversation::key(header.as_deref(), t.messages())?;
        let conv = p.table.get_or_open(&key, t.messages(), &t.model, &client)?;
        conv.record(tool_results(t.messages()))?;
        let path = "/chat/completions";
        let body = serde_json::to_vec(&t.chat)
            .map_err(|e| ApiError::BadRequest(format!("the request does not serialize: {e}")))?;
        let mut a = p.upstream.post(path, &body, auth.as_deref())?;
        let text = p.upstream.text(path, &mut a.body)?;
        if a.status != 200 {
            return Ok((conv.run_id, Responded::Relayed(a.status, text)));
        }
        let url = p.upstream.url(path);
        let (mediated, content) = mediate_completion(
            &text,
            &conv.run_id,
            &url,
            &mut |calls| conv.mediate(calls),
            p.text_calls(),
        )?;
        conv.answered(&content);
        let completion: Value =
            serde_json::from_str(&mediated).map_err(|e| ApiError::Malformed {
                url: url.clone(),
                why: e.to_string(),
            })?;
        let r = responses::response(&t, &completion, &p.histories)?;
        Ok((conv.run_id, Responded::Answer(r, t.stream)))
    })
    .await?;
    let mut response = match responded {
        Responded::Relayed(status, text) => passthrough(status, text),
        Responded::Answer(r, false) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            r.to_string(),
        )
            .into_response(),
        Responded::Answer(r, true) => {
            let mut sse = String::new();
            for (kind, data) in responses::events(&r) {
                sse.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
            }
            (
                StatusCode::OK,
                [
                    (header::CONTENT_TYPE, "text/event-stream"),
                    (header::CACHE_CONTROL, "no-cache"),
                ],
                sse,
            )
                .into_response()
        }
    };
    if let Ok(v) = header::HeaderValue::from_str(&run) {
        response.headers_mut().insert(RUN_HEADER, v);
    }
    Ok(response)
}

/// A non-streamed completion: read whole, its calls mediated, rewritten.
fn whole(proxy: &Proxy, conv: &Handle, mut a: Answer) -> Result<Response, ApiError> {
    let path = "/chat/completions";
    let text = proxy.upstream.text(path, &mut a.body)?;
    if a.status == 200 {
        mediated(proxy, conv, &text)
    } else {
        Ok(passthrough(a.status, text))
    }
}

/// A 200 completion's calls mediated: allowed ones unchanged, blocked ones removed and
/// named (see [`mediate`]).
fn mediated(proxy: &Proxy, conv: &Handle, text: &str) -> Result<Response, ApiError> {
    let url = proxy.upstream.url("/chat/completions");
    let (body, content) = mediate_completion(
        text,
        &conv.run_id,
        &url,
        &mut |calls| conv.mediate(calls),
        proxy.text_calls(),
    )?;
    conv.answered(&content);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// The text of a 200 completion from `url`, its calls mediated by `mediate` and
/// rewritten, with the `knox` report of run `run`; and the content of its first choice as
/// the client gets it. Calls written in a message's content are read against
/// `text_calls` (unless `None`) and proposed before its `tool_calls`.
pub(crate) fn mediate_completion(
    text: &str,
    run: &str,
    url: &str,
    mediate: &mut Mediate<'_>,
    text_calls: Option<&ToolkitManifest>,
) -> Result<(String, String), ApiError> {
    let malformed = |why: String| ApiError::Malformed {
        url: url.to_owned(),
        why,
    };
    let mut completion: Value = serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
    let Some(Value::Array(choices)) = completion.get_mut("choices") else {
        return Err(malformed("no `choices` array".into()));
    };
    let mut blocked = Vec::new();
    for (i, choice) in choices.iter_mut().enumerate() {
        if let Some(why) = choice.get("message").and_then(mediate::unmediable) {
            return Err(malformed(format!("choice {i}: {why}")));
        }
        let Some(choice) = choice.as_object_mut() else {
            continue;
        };
        let written = match (text_calls, choice.get("message").map(|m| m.get("content"))) {
            (Some(m), Some(Some(Value::String(content)))) => textcalls::detect(content, m),
            _ => Vec::new(),
        };
        let calls: Vec<_> = choice
            .get("message")
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
            .map(|a| a.iter().map(mediate::read_call).collect())
            .unwrap_or_default();
        if calls.is_empty() && written.is_empty() {
            continue;
        }
        let mut proposed: Vec<_> = written.iter().map(textcalls::proposed).collect();
        proposed.extend(calls.iter().cloned());
        let mut decisions = mediate(proposed.clone())?;
        let native = decisions.split_off(written.len());
        if !written.is_empty() {
            blocked.extend(mediate::apply_written(
                choice, &written, &proposed, &decisions,
            ));
        }
        if !calls.is_empty() {
            blocked.extend(mediate::apply(choice, &calls, &native));
        }
        // Re-read only what was rewritten: an answer whose calls were all allowed is
        // relayed as it was read.
        let rewritten = decisions
            .iter()
            .chain(&native)
            .any(|d| *d != Decision::RELEASED);
        if let Some(m) = text_calls.filter(|_| rewritten)
            && let Some(Value::Object(message)) = choice.get_mut("message")
            && let Some(Value::String(content)) = message.get_mut("content")
        {
            let allowed: Vec<(String, String)> = written
                .iter()
                .zip(&proposed)
                .zip(&decisions)
                .filter(|(_, d)| d.is_allowed())
                .map(|((w, (_, call)), d)| (w.name.clone(), d.arguments(call).to_owned()))
                .collect();
            *content = textcalls::settled(std::mem::take(content), m, &allowed, 0);
        }
    }
    if let Some(o) = completion.as_object_mut() {
        o.insert("knox".into(), json!({"run": run, "blocked": blocked}));
    }
    let content = first_content(&completion);
    Ok((completion.to_string(), content))
}

/// The content of a completion's first choice (empty when it has none).
fn first_content(completion: &Value) -> String {
    completion
        .get("choices")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("message"))
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// An event stream's frames, as the client receives them.
struct Frames(tokio::sync::mpsc::Receiver<Bytes>);

impl futures_core::Stream for Frames {
    type Item = Result<Bytes, std::convert::Infallible>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|b| b.map(Ok))
    }
}

fn frame(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// A streamed completion: the upstream's stream relayed, its calls held and mediated.
async fn streamed(
    proxy: Arc<Proxy>,
    conv: Handle,
    mut answer: Answer,
) -> Result<Response, ApiError> {
    let path = "/chat/completions";
    if answer.status != 200 {
        let p = proxy.clone();
        let text = blocking(move || p.upstream.text(path, &mut answer.body)).await?;
        return Ok(passthrough(answer.status, text));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::task::spawn_blocking(move || pump(&proxy, &conv, answer.body, &tx));
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(Frames(rx)),
    )
        .into_response())
}

/// Relays one upstream stream to the client (stops when the client goes away).
fn pump(proxy: &Proxy, conv: &Handle, body: ureq::Body, tx: &tokio::sync::mpsc::Sender<Bytes>) {
    let url = proxy.upstream.url("/chat/completions");
    let mut mediate = |calls| conv.mediate(calls);
    let answer = relay(
        body.into_reader(),
        &conv.run_id,
        &url,
        &mut mediate,
        &mut |f| tx.blocking_send(f).is_ok(),
        proxy.text_calls(),
    );
    conv.answered(&answer);
}

/// Relays the event stream `upstream` of `url` as frames to `send` (which answers
/// `false` when the client went away), its calls held and mediated by `mediate`. An
/// upstream that breaks off or sends a malformed chunk ends the stream with an `error`
/// event; calls still held then are never released. Calls written as text are read
/// against `text_calls` unless it is `None`.
pub(crate) fn relay(
    upstream: impl std::io::Read,
    run: &str,
    url: &str,
    mediate: &mut Mediate<'_>,
    send: &mut dyn FnMut(Bytes) -> bool,
    text_calls: Option<&ToolkitManifest>,
) -> String {
    // The content of the first choice as the client receives it.
    let mut answer = String::new();
    let mut emit = |c: &Value, answer: &mut String| -> bool {
        for choice in c
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let first = choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0;
            let text = choice
                .get("delta")
                .and_then(|d| d.get("content"))
                .and_then(Value::as_str);
            if let (true, Some(t)) = (first, text) {
                answer.push_str(t);
            }
        }
        send(frame(&c.to_string()))
    };
    let mut events = Events::new(upstream);
    let mut m = StreamMediator::new(run, text_calls);
    let result = loop {
        let data = match events.next_data() {
            Ok(Some(d)) => d,
            Ok(None) => {
                break Err(ApiError::Upstream {
                    url: url.to_owned(),
                    why: "the stream ended without `[DONE]`".into(),
                    timeout: false,
                });
            }
            Err(e) => {
                break Err(ApiError::Upstream {
                    url: url.to_owned(),
                    why: e.to_string(),
                    timeout: e.kind() == std::io::ErrorKind::TimedOut,
                });
            }
        };
        if data == "[DONE]" {
            break m.finish(mediate);
        }
        let chunk = match serde_json::from_str::<Value>(&data) {
            Ok(c) => c,
            Err(e) => {
                break Err(ApiError::Malformed {
                    url: url.to_owned(),
                    why: format!("a stream chunk is not JSON: {e}"),
                });
            }
        };
        let unmediable = chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c.get("delta").and_then(mediate::unmediable));
        if let Some(why) = unmediable {
            break Err(ApiError::Malformed {
                url: url.to_owned(),
                why: format!("a stream chunk: {why}"),
            });
        }
        match m.feed(chunk, mediate) {
            Ok(out) => {
                for c in out {
                    if !emit(&c, &mut answer) {
                        return answer; // the client went away
                    }
                }
            }
            Err(e) => break Err(e),
        }
    };
    let last = match result {
        Ok(out) => {
            for c in out {
                if !emit(&c, &mut answer) {
                    return answer;
                }
            }
            frame("[DONE]")
        }
        Err(e) => frame(&e.body().to_string()),
    };
    let _ = send(last);
    answer
}
