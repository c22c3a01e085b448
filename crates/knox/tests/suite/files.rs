//! Files under crashes, signals, concurrency and hostile inputs (issue 16, defects 7–11),
//! on the real binary: what a killed or signalled run leaves verifies; one run at a
//! time writes into an `--out`; outputs never overwrite inputs or keys; every file
//! input is capped and never blocks.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use super::support::knox;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn run(args: &[&str]) -> Output {
    knox().args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Waits (bounded: a hang fails the test instead of blocking it) for `child` to end.
fn wait_bounded(mut child: Child, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after 120 s (blocked?)");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits (bounded) until `ready` holds, while `child` runs; false when it ended first.
fn wait_for(child: &mut Child, ready: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

fn signal(child: &Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// The evidence files (bundles and journals) in `dir`, temporary files aside.
fn evidence(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            !name.starts_with('.')
                && name != "summary.json"
                && (name.ends_with(".json") || name.ends_with(".journal.jsonl"))
        })
        .collect();
    v.sort();
    v
}

/// Every evidence file in `dir` is non-empty and verifies `complete` or `prefix`
/// (never tampered, never unreadable); returns how many there are.
fn all_verify(dir: &Path) -> usize {
    let files = evidence(dir);
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(len > 0, "{} is empty", f.display());
    }
    if files.is_empty() {
        return 0;
    }
    // One verify for all: its exit code is the worst of them.
    let out = knox()
        .args(["verify", "--allow-simulated"])
        .args(&files)
        .output()
        .unwrap();
    assert!(
        matches!(code(&out), 0 | 2),
        "evidence in {} did not verify complete or prefix: {}",
        dir.display(),
        text(&out)
    );
    files.len()
}

fn bundles_in(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                !n.starts_with('.') && n.ends_with(".json") && n != "summary.json"
            })
            .count()
    })
}

fn spawn_run(out: &Path, flows: &str) -> Child {
    knox()
        .args([
            "run",
            "--workload",
            "mt-sa-seq:2",
            "--flows",
            flows,
            "--journal",
            "--out",
            s(out),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Defect 7: a run killed with SIGKILL at several moments (as it starts, after its first
/// bundle, later) leaves only evidence that verifies complete or prefix: no empty
/// journal, no empty or cut bundle.
#[test]
fn sigkill_leaves_only_verifiable_evidence() {
    let dir = tempfile::tempdir().unwrap();
    // Kill when the folder exists, when a first journal exists, when bundles exist.
    type Moment = fn(&Path) -> bool;
    let moments: [Moment; 3] = [
        |d| d.exists(),
        |d| {
            std::fs::read_dir(d).is_ok_and(|r| {
                r.filter_map(Result::ok)
                    .any(|e| e.file_name().to_string_lossy().ends_with(".journal.jsonl"))
            })
        },
        |d| bundles_in(d) >= 2,
    ];
    for (i, ready) in moments.iter().enumerate() {
        let out = dir.path().join(format!("k{i}"));
        let mut child = spawn_run(&out, "200");
        let o = out.clone();
        wait_for(&mut child, || ready(&o));
        let _ = child.kill();
        let _ = child.wait();
        if out.exists() {
            all_verify(&out);
        }
    }
}

/// Defect 7: an output is replaced by a rename, never rewritten in place: a reader
/// holding the old file (here, a hard link to `summary.json`) still has it whole. And
/// #34: evidence is never replaced at all — `--force` into a folder holding bundles is
/// refused (73), every file there as it was.
#[test]
fn outputs_are_replaced_atomically_not_rewritten_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = |force: bool| {
        let mut a = vec!["run", "--workload", "st-sa", "--flows", "1"];
        if force {
            a.push("--force");
        }
        a
    };
    let mut a = args(false);
    a.extend(["--out", s(&out)]);
    assert_eq!(code(&run(&a)), 0);
    let bundle = out.join("st-sa-injected-0000.json");
    let before = std::fs::read(&bundle).unwrap();
    let mut a = args(true);
    a.extend(["--out", s(&out)]);
    let o = run(&a);
    assert_eq!(code(&o), 73, "{}", text(&o));
    assert!(text(&o).contains("holds evidence"), "{}", text(&o));
    assert_eq!(std::fs::read(&bundle).unwrap(), before);
    // The evidence moved away, the summary left: `--force` replaces it by a rename.
    std::fs::rename(&bundle, dir.path().join("kept.json")).unwrap();
    let summary = out.join("summary.json");
    let held = dir.path().join("held.json");
    std::fs::hard_link(&summary, &held).unwrap();
    std::fs::write(&held, b"a reader's view").unwrap();
    let o = run(&a);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert_eq!(std::fs::read(&held).unwrap(), b"a reader's view");
    assert_ne!(std::fs::read(&summary).unwrap(), b"a reader's view");
    all_verify(&out);
}

/// Defect 8: SIGUSR1, SIGTERM and SIGINT, each sent as soon as the run's output
/// folder exists (the handlers are installed before any work), stop the run with
/// attested interrupts, sealed bundles that verify and a summary, instead of killing
/// it (SIGUSR1 used to exit 138).
#[test]
fn stop_signals_at_start_stop_the_run_with_evidence() {
    for (sig, name) in [("USR1", "SIGUSR1"), ("TERM", "SIGTERM"), ("INT", "SIGINT")] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let mut child = spawn_run(&out, "200");
        let o = out.clone();
        assert!(wait_for(&mut child, || o.exists()), "the run never started");
        signal(&child, sig);
        let output = wait_bounded(child, "knox run after a stop signal");
        assert!(
            code(&output) <= 1,
            "{name}: exit {}: {}",
            code(&output),
            text(&output)
        );
        let summary = super::support::read_json(&out.join("summary.json"));
        assert!(summary["interrupts"].as_u64().unwrap() > 0, "{summary}");
        // No new bundle starts after the stop (200 flows are 100 bundles).
        assert!(summary["bundles"].as_u64().unwrap() < 100, "{summary}");
        assert_eq!(summary["stopped_by_signal"], name, "{summary}");
        assert!(all_verify(&out) > 0);
    }
}

/// Defect 9: a second run into an `--out` another process holds is refused (73), and
/// the holder's files are untouched.
#[test]
fn a_concurrent_run_into_the_same_out_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    // Another knox process's lock, held here.
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(out.join(".knox.lock"))
        .unwrap();
    lock.lock().unwrap();
    let o = run(&[
        "run",
        "--workload",
        "st-sa",
        "--flows",
        "1",
        "--force",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&o), 73, "{}", text(&o));
    assert!(
        text(&o).contains("in use by another knox process"),
        "{}",
        text(&o)
    );
    assert!(
        evidence(&out).is_empty(),
        "the refused run wrote into the folder"
    );
    drop(lock);
    // Two real runs at once into one folder: at most one succeeds, nothing is mixed.
    let both = dir.path().join("both");
    let a = spawn_run(&both, "20");
    let b = spawn_run(&both, "20");
    let (a, b) = (wait_bounded(a, "run a"), wait_bounded(b, "run b"));
    let codes = [code(&a), code(&b)];
    assert!(codes.contains(&73), "both ran: {}{}", text(&a), text(&b));
    assert!(codes.iter().all(|c| matches!(c, 0 | 73)), "{codes:?}");
    // 20 flows of mt-sa-seq:2: 10 bundles and their 10 journals.
    assert_eq!(all_verify(&both), if codes.contains(&0) { 20 } else { 0 });
}

/// Defect 9: a run into a folder holding files is refused without `--force`; with it,
/// still refused while the folder holds evidence (#34), accepted once it holds none.
#[test]
fn a_non_empty_out_needs_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let one = |force: bool| {
        let mut a = vec![
            "run",
            "--workload",
            "st-sa",
            "--flows",
            "1",
            "--out",
            s(&out),
        ];
        if force {
            a.push("--force");
        }
        run(&a)
    };
    assert_eq!(code(&one(false)), 0);
    let o = one(false);
    assert_eq!(code(&o), 73, "{}", text(&o));
    assert!(text(&o).contains("is not empty"), "{}", text(&o));
    let o = one(true);
    assert_eq!(code(&o), 73, "{}", text(&o));
    assert!(
        text(&o).contains("holds evidence (`st-sa-injected-0000.json`)"),
        "{}",
        text(&o)
    );
    std::fs::remove_file(out.join("st-sa-injected-0000.json")).unwrap();
    let o = one(true);
    assert_eq!(code(&o), 0, "{}", text(&o));
}

/// Defect 10: `verify --receipt` naming the bundle it verifies is refused (64), and the
/// bundle is untouched; so is the key.
#[test]
fn a_receipt_never_overwrites_an_input() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = run(&[
        "run",
        "--workload",
        "st-sa",
        "--flows",
        "1",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let bundle = out.join("st-sa-injected-0000.json");
    let before = std::fs::read(&bundle).unwrap();
    let prefix = dir.path().join("reg");
    assert_eq!(code(&run(&["keygen", "--out", s(&prefix)])), 0);
    let key = dir.path().join("reg.key");
    let key_before = std::fs::read(&key).unwrap();
    for target in [&bundle, &key] {
        let o = run(&[
            "verify",
            "--allow-simulated",
            s(&bundle),
            "--key",
            s(&key),
            "--receipt",
            s(target),
        ]);
        assert_eq!(code(&o), 64, "{}", text(&o));
        assert!(text(&o).contains("would overwrite"), "{}", text(&o));
    }
    assert_eq!(std::fs::read(&bundle).unwrap(), before);
    assert_eq!(std::fs::read(&key).unwrap(), key_before);
    // The same file through another name (a hard link) is refused too.
    let alias = dir.path().join("alias.json");
    std::fs::hard_link(&bundle, &alias).unwrap();
    let o = run(&[
        "verify",
        "--allow-simulated",
        s(&bundle),
        "--key",
        s(&key),
        "--receipt",
        s(&alias),
    ]);
    assert_eq!(code(&o), 64, "{}", text(&o));
    assert_eq!(std::fs::read(&bundle).unwrap(), before);
}

/// Defect 10: keygen keeps the whole prefix and refuses to overwrite either half.
#[test]
fn keygen_keeps_the_prefix_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("reg.2025");
    let o = run(&["keygen", "--out", s(&prefix)]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    assert!(dir.path().join("reg.2025.key").is_file());
    assert!(dir.path().join("reg.2025.pub").is_file());
    assert!(!dir.path().join("reg.key").exists());
    // A public half alone is not overwritten either, and no private half is made.
    let other = dir.path().join("other");
    std::fs::write(dir.path().join("other.pub"), b"someone's public key").unwrap();
    let o = run(&["keygen", "--out", s(&other)]);
    assert_eq!(code(&o), 73, "{}", text(&o));
    assert_eq!(
        std::fs::read(dir.path().join("other.pub")).unwrap(),
        b"someone's public key"
    );
    assert!(!dir.path().join("other.key").exists());
}

/// Defect 11: each of the six uncapped inputs, as a FIFO with no writer, a device
/// (`/dev/zero`), a directory and a file one byte over its cap: refused at once with a
/// message naming the file (66; 65 for too large), never blocking or growing.
#[test]
fn every_file_input_is_capped_and_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = d.join("out");
    let o = run(&[
        "run",
        "--workload",
        "st-sa",
        "--flows",
        "1",
        "--out",
        s(&out),
    ]);
    assert_eq!(code(&o), 0, "{}", text(&o));
    let bundle = out.join("st-sa-injected-0000.json");
    let fifo = d.join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let receipt = d.join("receipt.json");
    // (the option, the cap it is read under, the command with `{}` for the file)
    let cases: Vec<(&str, u64, Vec<String>)> = vec![
        (
            "--needs",
            knox::cmd::CONFIG.bytes,
            vec!["verify".into(), s(&bundle).into(), "--needs".into()],
        ),
        (
            "--policy",
            knox::cmd::CONFIG.bytes,
            vec!["verify".into(), s(&bundle).into(), "--policy".into()],
        ),
        (
            "--key",
            knox::cmd::KEY.bytes,
            vec![
                "verify".into(),
                "--allow-simulated".into(),
                s(&bundle).into(),
                "--receipt".into(),
                s(&receipt).into(),
                "--key".into(),
            ],
        ),
        (
            "--regulation-context",
            knox::cmd::CONFIG.bytes,
            vec![
                "run".into(),
                "--workload".into(),
                "st-sa".into(),
                "--flows".into(),
                "1".into(),
                "--regulations".into(),
                "gdpr".into(),
                "--out".into(),
                s(&d.join("r")).into(),
                "--force".into(),
                "--regulation-context".into(),
            ],
        ),
        (
            "--collateral",
            knox::cmd::COLLATERAL.bytes,
            vec![
                "run".into(),
                "--workload".into(),
                "st-sa".into(),
                "--platform".into(),
                "tdx".into(),
                "--out".into(),
                s(&d.join("c")).into(),
                "--force".into(),
                "--collateral".into(),
            ],
        ),
        (
            "--pool",
            knox::cmd::POOL.bytes,
            vec![
                "eval".into(),
                "--out".into(),
                s(&d.join("e")).into(),
                "--force".into(),
                "--pool".into(),
            ],
        ),
    ];
    for (option, cap, args) in &cases {
        let big = d.join(format!("big{}", option.trim_start_matches('-')));
        std::fs::File::create(&big)
            .unwrap()
            .set_len(cap + 1)
            .unwrap();
        for (file, want, says) in [
            (fifo.as_path(), 66, "FIFO"),
            (Path::new("/dev/zero"), 66, "device"),
            (d, 66, "directory"),
            (big.as_path(), 65, "larger than"),
        ] {
            let child = knox()
                .args(args)
                .arg(file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let o = wait_bounded(child, &format!("{option} {}", file.display()));
            let t = text(&o);
            assert_eq!(code(&o), want, "{option} {}: {t}", file.display());
            assert!(
                t.contains(says) && t.contains(s(file)),
                "{option} {}: {t}",
                file.display()
            );
        }
        std::fs::remove_file(&big).unwrap();
    }
    // Evidence itself: a FIFO is unreadable evidence (4), at once.
    let child = knox()
        .args(["verify", s(&fifo)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_bounded(child, "verify FIFO");
    assert_eq!(code(&o), 4, "{}", text(&o));
    assert!(text(&o).contains("FIFO"), "{}", text(&o));
}

/// Defect 11: `eval --pool` naming the pool the run would write (`OUT/pool.json`) is
/// refused before anything is written.
#[test]
fn eval_refuses_to_overwrite_its_pool() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e");
    std::fs::create_dir_all(&out).unwrap();
    let pool = out.join("pool.json");
    std::fs::write(&pool, b"{}").unwrap();
    let o = run(&["eval", "--force", "--out", s(&out), "--pool", s(&pool)]);
    assert_eq!(code(&o), 64, "{}", text(&o));
    assert!(text(&o).contains("would overwrite"), "{}", text(&o));
    assert_eq!(std::fs::read(&pool).unwrap(), b"{}");
    // Nor a pool anywhere under the folder the evaluation rewrites.
    std::fs::create_dir_all(out.join("bundles")).unwrap();
    let inner = out.join("bundles").join("old-pool.json");
    std::fs::write(&inner, b"{}").unwrap();
    let o = run(&["eval", "--force", "--out", s(&out), "--pool", s(&inner)]);
    assert_eq!(code(&o), 64, "{}", text(&o));
    assert!(text(&o).contains("is inside --out"), "{}", text(&o));
}

/// #35: an output never overwrites an input, in any command: `report --key K --out K`,
/// `contract sign C --key K --out K` and `contract sign C --out C` each exit 73 naming
/// the input, and leave it as it was. (The check lives once, in every write of
/// `knox-files`; `run --force` over its own plan is in `suite::toolkit`.)
#[test]
fn no_output_overwrites_an_input_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let prefix = d.join("authority");
    assert_eq!(code(&run(&["keygen", "--out", s(&prefix)])), 0);
    let key = d.join("authority.key");
    let contract = d.join("c.json");
    assert_eq!(code(&run(&["contract", "new", "--out", s(&contract)])), 0);
    let (key_before, contract_before) = (
        std::fs::read(&key).unwrap(),
        std::fs::read(&contract).unwrap(),
    );
    let sign_to = |out| {
        vec![
            "contract",
            "sign",
            s(&contract),
            "--key",
            s(&key),
            "--out",
            s(out),
        ]
    };
    let cases: [(&str, Vec<&str>); 3] = [
        (
            "report --key K --out K",
            // Refused before any request: nothing listens on port 9 of loopback.
            vec![
                "report",
                "--to",
                "http://127.0.0.1:9",
                "--key",
                s(&key),
                "--out",
                s(&key),
            ],
        ),
        ("contract sign C --key K --out K", sign_to(&key)),
        ("contract sign C --out C", sign_to(&contract)),
    ];
    for (what, args) in cases {
        let o = run(&args);
        assert_eq!(code(&o), 73, "{what}: {}", text(&o));
        assert!(
            text(&o).contains("is an input of this command"),
            "{what}: {}",
            text(&o)
        );
        assert_eq!(std::fs::read(&key).unwrap(), key_before, "{what}");
        assert_eq!(std::fs::read(&contract).unwrap(), contract_before, "{what}");
    }
    // The same signing to a new file works.
    let signed = d.join("c.signed.json");
    let o = run(&sign_to(&signed));
    assert_eq!(code(&o), 0, "{}", text(&o));
}

/// #35: `knox demo` stops on SIGUSR1 like a run (it died of it): the run it arrives in
/// is interrupted with evidence, and the process exits with a code, not the signal.
#[test]
fn the_demo_stops_on_a_stop_signal_instead_of_dying() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let mut child = knox()
        .args(["demo", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = out.clone();
    assert!(
        wait_for(&mut child, || o.exists()),
        "the demo never started"
    );
    signal(&child, "USR1");
    let output = wait_bounded(child, "knox demo after SIGUSR1");
    assert!(
        output.status.code().is_some(),
        "killed by the signal: {}",
        text(&output)
    );
}
