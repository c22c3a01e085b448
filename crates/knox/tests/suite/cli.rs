//! The `knox` binary, black-box.

use super::support::{knox, read_json, succeeds};

#[test]
fn demo_shows_blocks_verifies_and_catches_a_tampered_copy() {
    let dir = tempfile::tempdir().unwrap();
    let out = knox()
        .args(["demo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("BLOCKED"), "{text}");
    assert!(
        text.contains("verify") && text.contains("complete"),
        "{text}"
    );
    assert!(text.contains("TAMPERED"), "{text}");
}

#[test]
fn run_then_verify_with_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let text = succeeds(
        knox()
            .args(["run", "--workload", "mt-ma:2:2", "--flows", "4", "--out"])
            .arg(dir.path()),
    );
    assert!(text.contains("verified: 2/2 complete"), "{text}");
    let summary = read_json(&dir.path().join("summary.json"));
    assert_eq!(summary["injected"]["allowed"], 0);
    let bundle = dir.path().join("mt-ma-2-2-injected-0000.json");

    let ok = knox()
        .arg("verify")
        .arg(&bundle)
        .arg("--allow-simulated")
        .output()
        .unwrap();
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    let refused = knox().arg("verify").arg(&bundle).output().unwrap();
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("REFUSED"));

    // Change one byte inside one node: the verifier names that node.
    let text = std::fs::read_to_string(&bundle).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let reason = nodes.iter().find(|n| n["kind"] == "blocked").unwrap()["block_reason"]
        .as_str()
        .unwrap();
    // The first node carrying that text is the blocked call's tool_call.
    let idx = nodes
        .iter()
        .position(|n| n["block_reason"] == reason)
        .unwrap();
    let pos = text.find(reason).unwrap();
    let mut bytes = text.into_bytes();
    bytes[pos] = bytes[pos].to_ascii_uppercase();
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, &bytes).unwrap();
    let bad = knox()
        .arg("verify")
        .arg(&tampered)
        .args(["--allow-simulated", "--json"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(report["outcome"]["status"], "tampered");
    assert_eq!(report["outcome"]["node"], idx as u64);

    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, b"{\"format\": 1").unwrap();
    assert_eq!(
        knox()
            .arg("verify")
            .arg(&garbage)
            .output()
            .unwrap()
            .status
            .code(),
        Some(4)
    );
    assert_eq!(
        knox()
            .args(["run", "--workload", "mt-ma:2:9", "--out", "x"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(64)
    );
}

#[test]
fn one_node_is_proven_and_a_changed_node_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let out = knox()
        .args(["run", "--workload", "st-sa", "--flows", "1", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let bundle = dir.path().join("st-sa-injected-0000.json");
    let root = serde_json::from_slice::<serde_json::Value>(&std::fs::read(&bundle).unwrap())
        .unwrap()["summary"]["structure_root"]
        .as_str()
        .unwrap()
        .to_string();
    let proof = knox()
        .args(["prove", "node"])
        .arg(&bundle)
        .args(["--node", "5"])
        .output()
        .unwrap();
    assert!(proof.status.success());
    let path = dir.path().join("proof.json");
    std::fs::write(&path, &proof.stdout).unwrap();
    assert_eq!(
        knox()
            .args(["prove", "check"])
            .arg(&path)
            .args(["--root", &root])
            .status()
            .unwrap()
            .code(),
        Some(0)
    );
    let mut p: serde_json::Value = serde_json::from_slice(&proof.stdout).unwrap();
    p["node"]["agent"] = serde_json::json!("someone-else");
    std::fs::write(&path, serde_json::to_vec(&p).unwrap()).unwrap();
    assert_eq!(
        knox()
            .args(["prove", "check"])
            .arg(&path)
            .args(["--root", &root])
            .status()
            .unwrap()
            .code(),
        Some(1)
    );
}

/// The engine's and the model registry's typed errors keep their exit codes through
/// the CLI: too few flows and an undefined regulation are usage errors (64), a model
/// not pulled is unavailable (69) and names the command that pulls it.
#[test]
fn library_errors_keep_their_exit_codes() {
    let run = |args: &[&str]| {
        let dir = tempfile::tempdir().unwrap();
        let o = knox()
            .arg("run")
            .args(args)
            .arg("--out")
            .arg(dir.path().join("out"))
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--workload", "mt-sa-seq:4", "--flows", "2"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("needs at least 4 flows, got 2: raise --flows"),
        "{err}"
    );

    let (code, err) = run(&["--workload", "st-sa", "--regulations", "CCPA"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(
        err.contains("`CCPA` is not defined by the policy set"),
        "{err}"
    );

    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().display().to_string();
    let (code, err) = run(&[
        "--workload",
        "st-sa",
        "--planner",
        "local:smollm2",
        "--cache-dir",
        &cache_dir,
    ]);
    assert_eq!(code, Some(69), "{err}");
    assert!(
        err.contains(&format!(
            "run `knox model pull smollm2 --cache-dir {cache_dir}`"
        )),
        "{err}"
    );
}
