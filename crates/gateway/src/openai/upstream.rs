//! The upstream OpenAI-compatible server, reached with ureq on blocking threads (http
//! or https; one time limit for a whole exchange, so a hanging upstream is a 504).

use std::io::{BufRead as _, Read};
use std::time::Duration;

use super::error::ApiError;

/// The most bytes of a non-streamed upstream answer the proxy reads.
pub(crate) const MAX_RESPONSE_BYTES: u64 = 16 << 20;
/// The most bytes of one line of an upstream event stream.
const MAX_LINE_BYTES: u64 = 4 << 20;

/// An upstream base URL (`http://127.0.0.1:8080/v1`) and how to reach it.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    base: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

/// An upstream answer: its status and body.
pub(crate) struct Answer {
    pub status: u16,
    pub body: ureq::Body,
}

impl Upstream {
    /// The upstream at `base` (the OpenAI `base_url`, up to and including `/v1`).
    pub(super) fn new(base: &str, api_key: Option<String>, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            base: base.trim_end_matches('/').to_owned(),
            api_key,
            agent,
        }
    }

    /// `base` + `path`.
    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn failed(&self, path: &str, e: &ureq::Error) -> ApiError {
        ApiError::Upstream {
            url: self.url(path),
            why: e.to_string(),
            timeout: matches!(e, ureq::Error::Timeout(_)),
        }
    }

    /// The client's `Authorization`, else the configured key.
    fn auth(&self, client: Option<&str>) -> Option<String> {
        client
            .map(str::to_owned)
            .or_else(|| self.api_key.as_ref().map(|k| format!("Bearer {k}")))
    }

    /// POSTs `body` (JSON) to `path`.
    pub(super) fn post(
        &self,
        path: &str,
        body: &[u8],
        auth: Option<&str>,
    ) -> Result<Answer, ApiError> {
        let mut req = self
            .agent
            .post(self.url(path))
            .header("Content-Type", "application/json");
        if let Some(a) = self.auth(auth) {
            req = req.header("Authorization", &a);
        }
        let resp = req.send(body).map_err(|e| self.failed(path, &e))?;
        Ok(Answer {
            status: resp.status().as_u16(),
            body: resp.into_body(),
        })
    }

    /// GETs `path`.
    pub(super) fn get(&self, path: &str, auth: Option<&str>) -> Result<Answer, ApiError> {
        let mut req = self.agent.get(self.url(path));
        if let Some(a) = self.auth(auth) {
            req = req.header("Authorization", &a);
        }
        let resp = req.call().map_err(|e| self.failed(path, &e))?;
        Ok(Answer {
            status: resp.status().as_u16(),
            body: resp.into_body(),
        })
    }

    /// A whole (bounded) answer body as text.
    pub(super) fn text(&self, path: &str, body: &mut ureq::Body) -> Result<String, ApiError> {
        body.with_config()
            .limit(MAX_RESPONSE_BYTES)
            .read_to_string()
            .map_err(|e| self.failed(path, &e))
    }
}

/// Reads an event stream's `data:` payloads, one per call; `Ok(None)` at its end.
pub(crate) struct Events<R> {
    reader: std::io::BufReader<R>,
}

impl<R: Read> Events<R> {
    pub(super) fn new(reader: R) -> Self {
        Self {
            reader: std::io::BufReader::new(reader),
        }
    }

    /// The next `data:` payload (other fields, comments and blank lines skipped).
    pub(super) fn next_data(&mut self) -> std::io::Result<Option<String>> {
        loop {
            let mut line = Vec::new();
            let n = (&mut self.reader)
                .take(MAX_LINE_BYTES)
                .read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(None);
            }
            if u64::try_from(n).unwrap_or(u64::MAX) >= MAX_LINE_BYTES && !line.ends_with(b"\n") {
                return Err(std::io::Error::other(format!(
                    "an event line exceeds {MAX_LINE_BYTES} bytes"
                )));
            }
            let text = String::from_utf8_lossy(&line);
            if let Some(data) = text.trim_end_matches(['\r', '\n']).strip_prefix("data:") {
                return Ok(Some(data.trim_start().to_owned()));
            }
        }
    }
}
