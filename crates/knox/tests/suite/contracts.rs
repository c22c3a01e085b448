//! Signed capability contracts end to end: the EBP-CA scenarios escape without Knox
//! and are blocked by the named check under Knox; the `knox contract` and `knox
//! approve` commands.

use std::path::Path;
use std::process::Output;

use knox::contract_demo;

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
    // The fake home of the Knox half was never written.
    assert!(!dir.path().join("with-knox/home/.bashrc").exists());
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
    assert!(run(p, &["keygen", "--out", "authority"]).status.success());
    assert!(run(p, &["keygen", "--out", "alice"]).status.success());
    let o = run(p, &["contract", "new", "--out", "c.json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Name alice as approver of high-impact actions; make the API high impact.
    let mut c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("c.json")).unwrap()).unwrap();
    let alice: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("alice.pub")).unwrap()).unwrap();
    c["approvers"]["alice"] = alice["public_key"].clone();
    c["approval_required"] = serde_json::json!(["high"]);
    c["endpoints"]["example-api"]["impact"] = serde_json::json!("high");
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
