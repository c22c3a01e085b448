//! The HTTP server: the signed API (submit, runs, receipts, sessions), the public
//! transparency-log endpoints, and the web UI behind a session cookie. Every request
//! is logged in the access log, allowed or refused, with the reason.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use knox_attest::PartyKey;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{
    ApiError, Cosigned, LiveDelivery, LiveStatus, ReceiptStored, RunDetail, SessionIssued,
    Submitted,
};
use crate::auth::{self, AuthError, Claimed};
use crate::chains;
use crate::ingest::Verifier;
use crate::live;
use crate::store::{AccessEntry, Principal, Role, RunFilter, RunRow, RunsPage, Store, StoreError};
use crate::tlog::note::{Checkpoint, Note, NoteError, NoteKey};
use crate::tlog::tiles::{self, TileId, TileKind};
use crate::tlog::{Consistency, Inclusion, TreeHead};
use crate::{tlog, ui};

/// The most bytes a submission may have.
pub const MAX_BODY: usize = knox_types::bundle::MAX_BUNDLE_BYTES;
/// The most runs a list returns (`limit=` up to this).
pub const LIST_LIMIT: i64 = 1000;
/// Runs per page when `limit=` is not given.
pub const PAGE_SIZE: i64 = 100;

/// Shared server state.
#[derive(Debug, Clone)]
pub struct App {
    /// The store.
    pub store: Store,
    /// The regulator's verification settings.
    pub verifier: Arc<Verifier>,
    /// The transparency log's signing key.
    pub log_key: Arc<PartyKey>,
    /// The log's name: the first line of its checkpoints and the name of its key.
    pub log_origin: Arc<str>,
    /// The witnesses whose cosignatures of the log's checkpoints are kept and served.
    pub witnesses: Arc<[NoteKey]>,
    /// Seconds without a delivery after which an unsealed live run is shown as the
    /// prefix it is rather than in progress ([`live::DEFAULT_STALE_SECS`]).
    pub live_stale_secs: u64,
}

/// Why a request failed, and what the client is told.
#[derive(Debug)]
enum Refusal {
    /// No valid signature or session.
    Auth(AuthError),
    /// Not found, or not this principal's to see: the same answer, so nothing leaks.
    NotFound,
    /// A parameter is malformed.
    Bad(String),
    /// The principal's role may not do this.
    Forbidden(&'static str),
    /// The store failed.
    Store(StoreError),
}

impl From<StoreError> for Refusal {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Filter(m) => Self::Bad(m),
            e => Self::Store(e),
        }
    }
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Self::Auth(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::Bad(_) => StatusCode::BAD_REQUEST,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// What the log records (the full reason).
    fn reason(&self) -> String {
        match self {
            Self::Auth(e) => e.to_string(),
            Self::NotFound => "not found or not visible to this principal".into(),
            Self::Bad(m) => m.clone(),
            Self::Forbidden(m) => (*m).to_owned(),
            Self::Store(e) => e.to_string(),
        }
    }

    /// What the client is told (a store error is not described).
    fn public(&self) -> String {
        match self {
            Self::Store(_) => "internal error".into(),
            Self::NotFound => "not found".into(),
            o => o.reason(),
        }
    }
}

/// The API's routes, each with its OpenAPI description (`#[utoipa::path]` on its
/// handler): what is mounted here is what the document lists.
fn api_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(api_submit, api_runs))
        .routes(routes!(api_run))
        .routes(routes!(api_evidence))
        .routes(routes!(api_receipt))
        .routes(routes!(api_live))
        .routes(routes!(api_live_run))
        .routes(routes!(api_session))
        .routes(routes!(api_access_log))
        .routes(routes!(api_report))
        .routes(routes!(log_head))
        .routes(routes!(log_consistency))
        .routes(routes!(log_inclusion))
        .routes(routes!(log_cosign))
        .routes(routes!(tlog_checkpoint))
}

/// The API's OpenAPI 3.1 document, as `GET /api/openapi.json` serves it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    crate::api::finish(api_routes().split_for_parts().1)
}

/// The router.
pub fn router(app: App) -> Router {
    let (api, doc) = api_routes().split_for_parts();
    let doc: Arc<str> = crate::api::finish(doc)
        .to_json()
        .unwrap_or_else(|e| format!("{{\"error\":\"the OpenAPI document: {e}\"}}"))
        .into();
    api.route(
        "/api/openapi.json",
        get(move |State(app): State<App>, method: Method, uri: Uri| {
            let doc = Arc::clone(&doc);
            async move {
                let body = served("application/json", "no-cache", doc.to_string());
                finish(&app, None, &method, &uri, Ok(body)).await
            }
        }),
    )
    .route("/live/{id}", get(ui_live))
    .route("/live/{id}/status", get(ui_live_status))
    .route("/tlog/tile/{*path}", get(tlog_tile))
    .route("/login", get(login))
    .route("/", get(ui_dashboard))
    .route("/runs", get(ui_runs))
    .route("/runs/{digest}", get(ui_run))
    .route("/runs/{digest}/download", get(ui_download))
    .route("/runs/{digest}/nodes/{seq}", get(ui_node))
    .route("/report", get(ui_report))
    .route("/access", get(ui_access))
    .route("/log", get(ui_log))
    .fallback(not_found)
    .layer(DefaultBodyLimit::max(MAX_BODY))
    .with_state(app)
}

fn target(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| uri.path().to_owned(), |p| p.as_str().to_owned())
}

/// Logs the request and turns the result into a response.
async fn finish(
    app: &App,
    who: Option<&str>,
    method: &Method,
    uri: &Uri,
    r: Result<Response, Refusal>,
) -> Response {
    let (allowed, reason, resp) = match r {
        Ok(resp) => (true, "ok".to_owned(), resp),
        Err(e) => {
            let status = e.status();
            let body = serde_json::to_string(&ApiError { error: e.public() })
                .unwrap_or_else(|_| "{}".into());
            (
                false,
                e.reason(),
                (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
            )
        }
    };
    let logged = app
        .store
        .log_access(
            who,
            method.as_str(),
            &target(uri),
            allowed,
            &reason,
            auth::now(),
        )
        .await;
    match logged {
        Ok(()) => resp,
        // An access that cannot be logged is not served.
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Checks a signed request: headers, time, signature, registered key, fresh nonce.
async fn signed(
    app: &App,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Principal, (Option<String>, Refusal)> {
    let claimed = Claimed::parse(|n| headers.get(n).and_then(|v| v.to_str().ok()))
        .map_err(|e| (None, Refusal::Auth(e)))?;
    let key_id = claimed.key_id();
    let fail = |e: AuthError| (Some(key_id.clone()), Refusal::Auth(e));
    claimed
        .verify(method.as_str(), &target(uri), body, auth::now())
        .map_err(fail)?;
    let p = app
        .store
        .principal(&key_id)
        .await
        .map_err(|e| (Some(key_id.clone()), Refusal::Store(e)))?
        .ok_or_else(|| fail(AuthError::UnknownKey))?;
    let fresh = app
        .store
        .use_nonce(&key_id, &claimed.nonce, auth::now())
        .await
        .map_err(|e| (Some(key_id.clone()), Refusal::Store(e)))?;
    if !fresh {
        return Err(fail(AuthError::Replay));
    }
    Ok(p)
}

/// The principal of the session cookie.
async fn session(app: &App, headers: &HeaderMap) -> Result<Principal, Refusal> {
    let token = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(k, _)| *k == auth::SESSION_COOKIE)
        .map(|(_, v)| v.to_owned())
        .ok_or(Refusal::Auth(AuthError::NoSession))?;
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refusal::Auth(AuthError::NoSession));
    }
    app.store
        .session(&token, auth::now())
        .await?
        .ok_or(Refusal::Auth(AuthError::NoSession))
}

/// A path parameter, or a logged refusal when it is not one (not UTF-8).
fn path_param(r: Result<Path<String>, PathRejection>) -> Result<String, Refusal> {
    r.map(|Path(s)| s).map_err(|e| Refusal::Bad(e.body_text()))
}

/// A digest parameter: exactly 64 lowercase hex digits, nothing else.
fn digest_param(s: &str) -> Result<String, Refusal> {
    if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(s.to_owned())
    } else {
        Err(Refusal::Bad("a digest is 64 lowercase hex digits".into()))
    }
}

/// A run `p` may see, or not found.
async fn visible_run(app: &App, p: &Principal, digest: &str) -> Result<RunRow, Refusal> {
    let digest = digest_param(digest)?;
    let run = app.store.run(&digest).await?.ok_or(Refusal::NotFound)?;
    if app
        .store
        .visible_providers(p)
        .await?
        .contains(&run.provider)
    {
        Ok(run)
    } else {
        Err(Refusal::NotFound)
    }
}

/// The page size asked for, within 1 and [`LIST_LIMIT`]; [`PAGE_SIZE`] when not asked.
fn page_size(f: &RunFilter) -> i64 {
    f.limit.unwrap_or(PAGE_SIZE).clamp(1, LIST_LIMIT)
}

/// The query string of the page after `page`: the same filter, `after` its cursor.
pub(crate) fn next_query(f: &RunFilter, page: &RunsPage) -> Option<String> {
    let next = page.next.clone()?;
    serde_urlencoded::to_string(RunFilter {
        after: Some(next),
        ..f.clone()
    })
    .ok()
}

/// The runs list's paging, as headers: `X-Total-Count`, and a `Link` to the next page
/// (RFC 8288) when there is one. The body stays the list it always was.
fn paged(resp: &mut Response, uri: &Uri, f: &RunFilter, page: &RunsPage) {
    if let Ok(v) = HeaderValue::from_str(&page.total.to_string()) {
        resp.headers_mut().insert("x-total-count", v);
    }
    if let Some(q) = next_query(f, page)
        && let Ok(v) = HeaderValue::from_str(&format!("<{}?{q}>; rel=\"next\"", uri.path()))
    {
        resp.headers_mut().insert(header::LINK, v);
    }
}

fn json<T: serde::Serialize>(v: &T) -> Result<Response, Refusal> {
    let body = serde_json::to_string_pretty(v).map_err(|e| Refusal::Store(e.into()))?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

fn html(m: maud::Markup) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src 'self' data:; connect-src 'self'",
            ),
        ],
        m.into_string(),
    )
        .into_response()
}

/// A request whose caller is checked — by the request's signature ([`SignedCall`], the
/// API) or by the browser's session ([`SessionCall`], the web UI): who made it, and what
/// answering and logging it needs. As an extractor it refuses, answers and logs a
/// request whose caller does not check out itself (its handler never runs).
struct Checked<By> {
    app: App,
    caller: Principal,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    /// The body the signature covers (empty for a session's request).
    body: Bytes,
    by: std::marker::PhantomData<By>,
}

/// Checked by the request's signature; the extractor reads the body, so it comes last.
struct BySignature;
/// Checked by the browser's session cookie.
struct BySession;

type SignedCall = Checked<BySignature>;
type SessionCall = Checked<BySession>;

impl<By> Checked<By> {
    fn new(app: &App, caller: Principal, parts: (Method, Uri, HeaderMap), body: Bytes) -> Self {
        let (method, uri, headers) = parts;
        Self {
            app: app.clone(),
            caller,
            method,
            uri,
            headers,
            body,
            by: std::marker::PhantomData,
        }
    }

    /// Logs the request with its caller and what it was answered, and answers it.
    async fn answer(&self, r: Result<Response, Refusal>) -> Response {
        let who = Some(self.caller.key_id.as_str());
        finish(&self.app, who, &self.method, &self.uri, r).await
    }
}

impl axum::extract::FromRequest<App> for SignedCall {
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, app: &App) -> Result<Self, Response> {
        let parts = (
            req.method().clone(),
            req.uri().clone(),
            req.headers().clone(),
        );
        let body = <Bytes as axum::extract::FromRequest<App>>::from_request(req, app)
            .await
            .map_err(IntoResponse::into_response)?;
        match signed(app, &parts.0, &parts.1, &parts.2, &body).await {
            Err((who, e)) => Err(finish(app, who.as_deref(), &parts.0, &parts.1, Err(e)).await),
            Ok(caller) => Ok(Self::new(app, caller, parts, body)),
        }
    }
}

impl axum::extract::FromRequestParts<App> for SessionCall {
    type Rejection = Response;

    async fn from_request_parts(
        req: &mut axum::http::request::Parts,
        app: &App,
    ) -> Result<Self, Response> {
        let parts = (req.method.clone(), req.uri.clone(), req.headers.clone());
        match session(app, &parts.2).await {
            Err(e) => {
                let page = ui::refusal(
                    "Sign in",
                    "No valid session. Run `knox login --to URL --key YOUR.key` and open the link it prints.",
                );
                let _ = finish(app, None, &parts.0, &parts.1, Err(e)).await;
                Err((StatusCode::UNAUTHORIZED, html(page)).into_response())
            }
            Ok(caller) => Ok(Self::new(app, caller, parts, Bytes::new())),
        }
    }
}

#[utoipa::path(post, path = "/api/runs", tag = "runs",
    summary = "Submit a sealed bundle or a journal (providers)",
    description = "The bytes `knox run` sealed (a bundle, JSON) or streamed (a journal, JSON lines). The server verifies them as a regulator would, stores them as submitted and appends their digest to the transparency log; a tampered or refused submission is stored too, with the verifier's reason.",
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The evidence file's bytes, at most 64 MiB"),
    responses(
        (status = 201, description = "Stored", body = Submitted),
        (status = 200, description = "These bytes were already stored by this provider; nothing changed", body = Submitted),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 403, description = "Not a provider, or bytes another provider submitted", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_submit(call: SignedCall) -> Response {
    let r = submit(&call.app, &call.caller, &call.body).await;
    call.answer(r).await
}

async fn submit(app: &App, p: &Principal, body: &Bytes) -> Result<Response, Refusal> {
    if p.role != Role::Provider {
        return Err(Refusal::Forbidden("only providers submit runs"));
    }
    let verifier = app.verifier.clone();
    let bytes = body.clone();
    let checked = tokio::task::spawn_blocking(move || verifier.check(&bytes))
        .await
        .map_err(|e| Refusal::Bad(format!("verification failed: {e}")))?
        .map_err(|e| Refusal::Bad(e.to_string()))?;
    let ingested = app.store.ingest(p, body, &checked, auth::now()).await?;
    if ingested.run.provider != p.key_id {
        // The same bytes were submitted by another provider: nothing is changed, and
        // nothing about the other submission is said.
        return Err(Refusal::Forbidden("these bytes are already stored"));
    }
    if let (true, Some(key)) = (ingested.run.kind == "bundle", &ingested.run.run_key) {
        // The sealed bundle of a streamed run: the live run is complete if it agrees.
        live::sealed(
            &app.store,
            &app.verifier,
            p,
            (&ingested.run.run_id, key),
            &ingested.run.digest,
            auth::now(),
        )
        .await
        .map_err(live_refusal)?;
    }
    let inclusion = app
        .store
        .inclusion(&ingested.run.digest, &app.log_key, auth::now())
        .await?
        .ok_or_else(|| {
            Refusal::Store(StoreError::Corrupt(format!(
                "submission {} is stored but not in the log",
                ingested.run.digest
            )))
        })?;
    let status = if ingested.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    let mut resp = json(&Submitted {
        digest: ingested.run.digest,
        run_id: ingested.run.run_id,
        outcome: ingested.run.outcome,
        reason: ingested.run.reason,
        duplicate: ingested.duplicate,
        inclusion,
    })?;
    *resp.status_mut() = status;
    Ok(resp)
}

#[utoipa::path(get, path = "/api/runs", tag = "runs",
    summary = "List runs, newest first, one page at a time",
    description = "The runs the caller may see (a provider its own, a regulator its assigned providers'), filtered. One page per request: `X-Total-Count` says how many runs the filter matches, and a `Link: <…>; rel=\"next\"` header (RFC 8288) names the next page while there is one.",
    params(RunFilter),
    responses(
        (status = 200, description = "A page of runs", body = Vec<RunRow>,
            headers(("x-total-count" = i64, description = "Runs the filter matches in all pages"),
                    ("link" = String, description = "The next page, `<PATH?…&after=CURSOR>; rel=\"next\"`, when there is one"))),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_runs(
    q: Result<Query<RunFilter>, axum::extract::rejection::QueryRejection>,
    call: SignedCall,
) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r = async {
        let Query(f) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        let providers = app.store.visible_providers(p).await?;
        let page = app.store.runs_page(&providers, &f, page_size(&f)).await?;
        let mut resp = json(&page.rows)?;
        paged(&mut resp, &call.uri, &f, &page);
        Ok(resp)
    }
    .await;
    call.answer(r).await
}

#[utoipa::path(get, path = "/api/runs/{digest}", tag = "runs",
    summary = "A run, its blocked actions, decisions, receipts and inclusion proof",
    params(("digest" = String, Path, description = "The run: SHA-256 of its submitted bytes, 64 hex digits")),
    responses(
        (status = 200, description = "The run", body = RunDetail),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 404, description = "No such run, or not the caller's to see", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_run(d: Result<Path<String>, PathRejection>, call: SignedCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r = async {
        let run = visible_run(app, p, &path_param(d)?).await?;
        let inclusion = app
            .store
            .inclusion(&run.digest, &app.log_key, auth::now())
            .await?;
        json(&RunDetail {
            blocked: app.store.blocked(&run.digest).await?,
            decisions: app.store.decisions(&run.digest).await?,
            receipts: app.store.receipts(&run.digest).await?,
            inclusion,
            run,
        })
    }
    .await;
    call.answer(r).await
}

async fn evidence(app: &App, p: &Principal, d: &str) -> Result<Response, Refusal> {
    let run = visible_run(app, p, d).await?;
    let (_, bytes) = app
        .store
        .object(&run.digest)
        .await?
        .ok_or(Refusal::NotFound)?;
    let name = format!(
        "attachment; filename=\"{}.{}\"",
        run.digest,
        if run.kind == "journal" {
            "journal.jsonl"
        } else {
            "json"
        }
    );
    let mut resp = ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response();
    if let Ok(v) = HeaderValue::from_str(&name) {
        resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
    }
    Ok(resp)
}

#[utoipa::path(get, path = "/api/runs/{digest}/evidence", tag = "runs",
    summary = "The evidence file as submitted, byte for byte",
    params(("digest" = String, Path, description = "The run: SHA-256 of its submitted bytes, 64 hex digits")),
    responses(
        (status = 200, description = "The submitted bytes", body = Vec<u8>, content_type = "application/octet-stream"),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 404, description = "No such run, or not the caller's to see", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_evidence(d: Result<Path<String>, PathRejection>, call: SignedCall) -> Response {
    let r = async { evidence(&call.app, &call.caller, &path_param(d)?).await }.await;
    call.answer(r).await
}

#[utoipa::path(post, path = "/api/runs/{digest}/receipts", tag = "runs",
    summary = "Store a regulator's signed receipt for a run (regulators)",
    description = "A receipt `knox verify --receipt` wrote for this run's bundle, signed by the caller's key.",
    params(("digest" = String, Path, description = "The run: SHA-256 of its submitted bytes, 64 hex digits")),
    request_body(content = Vec<u8>, content_type = "application/json", description = "The receipt file's bytes"),
    responses(
        (status = 200, description = "Stored and logged", body = ReceiptStored),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 403, description = "Not a regulator", body = ApiError),
        (status = 404, description = "No such run, or not the caller's to see", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_receipt(d: Result<Path<String>, PathRejection>, call: SignedCall) -> Response {
    let (app, p, body) = (&call.app, &call.caller, &call.body);
    let r = async {
        if p.role != Role::Regulator {
            return Err(Refusal::Forbidden("only regulators issue receipts"));
        }
        let run = visible_run(app, p, &path_param(d)?).await?;
        let (_, bundle) = app
            .store
            .object(&run.digest)
            .await?
            .ok_or(Refusal::NotFound)?;
        let checked = knox_verify::receipt::check(body, &bundle)
            .map_err(|e| Refusal::Bad(format!("receipt: {e}")))?;
        if checked.regulator.to_hex() != p.key_id {
            return Err(Refusal::Bad(
                "the receipt is signed by another key than the requester's".into(),
            ));
        }
        let digest = app
            .store
            .add_receipt(&run.digest, p, body, &checked.predicate.result, auth::now())
            .await?;
        json(&ReceiptStored {
            receipt: digest,
            head: app.store.head(&app.log_key, auth::now()).await?,
        })
    }
    .await;
    call.answer(r).await
}

#[utoipa::path(post, path = "/api/session", tag = "session",
    summary = "A browser login link for the web UI",
    responses(
        (status = 200, description = "A link valid for 15 minutes", body = SessionIssued),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_session(call: SignedCall) -> Response {
    let r = async {
        let mut t = [0u8; 32];
        getrandom::fill(&mut t).map_err(|e| Refusal::Bad(format!("no randomness: {e}")))?;
        let token = hex::encode(t);
        let expires = auth::now() + auth::SESSION_SECS;
        call.app
            .store
            .create_session(&call.caller.key_id, &token, expires)
            .await?;
        json(&SessionIssued {
            login: format!("/login?token={token}"),
            expires,
        })
    }
    .await;
    call.answer(r).await
}

#[utoipa::path(get, path = "/api/access-log", tag = "session",
    summary = "The newest 1,000 entries of the access log (regulators)",
    responses(
        (status = 200, description = "Every request the server answered, allowed or refused", body = Vec<AccessEntry>),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 403, description = "Not a regulator", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_access_log(call: SignedCall) -> Response {
    let r = async {
        if call.caller.role != Role::Regulator {
            return Err(Refusal::Forbidden("only regulators read the access log"));
        }
        json(&call.app.store.access_log(LIST_LIMIT).await?)
    }
    .await;
    call.answer(r).await
}

#[utoipa::path(get, path = "/api/log/head", tag = "log",
    summary = "The log's newest signed tree head (Knox's JSON form)",
    responses((status = 200, description = "The head", body = TreeHead)))]
async fn log_head(State(app): State<App>, method: Method, uri: Uri) -> Response {
    let r = async { json(&app.store.head(&app.log_key, auth::now()).await?) }.await;
    finish(&app, None, &method, &uri, r).await
}

/// The most entries one tile may span: tiles are computed from the stored leaves on
/// request, and a level-3 tile would span 2^32 of them.
const MAX_TILE_SPAN: u64 = 1 << 24;

impl App {
    /// The state of a server whose log is named by the default origin of `log_key`
    /// ([`tlog::default_origin`]) and keeps no witness's cosignature.
    pub fn new(store: Store, verifier: Verifier, log_key: PartyKey, live_stale_secs: u64) -> Self {
        Self {
            store,
            verifier: Arc::new(verifier),
            log_origin: tlog::default_origin(&log_key.public_key()).into(),
            log_key: Arc::new(log_key),
            witnesses: Arc::new([]),
            live_stale_secs,
        }
    }
}

fn served(
    content_type: &'static str,
    cache: &'static str,
    body: impl Into<axum::body::Body>,
) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, cache),
        ],
        body.into(),
    )
        .into_response()
}

/// `GET /tlog/checkpoint`: the log's newest checkpoint as a C2SP signed note, with the
/// cosignatures witnesses sent for its size.
#[utoipa::path(get, path = "/tlog/checkpoint", tag = "log",
    summary = "The newest checkpoint as a C2SP signed note, with its witnesses' cosignatures",
    description = "C2SP `tlog-checkpoint`: origin, size and base64 root hash, signed by the log key (Ed25519 note signature); the log's tiles are served under `/tlog/tile/` (C2SP `tlog-tiles`).",
    responses((status = 200, description = "The checkpoint", body = String, content_type = "text/plain")))]
async fn tlog_checkpoint(State(app): State<App>, method: Method, uri: Uri) -> Response {
    let r = async {
        let head = app.store.head(&app.log_key, auth::now()).await?;
        let cp = Checkpoint {
            origin: app.log_origin.to_string(),
            size: head.tree_size,
            root: head.root,
        };
        let note = cp
            .sign(&app.log_key)
            .map_err(|e| StoreError::Corrupt(format!("the log origin: {e}")))?;
        let mut text = note.to_text();
        for line in app.store.cosignatures(head.tree_size).await? {
            text.push_str(&line);
        }
        Ok(served("text/plain; charset=utf-8", "no-cache", text))
    }
    .await;
    finish(&app, None, &method, &uri, r).await
}

/// `GET /tlog/tile/…`: a C2SP tile of the log's tree, or an entry bundle, computed from
/// the stored leaves; a tile past the log's size is not found.
async fn tlog_tile(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    d: Result<Path<String>, PathRejection>,
) -> Response {
    let r = async {
        let id = TileId::parse(&path_param(d)?).map_err(|_| Refusal::NotFound)?;
        let (start, end) = id.leaves().ok_or(Refusal::NotFound)?;
        if end - start > MAX_TILE_SPAN {
            return Err(Refusal::Bad(format!(
                "tile `{}` spans more than 2^24 entries; this log computes tiles on request",
                id.path()
            )));
        }
        let rows = app.store.log_range(start, end).await?;
        if rows.len() as u64 != end - start {
            return Err(Refusal::NotFound);
        }
        let body = match id.kind {
            TileKind::Entries => {
                tiles::entry_bundle(&rows.iter().map(|(d, _)| *d).collect::<Vec<_>>())
            }
            TileKind::Hashes(_) => {
                tiles::hash_tile(&id, &rows.iter().map(|(_, l)| *l).collect::<Vec<_>>())
            }
        };
        Ok(served(
            "application/octet-stream",
            "public, max-age=31536000, immutable",
            body,
        ))
    }
    .await;
    finish(&app, None, &method, &uri, r).await
}

/// `POST /api/log/cosignatures`: a witness sends a checkpoint this log signed, with its
/// cosignature (C2SP `tlog-cosignature`); the cosignatures of the witnesses this server
/// knows (`knox serve --witness`) are checked and kept.
#[utoipa::path(post, path = "/api/log/cosignatures", tag = "log",
    summary = "A witness's cosignature of a checkpoint (C2SP tlog-cosignature)",
    description = "The checkpoint this log signed (`GET /tlog/checkpoint`), as a signed note carrying the witness's `cosignature/v1` line. Only witnesses given to `knox serve --witness` count.",
    request_body(content = String, content_type = "text/plain", description = "The cosigned checkpoint note"),
    responses(
        (status = 200, description = "Kept", body = Cosigned),
        (status = 400, description = "Not a checkpoint this log signed, or a bad signature", body = ApiError),
        (status = 403, description = "No cosignature by a known witness", body = ApiError),
    ))]
async fn log_cosign(State(app): State<App>, method: Method, uri: Uri, body: Bytes) -> Response {
    let r = async {
        let bad = |e: NoteError| Refusal::Bad(e.to_string());
        let note = Note::parse(&body).map_err(bad)?;
        let cp = Checkpoint::parse(&note.text).map_err(bad)?;
        if cp.origin != *app.log_origin || note.text != cp.text() {
            return Err(Refusal::Bad(format!(
                "not a checkpoint of this log (`{}`, no extension lines)",
                app.log_origin
            )));
        }
        if app.store.stored_head(cp.size).await?.map(|h| h.root) != Some(cp.root) {
            return Err(Refusal::Bad(format!(
                "this log signed no checkpoint of size {} with that root",
                cp.size
            )));
        }
        let mut kept = Vec::new();
        for w in app.witnesses.iter() {
            let time = match note.verify(w) {
                Ok(t) => t.unwrap_or_default(),
                Err(NoteError::Unsigned(_)) => continue,
                Err(e) => return Err(bad(e)),
            };
            if let Some(line) = note.signatures.iter().find(|l| l.is_by(w)) {
                app.store
                    .add_cosignature(cp.size, &w.vkey(), &line.to_string(), time)
                    .await?;
                kept.push(w.name().to_owned());
            }
        }
        if kept.is_empty() {
            return Err(Refusal::Forbidden(
                "no cosignature by a witness this log knows (knox serve --witness)",
            ));
        }
        json(&Cosigned {
            tree_size: cp.size,
            cosigned_by: kept,
        })
    }
    .await;
    finish(&app, None, &method, &uri, r).await
}

/// `?from=N`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct FromSize {
    /// The older tree size the proof starts from.
    from: u64,
}

#[utoipa::path(get, path = "/api/log/consistency", tag = "log",
    summary = "A consistency proof from an older size to the newest head",
    params(FromSize),
    responses(
        (status = 200, description = "The proof", body = Consistency),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 404, description = "The log never had that size", body = ApiError),
    ))]
async fn log_consistency(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    q: Result<Query<FromSize>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let r = async {
        let Query(f) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        json(
            &app.store
                .consistency(f.from, &app.log_key, auth::now())
                .await?
                .ok_or(Refusal::NotFound)?,
        )
    }
    .await;
    finish(&app, None, &method, &uri, r).await
}

#[utoipa::path(get, path = "/api/log/inclusion/{digest}", tag = "log",
    summary = "An inclusion proof of a submission against the newest head",
    params(("digest" = String, Path, description = "SHA-256 of the submitted bytes, 64 hex digits")),
    responses(
        (status = 200, description = "The proof", body = Inclusion),
        (status = 400, description = "Malformed digest", body = ApiError),
        (status = 404, description = "Not in the log", body = ApiError),
    ))]
async fn log_inclusion(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    d: Result<Path<String>, PathRejection>,
) -> Response {
    let r = async {
        let d = digest_param(&path_param(d)?)?;
        json(
            &app.store
                .inclusion(&d, &app.log_key, auth::now())
                .await?
                .ok_or(Refusal::NotFound)?,
        )
    }
    .await;
    finish(&app, None, &method, &uri, r).await
}

/// `?token=&next=`.
#[derive(Debug, Deserialize)]
struct Token {
    token: String,
    next: Option<String>,
}

/// A local path to go to after login: `/…`, never `//…` (another host), printable ASCII.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && n.len() < 512
                && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            n
        }
        _ => "/runs",
    }
}

async fn login(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    q: Result<Query<Token>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let r = async {
        let Query(t) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        if t.token.len() != 64 || !t.token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refusal::Auth(AuthError::NoSession));
        }
        let p = app
            .store
            .session(&t.token, auth::now())
            .await?
            .ok_or(Refusal::Auth(AuthError::NoSession))?;
        let cookie = format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            auth::SESSION_COOKIE,
            t.token,
            auth::SESSION_SECS
        );
        let mut resp = StatusCode::SEE_OTHER.into_response();
        if let Ok(v) = HeaderValue::from_str(local_path(t.next.as_deref())) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            resp.headers_mut().insert(header::SET_COOKIE, v);
        }
        Ok((p, resp))
    }
    .await;
    match r {
        Ok((p, resp)) => finish(&app, Some(&p.key_id), &method, &uri, Ok(resp)).await,
        Err(e) => finish(&app, None, &method, &uri, Err(e)).await,
    }
}

async fn not_found(State(app): State<App>, method: Method, uri: Uri) -> Response {
    finish(&app, None, &method, &uri, Err(Refusal::NotFound)).await
}

async fn dashboard_of(
    app: &App,
    providers: &[String],
    f: &RunFilter,
) -> Result<ui::Dashboard, Refusal> {
    Ok(app.store.dashboard(providers, f).await?)
}

/// The chains of runs of each of `providers` (key ids), by provider name, as handed
/// over up to `to`.
async fn chains_of(
    app: &App,
    providers: &[String],
    to: i64,
) -> Result<Vec<(String, chains::KeyChains)>, Refusal> {
    let mut out = Vec::with_capacity(providers.len());
    for key in providers {
        let name = app
            .store
            .principal(key)
            .await?
            .map_or_else(|| key.clone(), |p| p.name);
        let links = app.store.chain_links(key, to, None).await?;
        out.push((name, chains::KeyChains::of(links)));
    }
    Ok(out)
}

async fn ui_dashboard(call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let providers = app.store.visible_providers(p).await?;
        let d = dashboard_of(app, &providers, &RunFilter::default()).await?;
        let c = chains_of(app, &providers, i64::MAX).await?;
        Ok(html(ui::dashboard(p, &d, &c)))
    }
    .await;
    call.answer(r).await
}

async fn ui_runs(
    q: Result<Query<RunFilter>, axum::extract::rejection::QueryRejection>,
    call: SessionCall,
) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let Query(f) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        let providers = app.store.visible_providers(p).await?;
        let page = app.store.runs_page(&providers, &f, page_size(&f)).await?;
        let now = auth::now();
        let live: Vec<(live::LiveRun, String)> = app
            .store
            .live_runs(&providers, 50)
            .await?
            .into_iter()
            .map(|r| {
                let status = r.status(now, app.live_stale_secs).to_owned();
                (r, status)
            })
            .collect();
        Ok(html(ui::runs(p, &f, &page, &live)))
    }
    .await;
    call.answer(r).await
}

/// `?view=graph`: the run page's graph alone, open.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RunView {
    view: Option<String>,
}

async fn ui_run(
    d: Result<Path<String>, PathRejection>,
    v: Result<Query<RunView>, axum::extract::rejection::QueryRejection>,
    call: SessionCall,
) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let Query(v) = v.map_err(|e| Refusal::Bad(e.body_text()))?;
        let graph_only = match v.view.as_deref() {
            None | Some("" | "story") => false,
            Some("graph") => true,
            Some(o) => return Err(Refusal::Bad(format!("view `{o}`: story or graph"))),
        };
        let run = visible_run(app, p, &path_param(d)?).await?;
        let (_, bytes) = app
            .store
            .object(&run.digest)
            .await?
            .ok_or(Refusal::NotFound)?;
        let bundle = if run.kind == "bundle" {
            knox_verify::parse_bundle(&bytes).ok()
        } else {
            None
        };
        let blocked = app.store.blocked(&run.digest).await?;
        let decisions = app.store.decisions(&run.digest).await?;
        let receipts = app.store.receipts(&run.digest).await?;
        let inclusion = app
            .store
            .inclusion(&run.digest, &app.log_key, auth::now())
            .await?;
        let providers = app.store.visible_providers(p).await?;
        let same: Vec<RunRow> = app
            .store
            .runs(
                &providers,
                &RunFilter {
                    q: Some(run.run_id.clone()),
                    ..RunFilter::default()
                },
                50,
            )
            .await?
            .into_iter()
            .filter(|o| o.run_id == run.run_id && o.digest != run.digest)
            .collect();
        let chain = match &run.run_key {
            Some(key) => chains::KeyChains::of(
                app.store
                    .chain_links(&run.provider, i64::MAX, Some(key))
                    .await?,
            )
            .chains
            .into_iter()
            .next(),
            None => None,
        };
        Ok(html(ui::run(
            p,
            &ui::RunPage {
                run: &run,
                bundle: bundle.as_ref(),
                blocked: &blocked,
                decisions: &decisions,
                receipts: &receipts,
                inclusion: inclusion.as_ref(),
                same_run_id: &same,
                chain: chain.as_ref(),
                graph_only,
            },
        )))
    }
    .await;
    call.answer(r).await
}

async fn ui_download(d: Result<Path<String>, PathRejection>, call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async { evidence(app, p, &path_param(d)?).await }.await;
    call.answer(r).await
}

async fn ui_node(ds: Result<Path<(String, String)>, PathRejection>, call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let Path((d, seq)) = ds.map_err(|e| Refusal::Bad(e.body_text()))?;
        let run = visible_run(app, p, &d).await?;
        if seq.is_empty() || seq.len() > 19 || !seq.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refusal::Bad("a node is a sequence number".into()));
        }
        let seq: u64 = seq
            .parse()
            .map_err(|_| Refusal::Bad("a node is a sequence number".into()))?;
        let (_, bytes) = app
            .store
            .object(&run.digest)
            .await?
            .ok_or(Refusal::NotFound)?;
        let bundle = knox_verify::parse_bundle(&bytes).map_err(|_| Refusal::NotFound)?;
        let proof = knox_verify::proof::prove(&bundle, seq).map_err(|_| Refusal::NotFound)?;
        json(&proof)
    }
    .await;
    call.answer(r).await
}

/// `?provider=&from=&to=` (Unix seconds).
#[derive(Debug, Deserialize, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(default)]
struct ReportQuery {
    /// A provider's name (a regulator sees its assigned providers').
    provider: Option<String>,
    /// Period start, Unix seconds (default: the provider's first submission).
    from: Option<i64>,
    /// Period end, Unix seconds (default: its last).
    to: Option<i64>,
    /// `html` (the default) or `pdf`.
    format: Option<String>,
}

/// `http://HOST` of the request, for the links of a PDF report: only a plain
/// `host[:port]` is used (anything else and the PDF names digests without links).
fn request_base(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let plain = !host.is_empty()
        && host.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    plain.then(|| format!("http://{host}"))
}

async fn report_page(
    app: &App,
    p: &Principal,
    q: ReportQuery,
    headers: &HeaderMap,
) -> Result<Response, Refusal> {
    let pdf = match q.format.as_deref() {
        None | Some("html") => false,
        Some("pdf") => true,
        Some(_) => return Err(Refusal::Bad("format is `html` or `pdf`".into())),
    };
    let providers = app.store.visible_providers(p).await?;
    let name = match (&q.provider, p.role) {
        (Some(n), _) => n.clone(),
        (None, Role::Provider) => p.name.clone(),
        (None, Role::Regulator) => {
            return Err(Refusal::Bad(
                "name a provider: /report?provider=NAME".into(),
            ));
        }
    };
    let prov = app
        .store
        .provider_by_name(&name)
        .await?
        .ok_or(Refusal::NotFound)?;
    if !providers.contains(&prov.key_id) {
        return Err(Refusal::NotFound);
    }
    // By default the period is the provider's first to last submission, not 1970 to
    // the end of time.
    let span = app.store.submission_span(&prov.key_id).await?;
    let from = q.from.or(span.map(|(first, _)| first)).unwrap_or(0);
    let to =
        q.to.or(span.map(|(_, last)| last.saturating_add(1)))
            .unwrap_or_else(|| to_i64(auth::now()));
    let f = RunFilter {
        provider: Some(name.clone()),
        from: Some(from),
        to: Some(to),
        ..RunFilter::default()
    };
    let only = vec![prov.key_id.clone()];
    let rows = app.store.runs(&only, &f, i64::MAX).await?;
    let d = dashboard_of(app, &only, &f).await?;
    let head = app.store.head(&app.log_key, auth::now()).await?;
    let shown_to = to.min(to_i64(auth::now()));
    let key_chains = chains::KeyChains::of(app.store.chain_links(&prov.key_id, to, None).await?);
    if pdf {
        let base = request_base(headers);
        let bytes = crate::pdf::report(&crate::pdf::Report {
            provider: &name,
            from,
            to: shown_to,
            rows: &rows,
            dashboard: &d,
            head: Some(&head),
            base: base.as_deref(),
            chains: &key_chains,
        });
        let file: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .collect();
        let disposition = format!("attachment; filename=\"exit-report-{file}.pdf\"");
        let mut resp = ([(header::CONTENT_TYPE, "application/pdf")], bytes).into_response();
        if let Ok(v) = HeaderValue::from_str(&disposition) {
            resp.headers_mut().insert(header::CONTENT_DISPOSITION, v);
        }
        return Ok(resp);
    }
    // The PDF button asks for the same period as this page was asked for.
    let mut pdf_href = format!("/report?provider={}&format=pdf", percent(&name));
    pdf_href.extend(q.from.map(|v| format!("&from={v}")));
    pdf_href.extend(q.to.map(|v| format!("&to={v}")));
    Ok(html(ui::report(
        p,
        &ui::ReportPage {
            provider: &name,
            from,
            to: shown_to,
            rows: &rows,
            dashboard: &d,
            head: Some(&head),
            pdf_href: &pdf_href,
            chains: &key_chains,
        },
    )))
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

async fn ui_report(
    q: Result<Query<ReportQuery>, axum::extract::rejection::QueryRejection>,
    call: SessionCall,
) -> Response {
    let (app, p, headers) = (&call.app, &call.caller, &call.headers);
    let r: Result<Response, Refusal> = async {
        let Query(q) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        report_page(app, p, q, headers).await
    }
    .await;
    call.answer(r).await
}

#[utoipa::path(get, path = "/api/report", tag = "runs",
    summary = "The exit report over a period, as HTML or PDF",
    params(ReportQuery),
    responses(
        (status = 200, description = "The report", content(
            (String = "text/html"),
            (Vec<u8> = "application/pdf"))),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_report(
    q: Result<Query<ReportQuery>, axum::extract::rejection::QueryRejection>,
    call: SignedCall,
) -> Response {
    let r = async {
        let Query(q) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        report_page(&call.app, &call.caller, q, &call.headers).await
    }
    .await;
    call.answer(r).await
}

async fn ui_access(call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        if p.role != Role::Regulator {
            return Err(Refusal::Forbidden("only regulators read the access log"));
        }
        Ok(html(ui::access(
            p,
            &app.store.access_log(LIST_LIMIT).await?,
        )))
    }
    .await;
    call.answer(r).await
}

fn log_vkey(app: &App) -> String {
    NoteKey::log(&app.log_origin, &app.log_key.public_key())
        .map(|k| k.vkey())
        .unwrap_or_default()
}

async fn ui_log(call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = {
        async {
        let head = app.store.head(&app.log_key, auth::now()).await?;
        let body = maud::html! {
            p { "Entries: " (head.tree_size) } p { "Signed root: " code { (head.root) } }
            pre { (serde_json::to_string_pretty(&head).unwrap_or_default()) }
            p { "Log key (C2SP verifier key): " code { (log_vkey(app)) } }
            p { "Auditors: " code { "knox log head --log URL/tlog --log-key VKEY" } " keeps a checkpoint; "
                code { "knox log verify --from HEAD.txt" } " checks the log still extends it. "
                "C2SP checkpoint at /tlog/checkpoint, tiles under /tlog/tile/; "
                "Knox's own heads at /api/log/head, /api/log/consistency?from=N, /api/log/inclusion/DIGEST." }
        };
        Ok(html(ui::page("Transparency log", Some(p), body)))
    }
    .await
    };
    call.answer(r).await
}

#[utoipa::path(post, path = "/api/live", tag = "live",
    summary = "Deliver a live run's lines (providers)",
    description = "A delivery of a run's journal as it is written: its header line and any node lines, again or for the first time. Every delivery is verified as the prefix it makes.",
    request_body(content = Vec<u8>, content_type = "application/x-ndjson", description = "Journal lines"),
    responses(
        (status = 200, description = "Delivered", body = LiveDelivery),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 403, description = "Not a provider", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_live(call: SignedCall) -> Response {
    let r = deliver(&call.app, &call.caller, &call.body).await;
    call.answer(r).await
}

async fn deliver(app: &App, p: &Principal, body: &Bytes) -> Result<Response, Refusal> {
    if p.role != Role::Provider {
        return Err(Refusal::Forbidden("only providers stream runs"));
    }
    let d = live::Delivery::parse(body).map_err(|e| Refusal::Bad(e.to_string()))?;
    let (run, delivered) = live::deliver(&app.store, &app.verifier, p, &d, auth::now())
        .await
        .map_err(live_refusal)?;
    json(&LiveDelivery { run, delivered })
}

fn live_refusal(e: live::LiveError) -> Refusal {
    match e {
        live::LiveError::Store(s) => Refusal::Store(s),
        o => Refusal::Bad(o.to_string()),
    }
}

/// A live run `p` may see, or not found.
async fn visible_live(app: &App, p: &Principal, id: &str) -> Result<live::LiveRun, Refusal> {
    let id = digest_param(id)?;
    let run = app.store.live_run(&id).await?.ok_or(Refusal::NotFound)?;
    if app
        .store
        .visible_providers(p)
        .await?
        .contains(&run.provider)
    {
        Ok(run)
    } else {
        Err(Refusal::NotFound)
    }
}

#[utoipa::path(get, path = "/api/live/{id}", tag = "live",
    summary = "A live run's status",
    params(("id" = String, Path, description = "The live run's id, 64 hex digits")),
    responses(
        (status = 200, description = "The live run", body = LiveStatus),
        (status = 400, description = "Malformed request", body = ApiError),
        (status = 401, description = "No valid signature", body = ApiError),
        (status = 404, description = "No such live run, or not the caller's to see", body = ApiError),
    ),
    security(("knox_key" = [], "knox_time" = [], "knox_nonce" = [], "knox_signature" = [])))]
async fn api_live_run(d: Result<Path<String>, PathRejection>, call: SignedCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r = async {
        let run = visible_live(app, p, &path_param(d)?).await?;
        let status = run.status(auth::now(), app.live_stale_secs).to_owned();
        json(&LiveStatus { run, status })
    }
    .await;
    call.answer(r).await
}

async fn ui_live(d: Result<Path<String>, PathRejection>, call: SessionCall) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let run = visible_live(app, p, &path_param(d)?).await?;
        let header = app.store.live_header(&run.live_id).await?;
        let nodes = app.store.live_nodes(&run.live_id).await?;
        let status = run.status(auth::now(), app.live_stale_secs);
        Ok(html(ui::live(p, &run, status, header.as_deref(), &nodes)))
    }
    .await;
    call.answer(r).await
}

/// `?since=STATUS&seen=N`.
#[derive(Debug, Deserialize)]
struct Since {
    /// The status the page shows.
    since: String,
    /// The node lines the page shows, when it shows them: a new one answers too.
    seen: Option<i64>,
}

/// The most 200 ms waits of a long poll (20 s).
const LONG_POLL_TICKS: u32 = 100;

async fn ui_live_status(
    d: Result<Path<String>, PathRejection>,
    q: Result<Query<Since>, axum::extract::rejection::QueryRejection>,
    call: SessionCall,
) -> Response {
    let (app, p) = (&call.app, &call.caller);
    let r: Result<Response, Refusal> = async {
        let Query(q) = q.map_err(|e| Refusal::Bad(e.body_text()))?;
        let id = path_param(d)?;
        // A long poll: answers as soon as the status differs from the one the page
        // shows, or a node line arrived that it does not show, or after LONG_POLL_TICKS.
        let mut run = visible_live(app, p, &id).await?;
        for _ in 0..LONG_POLL_TICKS {
            if run.status(auth::now(), app.live_stale_secs) != q.since
                || q.seen.is_some_and(|n| n != run.received)
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            run = visible_live(app, p, &id).await?;
        }
        let status = run.status(auth::now(), app.live_stale_secs).to_owned();
        json(&serde_json::json!({"class": ui::live_class(&status), "status": status, "run": run}))
    }
    .await;
    call.answer(r).await
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, app: App) -> std::io::Result<()> {
    axum::serve(listener, router(app)).await
}
