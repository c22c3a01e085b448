//! The HTTP API's bodies and its OpenAPI 3.1 document (`GET /api/openapi.json`).
//!
//! The document is generated from the handlers: each API handler in [`crate::http`]
//! carries a `#[utoipa::path]` description, and the router mounts exactly the handlers
//! the document lists (`utoipa_axum`), so a path cannot be served undocumented or
//! documented unserved. The bodies below are the types the handlers serialize; their
//! schemas are derived from them.

use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::openapi::{InfoBuilder, OpenApi};

use crate::auth;
use crate::live::{Delivered, LiveRun};
use crate::store::{BlockedRow, DecisionRow, ReceiptRow, RunRow};
use crate::tlog::{Inclusion, TreeHead};

/// Every refusal's body; the status says which refusal (400 malformed, 401 no valid
/// signature or session, 403 the role may not, 404 not found or not this principal's).
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiError {
    /// What was refused, for a person (never another principal's data).
    pub error: String,
}

/// `POST /api/runs`: what the submission became (the API client reads it back).
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct Submitted {
    /// SHA-256 of the submitted bytes, hex: the run's name in every other path.
    pub digest: String,
    /// The run id the evidence names.
    pub run_id: String,
    /// `complete`, `prefix`, `tampered` or `refused`.
    pub outcome: String,
    /// Why tampered or refused.
    pub reason: Option<String>,
    /// Whether these bytes were already stored (nothing changed).
    pub duplicate: bool,
    /// Where the submission sits in the transparency log, with its proof.
    pub inclusion: Inclusion,
}

/// `GET /api/runs/{digest}`: a run, what its evidence blocked and decided, the
/// regulators' receipts and the run's inclusion proof.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunDetail {
    /// The run as stored at ingest.
    pub run: RunRow,
    /// Its blocked actions.
    pub blocked: Vec<BlockedRow>,
    /// Its regulation decisions.
    pub decisions: Vec<DecisionRow>,
    /// Receipts regulators issued for it.
    pub receipts: Vec<ReceiptRow>,
    /// Its inclusion proof against the newest signed head.
    pub inclusion: Option<Inclusion>,
}

/// `POST /api/runs/{digest}/receipts`: the stored receipt and the log's head after it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReceiptStored {
    /// SHA-256 of the receipt file, hex.
    pub receipt: String,
    /// The signed tree head that includes it.
    pub head: TreeHead,
}

/// `POST /api/session`: a browser login link, valid once until `expires`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionIssued {
    /// `/login?token=…`, relative to the server.
    pub login: String,
    /// Unix seconds.
    pub expires: u64,
}

/// `POST /api/live`: the live run after a delivery, and what the delivery did.
#[derive(Debug, Serialize, ToSchema)]
pub struct LiveDelivery {
    /// The run as verified so far.
    pub run: LiveRun,
    /// Lines stored, repeated or contradicting.
    pub delivered: Delivered,
}

/// `GET /api/live/{id}`: a live run and its status.
#[derive(Debug, Serialize, ToSchema)]
pub struct LiveStatus {
    /// The run as verified so far.
    pub run: LiveRun,
    /// `in progress` while an unsealed run delivers, else its outcome.
    pub status: String,
}

/// `POST /api/log/cosignatures`: whose cosignatures of which size were kept.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cosigned {
    /// The checkpoint's size.
    pub tree_size: u64,
    /// The witnesses' names whose cosignatures were kept.
    pub cosigned_by: Vec<String>,
}

/// An Ed25519 public key as every Knox document writes it (`knox_types::bundle::PublicKey`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PublicKey)]
pub struct PublicKeyDoc {
    /// Always `ed25519`.
    pub alg: String,
    /// The 32-byte key, hex.
    pub public_key: String,
}

/// The security schemes' names: a signed request carries all four headers.
pub const SIGNED: [&str; 4] = ["knox_key", "knox_time", "knox_nonce", "knox_signature"];
/// The security scheme of the web UI's session cookie.
pub const SESSION: &str = "knox_session";

/// How a request is signed, as the document tells it.
fn signing() -> String {
    format!(
        "Every `/api/` request but the log's public reads is signed by a registered \
         principal's Ed25519 key, in four headers: `{key}` (the public key, 64 hex \
         digits), `{time}` (Unix seconds; the server accepts ±{skew} s), `{nonce}` (32 \
         hex digits, never reused by that key: a replay is refused) and `{sig}` (128 hex \
         digits). The signature is over the bytes `{context:?}` followed by \
         `METHOD\\nPATH_AND_QUERY\\nTIME\\nNONCE\\nSHA256_HEX(BODY)` (the path and query \
         exactly as sent; the SHA-256 of an empty body for a GET). A request without a \
         valid signature is answered 401 and logged.",
        key = auth::KEY_HEADER,
        time = auth::TIME_HEADER,
        nonce = auth::NONCE_HEADER,
        sig = auth::SIGNATURE_HEADER,
        skew = auth::MAX_SKEW_SECS,
        context = String::from_utf8_lossy(auth::REQUEST_CONTEXT),
    )
}

/// Completes the document the handlers generated: its title, what it describes, and
/// the security schemes the operations name.
pub fn finish(mut doc: OpenApi) -> OpenApi {
    doc.info = InfoBuilder::new()
        .title("Knox regulator's workspace API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(format!(
            "The evidence store of `knox serve`: providers submit sealed runs and stream \
             live ones; regulators list, read and acknowledge them; anyone audits the \
             transparency log (also served as C2SP `tlog-tiles` under `/tlog/`).\n\n{}",
            signing()
        )))
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    let header = |name: &str, what: &str| {
        SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
            name.to_owned(),
            format!("{what} {}", signing()),
        )))
    };
    for (scheme, (name, what)) in SIGNED.iter().zip([
        (auth::KEY_HEADER, "The caller's Ed25519 public key, hex."),
        (
            auth::TIME_HEADER,
            "Unix seconds when the request was signed.",
        ),
        (auth::NONCE_HEADER, "A fresh random nonce, 32 hex digits."),
        (auth::SIGNATURE_HEADER, "The Ed25519 signature, hex."),
    ]) {
        components.add_security_scheme(*scheme, header(name, what));
    }
    components.add_security_scheme(
        SESSION,
        SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
            auth::SESSION_COOKIE.to_owned(),
            "A browser session, from the link `POST /api/session` returns.".to_owned(),
        ))),
    );
    doc
}
