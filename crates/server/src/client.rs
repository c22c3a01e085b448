//! The client side of the API, for `knox submit`, `knox login` and tests: requests
//! signed with the caller's key (`knox keygen`), over plain HTTP to a loopback or
//! trusted-network server.

use knox_attest::PartyKey;
use serde::Deserialize;

use crate::auth::Signed;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `http://HOST:PORT` (no path).
    #[error("the server URL must be http://HOST:PORT, got `{0}`")]
    Url(String),
    /// No randomness for the nonce.
    #[error("no randomness for a nonce: {0}")]
    Random(#[from] getrandom::Error),
    /// The connection or the exchange failed.
    #[error("request failed: {0}")]
    Http(#[from] ureq::Error),
    /// The server answered with an error.
    #[error("the server refused ({status}): {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The server's message.
        message: String,
    },
    /// The server's answer is not what the API returns.
    #[error("unexpected answer: {0}")]
    Json(#[from] serde_json::Error),
}

/// An HTTP agent that hands back every answer, error statuses included, for the caller
/// to read (the API client and the log auditor).
pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build(),
    )
}

/// What `submit` returns for one submission: the API's answer.
pub use crate::api::Submitted;

/// A client signing as one principal.
#[derive(Debug)]
pub struct Client {
    base: String,
    key: PartyKey,
    agent: ureq::Agent,
}

impl Client {
    /// A client for the server at `base` (`http://127.0.0.1:8787`).
    pub fn new(base: &str, key: PartyKey) -> Result<Self, ClientError> {
        let base = base.trim_end_matches('/');
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| ClientError::Url(base.to_owned()))?;
        if rest.is_empty() || rest.contains('/') {
            return Err(ClientError::Url(base.to_owned()));
        }
        Ok(Self {
            base: base.to_owned(),
            key,
            agent: agent(),
        })
    }

    /// The server URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// A signed request; the status and body of the answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let s = Signed::new(&self.key, method, path, body)?;
        self.send(method, path, body, &s)
    }

    /// Sends a request with the signature headers given (tests replay and forge with it).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        s: &Signed,
    ) -> Result<(u16, Vec<u8>), ClientError> {
        let url = format!("{}{path}", self.base);
        let mut resp = if method == "POST" {
            let mut r = self.agent.post(&url);
            for (k, v) in s.headers() {
                r = r.header(k, v);
            }
            r.send(body)?
        } else {
            let mut r = self.agent.get(&url);
            for (k, v) in s.headers() {
                r = r.header(k, v);
            }
            r.call()?
        };
        let status = resp.status().as_u16();
        let bytes = resp.body_mut().with_config().limit(1 << 30).read_to_vec()?;
        Ok((status, bytes))
    }

    /// A request that must succeed (2xx); its JSON answer.
    pub fn ok<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<T, ClientError> {
        let (status, bytes) = self.request(method, path, body)?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
                .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect());
            return Err(ClientError::Refused { status, message });
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Submits one bundle or journal.
    pub fn submit(&self, bytes: &[u8]) -> Result<Submitted, ClientError> {
        self.ok("POST", "/api/runs", bytes)
    }

    /// A browser login link (valid for [`crate::auth::SESSION_SECS`]).
    pub fn login(&self) -> Result<String, ClientError> {
        #[derive(Deserialize)]
        struct Login {
            login: String,
        }
        let l: Login = self.ok("POST", "/api/session", b"")?;
        Ok(format!("{}{}", self.base, l.login))
    }
}
