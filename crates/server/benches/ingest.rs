//! Ingest rate on SQLite: verify (knox_verify), index and append to the log, in nodes
//! per second. Each iteration ingests the five topology fixtures into a fresh store;
//! creating and closing it (a WAL checkpoint) are outside the timed part, so none is a
//! duplicate and what is timed is what a running server does per submission: verify,
//! then one durable transaction (`synchronous = FULL`).
//!
//! With `KNOX_BENCH_POSTGRES_URL` set (a PostgreSQL server URL whose user may create
//! databases, e.g. `scripts/postgres-test`'s), the same on PostgreSQL: each iteration
//! into a fresh database copied from a migrated template (not timed).
#![expect(clippy::unwrap_used, clippy::expect_used, reason = "bench")]

mod common;
use common::FIXTURES;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use knox_attest::PartyKey;
use knox_server::store::{Role, Store};
use knox_server::{Principal, Verifier};

/// Registers the bench's provider.
async fn provider(s: &Store) -> Principal {
    s.register(
        Role::Provider,
        "bench",
        &PartyKey::from_seed([1; 32]).public_bytes(),
    )
    .await
    .unwrap()
}

/// Where each iteration's fresh store comes from.
enum Engine {
    /// A new file in a temporary folder.
    Sqlite,
    /// A copy of a migrated template database (`CREATE DATABASE … TEMPLATE`): the
    /// store's tables are append-only, so they are never emptied.
    Postgres {
        /// The server URL (its database is where the others are created from).
        server: String,
        /// The server URL without its database.
        base: String,
        /// The template's name.
        template: String,
    },
}

/// What a fresh store holds on to until it is discarded.
enum Held {
    Dir(tempfile::TempDir),
    Database(String),
}

impl Engine {
    /// The PostgreSQL engine of `server`, its template created.
    async fn postgres(server: String) -> Self {
        sqlx::any::install_default_drivers();
        let base = server
            .rsplit_once('/')
            .expect("a URL with a database")
            .0
            .to_owned();
        let template = format!("knox_bench_{}", std::process::id());
        let e = Self::Postgres {
            server,
            base: base.clone(),
            template: template.clone(),
        };
        e.admin(&format!("CREATE DATABASE {template}")).await;
        let s = Store::open(&format!("{base}/{template}")).await.unwrap();
        provider(&s).await;
        s.close().await;
        e
    }

    /// Runs `sql` on the PostgreSQL server (nothing on SQLite).
    async fn admin(&self, sql: &str) {
        use sqlx::Connection as _;
        if let Self::Postgres { server, .. } = self {
            let mut c = sqlx::AnyConnection::connect(server).await.unwrap();
            sqlx::query(sql).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
    }

    /// Iteration `n`'s fresh store with the provider registered.
    async fn fresh(&self, n: u64) -> (Store, Principal, Held) {
        let (url, held) = match self {
            Self::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                (url, Held::Dir(dir))
            }
            Self::Postgres { base, template, .. } => {
                let db = format!("{template}_{n}");
                self.admin(&format!("CREATE DATABASE {db} TEMPLATE {template}"))
                    .await;
                (format!("{base}/{db}"), Held::Database(db))
            }
        };
        let s = Store::open(&url).await.unwrap();
        let p = provider(&s).await;
        (s, p, held)
    }

    /// Closes `s` and removes what it was stored in.
    async fn discard(&self, s: Store, held: Held) {
        s.close().await;
        match held {
            Held::Dir(dir) => drop(dir),
            Held::Database(db) => {
                self.admin(&format!("DROP DATABASE {db} WITH (FORCE)"))
                    .await
            }
        }
    }

    /// Removes the template (nothing on SQLite).
    async fn finish(&self) {
        if let Self::Postgres { template, .. } = self {
            self.admin(&format!("DROP DATABASE {template} WITH (FORCE)"))
                .await;
        }
    }
}

/// Runs `body` `iters` times, each on a fresh store; only `body` is timed.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, engine: &Engine, iters: u64, body: F) -> Duration
where
    F: Fn(Store, Principal) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut total = Duration::ZERO;
    for n in 0..iters {
        let (s, p, held) = rt.block_on(engine.fresh(n));
        let t = Instant::now();
        rt.block_on(body(s.clone(), p));
        total += t.elapsed();
        rt.block_on(engine.discard(s, held));
    }
    total
}

/// The benches of one engine (`group`); the verifier alone is timed once, with SQLite.
fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, engine: &Engine, group: &str) {
    let v = &Verifier::embedded(true).expect("embedded manifest");
    let nodes: u64 = FIXTURES
        .iter()
        .map(|b| knox_verify::parse_bundle(b).unwrap().nodes.len() as u64)
        .sum();
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(nodes));
    g.sample_size(match engine {
        Engine::Sqlite => 20,
        Engine::Postgres { .. } => 10,
    });
    g.bench_function("verify_index_log_5_bundles", |b| {
        b.iter_custom(|iters| {
            timed(rt, engine, iters, |s, p| async move {
                for bytes in FIXTURES {
                    let checked = v.check(bytes).unwrap();
                    let r = s.ingest(&p, bytes, &checked, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    // Concurrent submissions, as the server takes them: each verified on its own
    // blocking thread, then stored (the store has one writer).
    g.bench_function("verify_concurrently_index_log_5_bundles", |b| {
        b.iter_custom(|iters| {
            timed(rt, engine, iters, |s, p| async move {
                let checked: Vec<_> = std::thread::scope(|t| {
                    let hs: Vec<_> = FIXTURES
                        .iter()
                        .map(|bytes| t.spawn(move || v.check(bytes).unwrap()))
                        .collect();
                    hs.into_iter().map(|h| h.join().unwrap()).collect()
                });
                for (bytes, c) in FIXTURES.iter().zip(&checked) {
                    let r = s.ingest(&p, bytes, c, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    // The two halves, to see where the time goes: the verifier alone, and the store
    // alone (submissions verified outside the timed part).
    if matches!(engine, Engine::Sqlite) {
        g.bench_function("verify_only_5_bundles", |b| {
            b.iter(|| {
                for bytes in FIXTURES {
                    std::hint::black_box(v.check(bytes).unwrap());
                }
            });
        });
    }
    let checked: &Vec<_> = &FIXTURES.iter().map(|b| v.check(b).unwrap()).collect();
    g.bench_function("index_log_only_5_bundles", |b| {
        b.iter_custom(|iters| {
            timed(rt, engine, iters, |s, p| async move {
                for (bytes, c) in FIXTURES.iter().zip(checked) {
                    let r = s.ingest(&p, bytes, c, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    g.finish();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn ingest(c: &mut Criterion) {
    group(c, &runtime(), &Engine::Sqlite, "ingest_sqlite");
}

fn ingest_postgres(c: &mut Criterion) {
    let Ok(server) = std::env::var("KNOX_BENCH_POSTGRES_URL") else {
        eprintln!("ingest_postgres SKIPPED: KNOX_BENCH_POSTGRES_URL is not set");
        return;
    };
    let rt = runtime();
    let engine = rt.block_on(Engine::postgres(server));
    group(c, &rt, &engine, "ingest_postgres");
    rt.block_on(engine.finish());
}

criterion_group!(benches, ingest, ingest_postgres);
criterion_main!(benches);
