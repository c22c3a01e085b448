//! The OpenAI-compatible chat-completions backend: vLLM, llama.cpp's server, Ollama,
//! SGLang, TGI. Tools go out as function specifications, a JSON schema as
//! `response_format`; the reply comes back as a tool call or text.

use std::time::Duration;

use knox_types::bundle::{ModelInfo, ModelRole};
use knox_types::digest::Digest;
use serde_json::{Value, json};

use crate::chat::{Chat, Format, Message, ModelError, Reply, Role, ToolCall, ToolDef};

/// Largest response body read from an endpoint.
pub const MAX_RESPONSE_BYTES: u64 = 8 << 20;

/// Where and what to call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as given, without a trailing slash: the server's root
    /// (`http://127.0.0.1:8080`), its API base (`…/v1`), or the full
    /// `…/v1/chat/completions`; [`Endpoint::completions_url`] makes the request URL.
    pub base_url: String,
    /// Model name as the server knows it.
    pub model: String,
    /// Bearer token, when the server wants one.
    pub api_key: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Attempts per request (with exponential backoff between them).
    pub attempts: u32,
    /// A weights hash the operator declares for this model (not measurable remotely).
    pub declared_weights: Option<Digest>,
}

impl Endpoint {
    /// Parses `openai:URL#MODEL`; the API key comes from `KNOX_OPENAI_API_KEY`, else
    /// `OPENAI_API_KEY`, when set.
    pub fn parse(spec: &str) -> Result<Self, ModelError> {
        let bad = |why: &str| ModelError::Spec {
            spec: spec.into(),
            why: why.into(),
        };
        let rest = spec
            .strip_prefix("openai:")
            .ok_or_else(|| bad("expected openai:URL#MODEL"))?;
        let (url, model) = rest
            .rsplit_once('#')
            .ok_or_else(|| bad("expected openai:URL#MODEL"))?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad("the URL must start with http:// or https://"));
        }
        if model.is_empty() {
            return Err(bad("no model name after `#`"));
        }
        Ok(Self {
            base_url: url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            api_key: api_key(|k| std::env::var(k).ok()),
            timeout: Duration::from_secs(120),
            attempts: 3,
            declared_weights: None,
        })
    }

    /// The chat-completions URL: the given URL when it ends in `/chat/completions`;
    /// `/chat/completions` after an API base ending in a version segment (`/v1`, as
    /// OpenAI's clients take it); `/v1/chat/completions` after a server's root.
    pub fn completions_url(&self) -> String {
        let url = self.base_url.trim_end_matches('/');
        if url.ends_with("/chat/completions") {
            return url.to_string();
        }
        let path = url
            .split_once("://")
            .map_or("", |(_, rest)| rest.split_once('/').map_or("", |(_, p)| p));
        let last = path.rsplit('/').next().unwrap_or_default();
        let versioned = last.len() > 1
            && last.starts_with('v')
            && last.chars().skip(1).all(|c| c.is_ascii_digit());
        if versioned {
            format!("{url}/chat/completions")
        } else {
            format!("{url}/v1/chat/completions")
        }
    }

    /// The spec string this endpoint was parsed from.
    pub fn spec(&self) -> String {
        format!("openai:{}#{}", self.base_url, self.model)
    }

    /// The request body for `messages` and `format`; greedy decoding.
    fn body(&self, messages: &[Message], format: &Format) -> Value {
        let mut body = json!({"model": self.model, "messages": messages.iter().map(wire).collect::<Vec<_>>(),
            "temperature": 0, "seed": 0});
        if let Some(obj) = body.as_object_mut() {
            match format {
                Format::Text => {}
                Format::Tools(tools) if tools.is_empty() => {}
                Format::Tools(tools) => {
                    obj.insert(
                        "tools".into(),
                        tools.iter().map(function_spec).collect::<Value>(),
                    );
                    obj.insert("tool_choice".into(), json!("auto"));
                }
                Format::Json(schema) => {
                    obj.insert(
                        "response_format".into(),
                        json!({"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}),
                    );
                }
            }
        }
        body
    }

    /// One POST of `body`, retried on transport errors, rate limiting and server errors.
    fn post(&self, body: &Value) -> Result<String, ModelError> {
        let url = self.completions_url();
        let bytes = serde_json::to_vec(body).map_err(|e| ModelError::Response(e.to_string()))?;
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let mut last = String::new();
        for attempt in 0..self.attempts.max(1) {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(200 << attempt.min(6)));
            }
            let mut req = agent.post(&url).header("Content-Type", "application/json");
            if let Some(k) = &self.api_key {
                req = req.header("Authorization", &format!("Bearer {k}"));
            }
            match req.send(&bytes[..]) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let text = resp
                        .body_mut()
                        .with_config()
                        .limit(MAX_RESPONSE_BYTES)
                        .read_to_string()
                        .map_err(|e| ModelError::Response(e.to_string()))?;
                    if status == 200 {
                        return Ok(text);
                    }
                    last = format!(
                        "HTTP {status}: {}",
                        text.chars().take(300).collect::<String>()
                    );
                    // Client errors other than rate limiting will not improve on retry.
                    if (400..500).contains(&status) && status != 429 {
                        break;
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(ModelError::Request { url, why: last })
    }
}

impl Chat for Endpoint {
    fn complete(&self, messages: &[Message], format: &Format) -> Result<Reply, ModelError> {
        parse_reply(&self.post(&self.body(messages, format))?)
    }

    fn info(&self, role: ModelRole) -> ModelInfo {
        ModelInfo {
            role,
            name: self.spec(),
            weights_hash: self.declared_weights,
            declared: true,
        }
    }
}

/// The API key: `KNOX_OPENAI_API_KEY`, else `OPENAI_API_KEY` (an empty value counts as
/// unset), as `var` reads the environment.
fn api_key(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["KNOX_OPENAI_API_KEY", "OPENAI_API_KEY"]
        .into_iter()
        .find_map(|k| var(k).filter(|v| !v.is_empty()))
}

/// A message as the protocol writes it.
fn wire(m: &Message) -> Value {
    match (&m.call, &m.result_of) {
        (Some(c), _) => json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]}),
        (None, Some((id, _))) if m.role == Role::Tool => {
            json!({"role": "tool", "tool_call_id": id, "content": m.content})
        }
        _ => json!({"role": m.role.as_str(), "content": m.content}),
    }
}

/// The function specification of a tool.
fn function_spec(t: &ToolDef) -> Value {
    json!({"type": "function", "function": {"name": t.name, "description": t.description,
        "parameters": t.parameters}})
}

fn parse_reply(text: &str) -> Result<Reply, ModelError> {
    let v: Value = serde_json::from_str(text).map_err(|e| ModelError::Response(e.to_string()))?;
    let msg = v
        .pointer("/choices/0/message")
        .ok_or_else(|| ModelError::Response("no choices[0].message".into()))?;
    if let Some(call) = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
    {
        let name = call
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let arguments = match call.pointer("/function/arguments") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "{}".into(),
        };
        let id = call
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("call_0")
            .to_string();
        return Ok(Reply::Call(ToolCall {
            id,
            name,
            arguments,
        }));
    }
    Ok(Reply::Text(
        msg.get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    ))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_replies_decode() {
        let e = Endpoint::parse("openai:http://127.0.0.1:8080/#qwen3").unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str()),
            ("http://127.0.0.1:8080", "qwen3")
        );
        for bad in [
            "openai:127.0.0.1#m",
            "local:x",
            "openai:http://x",
            "openai:http://x#",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let call = r#"{"choices":[{"message":{"tool_calls":[{"id":"c1","function":{"name":"GmailReadEmail","arguments":"{\"email_id\":\"e1\"}"}}]}}]}"#;
        assert_eq!(
            parse_reply(call).unwrap(),
            Reply::Call(ToolCall {
                id: "c1".into(),
                name: "GmailReadEmail".into(),
                arguments: "{\"email_id\":\"e1\"}".into()
            })
        );
        assert_eq!(
            parse_reply(r#"{"choices":[{"message":{"content":"done"}}]}"#).unwrap(),
            Reply::Text("done".into())
        );
        assert!(parse_reply("{}").is_err() && parse_reply("nope").is_err());
    }

    #[test]
    fn the_usual_url_forms_reach_chat_completions() {
        let url = |u: &str| {
            Endpoint::parse(&format!("openai:{u}#m"))
                .unwrap()
                .completions_url()
        };
        for (given, expected) in [
            // A server's root.
            ("http://h:8080", "http://h:8080/v1/chat/completions"),
            ("http://h:8080/", "http://h:8080/v1/chat/completions"),
            // The API base, as OpenAI's clients take it (`OPENAI_BASE_URL`).
            ("http://h:8080/v1", "http://h:8080/v1/chat/completions"),
            ("http://h:8080/v1/", "http://h:8080/v1/chat/completions"),
            (
                "https://api.example.com/openai/v1",
                "https://api.example.com/openai/v1/chat/completions",
            ),
            ("https://h/v2/", "https://h/v2/chat/completions"),
            // The full URL.
            (
                "http://h:8080/v1/chat/completions",
                "http://h:8080/v1/chat/completions",
            ),
            (
                "http://h:8080/v1/chat/completions/",
                "http://h:8080/v1/chat/completions",
            ),
            // A prefix that is not a version is a root behind a proxy.
            ("https://h/proxy", "https://h/proxy/v1/chat/completions"),
            ("https://h/v", "https://h/v/v1/chat/completions"),
            (
                "https://v1.example.com",
                "https://v1.example.com/v1/chat/completions",
            ),
        ] {
            assert_eq!(url(given), expected, "{given}");
        }
        // The spec prints back what was given.
        let e = Endpoint::parse("openai:http://h:8080/v1/#m").unwrap();
        assert_eq!(e.spec(), "openai:http://h:8080/v1#m");
    }

    #[test]
    fn the_api_key_is_knox_s_own_else_openai_s() {
        let env = |pairs: &'static [(&str, &str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(name, _)| *name == k)
                    .map(|(_, v)| (*v).to_string())
            }
        };
        assert_eq!(api_key(env(&[])), None);
        assert_eq!(
            api_key(env(&[("OPENAI_API_KEY", "sk-o")])),
            Some("sk-o".into())
        );
        assert_eq!(
            api_key(env(&[
                ("KNOX_OPENAI_API_KEY", "sk-k"),
                ("OPENAI_API_KEY", "sk-o")
            ])),
            Some("sk-k".into())
        );
        assert_eq!(
            api_key(env(&[
                ("KNOX_OPENAI_API_KEY", ""),
                ("OPENAI_API_KEY", "sk-o")
            ])),
            Some("sk-o".into()),
            "an empty variable counts as unset"
        );
        assert_eq!(api_key(env(&[("OPENAI_API_KEY", "")])), None);
    }

    #[test]
    fn conversations_and_formats_go_out_in_the_protocol() {
        let e = Endpoint::parse("openai:http://h#m").unwrap();
        let call = ToolCall {
            id: "c1".into(),
            name: "T".into(),
            arguments: "{}".into(),
        };
        let msgs = [
            Message::new(Role::System, "s"),
            Message::new(Role::User, "u"),
            Message::call(call.clone()),
            Message::result(&call, "out"),
        ];
        let tools = vec![ToolDef {
            name: "T".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        let b = e.body(&msgs, &Format::Tools(tools));
        assert_eq!(b["messages"][2]["tool_calls"][0]["function"]["name"], "T");
        assert_eq!(b["messages"][3]["tool_call_id"], "c1");
        assert_eq!(b["tools"][0]["function"]["name"], "T");
        let b = e.body(&msgs, &Format::Json(json!({"type": "object"})));
        assert_eq!(b["response_format"]["type"], "json_schema");
        assert!(b.get("tools").is_none());
    }
}
