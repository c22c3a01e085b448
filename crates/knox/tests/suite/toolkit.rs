//! A user's own tools, prompt and plan from the command line: `knox toolkit` checks and
//! imports manifests; `knox run --manifest` runs through the engine into a bundle that
//! carries its manifest, so `knox verify BUNDLE` needs no other file — and refuses an
//! embedded manifest that is not the one the APM names.

#![expect(clippy::unwrap_used, reason = "tests")]

use std::path::Path;

use super::support::knox;

/// A user manifest: one remote bank server with a read and a write tool.
pub(super) use knox_testkit::bank::TOOLKIT as BANK;

pub(super) fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A plan over [`BANK`]: the balance read, then `amount` sent to DE001.
pub(super) fn plan(amount: u32) -> String {
    serde_json::json!({"tasks": [{"calls": [
        {"tool": "bank.get_balance", "params": {"account": "main"}},
        {"tool": "bank.send_money", "params": {"to": "DE001", "amount": amount, "memo": "Thanks for dinner"}}]}]})
    .to_string()
}

/// In `d`: [`BANK`] as `bank.toml` and canned answers for its two tools; the
/// `knox run --manifest … --responses …` command over them, the rest of its arguments
/// to add.
fn bank_run(d: &Path) -> std::process::Command {
    let manifest = write(d, "bank.toml", BANK);
    let responses = write(
        d,
        "responses.json",
        r#"{"bank.get_balance": {"balance": 120}, "bank.send_money": {"ok": true}}"#,
    );
    let mut c = knox();
    c.arg("run")
        .arg("--manifest")
        .arg(manifest)
        .arg("--responses")
        .arg(responses);
    c
}

#[test]
fn a_user_manifest_prompt_and_plan_run_into_a_self_contained_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let manifest = write(d, "bank.toml", BANK);
    let check = knox()
        .arg("toolkit")
        .arg("check")
        .arg(&manifest)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{text}");
    assert!(text.contains("bank.send_money (write"), "{text}");
    assert!(
        text.contains("prose (the executor may compose): memo"),
        "{text}"
    );

    let out = d.join("out");
    let run = |plan_file: &Path, out: &Path| {
        bank_run(d)
            .args(["--prompt", "Check my main balance and send 20 to DE001"])
            .arg("--plan")
            .arg(plan_file)
            .arg("--out")
            .arg(out)
            .arg("--json")
            .output()
            .unwrap()
    };
    let good = write(d, "plan.json", &plan(20));
    let o = run(&good, &out);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["runs"][0]["executed"], 2, "{summary}");
    let bundle = super::support::run_file(&out, "run", 0, ".json");

    // Verified with no other file: the manifest travels in the bundle.
    let verify = |b: &Path| {
        knox()
            .arg("verify")
            .arg(b)
            .arg("--allow-simulated")
            .output()
            .unwrap()
    };
    let v = verify(&bundle);
    let report = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(0), "{report}");
    assert!(report.contains("taken from the bundle"), "{report}");

    // The embedded manifest swapped for another (a sink dropped): refused, naming both.
    let mut b: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    let carried = b["manifest"].as_str().unwrap().to_string();
    let swapped = carried.replace(r#","sinks":["to"]"#, "");
    assert_ne!(carried, swapped);
    b["manifest"] = serde_json::Value::String(swapped);
    let forged = write(d, "forged.json", &b.to_string());
    let v = verify(&forged);
    let report = String::from_utf8_lossy(&v.stdout);
    // Bytes no signature binds were changed: tampered (#35), not merely unusable.
    assert_eq!(v.status.code(), Some(1), "{report}");
    assert!(
        report.contains("but the attested APM was derived from"),
        "{report}"
    );
    // Handed the manifest, a verifier trusts it without the bundle's copy.
    b.as_object_mut().unwrap().remove("manifest");
    let bare = write(d, "bare.json", &b.to_string());
    assert_eq!(verify(&bare).status.code(), Some(3), "refused without it");
    let v = knox()
        .arg("verify")
        .arg(&bare)
        .arg("--allow-simulated")
        .arg("--manifest")
        .arg(&manifest)
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );

    // A plan outside the input schema (amount above its maximum) is the user's to fix.
    let bad = write(d, "bad.json", &plan(500));
    let o = run(&bad, &d.join("out2"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(64), "{err}");
    assert!(err.contains("/amount") && err.contains("maximum"), "{err}");

    // #35: `run --force` into a folder that holds its own plan under the name of one of
    // its outputs (`summary.json`; bundles never collide, #34) exits 73 and leaves the
    // plan as it was. The folder's evidence moved away first: `--force` refuses it.
    let old = super::support::run_file(&out, "run", 0, ".json");
    std::fs::rename(&old, d.join("moved.json")).unwrap();
    let inside = out.join("summary.json");
    std::fs::write(&inside, plan(20)).unwrap();
    let o = bank_run(d)
        .args(["--prompt", "Check my main balance and send 20 to DE001"])
        .arg("--plan")
        .arg(&inside)
        .arg("--out")
        .arg(&out)
        .arg("--force")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(73), "{err}");
    assert!(err.contains("is an input of this command"), "{err}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), plan(20));
}

#[test]
fn openai_functions_import_as_a_skeleton_marked_for_review() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let functions = write(
        d,
        "functions.json",
        r#"[{"type": "function", "function": {"name": "send_money", "description": "Send",
            "parameters": {"type": "object", "properties": {"to": {"type": "string"},
                "memo": {"type": ["string", "null"], "default": null, "enum": ["rent", null]}},
                "required": ["to"]}}}]"#,
    );
    // #34: TOML has no `null`: the schema is written in an equivalent form.
    let toml = d.join("bank.toml");
    let o = knox()
        .args(["toolkit", "import", "--server", "bank", "--openai"])
        .arg(&functions)
        .arg("-o")
        .arg(&toml)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = d.join("bank.json");
    let o = knox()
        .args(["toolkit", "import", "--server", "bank", "--openai"])
        .arg(&functions)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let check = knox()
        .args(["toolkit", "check", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(check.status.code(), Some(1), "guesses pending review: {v}");
    assert_eq!(v["tools"][0]["tool"], "bank.send_money");
    // No hints: MCP's defaults (open world), so the importer guesses a disclosure.
    assert_eq!(v["tools"][0]["effect"], "disclose");
    assert!(v["pending_review"].as_u64().unwrap() >= 4);
}

/// #35: a stop signal ends a `--manifest --tasks` run: the run it arrives in is
/// interrupted (with evidence), no later task starts, and `summary.json` names the
/// signal and how many runs were not started.
#[test]
fn a_stop_signal_ends_a_tasks_run_and_the_summary_names_it() {
    use std::time::{Duration, Instant};
    for (sig, name) in [("USR1", "SIGUSR1"), ("TERM", "SIGTERM")] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let line = serde_json::json!({
            "prompt": "Check my main balance and send 20 to DE001",
            "plan": serde_json::from_str::<serde_json::Value>(&plan(20)).unwrap(),
        })
        .to_string();
        let tasks = write(d, "tasks.jsonl", &format!("{line}\n").repeat(400));
        let out = d.join("out");
        let mut child = bank_run(d)
            .arg("--tasks")
            .arg(&tasks)
            .arg("--out")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The output folder exists once the handlers are installed and work begins.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !out.exists() && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(2));
        }
        let sent = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{sig}");
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "{name}: still running");
            std::thread::sleep(Duration::from_millis(10));
        }
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{name}: {err}");
        let summary: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        let runs = summary["runs"].as_array().unwrap().len() as u64;
        assert!(runs < 400, "{name}: every task ran: {summary}");
        assert_eq!(
            summary["not_started"].as_u64(),
            Some(400 - runs),
            "{summary}"
        );
        assert_eq!(summary["stopped_by_signal"], name, "{summary}");
    }
}

/// #35: `--checkpoint-every-nodes` applies to a `--manifest` run (it was refused), and
/// the cadence is the one its journal follows and its APM attestation signs.
#[test]
fn the_checkpoint_cadence_applies_to_manifest_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let plan_file = write(d, "plan.json", &plan(20));
    let out = d.join("out");
    let o = bank_run(d)
        .args(["--prompt", "Check my main balance and send 20 to DE001"])
        .arg("--plan")
        .arg(&plan_file)
        .args(["--journal", "--checkpoint-every-nodes", "1", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let journal =
        std::fs::read_to_string(super::support::run_file(&out, "run", 0, ".journal.jsonl"))
            .unwrap();
    let mut lines = journal.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        header["apm_attestation"]["statement"]["checkpoints"]["every_nodes"], 1,
        "{header}"
    );
    let (mut nodes, mut checkpoints) = (0, 0);
    for l in lines {
        if l.starts_with("{\"checkpoint\"") {
            checkpoints += 1;
        } else {
            nodes += 1;
        }
    }
    assert!(nodes > 0);
    assert_eq!(checkpoints, nodes, "a checkpoint after every node");
}

/// #34: `--max-calls` bounds what a model plans, not the user's own plan: a plan of 20
/// calls runs (the default bound is 16), and the run verifies `complete`.
#[test]
fn the_users_own_plan_is_not_bounded_by_max_calls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let calls: Vec<serde_json::Value> = (0..20)
        .map(|i| serde_json::json!({"tool": "bank.get_balance", "params": {"account": format!("a{i}")}}))
        .collect();
    let plan = write(
        d,
        "long.json",
        &serde_json::json!({ "calls": calls }).to_string(),
    );
    let out = d.join("out");
    let o = bank_run(d)
        .args(["--prompt", "Read my twenty balances"])
        .arg("--plan")
        .arg(&plan)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.contains("20 proposals, 20 executed") && text.contains("verified complete"),
        "{text}"
    );
}
