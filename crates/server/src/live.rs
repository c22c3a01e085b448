//! Live runs: a running monitor streams its journal (`knox run --stream-to URL`) and
//! the store shows the run *in progress* with its verified prefix, then *complete* once
//! the sealed bundle of the same run arrives. A run is named by its provider, its run
//! id and the key that signs it ([`live_id`]): an execution that reuses another's run
//! id is another run, never a contradiction of the first.
//!
//! A delivery is a journal fragment: the journal's header line, then any of its node
//! lines, in any order, each ending in `\n` (its checkpoint lines may come along: they
//! are accepted and not stored). The first line stored for a node stays:
//! the same line again changes nothing (a duplicate or re-ordered delivery), a
//! different one is kept as a *conflict* beside it and marks the run tampered — never a
//! replacement. After every delivery the contiguous prefix (nodes 0, 1, … up to the first
//! gap) is verified as a journal (`knox_verify`, the regulator's policy), and the result
//! kept in `live_state`, the one table of the store that is rewritten.

use std::sync::Arc;

use knox_types::aeg::Node;
use knox_types::bundle::{Bundle, JournalHeader};
use knox_types::checkpoint::Checkpoint;
use knox_types::digest::Digest;
use serde::Deserialize;
use sqlx::{AnyConnection, Row as _};

use crate::ingest::Verifier;
use crate::store::{Engine, Principal, Store, StoreError};

/// Domain tag of a live run's id: `SHA-256(tag ‖ provider key id ‖ \n ‖ run id)`.
const LIVE_ID_TAG: &[u8] = b"knox-server/live/v1\n";
/// The most node lines one delivery may carry.
pub const MAX_LINES: usize = 100_000;
/// The longest run id accepted.
const MAX_RUN_ID: usize = 256;
/// Seconds without a delivery after which a live run that never completed is shown
/// as a (verified) prefix rather than in progress: its monitor stopped or died.
pub const DEFAULT_STALE_SECS: u64 = 120;

/// Why a delivery was refused (nothing of it is stored).
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The first line is not a journal header.
    #[error("not a journal fragment: {0}")]
    Header(String),
    /// A node line is malformed.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based line of the delivery.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// Too many lines.
    #[error("a delivery carries at most {MAX_LINES} node lines")]
    TooMany,
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// Verification could not run.
    #[error("verification failed: {0}")]
    Verify(String),
}

impl From<sqlx::Error> for LiveError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(e.into())
    }
}

/// A delivery, parsed: the header line, the run id it names, and the node lines by
/// sequence number.
#[derive(Debug)]
pub struct Delivery<'a> {
    /// The header line, without its `\n`.
    pub header: &'a [u8],
    /// The run id the header names.
    pub run_id: String,
    /// Key id of the run's signing key, as the header names it
    /// ([`crate::ingest::run_key`]): with the run id, what names the run.
    pub run_key: String,
    /// Node lines (without `\n`) and their sequence numbers, as delivered.
    pub nodes: Vec<(u64, &'a [u8])>,
}

/// Just what a header line must name.
#[derive(Deserialize)]
struct HeaderId {
    run_id: String,
    key: knox_types::bundle::PublicKey,
}

/// Just a node line's sequence number.
#[derive(Deserialize)]
struct Seq {
    seq: u64,
}

impl<'a> Delivery<'a> {
    /// Parses a delivery; every line must be whole (end in `\n`).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, LiveError> {
        let body = bytes
            .strip_suffix(b"\n")
            .ok_or_else(|| LiveError::Header("a delivery's lines each end with `\\n`".into()))?;
        let mut lines = body.split(|&b| b == b'\n');
        let header = lines.next().unwrap_or_default();
        if !knox_verify::journal::is_journal(header) {
            return Err(LiveError::Header(
                "the first line does not declare a journal format".into(),
            ));
        }
        let id: HeaderId =
            serde_json::from_slice(header).map_err(|e| LiveError::Header(e.to_string()))?;
        if id.run_id.is_empty()
            || id.run_id.len() > MAX_RUN_ID
            || id.run_id.chars().any(char::is_control)
        {
            return Err(LiveError::Header(format!(
                "run id must be 1 to {MAX_RUN_ID} printable characters"
            )));
        }
        let mut nodes = Vec::new();
        for (i, line) in lines.enumerate() {
            if nodes.len() == MAX_LINES {
                return Err(LiveError::TooMany);
            }
            match serde_json::from_slice::<Seq>(line) {
                Ok(Seq { seq }) => nodes.push((seq, line)),
                // A journal's signed checkpoint (format v3): accepted, not stored. The
                // stored prefix is authenticated by the stream's signature and, once
                // sealed, by the bundle; its verdict counts no checkpoint.
                Err(_) if serde_json::from_slice::<Checkpoint>(line).is_ok() => {}
                Err(e) => {
                    return Err(LiveError::Line {
                        line: i + 2,
                        reason: format!("not a node: {e}"),
                    });
                }
            }
        }
        Ok(Self {
            header,
            run_key: crate::ingest::run_key(&id.key),
            run_id: id.run_id,
            nodes,
        })
    }
}

/// The id of `provider`'s live run `run_id` signed by the key `run_key` (its key id,
/// hex): two executions that reuse a run id are two live runs.
pub fn live_id(provider_key_id: &str, run_id: &str, run_key: &str) -> String {
    let mut m = Vec::with_capacity(
        LIVE_ID_TAG.len() + provider_key_id.len() + run_id.len() + run_key.len() + 2,
    );
    m.extend_from_slice(LIVE_ID_TAG);
    m.extend_from_slice(provider_key_id.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(run_id.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(run_key.as_bytes());
    Digest::sha256(&m).to_hex()
}

/// A live run and what verifying its stored lines last said.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LiveRun {
    /// [`live_id`].
    pub live_id: String,
    /// Provider key id.
    pub provider: String,
    /// Provider's name.
    pub provider_name: String,
    /// Run id.
    pub run_id: String,
    /// Unix seconds of the first delivery.
    pub started_at: i64,
    /// `prefix` (not sealed yet, or never), `complete`, `tampered` or `refused`.
    pub outcome: String,
    /// Nodes verified: the contiguous prefix, or the whole bundle once complete.
    pub verified: i64,
    /// Node lines received (distinct sequence numbers).
    pub received: i64,
    /// Deliveries that contradicted a stored line.
    pub conflicts: i64,
    /// The first offending node, when tampered and named.
    pub offending_node: Option<i64>,
    /// Why tampered or refused.
    pub reason: Option<String>,
    /// The sealed bundle's digest, once submitted.
    pub bundle: Option<String>,
    /// Unix seconds of the last delivery.
    pub updated_at: i64,
}

impl LiveRun {
    /// What the UI shows: `in progress` for an unsealed run that delivered within
    /// `stale_secs`, else the outcome (`prefix` for one whose monitor stopped).
    pub fn status(&self, now: u64, stale_secs: u64) -> &str {
        let recent = now.saturating_sub(u64::try_from(self.updated_at).unwrap_or(0)) < stale_secs;
        if self.outcome == "prefix" && self.bundle.is_none() && recent {
            "in progress"
        } else {
            &self.outcome
        }
    }
}

const LIVE_COLUMNS: &str = "l.live_id, l.provider, p.name AS provider_name, l.run_id, l.started_at, \
    s.outcome, s.verified, s.received, s.conflicts, s.offending_node, s.reason, s.bundle, s.updated_at";

fn live_row(r: &sqlx::any::AnyRow) -> Result<LiveRun, StoreError> {
    Ok(LiveRun {
        live_id: r.try_get("live_id")?,
        provider: r.try_get("provider")?,
        provider_name: r.try_get("provider_name")?,
        run_id: r.try_get("run_id")?,
        started_at: r.try_get("started_at")?,
        outcome: r.try_get("outcome")?,
        verified: r.try_get("verified")?,
        received: r.try_get("received")?,
        conflicts: r.try_get("conflicts")?,
        offending_node: r.try_get("offending_node")?,
        reason: r.try_get("reason")?,
        bundle: r.try_get("bundle")?,
        updated_at: r.try_get("updated_at")?,
    })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// What one delivery did.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct Delivered {
    /// Node lines stored for the first time.
    pub stored: u64,
    /// Node lines identical to the stored ones (nothing changed).
    pub duplicates: u64,
    /// Lines (header or nodes) that contradict the stored ones, kept as conflicts.
    pub conflicts: u64,
}

/// Stores a delivery of `provider` and re-verifies the run, in one transaction.
pub async fn deliver(
    store: &Store,
    verifier: &Arc<Verifier>,
    provider: &Principal,
    d: &Delivery<'_>,
    now: u64,
) -> Result<(LiveRun, Delivered), LiveError> {
    let id = live_id(&provider.key_id, &d.run_id, &d.run_key);
    let now = to_i64(now);
    let mut tx = store.pool().begin().await?;
    lock(&mut tx, store.engine(), &id).await?;
    sqlx::query(
        "INSERT INTO live_runs (live_id, provider, run_id, run_key, header, started_at) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
    )
    .bind(&id)
    .bind(&provider.key_id)
    .bind(&d.run_id)
    .bind(&d.run_key)
    .bind(d.header.to_vec())
    .bind(now)
    .execute(&mut *tx)
    .await?;
    let mut did = Delivered::default();
    let stored: Vec<u8> = sqlx::query("SELECT header FROM live_runs WHERE live_id = $1")
        .bind(&id)
        .fetch_one(&mut *tx)
        .await?
        .try_get("header")?;
    if stored != d.header {
        conflict(&mut tx, &id, None, d.header, now).await?;
        did.conflicts += 1;
    }
    for &(seq, line) in &d.nodes {
        let fresh = sqlx::query(
            "INSERT INTO live_nodes (live_id, seq, line, received_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&id)
        .bind(to_i64(seq))
        .bind(line.to_vec())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if fresh.rows_affected() == 1 {
            did.stored += 1;
            continue;
        }
        let first: Vec<u8> =
            sqlx::query("SELECT line FROM live_nodes WHERE live_id = $1 AND seq = $2")
                .bind(&id)
                .bind(to_i64(seq))
                .fetch_one(&mut *tx)
                .await?
                .try_get("line")?;
        if first == line {
            did.duplicates += 1;
        } else {
            conflict(&mut tx, &id, Some(seq), line, now).await?;
            did.conflicts += 1;
        }
    }
    let bundle = match current_bundle(&mut tx, &id).await? {
        Some(b) => Some(b),
        // The sealed bundle can arrive before the stream's last delivery (or its
        // first): the one this provider submitted under the run id is linked now.
        None => submitted_bundle(&mut tx, &provider.key_id, &d.run_id, &d.run_key).await?,
    };
    recompute(&mut tx, verifier, &id, bundle.as_deref(), now).await?;
    tx.commit().await?;
    let run = store
        .live_run(&id)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a live run vanished".into()))?;
    Ok((run, did))
}

/// Links the sealed bundle `digest` (just stored) to `provider`'s live run of the same
/// run id and run key, if there is one, and re-verifies: the run is complete when the
/// bundle verified complete and agrees with every streamed line.
pub async fn sealed(
    store: &Store,
    verifier: &Arc<Verifier>,
    provider: &Principal,
    (run_id, run_key): (&str, &str),
    digest: &str,
    now: u64,
) -> Result<Option<LiveRun>, LiveError> {
    let id = live_id(&provider.key_id, run_id, run_key);
    let mut tx = store.pool().begin().await?;
    lock(&mut tx, store.engine(), &id).await?;
    let exists = sqlx::query("SELECT live_id FROM live_runs WHERE live_id = $1")
        .bind(&id)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    if !exists {
        return Ok(None);
    }
    recompute(&mut tx, verifier, &id, Some(digest), to_i64(now)).await?;
    tx.commit().await?;
    Ok(store.live_run(&id).await?)
}

/// Serialises writers of one live run: PostgreSQL replicas take an advisory lock; on
/// SQLite the transaction's first write takes the database's write lock.
async fn lock(conn: &mut AnyConnection, engine: Engine, id: &str) -> Result<(), LiveError> {
    match engine {
        Engine::Postgres => {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(id)
                .fetch_optional(&mut *conn)
                .await?;
        }
        Engine::Sqlite => {
            // A no-op write: takes the write lock now, so that reading then writing in
            // this transaction never has to upgrade a read lock (SQLITE_BUSY).
            sqlx::query("UPDATE live_state SET updated_at = updated_at WHERE live_id = $1")
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
    }
    Ok(())
}

async fn conflict(
    conn: &mut AnyConnection,
    id: &str,
    seq: Option<u64>,
    line: &[u8],
    now: i64,
) -> Result<(), LiveError> {
    sqlx::query(
        "INSERT INTO live_conflicts (live_id, seq, line, received_at) VALUES ($1, $2, $3, $4)",
    )
    .bind(id)
    .bind(seq.map(to_i64))
    .bind(line.to_vec())
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn current_bundle(conn: &mut AnyConnection, id: &str) -> Result<Option<String>, LiveError> {
    let row = sqlx::query("SELECT bundle FROM live_state WHERE live_id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(match row {
        Some(r) => r.try_get("bundle")?,
        None => None,
    })
}

/// The latest sealed bundle `provider` submitted under `run_id`, signed by `run_key`,
/// if any.
async fn submitted_bundle(
    conn: &mut AnyConnection,
    provider: &str,
    run_id: &str,
    run_key: &str,
) -> Result<Option<String>, LiveError> {
    let row = sqlx::query(
        "SELECT digest FROM runs WHERE provider = $1 AND run_id = $2 AND run_key = $3 \
         AND kind = 'bundle' ORDER BY log_index DESC LIMIT 1",
    )
    .bind(provider)
    .bind(run_id)
    .bind(run_key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match row {
        Some(r) => Some(r.try_get("digest")?),
        None => None,
    })
}

/// A verdict on the stored lines.
struct State {
    outcome: &'static str,
    verified: u64,
    node: Option<u64>,
    reason: Option<String>,
}

impl State {
    fn tampered(node: Option<u64>, reason: String) -> Self {
        Self {
            outcome: "tampered",
            verified: 0,
            node,
            reason: Some(reason),
        }
    }
}

/// Re-verifies the live run `id` from what is stored (inside the caller's transaction)
/// and rewrites its state. Conflicts and a tampered prefix make it tampered; a sealed
/// bundle that verified complete and agrees with the stream makes it complete.
async fn recompute(
    conn: &mut AnyConnection,
    verifier: &Arc<Verifier>,
    id: &str,
    bundle: Option<&str>,
    now: i64,
) -> Result<(), LiveError> {
    let header: Vec<u8> = sqlx::query("SELECT header FROM live_runs WHERE live_id = $1")
        .bind(id)
        .fetch_one(&mut *conn)
        .await?
        .try_get("header")?;
    let rows = sqlx::query("SELECT seq, line FROM live_nodes WHERE live_id = $1 ORDER BY seq")
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
    let mut lines: Vec<(u64, Vec<u8>)> = Vec::with_capacity(rows.len());
    for r in &rows {
        let seq: i64 = r.try_get("seq")?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt("negative seq".into()))?;
        lines.push((seq, r.try_get("line")?));
    }
    let conflicts = sqlx::query("SELECT seq FROM live_conflicts WHERE live_id = $1 ORDER BY id")
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
    let first_conflict: Option<Option<i64>> =
        conflicts.first().map(|r| r.try_get("seq")).transpose()?;
    let sealed = match bundle {
        Some(d) => {
            let row = sqlx::query(
                "SELECT r.outcome, r.reason, r.offending_node, o.bytes FROM runs r \
                 JOIN objects o ON o.digest = r.digest WHERE r.digest = $1",
            )
            .bind(d)
            .fetch_one(&mut *conn)
            .await?;
            Some(Sealed {
                outcome: row.try_get("outcome")?,
                reason: row.try_get("reason")?,
                node: row.try_get("offending_node")?,
                bytes: row.try_get("bytes")?,
            })
        }
        None => None,
    };
    let received = lines.len() as u64;
    let v = verifier.clone();
    let state = tokio::task::spawn_blocking(move || {
        judge(&v, &header, &lines, first_conflict, sealed.as_ref())
    })
    .await
    .map_err(|e| LiveError::Verify(e.to_string()))?;
    sqlx::query(
        "INSERT INTO live_state (live_id, outcome, verified, received, conflicts, offending_node, \
         reason, bundle, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
         ON CONFLICT (live_id) DO UPDATE SET outcome = excluded.outcome, verified = excluded.verified, \
         received = excluded.received, conflicts = excluded.conflicts, \
         offending_node = excluded.offending_node, reason = excluded.reason, \
         bundle = excluded.bundle, updated_at = excluded.updated_at",
    )
    .bind(id)
    .bind(state.outcome)
    .bind(to_i64(state.verified))
    .bind(to_i64(received))
    .bind(to_i64(conflicts.len() as u64))
    .bind(state.node.map(to_i64))
    .bind(state.reason)
    .bind(bundle)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The sealed bundle's stored verdict and bytes.
struct Sealed {
    outcome: String,
    reason: Option<String>,
    node: Option<i64>,
    bytes: Vec<u8>,
}

/// The verdict on a live run's lines (blocking: verifies).
fn judge(
    v: &Verifier,
    header: &[u8],
    lines: &[(u64, Vec<u8>)],
    first_conflict: Option<Option<i64>>,
    sealed: Option<&Sealed>,
) -> State {
    if let Some(seq) = first_conflict {
        let what = seq.map_or_else(|| "the header".to_owned(), |s| format!("node {s}"));
        return State::tampered(
            seq.and_then(|s| u64::try_from(s).ok()),
            format!("a delivery contradicts the {what} stored first (both are kept)"),
        );
    }
    let mut journal =
        Vec::with_capacity(header.len() + 1 + lines.iter().map(|l| l.1.len() + 1).sum::<usize>());
    journal.extend_from_slice(header);
    journal.push(b'\n');
    let mut contiguous = 0u64;
    for (seq, line) in lines {
        if *seq != contiguous {
            break;
        }
        journal.extend_from_slice(line);
        journal.push(b'\n');
        contiguous += 1;
    }
    let prefix = match v.check_streamed(&journal) {
        Ok(r) => r.outcome,
        Err(e) => return State::tampered(None, format!("the streamed journal is unreadable: {e}")),
    };
    match prefix {
        knox_verify::Outcome::Tampered { node, reason } => return State::tampered(node, reason),
        knox_verify::Outcome::Refused { reason } => {
            return State {
                outcome: "refused",
                verified: 0,
                node: None,
                reason: Some(reason),
            };
        }
        knox_verify::Outcome::Prefix | knox_verify::Outcome::Complete => {}
    }
    let Some(s) = sealed else {
        return State {
            outcome: "prefix",
            verified: contiguous,
            node: None,
            reason: None,
        };
    };
    if s.outcome != "complete" {
        return State {
            outcome: if s.outcome == "refused" {
                "refused"
            } else {
                "tampered"
            },
            verified: 0,
            node: s.node.and_then(|n| u64::try_from(n).ok()),
            reason: Some(format!(
                "the sealed bundle is {}: {}",
                s.outcome,
                s.reason.as_deref().unwrap_or("no reason given")
            )),
        };
    }
    match knox_verify::parse_bundle(&s.bytes) {
        Ok(b) => agrees(&b, header, lines),
        Err(e) => State::tampered(None, format!("the sealed bundle is unreadable: {e}")),
    }
}

/// Whether a complete bundle says what was streamed: the same header and, for every
/// streamed node, the same node.
fn agrees(b: &Bundle, header: &[u8], lines: &[(u64, Vec<u8>)]) -> State {
    let Ok(h) = serde_json::from_slice::<JournalHeader>(header) else {
        return State::tampered(None, "the streamed header is not a journal header".into());
    };
    let expected = JournalHeader {
        format: h.format.clone(),
        run_id: b.run_id.clone(),
        prompt: b.prompt.clone(),
        apm: b.apm.clone(),
        apm_attestation: b.apm_attestation.clone(),
        key: b.key.clone(),
        platform: b.platform.clone(),
        models: b.models.clone(),
        contract: b.contract.clone(),
        manifest: b.manifest.clone(),
    };
    if h != expected {
        return State::tampered(
            None,
            "the sealed bundle's APM, key, prompt or platform differ from the streamed header"
                .into(),
        );
    }
    for (seq, line) in lines {
        let same = serde_json::from_slice::<Node>(line).ok().is_some_and(|n| {
            usize::try_from(*seq)
                .ok()
                .and_then(|i| b.nodes.get(i))
                .is_some_and(|m| *m == n)
        });
        if !same {
            return State::tampered(
                Some(*seq),
                format!("streamed node {seq} is not the sealed bundle's node {seq}"),
            );
        }
    }
    State {
        outcome: "complete",
        verified: b.nodes.len() as u64,
        node: None,
        reason: None,
    }
}

impl Store {
    /// A live run by id (no access check: callers check the provider).
    pub async fn live_run(&self, id: &str) -> Result<Option<LiveRun>, StoreError> {
        let sql = format!(
            "SELECT {LIVE_COLUMNS} FROM live_runs l JOIN live_state s ON s.live_id = l.live_id \
             JOIN principals p ON p.key_id = l.provider WHERE l.live_id = $1"
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(live_row).transpose()
    }

    /// Live runs of the `providers` given, most recently active first.
    pub async fn live_runs(
        &self,
        providers: &[String],
        limit: i64,
    ) -> Result<Vec<LiveRun>, StoreError> {
        if providers.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = (1..=providers.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {LIVE_COLUMNS} FROM live_runs l JOIN live_state s ON s.live_id = l.live_id \
             JOIN principals p ON p.key_id = l.provider WHERE l.provider IN ({}) \
             ORDER BY s.updated_at DESC, l.live_id LIMIT ${}",
            list.join(", "),
            providers.len() + 1
        );
        let mut q = sqlx::query(&sql);
        for p in providers {
            q = q.bind(p.clone());
        }
        let rows = q.bind(limit).fetch_all(self.pool()).await?;
        rows.iter().map(live_row).collect()
    }

    /// A live run's stored node lines, by sequence number (the UI lists them).
    /// A live run's header line, as first delivered.
    pub async fn live_header(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = sqlx::query("SELECT header FROM live_runs WHERE live_id = $1")
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        Ok(row.map(|r| r.try_get("header")).transpose()?)
    }

    /// A live run's node lines by sequence number, as first delivered.
    pub async fn live_nodes(&self, id: &str) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
        let rows = sqlx::query("SELECT seq, line FROM live_nodes WHERE live_id = $1 ORDER BY seq")
            .bind(id)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("seq")?, r.try_get("line")?)))
            .collect()
    }
}
