//! #34: the docs' commands over the shipped examples run as written. Each `sh` block
//! this test names is read from the document, its commands run one by one with `knox`
//! on the `PATH`, in a scratch folder holding the repository's `examples/` (so the
//! block's relative paths and its `out` folder work as a reader's would), and each must
//! exit 0.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests")]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The commands of the first fenced `sh` block after `heading` in `doc`: continuation
/// lines joined, comments dropped.
fn block(doc: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let after = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("`{heading}` not in {doc}"))
        .1;
    let body = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .unwrap_or_else(|| panic!("no sh block after `{heading}` in {doc}"))
        .0;
    let mut commands = Vec::new();
    let mut line = String::new();
    for raw in body.lines() {
        let code = raw.split(" # ").next().unwrap_or(raw).trim_end();
        match code.strip_suffix('\\') {
            Some(head) => line.push_str(head),
            None => {
                line.push_str(code);
                if !line.trim().is_empty() {
                    commands.push(line.trim().to_owned());
                }
                line.clear();
            }
        }
    }
    commands
}

/// Runs `commands` as a reader would, in a scratch folder beside `examples/`.
fn run_as_written(commands: &[String]) {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("examples"), dir.path().join("examples")).unwrap();
    // The pinned servers and SDKs, where a reader's checkout has them after
    // `scripts/mcp-servers` (the examples' `servers.toml` name them from there).
    std::os::unix::fs::symlink(root().join(".mcp-servers"), dir.path().join(".mcp-servers"))
        .unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_knox")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    assert!(!commands.is_empty());
    for c in commands {
        assert!(c.starts_with("knox "), "not a knox command: {c}");
        let o = std::process::Command::new("sh")
            .args(["-c", c])
            .current_dir(dir.path())
            .env("PATH", &path)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "`{c}` exited {:?}:\n{}{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn the_toolkit_docs_block_runs_as_written_over_the_bank_example() {
    let commands = block("docs/toolkits.md", "### Running a prompt over your tools");
    assert_eq!(commands.len(), 3, "{commands:?}");
    run_as_written(&commands);
}

/// The local-server example (`examples/notes/`: a FastMCP server, its manifest,
/// `servers.toml` and plan) runs as docs/mcp.md writes it, the server confined.
#[test]
fn the_mcp_docs_block_runs_as_written_over_the_notes_example() {
    let installed = root().join(".mcp-servers/venv/bin/python");
    assert!(
        installed.exists(),
        "the examples' Python SDK is missing: run scripts/mcp-servers (CI installs it)"
    );
    let commands = block("docs/mcp.md", "### Try it: a local server");
    assert_eq!(commands.len(), 2, "{commands:?}");
    run_as_written(&commands);
}
