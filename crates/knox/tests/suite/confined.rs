//! Tools in kernel-confined workers through the broker: grants enforced, real
//! commands run, denied system calls recorded as evidence and verified.

use knox::session::{ExecutorKind, Suite, SuiteRun};
use knox_agent::{RunContext, ToolHost};
use knox_broker::Broker;
use knox_harness::SimulatedTools;
use knox_types::Action;
use knox_types::aeg::NodeKind;
use knox_types::payload::Body;
use knox_verify::Outcome;
use serde_json::json;

use super::support::{outcomes_with, runtime, verify};

fn broker(dir: &std::path::Path) -> Option<Broker> {
    let worker = vec![env!("CARGO_BIN_EXE_knox").into(), "tool-worker".into()];
    match Broker::new(
        worker,
        dir.to_path_buf(),
        knox_sandbox::SandboxConfig::default(),
    ) {
        Ok(b) => Some(b),
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: kernel sandbox unavailable here: {e}");
            None
        }
        Err(e) => panic!("kernel sandbox unavailable in CI: {e}"),
    }
}

#[test]
fn terminal_commands_run_confined_and_denied_system_calls_become_verified_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = broker(dir.path()) else { return };
    // Every attack targets what this test created: its own listener, its own canary.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.txt");
    std::fs::write(&canary, b"secret").unwrap();
    let task = |i: &str, c: String| knox_harness::TerminalTask {
        instruction: i.into(),
        command: c,
        note: String::new(),
    };
    let tasks = vec![
        task("list", "ls -la".into()),
        task(
            "probe my listener",
            format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo open || echo closed'"),
        ),
        task("private mount", "unshare -m mount -t tmpfs none .".into()),
        task("read the canary", format!("cat {}", canary.display())),
    ];
    let run = SuiteRun::new(
        Suite::Terminal,
        &runtime().data,
        "mt-sa-seq:2".parse().unwrap(),
        0,
    )
    .with_tasks(&tasks);
    let bundles: Vec<_> = outcomes_with(&run, ExecutorKind::Benign, |s| s.host(b))
        .into_iter()
        .map(|o| o.bundle)
        .collect();
    assert_eq!(bundles.len(), 2);
    let mut denied = Vec::new();
    for b in &bundles {
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
        for n in b
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Blocked && n.payload.to_value()["guard"] == "kernel")
        {
            denied.push(
                n.payload.to_value()["kernel"]["syscall"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        // Every command ran for real inside the confinement, with the ABI recorded.
        for n in b.nodes.iter().filter(|n| n.kind == NodeKind::ToolOutput) {
            assert!(
                n.payload.to_value()["confinement"]["landlock_abi"]
                    .as_i64()
                    .unwrap_or(0)
                    >= 6,
                "{}",
                n.payload
            );
        }
    }
    // bash's socket() and unshare(2) are outside Auth.
    for want in ["socket", "unshare"] {
        assert!(
            denied.iter().any(|d| d == want),
            "{want} not among recorded denials {denied:?}"
        );
    }
    // The benign `ls -la` really listed the workspace; the canary stayed unread.
    let outputs: Vec<serde_json::Value> = bundles
        .iter()
        .flat_map(|b| b.nodes.iter().filter(|n| n.kind == NodeKind::ToolOutput))
        .map(|n| n.payload.to_value()["output"].clone())
        .collect();
    assert_eq!(outputs[0]["exit_code"], 0, "{}", outputs[0]);
    assert!(
        outputs[3]["output"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{}",
        outputs[3]
    );
    assert!(!outputs.iter().any(|o| o.to_string().contains("secret")));
    drop(listener);
    // Tampering with a recorded denial is detected, naming the node.
    let (i, _) = bundles[1]
        .nodes
        .iter()
        .enumerate()
        .find(|(_, n)| n.payload.to_value()["guard"] == "kernel")
        .unwrap();
    let mut t = bundles[1].clone();
    let mut v = t.nodes[i].payload.to_value();
    v["kernel"]["syscall"] = json!("read");
    t.nodes[i].payload = Body::read(t.nodes[i].kind, v);
    assert!(matches!(verify(&t).outcome, Outcome::Tampered { node: Some(n), .. } if n == i as u64));
    // Dropping it (and re-measuring) is detected too: the signed head no longer matches.
    let mut t = bundles[1].clone();
    t.nodes.remove(i);
    assert!(matches!(verify(&t).outcome, Outcome::Tampered { .. }));
}

#[test]
fn the_broker_runs_nothing_without_a_valid_unconsumed_grant() {
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = broker(dir.path()) else { return };
    let rt = runtime();
    let h = super::support::harness(
        vec![vec![knox_types::apm::ExpectedCall::exact(
            0,
            "TerminalExecute",
            super::support::params(json!({"command": "id"})),
        )]],
        knox_types::apm::Topology {
            kind: knox_types::apm::TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        knox_types::apm::StopPolicy::default(),
    );
    let canned = SimulatedTools::new(&rt.data, &rt.manifest);
    // The monitor's key, as the broker is told it (the run's own signs only inside its
    // monitor).
    let monitor = knox_attest::TeeKey::generate().unwrap();
    let pk = knox_attest::Signer::public_key(&monitor);
    let runner = b
        .runner(RunContext {
            apm: &h.apm,
            apm_hash: h.apm_hash,
            monitor_key: &pk,
            run_id: "grants",
            canned: &canned,
        })
        .unwrap();
    let id = Action::new("TerminalExecute", json!({"command": "id"})).unwrap();
    let refused = |r: &knox_agent::ToolResult| r.kernel.iter().any(|e| e.event == "refusal");
    // No grant.
    assert!(refused(&runner.run(&id, None)));
    // A genuine grant runs once, and only once.
    let g = knox_attest::grant::issue(&monitor, h.apm_hash, &id, "agent-0", 3).unwrap();
    let ok = runner.run(&id, Some(&g));
    assert!(!refused(&ok), "{ok:?}");
    assert_eq!(ok.output["exit_code"], 0, "{}", ok.output);
    assert!(refused(&runner.run(&id, Some(&g))), "replayed grant");
    // A grant for another action, another run, or from another key.
    let other = Action::new("TerminalExecute", json!({"command": "hostname pwned"})).unwrap();
    let g = knox_attest::grant::issue(&monitor, h.apm_hash, &id, "agent-0", 4).unwrap();
    assert!(refused(&runner.run(&other, Some(&g))));
    let g = knox_attest::grant::issue(
        &monitor,
        knox_types::Digest::sha256(b"other run"),
        &id,
        "agent-0",
        5,
    )
    .unwrap();
    assert!(refused(&runner.run(&id, Some(&g))));
    let forger = knox_attest::TeeKey::generate().unwrap();
    let g = knox_attest::grant::issue(&forger, h.apm_hash, &id, "agent-0", 6).unwrap();
    assert!(refused(&runner.run(&id, Some(&g))));
}

#[test]
fn the_corpus_command_prevents_every_attack_and_its_evidence_verifies() {
    let probe = std::path::Path::new(env!("CARGO_BIN_EXE_knox")).with_file_name("knox-probe");
    if !probe.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "knox-probe not built (cargo test --workspace builds it)"
        );
        eprintln!("skipping: build knox-probe with `cargo build -p knox-attacks`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A slice of the corpus (the whole corpus is tested in knox-attacks): exec, network,
    // file-system and privilege attacks.
    for only in ["exec-", "connect", "read-canary", "mount"] {
        let out = super::support::knox()
            .args(["corpus", "syscalls", "--json", "--only", only, "--probe"])
            .arg(&probe)
            // One folder per slice: evidence is never replaced.
            .arg("--out")
            .arg(dir.path().join(only))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{only}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let s = &v["summary"];
        assert!(s["cases"].as_u64().unwrap() > 0, "{only}");
        assert_eq!(s["monitor_kernel"]["prevented"], s["cases"], "{only}: {s}");
        assert_eq!(s["evidence"]["verified"], "complete");
        assert_eq!(
            s["evidence"]["kernel_events"],
            s["evidence"]["blocked_nodes"]
        );
        let bundle: knox_types::bundle::Bundle = serde_json::from_slice(
            &std::fs::read(dir.path().join(only).join("corpus-syscalls.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(verify(&bundle).outcome, Outcome::Complete);
    }
}

#[test]
fn eval_runs_the_whole_corpus_and_reports_its_verified_bundle() {
    let probe = std::path::Path::new(env!("CARGO_BIN_EXE_knox")).with_file_name("knox-probe");
    if !probe.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "knox-probe not built (cargo test --workspace builds it)"
        );
        eprintln!("skipping: build knox-probe with `cargo build -p knox-attacks`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = super::support::knox()
        .args([
            "eval",
            "--guard",
            "syscall",
            "--workload",
            "st-sa",
            "--executor",
            "injected",
            "--flows",
            "4",
            "--no-utility",
            "--out",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap()).unwrap();
    let corpus = &results["corpus"];
    assert_eq!(corpus["status"], "ran", "{corpus}");
    assert_eq!(corpus["verified"], "complete");
    let s = &corpus["summary"];
    let cases = s["cases"].as_u64().unwrap();
    assert_eq!(cases, knox_attacks::cases().len() as u64);
    assert_eq!(s["monitor_kernel"]["prevented"], cases, "{s}");
    assert_eq!(s["evidence"]["verified"], "complete");
    assert_eq!(
        s["evidence"]["kernel_events"],
        s["evidence"]["blocked_nodes"]
    );
    let csv = std::fs::read_to_string(dir.path().join("corpus.csv")).unwrap();
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .starts_with(&format!("ran,{cases},")),
        "{csv}"
    );
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        report.contains(&format!("| cases | {cases} (")) && report.contains("verifies `complete`"),
        "{report}"
    );
    let bundle: knox_types::bundle::Bundle = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join("bundles")
                .join("corpus")
                .join("corpus-syscalls.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(verify(&bundle).outcome, Outcome::Complete);
}

/// Runs `commands` through one runner of `b` (run id `run_id`), each with a fresh
/// grant; returns each output.
fn run_commands(b: &Broker, run_id: &str, commands: &[&str]) -> Vec<serde_json::Value> {
    let rt = runtime();
    let calls = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            knox_types::apm::ExpectedCall::exact(
                i as u32,
                "TerminalExecute",
                super::support::params(json!({ "command": c })),
            )
        })
        .collect();
    let h = super::support::harness(
        vec![calls],
        knox_types::apm::Topology {
            kind: knox_types::apm::TopologyKind::StSa,
            tasks: 1,
            agents: 1,
        },
        knox_types::apm::StopPolicy::default(),
    );
    // Reading its own /proc/self/status needs a read grant on /proc (the grants
    // are bound to the hash, which the broker takes as given).
    let mut apm = h.apm.clone();
    apm.guards.syscall.paths.push(knox_types::apm::PathGrant {
        path: "/proc".into(),
        access: [knox_types::apm::Access::Read].into_iter().collect(),
    });
    let canned = SimulatedTools::new(&rt.data, &rt.manifest);
    // The monitor's key, as the broker is told it (the run's own signs only inside its
    // monitor).
    let monitor = knox_attest::TeeKey::generate().unwrap();
    let pk = knox_attest::Signer::public_key(&monitor);
    let runner = b
        .runner(RunContext {
            apm: &apm,
            apm_hash: h.apm_hash,
            monitor_key: &pk,
            run_id,
            canned: &canned,
        })
        .unwrap();
    commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let action = Action::new("TerminalExecute", json!({ "command": c })).unwrap();
            let g = knox_attest::grant::issue(&monitor, h.apm_hash, &action, "agent-0", i as u64)
                .unwrap();
            let r = runner.run(&action, Some(&g));
            assert!(r.kernel.iter().all(|e| e.event != "refusal"), "{r:?}");
            r.output
        })
        .collect()
}

#[test]
fn confined_tools_never_run_as_root_and_own_only_their_workspace() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().unwrap();
    let Some(b) = broker(dir.path()) else { return };
    let out = run_commands(
        &b,
        "identity",
        &[
            "id -u",
            "id -G",
            "cat /proc/self/status",
            "mkdir made-by-the-tool",
        ],
    );
    let uid = out[0]["output"].as_str().unwrap().trim().to_string();
    assert_eq!(out[0]["exit_code"], 0, "{}", out[0]);
    assert_ne!(uid, "0", "the tool ran as root");
    let status = out[2]["output"].as_str().unwrap();
    assert_eq!(out[2]["exit_code"], 0, "{}", out[2]);
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{k} missing: {status}"))
    };
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(caps), "0000000000000000", "{caps}: {status}");
    }
    assert_eq!(field("NoNewPrivs"), "1");
    assert_eq!(out[3]["exit_code"], 0, "{}", out[3]);
    if super::support::caller_is_root() {
        let ids = b.tool_identity().unwrap();
        assert_eq!(ids, knox_sandbox::RunAs::KNOX);
        assert_eq!(uid, ids.uid.to_string());
        // The primary group only: no supplementary group is kept.
        assert_eq!(
            out[1]["output"].as_str().unwrap().trim(),
            ids.gid.to_string()
        );
        assert!(
            field("Uid").split_whitespace().all(|u| u == uid),
            "{status}"
        );
    }
    // The run is over (its runner dropped): the workspace is gone.
    assert!(!dir.path().join("identity").exists());

    // Kept on request, owned by the tools' uid, private to it, with what the tool made.
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path()).unwrap().keep_workspaces(true);
    run_commands(&b, "kept", &["mkdir made-by-the-tool"]);
    let ws = dir.path().join("kept");
    let made = ws.join("made-by-the-tool");
    assert!(made.is_dir());
    if super::support::caller_is_root() {
        let meta = std::fs::metadata(&ws).unwrap();
        assert_eq!(meta.uid(), knox_sandbox::RunAs::KNOX.uid);
        assert_eq!(meta.gid(), knox_sandbox::RunAs::KNOX.gid);
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::metadata(&made).unwrap().uid(),
            knox_sandbox::RunAs::KNOX.uid
        );
    }
}

#[test]
fn knox_run_removes_confined_workspaces_unless_asked_to_keep_them() {
    let dir = tempfile::tempdir().unwrap();
    for (name, keep) in [("removed", false), ("kept", true)] {
        let out_dir = dir.path().join(name);
        let mut cmd = super::support::knox();
        cmd.args([
            "run",
            "--suite",
            "terminal",
            "--tools",
            "confined",
            "--workload",
            "mt-sa-seq:2",
            "--out",
        ])
        .arg(&out_dir);
        if keep {
            cmd.arg("--keep-workspaces");
        }
        let out = cmd.output().unwrap();
        if super::support::sandbox_unavailable(&out) {
            return;
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let left: Vec<_> = std::fs::read_dir(out_dir.join("workspaces"))
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        if keep {
            assert!(!left.is_empty(), "--keep-workspaces kept nothing");
        } else {
            assert!(left.is_empty(), "workspaces left after the run: {left:?}");
        }
    }
}

/// Cgroup directories named after `knox_pid`'s pools (any layout, any hierarchy).
fn pools_of(knox_pid: u32) -> Vec<std::path::PathBuf> {
    let out = std::process::Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "8", "-type", "d", "-name"])
        .arg(format!("knox-sandbox-{knox_pid}-*"))
        .stderr(std::process::Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(std::path::PathBuf::from)
        .collect()
}

fn confined_run(out: &std::path::Path) -> std::process::Command {
    let mut cmd = super::support::knox();
    cmd.args([
        "run",
        "--suite",
        "terminal",
        "--tools",
        "confined",
        "--workload",
        "mt-sa-seq:4",
        "--out",
    ])
    .arg(out)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    cmd
}

#[test]
fn a_sigkilled_confined_runs_cgroups_are_reclaimed_by_the_next_run() {
    if !super::support::caller_is_root() {
        return; // without root there are no cgroups to leak
    }
    let dir = tempfile::tempdir().unwrap();
    // SIGKILL the run once its cgroup pool exists (a run that finished first is
    // simply tried again).
    let mut leaked = None;
    for attempt in 0..10 {
        let mut child = confined_run(&dir.path().join(format!("killed-{attempt}")))
            .spawn()
            .unwrap();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            let pools = pools_of(child.id());
            if !pools.is_empty() {
                child.kill().unwrap();
                child.wait().unwrap();
                leaked = Some(pools);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if leaked.is_some() {
            break;
        }
    }
    let Some(leaked) = leaked else {
        eprintln!("skipping: no run was caught with its cgroups (sandbox unavailable?)");
        return;
    };
    let status = confined_run(&dir.path().join("next")).status().unwrap();
    assert!(status.success(), "{status}");
    for pool in &leaked {
        assert!(!pool.exists(), "{} leaked", pool.display());
    }
}

/// On a kernel whose Landlock cannot restrict device `ioctl`s (ABI < 5, capped here),
/// a run whose toolkits grant a device is refused naming the missing feature; with
/// `--degraded device-ioctl` it runs, its evidence says so, and a regulator's policy
/// that requires a newer Landlock ABI refuses it while one that accepts ABI 3 does not.
#[test]
fn an_older_landlock_abi_is_refused_or_degraded_by_name_and_a_regulator_can_require_a_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, degraded: bool| {
        let mut cmd = super::support::knox();
        cmd.env("KNOX_LANDLOCK_ABI_MAX", "3")
            .args([
                "run",
                "--suite",
                "terminal",
                "--tools",
                "confined",
                "--workload",
                "st-sa",
                "--out",
            ])
            .arg(dir.path().join(name));
        if degraded {
            cmd.args(["--degraded", "device-ioctl"]);
        }
        cmd.output().unwrap()
    };
    let refused = run("refused", false);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    if !stderr.contains("IOCTL_DEV") && super::support::sandbox_unavailable(&refused) {
        return;
    }
    assert_ne!(refused.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("LANDLOCK_ACCESS_FS_IOCTL_DEV"), "{stderr}");
    assert!(
        stderr.contains("device-ioctl"),
        "names the opt-in: {stderr}"
    );

    let out = run("degraded", true);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = std::fs::read_dir(dir.path().join("degraded"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "json") && !p.ends_with("summary.json"))
        .unwrap();
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert!(
        text.contains(r#""device-ioctl":"degraded""#),
        "the evidence says so"
    );
    assert!(text.contains(r#""landlock_abi":3"#), "{text}");

    let verify_with = |min: u8| {
        let policy = dir.path().join(format!("policy-{min}.toml"));
        std::fs::write(
            &policy,
            format!(
                "version = 1\n[sandbox]\nmin_landlock_abi = {min}\nrequire_confined_tools = true\n"
            ),
        )
        .unwrap();
        super::support::knox()
            .args(["verify", "--allow-simulated", "--policy"])
            .arg(&policy)
            .arg(&bundle)
            .output()
            .unwrap()
    };
    let strict = verify_with(4);
    let report = String::from_utf8_lossy(&strict.stdout);
    assert_eq!(strict.status.code(), Some(3), "refused: {report}");
    assert!(report.contains("Landlock ABI 3"), "{report}");
    let lenient = verify_with(3);
    assert_eq!(
        lenient.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&lenient.stdout)
    );
}

/// A regulator that requires confined tools refuses a run whose tools were simulated.
#[test]
fn a_policy_requiring_confined_tools_refuses_a_run_with_simulated_tools() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("run");
    let out = super::support::knox()
        .args(["run", "--workload", "st-sa", "--flows", "1", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[sandbox]\nmin_landlock_abi = 1\nrequire_confined_tools = true\n",
    )
    .unwrap();
    let v = super::support::knox()
        .args(["verify", "--allow-simulated", "--policy"])
        .arg(&policy)
        .arg(out_dir.join("st-sa-injected-0000.json"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(3), "{report}");
    assert!(report.contains("ran unconfined"), "{report}");
}
