//! The regulator's pages at scale, served on loopback by the real router over a SQLite
//! store: time to first byte (and to the last) of a run's page for a run of 10,000
//! nodes, and the runs list over 100,000 stored runs — the store's query and the page
//! through HTTP.
//!
//! The 10,000-node run is a real monitor run (one agent reading e-mails, an injected
//! transfer blocked every tenth call), sealed, submitted through the signed API and
//! verified on ingest like any other. The 100,000 runs are the five topology fixtures,
//! ingested, and then copied in SQL (objects, runs and their index rows, each copy with
//! its own digest, run id and submission time): verifying and storing 100,000 distinct
//! bundles would take the bench's set-up minutes and change nothing in what the list
//! query reads.
#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "bench"
)]

mod common;
use common::FIXTURES;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use knox_attest::PartyKey;
use knox_server::store::{Role, RunFilter, Store};
use knox_server::{App, Verifier};

/// Runs in the list's store.
const RUNS: i64 = 100_000;

#[path = "common/big_run.rs"]
mod big;
use big::big_run;

/// A store on a temporary SQLite file served on a loopback port by the real router.
struct Served {
    rt: tokio::runtime::Runtime,
    store: Store,
    addr: std::net::SocketAddr,
    base: String,
    provider: PartyKey,
    /// The provider's key id.
    key_id: String,
    dir: tempfile::TempDir,
}

fn serve() -> Served {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("pages.db").display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let provider = PartyKey::from_seed([1; 32]);
    let (store, addr, key_id) = rt.block_on(async {
        let store = Store::open(&url).await.unwrap();
        let key_id = store
            .register(Role::Provider, "acme", &provider.public_bytes())
            .await
            .unwrap()
            .key_id;
        let app = App::new(
            store.clone(),
            Verifier::embedded(true).unwrap(),
            PartyKey::from_seed([42; 32]),
            knox_server::live::DEFAULT_STALE_SECS,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(knox_server::http::serve(listener, app));
        (store, addr, key_id)
    });
    Served {
        rt,
        store,
        addr,
        base: format!("http://{addr}"),
        provider,
        key_id,
        dir,
    }
}

impl Served {
    fn client(&self) -> knox_server::client::Client {
        let key = PartyKey::from_seed(self.provider.seed());
        knox_server::client::Client::new(&self.base, key).unwrap()
    }

    /// A browser session's cookie value for the provider.
    fn session(&self) -> String {
        let link = self.client().login().unwrap();
        link.split_once("token=").unwrap().1.to_owned()
    }

    /// One GET on a new connection: the time to the response's first byte and to its
    /// last, with the status line checked.
    fn get(&self, path: &str, token: &str) -> (Duration, Duration) {
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nCookie: {}={token}\r\nConnection: close\r\n\r\n",
            self.addr,
            knox_server::auth::SESSION_COOKIE
        );
        let t = Instant::now();
        let mut s = TcpStream::connect(self.addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut first = [0u8; 1];
        s.read_exact(&mut first).unwrap();
        let ttfb = t.elapsed();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap();
        let all = t.elapsed();
        assert!(rest.starts_with(b"TTP/1.1 200"), "{path}: {}", {
            let head = String::from_utf8_lossy(&rest);
            head.chars().take(200).collect::<String>()
        });
        (ttfb, all)
    }
}

/// Criterion's `iter_custom` over `get`, timing the first byte or the whole response.
fn timed_get(s: &Served, path: &str, token: &str, iters: u64, whole: bool) -> Duration {
    (0..iters)
        .map(|_| {
            let (first, all) = s.get(path, token);
            if whole { all } else { first }
        })
        .sum()
}

fn run_page(c: &mut Criterion) {
    let (bytes, nodes) = big_run();
    assert!(nodes >= 10_000, "the big run has {nodes} nodes");
    let s = serve();
    let submitted = s.client().submit(&bytes).unwrap();
    let digest = submitted.digest;
    assert_eq!(submitted.outcome, "complete");
    let token = s.session();
    let path = format!("/runs/{digest}");
    eprintln!(
        "run page of a run of {nodes} nodes ({} bytes of bundle)",
        bytes.len()
    );
    let mut g = c.benchmark_group("run_page_10000_nodes");
    g.sample_size(20);
    // What the page does first: read the stored bundle back (not timed through HTTP).
    g.bench_function("parse_bundle", |b| {
        b.iter(|| knox_verify::parse_bundle(&bytes).unwrap());
    });
    g.bench_function("time_to_first_byte", |b| {
        b.iter_custom(|iters| timed_get(&s, &path, &token, iters, false));
    });
    g.bench_function("time_to_last_byte", |b| {
        b.iter_custom(|iters| timed_get(&s, &path, &token, iters, true));
    });
    g.finish();
}

/// Copies each of the `originals` stored runs `copies` times in SQL: each copy has its
/// own digest (the original's with the copy's number in front), run id, log index and
/// submission time, and every tenth copy is the `other` provider's; its object, its
/// blocked actions, decisions, models and facts are copied with it.
async fn copy_runs(url: &str, originals: i64, copies: i64, other: &str) {
    use sqlx::Connection as _;
    let mut db = sqlx::SqliteConnection::connect(url).await.unwrap();
    let mut tx = db.begin().await.unwrap();
    let numbers = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies})"
    );
    // SQLite reads the whole SELECT before it inserts into the table it reads.
    let copy = |table: &str, cols: &str, select: &str| {
        format!(
            "{numbers} INSERT INTO {table} ({cols}) SELECT {select} FROM n, {table} o \
             WHERE o.digest IN (SELECT digest FROM runs)"
        )
    };
    let id = "printf('%08x', n.i) || substr(o.digest, 9)";
    for sql in [
        copy(
            "objects",
            "digest, kind, bytes, size, stored_at",
            &format!("{id}, o.kind, o.bytes, o.size, o.stored_at"),
        ),
        copy(
            "runs",
            "digest, provider, run_id, kind, outcome, offending_node, reason, platform, \
             hardware_backed, nodes, tool_calls, executed, blocked, interrupts, flagged, \
             structure_root, report, log_index, submitted_at, run_key",
            &format!(
                "{id}, CASE WHEN n.i % 10 = 0 THEN '{other}' ELSE o.provider END, \
                 o.run_id || '-' || n.i, o.kind, o.outcome, o.offending_node, \
                 o.reason, o.platform, o.hardware_backed, o.nodes, o.tool_calls, o.executed, \
                 o.blocked, o.interrupts, o.flagged, o.structure_root, o.report, o.log_index + n.i * {originals}, \
                 o.submitted_at - n.i * 60, o.run_key"
            ),
        ),
        copy(
            "blocked_actions",
            "digest, node, agent, tool, guard, reason",
            &format!("{id}, o.node, o.agent, o.tool, o.guard, o.reason"),
        ),
        copy(
            "regulation_decisions",
            "digest, node, ordinal, regulation, recipient, verdict, policies, provisions",
            &format!(
                "{id}, o.node, o.ordinal, o.regulation, o.recipient, o.verdict, o.policies, \
                 o.provisions"
            ),
        ),
        copy(
            "run_models",
            "digest, ordinal, model",
            &format!("{id}, o.ordinal, o.model"),
        ),
        copy(
            "run_facts",
            "fact, value, digest, provider, submitted_at, log_index",
            &format!(
                "o.fact, o.value, {id}, CASE WHEN n.i % 10 = 0 THEN '{other}' ELSE o.provider END, \
                 o.submitted_at - n.i * 60, o.log_index + n.i * {originals}"
            ),
        ),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query("ANALYZE").execute(&mut db).await.unwrap();
}

fn runs_list(c: &mut Criterion) {
    let s = serve();
    let client = s.client();
    for bytes in FIXTURES {
        client.submit(bytes).unwrap();
    }
    // A second provider with one copy in ten: a regulator sees both, a provider one.
    let beta =
        s.rt.block_on(s.store.register(
            Role::Provider,
            "beta",
            &PartyKey::from_seed([2; 32]).public_bytes(),
        ))
        .unwrap()
        .key_id;
    let url = format!("sqlite://{}", s.dir.path().join("pages.db").display());
    let copies = RUNS / FIXTURES.len() as i64 - 1;
    s.rt.block_on(copy_runs(&url, FIXTURES.len() as i64, copies, &beta));
    let both = [s.key_id.clone(), beta.clone()];
    let stored =
        s.rt.block_on(s.store.runs(&both, &RunFilter::default(), i64::MAX))
            .unwrap()
            .len();
    assert_eq!(stored as i64, RUNS, "runs stored");
    eprintln!("runs list over {stored} runs");
    let token = s.session();
    let limit = knox_server::http::PAGE_SIZE;
    // Every page, by its cursor: 1,000 pages of 100, each run once, the last page's
    // cursor kept for the bench.
    let mut after: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    loop {
        let f = RunFilter {
            after: after.clone(),
            ..RunFilter::default()
        };
        let page = s.rt.block_on(s.store.runs_page(&both, &f, limit)).unwrap();
        assert_eq!(page.total, RUNS, "the count beside every page");
        for r in &page.rows {
            assert!(seen.insert(r.digest.clone()), "a run listed twice");
        }
        // The loop ends having fetched the last page with `after`, kept for the bench.
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen.len() as i64, RUNS, "paging reaches every run");
    let filter = |f: fn(&mut RunFilter)| {
        let mut r = RunFilter::default();
        f(&mut r);
        r
    };
    let last_page = RunFilter {
        after,
        ..RunFilter::default()
    };
    // Each filter over both providers' runs (a regulator's view), as the list serves
    // a page: its runs and the count of all that match.
    let cases = [
        ("newest", RunFilter::default()),
        ("last", last_page),
        // Every fixture has an action the trajectory guard blocked; one fixture in
        // five a blocked `EpicFHIRManageAppointments`; no run a `NoSuchTool`.
        (
            "by_dense_guard",
            filter(|f| f.guard = Some("trajectory".into())),
        ),
        (
            "by_tool",
            filter(|f| f.tool = Some("EpicFHIRManageAppointments".into())),
        ),
        (
            "by_unmatched_tool",
            filter(|f| f.tool = Some("NoSuchTool".into())),
        ),
        // Run ids holding `-1234`: 11 of 100,000.
        ("by_rare_search", filter(|f| f.q = Some("-1234".into()))),
        (
            "by_outcome_none_has",
            filter(|f| f.outcome = Some("tampered".into())),
        ),
        (
            "by_provider_beta",
            filter(|f| f.provider = Some("beta".into())),
        ),
        ("by_model", filter(|f| f.model = Some("dataset".into()))),
        ("by_verdict", filter(|f| f.verdict = Some("blocked".into()))),
        (
            "by_one_day",
            filter(|f| {
                f.since = Some("2020-01-01".into());
                f.until = Some("2020-01-01".into());
            }),
        ),
    ];
    let mut g = c.benchmark_group("runs_list_100000_runs");
    g.sample_size(20);
    for (name, f) in &cases {
        let page = s.rt.block_on(s.store.runs_page(&both, f, limit)).unwrap();
        let plan =
            s.rt.block_on(s.store.runs_page_plan(&both, f, limit))
                .unwrap();
        eprintln!(
            "{name}: {} of {} matching runs; SQLite's plan:\n  {}",
            page.rows.len(),
            page.total,
            plan.join("\n  ")
        );
        g.bench_function(format!("page_{name}"), |b| {
            b.iter(|| s.rt.block_on(s.store.runs_page(&both, f, limit)).unwrap());
        });
    }
    // The provider with one run in ten, seen by itself: the list's walk passes over
    // the other provider's runs.
    let own = std::slice::from_ref(&beta);
    g.bench_function("page_newest_sparse_provider", |b| {
        b.iter(|| {
            s.rt.block_on(s.store.runs_page(own, &RunFilter::default(), limit))
                .unwrap()
        });
    });
    g.bench_function("page_time_to_first_byte", |b| {
        b.iter_custom(|iters| timed_get(&s, "/runs", &token, iters, false));
    });
    g.bench_function("page_time_to_last_byte", |b| {
        b.iter_custom(|iters| timed_get(&s, "/runs", &token, iters, true));
    });
    g.finish();
}

criterion_group!(benches, run_page, runs_list);
criterion_main!(benches);
