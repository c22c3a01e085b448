//! The contract executor on real files and processes: pinned binaries executed as the
//! descriptor that was hashed, paths resolved beneath their root, grants single-use.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use knox_attest::{PartyKey, TeeKey};
use knox_broker::contract::{ContractExecutor, Refused};
use knox_broker::pinned::{self, PinError};
use knox_contract::example::template;
use knox_contract::format::{ArgPattern, Contract, Hole};
use knox_contract::signed;
use knox_sandbox::{Sandbox, SandboxConfig};
use knox_types::Action;
use knox_types::digest::Digest;
use serde_json::json;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    tools: PathBuf,
    ws: PathBuf,
    monitor: TeeKey,
    session: Digest,
    exec: ContractExecutor,
}

fn real(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find_map(|p| std::fs::canonicalize(p).ok())
}

fn install(src: &Path, dst: &Path) {
    std::fs::copy(src, dst).unwrap();
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn fixture() -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tools = root.join("tools");
    let ws = root.join("ws");
    for d in [&tools, &ws] {
        std::fs::create_dir(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    install(&real("wc")?, &tools.join("wc"));
    let pin = pinned::hash_path(&tools.join("wc")).unwrap().to_hex();
    let now = knox_attest::grant::now_ms();
    let mut c: Contract = template(now - 1000, now + 3_600_000, &pin);
    c.directories.get_mut("workspace").unwrap().root = ws.to_str().unwrap().into();
    c.directories.get_mut("docs").unwrap().root = tools.to_str().unwrap().into();
    let wc = c.executables.get_mut("wc").unwrap();
    wc.root = tools.to_str().unwrap().into();
    wc.argv.push(vec![
        ArgPattern::Lit("-c".into()),
        ArgPattern::Hole(Hole::Relpath),
    ]);
    let authority = PartyKey::from_seed([3; 32]);
    let env = signed::sign(&authority, &c).unwrap();
    let verified = signed::verify(&env, &authority.public_key()).unwrap();
    let sandbox = match Sandbox::new(SandboxConfig {
        run_as: Some(knox_sandbox::RunAs::from_env().unwrap()),
        ..SandboxConfig::default()
    }) {
        Ok(s) => s,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("skipping: kernel sandbox unavailable here: {e}");
            return None;
        }
        Err(e) => panic!("kernel sandbox unavailable in CI: {e}"),
    };
    let monitor = TeeKey::generate().unwrap();
    let session = verified.hash;
    let exec = ContractExecutor::new(
        sandbox,
        verified,
        monitor.public_key(),
        session,
        root.join("scratch"),
    )
    .unwrap();
    Some(Fixture {
        _dir: dir,
        root,
        tools,
        ws,
        monitor,
        session,
        exec,
    })
}

fn action(tool: &str, params: serde_json::Value) -> Action {
    Action::new(tool, params).unwrap()
}

impl Fixture {
    fn run(&self, a: &Action) -> Result<knox_broker::contract::Executed, Refused> {
        let g = knox_attest::grant::issue(&self.monitor, self.session, a, "agent", 1).unwrap();
        self.exec.execute(a, Some(&g))
    }
}

#[test]
fn a_pinned_binary_runs_confined_and_a_swapped_one_is_refused() {
    let Some(f) = fixture() else { return };
    let w = action(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "notes/a.txt", "content": "one\ntwo\n"}),
    );
    f.run(&w).unwrap();
    let e = action(
        "ContractExec",
        json!({"exe": "wc", "args": ["-l", "notes/a.txt"]}),
    );
    let out = f.run(&e).unwrap();
    assert_eq!(out.output["exit_code"], 0, "{}", out.output);
    assert!(
        out.output["stdout"].as_str().unwrap().starts_with('2'),
        "{}",
        out.output
    );
    // the binary replaced by another one (a copy of `cat`) at the same path
    let Some(cat) = real("cat") else { return };
    let evil = f.tools.join("evil");
    install(&cat, &evil);
    std::fs::rename(&evil, f.tools.join("wc")).unwrap();
    match f.run(&e) {
        Err(r @ Refused::Pin(PinError::Digest { .. })) => assert_eq!(r.check(), "pinned_digest"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_swap_between_hash_and_execve_does_not_run_the_swapped_file() {
    let Some(f) = fixture() else { return };
    // Check (open + hash) first, as the executor does.
    let cap = f
        .exec
        .contract()
        .contract
        .executables
        .get("wc")
        .unwrap()
        .clone();
    let held = pinned::open_pinned(&cap).unwrap();
    // Then swap: a script that would leave a marker if it ever ran.
    let marker = f.root.join("marker");
    let script = f.tools.join("swap");
    std::fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&script, f.tools.join("wc")).unwrap();
    // Use: the sandbox executes the held descriptor, never the path. The old inode
    // is no longer at its granted path, so the kernel layer refuses it (fail
    // closed) — or, where it is still reachable, the pinned bytes run. The swapped
    // script never runs.
    let sandbox = Sandbox::new(SandboxConfig {
        run_as: Some(knox_sandbox::RunAs::from_env().unwrap()),
        ..SandboxConfig::default()
    })
    .unwrap();
    let policy = knox_sandbox::SandboxPolicy::for_families(&[knox_sandbox::Family::Offline], &f.ws)
        .unwrap()
        .grant(
            f.tools.join("wc"),
            &[knox_sandbox::Access::Read, knox_sandbox::Access::Execute],
        );
    let prepared = sandbox.prepare(&policy).unwrap();
    match sandbox.spawn_fd(&prepared, held.fd, &["wc", "--version"], &[], b"") {
        Ok(child) => {
            let out = child.wait().unwrap();
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("wc"),
                "{out:?}"
            );
        }
        Err(e) => eprintln!("refused (fail closed): {e}"),
    }
    assert!(!marker.exists(), "the swapped file ran");
}

#[test]
fn escapes_through_symlinks_and_traversal_are_stopped_by_the_kernel() {
    let Some(f) = fixture() else { return };
    let home = f.root.join("home");
    std::fs::create_dir(&home).unwrap();
    std::os::unix::fs::symlink(&home, f.ws.join("escape")).unwrap();
    let a = action(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "escape/.bashrc", "content": "backdoor"}),
    );
    let r = f.run(&a).unwrap_err();
    assert_eq!(r.check(), "resolve_beneath", "{r}");
    assert!(!home.join(".bashrc").exists());
    let t = action(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "../home/.bashrc", "content": "backdoor"}),
    );
    assert_eq!(f.run(&t).unwrap_err().check(), "path");
    let x = action(
        "ContractExec",
        json!({"exe": "wc", "args": ["-l", "escape/x"]}),
    );
    // argv matches (a clean relative path): the tool runs, and what it reaches is the
    // kernel sandbox's business: the file does not exist beneath the workspace.
    let out = f.run(&x).unwrap();
    assert_ne!(out.output["exit_code"], 0);
}

#[test]
fn grants_are_required_bound_and_single_use() {
    let Some(f) = fixture() else { return };
    let a = action(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "a.txt", "content": "x"}),
    );
    assert_eq!(f.exec.execute(&a, None).unwrap_err().check(), "grant");
    let g = knox_attest::grant::issue(&f.monitor, f.session, &a, "agent", 1).unwrap();
    f.exec.execute(&a, Some(&g)).unwrap();
    let again = f.exec.execute(&a, Some(&g)).unwrap_err();
    assert!(again.to_string().contains("already used"), "{again}");
    let b = action(
        "ContractWriteFile",
        json!({"dir": "workspace", "path": "b.txt", "content": "x"}),
    );
    let g2 = knox_attest::grant::issue(&f.monitor, f.session, &a, "agent", 2).unwrap();
    assert_eq!(f.exec.execute(&b, Some(&g2)).unwrap_err().check(), "grant");
    // a grant the monitor did not sign
    let forged =
        knox_attest::grant::issue(&TeeKey::generate().unwrap(), f.session, &b, "agent", 3).unwrap();
    assert_eq!(
        f.exec.execute(&b, Some(&forged)).unwrap_err().check(),
        "grant"
    );
    // outside the contract even with a valid grant: the executor re-checks
    let sh = action("ContractExec", json!({"exe": "sh", "args": ["-c", "id"]}));
    let g3 = knox_attest::grant::issue(&f.monitor, f.session, &sh, "agent", 4).unwrap();
    assert_eq!(
        f.exec.execute(&sh, Some(&g3)).unwrap_err().check(),
        "capability"
    );
}
