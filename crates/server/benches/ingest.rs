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
use knox_attest::TeeKey;
use knox_server::store::{Role, Store};
use knox_server::{Principal, Verifier};

fn fresh(rt: &tokio::runtime::Runtime) -> (Store, Principal, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    rt.block_on(async {
        let s = Store::open(&url).await.unwrap();
        let p = s
            .register(
                Role::Provider,
                "bench",
                &TeeKey::from_seed([1; 32]).public_bytes(),
            )
            .await
            .unwrap();
        (s, p, dir)
    })
}

/// Runs `body` `iters` times, each on a fresh store; only `body` is timed.
fn timed<F, Fut>(rt: &tokio::runtime::Runtime, iters: u64, body: F) -> Duration
where
    F: Fn(Store, Principal) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let (s, p, dir) = fresh(rt);
        let t = Instant::now();
        rt.block_on(body(s.clone(), p));
        total += t.elapsed();
        rt.block_on(s.close());
        drop(dir);
    }
    total
}

fn ingest(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let v = &Verifier::embedded(true).expect("embedded manifest");
    let nodes: u64 = FIXTURES
        .iter()
        .map(|b| knox_verify::parse_bundle(b).unwrap().nodes.len() as u64)
        .sum();
    let mut g = c.benchmark_group("ingest_sqlite");
    g.throughput(Throughput::Elements(nodes));
    g.sample_size(20);
    g.bench_function("verify_index_log_5_bundles", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |s, p| async move {
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
            timed(&rt, iters, |s, p| async move {
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
    g.bench_function("verify_only_5_bundles", |b| {
        b.iter(|| {
            for bytes in FIXTURES {
                std::hint::black_box(v.check(bytes).unwrap());
            }
        });
    });
    let checked: &Vec<_> = &FIXTURES.iter().map(|b| v.check(b).unwrap()).collect();
    g.bench_function("index_log_only_5_bundles", |b| {
        b.iter_custom(|iters| {
            timed(&rt, iters, |s, p| async move {
                for (bytes, c) in FIXTURES.iter().zip(checked) {
                    let r = s.ingest(&p, bytes, c, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    g.finish();
}

/// On PostgreSQL: a database migrated with the bench's provider registered, copied for
/// each iteration (`CREATE DATABASE … TEMPLATE`, not timed) — the store's tables are
/// append-only, so they are never emptied.
struct Postgres {
    server: String,
    base: String,
    template: String,
}

impl Postgres {
    async fn admin(&self, sql: &str) {
        use sqlx::Connection as _;
        let mut c = sqlx::AnyConnection::connect(&self.server).await.unwrap();
        sqlx::query(sql).execute(&mut c).await.unwrap();
        c.close().await.unwrap();
    }

    /// A fresh store copied from the template, and its database's name.
    async fn fresh(&self, n: u64) -> (Store, Principal, String) {
        let db = format!("{}_{n}", self.template);
        self.admin(&format!("CREATE DATABASE {db} TEMPLATE {}", self.template))
            .await;
        let s = Store::open(&format!("{}/{db}", self.base)).await.unwrap();
        let p = s
            .register(
                Role::Provider,
                "bench",
                &TeeKey::from_seed([1; 32]).public_bytes(),
            )
            .await
            .unwrap();
        (s, p, db)
    }

    /// Runs `body` `iters` times, each on a fresh copy; only `body` is timed.
    fn timed<F, Fut>(&self, rt: &tokio::runtime::Runtime, iters: u64, body: F) -> Duration
    where
        F: Fn(Store, Principal) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut total = Duration::ZERO;
        for n in 0..iters {
            let (s, p, db) = rt.block_on(self.fresh(n));
            let t = Instant::now();
            rt.block_on(body(s.clone(), p));
            total += t.elapsed();
            rt.block_on(async {
                s.close().await;
                self.admin(&format!("DROP DATABASE {db} WITH (FORCE)"))
                    .await;
            });
        }
        total
    }
}

fn ingest_postgres(c: &mut Criterion) {
    let Ok(server) = std::env::var("KNOX_BENCH_POSTGRES_URL") else {
        eprintln!("ingest_postgres SKIPPED: KNOX_BENCH_POSTGRES_URL is not set");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let v = &Verifier::embedded(true).expect("embedded manifest");
    let nodes: u64 = FIXTURES
        .iter()
        .map(|b| knox_verify::parse_bundle(b).unwrap().nodes.len() as u64)
        .sum();
    sqlx::any::install_default_drivers();
    let pg = &Postgres {
        base: server
            .rsplit_once('/')
            .expect("a URL with a database")
            .0
            .to_owned(),
        template: format!("knox_bench_{}", std::process::id()),
        server,
    };
    rt.block_on(async {
        pg.admin(&format!("CREATE DATABASE {}", pg.template)).await;
        let s = Store::open(&format!("{}/{}", pg.base, pg.template))
            .await
            .unwrap();
        s.register(
            Role::Provider,
            "bench",
            &TeeKey::from_seed([1; 32]).public_bytes(),
        )
        .await
        .unwrap();
        s.close().await;
    });
    let mut g = c.benchmark_group("ingest_postgres");
    g.throughput(Throughput::Elements(nodes));
    g.sample_size(10);
    g.bench_function("verify_index_log_5_bundles", |b| {
        b.iter_custom(|iters| {
            pg.timed(&rt, iters, |s, p| async move {
                for bytes in FIXTURES {
                    let checked = v.check(bytes).unwrap();
                    let r = s.ingest(&p, bytes, &checked, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    let checked: &Vec<_> = &FIXTURES.iter().map(|b| v.check(b).unwrap()).collect();
    g.bench_function("index_log_only_5_bundles", |b| {
        b.iter_custom(|iters| {
            pg.timed(&rt, iters, |s, p| async move {
                for (bytes, c) in FIXTURES.iter().zip(checked) {
                    let r = s.ingest(&p, bytes, c, 1).await.unwrap();
                    assert!(!r.duplicate);
                }
            })
        });
    });
    g.finish();
    rt.block_on(pg.admin(&format!("DROP DATABASE {} WITH (FORCE)", pg.template)));
}

criterion_group!(benches, ingest, ingest_postgres);
criterion_main!(benches);
