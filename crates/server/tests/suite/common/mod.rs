//! Shared test fixtures: the engines to run on, evidence, principals, a served store.
#![allow(dead_code, reason = "each test file uses part of it")]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "tests"
)]

use knox_attest::PartyKey;
use knox_server::store::{Principal, Role, Store};
use knox_server::{App, Verifier};
use sqlx::Connection as _;

/// A complete bundle with blocked actions (simulated platform evidence).
pub(super) const BUNDLE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/mt-ma-3-3.json"
));
/// Another complete bundle.
pub(super) const BUNDLE2: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/st-sa.json"
));
/// A third.
pub(super) const BUNDLE3: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/mt-sa-seq-2.json"
));
/// A journal (a run that never finished).
pub(super) const JOURNAL: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/mt-ma-4-2.journal.jsonl"
));
/// The sealed bundle of the run [`JOURNAL`] recorded.
pub(super) const LIVE_BUNDLE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/mt-ma-4-2.json"
));

/// Runs 0–3 of one in-TEE key's chain (evidence format v3), and `fork-1`: a second run
/// 1 signed by the same key (`crates/verify/tests/suite/key_chain.rs` writes them).
pub(super) const CHAIN: [&[u8]; 4] = [
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/run-0.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/run-1.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/run-2.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/run-3.json"
    )),
];
/// A second run 1 of [`CHAIN`]'s key: a fork.
pub(super) const CHAIN_FORK: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/chain/fork-1.json"
));

/// A key's announcement (its link 0, evidence format §6a), then its runs 1 and 2; and
/// another key's announcement that no run follows (`crates/verify/tests/suite/key_chain.rs`
/// writes them).
pub(super) const ANNOUNCED: [&[u8]; 4] = [
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/announced-0.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/announced-1.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/announced-2.json"
    )),
    include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/chain/unfollowed-0.json"
    )),
];

/// [`BUNDLE`] with one blocked node's reason rewritten: tampered evidence.
pub(super) fn tampered() -> Vec<u8> {
    let s = std::str::from_utf8(BUNDLE).unwrap();
    let from = "off trajectory at position 1";
    assert!(s.contains(from));
    s.replacen(from, "on trajectory at position 1", 1)
        .into_bytes()
}

/// A fresh SQLite database file (the directory lives as long as the process).
pub(super) fn sqlite_url() -> String {
    let dir = tempfile::tempdir().unwrap().keep();
    format!("sqlite://{}", dir.join("store.db").display())
}

/// A fresh database on the PostgreSQL of `KNOX_TEST_POSTGRES_URL`; `None` (said loudly)
/// when unset, a failure when unset under `CI=true`.
pub(super) async fn postgres_url() -> Option<String> {
    let Ok(url) = std::env::var("KNOX_TEST_POSTGRES_URL") else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!(
                "KNOX_TEST_POSTGRES_URL is not set under CI=true: start one with scripts/postgres-test"
            );
        }
        eprintln!(
            "SKIPPED on PostgreSQL: KNOX_TEST_POSTGRES_URL is not set (scripts/postgres-test starts one)"
        );
        return None;
    };
    sqlx::any::install_default_drivers();
    let mut name = [0u8; 8];
    getrandom::fill(&mut name).unwrap();
    let db = format!("knox_t_{}", hex::encode(name));
    let mut c = sqlx::AnyConnection::connect(&url).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut c)
        .await
        .unwrap();
    c.close().await.unwrap();
    let base = url.rsplit_once('/').unwrap().0;
    Some(format!("{base}/{db}"))
}

/// Defines `$name::sqlite` and `$name::postgres`, each running `async fn $name(url)`.
#[macro_export]
macro_rules! on_both_engines {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$name($crate::suite::common::sqlite_url()).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(url) = $crate::suite::common::postgres_url().await {
                    super::$name(url).await;
                }
            }
        }
    )*};
}

/// The principals of the tests: providers acme and globex, regulators cnil (assigned
/// acme) and ico (assigned globex).
#[derive(Debug)]
pub(super) struct People {
    pub acme: (PartyKey, Principal),
    pub globex: (PartyKey, Principal),
    pub cnil: (PartyKey, Principal),
    pub ico: (PartyKey, Principal),
}

pub(super) async fn people(store: &Store) -> People {
    let mk = |seed: u8| PartyKey::from_seed([seed; 32]);
    let reg = async |role, name, k: &PartyKey| {
        store.register(role, name, &k.public_bytes()).await.unwrap()
    };
    let (a, g, c, i) = (mk(1), mk(2), mk(3), mk(4));
    let acme = reg(Role::Provider, "acme", &a).await;
    let globex = reg(Role::Provider, "globex", &g).await;
    let cnil = reg(Role::Regulator, "cnil", &c).await;
    let ico = reg(Role::Regulator, "ico", &i).await;
    store.assign(&cnil, &acme).await.unwrap();
    store.assign(&ico, &globex).await.unwrap();
    People {
        acme: (a, acme),
        globex: (g, globex),
        cnil: (c, cnil),
        ico: (i, ico),
    }
}

/// The verifier of the tests: embedded manifest, simulated evidence accepted (the
/// fixtures are simulated).
pub(super) fn verifier() -> Verifier {
    Verifier::embedded(true).unwrap()
}

/// The log key of the tests.
pub(super) fn log_key() -> PartyKey {
    PartyKey::from_seed([42; 32])
}

/// Verifies and ingests as `p`.
pub(super) async fn ingest(
    store: &Store,
    p: &Principal,
    bytes: &[u8],
) -> knox_server::store::Ingested {
    let v = verifier();
    let checked = v.check(bytes).unwrap();
    store
        .ingest(p, bytes, &checked, knox_server::auth::now())
        .await
        .unwrap()
}

/// A server on a loopback port, on its own runtime.
#[derive(Debug)]
pub(super) struct Served {
    pub base: String,
    pub store: Store,
    pub people: People,
    pub rt: tokio::runtime::Runtime,
}

pub(super) fn serve(url: &str) -> Served {
    serve_with(url, knox_server::live::DEFAULT_STALE_SECS)
}

/// [`serve`], live runs shown as prefixes after `stale_secs` without a delivery.
pub(super) fn serve_with(url: &str, stale_secs: u64) -> Served {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (store, people, base) = rt.block_on(async {
        let store = Store::open(url).await.unwrap();
        let people = people(&store).await;
        let app = App::new(store.clone(), verifier(), log_key(), stale_secs);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(knox_server::http::serve(listener, app));
        (store, people, base)
    });
    Served {
        base,
        store,
        people,
        rt,
    }
}

/// A sync test's PostgreSQL URL (a fresh database), or `None` when skipped.
pub(super) fn postgres_url_blocking() -> Option<String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(postgres_url())
}

/// The text of a PDF by poppler's `pdftotext` (Debian's `poppler-utils`); `None`, said
/// loudly, without it, and a failure under `CI=true`.
pub(super) fn pdftotext(pdf: &[u8]) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.pdf");
    std::fs::write(&path, pdf).unwrap();
    match std::process::Command::new("pdftotext")
        .arg("-layout")
        .arg(&path)
        .arg("-")
        .output()
    {
        Ok(out) => {
            assert!(
                out.status.success(),
                "pdftotext: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(String::from_utf8(out.stdout).unwrap())
        }
        Err(e) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("no pdftotext under CI=true ({e}): install Debian's `poppler-utils`");
            }
            eprintln!("SKIPPED: no pdftotext ({e}): install Debian's `poppler-utils`");
            None
        }
    }
}
