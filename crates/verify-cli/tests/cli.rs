//! The `knox-verify` binary: its commands, exit codes and `--json` shapes on real
//! evidence (the bundles and journal `knox run` wrote, in `crates/verify/tests/fixtures`),
//! and a clear error — never a panic — for every bad input.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../verify/tests/fixtures")
        .join(name)
}

fn bundle() -> PathBuf {
    fixture("topologies/mt-ma-4-2.json")
}

fn run(args: &[&str], files: &[&Path]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_knox-verify"))
        .args(args)
        .args(files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

fn stdout_json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// A JSON error object of `kind` with the exit code the process ended with.
fn assert_error(o: &Output, kind: &str) {
    let v = stdout_json(o);
    assert_eq!(v["error"]["kind"], kind, "{v}");
    assert_eq!(v["error"]["code"], json!(code(o)), "{v}");
    assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
}

#[test]
fn help_and_version() {
    let o = run(&["--version"], &[]);
    assert_eq!(code(&o), 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("knox-verify 0.1.0 (commit "), "{text}");
    let o = run(&["--help"], &[]);
    assert_eq!(code(&o), 0);
    let text = String::from_utf8_lossy(&o.stdout);
    for cmd in [
        "verify",
        "receipts",
        "prove",
        "quote",
        "gpu",
        "regulations",
        "keygen",
    ] {
        assert!(text.contains(cmd), "{cmd} missing from --help: {text}");
    }
    // Nothing of the prover: no `run`, `demo`, `eval`, `model`.
    for cmd in ["\n  run ", "\n  demo ", "\n  eval ", "\n  model "] {
        assert!(!text.contains(cmd), "{cmd:?} in --help: {text}");
    }
    let o = run(&["verify", "--help"], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("  3   refused"), "{text}");
    for cmd in [
        &["verify"][..],
        &["receipts"],
        &["prove", "node"],
        &["prove", "check"],
        &["quote", "verify"],
        &["gpu", "verify"],
        &["regulations", "show"],
        &["keygen"],
    ] {
        let o = run(&[cmd, &["--help"]].concat(), &[]);
        assert_eq!(code(&o), 0, "{cmd:?}");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            text.contains("Exit codes:\n") && text.contains("  64  usage"),
            "{cmd:?}: {text}"
        );
    }
}

#[test]
fn verify_exit_codes_and_json_shape() {
    // Simulated evidence is refused unless allowed.
    assert_eq!(code(&run(&["verify"], &[&bundle()])), 3);
    let o = run(&["verify", "--allow-simulated"], &[&bundle()]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("COMPLETE"));
    let o = run(&["verify", "--allow-simulated", "--json"], &[&bundle()]);
    assert_eq!(code(&o), 0);
    let v = stdout_json(&o);
    assert_eq!(v["outcome"]["status"], "complete", "{v}");
    assert_eq!(v["file"], bundle().display().to_string());
    assert_eq!(v["structure_root"].as_str().unwrap().len(), 64);
    assert!(v["nodes"].as_u64().unwrap() > 0);
    // A journal is a prefix; several files: an array, the worst code.
    let journal = fixture("topologies/mt-ma-4-2.journal.jsonl");
    assert_eq!(code(&run(&["verify", "--allow-simulated"], &[&journal])), 2);
    let o = run(
        &["verify", "--allow-simulated", "--json"],
        &[&bundle(), &journal],
    );
    assert_eq!(code(&o), 2);
    let v = stdout_json(&o);
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v[1]["outcome"]["status"], "prefix", "{v}");
    assert_eq!(v[1]["structure_root"], Value::Null, "{v}");
    // EAR.
    let o = run(&["verify", "--allow-simulated", "--ear"], &[&bundle()]);
    assert_eq!(code(&o), 0);
    let v = stdout_json(&o);
    assert!(v["eat_profile"].is_string(), "{v}");
    assert_eq!(v["file"], bundle().display().to_string(), "{v}");
}

#[test]
fn a_tampered_file_is_exit_1_naming_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut v: Value = serde_json::from_slice(&std::fs::read(bundle()).unwrap()).unwrap();
    v["nodes"][3]["allowed"] = json!(!v["nodes"][3]["allowed"].as_bool().unwrap());
    let t = dir.path().join("t.json");
    std::fs::write(&t, serde_json::to_vec(&v).unwrap()).unwrap();
    let o = run(&["verify", "--allow-simulated", "--json"], &[&t]);
    assert_eq!(code(&o), 1);
    let v = stdout_json(&o);
    assert_eq!(v["outcome"]["status"], "tampered", "{v}");
    assert_eq!(v["outcome"]["node"], 3, "{v}");
    assert!(v.get("as_read_unverified").is_some(), "{v}");
    // Tampered is worse than complete among several files.
    assert_eq!(
        code(&run(&["verify", "--allow-simulated"], &[&bundle(), &t])),
        1
    );
}

#[test]
fn bad_files_are_clear_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, b"{\"format\": \"knox-evidence/v2\", \"nodes\": [").unwrap();
    let missing = dir.path().join("missing.json");
    for f in [&garbage, &missing, &dir.path().to_path_buf()] {
        let o = run(&["verify", "--allow-simulated"], &[f]);
        assert_eq!(code(&o), 4, "{}", f.display());
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.starts_with("UNREADABLE: "), "{text}");
        let o = run(&["verify", "--allow-simulated", "--json"], &[f]);
        assert_eq!(code(&o), 4);
        let v = stdout_json(&o);
        assert_eq!(v["error"]["kind"], "unreadable_evidence", "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(&f.display().to_string()), "{v}");
    }
    // Usage: no FILE, two standard inputs, an unknown option — 64, JSON under --json.
    let o = run(&["verify", "--json"], &[]);
    assert_eq!(code(&o), 64);
    assert_error(&o, "usage");
    let o = run(&["verify", "--json", "-", "-"], &[]);
    assert_eq!(code(&o), 64);
    assert_error(&o, "usage");
    assert_eq!(code(&run(&["verify", "--frobnicate"], &[&bundle()])), 64);
    // A policy that is not TOML: bad input (65), naming the file.
    let o = run(
        &["verify", "--allow-simulated", "--json", "--policy"],
        &[&garbage, &bundle()],
    );
    assert_eq!(code(&o), 65);
    assert_error(&o, "bad_input");
    // A policy set that is not a directory: missing input (66).
    let o = run(
        &["regulations", "show", "--json", "--policy-set"],
        &[&missing],
    );
    assert_eq!(code(&o), 66);
    assert_error(&o, "missing_input");
}

#[test]
fn inclusion_proofs_are_made_and_checked() {
    let o = run(&["verify", "--allow-simulated", "--json"], &[&bundle()]);
    let root = stdout_json(&o)["structure_root"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["prove", "node", "--node", "5"], &[&bundle()]);
    assert_eq!(code(&o), 0);
    let proof = dir.path().join("proof.json");
    std::fs::write(&proof, &o.stdout).unwrap();
    let o = run(&["prove", "check", "--json", "--root", &root], &[&proof]);
    assert_eq!(code(&o), 0);
    let v = stdout_json(&o);
    assert_eq!(v["included"], true, "{v}");
    assert_eq!(v["node"], 5, "{v}");
    // Another root: not included (1).
    let mut other = root.into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).unwrap();
    let o = run(&["prove", "check", "--json", "--root", &other], &[&proof]);
    assert_eq!(code(&o), 1);
    assert_eq!(stdout_json(&o)["included"], false);
    // A node the bundle does not have, a root that is not hex, a proof that is not one.
    let o = run(
        &["prove", "node", "--json", "--node", "100000"],
        &[&bundle()],
    );
    assert_eq!(code(&o), 64);
    assert_error(&o, "usage");
    let o = run(&["prove", "check", "--json", "--root", "xyz"], &[&proof]);
    assert_eq!(code(&o), 64);
    let o = run(
        &["prove", "check", "--json", "--root", &other],
        &[&bundle()],
    );
    assert_eq!(code(&o), 65);
    assert_error(&o, "bad_input");
}

#[test]
fn a_receipt_is_signed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("reg");
    let o = run(&["keygen", "--out"], &[&prefix]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    // Never overwritten.
    assert_eq!(code(&run(&["keygen", "--out"], &[&prefix])), 73);
    let key = dir.path().join("reg.key");
    let receipt = dir.path().join("receipt.json");
    let o = run(
        &["verify", "--allow-simulated", "--key"],
        &[&key, Path::new("--receipt"), &receipt, &bundle()],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["receipts", "--json"], &[&bundle(), &receipt]);
    assert_eq!(code(&o), 0);
    let v = stdout_json(&o);
    assert_eq!(v["receipts"][0]["valid"], true, "{v}");
    assert_eq!(v["receipts"][0]["result"], "complete", "{v}");
    // Against another bundle: invalid (1).
    let o = run(
        &["receipts", "--json"],
        &[&fixture("topologies/st-sa.json"), &receipt],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(stdout_json(&o)["receipts"][0]["valid"], false);
    // A key file that is not one: bad input (65).
    let o = run(
        &["verify", "--allow-simulated", "--json", "--key"],
        &[
            &bundle(),
            Path::new("--receipt"),
            &dir.path().join("r2.json"),
            &bundle(),
        ],
    );
    assert_eq!(code(&o), 65);
    assert_error(&o, "bad_input");
}

#[test]
fn hardware_evidence_and_regulations() {
    let o = run(&["regulations", "show", "--json"], &[]);
    assert_eq!(code(&o), 0);
    let v = stdout_json(&o);
    assert!(v["hash"].as_str().is_some(), "{v}");
    assert!(!v["regulations"].as_array().unwrap().is_empty(), "{v}");
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not a quote").unwrap();
    // Collateral that is not dcap-qvl JSON: bad input (65).
    let o = run(
        &["quote", "verify", "--json", "--quote"],
        &[&junk, Path::new("--collateral"), &junk],
    );
    assert_eq!(code(&o), 65);
    assert_error(&o, "bad_input");
    // A quote that does not exist: missing input (66).
    let o = run(
        &["quote", "verify", "--json", "--quote"],
        &[&dir.path().join("nope"), Path::new("--collateral"), &junk],
    );
    assert_eq!(code(&o), 66);
    assert_error(&o, "missing_input");
    // GPU evidence that is neither serialized evidence nor (with --certs) verifiable.
    let o = run(&["gpu", "verify", "--json", "--evidence"], &[&junk]);
    assert_eq!(code(&o), 65);
    assert_error(&o, "bad_input");
    let o = run(
        &["gpu", "verify", "--json", "--evidence"],
        &[&junk, Path::new("--certs"), &junk],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(stdout_json(&o)[0]["result"], "rejected");
}
