//! The broker: grant checks, then the tool in a kernel-confined worker; kernel denials
//! and refusals come back as events the monitor records.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use knox_agent::{RunContext, ToolHost, ToolResult, ToolRunner};
use knox_attest::grant::{self, GrantError};
use knox_sandbox::{
    DeniedSyscall, LimitHit, PreparedPolicy, RUN_AS_ENV, RunAs, Sandbox, SandboxConfig,
    SandboxError, Worker, WorkerReply,
};
use knox_types::Action;
use knox_types::grant::Grant;
use knox_types::payload::KernelEvent;
use serde_json::{Value, json};

use crate::worker::Request;

/// Errors setting the broker up.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The kernel sandbox is unavailable or refused the policy.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The workspace could not be created.
    #[error("workspace `{path}`: {source}")]
    Workspace {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The unprivileged identity tools run as is unusable.
    #[error("tool identity: {0}")]
    RunAs(String),
}

/// Runs allowed tool calls in confined workers.
#[derive(Debug)]
pub struct Broker {
    sandbox: Sandbox,
    worker: Vec<OsString>,
    workspaces: PathBuf,
    keep_workspaces: bool,
    degraded: std::collections::BTreeSet<knox_sandbox::Degraded>,
}

impl Broker {
    /// A broker launching `worker` (program path first; it must serve one
    /// [`Request`] on stdin) with per-run workspaces under `workspaces`.
    ///
    /// Tools never run as root: when this process is root, they run as
    /// `config.run_as`, by default [`RunAs::from_env`] (`KNOX_RUN_AS=UID:GID`, else
    /// [`RunAs::KNOX`], refused when a local account already has that id). Each
    /// run's workspace is owned by that uid and removed after the run (see
    /// [`Broker::keep_workspaces`]).
    pub fn new(
        worker: Vec<OsString>,
        workspaces: PathBuf,
        mut config: SandboxConfig,
    ) -> Result<Self, BrokerError> {
        let chosen = config.run_as.is_some() || std::env::var_os(RUN_AS_ENV).is_some();
        if config.run_as.is_none() {
            config.run_as = Some(RunAs::from_env().map_err(BrokerError::RunAs)?);
        }
        std::fs::create_dir_all(&workspaces).map_err(|source| BrokerError::Workspace {
            path: workspaces.clone(),
            source,
        })?;
        let sandbox = Sandbox::new(config)?;
        if let Some(ids) = sandbox.tool_identity().filter(|_| !chosen) {
            ids.check_unassigned().map_err(BrokerError::RunAs)?;
        }
        Ok(Self {
            sandbox,
            worker,
            workspaces,
            keep_workspaces: false,
            degraded: std::collections::BTreeSet::new(),
        })
    }

    /// Protections the user accepts to lose on a kernel that cannot enforce them
    /// (`knox run --degraded MODE`); without it, such a run is refused naming the
    /// missing kernel feature. What each worker actually got is in its
    /// `confinement.layers`.
    #[must_use]
    pub fn accept_degraded(
        mut self,
        degraded: impl IntoIterator<Item = knox_sandbox::Degraded>,
    ) -> Self {
        self.degraded = degraded.into_iter().collect();
        self
    }

    /// Keep each run's workspace after the run (`knox run --keep-workspaces`);
    /// by default it is removed once the run's workers are gone.
    #[must_use]
    pub fn keep_workspaces(mut self, keep: bool) -> Self {
        self.keep_workspaces = keep;
        self
    }

    /// The uid and gid tools run as, when not this process's own (root callers).
    pub fn tool_identity(&self) -> Option<RunAs> {
        self.sandbox.tool_identity()
    }

    /// Creates `workspace` for one run: mode 0700, owned by the tools' uid and
    /// gid, so that a tool can write its own workspace and nothing else.
    fn create_workspace(&self, workspace: &std::path::Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(workspace)?;
        if !std::fs::symlink_metadata(workspace)?.is_dir() {
            return Err(std::io::Error::other("not a directory (a symbolic link?)"));
        }
        std::fs::set_permissions(workspace, std::fs::Permissions::from_mode(0o700))?;
        if let Some(ids) = self.tool_identity() {
            std::os::unix::fs::lchown(workspace, Some(ids.uid), Some(ids.gid))?;
        }
        Ok(())
    }
}

/// Longest one tool call may take before its worker is killed.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One run's tools: a confined worker per agent, reused for all of that agent's calls
/// (confinement cannot be undone, so reuse is safe and amortizes the spawn).
struct RunBroker<'r> {
    broker: &'r Broker,
    /// This run's workspace, removed on drop unless the broker keeps workspaces.
    workspace: PathBuf,
    cx: RunContext<'r>,
    prepared: PreparedPolicy,
    consumed: grant::Spent,
    workers: Mutex<HashMap<String, Worker>>,
}

impl Drop for RunBroker<'_> {
    fn drop(&mut self) {
        let workers =
            std::mem::take(&mut *self.workers.lock().unwrap_or_else(PoisonError::into_inner));
        for (_, w) in workers {
            // Closing its input ends a healthy worker; a stuck one is killed.
            let _ = w.shutdown_within(Duration::from_secs(2));
        }
        // Every tool process is gone with its worker's cgroup. `remove_dir_all`
        // does not follow the symbolic links a tool may have left there.
        if !self.broker.keep_workspaces {
            let _ = std::fs::remove_dir_all(&self.workspace);
        }
    }
}

impl ToolHost for Broker {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        let worker = self
            .worker
            .first()
            .map(PathBuf::from)
            .ok_or("no worker program")?;
        let workspace = self.workspaces.join(cx.run_id);
        self.create_workspace(&workspace)
            .map_err(|e| format!("workspace `{}`: {e}", workspace.display()))?;
        let mut policy = crate::policy::from_auth(&cx.apm.guards.syscall, &workspace, &worker);
        policy.degraded.clone_from(&self.degraded);
        let prepared = match self.sandbox.prepare(&policy) {
            Ok(p) => p,
            Err(e) => {
                if !self.keep_workspaces {
                    let _ = std::fs::remove_dir_all(&workspace);
                }
                return Err(e.to_string());
            }
        };
        Ok(Box::new(RunBroker {
            broker: self,
            workspace,
            cx,
            prepared,
            consumed: grant::Spent::new(),
            workers: Mutex::new(HashMap::new()),
        }))
    }
}

fn refusal(reason: String) -> ToolResult {
    ToolResult::refused("broker", reason)
}

impl RunBroker<'_> {
    /// Signature, run, action, expiry, then single use.
    fn admit(&self, action: &Action, grant: Option<&Grant>) -> Result<(), String> {
        let g = grant.ok_or("no grant")?;
        self.consumed
            .admit(
                g,
                self.cx.monitor_key,
                &self.cx.apm_hash,
                action,
                grant::now_ms(),
            )
            .map_err(|e: GrantError| e.to_string())
    }
}

impl ToolRunner for RunBroker<'_> {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        if let Err(reason) = self.admit(action, grant) {
            return refusal(reason);
        }
        let agent = grant.map_or_else(String::new, |g| g.body.agent.clone());
        let canned =
            (action.tool != "TerminalExecute").then(|| self.cx.canned.run(action, None).output);
        let req = Request {
            tool: action.tool.clone(),
            params: action.params.clone(),
            canned,
        };
        let Ok(request) = serde_json::to_vec(&req) else {
            return refusal("request does not serialize".into());
        };
        // Take the agent's worker out of the map while it serves, so that other agents'
        // calls proceed concurrently.
        let existing = self
            .workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&agent);
        let mut worker = match existing {
            Some(w) => w,
            None => match self
                .broker
                .sandbox
                .spawn_worker(&self.prepared, &self.broker.worker, &[])
            {
                Ok(w) => w,
                Err(e) => return failed(format!("cannot start a confined worker: {e}")),
            },
        };
        let reply = match worker.call(&request, CALL_TIMEOUT) {
            Ok(r) => r,
            Err(e) => return failed(format!("the confined worker failed: {e}")),
        };
        let mut result = result_of(
            &reply,
            self.prepared.landlock_abi(),
            self.prepared.layers(),
            self.prepared.notes(),
        );
        if let Some(c) = result.confinement.as_mut().and_then(Value::as_object_mut) {
            if let Some(ids) = self.broker.tool_identity() {
                c.insert("run_as".into(), json!({"uid": ids.uid, "gid": ids.gid}));
            }
            if !reply.audit_complete {
                c.insert("denial_audit".into(), json!(knox_sandbox::AUDIT_INCOMPLETE));
            }
        }
        if reply.exited.is_none() && reply.response.is_ok() {
            self.workers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(agent, worker);
        }
        result
    }
}

fn failed(why: String) -> ToolResult {
    ToolResult {
        output: json!({"error": why.clone()}),
        kernel: vec![limit_event(why)],
        confinement: None,
    }
}

/// A denied system call as evidence.
pub fn syscall_event(d: &DeniedSyscall) -> KernelEvent {
    KernelEvent {
        event: "syscall".into(),
        syscall: Some(d.name.clone()),
        nr: Some(i64::from(d.nr)),
        pid: Some(d.pid),
        args: d.args.to_vec(),
        detail: d.decoded.clone(),
    }
}

/// A limit hit or kill as evidence.
pub fn limit_event(detail: String) -> KernelEvent {
    KernelEvent {
        event: "limit".into(),
        syscall: None,
        nr: None,
        pid: None,
        args: vec![],
        detail: Some(detail),
    }
}

/// A limit hit, named for the evidence.
pub fn limit_name(h: &LimitHit) -> String {
    serde_json::to_value(h)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| format!("{h:?}"))
}

/// The tool's output and what the kernel layer observed while it was produced.
fn result_of(
    r: &WorkerReply,
    landlock_abi: i32,
    layers: &knox_sandbox::Layers,
    notes: &[String],
) -> ToolResult {
    let mut kernel: Vec<KernelEvent> = r
        .idle_denied
        .iter()
        .chain(&r.denied)
        .map(syscall_event)
        .collect();
    kernel.extend(r.limit_hits.iter().map(|h| limit_event(limit_name(h))));
    if let Some(sig) = r.exited.as_ref().and_then(|o| o.signal) {
        kernel.push(limit_event(format!("worker killed by signal {sig}")));
    }
    let output = match &r.response {
        Ok(bytes) => serde_json::from_slice::<Value>(bytes)
            .unwrap_or_else(|_| json!({"error": "the tool's output is not JSON"})),
        Err(f) => {
            let why = serde_json::to_value(f)
                .map(|v| v.to_string())
                .unwrap_or_default();
            kernel.push(limit_event(format!("no response: {why}")));
            json!({"error": format!("the tool gave no response: {why}")})
        }
    };
    // `landlock_abi` is the kernel's; `layers` names the ABI in use (capped or
    // not) and the layer that enforced each protection.
    let confinement = json!({
        "landlock_abi": landlock_abi,
        "layers": layers,
        "seccomp": "user-notification",
        "notes": notes,
    });
    ToolResult {
        output,
        kernel,
        confinement: Some(confinement),
    }
}
