//! A scripted agent's and user's side of `knox gateway mcp --http`, spoken in plain
//! HTTP/1.1 over loopback: the user's session endpoint (`/knox/sessions`, bearer token)
//! and an MCP client over Streamable HTTP that sends exactly the bytes it is given.
//! Shared by the robustness campaign and the adaptive suite through the gateway.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

/// Longest wait for any one answer of the gateway.
pub(super) const ANSWER: Duration = Duration::from_secs(60);

/// One HTTP answer.
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Reply {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(super) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// One HTTP/1.1 exchange on a fresh loopback connection (`Connection: close`): the
/// body is read until `done` holds for what has arrived (a server-sent event stream
/// may stay open), the server closes, or a read waits longer than [`ANSWER`].
pub(super) fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    done: &dyn Fn(&[u8]) -> bool,
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(ANSWER))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
    let mut reply = Reply {
        status,
        headers: Vec::new(),
        body: Vec::new(),
    };
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = line.trim_end().split_once(':') {
            reply
                .headers
                .push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    if reply
        .header("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        while !done(&reply.body) {
            line.clear();
            if r.read_line(&mut line)? == 0 {
                break;
            }
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .map_err(|e| std::io::Error::other(format!("chunk size {line:?}: {e}")))?;
            if size == 0 {
                break;
            }
            let mut chunk = vec![0; size + 2];
            r.read_exact(&mut chunk)?;
            chunk.truncate(size);
            reply.body.extend(chunk);
        }
    } else if let Some(n) = reply.header("content-length").and_then(|v| v.parse().ok()) {
        reply.body.resize(n, 0);
        r.read_exact(&mut reply.body)?;
    } else {
        r.read_to_end(&mut reply.body)?;
    }
    Ok(reply)
}

/// The JSON-RPC answer to request `id` in a body: plain JSON, or a `data:` line of
/// a server-sent event stream.
pub(super) fn answer_to(body: &[u8], id: u64) -> Option<Value> {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text)
        && v["id"] == id
    {
        return Some(v);
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|v| v["id"] == id)
}

/// A scripted agent's MCP connection: Streamable HTTP, one session.
pub(super) struct McpClient {
    addr: String,
    path: String,
    session: String,
    next: u64,
}

impl McpClient {
    /// Connects to a Knox session's `mcp_url`: `initialize`, then `initialized`.
    pub(super) fn connect(mcp_url: &str) -> std::io::Result<Self> {
        let rest = mcp_url
            .strip_prefix("http://")
            .ok_or_else(|| std::io::Error::other(format!("not an http URL: {mcp_url}")))?;
        let (addr, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let mut c = Self {
            addr: addr.to_owned(),
            path: path.to_owned(),
            session: String::new(),
            next: 0,
        };
        let (reply, _) = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "knox-robustness", "version": "1"}}),
        )?;
        c.session = reply
            .header("mcp-session-id")
            .ok_or_else(|| std::io::Error::other("no Mcp-Session-Id"))?
            .to_owned();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        let r = http(&c.addr, "POST", &c.path, &c.headers(), &note, &|_| false)?;
        if r.status != 202 {
            return Err(std::io::Error::other(format!("initialized: {}", r.status)));
        }
        Ok(c)
    }

    fn headers(&self) -> Vec<(&str, &str)> {
        let mut h = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ];
        if !self.session.is_empty() {
            h.push(("Mcp-Session-Id", self.session.as_str()));
        }
        h
    }

    /// One request and its answer (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> std::io::Result<(Reply, Value)> {
        let id = self.next;
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let reply = http(
            &self.addr,
            "POST",
            &self.path,
            &self.headers(),
            &body.to_string(),
            &|b| answer_to(b, id).is_some(),
        )?;
        let answer = answer_to(&reply.body, id).ok_or_else(|| {
            std::io::Error::other(format!(
                "{method}: no answer ({}): {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ))
        })?;
        Ok((reply, answer))
    }

    /// `tools/call` with the arguments as raw JSON text, exactly as an agent wrote
    /// them (duplicate keys, odd spacing): the JSON-RPC answer (`result` or `error`).
    pub(super) fn call_raw(&mut self, tool: &str, arguments: &str) -> std::io::Result<Value> {
        let id = self.next;
        self.next += 1;
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":{},"arguments":{arguments}}}}}"#,
            Value::String(tool.to_owned())
        );
        let reply = http(
            &self.addr,
            "POST",
            &self.path,
            &self.headers(),
            &body,
            &|b| answer_to(b, id).is_some(),
        )?;
        if let Some(a) = answer_to(&reply.body, id) {
            return Ok(a);
        }
        // A body the server refuses before JSON-RPC (not an object, say) is answered
        // at the HTTP level.
        Ok(json!({"error": {"http": reply.status, "body": String::from_utf8_lossy(&reply.body)}}))
    }

    /// `tools/call`: the tool result.
    pub(super) fn call(&mut self, tool: &str, args: Value) -> std::io::Result<Value> {
        let (_, a) = self.request("tools/call", json!({"name": tool, "arguments": args}))?;
        if a.get("result").is_none() {
            return Err(std::io::Error::other(format!("tools/call {tool}: {a}")));
        }
        Ok(a["result"].clone())
    }
}

/// The user's face of a gateway: its address and bearer token.
#[derive(Clone)]
pub(super) struct User {
    pub(super) addr: String,
    pub(super) token: String,
}

impl User {
    fn headers(&self) -> [(&'static str, String); 2] {
        [
            ("Authorization", format!("Bearer {}", self.token)),
            ("Content-Type", "application/json".to_owned()),
        ]
    }

    /// The user opens a session with `plan` for the robustness campaign's prompt: the
    /// open answer (`session`, `mcp_url`, `run_id`, …).
    pub(super) fn open(&self, plan: &Value) -> std::io::Result<Value> {
        self.open_with(&json!({"prompt": "Read my notes and the Q3 report", "plan": plan}))
    }

    /// The user opens a session with this request body (`{"tasks": […]}`, with or
    /// without a `plan`): the open answer.
    pub(super) fn open_with(&self, body: &Value) -> std::io::Result<Value> {
        let user = self.headers();
        let headers: Vec<(&str, &str)> = user.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http(
            &self.addr,
            "POST",
            "/knox/sessions",
            &headers,
            &body.to_string(),
            &|_| false,
        )?;
        if r.status != 201 {
            return Err(std::io::Error::other(format!(
                "open: {} {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            )));
        }
        Ok(r.json())
    }

    /// The user ends a session: its end, once sealed.
    pub(super) fn close(&self, session: &str) -> Value {
        let user = self.headers();
        let headers: Vec<(&str, &str)> = user.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let path = format!("/knox/sessions/{session}");
        let r = http(&self.addr, "DELETE", &path, &headers, "", &|_| false).unwrap();
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()
    }
}
