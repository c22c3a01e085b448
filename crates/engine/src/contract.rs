//! Runs bounded by a signed capability contract: the toolkit manifest that offers the
//! contract's four tools, and approval tokens from a directory.
//!
//! A session built with [`SessionBuilder::contract`](crate::SessionBuilder::contract)
//! puts the contract's hash into every APM and its envelope into every bundle; the
//! guards decide each proposal with the contract (and with the plan, when the planner
//! planned one). The contract's tools are Knox tools of the toolkit `Contract`, so the
//! planner can plan them and the input guard can read them strictly.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use knox_agent::{Plan, PlanError, PlanRequest, Planner};
use knox_monitor::monitor::ApprovalSource;
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::TrajectoryMode;
use knox_types::bundle::{ModelInfo, ModelRole};
use knox_types::digest::Digest;
use serde_json::Value;

/// The `Contract` toolkit: `ContractReadFile`, `ContractWriteFile`, `ContractExec`,
/// `ContractHttp` (see `knox_contract::action`), in the manifest's tool format.
pub const TOOLS: &str = r#"[
  {"toolkit": "Contract", "name_for_model": "Contract", "name_for_human": "Capability contract",
   "description_for_model": "Act only through the capabilities of the signed contract.",
   "description_for_human": "Files, pinned executables and endpoints named by a signed capability contract.",
   "tools": [
     {"name": "ReadFile", "summary": "Read a file beneath a directory capability.", "parameters": [
        {"name": "dir", "type": "string", "description": "directory capability id", "required": true},
        {"name": "path", "type": "string", "description": "path relative to its root", "required": true}],
      "returns": [{"name": "content", "type": "string", "description": "the file's content"}]},
     {"name": "WriteFile", "summary": "Write a file beneath a directory capability with write access.", "parameters": [
        {"name": "dir", "type": "string", "description": "directory capability id", "required": true},
        {"name": "path", "type": "string", "description": "path relative to its root", "required": true},
        {"name": "content", "type": "string", "description": "UTF-8 content", "required": true}],
      "returns": [{"name": "written", "type": "integer", "description": "bytes written"}]},
     {"name": "Exec", "summary": "Run a pinned executable capability with an allowed argv.", "parameters": [
        {"name": "exe", "type": "string", "description": "executable capability id", "required": true},
        {"name": "args", "type": "array", "description": "arguments after argv[0]", "required": true}],
      "returns": [{"name": "stdout", "type": "string", "description": "standard output"}]},
     {"name": "Http", "summary": "Call an endpoint capability.", "parameters": [
        {"name": "endpoint", "type": "string", "description": "endpoint capability id", "required": true},
        {"name": "method", "type": "string", "description": "HTTP method", "required": true},
        {"name": "url", "type": "string", "description": "full URL", "required": true},
        {"name": "body", "type": "string", "description": "request body", "required": false}],
      "returns": [{"name": "status", "type": "integer", "description": "HTTP status"}]}]}
]"#;

/// What the `Contract` toolkit's tools need from the system-call guard: the broker
/// acts for them (files through `openat2`, pinned executables in the kernel sandbox,
/// HTTP to the contract's endpoints), so the tool worker's needs are the broker's.
pub const NEEDS: &str = r#"
version = 1
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 16, max_file_bytes = 1048576, max_memory_bytes = 268435456, cpu_seconds = 5, max_open_files = 64 }

[toolkits.Contract]
profile = "offline"
syscalls = []
cost = 0
"#;

/// The toolkit manifest offering the contract's tools.
pub fn manifest() -> Result<ToolkitManifest, knox_policy::ManifestError> {
    ToolkitManifest::from_sources(TOOLS, NEEDS)
}

/// The planner of a session nobody gave a prompt (an MCP gateway session opened with a
/// contract alone): it plans nothing — every task's trajectory is empty — and the
/// monitor follows it in [`TrajectoryMode::Unplanned`], so the contract's decision is
/// what bounds each call. A session with this planner and no contract does not build.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unplanned;

impl Unplanned {
    /// The one task of an unplanned session's prompt: what the APM records in place of
    /// a user's instruction, naming the contract that bounds the session.
    pub fn task(contract: &knox_contract::Verified) -> String {
        format!(
            "No prompt was given: the session is bounded by the signed capability contract `{}` ({}).",
            contract.contract.id, contract.hash
        )
    }
}

impl Planner for Unplanned {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        Ok(Plan {
            tasks: vec![Vec::new(); request.prompt.tasks.len()],
        })
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Planner,
            name: "unplanned".into(),
            weights_hash: None,
            declared: false,
        }
    }

    fn trajectory(&self) -> TrajectoryMode {
        TrajectoryMode::Unplanned
    }
}

/// Approval tokens from a directory (`knox run --approvals DIR`): a token for the
/// action `H(α)` is `DIR/<H(α) hex>.json`, written by `knox approve`. When an action is
/// pending, its request is written to `<pending>/<H(α) hex>.json` (the action, what
/// `knox approve PENDING` reads) and the directory is polled until `timeout`.
#[derive(Debug, Clone)]
pub struct ApprovalDir {
    /// Where tokens appear.
    pub dir: PathBuf,
    /// Where pending requests are written (none: not written).
    pub pending: Option<PathBuf>,
    /// How long a pending action waits for its token (zero: not at all).
    pub timeout: Duration,
}

/// Largest token file read.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// The folder under an approvals directory where each token's use is recorded:
/// `<DIR>/.used/<nonce hex>.json`, created exclusively (`O_CREAT | O_EXCL`), so that of
/// any number of runs and processes reading the same tokens exactly one uses each.
pub const USED_DIR: &str = ".used";

/// Largest use record read (to name the run that used a token).
const MAX_USE_RECORD_BYTES: u64 = 4096;

fn read_token(path: &Path) -> Option<Value> {
    let bytes = knox_files::read_capped(path, MAX_TOKEN_BYTES).ok()?;
    knox_types::json::from_slice(&bytes).ok()
}

impl ApprovalDir {
    /// Where the use of the token with nonce `nonce` is recorded.
    pub fn use_record(&self, nonce: &str) -> PathBuf {
        self.dir.join(USED_DIR).join(format!("{nonce}.json"))
    }
}

impl ApprovalSource for ApprovalDir {
    fn consume(&self, nonce: &str, run_id: &str) -> Result<(), String> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        // A nonce is 16 bytes in hex (checked with the token's signature): never a path.
        if nonce.len() != 32 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("nobody: the token's nonce is malformed".into());
        }
        let used = self.dir.join(USED_DIR);
        let cannot = |e: std::io::Error| {
            format!(
                "nobody yet, but its use cannot be recorded in `{}` ({e}), so it is not accepted",
                used.display()
            )
        };
        std::fs::create_dir_all(&used).map_err(cannot)?;
        let path = self.use_record(nonce);
        let record = serde_json::json!({
            "nonce": nonce,
            "run_id": run_id,
            "pid": std::process::id(),
            "at_ms": knox_attest::grant::now_ms(),
        });
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
        {
            Ok(mut f) => {
                // Created: this run has it. The record's content only names the run
                // (a crash before it is written still leaves the token used).
                let _ = f
                    .write_all(record.to_string().as_bytes())
                    .and_then(|()| f.sync_all());
                let _ = knox_files::sync_dir(&used);
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let by = knox_files::read_capped(&path, MAX_USE_RECORD_BYTES)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v.get("run_id")?.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "(unnamed: its record is empty)".into());
                Err(by)
            }
            Err(e) => Err(cannot(e)),
        }
    }

    fn token(&self, _: &Action, action_hash: &Digest) -> Option<Value> {
        read_token(&self.dir.join(format!("{}.json", action_hash.to_hex())))
    }

    fn wait(&self, action: &Action, action_hash: &Digest) -> Option<Value> {
        let name = format!("{}.json", action_hash.to_hex());
        if let Some(p) = &self.pending {
            let request = serde_json::to_string(action).unwrap_or_default();
            // Best effort: a pending request that cannot be written is still pending.
            let _ =
                std::fs::create_dir_all(p).and_then(|()| std::fs::write(p.join(&name), request));
        }
        let deadline = Instant::now() + self.timeout;
        // Bounded: one poll per 50 ms until the deadline.
        loop {
            if let Some(t) = read_token(&self.dir.join(&name)) {
                return Some(t);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
