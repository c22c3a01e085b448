//! The contract executor: runs the actions a monitor authorized under a signed
//! capability contract, and nothing else.
//!
//! For each action it (1) admits the grant — signature under the monitor's key, bound
//! to this session and this action, unexpired, never used before; (2) re-checks the
//! boundary against the contract itself (capability, path, argv, endpoint), trusting
//! nothing the monitor or the agent said; (3) acts through the capability: files
//! beneath the directory's root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`,
//! executables opened beneath their root, hashed through the opened descriptor,
//! compared with the pin and executed as that descriptor inside the kernel sandbox
//! (Landlock, seccomp user notification, rlimits, cgroups, never root), whose TCP
//! egress is limited to the contract's endpoint ports; HTTP requests to exactly the
//! endpoint the contract matched.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use knox_agent::{RunContext, ToolHost, ToolResult, ToolRunner};

use knox_attest::grant;
use knox_contract::action::{ExecParams, HttpParams, Request};
use knox_contract::decide::{Check, boundary};
use knox_contract::format::{DirAccess, Scheme};
use knox_contract::signed::Verified;
use knox_sandbox::{Access, Degraded, Family, RunAs, Sandbox, SandboxConfig, SandboxPolicy};
use knox_types::Action;
use knox_types::bundle::PublicKey;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use knox_types::payload::KernelEvent;
use serde_json::{Value, json};

use crate::pinned::{self, PinError};

/// Longest an executable may run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest response body an HTTP action returns.
pub const MAX_HTTP_RESPONSE: u64 = 1 << 20;

/// Why the executor refused an action.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No grant, or a grant that does not admit this action now (including a
    /// replayed one).
    #[error("grant: {0}")]
    Grant(String),
    /// The action is outside the contract.
    #[error("{}: {reason}", check.as_str())]
    Boundary {
        /// The check.
        check: Check,
        /// Why.
        reason: String,
    },
    /// The file could not be used through its capability (an escape the kernel
    /// stopped, or a binary that is not the pinned one).
    #[error(transparent)]
    Pin(#[from] PinError),
    /// The kernel sandbox could not run the executable.
    #[error("sandbox: {0}")]
    Sandbox(String),
    /// The HTTP request failed.
    #[error("http: {0}")]
    Http(String),
}

impl Refused {
    /// The name of the check that refused, for tables and evidence.
    pub fn check(&self) -> &'static str {
        match self {
            Self::Grant(_) => "grant",
            Self::Boundary { check, .. } => check.as_str(),
            Self::Pin(PinError::Digest { .. }) => "pinned_digest",
            Self::Pin(PinError::Beneath { .. } | PinError::Lexical(_)) => "resolve_beneath",
            Self::Pin(_) => "pinned_file",
            Self::Sandbox(_) => "sandbox",
            Self::Http(_) => "http",
        }
    }
}

/// What an executed action produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    /// The tool output.
    pub output: Value,
    /// What the kernel layer stopped while it ran.
    pub kernel: Vec<KernelEvent>,
    /// The SHA-256 of the binary executed (exec actions).
    pub binary: Option<Digest>,
}

/// Runs contract actions under grants.
#[derive(Debug)]
pub struct ContractExecutor {
    sandbox: Arc<Sandbox>,
    contract: Verified,
    monitor: PublicKey,
    session: Digest,
    scratch: PathBuf,
    consumed: grant::Spent,
    degraded: BTreeSet<Degraded>,
}

impl ContractExecutor {
    /// An executor for `contract`, admitting grants signed by `monitor` for
    /// `session` (the APM hash of the run). Executables without a `workdir` run in
    /// `scratch` (created, mode 0700, owned by the tools' uid).
    pub fn new(
        sandbox: Sandbox,
        contract: Verified,
        monitor: PublicKey,
        session: Digest,
        scratch: PathBuf,
    ) -> Result<Self, std::io::Error> {
        Self::shared(Arc::new(sandbox), contract, monitor, session, scratch)
    }

    /// [`ContractExecutor::new`] over a sandbox shared with other runs (a
    /// [`ContractHost`] serves every run of a session from one).
    pub fn shared(
        sandbox: Arc<Sandbox>,
        contract: Verified,
        monitor: PublicKey,
        session: Digest,
        scratch: PathBuf,
    ) -> Result<Self, std::io::Error> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&scratch)?;
        std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o700))?;
        if let Some(ids) = sandbox.tool_identity() {
            std::os::unix::fs::lchown(&scratch, Some(ids.uid), Some(ids.gid))?;
        }
        Ok(Self {
            sandbox,
            contract,
            monitor,
            session,
            scratch,
            consumed: grant::Spent::new(),
            degraded: BTreeSet::new(),
        })
    }

    /// Protections accepted as missing on this kernel (see `Broker::accept_degraded`).
    #[must_use]
    pub fn accept_degraded(mut self, degraded: impl IntoIterator<Item = Degraded>) -> Self {
        self.degraded = degraded.into_iter().collect();
        self
    }

    /// The contract.
    pub fn contract(&self) -> &Verified {
        &self.contract
    }

    /// Signature, session, action, expiry, then single use.
    fn admit(&self, action: &Action, g: Option<&Grant>) -> Result<(), Refused> {
        let g = g.ok_or_else(|| Refused::Grant("no grant".into()))?;
        self.consumed
            .admit(g, &self.monitor, &self.session, action, grant::now_ms())
            .map_err(|e| Refused::Grant(e.to_string()))
    }

    /// Executes `action` if `grant` admits it and it is inside the contract.
    pub fn execute(&self, action: &Action, grant: Option<&Grant>) -> Result<Executed, Refused> {
        self.admit(action, grant)?;
        let c = &self.contract.contract;
        let req =
            Request::parse(&action.tool, &action.params).map_err(|reason| Refused::Boundary {
                check: Check::Structure,
                reason,
            })?;
        if let Err(d) = boundary(c, &req) {
            let (check, reason) = match d {
                knox_contract::Decision::Deny(d) => (d.check, d.reason),
                other => (Check::Structure, format!("{other:?}")),
            };
            return Err(Refused::Boundary { check, reason });
        }
        let dir = |id: &str| {
            c.directories.get(id).ok_or_else(|| Refused::Boundary {
                check: Check::Capability,
                reason: format!("no directory capability `{id}`"),
            })
        };
        match &req {
            Request::Read(p) => {
                let bytes = pinned::read_beneath(dir(&p.dir)?, &p.path)?;
                Ok(plain(json!({"content": String::from_utf8_lossy(&bytes)})))
            }
            Request::Write(p) => {
                pinned::write_beneath(dir(&p.dir)?, &p.path, p.content.as_bytes())?;
                Ok(plain(json!({"written": p.content.len()})))
            }
            Request::Exec(p) => self.exec(p),
            Request::Http(p) => http_request(p).map(plain),
        }
    }

    fn exec(&self, p: &ExecParams) -> Result<Executed, Refused> {
        let c = &self.contract.contract;
        let cap = c.executables.get(&p.exe).ok_or_else(|| Refused::Boundary {
            check: Check::Capability,
            reason: format!("no executable capability `{}`", p.exe),
        })?;
        let program = pinned::open_pinned(cap)?;
        let workspace = match &cap.workdir {
            Some(w) => c
                .directories
                .get(w)
                .map(|d| PathBuf::from(&d.root))
                .ok_or_else(|| Refused::Boundary {
                    check: Check::Capability,
                    reason: format!("no directory capability `{w}`"),
                })?,
            None => self.scratch.clone(),
        };
        let families: &[Family] = if c.endpoints.is_empty() {
            &[Family::Offline]
        } else {
            &[Family::Offline, Family::NetworkClient]
        };
        let sandbox_err = |e: &dyn std::fmt::Display| Refused::Sandbox(e.to_string());
        let mut policy =
            SandboxPolicy::for_families(families, &workspace).map_err(|e| sandbox_err(&e))?;
        let file = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&program.fd)
        ))
        .unwrap_or_else(|_| program.path.clone());
        policy = policy.grant(file, &[Access::Read, Access::Execute]);
        for d in c.directories.values() {
            if Path::new(&d.root) != workspace {
                let access: &[Access] = match d.access {
                    DirAccess::Read => &[Access::Read],
                    DirAccess::Write => &[Access::Read, Access::Write, Access::Create],
                };
                policy = policy.grant(&d.root, access);
            }
        }
        policy.tcp_connect_ports = c.endpoints.values().map(|e| e.port).collect();
        policy.degraded.clone_from(&self.degraded);
        let prepared = self.sandbox.prepare(&policy).map_err(|e| sandbox_err(&e))?;
        let name = Path::new(&cap.path)
            .file_name()
            .map_or_else(|| cap.path.clone(), |n| n.to_string_lossy().into_owned());
        let mut argv = vec![name];
        argv.extend(p.args.iter().cloned());
        let env = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let digest = program.digest;
        let child = self
            .sandbox
            .spawn_fd(&prepared, program.fd, &argv, &env, b"")
            .map_err(|e| sandbox_err(&e))?;
        let out = child
            .wait_timeout(EXEC_TIMEOUT)
            .map_err(|e| sandbox_err(&e))?;
        let mut kernel: Vec<KernelEvent> =
            out.denied.iter().map(crate::host::syscall_event).collect();
        kernel.extend(
            out.limit_hits
                .iter()
                .map(|h| crate::host::limit_event(crate::host::limit_name(h))),
        );
        Ok(Executed {
            output: json!({
                "exit_code": out.status,
                "signal": out.signal,
                "stdout": String::from_utf8_lossy(&out.stdout),
                "stderr": String::from_utf8_lossy(&out.stderr),
                "binary_sha256": digest.to_hex(),
            }),
            kernel,
            binary: Some(digest),
        })
    }
}

/// The contract's tools as the tool host of a Knox run (`knox run --contract`): each
/// run gets a [`ContractExecutor`] admitting only the grants of that run's monitor for
/// that run's APM, and a run whose APM does not name this contract gets none. A refusal
/// comes back as a `refusal` event naming the check that refused (the monitor records
/// it as a `blocked` node under the broker and settles the reservation as not executed).
#[derive(Debug)]
pub struct ContractHost {
    sandbox: Arc<Sandbox>,
    contract: Verified,
    scratch: PathBuf,
    degraded: BTreeSet<Degraded>,
}

impl ContractHost {
    /// A host for `contract`; executables without a `workdir` run in
    /// `scratch/<run id>`. Tools never run as root: as `config.run_as`, by default
    /// [`RunAs::from_env`] (refused when a local account already has that id), as
    /// [`crate::Broker::new`] does.
    pub fn new(
        contract: Verified,
        scratch: PathBuf,
        mut config: SandboxConfig,
    ) -> Result<Self, crate::BrokerError> {
        let chosen =
            config.run_as.is_some() || std::env::var_os(knox_sandbox::RUN_AS_ENV).is_some();
        if config.run_as.is_none() {
            config.run_as = Some(RunAs::from_env().map_err(crate::BrokerError::RunAs)?);
        }
        let sandbox = Sandbox::new(config)?;
        if let Some(ids) = sandbox.tool_identity().filter(|_| !chosen) {
            ids.check_unassigned().map_err(crate::BrokerError::RunAs)?;
        }
        Ok(Self {
            sandbox: Arc::new(sandbox),
            contract,
            scratch,
            degraded: BTreeSet::new(),
        })
    }

    /// Protections accepted as missing on this kernel (see `Broker::accept_degraded`).
    #[must_use]
    pub fn accept_degraded(mut self, degraded: impl IntoIterator<Item = Degraded>) -> Self {
        self.degraded = degraded.into_iter().collect();
        self
    }

    /// The contract.
    pub fn contract(&self) -> &Verified {
        &self.contract
    }
}

impl ToolHost for ContractHost {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        if cx.apm.inputs.contract != Some(self.contract.hash) {
            return Err(format!(
                "the run's APM does not name the capability contract {} the host serves",
                self.contract.hash
            ));
        }
        let scratch = self.scratch.join(cx.run_id);
        let exec = ContractExecutor::shared(
            Arc::clone(&self.sandbox),
            self.contract.clone(),
            cx.monitor_key.clone(),
            cx.apm_hash,
            scratch.clone(),
        )
        .map_err(|e| format!("scratch directory `{}`: {e}", scratch.display()))?
        .accept_degraded(self.degraded.iter().copied());
        Ok(Box::new(exec))
    }
}

impl ToolRunner for ContractExecutor {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        match self.execute(action, grant) {
            Ok(e) => ToolResult {
                output: e.output,
                kernel: e.kernel,
                confinement: None,
            },
            Err(r) => refusal(&r),
        }
    }
}

/// A refusal as the evidence records it: the check that refused, then why.
fn refusal(r: &Refused) -> ToolResult {
    // Every other variant's message starts with its check's name already.
    let detail = match r {
        Refused::Pin(_) => format!("{}: {r}", r.check()),
        _ => r.to_string(),
    };
    ToolResult::refused("contract executor", detail)
}

fn plain(output: Value) -> Executed {
    Executed {
        output,
        kernel: Vec::new(),
        binary: None,
    }
}

/// One HTTP/1.0 request to exactly the URL `p` names (plain HTTP only); the
/// executor calls it only after the contract matched the URL.
pub fn http_request(p: &HttpParams) -> Result<Value, Refused> {
    let u = knox_contract::url::parse(&p.url).map_err(Refused::Http)?;
    if u.scheme == Scheme::Https {
        return Err(Refused::Http(
            "the broker's client speaks plain HTTP only: an https endpoint needs a TLS proxy"
                .into(),
        ));
    }
    let herr = |e: std::io::Error| Refused::Http(e.to_string());
    let addr = (u.host.as_str(), u.port)
        .to_socket_addrs()
        .map_err(herr)?
        .next()
        .ok_or_else(|| Refused::Http(format!("`{}` does not resolve", u.host)))?;
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(herr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(herr)?;
    s.set_write_timeout(Some(Duration::from_secs(10)))
        .map_err(herr)?;
    let body = p.body.as_deref().unwrap_or_default();
    let target = match &u.query {
        Some(q) => format!("{}?{q}", u.path),
        None => u.path.clone(),
    };
    let req = format!(
        "{} {target} HTTP/1.0\r\nHost: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        p.method,
        u.host,
        body.len()
    );
    s.write_all(req.as_bytes()).map_err(herr)?;
    let mut resp = Vec::new();
    s.take(MAX_HTTP_RESPONSE)
        .read_to_end(&mut resp)
        .map_err(herr)?;
    let text = String::from_utf8_lossy(&resp);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: Option<u16> = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok());
    Ok(json!({"status": status, "body": body}))
}
