//! knox-mcp against real MCP servers installed by `scripts/mcp-servers` (npm's
//! filesystem, memory and everything servers; a FastMCP server of the Python SDK).
//! Missing servers fail the tests under `CI=true` and skip them, loudly, otherwise.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use knox_agent::{RunContext, ToolHost, ToolResult, ToolRunner};
use knox_mcp::config::{Needs, ServerSpec};
use knox_mcp::{McpHost, Server};
use knox_sandbox::{Family, SandboxConfig};
use knox_types::Action;
use knox_types::apm::{Access, Apm, PathGrant};
use knox_types::digest::Digest;
use serde_json::{Value, json};

/// Where `scripts/mcp-servers` installs (or `KNOX_MCP_SERVERS`).
fn servers_dir() -> PathBuf {
    std::env::var_os("KNOX_MCP_SERVERS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.mcp-servers"),
        PathBuf::from,
    )
}

/// `rel` under the servers directory, or `None` (skip) when it is missing — a
/// failure under `CI=true`.
fn installed(rel: &str) -> Option<PathBuf> {
    let p = servers_dir().join(rel);
    if p.exists() {
        return Some(std::fs::canonicalize(p).unwrap());
    }
    let msg = format!(
        "MCP test server `{}` is missing: run scripts/mcp-servers",
        p.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("\n!!!!!!!!!! SKIPPED: {msg} !!!!!!!!!!\n");
    None
}

fn node_modules() -> Option<PathBuf> {
    installed("node/node_modules")
}

fn grant(path: &Path, access: &[Access]) -> PathGrant {
    PathGrant {
        path: path.to_str().unwrap().to_owned(),
        access: access.iter().copied().collect(),
    }
}

/// What a node MCP server needs: the runtime baseline, file work, its event loop,
/// and read access to its own packages.
fn node_needs(modules: &Path, mut paths: Vec<PathGrant>) -> Needs {
    paths.push(grant(modules, &[Access::Read]));
    paths.push(grant(Path::new("/etc/ssl/openssl.cnf"), &[Access::Read]));
    Needs {
        profile: [Family::Offline, Family::Node].into_iter().collect(),
        syscalls: Default::default(),
        paths,
        endpoints: vec![],
        limits: None,
    }
}

struct NoCanned;
impl ToolRunner for NoCanned {
    fn run(&self, _: &Action, _: Option<&knox_types::grant::Grant>) -> ToolResult {
        ToolResult::from(json!({"error": "no canned tools here"}))
    }
}

/// A run's context: a monitor key that signs grants, an APM hash they name.
struct Run {
    key: knox_attest::TeeKey,
    apm: Apm,
    apm_hash: Digest,
    calls: std::cell::Cell<u64>,
}

impl Run {
    fn new() -> Self {
        let apm: Apm = serde_json::from_str(include_str!("fixtures/apm.json")).unwrap();
        Self {
            key: knox_attest::TeeKey::generate().unwrap(),
            apm,
            apm_hash: Digest::sha256(b"knox-mcp test run"),
            calls: std::cell::Cell::new(0),
        }
    }

    fn runner<'r>(
        &'r self,
        host: &'r McpHost,
        pk: &'r knox_types::bundle::PublicKey,
        id: &'r str,
    ) -> Box<dyn ToolRunner + 'r> {
        host.runner(RunContext {
            apm: &self.apm,
            apm_hash: self.apm_hash,
            monitor_key: pk,
            run_id: id,
            canned: &NoCanned,
        })
        .unwrap()
    }

    /// Calls `tool` with a fresh grant.
    fn call(&self, runner: &dyn ToolRunner, tool: &str, params: Value) -> ToolResult {
        // Built directly: `Action::new` still refuses the dotted names MCP tools have
        // (`SERVER.TOOL`) until the user-manifest work lands.
        let action = Action {
            tool: tool.to_owned(),
            params: params.as_object().cloned().unwrap(),
        };
        self.calls.set(self.calls.get() + 1);
        let g = knox_attest::grant::issue(
            &self.key,
            self.apm_hash,
            &action,
            "agent-0",
            self.calls.get(),
        )
        .unwrap();
        runner.run(&action, Some(&g))
    }
}

fn host(servers: Vec<ServerSpec>, dir: &Path) -> McpHost {
    let servers: Vec<Server> = servers
        .into_iter()
        .map(|s| s.validate(Path::new("/")).unwrap())
        .collect();
    McpHost::new(servers, dir.join("ws"), SandboxConfig::default()).unwrap()
}

/// The text of an MCP tool result.
fn text(r: &ToolResult) -> String {
    r.output["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// A directory the tools' uid can use (tempfile makes 0700 root-owned ones).
fn shared_dir(host: &McpHost, parent: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let d = parent.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The uid a root caller's servers run as; a non-root caller's run as itself
    // (then the chown is refused, and not needed).
    let ids = host
        .tool_identity()
        .unwrap_or_else(|| knox_sandbox::RunAs::from_env().unwrap());
    let _ = std::os::unix::fs::chown(&d, Some(ids.uid), Some(ids.gid));
    d
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// What the Python FastMCP server needs: its interpreter's library, the venv, the
/// fixture script, and the `python` family (the interpreter and asyncio's event loop,
/// whose self-pipe is a UNIX stream socket pair; no socket reaches anything else).
fn python_needs(venv: &Path, mut paths: Vec<PathGrant>) -> Needs {
    paths.push(grant(venv, &[Access::Read]));
    paths.push(grant(Path::new("/usr/lib/python3.11"), &[Access::Read]));
    paths.push(grant(&fixtures(), &[Access::Read]));
    Needs {
        profile: [Family::Offline, Family::Python].into_iter().collect(),
        syscalls: Default::default(),
        paths,
        endpoints: vec![],
        limits: None,
    }
}

/// The Python server as a stdio server spec.
fn python_server(name: &str, venv: &Path, paths: Vec<PathGrant>) -> ServerSpec {
    let python = venv.join("bin/python");
    let script = fixtures().join("fastmcp_server.py");
    ServerSpec::stdio(
        name,
        python.to_str().unwrap(),
        &[script.to_str().unwrap().to_owned(), "stdio".to_owned()],
        python_needs(venv, paths),
    )
}

/// Turns the kernel's audit on for the test's life (root, Landlock ABI 7), so that
/// Landlock's file denials are read back into the evidence; puts it back after.
/// `None` where it cannot be (then a Landlock denial is only the server's errno).
struct AuditOn(bool);

impl AuditOn {
    fn take() -> Option<Self> {
        let before = knox_sandbox::audit::enable_kernel_audit().ok()?;
        Some(Self(before.enabled == 0))
    }
}

impl Drop for AuditOn {
    fn drop(&mut self) {
        if self.0 {
            let _ = knox_sandbox::audit::set_kernel_audit(false);
        }
    }
}

fn refused(r: &ToolResult) -> bool {
    r.kernel.iter().any(|e| e.event == "refusal")
}

fn fs_server(modules: &Path, args: &[&Path], needs_paths: Vec<PathGrant>) -> ServerSpec {
    let index = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    let mut argv = vec![index.to_str().unwrap().to_owned()];
    argv.extend(args.iter().map(|a| a.to_str().unwrap().to_owned()));
    ServerSpec::stdio("fs", "node", &argv, node_needs(modules, needs_paths))
}

#[test]
fn the_filesystem_server_reaches_its_needs_and_the_kernel_denies_and_records_the_rest() {
    let Some(modules) = node_modules() else {
        return;
    };
    let audit = AuditOn::take();
    let tmp = tempfile::tempdir().unwrap();
    let probe = host(vec![], tmp.path());
    let allowed = shared_dir(&probe, tmp.path(), "allowed");
    let outside = shared_dir(&probe, tmp.path(), "outside");
    std::fs::write(allowed.join("notes.txt"), "hello from the workspace").unwrap();
    // Readable by any uid: only the sandbox stands between the server and the file.
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET-CANARY").unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            outside.join("secret.txt"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
    }
    // The server is told both directories; the needs grant only one.
    let spec = fs_server(
        &modules,
        &[&allowed, &outside],
        vec![grant(
            &allowed,
            &[Access::Read, Access::Write, Access::Create],
        )],
    );
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "fs-run");
    let r = run.call(
        &*runner,
        "fs.read_text_file",
        json!({"path": allowed.join("notes.txt")}),
    );
    assert_eq!(text(&r), "hello from the workspace", "{}", r.output);
    let c = r.confinement.as_ref().unwrap();
    assert_eq!(c["mcp_server"], "fs");
    assert_eq!(c["transport"], "stdio");
    assert_eq!(c["seccomp"], "user-notification");
    let r = run.call(
        &*runner,
        "fs.write_file",
        json!({"path": allowed.join("new.txt"), "content": "written"}),
    );
    assert_ne!(r.output["isError"], true, "{}", r.output);
    assert_eq!(
        std::fs::read_to_string(allowed.join("new.txt")).unwrap(),
        "written"
    );
    // The server's own check lets `outside` through (it was given it); the kernel does not.
    let r = run.call(
        &*runner,
        "fs.read_text_file",
        json!({"path": outside.join("secret.txt")}),
    );
    let out = r.output.to_string();
    assert!(!out.contains("TOP-SECRET-CANARY"), "{out}");
    assert_eq!(r.output["isError"], true, "{out}");
    assert!(
        out.contains("EACCES") || out.contains("permission denied"),
        "{out}"
    );
    let r2 = run.call(
        &*runner,
        "fs.write_file",
        json!({"path": outside.join("planted.txt"), "content": "x"}),
    );
    assert_eq!(r2.output["isError"], true, "{}", r2.output);
    assert!(!outside.join("planted.txt").exists());
    let audited = r
        .confinement
        .as_ref()
        .is_some_and(|c| c["layers"]["enforced_by"]["denial-audit"] == "landlock");
    if audited {
        // Recorded as kernel events under the call, naming the path.
        let denied: Vec<String> = r.kernel.iter().map(|e| format!("{e:?}")).collect();
        assert!(
            r.kernel.iter().any(|e| e.event == "syscall"
                && e.detail
                    .as_deref()
                    .is_some_and(|d| d.contains("secret.txt"))),
            "{denied:?}"
        );
        assert!(
            r2.kernel.iter().any(|e| e.event == "syscall"
                && e.detail.as_deref().is_some_and(|d| d.contains("outside"))),
            "{:?}",
            r2.kernel
        );
    } else {
        assert!(
            audit.is_none() || std::env::var_os("CI").is_none(),
            "the kernel's audit is on but Landlock's denials were not read: {:?}",
            r.confinement
        );
        eprintln!(
            "NOTE: Landlock's audit is unavailable here: the denial is only the server's EACCES"
        );
    }
    drop(audit);
}

#[test]
fn roots_come_from_the_policy_and_a_wider_root_is_refused() {
    let Some(modules) = node_modules() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let probe = host(vec![], tmp.path());
    let data = shared_dir(&probe, tmp.path(), "data");
    let docs = shared_dir(&probe, &data, "docs");
    let other = shared_dir(&probe, tmp.path(), "other");
    std::fs::write(docs.join("a.txt"), "in the root").unwrap();
    std::fs::write(data.join("b.txt"), "beside the root").unwrap();
    // No directory arguments: the server takes its directories from `roots/list`.
    let mut spec = fs_server(&modules, &[], vec![grant(&data, &[Access::Read])]);
    spec.roots = Some(vec![docs.to_str().unwrap().to_owned()]);
    // A root the needs do not cover is refused when the file is loaded...
    let mut wider = spec.clone();
    wider.roots = Some(vec![other.to_str().unwrap().to_owned()]);
    let e = wider.validate(Path::new("/")).unwrap_err().to_string();
    assert!(e.contains("not within a path the needs grant"), "{e}");
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "roots");
    // ... and the server sees exactly the policy's root.
    // The server asks `roots/list` once initialized, concurrently with the first
    // calls: until the answer is in, it allows nothing.
    let mut dirs = String::new();
    for _ in 0..50 {
        let r = run.call(&*runner, "fs.list_allowed_directories", json!({}));
        dirs = text(&r);
        if dirs.contains('/') {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(dirs.contains(docs.to_str().unwrap()), "{dirs}");
    assert!(!dirs.contains(other.to_str().unwrap()), "{dirs}");
    let r = run.call(
        &*runner,
        "fs.read_text_file",
        json!({"path": docs.join("a.txt")}),
    );
    assert_eq!(text(&r), "in the root", "{}", r.output);
    let r = run.call(
        &*runner,
        "fs.read_text_file",
        json!({"path": data.join("b.txt")}),
    );
    assert_eq!(r.output["isError"], true, "{}", r.output);
}

#[test]
fn the_memory_server_is_one_process_per_run_reused_across_calls() {
    let Some(modules) = node_modules() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let index = modules.join("@modelcontextprotocol/server-memory/dist/index.js");
    let mut spec = ServerSpec::stdio(
        "memory",
        "node",
        &[index.to_str().unwrap().to_owned()],
        node_needs(&modules, vec![]),
    );
    // In the run's workspace (`{workspace}` is replaced per run).
    spec.env
        .insert("MEMORY_FILE_PATH".into(), "{workspace}/memory.jsonl".into());
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    {
        let runner = run.runner(&h, &pk, "mem-1");
        let r = run.call(
            &*runner,
            "memory.create_entities",
            json!({"entities": [{"name": "Knox", "entityType": "project", "observations": ["mediates tools"]}]}),
        );
        assert_ne!(r.output["isError"], true, "{}", r.output);
        let r = run.call(&*runner, "memory.read_graph", json!({}));
        assert!(text(&r).contains("mediates tools"), "{}", r.output);
        assert!(tmp.path().join("ws/mem-1/memory.jsonl").exists());
    }
    // The run ended: its process and workspace are gone; the next run starts afresh.
    assert!(!tmp.path().join("ws/mem-1").exists());
    let runner = run.runner(&h, &pk, "mem-2");
    let r = run.call(&*runner, "memory.read_graph", json!({}));
    assert!(!text(&r).contains("mediates tools"), "{}", r.output);
}

#[test]
fn the_everything_server_answers_and_offers_no_sampling_tool() {
    let Some(modules) = node_modules() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let index = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    let probe = host(vec![], tmp.path());
    let data = shared_dir(&probe, tmp.path(), "data");
    let mut spec = ServerSpec::stdio(
        "every",
        "node",
        &[index.to_str().unwrap().to_owned(), "stdio".to_owned()],
        node_needs(&modules, vec![grant(&data, &[Access::Read])]),
    );
    spec.roots = Some(vec![data.to_str().unwrap().to_owned()]);
    let server = spec.validate(Path::new("/")).unwrap();
    let h = McpHost::new(
        vec![server.clone()],
        tmp.path().join("ws"),
        SandboxConfig::default(),
    )
    .unwrap();
    // Knox advertises roots, not sampling: the server registers no sampling tool.
    let (tools, _) = h.list_tools(&server).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(
        names.contains(&"echo") && names.contains(&"get-roots-list"),
        "{names:?}"
    );
    assert!(!names.contains(&"trigger-sampling-request"), "{names:?}");
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "every");
    let r = run.call(&*runner, "every.echo", json!({"message": "ping"}));
    assert!(text(&r).contains("ping"), "{}", r.output);
    let r = run.call(&*runner, "every.get-sum", json!({"a": 2, "b": 3}));
    assert!(text(&r).contains('5'), "{}", r.output);
    let r = run.call(&*runner, "every.get-roots-list", json!({}));
    assert!(text(&r).contains(data.to_str().unwrap()), "{}", r.output);
    // A tool the server does not have: a protocol error, the session stays usable.
    let r = run.call(
        &*runner,
        "every.trigger-sampling-request",
        json!({"prompt": "hi"}),
    );
    assert!(
        r.output.to_string().to_lowercase().contains("not found") || r.output["isError"] == true,
        "{}",
        r.output
    );
    let r = run.call(&*runner, "every.echo", json!({"message": "still here"}));
    assert!(text(&r).contains("still here"), "{}", r.output);
}

#[test]
fn the_python_fastmcp_server_answers_and_its_misbehaviour_is_contained() {
    let Some(venv) = installed("venv") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let probe = host(vec![], tmp.path());
    let data = shared_dir(&probe, tmp.path(), "data");
    let mut spec = python_server("py", &venv, vec![grant(&data, &[Access::Read])]);
    spec.roots = Some(vec![data.to_str().unwrap().to_owned()]);
    spec.timeout_secs = Some(5);
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "py");
    let r = run.call(&*runner, "py.add", json!({"a": 2, "b": 40}));
    assert_eq!(r.output["structuredContent"]["result"], 42, "{}", r.output);
    // Roots: the policy's, never anything else.
    let r = run.call(&*runner, "py.client_roots", json!({}));
    assert_eq!(
        text(&r),
        format!("file://{}", data.display()),
        "{}",
        r.output
    );
    // Sampling is refused, and the refusal is recorded under the call.
    let r = run.call(&*runner, "py.ask_model", json!({}));
    assert!(text(&r).contains("sampling refused"), "{}", r.output);
    assert!(
        r.kernel.iter().any(|e| e.event == "refusal"
            && e.detail
                .as_deref()
                .is_some_and(|d| d.contains("sampling/createMessage"))),
        "{:?}",
        r.kernel
    );
    // /etc/passwd is outside the needs: Landlock says no.
    let r = run.call(&*runner, "py.read_path", json!({"path": "/etc/passwd"}));
    assert!(text(&r).contains("Permission denied"), "{}", r.output);
    // A crash: a clear error, the exit recorded; the next call gets a fresh process.
    let r = run.call(&*runner, "py.crash", json!({}));
    assert!(
        r.output["error"].as_str().is_some_and(|e| e.contains("py")),
        "{}",
        r.output
    );
    assert!(
        r.kernel.iter().any(|e| e.event == "limit"
            && e.detail
                .as_deref()
                .is_some_and(|d| d.contains("exited with status 3"))),
        "{:?}",
        r.kernel
    );
    let r = run.call(&*runner, "py.add", json!({"a": 1, "b": 1}));
    assert_eq!(r.output["structuredContent"]["result"], 2, "{}", r.output);
    // A hang: the timeout ends it, the tree is killed; the next call works again.
    let started = std::time::Instant::now();
    let r = run.call(&*runner, "py.hang", json!({}));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        r.output["error"]
            .as_str()
            .is_some_and(|e| e.contains("timeout")),
        "{}",
        r.output
    );
    assert!(
        r.kernel.iter().any(|e| e.event == "limit"),
        "{:?}",
        r.kernel
    );
    let r = run.call(&*runner, "py.add", json!({"a": 3, "b": 4}));
    assert_eq!(r.output["structuredContent"]["result"], 7, "{}", r.output);
    // An exit between two calls: the next call finds the server gone, records how it
    // ended and gets a fresh process (the run's runtime only runs during calls).
    let r = run.call(&*runner, "py.exit_soon", json!({}));
    assert_eq!(text(&r), "leaving", "{}", r.output);
    std::thread::sleep(Duration::from_millis(1500));
    let r = run.call(&*runner, "py.add", json!({"a": 5, "b": 5}));
    assert_eq!(r.output["structuredContent"]["result"], 10, "{}", r.output);
    assert!(
        r.kernel.iter().any(|e| e.event == "limit"
            && e.detail
                .as_deref()
                .is_some_and(|d| d.contains("exited with status 4"))),
        "{:?}",
        r.kernel
    );
}

#[test]
fn calls_need_a_valid_unconsumed_grant_and_a_declared_server() {
    let Some(venv) = installed("venv") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let h = host(vec![python_server("py", &venv, vec![])], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "grants");
    let action = Action {
        tool: "py.add".into(),
        params: json!({"a": 1, "b": 2}).as_object().cloned().unwrap(),
    };
    assert!(refused(&runner.run(&action, None)));
    let g = knox_attest::grant::issue(&run.key, run.apm_hash, &action, "agent-0", 1).unwrap();
    let ok = runner.run(&action, Some(&g));
    assert!(!refused(&ok), "{ok:?}");
    assert!(refused(&runner.run(&action, Some(&g))), "replayed");
    let forger = knox_attest::TeeKey::generate().unwrap();
    let g = knox_attest::grant::issue(&forger, run.apm_hash, &action, "agent-0", 2).unwrap();
    assert!(refused(&runner.run(&action, Some(&g))), "forged");
    // From inside an async runtime (a gateway's), a call works the same.
    let g = knox_attest::grant::issue(&run.key, run.apm_hash, &action, "agent-0", 3).unwrap();
    let outer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let inside = outer.block_on(async { runner.run(&action, Some(&g)) });
    assert_eq!(
        inside.output["structuredContent"]["result"], 3,
        "{}",
        inside.output
    );
    for tool in ["nope.add", "add", "py."] {
        let r = run.call(&*runner, tool, json!({}));
        assert!(refused(&r), "{tool}: {r:?}");
    }
    // Ending the run and dropping the host inside an async runtime does not panic.
    outer.block_on(async move { drop(runner) });
    outer.block_on(async move { drop(h) });
}

#[test]
fn a_server_that_speaks_garbage_or_dies_gives_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let sh = |name: &str, script: &str| {
        let mut s = ServerSpec::stdio(
            name,
            "/bin/sh",
            &["-c".to_owned(), script.to_owned()],
            Needs::default(),
        );
        s.timeout_secs = Some(3);
        s
    };
    let h = host(
        vec![
            sh(
                "garbage",
                "while read line; do echo '{not json at all'; done",
            ),
            sh("dies", "exit 7"),
            sh("silent", "while read line; do :; done"),
        ],
        tmp.path(),
    );
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "bad");
    for (tool, want) in [
        ("garbage.x", "garbage"),
        ("dies.x", "exited with status 7"),
        ("silent.x", "no MCP handshake within 3 s"),
    ] {
        let started = std::time::Instant::now();
        let r = run.call(&*runner, tool, json!({}));
        let e = r.output["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            e.contains("did not start") && e.contains(tool.split('.').next().unwrap()),
            "{tool}: {e}"
        );
        assert!(e.contains(want) || want == "garbage", "{tool}: {e}");
        assert!(
            r.kernel.iter().any(|k| k.event == "limit"),
            "{tool}: {:?}",
            r.kernel
        );
        assert!(started.elapsed() < Duration::from_secs(20), "{tool}");
    }
}

/// A tiny HTTP server answering every request with `status` and `headers`, counting
/// the connections it accepted.
fn http_stub(
    status: &'static str,
    headers: String,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&hits);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut s) = stream else { break };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0_u8; 8192];
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\n{headers}Content-Length: 0\r\nConnection: close\r\n\r\n"
            );
            if n > 50 {
                break;
            }
        }
    });
    (port, hits)
}

#[test]
fn an_http_server_is_reached_at_its_declared_url_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (elsewhere, elsewhere_hits) = http_stub("200 OK", String::new());
    let (port, hits) = http_stub(
        "307 Temporary Redirect",
        format!("Location: http://127.0.0.1:{elsewhere}/mcp\r\n"),
    );
    let mut spec = ServerSpec::http("web", &format!("http://127.0.0.1:{port}/mcp"));
    spec.timeout_secs = Some(5);
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "http");
    let r = run.call(&*runner, "web.anything", json!({}));
    let e = r.output["error"].as_str().unwrap_or_default();
    assert!(
        e.contains("did not start") && e.contains("web"),
        "{}",
        r.output
    );
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert_eq!(
        elsewhere_hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "followed a redirect"
    );
}

/// Waits until something accepts on `port`.
fn wait_listening(port: u16, child: &mut std::process::Child) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the HTTP server exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on {port}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child when dropped.
struct Reaped(std::process::Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn streamable_http_servers_answer_through_the_host() {
    let (Some(modules), Some(venv)) = (node_modules(), installed("venv")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // The servers run elsewhere (here: unconfined processes on loopback).
    let node_port = free_port();
    let mut node = Reaped(
        std::process::Command::new("node")
            .arg(modules.join("@modelcontextprotocol/server-everything/dist/index.js"))
            .arg("streamableHttp")
            .env("PORT", node_port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(node_port, &mut node.0);
    let py_port = free_port();
    let mut py = Reaped(
        std::process::Command::new(venv.join("bin/python"))
            .arg(fixtures().join("fastmcp_server.py"))
            .arg("streamable-http")
            .env("PORT", py_port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(py_port, &mut py.0);
    let h = host(
        vec![
            ServerSpec::http("every", &format!("http://127.0.0.1:{node_port}/mcp")),
            ServerSpec::http("py", &format!("http://127.0.0.1:{py_port}/mcp")),
        ],
        tmp.path(),
    );
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "http");
    let r = run.call(&*runner, "every.echo", json!({"message": "over http"}));
    assert!(text(&r).contains("over http"), "{}", r.output);
    assert_eq!(
        r.confinement.as_ref().unwrap()["transport"],
        "streamable-http"
    );
    let r = run.call(&*runner, "py.add", json!({"a": 20, "b": 22}));
    assert_eq!(r.output["structuredContent"]["result"], 42, "{}", r.output);
    let r = run.call(&*runner, "py.ask_model", json!({}));
    assert!(text(&r).contains("sampling refused"), "{}", r.output);
    assert!(refused(&r), "{:?}", r.kernel);
}

#[test]
fn import_reads_tools_list_of_a_confined_server_into_a_reviewed_skeleton() {
    let Some(modules) = node_modules() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let probe = host(vec![], tmp.path());
    let data = shared_dir(&probe, tmp.path(), "data");
    let spec = fs_server(&modules, &[&data], vec![grant(&data, &[Access::Read])]);
    let server = spec.validate(Path::new("/")).unwrap();
    let h = McpHost::new(
        vec![server.clone()],
        tmp.path().join("ws"),
        SandboxConfig::default(),
    )
    .unwrap();
    let (tools, _) = h.list_tools(&server).unwrap();
    let imported = knox_mcp::import::imported("fs", &tools);
    let effect = |n: &str| imported.iter().find(|t| t.name == n).map(|t| t.effect);
    use knox_mcp::import::Effect;
    assert_eq!(effect("fs.read_text_file"), Some(Effect::Read));
    assert_eq!(effect("fs.write_file"), Some(Effect::Write));
    assert_eq!(effect("fs.move_file"), Some(Effect::Write));
    assert!(imported.iter().all(|t| !t.review.is_empty()));
    let schema = &imported
        .iter()
        .find(|t| t.name == "fs.read_text_file")
        .unwrap()
        .input_schema;
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["path"].is_object(), "{schema}");
}
