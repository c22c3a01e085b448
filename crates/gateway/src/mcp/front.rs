//! The MCP server face of a session: `tools/list` and `tools/call`, nothing else.
//!
//! The gateway advertises the `tools` capability only: no resources, prompts,
//! completions or sampling pass through it, so nothing reaches an upstream except a
//! mediated tool call. It never asks the client for its roots and ignores
//! `roots/list_changed`: upstream servers are answered `roots/list` by Knox from the
//! policy (`knox_mcp::client`), so a root a client offers has no effect.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::ErrorData;
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeRequestParams,
    InitializeResult, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};

use super::session::SessionHandle;

/// Ends the session when the last initialized MCP connection of it is dropped (the
/// client disconnected, or closed its MCP session).
#[derive(Debug)]
struct Attached {
    session: Arc<SessionHandle>,
    initialized: AtomicBool,
}

impl Drop for Attached {
    fn drop(&mut self) {
        if self.initialized.load(Ordering::Acquire) {
            self.session.end("the MCP client disconnected");
        }
    }
}

/// One MCP connection to a gateway session.
#[derive(Clone, Debug)]
pub struct Front {
    session: Arc<SessionHandle>,
    attached: Arc<Attached>,
}

impl Front {
    /// A connection to `session`. When an initialized connection goes away (its
    /// transport closed, its HTTP session deleted), the session is sealed.
    pub fn new(session: Arc<SessionHandle>) -> Self {
        Self {
            attached: Arc::new(Attached {
                session: Arc::clone(&session),
                initialized: AtomicBool::new(false),
            }),
            session,
        }
    }

    /// The session served.
    pub fn session(&self) -> &Arc<SessionHandle> {
        &self.session
    }
}

impl ServerHandler for Front {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "knox-gateway",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "Knox mediates every tool call of this session against the user's policy (run {}). \
                 A call outside it returns a tool error naming the reason; it did not run.",
                self.session.run_id()
            ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        let answer = self.negotiate_initialize(&request);
        if answer.is_ok() {
            self.attached.initialized.store(true, Ordering::Release);
        }
        answer
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.session.tools().as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = self.session.call(request.name.into_owned(), args).await;
        Ok(CallToolResponse::Complete(result))
    }
}
