//! Entry points for the fuzz targets (`fuzz/`, and the corpus smoke test): what an MCP client sends
//! the gateway, decoded as rmcp decodes it, and a `tools/call` turned into the action
//! the session proposes, parsed as the monitor parses it. Not an API.

use knox_policy::ToolkitManifest;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder as _;

use super::DEFAULT_MAX_MESSAGE_BYTES;

/// Bytes from an MCP client: as the stdio transport's stream of lines (rmcp's codec,
/// under the gateway's bound), as one Streamable HTTP body, and as the user's
/// `POST /knox/sessions` body. Every `tools/call` decoded is proposed as the session
/// does; panics if the monitor would judge another tool than the one called.
pub fn message(data: &[u8], manifest: &ToolkitManifest) {
    let mut codec =
        JsonRpcMessageCodec::<ClientJsonRpcMessage>::new_with_max_length(DEFAULT_MAX_MESSAGE_BYTES);
    let mut buf = BytesMut::from(data);
    // Each round consumes a line or stops: at most one round per byte, and one more.
    for _ in 0..=data.len() {
        let before = buf.len();
        match codec.decode(&mut buf) {
            Ok(Some(m)) => propose(&m, manifest),
            Ok(None) if buf.len() == before => break,
            Ok(None) | Err(_) => {}
        }
    }
    if let Ok(Some(m)) = codec.decode_eof(&mut buf) {
        propose(&m, manifest);
    }
    if let Ok(m) = serde_json::from_slice::<ClientJsonRpcMessage>(data) {
        propose(&m, manifest);
    }
    let _ = super::http::parse_open(data);
}

fn propose(m: &ClientJsonRpcMessage, manifest: &ToolkitManifest) {
    let JsonRpcMessage::Request(r) = m else {
        return;
    };
    let ClientRequest::CallToolRequest(call) = &r.request else {
        return;
    };
    let args = call.params.arguments.clone().unwrap_or_default();
    let raw = super::session::action(&call.params.name, &args);
    if let Ok((action, _)) = knox_policy::proposal::parse(&raw, manifest) {
        assert_eq!(
            action.tool, call.params.name,
            "the monitor judged another tool than the one called"
        );
    }
}
