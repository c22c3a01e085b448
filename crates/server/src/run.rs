//! `knox serve` as a blocking call: open the store, register the access file, bind,
//! serve until the process is stopped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use knox_attest::PartyKey;

use crate::config::{Access, ConfigError};
use crate::http::App;
use crate::ingest::Verifier;
use crate::store::{Store, StoreError};

/// What `knox serve` was given.
#[derive(Debug)]
pub struct ServeOptions {
    /// Database URL (`sqlite://…` or `postgres://…`).
    pub db_url: String,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// The access file's text and its directory (for relative `.pub` paths).
    pub access: Option<(String, PathBuf)>,
    /// The regulator's verification settings.
    pub verifier: Verifier,
    /// The transparency log's key.
    pub log_key: PartyKey,
    /// Seconds without a delivery before an unsealed live run shows as a prefix.
    pub live_stale_secs: u64,
}

/// Why the server stopped or did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
    /// The store failed to open or migrate.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The access file is wrong.
    #[error("access file: {0}")]
    Access(#[from] ConfigError),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// Serving failed.
    #[error("server: {0}")]
    Serve(std::io::Error),
}

/// Opens the store and serves; `ready` is called with the bound address once the
/// server accepts connections. Returns only on failure.
pub fn serve_blocking(
    opts: ServeOptions,
    ready: impl FnOnce(SocketAddr, &Store),
) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(async move {
        let store = Store::open(&opts.db_url).await?;
        store.bind_log_key(&opts.log_key.public_key()).await?;
        if let Some((text, base)) = &opts.access {
            Access::parse(text)?.apply(&store, Some(base)).await?;
        }
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|e| ServeError::Bind(opts.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ServeError::Bind(opts.listen, e))?;
        ready(addr, &store);
        let app = App {
            store,
            verifier: Arc::new(opts.verifier),
            log_key: Arc::new(opts.log_key),
            live_stale_secs: opts.live_stale_secs,
        };
        crate::http::serve(listener, app)
            .await
            .map_err(ServeError::Serve)
    })
}
