//! The broker: grant checks, then the tool in a kernel-confined worker; kernel denials
//! and refusals come back as events the monitor records.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use knox_attest::grant::{self, GrantError};
use knox_monitor::tools::{RunContext, ToolHost, ToolResult, ToolRunner};
use knox_sandbox::{
    DeniedSyscall, LimitHit, Outcome, PreparedPolicy, Sandbox, SandboxConfig, SandboxError,
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
}

/// Runs allowed tool calls in confined workers.
#[derive(Debug)]
pub struct Broker {
    sandbox: Sandbox,
    worker: Vec<OsString>,
    workspaces: PathBuf,
}

impl Broker {
    /// A broker launching `worker` (program path first; it must serve one
    /// [`Request`] on stdin) with per-run workspaces under `workspaces`.
    pub fn new(
        worker: Vec<OsString>,
        workspaces: PathBuf,
        config: SandboxConfig,
    ) -> Result<Self, BrokerError> {
        std::fs::create_dir_all(&workspaces).map_err(|source| BrokerError::Workspace {
            path: workspaces.clone(),
            source,
        })?;
        Ok(Self {
            sandbox: Sandbox::new(config)?,
            worker,
            workspaces,
        })
    }
}

struct RunBroker<'r> {
    broker: &'r Broker,
    cx: RunContext<'r>,
    prepared: PreparedPolicy,
    consumed: Mutex<HashSet<Vec<u8>>>,
}

impl ToolHost for Broker {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        let workspace = self.workspaces.join(cx.run_id);
        std::fs::create_dir_all(&workspace)
            .map_err(|e| format!("workspace `{}`: {e}", workspace.display()))?;
        let worker = self
            .worker
            .first()
            .map(PathBuf::from)
            .ok_or("no worker program")?;
        let policy = crate::policy::from_auth(&cx.apm.guards.syscall, &workspace, &worker);
        let prepared = self.sandbox.prepare(&policy).map_err(|e| e.to_string())?;
        Ok(Box::new(RunBroker {
            broker: self,
            cx,
            prepared,
            consumed: Mutex::new(HashSet::new()),
        }))
    }
}

fn refusal(reason: String) -> ToolResult {
    ToolResult {
        output: json!({"error": format!("broker refused: {reason}")}),
        kernel: vec![KernelEvent {
            event: "refusal".into(),
            syscall: None,
            nr: None,
            pid: None,
            args: vec![],
            detail: Some(reason),
        }],
        confinement: None,
    }
}

impl RunBroker<'_> {
    /// Signature, run, action, expiry, then single use.
    fn admit(&self, action: &Action, grant: Option<&Grant>) -> Result<(), String> {
        let g = grant.ok_or("no grant")?;
        grant::check(
            g,
            self.cx.monitor_key,
            &self.cx.apm_hash,
            action,
            grant::now_ms(),
        )
        .map_err(|e: GrantError| e.to_string())?;
        let fresh = self
            .consumed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(g.body.nonce.0.clone());
        if fresh {
            Ok(())
        } else {
            Err(GrantError::Replayed.to_string())
        }
    }
}

impl ToolRunner for RunBroker<'_> {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        if let Err(reason) = self.admit(action, grant) {
            return refusal(reason);
        }
        let canned = (action.tool != "TerminalExecute").then(|| self.cx.canned.respond_to(action));
        let req = Request {
            tool: action.tool.clone(),
            params: action.params.clone(),
            canned,
        };
        let Ok(stdin) = serde_json::to_vec(&req) else {
            return refusal("request does not serialize".into());
        };
        let outcome = self
            .broker
            .sandbox
            .spawn_prepared(&self.prepared, &self.broker.worker, &[], &stdin)
            .and_then(knox_sandbox::ConfinedChild::wait);
        match outcome {
            Ok(o) => result_of(&o),
            Err(e) => ToolResult {
                output: json!({"error": format!("the confined worker failed: {e}")}),
                kernel: vec![KernelEvent {
                    event: "limit".into(),
                    syscall: None,
                    nr: None,
                    pid: None,
                    args: vec![],
                    detail: Some(e.to_string()),
                }],
                confinement: None,
            },
        }
    }
}

fn syscall_event(d: &DeniedSyscall) -> KernelEvent {
    KernelEvent {
        event: "syscall".into(),
        syscall: Some(d.name.clone()),
        nr: Some(i64::from(d.nr)),
        pid: Some(d.pid),
        args: d.args.to_vec(),
        detail: d.decoded.clone(),
    }
}

fn limit_event(detail: String) -> KernelEvent {
    KernelEvent {
        event: "limit".into(),
        syscall: None,
        nr: None,
        pid: None,
        args: vec![],
        detail: Some(detail),
    }
}

fn limit_name(h: &LimitHit) -> String {
    serde_json::to_value(h)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| format!("{h:?}"))
}

/// The tool's output and what the kernel layer observed.
fn result_of(o: &Outcome) -> ToolResult {
    let mut kernel: Vec<KernelEvent> = o.denied.iter().map(syscall_event).collect();
    kernel.extend(o.limit_hits.iter().map(|h| limit_event(limit_name(h))));
    if let Some(sig) = o.signal {
        kernel.push(limit_event(format!("worker killed by signal {sig}")));
    }
    if o.denied_dropped > 0 {
        kernel.push(limit_event(format!(
            "{} further denials not stored",
            o.denied_dropped
        )));
    }
    let output = serde_json::from_slice::<Value>(&o.stdout).unwrap_or_else(|_| {
        json!({"error": "the tool produced no output", "stderr": String::from_utf8_lossy(&o.stderr), "status": o.status})
    });
    let confinement = json!({
        "landlock_abi": o.landlock_abi,
        "enforcement": serde_json::to_value(&o.enforcement).unwrap_or(Value::Null),
    });
    ToolResult {
        output,
        kernel,
        confinement: Some(confinement),
    }
}
