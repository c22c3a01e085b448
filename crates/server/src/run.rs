//! `knox serve` as a blocking call: open the store, register the access file, bind,
//! serve until the process is stopped.

use knox_attest::PartyKey;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::{Access, ConfigError};
use crate::http::App;
use crate::ingest::Verifier;
use crate::store::{Store, StoreError};
use crate::tlog::note::{NoteError, NoteKey};

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
    /// The log's name (`--log-origin`); `None`: the stored one, else
    /// [`crate::tlog::default_origin`].
    pub log_origin: Option<String>,
    /// The witnesses whose cosignatures are kept (`--witness`).
    pub witnesses: Vec<NoteKey>,
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
    /// The log's origin cannot name its key.
    #[error("--log-origin: {0}")]
    Origin(NoteError),
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
    ready: impl FnOnce(SocketAddr, &Store, &NoteKey),
) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(async move {
        let store = Store::open(&opts.db_url).await?;
        let public = opts.log_key.public_key();
        store.bind_log_key(&public).await?;
        let origin = store
            .bind_log_origin(
                opts.log_origin.as_deref(),
                &crate::tlog::default_origin(&public),
            )
            .await?;
        let vkey = NoteKey::log(&origin, &public).map_err(ServeError::Origin)?;
        if let Some((text, base)) = &opts.access {
            Access::parse(text)?.apply(&store, Some(base)).await?;
        }
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|e| ServeError::Bind(opts.listen, e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| ServeError::Bind(opts.listen, e))?;
        ready(addr, &store, &vkey);
        let app = App {
            log_origin: origin.into(),
            witnesses: opts.witnesses.into(),
            ..App::new(store, opts.verifier, opts.log_key, opts.live_stale_secs)
        };
        crate::http::serve(listener, app)
            .await
            .map_err(ServeError::Serve)
    })
}
