//! The proxy's HTTP errors, in the OpenAI error shape
//! (`{"error": {"message", "type", "code"}}`) so SDKs surface the message.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request the proxy refuses or could not complete.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not the JSON request the route takes.
    #[error("invalid request: {0}")]
    BadRequest(String),
    /// The body is larger than the proxy accepts.
    #[error("the request body exceeds {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// No such route.
    #[error(
        "no route `{method} {path}`: the proxy serves POST /v1/chat/completions, POST /v1/responses and GET /v1/models"
    )]
    NotFound {
        /// Method.
        method: String,
        /// Path.
        path: String,
    },
    /// The conversation's run could not be opened (planning or attestation failed).
    #[error("the conversation's run did not open: {0}")]
    Open(String),
    /// The conversation's run is gone (sealed while the request was in flight).
    #[error("the conversation `{0}` is sealed; start a new one")]
    Sealed(String),
    /// The request continues a conversation that was sealed (idle, or stopped): not
    /// re-planned, so that the plan's steps that ran do not run again unseen.
    #[error(
        "the conversation `{conversation}` was sealed as run `{run}` (idle or stopped): its continuation is refused, since planning it again would let steps that already ran run again; start a new conversation"
    )]
    Resealed {
        /// The conversation key.
        conversation: String,
        /// The run it was sealed as.
        run: String,
    },
    /// The upstream could not be reached or did not answer in time.
    #[error("upstream `{url}`: {why}")]
    Upstream {
        /// The upstream URL.
        url: String,
        /// What went wrong.
        why: String,
        /// Whether it timed out (504) rather than failed (502).
        timeout: bool,
    },
    /// The upstream answered something that is not a chat completion.
    #[error("upstream `{url}` answered a malformed chat completion: {why}")]
    Malformed {
        /// The upstream URL.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The proxy is shutting down.
    #[error("the proxy is shutting down")]
    ShuttingDown,
}

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::NotFound { .. } => StatusCode::NOT_FOUND,
            Self::Open(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Sealed(_) | Self::Resealed { .. } => StatusCode::CONFLICT,
            Self::Upstream { timeout: true, .. } => StatusCode::GATEWAY_TIMEOUT,
            Self::Upstream { .. } | Self::Malformed { .. } => StatusCode::BAD_GATEWAY,
            Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The error's `type` in the OpenAI shape.
    fn kind(&self) -> &'static str {
        match self {
            Self::BadRequest(_) | Self::TooLarge { .. } => "invalid_request_error",
            Self::NotFound { .. } => "not_found_error",
            Self::Open(_) | Self::Sealed(_) | Self::Resealed { .. } => "knox_conversation_error",
            Self::Upstream { .. } | Self::Malformed { .. } => "knox_upstream_error",
            Self::ShuttingDown => "knox_unavailable",
        }
    }

    /// The error as the OpenAI JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.to_string(), "type": self.kind(), "code": null}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        (
            self.status(),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}
