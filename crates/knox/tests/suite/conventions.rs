//! CLI conventions, black-box: relative paths, exit codes, `--json` and its error
//! object, error messages, `verify` on stdin and several files, the demo's folder and
//! its tampered copy, `--version`, completions and man pages, the corpus probe.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use super::support::{knox, read_json, sandbox_unavailable, succeeds};

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap()
}

/// Runs `knox` in `dir` and returns its output.
fn knox_in(dir: &Path, args: &[&str]) -> Output {
    knox().current_dir(dir).args(args).output().unwrap()
}

/// A run of one st-sa bundle into `dir/out`; returns the bundle's path.
fn one_bundle(dir: &Path) -> std::path::PathBuf {
    let out = knox_in(
        dir,
        &["run", "--workload", "st-sa", "--flows", "1", "--out", "out"],
    );
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    dir.join("out/st-sa-injected-0000.json")
}

#[test]
fn relative_out_journal_and_stop_file_resolve_against_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = knox_in(
        d,
        &[
            "run",
            "--workload",
            "mt-sa-seq:2",
            "--flows",
            "2",
            "--out",
            "out/rel",
            "--journal",
            "--stop-file",
            "stop-now",
        ],
    );
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let summary = read_json(&d.join("out/rel/summary.json"));
    assert_eq!(summary["interrupts"], 0, "no stop file yet");
    let journals: Vec<_> = std::fs::read_dir(d.join("out/rel"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".journal.jsonl"))
        .collect();
    assert_eq!(journals.len(), 1, "the journal is in the relative --out");
    // The printed folder is absolute.
    assert!(
        stdout(&out).contains(&d.join("out/rel").display().to_string()),
        "{}",
        stdout(&out)
    );

    // A relative stop file that exists stops the run.
    std::fs::write(d.join("stop-now"), b"").unwrap();
    let out = knox_in(
        d,
        &[
            "run",
            "--workload",
            "mt-sa-seq:2",
            "--flows",
            "2",
            "--out",
            "out/stopped",
            "--stop-file",
            "stop-now",
        ],
    );
    assert!(code(&out) <= 1, "{}{}", stdout(&out), stderr(&out));
    let summary = read_json(&d.join("out/stopped/summary.json"));
    assert!(
        summary["interrupts"].as_u64().unwrap() > 0,
        "the relative --stop-file was not seen: {summary}"
    );

    // The README's confined-tools example, with its relative --out.
    let out = knox_in(
        d,
        &[
            "run",
            "--suite",
            "terminal",
            "--tools",
            "confined",
            "--workload",
            "mt-sa-seq:4",
            "--out",
            "out/terminal",
        ],
    );
    if sandbox_unavailable(&out) {
        return;
    }
    assert!(!stderr(&out).contains("not absolute"), "{}", stderr(&out));
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(d.join("out/terminal/summary.json").is_file());
}

#[test]
fn every_command_documents_its_exit_codes_in_help() {
    for cmd in [
        &["demo"][..],
        &["run"],
        &["verify"],
        &["bench"],
        &["eval"],
        &["keygen"],
        &["receipts"],
        &["regulations", "show"],
        &["regulations", "analyze"],
        &["quote", "verify"],
        &["gpu", "verify"],
        &["prove", "node"],
        &["prove", "check"],
        &["corpus", "syscalls"],
        &["model"],
        &["completions"],
        &["man"],
    ] {
        let out = knox().args(cmd).arg("--help").output().unwrap();
        let text = stdout(&out);
        assert_eq!(code(&out), 0, "{cmd:?}");
        assert!(
            text.contains("Exit codes:") && text.contains("64  usage") && text.contains("  0 "),
            "{cmd:?} --help: {text}"
        );
    }
}

#[test]
fn failures_exit_with_their_kind_not_with_verifys_unreadable_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--workload", "st-sa", "--flows", "1"];
        args.extend_from_slice(extra);
        knox_in(d, &args)
    };
    // 64: a wrong option value found after parsing.
    assert_eq!(code(&run(&["--out", "o", "--nonce", "zz"])), 64);
    // 73: the output directory cannot be created (its parent is a file).
    std::fs::write(d.join("file"), b"x").unwrap();
    let out = run(&["--out", "file/sub"]);
    assert_eq!(code(&out), 73, "{}", stderr(&out));
    assert!(stderr(&out).contains("file/sub"), "{}", stderr(&out));
    // 66: a missing regulation context; 65: a bad one.
    let out = run(&[
        "--out",
        "o",
        "--regulations",
        "GDPR",
        "--regulation-context",
        "missing.toml",
    ]);
    assert_eq!(code(&out), 66, "{}", stderr(&out));
    std::fs::write(d.join("bad.toml"), b"this is = = not toml").unwrap();
    let out = run(&[
        "--out",
        "o",
        "--regulations",
        "GDPR",
        "--regulation-context",
        "bad.toml",
    ]);
    assert_eq!(code(&out), 65, "{}", stderr(&out));
    assert!(stderr(&out).contains("bad.toml"), "{}", stderr(&out));
    // 69: a model that is not there.
    let out = run(&["--out", "o", "--executor", "local:/nonexistent/model.gguf"]);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    // 73: an existing key is not overwritten.
    assert_eq!(code(&knox_in(d, &["keygen", "--out", "reg"])), 0);
    let out = knox_in(d, &["keygen", "--out", "reg"]);
    assert_eq!(code(&out), 73, "{}", stderr(&out));
    // verify keeps 4 for a file that is not evidence, missing or a directory.
    assert_eq!(code(&knox_in(d, &["verify", "bad.toml"])), 4);
    assert_eq!(code(&knox_in(d, &["verify", "nope.json"])), 4);
    assert_eq!(code(&knox_in(d, &["verify", "."])), 4);
    // 66 for a missing input of another command.
    assert_eq!(code(&knox_in(d, &["receipts", "nope.json", "r.json"])), 66);
}

#[test]
fn error_messages_name_the_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("r1")).unwrap();
    for args in [
        &["verify", "r1"][..],
        &["receipts", "r1", "r2"],
        &["prove", "node", "r1", "--node", "0"],
        &["regulations", "analyze", "r1"],
    ] {
        let out = knox_in(d, args);
        let err = stderr(&out);
        assert_ne!(code(&out), 0, "{args:?}");
        assert_eq!(err.matches("r1").count(), 1, "{args:?}: {err}");
        assert!(err.contains("is a directory"), "{args:?}: {err}");
        assert!(!err.contains("reading `"), "{args:?}: {err}");
    }
}

#[test]
fn json_on_every_reporting_command_and_a_json_error_object_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = knox_in(
        d,
        &[
            "run",
            "--workload",
            "st-sa",
            "--flows",
            "1",
            "--out",
            "r",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bundles"], 1);
    assert_eq!(v["out"], d.join("r").display().to_string());
    let bundle = d.join("r/st-sa-injected-0000.json");

    let out = knox_in(
        d,
        &["bench", "--bundles", "1", "--workload", "st-sa", "--json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["workload"], "st-sa");
    assert!(v[0]["full_verify_mnodes_per_s"].as_f64().unwrap() > 0.0);
    // The two signature checks a full verify pays per bundle, timed alone, and the rate
    // they alone would allow.
    assert!(
        v[0]["verify_signatures_us"].as_f64().unwrap() > 0.0,
        "{}",
        v[0]
    );
    assert!(
        v[0]["signatures_bound_mnodes_per_s"].as_f64().unwrap() > 0.0,
        "{}",
        v[0]
    );
    // Stored evidence per action: the files `knox run` writes (the same first flow, so
    // within a few bytes of this run's file), and less once gzipped.
    let stored = v[0]["stored_bytes_per_action"].as_f64().unwrap();
    let gzipped = v[0]["gzip_bytes_per_action"].as_f64().unwrap();
    assert!(0.0 < gzipped && gzipped < stored, "{}", v[0]);
    // The compact encoding of the same bundles: under half the JSON's bytes.
    let compact = v[0]["compact_bytes_per_action"].as_f64().unwrap();
    assert!(0.0 < compact && compact * 2.0 < stored, "{}", v[0]);
    // A store of one bundle: its file and its one part, the guards it holds no more.
    let store = v[0]["store_bytes_per_action"].as_f64().unwrap();
    assert!(0.0 < store && store * 2.0 < stored, "{}", v[0]);
    let written = std::fs::read(&bundle).unwrap();
    let calls = read_json(&bundle)["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "tool_call")
        .count();
    let per_action = written.len() as f64 / calls as f64;
    assert!(
        (stored - per_action).abs() / per_action < 0.05,
        "bench {stored} B/action, knox run's file {per_action} B/action"
    );

    assert_eq!(code(&knox_in(d, &["keygen", "--out", "reg"])), 0);
    let out = knox_in(
        d,
        &[
            "verify",
            "r/st-sa-injected-0000.json",
            "--allow-simulated",
            "--key",
            "reg.key",
            "--receipt",
            "receipt.json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = knox_in(
        d,
        &[
            "receipts",
            "r/st-sa-injected-0000.json",
            "receipt.json",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["receipts"][0]["valid"], true);

    let proof = knox_in(
        d,
        &[
            "prove",
            "node",
            "r/st-sa-injected-0000.json",
            "--node",
            "3",
            "--json",
        ],
    );
    assert_eq!(code(&proof), 0);
    std::fs::write(d.join("proof.json"), &proof.stdout).unwrap();
    let root = read_json(&bundle)["summary"]["structure_root"]
        .as_str()
        .unwrap()
        .to_string();
    let out = knox_in(
        d,
        &["prove", "check", "proof.json", "--root", &root, "--json"],
    );
    assert_eq!(code(&out), 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["included"], true);
    assert_eq!(v["node"], 3);

    // Failures under --json: one error object on stdout, the exit code inside it.
    std::fs::write(d.join("file"), b"x").unwrap();
    for (args, want) in [
        (
            &["run", "--workload", "st-sa", "--out", "file/sub", "--json"][..],
            73,
        ),
        (
            &["prove", "check", "nope.json", "--root", &root, "--json"],
            66,
        ),
        (&["run", "--workload", "st-sa", "--json"], 64),
        (&["receipts", "proof.json", "--json"], 64),
    ] {
        let out = knox_in(d, args);
        assert_eq!(code(&out), want, "{args:?}: {}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&out)));
        assert_eq!(v["error"]["code"], want, "{args:?}: {v}");
        assert!(v["error"]["kind"].is_string(), "{v}");
        assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{v}");
    }
}

#[test]
fn verify_reads_stdin_and_several_files_and_gives_the_root_prove_needs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bundle = one_bundle(d);
    let bytes = std::fs::read(&bundle).unwrap();

    // `-`: standard input.
    let mut child = knox()
        .current_dir(d)
        .args(["verify", "-", "--allow-simulated"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("COMPLETE"), "{}", stdout(&out));

    // --json: the structure root the summary signs, which `prove check` takes.
    let out = knox_in(
        d,
        &[
            "verify",
            "out/st-sa-injected-0000.json",
            "--allow-simulated",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = v["structure_root"].as_str().unwrap().to_string();
    assert_eq!(root, read_json(&bundle)["summary"]["structure_root"]);
    let proof = knox_in(
        d,
        &[
            "prove",
            "node",
            "out/st-sa-injected-0000.json",
            "--node",
            "2",
        ],
    );
    std::fs::write(d.join("proof.json"), &proof.stdout).unwrap();
    assert_eq!(
        code(&knox_in(
            d,
            &["prove", "check", "proof.json", "--root", &root]
        )),
        0
    );

    // Several files: one report each, the exit code of the worst.
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["nodes"][2]["agent"] = serde_json::json!("someone-else");
    std::fs::write(d.join("tampered.json"), serde_json::to_vec(&v).unwrap()).unwrap();
    std::fs::write(d.join("garbage.json"), b"{").unwrap();
    let good = "out/st-sa-injected-0000.json";
    let out = knox_in(d, &["verify", good, "tampered.json", "--allow-simulated"]);
    assert_eq!(code(&out), 1);
    let text = stdout(&out);
    assert!(
        text.contains("== ") && text.contains("COMPLETE") && text.contains("TAMPERED"),
        "{text}"
    );
    assert_eq!(
        code(&knox_in(
            d,
            &["verify", good, "garbage.json", "--allow-simulated"]
        )),
        4
    );
    assert_eq!(code(&knox_in(d, &["verify", good, good])), 3);
    assert_eq!(
        code(&knox_in(
            d,
            &[
                "verify",
                "garbage.json",
                "tampered.json",
                "--allow-simulated"
            ]
        )),
        1,
        "tampered is worse than unreadable"
    );
    let out = knox_in(
        d,
        &[
            "verify",
            good,
            "tampered.json",
            "garbage.json",
            "--allow-simulated",
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = v.as_array().unwrap();
    assert_eq!(reports.len(), 3);
    assert_eq!(reports[0]["outcome"]["status"], "complete");
    assert_eq!(reports[0]["structure_root"], root.as_str());
    assert_eq!(reports[1]["outcome"]["status"], "tampered");
    assert!(reports[1]["structure_root"].is_null());
    assert!(reports[1].get("blocked").is_none(), "{}", reports[1]);
    assert_eq!(reports[2]["error"]["code"], 4);
    assert!(
        reports[2]["file"]
            .as_str()
            .unwrap()
            .ends_with("garbage.json")
    );

    // --jobs: the same reports in the order the files are named, however many threads
    // verify them and whichever finishes first (the tampered file, the garbage and the
    // good one, interleaved over more files than threads and windows).
    let files = [
        "garbage.json",
        good,
        "tampered.json",
        good,
        "garbage.json",
        "tampered.json",
        good,
    ];
    let mut one = vec!["verify", "--allow-simulated", "--json"];
    one.extend(files);
    let serial = knox_in(d, &one);
    assert_eq!(code(&serial), 1);
    for jobs in ["2", "3", "0"] {
        let mut args = one.clone();
        args.extend(["--jobs", jobs]);
        let out = knox_in(d, &args);
        assert_eq!(code(&out), 1, "--jobs {jobs}");
        assert_eq!(stdout(&out), stdout(&serial), "--jobs {jobs}");
    }
    let statuses: Vec<String> = serde_json::from_slice::<serde_json::Value>(&serial.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|r| match r["outcome"]["status"].as_str() {
            Some(s) => s.to_string(),
            None => format!("error {}", r["error"]["code"]),
        })
        .collect();
    assert_eq!(
        statuses,
        [
            "error 4", "complete", "tampered", "complete", "error 4", "tampered", "complete"
        ]
    );
}

#[test]
fn demo_writes_to_the_xdg_data_folder_and_its_tampered_copy_shows_what_was_read() {
    let cwd = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = knox()
        .current_dir(cwd.path())
        .env("XDG_DATA_HOME", data.path())
        .arg("demo")
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "{text}{}", stderr(&out));
    let folder = data.path().join("knox/demo");
    assert!(text.contains(&folder.display().to_string()), "{text}");
    assert!(folder.join("injected-tampered.json").is_file());
    assert_eq!(
        std::fs::read_dir(cwd.path()).unwrap().count(),
        0,
        "the demo wrote into the current directory"
    );

    // The tampered copy: no verified counts, the counts as read.
    let tampered = read_json(&folder.join("injected-tampered.json"));
    let blocked = tampered["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "blocked")
        .count();
    assert!(blocked > 0);
    let after = text.split("flipped the `allowed` flag").nth(1).unwrap();
    assert!(after.contains("TAMPERED"), "{after}");
    assert!(!after.contains("0 blocked"), "{after}");
    assert!(
        after.contains(&format!("{blocked} blocked nodes")),
        "{after}"
    );

    let out = knox()
        .current_dir(cwd.path())
        .env("XDG_DATA_HOME", data.path())
        .args(["demo", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    assert_eq!(v["runs"][0]["verified"], "complete");
    let report = &v["tampered_copy"]["report"];
    assert_eq!(report["outcome"]["status"], "tampered");
    assert!(report.get("blocked").is_none(), "{report}");
    assert_eq!(report["as_read_unverified"]["blocked_nodes"], blocked);
}

#[test]
fn version_names_the_commit() {
    let text = succeeds(knox().arg("--version"));
    // This crate is `crates/knox` of the repository.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .unwrap();
    let head = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_string(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
        );
    assert!(
        text.contains(&format!("(commit {head})")),
        "{text} should name {head}"
    );
}

#[test]
fn completions_and_man_pages_are_generated_from_the_command_line() {
    let bash = succeeds(knox().args(["completions", "bash"]));
    assert!(
        bash.contains("_knox()") && bash.contains("verify"),
        "{bash}"
    );
    let zsh = succeeds(knox().args(["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef knox"), "{zsh}");
    let fish = succeeds(knox().args(["completions", "fish"]));
    assert!(fish.contains("complete -c knox"), "{fish}");
    assert_eq!(
        code(&knox().args(["completions", "tcsh"]).output().unwrap()),
        64
    );

    let man = succeeds(knox().arg("man"));
    assert!(
        man.contains(".TH knox 1") && man.contains("verify"),
        "{man}"
    );
    let dir = tempfile::tempdir().unwrap();
    succeeds(knox().args(["man", "--out"]).arg(dir.path().join("man")));
    for page in ["knox.1", "knox-verify.1", "knox-prove-check.1"] {
        let text = std::fs::read_to_string(dir.path().join("man").join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}");
    }
}

#[test]
fn corpus_finds_or_builds_its_probe() {
    let out = knox()
        .args(["corpus", "syscalls", "--probe", "/nonexistent/knox-probe"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 66);
    assert!(stderr(&out).contains("/nonexistent/knox-probe"));

    // No --probe: beside the binary, built there first from this source tree if need be.
    let out = knox()
        .args([
            "corpus",
            "syscalls",
            "--only",
            "read-canary-openat2",
            "--json",
        ])
        .output()
        .unwrap();
    if sandbox_unavailable(&out) {
        return;
    }
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(
        Path::new(env!("CARGO_BIN_EXE_knox"))
            .with_file_name("knox-probe")
            .is_file()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["cases"], 1);
    // The progress bar is drawn only on a terminal: nothing of it when piped.
    assert!(
        !stderr(&out).contains("corpus: each case"),
        "{}",
        stderr(&out)
    );
}
