//! One stdio session served by a running HTTP gateway: the bridge behind
//! `knox gateway mcp --shared`.
//!
//! A client that launches the gateway for every chat (Claude Desktop, Codex CLI) would
//! otherwise start one gateway process — one in-TEE key, one lock on `--out` — per
//! launch. The bridge instead opens the launch's session on the gateway already serving
//! `--out` (`POST /knox/sessions` with the launch's prompt and plan and the gateway's
//! bearer token), relays the client's JSON-RPC lines to the session's Streamable-HTTP
//! endpoint and each answer (a JSON body, or the events of an SSE stream) back as one
//! line, and when the client closes its input ends the session (`DELETE`), which seals
//! it. Every launch is then a numbered link of that gateway's key.
//!
//! Notifications and the client's answers to server requests are relayed in order, one
//! at a time; requests are relayed each on a thread of its own after the session is
//! initialized, so a long tool call does not hold up a cancellation or a `ping`.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};

use super::GatewayError;

/// The gateway a bridge opens its session on.
#[derive(Clone, Debug)]
pub struct Target {
    /// Its base URL (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Its bearer token (`<out>/session-token`).
    pub token: String,
}

/// Most requests relayed at once.
const MAX_IN_FLIGHT: usize = 32;

/// The header naming an MCP session on a Streamable-HTTP server.
const SESSION_HEADER: &str = "mcp-session-id";

fn agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout)
        .build()
        .into()
}

fn serve_error(why: impl std::fmt::Display) -> GatewayError {
    GatewayError::Serve(why.to_string())
}

/// An opened session: its id and MCP endpoint.
#[derive(Debug)]
pub struct Opened {
    id: String,
    mcp_url: String,
}

/// Opens a session on `target` for `tasks` (and `plan`).
pub fn open(
    target: &Target,
    tasks: &[String],
    plan: Option<&Value>,
) -> Result<Opened, GatewayError> {
    let body = match plan {
        Some(p) => json!({ "tasks": tasks, "plan": p }),
        None => json!({ "tasks": tasks }),
    };
    let url = format!("{}/knox/sessions", target.url);
    let mut r = agent(Some(Duration::from_secs(600)))
        .post(&url)
        .header("authorization", &format!("Bearer {}", target.token))
        .header("content-type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| serve_error(format!("{url}: {e}")))?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .read_to_string()
        .map_err(|e| serve_error(format!("{url}: {e}")))?;
    let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if status != 201 {
        let why = v.get("error").and_then(Value::as_str).unwrap_or(&text);
        return Err(if status == 400 {
            GatewayError::BadRequest(format!("the gateway refused the session: {why}"))
        } else {
            serve_error(format!("the gateway refused the session ({status}): {why}"))
        });
    }
    let field = |k: &str| v.get(k).and_then(Value::as_str);
    match (field("session"), field("mcp_url")) {
        (Some(id), Some(mcp)) => Ok(Opened {
            id: id.to_owned(),
            mcp_url: mcp.to_owned(),
        }),
        _ => Err(serve_error(format!(
            "{url}: an answer without a session: {text}"
        ))),
    }
}

/// What the client's side of the relay shares between threads.
struct Relay {
    mcp_url: String,
    /// The MCP session id the server gave on `initialize`.
    session: Mutex<Option<String>>,
    out: Mutex<Box<dyn Write + Send>>,
}

impl Relay {
    /// Writes one message as one line.
    fn emit(&self, message: &str) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(out, "{message}");
        let _ = out.flush();
    }

    /// A JSON-RPC error answering `id` (nothing for a notification).
    fn fail(&self, id: Option<&Value>, why: &str) {
        if let Some(id) = id {
            let e = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32603, "message": format!("knox gateway (shared): {why}")}});
            self.emit(&e.to_string());
        }
    }

    /// POSTs one client message and relays what comes back.
    fn post(&self, line: &str, id: Option<&Value>) {
        let session = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut req = agent(None)
            .post(&self.mcp_url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = &session {
            req = req.header(SESSION_HEADER, s);
        }
        let mut r = match req.send(line.as_bytes()) {
            Ok(r) => r,
            Err(e) => return self.fail(id, &format!("the gateway is unreachable: {e}")),
        };
        if let Some(s) = r
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
        {
            *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(s.to_owned());
        }
        let status = r.status().as_u16();
        let sse = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("text/event-stream"));
        if status == 202 {
            return;
        }
        if !(200..300).contains(&status) {
            let text = r.body_mut().read_to_string().unwrap_or_default();
            return self.fail(id, &format!("the session answered {status}: {text}"));
        }
        let reader = std::io::BufReader::new(r.body_mut().as_reader());
        let mut answered = false;
        let mut relay_one = |data: &str| match serde_json::from_str::<Value>(data) {
            // One line: the message re-serialized (an event's data may span lines).
            Ok(v) => {
                answered |= id.is_some() && v.get("id") == id && v.get("method").is_none();
                self.emit(&v.to_string());
            }
            Err(_) => {
                // Answered, with an error: no second one below.
                answered = true;
                self.fail(id, "the session sent a message that is not JSON");
            }
        };
        if sse {
            let mut data = String::new();
            for l in reader.lines() {
                let Ok(l) = l else { break };
                if let Some(d) = l.strip_prefix("data:") {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(d.strip_prefix(' ').unwrap_or(d));
                } else if l.is_empty() && !data.is_empty() {
                    relay_one(&std::mem::take(&mut data));
                }
            }
            if !data.is_empty() {
                relay_one(&data);
            }
        } else {
            let mut text = String::new();
            let mut reader = reader;
            if std::io::Read::read_to_string(&mut reader, &mut text).is_ok()
                && !text.trim().is_empty()
            {
                relay_one(&text);
            }
        }
        if id.is_some() && !answered {
            self.fail(
                id,
                "the session's answer ended without a response to this request",
            );
        }
    }
}

/// Serves one stdio session on `target`: opens it for `tasks` (and `plan`), relays
/// `input`'s JSON-RPC lines and the answers to `output` until `input` ends or `stop()`
/// turns true (polled every 50 ms: a client that kills the bridge — SIGTERM — still has
/// its session sealed), then ends the session and returns its end as the gateway
/// reports it (run id, bundle, verification).
pub fn serve(
    target: &Target,
    tasks: &[String],
    plan: Option<&Value>,
    input: Box<dyn BufRead + Send>,
    output: Box<dyn Write + Send>,
    stop: &dyn Fn() -> bool,
) -> Result<Value, GatewayError> {
    let opened = open(target, tasks, plan)?;
    relay(target, &opened, input, output, stop)
}

/// [`serve`] once the session is open.
pub fn relay(
    target: &Target,
    opened: &Opened,
    input: Box<dyn BufRead + Send>,
    output: Box<dyn Write + Send>,
    stop: &dyn Fn() -> bool,
) -> Result<Value, GatewayError> {
    let relay = Arc::new(Relay {
        mcp_url: opened.mcp_url.clone(),
        session: Mutex::new(None),
        out: Mutex::new(output),
    });
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let r = Arc::clone(&relay);
    std::thread::spawn(move || {
        relay_input(&r, input);
        let _ = done_tx.send(());
    });
    loop {
        match done.recv_timeout(Duration::from_millis(50)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if !stop() => {}
            // Input ended (every answer relayed), or the bridge is told to stop.
            _ => break,
        }
    }
    end(target, opened, &relay)
}

/// Relays every line of `input` (see the module's notes on order), then waits for the
/// answers still coming.
fn relay_input(relay: &Arc<Relay>, input: Box<dyn BufRead + Send>) {
    let mut threads: Vec<std::thread::JoinHandle<()>> = Vec::new();
    for line in input.lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Option<Value> = serde_json::from_str(&line).ok();
        let id = parsed.as_ref().and_then(|v| v.get("id")).cloned();
        let is_request = parsed
            .as_ref()
            .is_some_and(|v| v.get("method").is_some() && v.get("id").is_some());
        let initialized = relay
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some();
        if is_request && initialized {
            threads.retain(|t| !t.is_finished());
            // A bounded number of requests in flight: past it, wait for the oldest.
            if threads.len() >= MAX_IN_FLIGHT {
                let oldest = threads.remove(0);
                let _ = oldest.join();
            }
            let r = Arc::clone(relay);
            threads.push(std::thread::spawn(move || r.post(&line, id.as_ref())));
        } else {
            relay.post(&line, id.as_ref());
        }
    }
    for t in threads {
        let _ = t.join();
    }
}

/// Ends the MCP session and the Knox session; the Knox session's end.
fn end(target: &Target, opened: &Opened, relay: &Relay) -> Result<Value, GatewayError> {
    let session = relay
        .session
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if let Some(s) = session {
        // The MCP session's own end (a client closing cleanly); its answer does not matter.
        let _ = agent(Some(Duration::from_secs(10)))
            .delete(&opened.mcp_url)
            .header(SESSION_HEADER, &s)
            .call();
    }
    let url = format!("{}/knox/sessions/{}", target.url, opened.id);
    let mut r = agent(Some(Duration::from_secs(600)))
        .delete(&url)
        .header("authorization", &format!("Bearer {}", target.token))
        .call()
        .map_err(|e| serve_error(format!("{url}: {e}")))?;
    let status = r.status().as_u16();
    let text = r.body_mut().read_to_string().unwrap_or_default();
    match (status, serde_json::from_str::<Value>(&text)) {
        (200, Ok(v)) => Ok(v),
        // Sealed already (idle, or the agent's side ended it): the gateway reported it.
        (404, _) => Ok(
            json!({"run_id": null, "reason": "sealed by the gateway before the client closed", "verified": null}),
        ),
        _ => Err(serve_error(format!("{url}: {status} {text}"))),
    }
}

/// Whether a Knox gateway answers at `target` with this token: its URL is a loopback
/// `http://` address, and a lookup of an id no session has gets the gateway's own 404
/// (another server on a reused port does not say it; a wrong token gets 401).
pub fn answers(target: &Target) -> bool {
    let loopback = ["http://127.", "http://[::1]:", "http://localhost:"]
        .iter()
        .any(|p| target.url.starts_with(p));
    if !loopback {
        return false;
    }
    let url = format!("{}/knox/sessions/0", target.url);
    let Ok(mut r) = agent(Some(Duration::from_secs(5)))
        .get(&url)
        .header("authorization", &format!("Bearer {}", target.token))
        .call()
    else {
        return false;
    };
    r.status().as_u16() == 404
        && r.body_mut()
            .read_to_string()
            .is_ok_and(|b| b.contains("no such live session (sealed ones are in --out)"))
}
