//! Tools in kernel-confined workers through the broker: grants enforced, real
//! commands run, denied system calls recorded as evidence and verified.

use knox::session::{self, ExecutorKind, WorkloadRun};
use knox_broker::Broker;
use knox_monitor::tools::{RunContext, SimulatedTools, ToolHost};
use knox_types::Action;
use knox_types::aeg::NodeKind;
use knox_verify::Outcome;
use serde_json::json;

use super::support::{runtime, verify};

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
    let w = WorkloadRun {
        host: Some(&b),
        ..WorkloadRun::new("mt-sa-seq:2".parse().unwrap(), ExecutorKind::Benign, 0)
    };
    // Every attack targets what this test created: its own listener, its own canary.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.txt");
    std::fs::write(&canary, b"secret").unwrap();
    let task = |i: &str, c: String| session::TerminalTask {
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
    let mut bundles = Vec::new();
    session::run_terminal(runtime(), &w, &tasks, |o| {
        bundles.push(o.bundle.clone());
        Ok(())
    })
    .unwrap();
    assert_eq!(bundles.len(), 2);
    let mut denied = Vec::new();
    for b in &bundles {
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
        for n in b
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Blocked && n.payload["guard"] == "kernel")
        {
            denied.push(
                n.payload["kernel"]["syscall"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        // Every command ran for real inside the confinement, with the ABI recorded.
        for n in b.nodes.iter().filter(|n| n.kind == NodeKind::ToolOutput) {
            assert!(
                n.payload["confinement"]["landlock_abi"]
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
    let outputs: Vec<&serde_json::Value> = bundles
        .iter()
        .flat_map(|b| b.nodes.iter().filter(|n| n.kind == NodeKind::ToolOutput))
        .map(|n| &n.payload["output"])
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
        .find(|(_, n)| n.payload["guard"] == "kernel")
        .unwrap();
    let mut t = bundles[1].clone();
    t.nodes[i].payload["kernel"]["syscall"] = json!("read");
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
    let pk = rt.key.public_key();
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
    let refused =
        |r: &knox_monitor::tools::ToolResult| r.kernel.iter().any(|e| e.event == "refusal");
    // No grant.
    assert!(refused(&runner.run(&id, None)));
    // A genuine grant runs once, and only once.
    let g = knox_attest::grant::issue(&rt.key, h.apm_hash, &id, "agent-0", 3).unwrap();
    let ok = runner.run(&id, Some(&g));
    assert!(!refused(&ok), "{ok:?}");
    assert_eq!(ok.output["exit_code"], 0, "{}", ok.output);
    assert!(refused(&runner.run(&id, Some(&g))), "replayed grant");
    // A grant for another action, another run, or from another key.
    let other = Action::new("TerminalExecute", json!({"command": "hostname pwned"})).unwrap();
    let g = knox_attest::grant::issue(&rt.key, h.apm_hash, &id, "agent-0", 4).unwrap();
    assert!(refused(&runner.run(&other, Some(&g))));
    let g = knox_attest::grant::issue(
        &rt.key,
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
        eprintln!("skipping: build knox-probe with `cargo build -p knox-sandbox`");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A slice of the corpus (the whole corpus is tested in knox-sandbox): exec, network,
    // file-system and privilege attacks.
    for only in ["exec-", "connect", "read-canary", "mount"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_knox"))
            .args(["corpus", "syscalls", "--json", "--only", only, "--probe"])
            .arg(&probe)
            // One folder for the four slices: each replaces the last one's bundle.
            .args(["--force", "--out"])
            .arg(dir.path())
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
            &std::fs::read(dir.path().join("corpus-syscalls.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(verify(&bundle).outcome, Outcome::Complete);
    }
}
