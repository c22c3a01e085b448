//! The chat abstraction every backend implements — messages, optionally tools or a JSON
//! schema the reply must follow, in; text or a tool call out — so the planner and the
//! executor are written once over it.

use knox_types::bundle::{ModelInfo, ModelRole};
use serde_json::Value;

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Instructions to the model.
    System,
    /// The user (or the planner's driver).
    User,
    /// The model.
    Assistant,
    /// A tool's result (or the monitor's refusal) for the model's last call.
    Tool,
}

impl Role {
    /// The role's name in the OpenAI protocol.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// Call id (echoed with the result).
    pub id: String,
    /// Tool name, as the model wrote it (untrusted).
    pub name: String,
    /// Arguments as JSON text, as the model wrote them (untrusted).
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// An assistant message's tool call.
    pub call: Option<ToolCall>,
    /// A tool message's call: `(id, tool name)`.
    pub result_of: Option<(String, String)>,
}

impl Message {
    /// A plain message.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            call: None,
            result_of: None,
        }
    }

    /// The model's tool call.
    pub fn call(call: ToolCall) -> Self {
        Self {
            role: Role::Assistant,
            content: String::new(),
            call: Some(call),
            result_of: None,
        }
    }

    /// The result of call `call`.
    pub fn result(call: &ToolCall, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            call: None,
            result_of: Some((call.id.clone(), call.name.clone())),
        }
    }
}

/// A tool offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolDef {
    /// Full tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON schema of its parameters (an object schema without additional properties).
    pub parameters: Value,
}

/// What the reply must be.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Format {
    /// Free text.
    #[default]
    Text,
    /// A call to one of these tools, or a final answer.
    Tools(Vec<ToolDef>),
    /// A JSON document following this schema.
    Json(Value),
}

/// What the model answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A tool call.
    Call(ToolCall),
    /// Text: a final answer, or the JSON document asked for.
    Text(String),
    /// Output that is neither (a truncated or unparsable call): kept verbatim.
    Malformed(String),
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The model specification is not understood.
    #[error("invalid model spec `{spec}`: {why}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// The request failed (transport or HTTP status), after every attempt.
    #[error("{url}: {why}")]
    Request {
        /// Endpoint.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The response is not a chat completion.
    #[error("malformed chat completion: {0}")]
    Response(String),
    /// The conversation does not fit the model's context.
    #[error("the prompt has {tokens} tokens; the context holds {limit}")]
    Context {
        /// Prompt tokens.
        tokens: usize,
        /// Context size less the reply's room.
        limit: usize,
    },
    /// The local inference engine failed.
    #[error("local inference: {0}")]
    Local(String),
    /// The model file is not available.
    #[error("model `{name}` is not in the cache `{dir}`: run `knox model pull {name}`")]
    NotPulled {
        /// Catalogue name.
        name: String,
        /// The cache directory searched.
        dir: String,
    },
}

/// A chat model: one completion per call. Implementations must never panic on what the
/// model writes; everything they return is untrusted.
pub trait Chat: Send + Sync + std::fmt::Debug {
    /// One completion of `messages`, whose reply follows `format`.
    fn complete(&self, messages: &[Message], format: &Format) -> Result<Reply, ModelError>;

    /// Identifies the model in role `role` (`planner`, `executor`) for proof of inference.
    fn info(&self, role: ModelRole) -> ModelInfo;
}
