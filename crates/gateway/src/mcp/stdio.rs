//! The stdio face: one client (Claude Desktop, Cursor, Codex CLI, the Inspector)
//! launches the gateway and speaks MCP over its standard input and output; the
//! process is one session, sealed when the client closes its end.

use std::sync::Arc;

use rmcp::ServiceExt as _;
use tokio::io::{AsyncBufRead, AsyncBufReadExt as _, AsyncWriteExt as _};

use super::session::{OpenRequest, SessionEnd, SessionHandle};
use super::{Front, GatewayConfig, GatewayError};

/// What a bounded line read found.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// A whole line (with its newline, unless the input ended first) is in the buffer.
    Whole,
    /// The input ended.
    End,
    /// The line is longer than the bound.
    TooLong,
}

/// Reads one line of at most `max` bytes into `buf`, never holding more than that.
async fn read_line(
    r: &mut (impl AsyncBufRead + Unpin),
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() {
                Line::End
            } else {
                Line::Whole
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > max {
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(chunk.get(..take).unwrap_or_default());
        r.consume(take);
        if done {
            return Ok(Line::Whole);
        }
    }
}

/// Serves one session over this process's standard input and output until the
/// client closes its end, the session ends (idle timeout, stop signal, interrupt) or
/// the client sends a message over the bound; returns the sealed session's end.
pub async fn serve(
    cfg: Arc<GatewayConfig>,
    req: OpenRequest,
) -> Result<Arc<SessionEnd>, GatewayError> {
    let opener = Arc::clone(&cfg);
    let handle = tokio::task::spawn_blocking(move || SessionHandle::open(&opener, req))
        .await
        .map_err(|e| GatewayError::Serve(format!("the session opener failed: {e}")))??;
    let handle = Arc::new(handle);
    serve_io(
        cfg.max_message_bytes,
        Arc::clone(&handle),
        tokio::io::BufReader::new(tokio::io::stdin()),
        tokio::io::stdout(),
    )
    .await;
    handle
        .ended()
        .await
        .ok_or_else(|| GatewayError::Serve("the session's thread ended without sealing".into()))
}

/// Serves `handle` over `input`/`output` (the stdio transport, bounded): returns when
/// the session is over, after asking it to seal.
pub async fn serve_io<R, W>(max: usize, handle: Arc<SessionHandle>, mut input: R, output: W)
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (reader, mut writer) = tokio::io::simplex(64 << 10);
    let pump_handle = Arc::clone(&handle);
    // The pump hands rmcp whole lines only, each within the bound.
    let pump = tokio::spawn(async move {
        let mut buf = Vec::new();
        loop {
            match read_line(&mut input, &mut buf, max).await {
                Ok(Line::Whole) => {
                    if writer.write_all(&buf).await.is_err() {
                        break;
                    }
                }
                Ok(Line::End) => break,
                Ok(Line::TooLong) => {
                    pump_handle.end(format!(
                        "the client sent a message over {max} bytes (the gateway's bound)"
                    ));
                    break;
                }
                Err(e) => {
                    pump_handle.end(format!("the client's input failed: {e}"));
                    break;
                }
            }
        }
        // The split halves share one pipe: only a shutdown tells rmcp it ended.
        let _ = writer.shutdown().await;
    });
    match Front::new(Arc::clone(&handle))
        .serve((reader, output))
        .await
    {
        Ok(running) => {
            // Until the client leaves or the session ends on its own (idle, stop,
            // interrupt); dropping the service then closes the transport.
            let mut wait = tokio::spawn(running.waiting());
            tokio::select! {
                _ = &mut wait => {}
                _ = handle.ended() => wait.abort(),
            }
        }
        Err(e) => handle.end(format!("the MCP handshake failed: {e}")),
    }
    pump.abort();
    handle.end("the MCP client closed its input");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_over_the_bound_are_refused_without_being_held() {
        let mut r = tokio::io::BufReader::with_capacity(4, &b"abc\nabcdefgh\nx"[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf, 8).await.ok(), Some(Line::Whole));
        assert_eq!(buf, b"abc\n");
        assert_eq!(
            read_line(&mut r, &mut buf, 8).await.ok(),
            Some(Line::TooLong)
        );
        assert!(buf.len() <= 8);
        let mut r = tokio::io::BufReader::new(&b"x"[..]);
        assert_eq!(read_line(&mut r, &mut buf, 8).await.ok(), Some(Line::Whole));
        assert_eq!(read_line(&mut r, &mut buf, 8).await.ok(), Some(Line::End));
    }
}
