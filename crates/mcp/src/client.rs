//! Knox's side of an MCP session: the client handler answering what a server may ask.
//!
//! - `roots/list` is answered from the policy (the server's configured roots, each
//!   within a path its needs grant), never from anything an agent or user client
//!   supplies.
//! - `sampling/createMessage` is refused: a tool server may not prompt the run's
//!   models (its text would be untrusted input with the authority of a model turn).
//!   The refusal is recorded as a broker `refusal` event under the call being served.
//! - `elicitation/create` gets rmcp's default answer, `decline`: nobody is asked
//!   anything during a mediated run.
#![expect(
    deprecated,
    reason = "roots and sampling are deprecated from MCP 2026-07-28 (SEP-2577), yet servers speaking earlier versions still send both: Knox must answer them"
)]

use std::sync::{Arc, Mutex, PoisonError};

use knox_types::payload::KernelEvent;
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ErrorCode,
    ErrorData, Implementation, ListRootsResult, Root, RootsCapabilities,
};
use rmcp::service::{RequestContext, RoleClient};

/// Protocol events (refusals) waiting to be attached to the next tool result.
pub type Events = Arc<Mutex<Vec<KernelEvent>>>;

/// The client handler of one server's session.
#[derive(Clone, Debug)]
pub struct KnoxClient {
    server: String,
    roots: Vec<Root>,
    events: Events,
}

/// `file://` URI of an absolute path (percent-encoding what a URI may not carry).
pub fn file_uri(path: &str) -> String {
    let mut uri = String::from("file://");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

impl KnoxClient {
    /// A handler for server `server`, answering `roots/list` with `roots`.
    pub fn new(server: &str, roots: &[String], events: Events) -> Self {
        Self {
            server: server.to_owned(),
            roots: roots.iter().map(|r| Root::new(file_uri(r))).collect(),
            events,
        }
    }

    fn record(&self, detail: String) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(KernelEvent::refusal(detail));
    }
}

impl ClientHandler for KnoxClient {
    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.record(format!(
            "MCP server `{}` asked sampling/createMessage: refused, a tool server may not prompt the run's models",
            self.server
        ));
        Err(ErrorData::new(
            ErrorCode::INVALID_REQUEST,
            "Knox refuses sampling/createMessage: tool servers may not prompt the run's models",
            None,
        ))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        Ok(ListRootsResult::new(self.roots.clone()))
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.roots = Some(RootsCapabilities::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("knox", env!("CARGO_PKG_VERSION")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_encode_what_a_uri_cannot_carry() {
        assert_eq!(file_uri("/tmp/a b/%x"), "file:///tmp/a%20b/%25x");
        assert_eq!(file_uri("/srv/data-1/x_y.z"), "file:///srv/data-1/x_y.z");
    }
}
