//! `knox serve`'s transparency log in the C2SP formats (checkpoint, tiles, cosignatures),
//! audited by `knox log` and by an independent checker and witness written from the
//! specifications with Python's standard library alone
//! (`crates/server/tests/fixtures/tlog_checker.py`): a kept checkpoint extended, a
//! witness's cosignature kept, served and required, a rolled-back and a forked log
//! caught.

use std::process::Command;

use super::server::{acme_and_cnil, knox_in, start_with};

const CHECKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../server/tests/fixtures/tlog_checker.py"
);
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/st-sa.json"
);
const ORIGIN: &str = "regulator.example/knox";
const WITNESS: &str = "witness.example/w1";
const WITNESS_SEED: &str = "5757575757575757575757575757575757575757575757575757575757575757";
const VKEY: &str = "data/knox/server/log.vkey";

/// The checker's JSON answer, and whether it exited 0.
fn checker(args: &[&str]) -> (bool, serde_json::Value) {
    let out = Command::new("python3")
        .arg(CHECKER)
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        serde_json::json!({"stdout": String::from_utf8_lossy(&out.stdout),
                           "stderr": String::from_utf8_lossy(&out.stderr)})
    });
    (out.status.success(), v)
}

/// Submits `n` runs, distinct by their trailing whitespace (`salt + i` spaces): their
/// `INDEX:SHA256` in the log.
fn submit(d: &std::path::Path, url: &str, salt: usize, n: usize) -> Vec<String> {
    let good = std::fs::read_to_string(FIXTURE).unwrap();
    let mut args = vec!["submit".to_owned()];
    for i in 0..n {
        let name = format!("run-{salt}-{i}.json");
        std::fs::write(d.join(&name), format!("{good}\n{}", " ".repeat(salt + i))).unwrap();
        args.push(name);
    }
    args.extend(["--to", url, "--key", "acme.key", "--json"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = knox_in(d, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r["inclusion"]["index"],
                r["digest"].as_str().unwrap()
            )
        })
        .collect()
}

/// `knox log COMMAND --log URL/tlog --log-key log.vkey ARGS`: exit code, stdout + stderr.
fn log(d: &std::path::Path, url: &str, command: &str, args: &[&str]) -> (i32, String) {
    let prefix = format!("{url}/tlog");
    let mut all = vec!["log", command, "--log", &prefix, "--log-key", VKEY];
    all.extend_from_slice(args);
    let out = knox_in(d, &all);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// The store's files, copied from `from` to `to` (the server stopped).
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["store.db", "store.db-wal", "store.db-shm"] {
        let _ = std::fs::remove_file(to.join(f));
        if from.join(f).exists() {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
    }
}

#[test]
fn the_log_is_audited_in_c2sp_formats_and_a_rollback_and_a_fork_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    acme_and_cnil(d);
    let (ok, w) = checker(&["witness-key", "--name", WITNESS, "--seed", WITNESS_SEED]);
    assert!(ok, "{w}");
    let wkey = w["vkey"].as_str().unwrap().to_owned();
    std::fs::write(d.join("w1.vkey"), &wkey).unwrap();
    let serve = ["--log-origin", ORIGIN, "--witness", "w1.vkey"];
    let (server, url, line) = start_with(d, &serve);
    assert!(line.contains(ORIGIN), "{line}");
    let vkey = std::fs::read_to_string(d.join(VKEY)).unwrap();
    let vkey = vkey.trim().to_owned();
    assert!(vkey.starts_with(&format!("{ORIGIN}+")), "{vkey}");

    let first = submit(d, &url, 0, 3);
    let (code, text) = log(d, &url, "head", &["--out", "HEAD.txt"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("at size 3"), "{text}");

    // The independent checker: the log's signature, the root recomputed from every
    // entry bundle, every hash tile against the entries.
    let prefix = format!("{url}/tlog");
    let (ok, c) = checker(&["check", "--prefix", &prefix, "--vkey", &vkey]);
    assert!(ok, "{c}");
    assert_eq!(
        (c["size"].as_u64(), c["entries"].as_u64()),
        (Some(3), Some(3)),
        "{c}"
    );

    // The checker as a witness: it cosigns, the server keeps and serves the line, and
    // `knox log` requires it; a stranger's cosignature is refused.
    let post = format!("{url}/api/log/cosignatures");
    let cosign = |seed: &str| {
        checker(&[
            "cosign", "--prefix", &prefix, "--vkey", &vkey, "--name", WITNESS, "--seed", seed,
            "--post", &post,
        ])
    };
    let (ok, _) = cosign(&"58".repeat(32));
    assert!(
        !ok,
        "a cosignature by a key the server was not given is refused"
    );
    let (ok, c) = cosign(WITNESS_SEED);
    assert!(ok && c["posted"] == 200, "{c}");
    let (ok, c) = checker(&[
        "check",
        "--prefix",
        &prefix,
        "--vkey",
        &vkey,
        "--witness",
        &wkey,
    ]);
    assert!(ok && c["cosignature"] == true, "{c}");
    let (code, text) = log(
        d,
        &url,
        "verify",
        &[
            "--from",
            "HEAD.txt",
            "--witness",
            "w1.vkey",
            "--entry",
            &first[0],
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("cosigned by witness.example/w1"), "{text}");
    // An entry at another index is not in the log.
    let (i1, _) = first[1].split_once(':').unwrap();
    let (_, d0) = first[0].split_once(':').unwrap();
    let (code, text) = log(
        d,
        &url,
        "verify",
        &["--from", "HEAD.txt", "--entry", &format!("{i1}:{d0}")],
    );
    assert_eq!(code, 1, "{text}");

    // The log grows: the kept checkpoint is extended; the newer one is not cosigned yet.
    submit(d, &url, 10, 2);
    let (code, text) = log(
        d,
        &url,
        "verify",
        &["--from", "HEAD.txt", "--witness", "w1.vkey"],
    );
    assert_eq!(code, 2, "{text}");
    let (code, text) = log(d, &url, "verify", &["--from", "HEAD.txt", "--update"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("at size 5 extends the kept checkpoint of size 3"),
        "{text}"
    );
    std::fs::copy(d.join("HEAD.txt"), d.join("HEAD5.txt")).unwrap();

    // The operator keeps the store as it was at size 5, grows it to 7 (an auditor keeps
    // that checkpoint), then puts the old store back: a rollback.
    let store = d.join("data/knox/server");
    drop(server);
    copy_store(&store, &d.join("at-5"));
    let (server, url, _) = start_with(d, &serve);
    submit(d, &url, 20, 2);
    let (code, text) = log(
        d,
        &url,
        "watch",
        &["--from", "HEAD.txt", "--interval", "0", "--count", "1"],
    );
    assert_eq!(code, 0, "{text}");
    std::fs::copy(d.join("HEAD.txt"), d.join("HEAD7.txt")).unwrap();
    drop(server);
    copy_store(&d.join("at-5"), &store);
    let (server, url, _) = start_with(d, &serve);
    let (code, text) = log(d, &url, "verify", &["--from", "HEAD7.txt"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("rolled back"), "{text}");

    // Two other runs make another tree of size 7: a fork; one more, a tree of size 8
    // that does not extend the kept 7.
    submit(d, &url, 30, 2);
    let (code, text) = log(d, &url, "verify", &["--from", "HEAD7.txt"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("forked: two signed checkpoints of size 7"),
        "{text}"
    );
    submit(d, &url, 40, 1);
    let (code, text) = log(d, &url, "verify", &["--from", "HEAD7.txt"]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("does not extend the kept one of size 7"),
        "{text}"
    );
    // Seen from before the fork (size 5), the forked log is an honest extension: only an
    // auditor who kept a later checkpoint, or a witness, can tell.
    let (code, text) = log(d, &url, "verify", &["--from", "HEAD5.txt"]);
    assert_eq!(code, 0, "{text}");
    let (ok, c) = checker(&["check", "--prefix", &format!("{url}/tlog"), "--vkey", &vkey]);
    assert!(ok && c["size"] == 8, "{c}");
    drop(server);
}
