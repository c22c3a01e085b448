//! #38 item 5: several `knox serve` replicas on one PostgreSQL are one server. Started
//! together on an empty database and submitted to concurrently (every bundle to two
//! replicas at once), they keep one linear transparency log: each run stored once, no
//! log index lost or taken twice, every head any replica signed consistent with every
//! replica's current one. A replica given another log key is refused rather than
//! signing a second log over the same entries.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};

use std::process::Stdio;

use knox_server::client::Client;
use knox_server::tlog;
use serde_json::Value;

use super::server::{Server, acme_and_cnil, knox_in};
use super::support::knox;

/// A fresh database on the PostgreSQL of `KNOX_TEST_POSTGRES_URL` (`scripts/test`
/// starts one); `None`, said loudly, when unset, and a failure when unset under `CI=true`.
fn postgres_database() -> Option<String> {
    let Ok(url) = std::env::var("KNOX_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "KNOX_TEST_POSTGRES_URL is not set under CI=true: start one with scripts/postgres-test"
        );
        eprintln!("SKIPPED: KNOX_TEST_POSTGRES_URL is not set (scripts/postgres-test starts one)");
        return None;
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!("knox_replicas_{}_{nanos}", std::process::id());
    let made = std::process::Command::new("psql")
        .args([url.as_str(), "-q", "-c", &format!("CREATE DATABASE {name}")])
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let base = url.rsplit_once('/').unwrap().0;
    Some(format!("{base}/{name}"))
}

/// `knox serve` in `d` on `db` with `access.toml` and `args`, not yet announced.
fn spawn(d: &Path, db: &str, args: &[&str]) -> Server {
    let child = knox()
        .current_dir(d)
        .env("XDG_DATA_HOME", d.join("data"))
        .args(["serve", "--db", db, "--access", "access.toml"])
        .args(["--allow-simulated", "--listen", "127.0.0.1:0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Server(child)
}

/// The first line `server` wrote: its announcement, or why it did not start.
fn first_line(server: &mut Server) -> String {
    let mut line = String::new();
    BufReader::new(server.0.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line
}

fn url_of(line: &str) -> String {
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("not serving: {line:?}"))
        .to_owned()
}

#[test]
fn three_replicas_on_one_postgresql_keep_one_log() {
    let Some(db) = postgres_database() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    acme_and_cnil(d);
    let out = knox_in(
        d,
        &["run", "--workload", "st-sa", "--flows", "6", "--out", "out"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(d.join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            std::fs::read(p)
                .is_ok_and(|b| serde_json::from_slice::<knox_types::bundle::Bundle>(&b).is_ok())
        })
        .collect();
    files.sort();
    assert!(files.len() >= 6, "{files:?}");

    // Three replicas started at once on the empty database, sharing one data folder:
    // one of them creates the log key, the others load it.
    let mut replicas: Vec<Server> = (0..3).map(|_| spawn(d, &db, &[])).collect();
    let lines: Vec<String> = replicas.iter_mut().map(first_line).collect();
    let urls: Vec<String> = lines.iter().map(|l| url_of(l)).collect();
    let log_key = d.join("data/knox/server/log.pub");
    assert!(log_key.exists(), "{lines:?}");

    // Every bundle to two replicas at once: replica i takes the files k with
    // k % 3 == i or (k + 1) % 3 == i, all three submitting together.
    let submitted: Vec<Value> = std::thread::scope(|s| {
        let threads: Vec<_> = urls
            .iter()
            .enumerate()
            .map(|(i, url)| {
                let mine: Vec<&PathBuf> = files
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| k % 3 == i || (k + 1) % 3 == i)
                    .map(|(_, f)| f)
                    .collect();
                let log_key = &log_key;
                s.spawn(move || {
                    let out = knox()
                        .current_dir(d)
                        .args(["submit", "--json", "--to", url, "--key", "acme.key"])
                        .arg("--log-key")
                        .arg(log_key)
                        .args(mine)
                        .output()
                        .unwrap();
                    assert!(
                        out.status.success(),
                        "{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    assert_eq!(submitted.len(), 2 * files.len());

    // Each run stored once: per digest, one submission stored it and the other found it.
    let mut by_digest: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for r in &submitted {
        by_digest
            .entry(r["digest"].as_str().unwrap().to_owned())
            .or_default()
            .push(r);
    }
    assert_eq!(by_digest.len(), files.len());
    let mut indices = BTreeSet::new();
    for (digest, rs) in &by_digest {
        let fresh = rs.iter().filter(|r| r["duplicate"] == false).count();
        assert_eq!(fresh, 1, "{digest}: {rs:#?}");
        let at: BTreeSet<u64> = rs
            .iter()
            .map(|r| r["inclusion"]["index"].as_u64().unwrap())
            .collect();
        assert_eq!(at.len(), 1, "{digest} at two log indices: {rs:#?}");
        indices.extend(at);
    }
    // One linear log: the indices are exactly 0..n.
    let n = files.len() as u64;
    assert_eq!(indices, (0..n).collect::<BTreeSet<_>>());

    // Every head a replica signed is consistent with each replica's current head, and
    // the three current heads are the same head.
    let acme =
        || knox_attest::keyfile::decode(&std::fs::read(d.join("acme.key")).unwrap()).unwrap();
    let log_public: knox_types::bundle::PublicKey =
        serde_json::from_slice(&std::fs::read(&log_key).unwrap()).unwrap();
    let sizes: BTreeSet<u64> = submitted
        .iter()
        .map(|r| r["inclusion"]["head"]["tree_size"].as_u64().unwrap())
        .filter(|s| *s < n)
        .collect();
    assert!(!sizes.is_empty(), "every submission saw the whole log?");
    let mut current = BTreeSet::new();
    for url in &urls {
        let c = Client::new(url, acme()).unwrap();
        for size in &sizes {
            let proof: tlog::Consistency = c
                .ok("GET", &format!("/api/log/consistency?from={size}"), b"")
                .unwrap();
            tlog::check_consistency(&proof, &log_public).unwrap();
            assert_eq!(proof.to.tree_size, n);
            current.insert(proof.to.root.to_hex());
        }
    }
    assert_eq!(current.len(), 1, "three replicas, three logs: {current:?}");

    // A fourth replica with a log key of its own: refused, naming the key the log has.
    let mut other = spawn(d, &db, &["--log-key", "other-log.key"]);
    let line = first_line(&mut other);
    let status = other.0.wait().unwrap();
    assert!(!status.success(), "{line}");
    assert!(line.contains("another log key"), "{line}");
    drop(replicas);
}
