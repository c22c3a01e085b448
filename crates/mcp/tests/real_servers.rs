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
        profile: [Family::Offline].into_iter().collect(),
        syscalls: NODE_SYSCALLS.iter().map(|s| (*s).to_owned()).collect(),
        paths,
        endpoints: vec![],
        limits: None,
    }
}

/// Node 20's event loop and V8 beyond the baseline and the offline family.
const NODE_SYSCALLS: [&str; 7] = [
    "capget",
    "epoll_create1",
    "epoll_ctl",
    "epoll_wait",
    "epoll_pwait",
    "eventfd2",
    "getdents64",
];

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
        let g =
            knox_attest::grant::issue(&self.key, self.apm_hash, &action, "agent-0", self.calls.get())
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
    if let Some(ids) = host.tool_identity() {
        std::os::unix::fs::chown(&d, Some(ids.uid), Some(ids.gid)).unwrap();
    }
    d
}

#[test]
fn diag_filesystem() {
    let Some(modules) = node_modules() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let index = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js");
    let probe = host(vec![], tmp.path());
    let allowed = shared_dir(&probe, tmp.path(), "allowed");
    std::fs::write(allowed.join("notes.txt"), "hello").unwrap();
    let spec = ServerSpec::stdio(
        "fs",
        "node",
        &[index.to_str().unwrap().to_owned(), allowed.to_str().unwrap().to_owned()],
        node_needs(&modules, vec![grant(&allowed, &[Access::Read])]),
    );
    let h = host(vec![spec], tmp.path());
    let run = Run::new();
    let pk = run.key.public_key();
    let runner = run.runner(&h, &pk, "diag");
    let r = run.call(&*runner, "fs.read_text_file", json!({"path": allowed.join("notes.txt")}));
    eprintln!("{}", serde_json::to_string_pretty(&r.output).unwrap());
    for k in &r.kernel {
        eprintln!("{k:?}");
    }
    eprintln!("{:?}", r.confinement);
    let _ = Duration::from_secs(1);
}
