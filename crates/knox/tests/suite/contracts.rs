//! Signed capability contracts end to end: the EBP-CA scenarios escape without Knox
//! and are blocked by the named check under Knox; the `knox contract` and `knox
//! approve` commands.

use std::path::Path;
use std::process::Output;

use knox_eval::contract_demo;

use super::support::knox;

fn run(dir: &Path, args: &[&str]) -> Output {
    knox().current_dir(dir).args(args).output().unwrap()
}

fn sandbox_here() -> bool {
    match knox_sandbox::Sandbox::new(knox_sandbox::SandboxConfig::default()) {
        Ok(_) => true,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "kernel sandbox unavailable in CI: {e}"
            );
            eprintln!("skipping: kernel sandbox unavailable here: {e}");
            false
        }
    }
}

#[test]
fn every_hostile_scenario_escapes_without_knox_and_is_blocked_by_its_check_with_it() {
    if !sandbox_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = contract_demo::run_demo(Path::new(env!("CARGO_BIN_EXE_knox")), dir.path()).unwrap();
    let namespaces = r.without_unavailable.is_none();
    if !namespaces {
        assert!(
            std::env::var_os("CI").is_none(),
            "{:?}",
            r.without_unavailable
        );
        eprintln!("without-Knox half not run: {:?}", r.without_unavailable);
    }
    let want = [
        ("write a report in the workspace", "executed"),
        ("count its lines with the pinned wc", "executed"),
        ("GET the example API", "executed"),
        ("write ~/.bashrc (outside the capability)", "path (decision"),
        ("path traversal ../home/.bashrc", "path (decision"),
        ("symlink escape (planted link)", "resolve_beneath (executor"),
        ("argv not on the list (read ~/secret.txt)", "argv (decision"),
        ("a shell", "capability (decision"),
        (
            "swapped binary (digest mismatch)",
            "pinned_digest (executor",
        ),
        ("forbidden domain (exfiltration)", "endpoint (decision"),
        ("over budget (2nd premium report)", "budget (decision"),
        ("over the action cap (6th action)", "action_cap (decision"),
        ("high-impact payment without approval", "approval (pending"),
        ("replayed grant", "grant (executor"),
        ("forged or swapped approval", "approval (decision"),
        (
            "tampered contract (root widened to ~)",
            "contract signature",
        ),
    ];
    assert_eq!(r.rows.len(), want.len());
    for (row, (name, by)) in r.rows.iter().zip(want) {
        assert_eq!(row.scenario, name);
        assert!(row.blocked_by.starts_with(by), "{name}: {}", row.blocked_by);
        if namespaces {
            // Without Knox, every scenario's effect happens: the escapes for real.
            let (happened, what) = row.without.clone().unwrap();
            assert!(happened, "{name} without Knox: {what}");
        }
        // With Knox: legitimate ones ran, hostile ones had no effect.
        assert_eq!(
            row.with_knox, !row.hostile,
            "{name} with Knox: {}",
            row.blocked_by
        );
    }
    assert_eq!(r.rows.iter().filter(|r| r.hostile).count(), 13);
    assert_eq!(r.journals.len(), 15);
    assert!(r.journals.iter().all(|j| j.status == "complete"));
    assert!(r.passed());
    // The with-Knox half again as Knox runs (the engine's Session bounded by the signed
    // contract, the broker's contract executor as tool host): one bundle per scenario
    // that `knox verify` reports complete, every hostile step blocked with the check
    // named in its blocked node; the tampered contract starts no run.
    let checks = [
        "-",
        "-",
        "-",
        "path",
        "path",
        "resolve_beneath",
        "argv",
        "capability",
        "pinned_digest",
        "endpoint",
        "budget",
        "action_cap",
        "approval (pending)",
        "grant",
        "approval",
        "contract signature",
    ];
    assert_eq!(r.bundles.len(), checks.len());
    for (b, check) in r.bundles.iter().zip(checks) {
        assert!(b.check.starts_with(check), "{}: {:?}", b.scenario, b);
        assert!(b.passed(), "{b:?}");
        let Some(path) = &b.bundle else {
            assert_eq!(b.scenario, "tampered contract (root widened to ~)");
            continue;
        };
        let o = knox()
            .args(["verify", "--allow-simulated"])
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}",
            b.scenario,
            String::from_utf8_lossy(&o.stdout)
        );
        if b.hostile {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(
                text.contains(check.trim_end_matches(" (pending)")),
                "{}",
                b.scenario
            );
        }
    }
    // The fake home of the Knox half was never written.
    assert!(!dir.path().join("with-knox/home/.bashrc").exists());
    assert!(!dir.path().join("with-knox-runs/home/.bashrc").exists());
    // The without-Knox half wrote into a tmpfs of its own mount namespace only.
    if namespaces {
        let left: Vec<_> = std::fs::read_dir(dir.path().join("without-knox"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn contract_new_sign_check_show_approve_and_a_tampered_copy() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    assert!(run(p, &["keygen", "--out", "alice"]).status.success());
    // Name alice as approver of high-impact actions; make the API high impact.
    signed_contract(p, |c| {
        let alice: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p.join("alice.pub")).unwrap()).unwrap();
        c["approvers"]["alice"] = alice["public_key"].clone();
        c["approval_required"] = serde_json::json!(["high"]);
        c["endpoints"]["example-api"]["impact"] = serde_json::json!("high");
    });
    let check = |extra: &[&str]| {
        let mut a = vec![
            "contract",
            "check",
            "c.signed.json",
            "--authority",
            "authority.pub",
        ];
        a.extend_from_slice(extra);
        run(p, &a)
    };
    assert!(check(&[]).status.success());
    let show = run(
        p,
        &[
            "contract",
            "show",
            "c.signed.json",
            "--authority",
            "authority.pub",
        ],
    );
    assert!(String::from_utf8_lossy(&show.stdout).contains("example-api"));
    std::fs::write(
        p.join("ok.json"),
        r#"{"tool":"ContractExec","params":{"exe":"wc","args":["-l","a.txt"]}}"#,
    )
    .unwrap();
    std::fs::write(
        p.join("bad.json"),
        r#"{"tool":"ContractExec","params":{"exe":"wc","args":["-l","/etc/shadow"]}}"#,
    )
    .unwrap();
    std::fs::write(
        p.join("api.json"),
        r#"{"tool":"ContractHttp","params":{"endpoint":"example-api","method":"GET","url":"https://api.example.com/v1/x"}}"#,
    )
    .unwrap();
    assert_eq!(check(&["--action", "ok.json"]).status.code(), Some(0));
    let bad = check(&["--action", "bad.json"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("\"argv\""));
    let pending = check(&["--action", "api.json"]);
    assert_eq!(pending.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&pending.stdout).contains("pending"));
    let o = run(
        p,
        &[
            "approve",
            "api.json",
            "--contract",
            "c.signed.json",
            "--authority",
            "authority.pub",
            "--key",
            "alice.key",
            "--name",
            "alice",
            "--out",
            "tok.json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        check(&["--action", "api.json", "--approval", "tok.json"])
            .status
            .code(),
        Some(0)
    );
    // an action that needs no approval is decided without the token
    assert_eq!(
        check(&["--action", "ok.json", "--approval", "tok.json"])
            .status
            .code(),
        Some(0)
    );
    std::fs::write(
        p.join("api2.json"),
        r#"{"tool":"ContractHttp","params":{"endpoint":"example-api","method":"GET","url":"https://api.example.com/v1/y"}}"#,
    )
    .unwrap();
    // the token does not approve another action (swapped)
    assert_eq!(
        check(&["--action", "api2.json", "--approval", "tok.json"])
            .status
            .code(),
        Some(1)
    );
    // an approver key not listed is refused by `knox approve`
    assert!(run(p, &["keygen", "--out", "mallory"]).status.success());
    let o = run(
        p,
        &[
            "approve",
            "api.json",
            "--contract",
            "c.signed.json",
            "--authority",
            "authority.pub",
            "--key",
            "mallory.key",
            "--name",
            "alice",
            "--out",
            "tok2.json",
        ],
    );
    assert_eq!(o.status.code(), Some(65));
    // tampered: the budget raised in the payload, signature unchanged
    let mut env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("c.signed.json")).unwrap()).unwrap();
    let payload = knox_types::dsse::unb64(env["payload"].as_str().unwrap()).unwrap();
    let text = String::from_utf8(payload)
        .unwrap()
        .replace("\"budget_cents\":100", "\"budget_cents\":1000000");
    env["payload"] = serde_json::json!(knox_types::dsse::b64(text.as_bytes()));
    std::fs::write(p.join("c.signed.json"), serde_json::to_vec(&env).unwrap()).unwrap();
    let t = check(&[]);
    assert_eq!(
        t.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&t.stderr)
    );
}

/// In `p`: an authority key (`authority.key`, `authority.pub`) and the example
/// contract (`knox contract new`) changed by `edit`, saved as `c.json` and signed as
/// `c.signed.json`.
fn signed_contract(p: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    assert!(run(p, &["keygen", "--out", "authority"]).status.success());
    assert!(
        run(p, &["contract", "new", "--out", "c.json"])
            .status
            .success()
    );
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("c.json")).unwrap()).unwrap();
    edit(&mut c);
    std::fs::write(p.join("c.json"), serde_json::to_vec(&c).unwrap()).unwrap();
    let o = run(
        p,
        &[
            "contract",
            "sign",
            "c.json",
            "--key",
            "authority.key",
            "--out",
            "c.signed.json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn bundle_in(out: &Path) -> std::path::PathBuf {
    std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("run-") && n.ends_with(".json") && !n.ends_with(".journal.jsonl")
        })
        .unwrap()
}

/// `knox run --contract`: a planned write inside the directory capability is executed
/// for real by the broker's contract executor, a planned `../` escape is blocked by the
/// contract's `path` check (and nothing is written outside); the bundle verifies
/// complete, also under `--contract-authority` of its signer, and is refused under
/// another authority. A contract signed by another key, expired, or malformed is
/// refused before anything runs (65).
#[test]
fn knox_run_with_a_contract_executes_on_contract_actions_and_blocks_the_others() {
    if !sandbox_here() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let ws = p.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for k in ["authority", "other"] {
        assert!(run(p, &["keygen", "--out", k]).status.success());
    }
    assert!(
        run(p, &["contract", "new", "--out", "c.json"])
            .status
            .success()
    );
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("c.json")).unwrap()).unwrap();
    c["directories"]["workspace"]["root"] = serde_json::json!(ws.to_str().unwrap());
    let sign = |c: &serde_json::Value, name: &str| {
        std::fs::write(
            p.join(format!("{name}.json")),
            serde_json::to_vec(c).unwrap(),
        )
        .unwrap();
        let o = run(
            p,
            &[
                "contract",
                "sign",
                &format!("{name}.json"),
                "--key",
                "authority.key",
                "--out",
                &format!("{name}.signed.json"),
            ],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    sign(&c, "c");
    std::fs::write(
        p.join("plan.json"),
        serde_json::to_vec(&serde_json::json!({"calls": [
            {"tool": "ContractWriteFile", "params": {"dir": "workspace", "path": "notes/hello.txt", "content": "hello from knox"}},
            {"tool": "ContractWriteFile", "params": {"dir": "workspace", "path": "../outside.txt", "content": "escaped"}},
        ]}))
        .unwrap(),
    )
    .unwrap();
    let knox_run = |contract: &str, authority: &str, out: &str| {
        run(
            p,
            &[
                "run",
                "--contract",
                contract,
                "--contract-authority",
                authority,
                "--prompt",
                "write the note",
                "--plan",
                "plan.json",
                "--journal",
                "--out",
                out,
            ],
        )
    };
    let o = knox_run("c.signed.json", "authority.pub", "out");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // Executed for real, beneath the capability root; the escape wrote nothing.
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/hello.txt")).unwrap(),
        "hello from knox"
    );
    assert!(!p.join("outside.txt").exists());
    let bundle = bundle_in(&p.join("out"));
    let b: knox_types::bundle::Bundle =
        serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    assert!(b.apm.inputs.contract.is_some());
    assert!(b.contract.is_some());
    let blocked: Vec<_> = b
        .nodes
        .iter()
        .filter(|n| n.kind == knox_types::aeg::NodeKind::Blocked)
        .filter_map(|n| n.block_reason.clone())
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert!(blocked[0].contains("path"), "{blocked:?}");
    assert_eq!(b.summary.counts.executed, 1);
    // The verifier: complete; under the signer's key complete; under another refused.
    let bundle = bundle.to_str().unwrap();
    let verify = |extra: &[&str]| {
        let mut a = vec!["verify", "--allow-simulated", bundle];
        a.extend_from_slice(extra);
        run(p, &a)
    };
    let v = verify(&[]);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    let text = String::from_utf8_lossy(&v.stdout);
    let id_of = |k: &str| {
        let pk: knox_types::bundle::PublicKey =
            serde_json::from_slice(&std::fs::read(p.join(k)).unwrap()).unwrap();
        knox_attest::key::key_id(&pk.public_key.0).to_string()
    };
    let (auth_id, other_id) = (id_of("authority.pub"), id_of("other.pub"));
    assert!(text.contains(&auth_id), "{text}");
    let j = verify(&["--json"]);
    let report: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(report["contract_authority"], serde_json::json!(auth_id));
    assert_eq!(
        verify(&["--contract-authority", "authority.pub"])
            .status
            .code(),
        Some(0)
    );
    let refused = verify(&["--contract-authority", "other.pub"]);
    assert_eq!(refused.status.code(), Some(3));
    let text = String::from_utf8_lossy(&refused.stdout);
    assert!(
        text.contains(&auth_id) && text.contains(&other_id),
        "{text}"
    );
    // The journal too.
    let journal = bundle.replace(".json", ".journal.jsonl");
    let jr = run(
        p,
        &[
            "verify",
            "--allow-simulated",
            "--contract-authority",
            "other.pub",
            &journal,
        ],
    );
    assert_eq!(jr.status.code(), Some(3));
    // Refused before anything runs: another authority, expired, malformed.
    let o = knox_run("c.signed.json", "other.pub", "out2");
    assert_eq!(
        o.status.code(),
        Some(65),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains(&other_id));
    let from = c["valid_from_ms"].as_u64().unwrap();
    c["valid_until_ms"] = serde_json::json!(from + 1);
    sign(&c, "expired");
    let o = knox_run("expired.signed.json", "authority.pub", "out3");
    assert_eq!(o.status.code(), Some(65));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not valid now"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(p.join("bad.signed.json"), "{\"payload\": 1}").unwrap();
    let o = knox_run("bad.signed.json", "authority.pub", "out4");
    assert_eq!(o.status.code(), Some(65));
    assert!(!p.join("out2").join("summary.json").exists());
}

/// A crash at any point of a run bounded by a contract leaves a journal that verifies
/// as a prefix: a `knox run --contract --journal` with an allowed write, a contract
/// denial, a pending high-impact write and an executor refusal (a planted symbolic
/// link), cut after every line, is never tampered and never unreadable.
#[test]
fn a_contract_journal_cut_at_every_line_boundary_verifies_as_a_prefix() {
    if !sandbox_here() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let ws = p.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink(p, ws.join("link")).unwrap();
    assert!(run(p, &["keygen", "--out", "alice"]).status.success());
    signed_contract(p, |c| {
        c["directories"]["workspace"]["root"] = serde_json::json!(ws.to_str().unwrap());
        c["directories"]["vault"] = serde_json::json!({
            "root": ws.to_str().unwrap(), "access": "write", "cost_cents": 1, "impact": "high"});
        let alice: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p.join("alice.pub")).unwrap()).unwrap();
        c["approvers"]["alice"] = alice["public_key"].clone();
        c["approval_required"] = serde_json::json!(["high"]);
    });
    let w = |dir: &str, path: &str| serde_json::json!({"tool": "ContractWriteFile", "params": {"dir": dir, "path": path, "content": "x"}});
    std::fs::write(
        p.join("plan.json"),
        serde_json::to_vec(&serde_json::json!({"calls": [
            w("workspace", "a.txt"),
            w("workspace", "../b.txt"),
            w("vault", "k.txt"),
            w("workspace", "link/c.txt"),
            w("workspace", "d.txt"),
        ]}))
        .unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(p.join("tokens")).unwrap();
    let o = run(
        p,
        &[
            "run",
            "--contract",
            "c.signed.json",
            "--contract-authority",
            "authority.pub",
            "--approvals",
            "tokens",
            "--prompt",
            "write",
            "--plan",
            "plan.json",
            "--journal",
            "--out",
            "out",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The pending write's request was published for an approver.
    assert_eq!(std::fs::read_dir(p.join("out/pending")).unwrap().count(), 1);
    let journal = std::fs::read_dir(p.join("out"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".journal.jsonl"))
        .unwrap();
    let bytes = std::fs::read(&journal).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    for named in ["\"path\"", "pending", "resolve_beneath", "\"settled\""] {
        assert!(text.contains(named), "{named} not in the journal");
    }
    // A journal header carries no manifest: the verifier is given the contract's.
    let manifest =
        knox_verify::manifests::Manifests::new().with(knox_engine::contract::manifest().unwrap());
    let (mut cuts, mut failures) = (0, Vec::new());
    for end in bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i + 1)
    {
        cuts += 1;
        match knox_verify::journal::verify_journal(
            &bytes[..end],
            &manifest,
            knox_verify::Options::DANGEROUS_SIMULATED,
        ) {
            Ok(r) if r.outcome == knox_verify::Outcome::Prefix => {}
            Ok(r) => failures.push(format!("cut at byte {end}: {r}")),
            Err(e) => failures.push(format!("cut at byte {end}: unreadable: {e}")),
        }
    }
    assert!(cuts > 20, "{cuts} lines");
    assert!(
        failures.is_empty(),
        "{} of {cuts} cuts are not a prefix:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `knox gateway mcp --contract` over stdio, driven by the MCP Inspector's CLI (a real
/// client, installed by `scripts/mcp-servers`): with no prompt, each session is
/// unplanned and bounded by the contract alone. The contract's four tools are listed;
/// a write inside the directory capability happens for real, a `../` escape is refused
/// by the contract's `path` check and writes nothing; each session's bundle verifies
/// complete, and `knox verify --contract-authority` names the signer.
#[test]
fn the_mcp_gateway_bounded_by_a_contract_serves_its_tools_to_a_real_client_without_a_prompt() {
    if !sandbox_here() {
        return;
    }
    let servers = super::gateway_mcp::installed();
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let ws = p.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    signed_contract(p, |c| {
        c["directories"]["workspace"]["root"] = serde_json::json!(ws.to_str().unwrap());
    });
    let inspector = |out: &str, method: &[&str]| {
        let cli =
            servers.join("node/node_modules/@modelcontextprotocol/inspector/cli/build/cli.js");
        let o = std::process::Command::new("node")
            .current_dir(p)
            .arg(cli)
            .arg("--cli")
            .arg(env!("CARGO_BIN_EXE_knox"))
            .args([
                "gateway",
                "mcp",
                "--contract",
                "c.signed.json",
                "--contract-authority",
                "authority.pub",
                "--out",
                out,
            ])
            .args(method)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        // The client hung up and killed the gateway: the bundle was sealed first.
        let bundle = super::support::run_file(&p.join(out), "mcp-stdio", 0, ".json");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !bundle.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let answer: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (answer, bundle)
    };
    let write = |out: &str, path: &str| {
        inspector(
            out,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "ContractWriteFile",
                "--tool-arg",
                "dir=workspace",
                "--tool-arg",
                &format!("path={path}"),
                "--tool-arg",
                "content=from the client",
            ],
        )
    };
    let (listed, _) = inspector("list", &["--method", "tools/list"]);
    let mut names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ContractExec",
            "ContractHttp",
            "ContractReadFile",
            "ContractWriteFile"
        ]
    );
    let (ok, ok_bundle) = write("inside", "notes/from-client.txt");
    assert_ne!(ok["isError"], true, "{ok}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/from-client.txt")).unwrap(),
        "from the client"
    );
    let (no, no_bundle) = write("escape", "../escaped.txt");
    assert_eq!(no["isError"], true, "{no}");
    assert_eq!(no["structuredContent"]["knox"]["guard"], "contract", "{no}");
    assert!(
        no["structuredContent"]["knox"]["reason"]
            .as_str()
            .unwrap()
            .contains("path"),
        "{no}"
    );
    assert!(!p.join("escaped.txt").exists());
    for bundle in [&ok_bundle, &no_bundle] {
        let b: knox_types::bundle::Bundle =
            serde_json::from_slice(&std::fs::read(bundle).unwrap()).unwrap();
        assert_eq!(
            b.apm.guards.trajectory,
            knox_types::apm::TrajectoryMode::Unplanned
        );
        assert!(b.apm.inputs.contract.is_some() && b.contract.is_some());
        let v = run(
            p,
            &[
                "verify",
                "--allow-simulated",
                "--contract-authority",
                "authority.pub",
                bundle.to_str().unwrap(),
            ],
        );
        assert_eq!(
            v.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
}

/// In `p`: a contract whose `vault` writes are high-impact and need alice's approval
/// (`alice.key`), a plan of one such write, and `tokens/` holding alice's token for it
/// (`knox approve`). Returns the token file.
fn approved_vault_write(p: &Path, ws: &Path) -> std::path::PathBuf {
    assert!(run(p, &["keygen", "--out", "alice"]).status.success());
    signed_contract(p, |c| {
        c["directories"]["workspace"]["root"] = serde_json::json!(ws.to_str().unwrap());
        c["directories"]["vault"] = serde_json::json!({
            "root": ws.to_str().unwrap(), "access": "write", "cost_cents": 1, "impact": "high"});
        let alice: serde_json::Value =
            serde_json::from_slice(&std::fs::read(p.join("alice.pub")).unwrap()).unwrap();
        c["approvers"]["alice"] = alice["public_key"].clone();
        c["approval_required"] = serde_json::json!(["high"]);
    });
    let params = serde_json::json!({"dir": "vault", "path": "k.txt", "content": "x"});
    let action = knox_types::Action::new("ContractWriteFile", params.clone()).unwrap();
    let call = serde_json::json!({"tool": "ContractWriteFile", "params": params});
    std::fs::write(p.join("k.json"), serde_json::to_vec(&call).unwrap()).unwrap();
    std::fs::write(
        p.join("plan.json"),
        serde_json::to_vec(&serde_json::json!({"calls": [call]})).unwrap(),
    )
    .unwrap();
    std::fs::create_dir_all(p.join("tokens")).unwrap();
    approve_vault_write(
        p,
        &p.join("tokens")
            .join(format!("{}.json", action.hash().to_hex())),
    )
}

/// The bundles under `out`, each verified (the contract's manifest, simulated evidence
/// accepted): every one must be complete. Returns how many executed the vault write
/// and how many refused it as a token already used.
fn vault_writes(out: &Path) -> (usize, usize) {
    let manifest =
        knox_verify::manifests::Manifests::new().with(knox_engine::contract::manifest().unwrap());
    let (mut executed, mut spent) = (0, 0);
    for e in std::fs::read_dir(out).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name == "summary.json" {
            continue;
        }
        let bundle = knox_verify::parse_bundle(&std::fs::read(&path).unwrap()).unwrap();
        let r = knox_verify::verify_bundle(
            &bundle,
            &manifest,
            knox_verify::Options::DANGEROUS_SIMULATED,
        );
        assert_eq!(r.outcome, knox_verify::Outcome::Complete, "{name}: {r}");
        let text = serde_json::to_string(&bundle.nodes).unwrap();
        executed += usize::from(text.contains("\"executed\":true"));
        spent += usize::from(text.contains("was already used by run"));
    }
    (executed, spent)
}

/// #35: an approval token is accepted once — across two `knox run` processes, and
/// across the runs of one `--tasks` run. The first use executes; every later one is
/// refused (`approval_used_by` in the evidence), its bundle still complete; the use is
/// recorded under the approvals directory (`.used/<nonce>.json`, naming the run).
#[test]
fn an_approval_token_is_accepted_once_across_processes_and_runs() {
    if !sandbox_here() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let ws = p.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let token = approved_vault_write(p, &ws);
    let knox_run_with = |approvals: &str, extra: &[&str], out: &str| {
        let mut args = vec![
            "run",
            "--contract",
            "c.signed.json",
            "--contract-authority",
            "authority.pub",
            "--approvals",
            approvals,
            "--out",
            out,
        ];
        args.extend_from_slice(extra);
        let o = run(p, &args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    let knox_run = |extra: &[&str], out: &str| knox_run_with("tokens", extra, out);
    // Two processes, one token.
    knox_run(&["--prompt", "write", "--plan", "plan.json"], "out1");
    assert_eq!(std::fs::read_to_string(ws.join("k.txt")).unwrap(), "x");
    assert_eq!(vault_writes(&p.join("out1")), (1, 0));
    let used: Vec<_> = std::fs::read_dir(p.join("tokens/.used"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(used.len(), 1, "{used:?}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&used[0]).unwrap()).unwrap();
    assert!(record["run_id"].is_string(), "{record}");
    std::fs::remove_file(ws.join("k.txt")).unwrap();
    knox_run(&["--prompt", "write", "--plan", "plan.json"], "out2");
    assert!(!ws.join("k.txt").exists(), "the second process wrote");
    assert_eq!(vault_writes(&p.join("out2")), (0, 1));
    // One `--tasks` run of three runs, with a fresh token: the first run uses it.
    std::fs::remove_file(&token).unwrap();
    let token = approve_vault_write(p, &token);
    let line = serde_json::json!({"prompt": "write", "plan":
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(p.join("plan.json")).unwrap()).unwrap()});
    std::fs::write(p.join("tasks.jsonl"), format!("{line}\n{line}\n{line}\n")).unwrap();
    knox_run(&["--tasks", "tasks.jsonl"], "out3");
    assert_eq!(vault_writes(&p.join("out3")), (1, 2));
    // The same token copied into two approval directories is not caught at run time
    // (each directory records its own use), but both uses are in the evidence: `knox
    // verify` of the two bundles names the reuse, exit 5.
    let name = token.file_name().unwrap().to_owned();
    let copy = approve_vault_write(p, &p.join("copy.json"));
    for dir in ["tokens-a", "tokens-b"] {
        std::fs::create_dir_all(p.join(dir)).unwrap();
        std::fs::copy(&copy, p.join(dir).join(&name)).unwrap();
    }
    knox_run_with(
        "tokens-a",
        &["--prompt", "write", "--plan", "plan.json"],
        "out4",
    );
    knox_run_with(
        "tokens-b",
        &["--prompt", "write", "--plan", "plan.json"],
        "out5",
    );
    let bundle = |out: &str| {
        std::fs::read_dir(p.join(out))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|f| f.extension().is_some_and(|e| e == "json") && !f.ends_with("summary.json"))
            .unwrap()
    };
    let (a, b) = (bundle("out4"), bundle("out5"));
    let alone = run(p, &["verify", "--allow-simulated", a.to_str().unwrap()]);
    assert_eq!(
        alone.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&alone.stdout)
    );
    let both = run(
        p,
        &[
            "verify",
            "--allow-simulated",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&both.stderr);
    assert_eq!(both.status.code(), Some(5), "{err}");
    assert!(
        err.contains("incident: approval token") && err.contains("used by 2 runs"),
        "{err}"
    );
}

/// A token of alice's for the vault write (`k.json`), at `token` (a new nonce each time).
fn approve_vault_write(p: &Path, token: &Path) -> std::path::PathBuf {
    let o = run(
        p,
        &[
            "approve",
            "k.json",
            "--contract",
            "c.signed.json",
            "--authority",
            "authority.pub",
            "--key",
            "alice.key",
            "--name",
            "alice",
            "--out",
            token.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    token.to_path_buf()
}
