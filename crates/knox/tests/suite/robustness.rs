//! The robustness campaign's process probes (issue #16, item 6), on the real binary:
//!
//! - **kill -9 at random moments** (after the run's first journal appears) of every run mode — an InjecAgent workload, the same
//!   regulated (GDPR), and the terminal suite with confined tools (real processes in
//!   the kernel sandbox): every evidence file left verifies `complete` or `prefix`
//!   (never tampered, never unreadable, never empty), and once a later confined run has
//!   started, no cgroup pool of a killed run is left under Knox's cgroup parent, so no
//!   confined process of it survives;
//! - **concurrent runs** into separate folders: every bundle verifies `complete`, and
//!   each holds only its own run (its run id is its file name's, its journal agrees);
//! - **the MCP gateway** ([`gateway`]): `knox gateway mcp --http` killed mid-sessions,
//!   and concurrent sessions through one gateway.
//!
//! CI runs a few kills per mode; `KNOX_ROBUSTNESS_KILLS=N` runs N per mode (what
//! `scripts/robustness` does and `docs/robustness.md` reports), with the moments drawn
//! from `KNOX_ROBUSTNESS_SEED` (printed, so a failure can be replayed). Each probe prints
//! `robustness: <probe> tried=N tampered=T unreadable=U empty=E leaked=L`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::support::{knox, sandbox_unavailable};

mod gateway;

fn kills_per_mode() -> u64 {
    std::env::var("KNOX_ROBUSTNESS_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// A small deterministic generator (xorshift64*), seeded from the environment or the
/// clock; the seed is printed.
struct Moments(u64);

impl Moments {
    fn new(probe: &str) -> Self {
        let seed = std::env::var("KNOX_ROBUSTNESS_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            })
            | 1;
        eprintln!("robustness: {probe} seed={seed}");
        Self(seed)
    }

    /// A delay in `[0, max)`.
    fn below(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX).max(1);
        Duration::from_millis(r % ms)
    }
}

/// The evidence files (bundles and journals) in `dir`, temporary files aside.
fn evidence(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
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

/// What verifying a folder's evidence found.
#[derive(Default, Debug)]
struct Found {
    files: u64,
    complete: u64,
    prefix: u64,
    tampered: Vec<String>,
    unreadable: Vec<String>,
    empty: Vec<String>,
}

impl Found {
    /// Verifies every evidence file of `dir` (one `knox verify --json` for all).
    fn add(&mut self, dir: &Path) {
        self.add_with(dir, &[]);
    }

    /// [`Found::add`], with more `knox verify` arguments (`--manifest FILE` for
    /// journals of runs under a user's manifest).
    fn add_with(&mut self, dir: &Path, verify_args: &[&std::ffi::OsStr]) {
        let mut files = Vec::new();
        for f in evidence(dir) {
            self.files += 1;
            if std::fs::metadata(&f).map_or(0, |m| m.len()) == 0 {
                self.empty.push(f.display().to_string());
            } else {
                files.push(f);
            }
        }
        if files.is_empty() {
            return;
        }
        let out = knox()
            .args(["verify", "--allow-simulated", "--json"])
            .args(verify_args)
            .args(&files)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "knox verify --json printed no JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let reports = match v {
            serde_json::Value::Array(a) => a,
            one => vec![one],
        };
        assert_eq!(reports.len(), files.len(), "one report per file");
        for r in reports {
            let file = r["file"].as_str().unwrap_or("?").to_owned();
            match r["outcome"]["status"].as_str() {
                Some("complete") => self.complete += 1,
                Some("prefix") => self.prefix += 1,
                Some("tampered") => self.tampered.push(format!("{file}: {}", r["outcome"])),
                _ => self.unreadable.push(format!("{file}: {r}")),
            }
        }
    }
}

/// Knox's cgroup pools named after `pid` (under every hierarchy's `knox/` parent).
fn pools_of(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("knox-sandbox-{pid}-");
    let mut left = Vec::new();
    for root in [
        "/sys/fs/cgroup/pids/knox",
        "/sys/fs/cgroup/memory/knox",
        "/sys/fs/cgroup/unified/knox",
        "/sys/fs/cgroup/knox",
    ] {
        let Ok(rd) = std::fs::read_dir(root) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                left.push(e.path());
            }
        }
    }
    left
}

/// One run mode: its `knox run` arguments after `--out`.
struct Mode {
    name: &'static str,
    args: &'static [&'static str],
    confined: bool,
}

const MODES: [Mode; 3] = [
    Mode {
        name: "workload",
        args: &["--workload", "mt-sa-seq:2", "--flows", "400", "--journal"],
        confined: false,
    },
    Mode {
        name: "regulated",
        args: &[
            "--workload",
            "mt-sa-seq:2",
            "--flows",
            "400",
            "--journal",
            "--regulations",
            "GDPR",
        ],
        confined: false,
    },
    Mode {
        name: "terminal-confined",
        args: &[
            "--suite",
            "terminal",
            "--tools",
            "confined",
            "--workload",
            "mt-sa-seq:2",
            "--journal",
        ],
        confined: true,
    },
];

fn spawn(out: &Path, mode: &Mode) -> Child {
    // Standard error goes to a file beside `out` (a pipe nobody reads could fill and
    // stall the run).
    let log = std::fs::File::create(out.with_extension("stderr")).unwrap();
    knox()
        .arg("run")
        .args(mode.args)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Waits (bounded) until the run writing into `out` has written its first evidence
/// file, or has ended.
fn first_journal(out: &Path, child: &mut Child) {
    let started = Instant::now();
    while evidence(out).is_empty()
        && child.try_wait().unwrap().is_none()
        && started.elapsed() < Duration::from_secs(120)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits for `child` to end, bounded (a hang fails the test).
fn wait_bounded(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after 300 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Over 60 s on 2 cores, and why: per mode, a timed run sizes the window, then three
/// real `knox run` processes are each killed at a random moment within it after their
/// first journal line (the confined mode adds a run after the kills), so most of its time
/// is spent waiting for those moments while the other tests use the cores. Fewer or
/// earlier kills would test less; the full campaign (`KNOX_ROBUSTNESS_KILLS`) stays out of
/// CI.
#[test]
fn kill_9_at_random_moments_leaves_only_verifiable_evidence_and_no_cgroup() {
    let dir = tempfile::tempdir().unwrap();
    let per_mode = kills_per_mode();
    let mut moments = Moments::new("kill");
    let mut failures = Vec::new();
    for mode in &MODES {
        let mut found = Found::default();
        let mut killed = Vec::new();
        let mut tried = 0u64;
        let mut unavailable = false;
        // The window the kill moment is drawn from, after the first journal appears:
        // 60 % of the time one whole run of this mode takes from its first journal to its
        // end, measured here. A fixed window fits one machine and one build only: with
        // optimized dependencies a 400-flow run ends in under 2 s, and a fixed 8 s window
        // let most draws fall after the run had ended (now and then no kill at all).
        let mut window = {
            let out = dir.path().join(format!("{}-timed", mode.name));
            let mut child = spawn(&out, mode);
            first_journal(&out, &mut child);
            let from = Instant::now();
            let status = wait_bounded(&mut child, "the timed run");
            if !status.success() {
                // Only a confined run may fail here (most likely no kernel sandbox on this
                // machine: the kills below say so).
                assert!(
                    mode.confined,
                    "{}: the timed run failed: {status}",
                    mode.name
                );
                Duration::from_millis(500)
            } else {
                found.add(&out);
                from.elapsed().mul_f64(0.6)
            }
        };
        // A run that ends before its moment is not a kill: try again, bounded.
        for i in 0..per_mode * 5 {
            if tried == per_mode {
                break;
            }
            let out = dir.path().join(format!("{}-{i}", mode.name));
            let mut child = spawn(&out, mode);
            // The moment: a random delay after the run's first journal appears (a kill
            // before any evidence exists proves nothing; files.rs kills at start too).
            first_journal(&out, &mut child);
            std::thread::sleep(moments.below(window));
            let pid = child.id();
            let ended_first = child.try_wait().unwrap().is_some();
            let _ = child.kill();
            let _ = child.wait();
            if ended_first {
                // It ended before the moment: a sandbox that cannot start here, or a
                // window too long. Either way this was not a kill.
                let err = std::fs::read_to_string(out.with_extension("stderr")).unwrap_or_default();
                if mode.confined && err.contains("sandbox") {
                    eprintln!("robustness: kill {}: sandbox unavailable here", mode.name);
                    unavailable = true;
                    break;
                }
                // This machine runs faster now than when the window was timed: narrow it.
                window /= 2;
                continue;
            }
            tried += 1;
            killed.push(pid);
            found.add(&out);
        }
        assert!(
            unavailable || per_mode == 0 || (tried > 0 && found.files > 0),
            "{}: no kill left evidence to check ({tried} kills; the window is wrong)",
            mode.name
        );
        // A later confined run reclaims the pools of dead owners as it starts.
        let mut leaked = Vec::new();
        if mode.confined && !killed.is_empty() {
            let out = dir.path().join(format!("{}-after", mode.name));
            let mut child = spawn(&out, mode);
            let status = wait_bounded(&mut child, "the run after the kills");
            assert!(status.success(), "the run after the kills failed: {status}");
            found.add(&out);
            for pid in &killed {
                leaked.extend(pools_of(*pid));
            }
        }
        eprintln!(
            "robustness: kill {} tried={tried} files={} complete={} prefix={} tampered={} unreadable={} empty={} leaked={}",
            mode.name,
            found.files,
            found.complete,
            found.prefix,
            found.tampered.len(),
            found.unreadable.len(),
            found.empty.len(),
            leaked.len()
        );
        if !(found.tampered.is_empty()
            && found.unreadable.is_empty()
            && found.empty.is_empty()
            && leaked.is_empty())
        {
            failures.push(format!("{}: {found:?} leaked {leaked:?}", mode.name));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn concurrent_runs_into_separate_folders_each_hold_only_their_own_runs() {
    let dir = tempfile::tempdir().unwrap();
    let n = 4;
    let children: Vec<(PathBuf, Child)> = (0..n)
        .map(|i| {
            let out = dir.path().join(format!("c{i}"));
            let child = knox()
                .args([
                    "run",
                    "--workload",
                    "mt-ma:3:3",
                    "--flows",
                    "6",
                    "--journal",
                    "--out",
                ])
                .arg(&out)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (out, child)
        })
        .collect();
    let mut found = Found::default();
    let (mut bundles, mut sealed) = (0u64, 0u64);
    for (out, mut child) in children {
        let status = wait_bounded(&mut child, "a concurrent run");
        assert!(status.success(), "{}: {status}", out.display());
        found.add(&out);
        sealed += super::support::read_json(&out.join("summary.json"))["bundles"]
            .as_u64()
            .unwrap();
        for f in evidence(&out) {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&f).unwrap();
            if let Some(run_id) = name.strip_suffix(".journal.jsonl") {
                // Every line of the journal belongs to this run: the header names it,
                // and the sealed bundle of the same id holds the same nodes.
                let header: serde_json::Value =
                    serde_json::from_str(text.lines().next().unwrap()).unwrap();
                assert_eq!(header["run_id"], run_id, "{}", f.display());
                let bundle: serde_json::Value =
                    super::support::read_json(&out.join(format!("{run_id}.json")));
                let nodes = bundle["nodes"].as_array().unwrap();
                let lines: Vec<serde_json::Value> = text
                    .lines()
                    .skip(1)
                    .map(|l| serde_json::from_str(l).unwrap())
                    .filter(|l: &serde_json::Value| l.get("seq").is_some())
                    .collect();
                assert_eq!(lines.len(), nodes.len(), "{}", f.display());
                for (l, n) in lines.iter().zip(nodes) {
                    assert_eq!(l, n, "{}", f.display());
                }
            } else if let Some(run_id) = name.strip_suffix(".json") {
                bundles += 1;
                let b: serde_json::Value = serde_json::from_str(&text).unwrap();
                assert_eq!(b["run_id"], run_id, "{}", f.display());
            }
        }
    }
    eprintln!(
        "robustness: concurrent runs={n} bundles={bundles} files={} complete={} prefix={} tampered={} unreadable={}",
        found.files,
        found.complete,
        found.prefix,
        found.tampered.len(),
        found.unreadable.len()
    );
    assert!(bundles > 0);
    assert_eq!(
        bundles, sealed,
        "each run's summary counts the bundles in its folder"
    );
    assert!(
        found.tampered.is_empty() && found.unreadable.is_empty() && found.empty.is_empty(),
        "{found:?}"
    );
    assert_eq!(found.complete, bundles);
}

/// The campaign's own check: `pools_of` sees a live confined run's pool, so `leaked=0`
/// is not vacuous.
#[test]
fn the_cgroup_probe_sees_a_live_confined_runs_pool() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live");
    let mut child = spawn(&out, &MODES[2]);
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = false;
    while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        if !pools_of(pid).is_empty() {
            seen = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let mut o = child.wait_with_output().unwrap();
    o.stderr = std::fs::read(out.with_extension("stderr")).unwrap_or_default();
    if !seen && sandbox_unavailable(&o) {
        return;
    }
    assert!(seen, "no cgroup pool of a running confined run was seen");
}
