//! The evidence store: one schema, migrated on SQLite (embedded, the default) or
//! PostgreSQL (shared by several stateless `knox serve` replicas), through `sqlx`'s
//! `Any` driver. Every statement binds its values (`$1`, `$2`, … — both engines read
//! them); no value is ever spliced into SQL text.

use std::borrow::Cow;

use knox_attest::PartyKey;
use knox_types::bundle::PublicKey;
use knox_types::digest::Digest;
use knox_types::merkle;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyPool, Row as _};

use crate::ingest::Checked;
use crate::tlog::{self, Consistency, Inclusion, TreeHead};

/// SQLite migrations, in order.
const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "store",
        include_str!("../migrations/sqlite/0001_store.sql"),
    ),
    (
        2,
        "live",
        include_str!("../migrations/sqlite/0002_live.sql"),
    ),
    (
        3,
        "run keys",
        include_str!("../migrations/sqlite/0003_run_keys.sql"),
    ),
    (
        4,
        "key chains",
        include_str!("../migrations/sqlite/0004_key_chains.sql"),
    ),
    (
        5,
        "list order",
        include_str!("../migrations/sqlite/0005_list_order.sql"),
    ),
    (
        6,
        "announcements",
        include_str!("../migrations/sqlite/0006_announcements.sql"),
    ),
    (
        7,
        "log identity",
        include_str!("../migrations/sqlite/0007_log_identity.sql"),
    ),
    (
        8,
        "log checkpoints",
        include_str!("../migrations/sqlite/0008_log_checkpoints.sql"),
    ),
    (
        9,
        "list indexes",
        include_str!("../migrations/sqlite/0009_list_indexes.sql"),
    ),
];
/// PostgreSQL migrations: the same schema in its dialect.
const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "store",
        include_str!("../migrations/postgres/0001_store.sql"),
    ),
    (
        2,
        "live",
        include_str!("../migrations/postgres/0002_live.sql"),
    ),
    (
        3,
        "run keys",
        include_str!("../migrations/postgres/0003_run_keys.sql"),
    ),
    (
        4,
        "key chains",
        include_str!("../migrations/postgres/0004_key_chains.sql"),
    ),
    (
        5,
        "list order",
        include_str!("../migrations/postgres/0005_list_order.sql"),
    ),
    (
        6,
        "announcements",
        include_str!("../migrations/postgres/0006_announcements.sql"),
    ),
    (
        7,
        "log identity",
        include_str!("../migrations/postgres/0007_log_identity.sql"),
    ),
    (
        8,
        "log checkpoints",
        include_str!("../migrations/postgres/0008_log_checkpoints.sql"),
    ),
    (
        9,
        "list indexes",
        include_str!("../migrations/postgres/0009_list_indexes.sql"),
    ),
];

/// The statements that turn SQLite's v2 `live_runs` into v3's ([`Store::migrate`]).
const LIVE_RUNS_V3: &[&str] = &[
    "CREATE TABLE live_runs_v3 (
        live_id     TEXT PRIMARY KEY,
        provider    TEXT NOT NULL REFERENCES principals (key_id),
        run_id      TEXT NOT NULL,
        run_key     TEXT,
        header      BLOB NOT NULL,
        started_at  BIGINT NOT NULL
    )",
    "INSERT INTO live_runs_v3 (live_id, provider, run_id, header, started_at) \
        SELECT live_id, provider, run_id, header, started_at FROM live_runs",
    "DROP TABLE live_runs",
    "ALTER TABLE live_runs_v3 RENAME TO live_runs",
    "CREATE UNIQUE INDEX live_runs_by_run ON live_runs (provider, run_id, run_key)",
    "CREATE INDEX live_runs_by_provider ON live_runs (provider, started_at)",
    "CREATE TRIGGER live_runs_no_update BEFORE UPDATE ON live_runs \
        BEGIN SELECT RAISE(ABORT, 'append-only table'); END",
    "CREATE TRIGGER live_runs_no_delete BEFORE DELETE ON live_runs \
        BEGIN SELECT RAISE(ABORT, 'append-only table'); END",
];

/// What SQLite's v1 `objects` table says that v6's does not: its kinds, without
/// `'announcement'`.
const OBJECTS_V1_KINDS: &str = "CHECK (kind IN ('bundle', 'journal', 'receipt', 'unreadable'))";

/// The statements that turn SQLite's v1 `objects` into v6's, which admits key
/// announcements ([`Store::migrate`]).
const OBJECTS_V6: &[&str] = &[
    "CREATE TABLE objects_v6 (
        digest      TEXT PRIMARY KEY,
        kind        TEXT NOT NULL CHECK (kind IN ('bundle', 'journal', 'receipt', 'unreadable', 'announcement')),
        bytes       BLOB NOT NULL,
        size        BIGINT NOT NULL,
        stored_at   BIGINT NOT NULL
    )",
    "INSERT INTO objects_v6 (digest, kind, bytes, size, stored_at) \
        SELECT digest, kind, bytes, size, stored_at FROM objects",
    "DROP TABLE objects",
    "ALTER TABLE objects_v6 RENAME TO objects",
    "CREATE TRIGGER objects_no_update BEFORE UPDATE ON objects \
        BEGIN SELECT RAISE(ABORT, 'append-only table'); END",
    "CREATE TRIGGER objects_no_delete BEFORE DELETE ON objects \
        BEGIN SELECT RAISE(ABORT, 'append-only table'); END",
];

/// The rows of `runs r` that the list of runs and the dashboard count: every
/// submission but a verified key announcement (no run; the chains of runs show it as
/// its key's link 0). An announcement that does not verify stays in the list.
const NOT_ANNOUNCED: &str = "NOT (r.kind = 'announcement' AND r.outcome = 'complete')";

/// Which database engine a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Embedded SQLite (a file).
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

impl Engine {
    /// The engine of a database URL.
    pub fn of_url(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(StoreError::Url)
        }
    }

    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgresql",
        }
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no supported engine.
    #[error("database URL must start with sqlite: or postgres://")]
    Url,
    /// The database refused or failed.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// A migration failed.
    #[error("migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value is not what this schema writes (a corrupted database).
    #[error("corrupted store: {0}")]
    Corrupt(String),
    /// A principal's name or key is already registered differently.
    #[error("principal conflict: {0}")]
    Conflict(String),
    /// Encoding a value to store failed.
    #[error("encoding: {0}")]
    Json(#[from] serde_json::Error),
    /// The store's log is signed with another key than the server's.
    #[error(
        "this store's log is signed with another log key ({stored}); this server's is {ours}: give every server sharing the store the same --log-key"
    )]
    LogKey {
        /// The key of the store's log (its key id).
        stored: String,
        /// The server's key (its key id).
        ours: String,
    },
    /// A list filter's value is malformed (a day, a cursor).
    #[error("{0}")]
    Filter(String),
    /// The store's log has another origin than the server was given.
    #[error(
        "this store's log is named `{stored}`; this server was given --log-origin `{ours}`: a log's name does not change, and every server sharing the store gives the same"
    )]
    LogOrigin {
        /// The store's log origin.
        stored: String,
        /// The server's.
        ours: String,
    },
}

/// A provider or a regulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Submits runs, sees its own.
    Provider,
    /// Sees the providers assigned to it, signs receipts.
    Regulator,
}

impl Role {
    /// Name as stored.
    pub fn name(self) -> &'static str {
        match self {
            Self::Provider => "provider",
            Self::Regulator => "regulator",
        }
    }

    fn parse(s: &str) -> Result<Self, StoreError> {
        match s {
            "provider" => Ok(Self::Provider),
            "regulator" => Ok(Self::Regulator),
            o => Err(StoreError::Corrupt(format!("role `{o}`"))),
        }
    }
}

/// A registered principal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// `H("knox/key", public key)`, hex.
    pub key_id: String,
    /// Public key, hex.
    pub public_key: String,
    /// Role.
    pub role: Role,
    /// Display name.
    pub name: String,
}

/// A stored run (bundle or journal) and what verification found at ingest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct RunRow {
    /// SHA-256 of the submitted bytes, hex.
    pub digest: String,
    /// Submitting provider's key id.
    pub provider: String,
    /// Provider's name.
    pub provider_name: String,
    /// The run identifier the evidence names.
    pub run_id: String,
    /// `bundle`, `journal` or `announcement` (a key announcement: no run, its key's
    /// link 0).
    pub kind: String,
    /// `complete`, `prefix`, `tampered` or `refused`.
    pub outcome: String,
    /// First offending node, when tampered and named.
    pub offending_node: Option<i64>,
    /// Why tampered or refused.
    pub reason: Option<String>,
    /// Platform evidence mode.
    pub platform: String,
    /// Whether hardware vouches for the signing key.
    pub hardware_backed: bool,
    /// Nodes.
    pub nodes: i64,
    /// Tool calls.
    pub tool_calls: i64,
    /// Executed actions.
    pub executed: i64,
    /// Blocked actions.
    pub blocked: i64,
    /// Interrupts.
    pub interrupts: i64,
    /// Disclosures flagged for manual review.
    pub flagged: i64,
    /// Signed structure root, when complete.
    pub structure_root: Option<String>,
    /// The verifier's report, JSON.
    pub report: String,
    /// Index in the transparency log.
    pub log_index: i64,
    /// Unix seconds.
    pub submitted_at: i64,
    /// Key id of the key the run's evidence is signed by (the run's own key; absent
    /// for evidence stored before schema v3). A run id is unique only with it: two
    /// executions may reuse a run id.
    pub run_key: Option<String>,
}

impl RunRow {
    /// The row a verified submission is stored as.
    fn of(
        provider: &Principal,
        digest: &str,
        c: &Checked,
        log_index: i64,
        now: i64,
    ) -> Result<Self, StoreError> {
        let r = &c.report;
        let (offending_node, reason) = match &r.outcome {
            knox_verify::Outcome::Tampered { node, reason } => {
                (node.map(to_i64), Some(reason.clone()))
            }
            knox_verify::Outcome::Refused { reason } => (None, Some(reason.clone())),
            _ => (None, None),
        };
        Ok(Self {
            digest: digest.to_owned(),
            provider: provider.key_id.clone(),
            provider_name: provider.name.clone(),
            run_id: r.run_id.clone(),
            kind: c.kind.to_owned(),
            outcome: r.outcome.name().to_owned(),
            offending_node,
            reason,
            platform: r.platform.to_string(),
            hardware_backed: r.hardware_backed,
            nodes: to_i64(r.nodes),
            tool_calls: to_i64(r.tool_calls),
            executed: to_i64(r.executed),
            blocked: to_i64(r.blocked.len() as u64),
            interrupts: to_i64(r.interrupts.len() as u64),
            flagged: to_i64(r.flagged_for_review),
            structure_root: c.structure_root.map(|d| d.to_hex()),
            report: serde_json::to_string(r)?,
            log_index,
            submitted_at: now,
            run_key: c.run_key.clone(),
        })
    }
}

/// A blocked action, indexed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct BlockedRow {
    /// Node.
    pub node: i64,
    /// Agent.
    pub agent: String,
    /// Tool.
    pub tool: Option<String>,
    /// Guard.
    pub guard: String,
    /// Reason.
    pub reason: String,
}

/// A regulation decision, indexed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct DecisionRow {
    /// Check node.
    pub node: i64,
    /// Regulation.
    pub regulation: String,
    /// Recipient.
    pub recipient: String,
    /// Verdict.
    pub verdict: String,
    /// Deciding policies, comma-separated.
    pub policies: String,
    /// Provisions, comma-separated.
    pub provisions: String,
}

/// A stored receipt.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct ReceiptRow {
    /// SHA-256 of the receipt file.
    pub digest: String,
    /// Regulator's name.
    pub regulator: String,
    /// Outcome the regulator attests.
    pub outcome: String,
    /// Log size when it was stored.
    pub tree_size: i64,
    /// Unix seconds.
    pub stored_at: i64,
}

/// One access-log entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct AccessEntry {
    /// Sequence.
    pub id: i64,
    /// Unix seconds.
    pub at: i64,
    /// Principal key id, when known.
    pub principal: Option<String>,
    /// HTTP method.
    pub method: String,
    /// Path and query as requested.
    pub target: String,
    /// `allowed` or `refused`.
    pub decision: String,
    /// Why.
    pub reason: String,
}

/// The result of an ingest.
#[derive(Debug, Clone)]
pub struct Ingested {
    /// The run as stored.
    pub run: RunRow,
    /// Whether these bytes were already stored (nothing changed).
    pub duplicate: bool,
}

/// Filters of the runs list; every value is bound, never spliced.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(default)]
pub struct RunFilter {
    /// Provider name, exact.
    pub provider: Option<String>,
    /// Outcome, exact.
    pub outcome: Option<String>,
    /// A blocked action's tool, exact.
    pub tool: Option<String>,
    /// A blocked action's guard, exact.
    pub guard: Option<String>,
    /// A regulation verdict, exact.
    pub verdict: Option<String>,
    /// A provision, substring.
    pub provision: Option<String>,
    /// A model (name or weights hash), substring.
    pub model: Option<String>,
    /// Run id, substring.
    pub q: Option<String>,
    /// Submitted at or after (Unix seconds).
    pub from: Option<i64>,
    /// Submitted before (Unix seconds).
    pub to: Option<i64>,
    /// Submitted on or after this day (`YYYY-MM-DD`, UTC): the time-range picker's
    /// start; `from` wins when both are given.
    pub since: Option<String>,
    /// Submitted on or before this day (`YYYY-MM-DD`, UTC); `to` wins when both are given.
    pub until: Option<String>,
    /// The next page: runs listed after this cursor ([`RunsPage::next`]).
    pub after: Option<String>,
    /// Runs per page (at most the server's list limit, 1,000).
    pub limit: Option<i64>,
}

impl RunFilter {
    /// The period's first second, from `from` or `since`.
    pub fn period_start(&self) -> Result<Option<i64>, StoreError> {
        match (self.from, self.since.as_deref().filter(|s| !s.is_empty())) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(day)) => day_start(day).map(Some),
            (None, None) => Ok(None),
        }
    }

    /// The second after the period, from `to` or `until` (the day after it).
    pub fn period_end(&self) -> Result<Option<i64>, StoreError> {
        match (self.to, self.until.as_deref().filter(|s| !s.is_empty())) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(day)) => day_start(day).map(|t| Some(t.saturating_add(86_400))),
            (None, None) => Ok(None),
        }
    }
}

/// The first second of a UTC day written `YYYY-MM-DD`.
fn day_start(day: &str) -> Result<i64, StoreError> {
    let bad = || StoreError::Filter(format!("`{day}` is not a day (YYYY-MM-DD)"));
    let mut parts = day.splitn(3, '-');
    let mut num = |n: usize| {
        parts
            .next()
            .filter(|p| p.len() == n && p.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|p| p.parse::<i64>().ok())
            .ok_or_else(bad)
    };
    let (y, m, d) = (num(4)?, num(2)?, num(2)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days_in = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    let max = usize::try_from(m - 1)
        .ok()
        .and_then(|i| days_in.get(i))
        .ok_or_else(bad)?;
    if d < 1 || d > *max {
        return Err(bad());
    }
    // Days since 1970-01-01 (the civil-from-days inverse, proleptic Gregorian).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Ok((era * 146_097 + doe - 719_468) * 86_400)
}

/// A place in the runs list (newest first): the last run shown, by submission time and
/// log index; the next page lists the runs after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The run's submission time.
    pub submitted_at: i64,
    /// The run's log index.
    pub log_index: i64,
}

impl Cursor {
    /// The cursor of a listed run.
    pub fn of(r: &RunRow) -> Self {
        Self {
            submitted_at: r.submitted_at,
            log_index: r.log_index,
        }
    }

    /// Reads `TIME.INDEX`.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let bad = || StoreError::Filter(format!("`{s}` is not a page cursor (TIME.INDEX)"));
        let (t, i) = s.split_once('.').ok_or_else(bad)?;
        Ok(Self {
            submitted_at: t.parse().map_err(|_| bad())?,
            log_index: i.parse().map_err(|_| bad())?,
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.submitted_at, self.log_index)
    }
}

/// One page of the runs list.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunsPage {
    /// The runs, newest first.
    pub rows: Vec<RunRow>,
    /// The cursor of the next page (`after=`), when more runs match.
    pub next: Option<String>,
    /// How many runs the filter matches in all pages.
    pub total: i64,
}

/// Dashboard figures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Dashboard {
    /// Per provider: runs, blocked actions, tool calls, tampered, prefixes, refused.
    pub providers: Vec<(String, [i64; 6])>,
    /// Top blocked tools.
    pub tools: Vec<(String, i64)>,
    /// Top blocking guards.
    pub guards: Vec<(String, i64)>,
    /// Regulation verdicts by provision.
    pub provisions: Vec<(String, i64)>,
    /// Blocked rate per provider and day, percent of tool calls.
    pub rate: Vec<(String, i64)>,
}

/// A value bound to a statement.
#[derive(Debug, Clone)]
enum Bind {
    Text(String),
    Int(i64),
    Null,
}

impl Bind {
    fn bind<'q>(
        self,
        q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        match self {
            Self::Text(s) => q.bind(s),
            Self::Int(i) => q.bind(i),
            Self::Null => q.bind(None::<String>),
        }
    }
}

/// The most rows one multi-row `INSERT` carries (well under both engines' limits on
/// bound parameters: SQLite 32,766, PostgreSQL 65,535).
const ROWS_PER_INSERT: usize = 500;

/// Inserts `rows` with multi-row statements `head (…), (…) tail`; `head` and `tail`
/// are fixed SQL of this module, every value is bound.
async fn insert_rows<const N: usize>(
    conn: &mut sqlx::AnyConnection,
    head: &str,
    tail: &str,
    rows: Vec<[Bind; N]>,
) -> Result<(), StoreError> {
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<[Bind; N]> = rows.by_ref().take(ROWS_PER_INSERT).collect();
        let mut sql = String::with_capacity(head.len() + chunk.len() * N * 5 + tail.len());
        sql.push_str(head);
        for r in 0..chunk.len() {
            if r > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            for c in 0..N {
                if c > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("${}", r * N + c + 1));
            }
            sql.push(')');
        }
        sql.push_str(tail);
        let mut q = sqlx::query(&sql);
        for b in chunk.into_iter().flatten() {
            q = b.bind(q);
        }
        q.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Escapes `%`, `_` and `\` for a `LIKE … ESCAPE '\'` pattern.
fn like(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('%');
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// Binds `b`; its placeholder.
fn push(b: Bind, binds: &mut Vec<Bind>) -> String {
    binds.push(b);
    format!("${}", binds.len())
}

/// A fact stored beside a run that the runs list filters on (`run_facts`, schema v9):
/// a blocked action's tool or guard and a regulation verdict, matched exactly; a
/// decision's provisions and a model, matched as a substring.
#[derive(Debug, Clone)]
struct Fact {
    /// `tool`, `guard`, `verdict`, `provision` or `model`.
    name: &'static str,
    /// The value asked for.
    value: String,
    /// Whether it is matched exactly (else as a substring).
    exact: bool,
}

impl Fact {
    /// The facts `f` asks for, as asked (exact ones first).
    fn of(f: &RunFilter) -> Vec<Self> {
        [
            ("tool", &f.tool, true),
            ("guard", &f.guard, true),
            ("verdict", &f.verdict, true),
            ("provision", &f.provision, false),
            ("model", &f.model, false),
        ]
        .into_iter()
        .filter_map(|(name, v, exact)| filled(v).map(|value| Self { name, value, exact }))
        .collect()
    }

    /// The condition that `x`, a `run_facts` row, is this fact.
    fn on(&self, x: &str, binds: &mut Vec<Bind>) -> String {
        if self.exact {
            format!(
                "{x}.fact = '{}' AND {x}.value = {}",
                self.name,
                push(Bind::Text(self.value.clone()), binds)
            )
        } else {
            format!(
                "{x}.fact = '{}' AND {x}.value LIKE {} ESCAPE '\\'",
                self.name,
                push(Bind::Text(like(&self.value)), binds)
            )
        }
    }
}

/// How a page of runs with a substring fact (and no exact one) is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Walk the runs newest first in `runs_listed`, testing each for the facts: a page
    /// fills after about `page × runs / matches` runs, so this is the reading when
    /// many runs match.
    Walk,
    /// Read the matching facts from `run_facts_listed` and sort their runs: the cost
    /// is the number of matches, whatever their age, so this is the reading when few
    /// runs match.
    Matches,
}

/// Up to this many matches per row of a page, a substring fact's matches are sorted
/// ([`Reading::Matches`]); above it they are dense enough to be walked to (a page
/// then fills after at most 1 in [`SORT_PER_ROW`] of all runs).
const SORT_PER_ROW: i64 = 20;

impl Reading {
    /// The reading for a page of `page` rows of a filter that `matches` runs match.
    fn for_page(matches: i64, page: i64) -> Self {
        if matches <= page.saturating_mul(SORT_PER_ROW) {
            Self::Matches
        } else {
            Self::Walk
        }
    }
}

/// A runs-list query's providers and facts, resolved ([`Store::resolve`]).
#[derive(Debug)]
struct Resolved {
    /// The providers whose runs it lists.
    providers: Vec<String>,
    /// The facts it asks for, exact ones first.
    facts: Vec<Fact>,
}

impl Resolved {
    /// Whether a page is read as its count says ([`Reading::for_page`]): only when the
    /// facts asked are substrings (held by several values), with no exact one.
    fn by_count(&self) -> bool {
        !self.facts.is_empty() && self.facts.iter().all(|x| !x.exact)
    }
}

/// The runs-list query over `providers`' runs (not their key announcements) that `f`
/// selects: with no `page`, `COUNT(*)` (the cursor aside); with one, a page of
/// digests (after the cursor, newest first, at most `page`). Fixed SQL; every value is
/// bound. Every column it reads is in an index: `runs_listed` (time order) or
/// `runs_listed_by_digest` for the runs, `run_facts_listed` (by fact, value, time) or
/// the primary key (by run) for the facts. An exact fact drives the query through its
/// rows, already in the list's order, so a page or a count reads that fact's rows and
/// nothing else; a substring fact drives a count, and a page as `reading` says.
fn list_query(
    providers: &[String],
    f: &RunFilter,
    facts: &[Fact],
    page: Option<i64>,
    reading: Reading,
    binds: &mut Vec<Bind>,
) -> Result<String, StoreError> {
    let needs_runs = filled(&f.outcome).is_some() || filled(&f.q).is_some();
    // The fact whose rows drive the query, when one does.
    let driver = facts
        .first()
        .filter(|x| x.exact || page.is_none() || reading == Reading::Matches);
    let t = if driver.is_some() { "d" } else { "r" };
    let list: Vec<String> = providers
        .iter()
        .map(|k| push(Bind::Text(k.clone()), binds))
        .collect();
    let mut conds = Vec::new();
    let from = match driver {
        None => {
            conds.push(NOT_ANNOUNCED.to_owned());
            "runs r"
        }
        Some(_) if needs_runs => "run_facts d JOIN runs r ON r.digest = d.digest",
        Some(_) => "run_facts d",
    };
    conds.push(format!("{t}.provider IN ({})", list.join(", ")));
    if let Some(x) = driver {
        conds.push(x.on("d", binds));
    }
    if let Some(v) = filled(&f.outcome) {
        conds.push(format!("r.outcome = {}", push(Bind::Text(v), binds)));
    }
    if let Some(v) = filled(&f.q) {
        conds.push(format!(
            "r.run_id LIKE {} ESCAPE '\\'",
            push(Bind::Text(like(&v)), binds)
        ));
    }
    for x in facts.iter().skip(usize::from(driver.is_some())) {
        conds.push(format!(
            "EXISTS (SELECT 1 FROM run_facts x WHERE x.digest = {t}.digest AND {})",
            x.on("x", binds)
        ));
    }
    if let Some(v) = f.period_start()? {
        conds.push(format!("{t}.submitted_at >= {}", push(Bind::Int(v), binds)));
    }
    if let Some(v) = f.period_end()? {
        conds.push(format!("{t}.submitted_at < {}", push(Bind::Int(v), binds)));
    }
    // A run has one row per value of a fact: a substring can match two of them. (Runs
    // are told apart by log index, unique per run: a smaller key to sort than a digest.)
    let distinct = driver.is_some_and(|x| !x.exact);
    let Some(limit) = page else {
        let n = if distinct {
            "COUNT(DISTINCT d.log_index)"
        } else {
            "COUNT(*)"
        };
        return Ok(format!(
            "SELECT {n} AS n FROM {from} WHERE {}",
            conds.join(" AND ")
        ));
    };
    if let Some(c) = f.after.as_deref().filter(|c| !c.is_empty()) {
        let c = Cursor::parse(c)?;
        let at = push(Bind::Int(c.submitted_at), binds);
        let i = push(Bind::Int(c.log_index), binds);
        conds.push(format!(
            "({t}.submitted_at < {at} OR ({t}.submitted_at = {at} AND {t}.log_index < {i}))"
        ));
    }
    Ok(format!(
        "SELECT {}{t}.digest, {t}.submitted_at, {t}.log_index FROM {from} WHERE {} \
         ORDER BY {t}.submitted_at DESC, {t}.log_index DESC LIMIT {}",
        if distinct { "DISTINCT " } else { "" },
        conds.join(" AND "),
        push(Bind::Int(limit), binds)
    ))
}

/// The count of a runs list: how many runs `f` (its `facts` resolved) selects, the
/// cursor aside.
fn count_sql(
    providers: &[String],
    f: &RunFilter,
    facts: &[Fact],
) -> Result<(String, Vec<Bind>), StoreError> {
    let mut binds = Vec::new();
    let sql = list_query(providers, f, facts, None, Reading::Matches, &mut binds)?;
    Ok((sql, binds))
}

/// A page of a runs list: the runs `f` selects after its cursor, newest first, at most
/// `limit`, chosen by an inner query that reads indexes alone; only their rows are read
/// after (the page drives the join: `CROSS JOIN` keeps SQLite from walking `runs`
/// and probing the page instead).
fn list_sql(
    providers: &[String],
    f: &RunFilter,
    facts: &[Fact],
    limit: i64,
    reading: Reading,
) -> Result<(String, Vec<Bind>), StoreError> {
    let mut binds: Vec<Bind> = Vec::new();
    let inner = list_query(providers, f, facts, Some(limit), reading, &mut binds)?;
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM ({inner}) page CROSS JOIN runs r \
         JOIN principals p ON p.key_id = r.provider WHERE r.digest = page.digest \
         ORDER BY r.submitted_at DESC, r.log_index DESC"
    );
    Ok((sql, binds))
}

/// Records a stored run's facts in `run_facts` from what its ingest indexed (`$1` …
/// `$5`: the run's digest): one row per distinct fact and value, with the run's
/// provider and place in the list. The schema v9 migration fills `run_facts` with the
/// same statement over every run.
const RUN_FACTS: &str = "INSERT INTO run_facts (fact, value, digest, provider, submitted_at, log_index) \
    SELECT f.fact, f.value, r.digest, r.provider, r.submitted_at, r.log_index FROM runs r JOIN ( \
    SELECT 'tool' AS fact, tool AS value, digest FROM blocked_actions WHERE digest = $1 AND tool IS NOT NULL \
    UNION SELECT 'guard', guard, digest FROM blocked_actions WHERE digest = $2 \
    UNION SELECT 'verdict', verdict, digest FROM regulation_decisions WHERE digest = $3 \
    UNION SELECT 'provision', provisions, digest FROM regulation_decisions WHERE digest = $4 \
    UNION SELECT 'model', model, digest FROM run_models WHERE digest = $5 \
    ) f ON f.digest = r.digest";

/// A filter's text value, when given and not empty.
fn filled(v: &Option<String>) -> Option<String> {
    v.as_deref().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn to_u64(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("negative count {v}")))
}

const RUN_COLUMNS: &str = "r.digest, r.provider, p.name AS provider_name, r.run_id, r.kind, \
    r.outcome, r.offending_node, r.reason, r.platform, r.hardware_backed, r.nodes, \
    r.tool_calls, r.executed, r.blocked, r.interrupts, r.flagged, r.structure_root, r.report, \
    r.log_index, r.submitted_at, r.run_key";

fn run_row(r: &sqlx::any::AnyRow) -> Result<RunRow, StoreError> {
    Ok(RunRow {
        digest: r.try_get("digest")?,
        provider: r.try_get("provider")?,
        provider_name: r.try_get("provider_name")?,
        run_id: r.try_get("run_id")?,
        kind: r.try_get("kind")?,
        outcome: r.try_get("outcome")?,
        offending_node: r.try_get("offending_node")?,
        reason: r.try_get("reason")?,
        platform: r.try_get("platform")?,
        hardware_backed: r.try_get::<i64, _>("hardware_backed")? != 0,
        nodes: r.try_get("nodes")?,
        tool_calls: r.try_get("tool_calls")?,
        executed: r.try_get("executed")?,
        blocked: r.try_get("blocked")?,
        interrupts: r.try_get("interrupts")?,
        flagged: r.try_get("flagged")?,
        structure_root: r.try_get("structure_root")?,
        report: r.try_get("report")?,
        log_index: r.try_get("log_index")?,
        submitted_at: r.try_get("submitted_at")?,
        run_key: r.try_get("run_key")?,
    })
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    engine: Engine,
}

impl Store {
    /// Opens (creating a SQLite file if needed) and migrates the database at `url`.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let engine = Engine::of_url(url)?;
        sqlx::any::install_default_drivers();
        let url = match engine {
            Engine::Sqlite if !url.contains("mode=") => {
                let sep = if url.contains('?') { '&' } else { '?' };
                Cow::Owned(format!("{url}{sep}mode=rwc"))
            }
            _ => Cow::Borrowed(url),
        };
        let max = match engine {
            Engine::Sqlite => 4,
            Engine::Postgres => 16,
        };
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(max)
            .connect(&url)
            .await?;
        if engine == Engine::Sqlite {
            // WAL lets readers run beside the one writer; it is a property of the file.
            sqlx::query("PRAGMA journal_mode = WAL")
                .fetch_optional(&pool)
                .await?;
        }
        let store = Self { pool, engine };
        store.migrate().await?;
        Ok(store)
    }

    /// Binds this store's log to `key`, or checks that it is bound to it: the first
    /// server to open the store writes its log key as the log's identity (one row,
    /// append-only; a store whose heads were signed before schema v7 is bound to the
    /// key of its latest head); every later one, a replica included, must bring the
    /// same key, else [`StoreError::LogKey`] — replicas with different keys would sign
    /// two logs over the same entries.
    pub async fn bind_log_key(&self, key: &PublicKey) -> Result<(), StoreError> {
        let latest = sqlx::query("SELECT head FROM tree_heads ORDER BY tree_size DESC LIMIT 1")
            .fetch_optional(&self.pool)
            .await?;
        let claimed = match latest {
            Some(row) => {
                let head: TreeHead = serde_json::from_str(&row.try_get::<String, _>("head")?)?;
                head.key
            }
            None => key.clone(),
        };
        sqlx::query(
            "INSERT INTO log_identity (singleton, public_key) VALUES (1, $1) ON CONFLICT DO NOTHING",
        )
        .bind(serde_json::to_string(&claimed)?)
        .execute(&self.pool)
        .await?;
        let row = sqlx::query("SELECT public_key FROM log_identity WHERE singleton = 1")
            .fetch_one(&self.pool)
            .await?;
        let stored: PublicKey = serde_json::from_str(&row.try_get::<String, _>("public_key")?)?;
        if stored == *key {
            return Ok(());
        }
        let id = |k: &PublicKey| knox_attest::key::key_id(&k.public_key.0).to_hex();
        Err(StoreError::LogKey {
            stored: id(&stored),
            ours: id(key),
        })
    }

    /// The log's origin: the stored one, else `wanted` (or, when none is given,
    /// `default`) bound as the log's name from now on. A server given another origin
    /// than the stored one is refused ([`StoreError::LogOrigin`]).
    pub async fn bind_log_origin(
        &self,
        wanted: Option<&str>,
        default: &str,
    ) -> Result<String, StoreError> {
        sqlx::query(
            "INSERT INTO log_origin (singleton, origin) VALUES (1, $1) ON CONFLICT DO NOTHING",
        )
        .bind(wanted.unwrap_or(default))
        .execute(&self.pool)
        .await?;
        let stored: String = sqlx::query("SELECT origin FROM log_origin WHERE singleton = 1")
            .fetch_one(&self.pool)
            .await?
            .try_get("origin")?;
        match wanted {
            Some(w) if w != stored => Err(StoreError::LogOrigin {
                stored,
                ours: w.to_owned(),
            }),
            _ => Ok(stored),
        }
    }

    /// The log's entries `[start, end)`: each submission's digest and its leaf hash.
    pub async fn log_range(
        &self,
        start: u64,
        end: u64,
    ) -> Result<Vec<(Digest, Digest)>, StoreError> {
        let rows = sqlx::query(
            "SELECT idx, digest, leaf_hash FROM log_leaves WHERE idx >= $1 AND idx < $2 ORDER BY idx",
        )
        .bind(to_i64(start))
        .bind(to_i64(end))
        .fetch_all(&self.pool)
        .await?;
        let hex = |r: &sqlx::any::AnyRow, c: &str| -> Result<Digest, StoreError> {
            Digest::from_hex(&r.try_get::<String, _>(c)?)
                .map_err(|e| StoreError::Corrupt(e.to_string()))
        };
        let mut out = Vec::with_capacity(rows.len());
        for (i, r) in (start..).zip(&rows) {
            if to_u64(r.try_get("idx")?)? != i {
                return Err(StoreError::Corrupt(format!("log leaf {i} missing")));
            }
            out.push((hex(r, "digest")?, hex(r, "leaf_hash")?));
        }
        Ok(out)
    }

    /// Keeps a witness's cosignature line of the checkpoint of `size` (the first one
    /// per witness key and size is kept).
    pub async fn add_cosignature(
        &self,
        size: u64,
        witness: &str,
        line: &str,
        time: u64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO cosignatures (tree_size, witness, line, cosigned_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(to_i64(size))
        .bind(witness)
        .bind(line)
        .bind(to_i64(time))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The cosignature lines kept for the checkpoint of `size`.
    pub async fn cosignatures(&self, size: u64) -> Result<Vec<String>, StoreError> {
        let rows =
            sqlx::query("SELECT line FROM cosignatures WHERE tree_size = $1 ORDER BY witness")
                .bind(to_i64(size))
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("line").map_err(StoreError::from))
            .collect()
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// The connection pool (the live-run module's statements).
    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The migrations of this store's engine.
    pub fn migrator(engine: Engine) -> Migrator {
        let list = match engine {
            Engine::Sqlite => SQLITE,
            Engine::Postgres => POSTGRES,
        };
        let migrations: Vec<Migration> = list
            .iter()
            .map(|(v, d, sql)| {
                Migration::new(
                    *v,
                    Cow::Borrowed(*d),
                    MigrationType::Simple,
                    Cow::Borrowed(*sql),
                    false,
                )
            })
            .collect();
        Migrator {
            migrations: Cow::Owned(migrations),
            ignore_missing: false,
            locking: true,
            no_tx: false,
        }
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        Self::migrator(self.engine).run(&self.pool).await?;
        if self.engine == Engine::Sqlite {
            // Schema v3: `live_runs` with `run_key`, unique on (provider, run id, run
            // key), no longer on (provider, run id).
            self.rebuild("live_runs", "UNIQUE (provider, run_id)", LIVE_RUNS_V3)
                .await?;
            // Schema v6: `objects` admits key announcements.
            self.rebuild("objects", OBJECTS_V1_KINDS, OBJECTS_V6)
                .await?;
        }
        Ok(())
    }

    /// On SQLite, a table whose definition still holds `old` (a constraint a later
    /// schema changes) rebuilt by `statements`, its rows, indexes and append-only
    /// triggers carried over. SQLite drops or changes a table constraint only by
    /// rebuilding the table, with foreign keys off (a pragma without effect inside a
    /// transaction, so not in a migration). Idempotent: a rebuilt table is left alone,
    /// and the check is repeated under the write lock, so two stores opening one file
    /// at once rebuild it once. A rebuild that would leave a dangling reference is
    /// rolled back.
    async fn rebuild(
        &self,
        table: &'static str,
        old: &str,
        statements: &[&str],
    ) -> Result<(), StoreError> {
        let schema = || {
            sqlx::query("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = $1")
                .bind(table)
        };
        let sql: String = schema().fetch_one(&self.pool).await?.try_get("sql")?;
        if !sql.contains(old) {
            return Ok(());
        }
        let mut conn = self.pool.acquire().await?;
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut *conn)
            .await?;
        let rebuilt = async {
            sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
            let sql: String = schema().fetch_one(&mut *conn).await?.try_get("sql")?;
            if sql.contains(old) {
                for statement in statements {
                    sqlx::query(statement).execute(&mut *conn).await?;
                }
                let dangling = sqlx::query("PRAGMA foreign_key_check")
                    .fetch_all(&mut *conn)
                    .await?;
                if !dangling.is_empty() {
                    sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                    return Err(StoreError::Corrupt(format!(
                        "rebuilding {table} would leave {} dangling reference(s)",
                        dangling.len()
                    )));
                }
            }
            sqlx::query("COMMIT").execute(&mut *conn).await?;
            Ok::<(), StoreError>(())
        }
        .await;
        if rebuilt.is_err() {
            // Best effort: a failed statement left the transaction open.
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        }
        // The connection goes back to the pool enforcing foreign keys again.
        sqlx::query("PRAGMA foreign_keys = ON")
            .execute(&mut *conn)
            .await?;
        rebuilt
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Registers a principal (idempotent); a name or key registered with another role
    /// or key is a conflict. Returns its key id.
    pub async fn register(
        &self,
        role: Role,
        name: &str,
        public: &[u8; 32],
    ) -> Result<Principal, StoreError> {
        let key_id = knox_attest::key::key_id(public).to_hex();
        let public_key = hex::encode(public);
        let inserted = sqlx::query(
            "INSERT INTO principals (key_id, public_key, role, name) VALUES ($1, $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&key_id)
        .bind(&public_key)
        .bind(role.name())
        .bind(name)
        .execute(&self.pool)
        .await?;
        let p = self.principal(&key_id).await?;
        match p {
            Some(p) if p.role == role && p.name == name => Ok(p),
            Some(p) => Err(StoreError::Conflict(format!(
                "key {key_id} is already registered as {} `{}`",
                p.role.name(),
                p.name
            ))),
            None if inserted.rows_affected() == 0 => Err(StoreError::Conflict(format!(
                "the name `{name}` is already registered with another key"
            ))),
            None => Err(StoreError::Corrupt(
                "a registered principal vanished".into(),
            )),
        }
    }

    /// Assigns a provider to a regulator (idempotent).
    pub async fn assign(
        &self,
        regulator: &Principal,
        provider: &Principal,
    ) -> Result<(), StoreError> {
        if regulator.role != Role::Regulator || provider.role != Role::Provider {
            return Err(StoreError::Conflict(format!(
                "`{}` must be a regulator and `{}` a provider",
                regulator.name, provider.name
            )));
        }
        sqlx::query(
            "INSERT INTO assignments (regulator, provider) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(&regulator.key_id)
        .bind(&provider.key_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A principal by key id.
    pub async fn principal(&self, key_id: &str) -> Result<Option<Principal>, StoreError> {
        let row =
            sqlx::query("SELECT key_id, public_key, role, name FROM principals WHERE key_id = $1")
                .bind(key_id)
                .fetch_optional(&self.pool)
                .await?;
        row.map(|r| {
            Ok(Principal {
                key_id: r.try_get("key_id")?,
                public_key: r.try_get("public_key")?,
                role: Role::parse(&r.try_get::<String, _>("role")?)?,
                name: r.try_get("name")?,
            })
        })
        .transpose()
    }

    /// A provider by name.
    pub async fn provider_by_name(&self, name: &str) -> Result<Option<Principal>, StoreError> {
        let row =
            sqlx::query("SELECT key_id FROM principals WHERE name = $1 AND role = 'provider'")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
        match row {
            Some(r) => self.principal(&r.try_get::<String, _>("key_id")?).await,
            None => Ok(None),
        }
    }

    /// Key ids of the providers whose runs `p` may see: itself for a provider, its
    /// assignment for a regulator.
    pub async fn visible_providers(&self, p: &Principal) -> Result<Vec<String>, StoreError> {
        match p.role {
            Role::Provider => Ok(vec![p.key_id.clone()]),
            Role::Regulator => {
                let rows = sqlx::query(
                    "SELECT provider FROM assignments WHERE regulator = $1 ORDER BY provider",
                )
                .bind(&p.key_id)
                .fetch_all(&self.pool)
                .await?;
                rows.iter()
                    .map(|r| r.try_get::<String, _>("provider").map_err(StoreError::from))
                    .collect()
            }
        }
    }

    /// Records a nonce; `false` when this key already used it (a replay). Nonces older
    /// than twice the accepted clock skew are dropped: a request that old is refused
    /// for its time before its nonce is looked at.
    pub async fn use_nonce(&self, key_id: &str, nonce: &str, now: u64) -> Result<bool, StoreError> {
        sqlx::query("DELETE FROM nonces WHERE seen_at < $1")
            .bind(to_i64(now.saturating_sub(2 * crate::auth::MAX_SKEW_SECS)))
            .execute(&self.pool)
            .await?;
        let r = sqlx::query(
            "INSERT INTO nonces (key_id, nonce, seen_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(key_id)
        .bind(nonce)
        .bind(to_i64(now))
        .execute(&self.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Appends to the access log.
    pub async fn log_access(
        &self,
        principal: Option<&str>,
        method: &str,
        target: &str,
        allowed: bool,
        reason: &str,
        now: u64,
    ) -> Result<(), StoreError> {
        // Targets are attacker-controlled: kept, but bounded.
        let target: String = target.chars().take(2048).collect();
        sqlx::query(
            "INSERT INTO access_log (at, principal, method, target, decision, reason) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(to_i64(now))
        .bind(principal)
        .bind(method)
        .bind(target)
        .bind(if allowed { "allowed" } else { "refused" })
        .bind(reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The access log, newest first.
    pub async fn access_log(&self, limit: i64) -> Result<Vec<AccessEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, at, principal, method, target, decision, reason FROM access_log \
             ORDER BY id DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AccessEntry {
                    id: r.try_get("id")?,
                    at: r.try_get("at")?,
                    principal: r.try_get("principal")?,
                    method: r.try_get("method")?,
                    target: r.try_get("target")?,
                    decision: r.try_get("decision")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// Stores a submission verified by [`crate::ingest::Verifier::check`]: the bytes
    /// content-addressed, the run and its index rows, and a log leaf, in one
    /// transaction. The same bytes again change nothing; different bytes (a tampered
    /// copy of a run) are another run, stored with their own outcome.
    pub async fn ingest(
        &self,
        provider: &Principal,
        bytes: &[u8],
        checked: &Checked,
        now: u64,
    ) -> Result<Ingested, StoreError> {
        let digest = Digest::sha256(bytes).to_hex();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .try_ingest(provider, bytes, &digest, checked, now)
                .await
            {
                Ok(Some(run)) => {
                    return Ok(Ingested {
                        run,
                        duplicate: false,
                    });
                }
                Ok(None) => break,
                // Two writers raced for the same log index or the same bytes: retry,
                // which either appends at the next index or finds the duplicate.
                Err(StoreError::Db(e)) if attempt < 8 && is_conflict(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let run = self
            .run(&digest)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a stored object has no run".into()))?;
        Ok(Ingested {
            run,
            duplicate: true,
        })
    }

    /// One attempt: `None` when these bytes are already stored (nothing written),
    /// else the run as stored. Every statement is prepared once per connection (sqlx
    /// caches them) and the index rows of a table go in one multi-row statement.
    async fn try_ingest(
        &self,
        provider: &Principal,
        bytes: &[u8],
        digest: &str,
        c: &Checked,
        now: u64,
    ) -> Result<Option<RunRow>, StoreError> {
        let now = to_i64(now);
        let mut tx = self.pool.begin().await?;
        if self.engine == Engine::Postgres {
            // One appender at a time across replicas: the log index is MAX + 1.
            sqlx::query("SELECT pg_advisory_xact_lock(7246105)")
                .fetch_optional(&mut *tx)
                .await?;
        }
        // The first statement writes (SQLite takes the write lock at once) and tells
        // a duplicate apart without a read before it.
        let fresh = sqlx::query(
            "INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT DO NOTHING",
        )
        .bind(digest)
        .bind(c.kind)
        .bind(bytes)
        .bind(to_i64(bytes.len() as u64))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if fresh.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let leaf =
            tlog::leaf(&Digest::from_hex(digest).map_err(|e| StoreError::Corrupt(e.to_string()))?)
                .to_hex();
        // The leaf goes at the log's next index, read and written in one statement.
        let idx: i64 = sqlx::query(
            "INSERT INTO log_leaves (idx, digest, leaf_hash, appended_at) \
             SELECT COALESCE(MAX(idx) + 1, 0), $1, $2, $3 FROM log_leaves RETURNING idx",
        )
        .bind(digest)
        .bind(leaf)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?
        .try_get("idx")?;
        let run = RunRow::of(provider, digest, c, idx, now)?;
        sqlx::query(
            "INSERT INTO runs (digest, provider, run_id, kind, outcome, offending_node, reason, \
             platform, hardware_backed, nodes, tool_calls, executed, blocked, interrupts, flagged, \
             structure_root, report, log_index, submitted_at, run_key) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)",
        )
        .bind(digest)
        .bind(&run.provider)
        .bind(&run.run_id)
        .bind(&run.kind)
        .bind(&run.outcome)
        .bind(run.offending_node)
        .bind(run.reason.as_deref())
        .bind(&run.platform)
        .bind(i64::from(run.hardware_backed))
        .bind(run.nodes)
        .bind(run.tool_calls)
        .bind(run.executed)
        .bind(run.blocked)
        .bind(run.interrupts)
        .bind(run.flagged)
        .bind(run.structure_root.as_deref())
        .bind(&run.report)
        .bind(idx)
        .bind(now)
        .bind(run.run_key.as_deref())
        .execute(&mut *tx)
        .await?;
        let r = &c.report;
        let blocked: Vec<[Bind; 6]> = r
            .blocked
            .iter()
            .map(|b| {
                [
                    Bind::Text(digest.to_owned()),
                    Bind::Int(to_i64(b.node)),
                    Bind::Text(b.agent.clone()),
                    b.tool.clone().map_or(Bind::Null, Bind::Text),
                    Bind::Text(b.guard.clone()),
                    Bind::Text(b.reason.clone()),
                ]
            })
            .collect();
        insert_rows(
            &mut tx,
            "INSERT INTO blocked_actions (digest, node, agent, tool, guard, reason) VALUES ",
            " ON CONFLICT DO NOTHING",
            blocked,
        )
        .await?;
        let decisions: Vec<[Bind; 8]> = c
            .decisions
            .iter()
            .enumerate()
            .map(|(i, d)| {
                [
                    Bind::Text(digest.to_owned()),
                    Bind::Int(to_i64(d.node)),
                    Bind::Int(to_i64(i as u64)),
                    Bind::Text(d.regulation.clone()),
                    Bind::Text(d.recipient.clone()),
                    Bind::Text(d.verdict.clone()),
                    Bind::Text(d.policies.join(",")),
                    Bind::Text(d.provisions.join(",")),
                ]
            })
            .collect();
        insert_rows(
            &mut tx,
            "INSERT INTO regulation_decisions (digest, node, ordinal, regulation, recipient, \
             verdict, policies, provisions) VALUES ",
            "",
            decisions,
        )
        .await?;
        let models: Vec<[Bind; 3]> = r
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| {
                [
                    Bind::Text(digest.to_owned()),
                    Bind::Int(to_i64(i as u64)),
                    Bind::Text(m.clone()),
                ]
            })
            .collect();
        insert_rows(
            &mut tx,
            "INSERT INTO run_models (digest, ordinal, model) VALUES ",
            "",
            models,
        )
        .await?;
        let mut facts = sqlx::query(RUN_FACTS);
        for _ in 0..5 {
            facts = facts.bind(digest);
        }
        facts.execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO fact_values (fact, value) SELECT DISTINCT fact, value FROM run_facts \
             WHERE digest = $1 ON CONFLICT DO NOTHING",
        )
        .bind(digest)
        .execute(&mut *tx)
        .await?;
        if let (Some(link), Some(run_key)) = (&r.key_chain, &run.run_key) {
            sqlx::query(
                "INSERT INTO chain_links (digest, provider, run_key, seq, prev, seal) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(digest)
            .bind(&run.provider)
            .bind(run_key)
            .bind(to_i64(link.seq))
            .bind(link.prev.to_hex())
            .bind(link.seal.to_hex())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Some(run))
    }

    /// The key-chain links of `provider`'s stored bundles and key announcements,
    /// submitted up to `to` (Unix seconds) — of every key, or of `key` only — by key
    /// and number: what [`crate::chains::KeyChains::of`] reads the gaps from.
    pub async fn chain_links(
        &self,
        provider: &str,
        to: i64,
        key: Option<&str>,
    ) -> Result<Vec<crate::chains::Link>, StoreError> {
        let one_key = if key.is_some() {
            "AND c.run_key = $3 "
        } else {
            ""
        };
        let sql = format!(
            "SELECT c.run_key, c.seq, c.prev, c.seal, c.digest, r.run_id, r.kind, r.outcome, r.log_index \
             FROM chain_links c JOIN runs r ON r.digest = c.digest \
             WHERE c.provider = $1 AND r.submitted_at <= $2 {one_key}\
             ORDER BY c.run_key, c.seq, c.digest"
        );
        let mut q = sqlx::query(&sql).bind(provider).bind(to);
        if let Some(k) = key {
            q = q.bind(k);
        }
        let rows = q.fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(crate::chains::Link {
                    key: r.try_get("run_key")?,
                    seq: u64::try_from(r.try_get::<i64, _>("seq")?)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    prev: r.try_get("prev")?,
                    seal: r.try_get("seal")?,
                    digest: r.try_get("digest")?,
                    run_id: r.try_get("run_id")?,
                    announcement: r.try_get::<String, _>("kind")? == "announcement",
                    outcome: r.try_get("outcome")?,
                    log_index: r.try_get("log_index")?,
                })
            })
            .collect()
    }

    /// A run by digest (no access check: callers check [`Self::visible_providers`]).
    pub async fn run(&self, digest: &str) -> Result<Option<RunRow>, StoreError> {
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs r JOIN principals p ON p.key_id = r.provider \
             WHERE r.digest = $1"
        );
        let row = sqlx::query(&sql)
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(run_row).transpose()
    }

    /// Runs of the `providers` given, filtered, newest first, at most `limit` (after
    /// `f.after`, when given).
    pub async fn runs(
        &self,
        providers: &[String],
        f: &RunFilter,
        limit: i64,
    ) -> Result<Vec<RunRow>, StoreError> {
        let Some(q) = self.resolve(providers, f).await? else {
            return Ok(Vec::new());
        };
        let reading = if q.by_count() {
            Reading::for_page(self.count(&q, f).await?, limit)
        } else {
            Reading::Walk
        };
        self.list(&q, f, limit, reading).await
    }

    /// What a runs-list query of `f` reads: `providers` narrowed to the one `f.provider`
    /// names, when it names one, and `f`'s facts, a substring that only one stored
    /// value holds made that exact value (`fact_values`, schema v9), so the query reads
    /// that value's rows in the list's order instead of every value's. `None` when
    /// nothing can match (no provider left).
    async fn resolve(
        &self,
        providers: &[String],
        f: &RunFilter,
    ) -> Result<Option<Resolved>, StoreError> {
        let mut providers = providers.to_vec();
        if let Some(name) = filled(&f.provider) {
            let row = sqlx::query("SELECT key_id FROM principals WHERE name = $1")
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
            let key: Option<String> = row.map(|r| r.try_get("key_id")).transpose()?;
            providers.retain(|k| key.as_deref() == Some(k.as_str()));
        }
        if providers.is_empty() {
            return Ok(None);
        }
        let mut facts = Fact::of(f);
        for x in facts.iter_mut().filter(|x| !x.exact) {
            let rows = sqlx::query(
                "SELECT value FROM fact_values WHERE fact = $1 AND value LIKE $2 ESCAPE '\\' LIMIT 2",
            )
            .bind(x.name)
            .bind(like(&x.value))
            .fetch_all(&self.pool)
            .await?;
            match rows.as_slice() {
                // No stored value holds it: as an exact value, it matches nothing.
                [] => x.exact = true,
                [one] => {
                    x.value = one.try_get("value")?;
                    x.exact = true;
                }
                _ => {}
            }
        }
        facts.sort_by_key(|x| !x.exact);
        Ok(Some(Resolved { providers, facts }))
    }

    /// How many runs of `q` `f` selects, the cursor aside. Read from indexes only.
    async fn count(&self, q: &Resolved, f: &RunFilter) -> Result<i64, StoreError> {
        let (sql, binds) = count_sql(&q.providers, f, &q.facts)?;
        let mut query = sqlx::query(&sql);
        for b in binds {
            query = b.bind(query);
        }
        Ok(query.fetch_one(&self.pool).await?.try_get("n")?)
    }

    /// At most `limit` runs of `q` that `f` selects, after its cursor, newest first.
    /// Which runs is decided in indexes alone (the inner query); only those runs' rows
    /// are read.
    async fn list(
        &self,
        q: &Resolved,
        f: &RunFilter,
        limit: i64,
        reading: Reading,
    ) -> Result<Vec<RunRow>, StoreError> {
        let (sql, binds) = list_sql(&q.providers, f, &q.facts, limit, reading)?;
        let mut query = sqlx::query(&sql);
        for b in binds {
            query = b.bind(query);
        }
        let rows = query.fetch_all(&self.pool).await?;
        rows.iter().map(run_row).collect()
    }

    /// SQLite's plan (`EXPLAIN QUERY PLAN`, one line per step) of the queries a page of
    /// `limit` runs of `f` runs: the count, then the list as the count chose to read
    /// it. Benches and tests read it to show every filter is answered from indexes;
    /// empty on PostgreSQL, whose planner chooses by its own statistics.
    pub async fn runs_page_plan(
        &self,
        providers: &[String],
        f: &RunFilter,
        limit: i64,
    ) -> Result<Vec<String>, StoreError> {
        if self.engine != Engine::Sqlite {
            return Ok(Vec::new());
        }
        let Some(q) = self.resolve(providers, f).await? else {
            return Ok(Vec::new());
        };
        let ask = limit.saturating_add(1);
        let reading = Reading::for_page(self.count(&q, f).await?, ask);
        let mut lines = Vec::new();
        for (sql, binds) in [
            count_sql(&q.providers, f, &q.facts)?,
            list_sql(&q.providers, f, &q.facts, ask, reading)?,
        ] {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query = sqlx::query(&explain);
            for b in binds {
                query = b.bind(query);
            }
            for row in query.fetch_all(&self.pool).await? {
                lines.push(row.try_get::<String, _>("detail")?);
            }
            lines.push(String::new());
        }
        Ok(lines)
    }

    /// A provider's first and last submission times; `None` before its first.
    pub async fn submission_span(&self, provider: &str) -> Result<Option<(i64, i64)>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT MIN(r.submitted_at) AS first, MAX(r.submitted_at) AS last FROM runs r \
             WHERE r.provider = $1 AND {NOT_ANNOUNCED}"
        ))
        .bind(provider)
        .fetch_one(&self.pool)
        .await?;
        let first: Option<i64> = row.try_get("first")?;
        let last: Option<i64> = row.try_get("last")?;
        Ok(first.zip(last))
    }

    /// One page of the runs list: at most `limit` runs after `f.after`, the cursor of
    /// the next page when there is one, and how many runs the filter matches in all.
    pub async fn runs_page(
        &self,
        providers: &[String],
        f: &RunFilter,
        limit: i64,
    ) -> Result<RunsPage, StoreError> {
        let q = self.resolve(providers, f).await?;
        let total = match &q {
            Some(q) => self.count(q, f).await?,
            None => 0,
        };
        if total == 0 {
            return Ok(RunsPage {
                rows: Vec::new(),
                next: None,
                total,
            });
        }
        let Some(q) = q else {
            return Ok(RunsPage {
                rows: Vec::new(),
                next: None,
                total,
            });
        };
        let ask = limit.saturating_add(1);
        let reading = Reading::for_page(total, ask);
        let mut rows = self.list(&q, f, ask, reading).await?;
        let more = rows.len() as i64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(0));
        let next = more
            .then(|| rows.last().map(|r| Cursor::of(r).to_string()))
            .flatten();
        Ok(RunsPage { rows, next, total })
    }

    /// Runs a grouped query over the runs of `providers` in `f`'s period; `select`
    /// and `group` are fixed SQL of this module, never input.
    async fn grouped(
        &self,
        select: &str,
        join: &str,
        group: &str,
        providers: &[String],
        f: &RunFilter,
    ) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
        let mut binds: Vec<Bind> = Vec::new();
        let list: Vec<String> = providers
            .iter()
            .map(|k| push(Bind::Text(k.clone()), &mut binds))
            .collect();
        let mut sql = format!(
            "SELECT {select} FROM runs r JOIN principals p ON p.key_id = r.provider {join} \
             WHERE {NOT_ANNOUNCED} AND r.provider IN ({})",
            list.join(", ")
        );
        if let Some(v) = f.period_start()? {
            sql += &format!(" AND r.submitted_at >= {}", push(Bind::Int(v), &mut binds));
        }
        if let Some(v) = f.period_end()? {
            sql += &format!(" AND r.submitted_at < {}", push(Bind::Int(v), &mut binds));
        }
        sql += &format!(" GROUP BY {group}");
        let mut q = sqlx::query(&sql);
        for b in binds {
            q = b.bind(q);
        }
        Ok(q.fetch_all(&self.pool).await?)
    }

    /// Dashboard figures over the runs of `providers` in `f`'s period.
    pub async fn dashboard(
        &self,
        providers: &[String],
        f: &RunFilter,
    ) -> Result<Dashboard, StoreError> {
        let mut d = Dashboard::default();
        if providers.is_empty() {
            return Ok(d);
        }
        let count =
            |o: &str| format!("CAST(SUM(CASE WHEN r.outcome = '{o}' THEN 1 ELSE 0 END) AS BIGINT)");
        let select = format!(
            "p.name AS label, COUNT(*) AS n, CAST(SUM(r.blocked) AS BIGINT) AS blocked, \
             CAST(SUM(r.tool_calls) AS BIGINT) AS calls, {} AS tampered, {} AS prefixes, {} AS refused",
            count("tampered"),
            count("prefix"),
            count("refused")
        );
        for r in self
            .grouped(&select, "", "p.name ORDER BY p.name", providers, f)
            .await?
        {
            d.providers.push((
                r.try_get("label")?,
                [
                    r.try_get("n")?,
                    r.try_get("blocked")?,
                    r.try_get("calls")?,
                    r.try_get("tampered")?,
                    r.try_get("prefixes")?,
                    r.try_get("refused")?,
                ],
            ));
        }
        let top = |rows: Vec<sqlx::any::AnyRow>| -> Result<Vec<(String, i64)>, StoreError> {
            rows.iter()
                .map(|r| Ok((r.try_get("label")?, r.try_get("n")?)))
                .collect()
        };
        let blocked = "JOIN blocked_actions b ON b.digest = r.digest";
        d.tools = top(self
            .grouped(
                "COALESCE(b.tool, '(malformed)') AS label, COUNT(*) AS n",
                blocked,
                "b.tool ORDER BY n DESC, label LIMIT 10",
                providers,
                f,
            )
            .await?)?;
        d.guards = top(self
            .grouped(
                "b.guard AS label, COUNT(*) AS n",
                blocked,
                "b.guard ORDER BY n DESC, label LIMIT 10",
                providers,
                f,
            )
            .await?)?;
        d.provisions = top(self
            .grouped(
                "d.provisions || ' → ' || d.verdict AS label, COUNT(*) AS n",
                "JOIN regulation_decisions d ON d.digest = r.digest",
                "d.provisions, d.verdict ORDER BY n DESC, label LIMIT 20",
                providers,
                f,
            )
            .await?)?;
        let rows = self
            .grouped(
                "p.name AS label, r.submitted_at / 86400 AS day, CAST(SUM(r.blocked) AS BIGINT) AS blocked, \
                 CAST(SUM(r.tool_calls) AS BIGINT) AS calls",
                "",
                "p.name, r.submitted_at / 86400 ORDER BY p.name, day LIMIT 200",
                providers,
                f,
            )
            .await?;
        for r in rows {
            let (name, day): (String, i64) = (r.try_get("label")?, r.try_get("day")?);
            let (blocked, calls): (i64, i64) = (r.try_get("blocked")?, r.try_get("calls")?);
            let pct = if calls > 0 { 100 * blocked / calls } else { 0 };
            let date = crate::ui::when(day.saturating_mul(86_400));
            let date = date.get(..10).unwrap_or(&date);
            d.rate.push((format!("{name} {date}"), pct));
        }
        Ok(d)
    }

    /// A stored object's kind and bytes.
    pub async fn object(&self, digest: &str) -> Result<Option<(String, Vec<u8>)>, StoreError> {
        let row = sqlx::query("SELECT kind, bytes FROM objects WHERE digest = $1")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| Ok((r.try_get("kind")?, r.try_get("bytes")?)))
            .transpose()
    }

    /// A run's blocked actions.
    pub async fn blocked(&self, digest: &str) -> Result<Vec<BlockedRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, agent, tool, guard, reason FROM blocked_actions WHERE digest = $1 ORDER BY node",
        )
        .bind(digest)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(BlockedRow {
                    node: r.try_get("node")?,
                    agent: r.try_get("agent")?,
                    tool: r.try_get("tool")?,
                    guard: r.try_get("guard")?,
                    reason: r.try_get("reason")?,
                })
            })
            .collect()
    }

    /// A run's regulation decisions.
    pub async fn decisions(&self, digest: &str) -> Result<Vec<DecisionRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT node, regulation, recipient, verdict, policies, provisions FROM regulation_decisions \
             WHERE digest = $1 ORDER BY node, ordinal",
        )
        .bind(digest)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DecisionRow {
                    node: r.try_get("node")?,
                    regulation: r.try_get("regulation")?,
                    recipient: r.try_get("recipient")?,
                    verdict: r.try_get("verdict")?,
                    policies: r.try_get("policies")?,
                    provisions: r.try_get("provisions")?,
                })
            })
            .collect()
    }

    /// Stores a regulator's receipt for a run (content-addressed; a duplicate changes
    /// nothing).
    pub async fn add_receipt(
        &self,
        run: &str,
        regulator: &Principal,
        bytes: &[u8],
        outcome: &str,
        now: u64,
    ) -> Result<String, StoreError> {
        let digest = Digest::sha256(bytes).to_hex();
        let size = self.tree_size().await?;
        let mut tx = self.pool.begin().await?;
        let fresh = sqlx::query(
            "INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ($1, 'receipt', $2, $3, $4) \
             ON CONFLICT DO NOTHING",
        )
        .bind(&digest)
        .bind(bytes.to_vec())
        .bind(to_i64(bytes.len() as u64))
        .bind(to_i64(now))
        .execute(&mut *tx)
        .await?;
        if fresh.rows_affected() == 1 {
            sqlx::query(
                "INSERT INTO receipts (digest, run, regulator, outcome, tree_size, stored_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&digest)
            .bind(run)
            .bind(&regulator.key_id)
            .bind(outcome)
            .bind(to_i64(size))
            .bind(to_i64(now))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(digest)
    }

    /// A run's receipts.
    pub async fn receipts(&self, run: &str) -> Result<Vec<ReceiptRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.digest, p.name, r.outcome, r.tree_size, r.stored_at FROM receipts r \
             JOIN principals p ON p.key_id = r.regulator WHERE r.run = $1 ORDER BY r.stored_at, r.digest",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(ReceiptRow {
                    digest: r.try_get("digest")?,
                    regulator: r.try_get("name")?,
                    outcome: r.try_get("outcome")?,
                    tree_size: r.try_get("tree_size")?,
                    stored_at: r.try_get("stored_at")?,
                })
            })
            .collect()
    }

    /// Number of log leaves.
    pub async fn tree_size(&self) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM log_leaves")
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?;
        to_u64(n)
    }

    /// The log's leaf hashes, in order (the first `size`, or all).
    pub async fn leaves(&self, size: Option<u64>) -> Result<Vec<Digest>, StoreError> {
        let limit = size.map_or(i64::MAX, to_i64);
        let rows = sqlx::query("SELECT idx, leaf_hash FROM log_leaves ORDER BY idx LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let idx: i64 = r.try_get("idx")?;
            if to_u64(idx)? != i as u64 {
                return Err(StoreError::Corrupt(format!("log leaf {i} missing")));
            }
            let h: String = r.try_get("leaf_hash")?;
            out.push(Digest::from_hex(&h).map_err(|e| StoreError::Corrupt(e.to_string()))?);
        }
        Ok(out)
    }

    /// The signed head of the log as it is now. Each size is signed once and kept:
    /// asking again returns the stored head, so this log never signs two roots for one
    /// size.
    pub async fn head(&self, key: &PartyKey, now: u64) -> Result<TreeHead, StoreError> {
        let leaves = self.leaves(None).await?;
        self.head_of(key, &leaves, now).await
    }

    async fn head_of(
        &self,
        key: &PartyKey,
        leaves: &[Digest],
        now: u64,
    ) -> Result<TreeHead, StoreError> {
        let size = leaves.len() as u64;
        if let Some(h) = self.stored_head(size).await? {
            return Ok(h);
        }
        let head = TreeHead::sign(key, size, merkle::root(leaves), now);
        sqlx::query(
            "INSERT INTO tree_heads (tree_size, head) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(to_i64(size))
        .bind(serde_json::to_string(&head)?)
        .execute(&self.pool)
        .await?;
        self.stored_head(size)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a signed tree head vanished".into()))
    }

    /// The head signed for `size`, if one was.
    pub async fn stored_head(&self, size: u64) -> Result<Option<TreeHead>, StoreError> {
        let row = sqlx::query("SELECT head FROM tree_heads WHERE tree_size = $1")
            .bind(to_i64(size))
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            let s: String = r.try_get("head")?;
            serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }

    /// The inclusion proof of a stored submission in the current signed head.
    pub async fn inclusion(
        &self,
        digest: &str,
        key: &PartyKey,
        now: u64,
    ) -> Result<Option<Inclusion>, StoreError> {
        let Some(row) = sqlx::query("SELECT idx FROM log_leaves WHERE digest = $1")
            .bind(digest)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let idx = to_u64(row.try_get("idx")?)?;
        let leaves = self.leaves(None).await?;
        let head = self.head_of(key, &leaves, now).await?;
        let path = usize::try_from(idx)
            .ok()
            .and_then(|i| merkle::inclusion_proof(&leaves, i))
            .ok_or_else(|| StoreError::Corrupt(format!("log index {idx} out of range")))?;
        Ok(Some(Inclusion {
            digest: Digest::from_hex(digest).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            index: idx,
            path,
            head,
        }))
    }

    /// A consistency proof from the head signed at size `from` to the current head;
    /// `None` when no head of that size was signed.
    pub async fn consistency(
        &self,
        from: u64,
        key: &PartyKey,
        now: u64,
    ) -> Result<Option<Consistency>, StoreError> {
        let Some(old) = self.stored_head(from).await? else {
            return Ok(None);
        };
        let leaves = self.leaves(None).await?;
        let to = self.head_of(key, &leaves, now).await?;
        let path = usize::try_from(from)
            .ok()
            .and_then(|m| tlog::consistency_proof(&leaves, m))
            .unwrap_or_default();
        Ok(Some(Consistency {
            from: old,
            to,
            path,
        }))
    }

    /// Creates a browser session for a principal; returns the token (only its hash is
    /// stored).
    pub async fn create_session(
        &self,
        key_id: &str,
        token: &str,
        expires: u64,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO sessions (token_hash, key_id, expires_at) VALUES ($1, $2, $3)")
            .bind(Digest::sha256(token.as_bytes()).to_hex())
            .bind(key_id)
            .bind(to_i64(expires))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The principal of a live session token.
    pub async fn session(&self, token: &str, now: u64) -> Result<Option<Principal>, StoreError> {
        let row =
            sqlx::query("SELECT key_id FROM sessions WHERE token_hash = $1 AND expires_at > $2")
                .bind(Digest::sha256(token.as_bytes()).to_hex())
                .bind(to_i64(now))
                .fetch_optional(&self.pool)
                .await?;
        match row {
            Some(r) => self.principal(&r.try_get::<String, _>("key_id")?).await,
            None => Ok(None),
        }
    }

    /// Runs a statement as given (tests use it to prove the append-only triggers).
    pub async fn execute_raw(&self, sql: &str) -> Result<u64, StoreError> {
        Ok(sqlx::query(sql).execute(&self.pool).await?.rows_affected())
    }
}

/// Whether a database error is a uniqueness conflict (a concurrent writer won).
fn is_conflict(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d.is_unique_violation(),
        _ => false,
    }
}
