//! The MCP tool host: one session per server per run, stdio servers confined in the
//! kernel sandbox, HTTP servers pinned to their endpoint; grants checked, results and
//! kernel denials handed back to the monitor.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use knox_agent::{RunContext, ToolHost, ToolResult, ToolRunner};
use knox_attest::grant;
use knox_broker::host::{limit_event, limit_name, syscall_event};
use knox_sandbox::{ConfinedChild, DeniedSyscall, RUN_AS_ENV, RunAs, Sandbox, SandboxConfig};
use knox_types::Action;
use knox_types::grant::Grant;
use knox_types::payload::KernelEvent;
use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::McpError;
use crate::client::{Events, KnoxClient};
use crate::config::{Reach, Server, ServersFile};

/// Replaced, in a stdio server's arguments and environment values, by the path of
/// the server's workspace for the run (its working directory, writable by it).
pub const WORKSPACE: &str = "{workspace}";

/// How long a server is given to exit after its session is closed.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Scheduler turns given to a run's idle session before a call (see
/// [`Connection::settle`]): each polls the I/O driver once and runs the tasks it woke;
/// a closed pipe reaches the session's state in fewer.
const SETTLE_YIELDS: usize = 4;

/// Runs `f` to completion on `rt` from synchronous code — also when the caller is
/// itself inside a tokio runtime (an async gateway), where `block_on` would panic:
/// then from a scoped thread of its own.
fn block<F>(rt: &Rt, f: F) -> Result<F::Output, McpError>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = rt
        .as_ref()
        .ok_or_else(|| McpError::Runtime("the host is shutting down".into()))?;
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(rt.block_on(f));
    }
    std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
        Ok(v) => Ok(v),
        Err(p) => std::panic::resume_unwind(p),
    })
}

/// The host's or a run's runtime: `None` only while its owner is dropped (it is then
/// shut down in the background, which is allowed inside an async context, where
/// dropping a runtime is not).
type Rt = Option<tokio::runtime::Runtime>;

/// Runs the tools of MCP servers for whole runs. Holds the kernel sandbox (and its
/// cgroup pool) and the async runtime rmcp needs, so callers stay synchronous.
///
/// Each run's sessions live on a single-threaded runtime of the run's own, driven by
/// the thread making the call: a call's request, the server's answer and the
/// transport's tasks in between all run on that thread, with no hand-off to another
/// one (measured in `cargo bench -p knox-gateway --bench mcp`: the upstream exchange of a
/// gateway call went from about 430 µs to 320 µs at p50). The host's own runtime serves
/// what runs outside a run (`tools/list` for `knox toolkit import`).
#[derive(Debug)]
pub struct McpHost {
    servers: Vec<Server>,
    sandbox: Option<Sandbox>,
    workspaces: PathBuf,
    keep_workspaces: bool,
    degraded: BTreeSet<knox_sandbox::Degraded>,
    rt: Rt,
}

impl Drop for McpHost {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl McpHost {
    /// A host for `servers`, each run's server workspaces under `workspaces`.
    ///
    /// As with the broker, servers never run as root: when this process is root they
    /// run as `config.run_as`, by default [`RunAs::from_env`] (`KNOX_RUN_AS=UID:GID`,
    /// else [`RunAs::KNOX`], refused when a local account already has that id). The
    /// kernel sandbox is set up only when a stdio server is declared.
    pub fn new(
        servers: Vec<Server>,
        workspaces: PathBuf,
        mut config: SandboxConfig,
    ) -> Result<Self, McpError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("knox-mcp")
            .enable_all()
            .build()
            .map_err(|e| McpError::Runtime(e.to_string()))?;
        let stdio = servers
            .iter()
            .any(|s| matches!(s.reach, Reach::Stdio { .. }));
        let sandbox = if stdio {
            let chosen = config.run_as.is_some() || std::env::var_os(RUN_AS_ENV).is_some();
            if config.run_as.is_none() {
                config.run_as = Some(RunAs::from_env().map_err(McpError::Sandbox)?);
            }
            let sandbox = Sandbox::new(config).map_err(|e| McpError::Sandbox(e.to_string()))?;
            if let Some(ids) = sandbox.tool_identity().filter(|_| !chosen) {
                ids.check_unassigned().map_err(McpError::Sandbox)?;
            }
            std::fs::create_dir_all(&workspaces).map_err(|e| {
                McpError::Sandbox(format!("workspaces `{}`: {e}", workspaces.display()))
            })?;
            Some(sandbox)
        } else {
            None
        };
        Ok(Self {
            servers,
            sandbox,
            workspaces,
            keep_workspaces: false,
            degraded: BTreeSet::new(),
            rt: Some(rt),
        })
    }

    /// A host for the servers of `servers.toml`.
    pub fn from_file(path: &Path, workspaces: PathBuf) -> Result<Self, McpError> {
        Self::new(
            ServersFile::load(path)?,
            workspaces,
            SandboxConfig::default(),
        )
    }

    /// Protections the user accepts to lose on a kernel that cannot enforce them.
    #[must_use]
    pub fn accept_degraded(
        mut self,
        degraded: impl IntoIterator<Item = knox_sandbox::Degraded>,
    ) -> Self {
        self.degraded = degraded.into_iter().collect();
        self
    }

    /// Keep each run's server workspaces after the run.
    #[must_use]
    pub fn keep_workspaces(mut self, keep: bool) -> Self {
        self.keep_workspaces = keep;
        self
    }

    /// The servers served.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// The uid and gid stdio servers run as, when not this process's own.
    pub fn tool_identity(&self) -> Option<RunAs> {
        self.sandbox.as_ref().and_then(Sandbox::tool_identity)
    }

    /// Opens a session with `server`: a stdio server is started confined, with
    /// `workspace` (created, owned by the tools' uid) as its working directory.
    pub fn connect(&self, server: &Server, workspace: &Path) -> Result<Connection, McpError> {
        self.connect_on(&self.rt, server, workspace)
    }

    /// [`McpHost::connect`], the session's tasks on `rt`.
    fn connect_on(
        &self,
        rt: &Rt,
        server: &Server,
        workspace: &Path,
    ) -> Result<Connection, McpError> {
        match &server.reach {
            Reach::Stdio { program, args, env } => {
                self.connect_stdio(rt, server, program, args, env, workspace)
            }
            Reach::Http { url } => self.connect_http(rt, server, url),
        }
    }

    /// Connects to `server` once, asks `tools/list` and closes the session: what
    /// `knox toolkit import` uses. Returns the tools and the kernel events the server
    /// caused meanwhile.
    pub fn list_tools(&self, server: &Server) -> Result<(Vec<Tool>, Vec<KernelEvent>), McpError> {
        let workspace =
            self.workspaces
                .join(format!("import-{}-{}", server.name, std::process::id()));
        self.create_workspace(&workspace)?;
        let result = self.connect(server, &workspace).and_then(|mut c| {
            let tools = c.list_tools(&self.rt);
            let mut events = c.drain();
            events.extend(c.close(&self.rt));
            tools.map(|t| (t, events))
        });
        if !self.keep_workspaces {
            let _ = std::fs::remove_dir_all(&workspace);
        }
        result
    }

    /// Creates `workspace`: mode 0700, owned by the tools' uid and gid.
    fn create_workspace(&self, workspace: &Path) -> Result<(), McpError> {
        use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
        let fail = |e: std::io::Error| {
            McpError::Sandbox(format!("workspace `{}`: {e}", workspace.display()))
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(workspace)
            .map_err(fail)?;
        if !std::fs::symlink_metadata(workspace).map_err(fail)?.is_dir() {
            return Err(fail(std::io::Error::other(
                "not a directory (a symbolic link?)",
            )));
        }
        std::fs::set_permissions(workspace, std::fs::Permissions::from_mode(0o700))
            .map_err(fail)?;
        if let Some(ids) = self.tool_identity() {
            std::os::unix::fs::lchown(workspace, Some(ids.uid), Some(ids.gid)).map_err(fail)?;
        }
        Ok(())
    }

    fn connect_stdio(
        &self,
        rt: &Rt,
        server: &Server,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        workspace: &Path,
    ) -> Result<Connection, McpError> {
        let sandbox = self
            .sandbox
            .as_ref()
            .ok_or_else(|| McpError::Sandbox("no kernel sandbox".into()))?;
        let mut policy = crate::confine::policy(&server.needs, program, workspace)?;
        policy.degraded.clone_from(&self.degraded);
        let prepared = sandbox
            .prepare(&policy)
            .map_err(|e| McpError::Sandbox(e.to_string()))?;
        let here = workspace.to_string_lossy();
        let mut argv: Vec<std::ffi::OsString> = vec![program.as_os_str().to_owned()];
        argv.extend(args.iter().map(|a| a.replace(WORKSPACE, &here).into()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.clone(), v.replace(WORKSPACE, &here)))
            .collect();
        let (mut child, stdin, stdout) =
            sandbox
                .spawn_piped(&prepared, &argv, &env)
                .map_err(|e| McpError::Start {
                    server: server.name.clone(),
                    why: e.to_string(),
                })?;
        let denied = child.denied_events();
        let mut confinement = json!({
            "mcp_server": server.name,
            "transport": "stdio",
            "landlock_abi": prepared.landlock_abi(),
            "layers": prepared.layers(),
            "seccomp": "user-notification",
            "notes": child.enforcement().notes,
        });
        if let (Some(c), Some(ids)) = (confinement.as_object_mut(), self.tool_identity()) {
            c.insert("run_as".into(), json!({"uid": ids.uid, "gid": ids.gid}));
        }
        let events: Events = Arc::default();
        let handler = KnoxClient::new(&server.name, &server.roots, Arc::clone(&events));
        let started = block(rt, async {
            let w = tokio::net::unix::pipe::Sender::from_file(stdin)?;
            let r = tokio::net::unix::pipe::Receiver::from_file(stdout)?;
            Ok::<_, std::io::Error>(
                tokio::time::timeout(server.timeout, handler.serve((r, w))).await,
            )
        })?;
        let mut conn = Connection {
            server: server.name.clone(),
            service: None,
            child: Some(child),
            denied,
            reported: 0,
            events,
            confinement: Some(confinement),
            timeout: server.timeout,
            audit_complete: true,
        };
        let failure = match started {
            Ok(Ok(Ok(service))) => {
                conn.service = Some(service);
                return Ok(conn);
            }
            Ok(Ok(Err(e))) => format!("the MCP handshake failed: {e}"),
            Ok(Err(_)) => format!("no MCP handshake within {} s", server.timeout.as_secs()),
            Err(e) => format!("its pipes: {e}"),
        };
        Err(conn.fail_start(failure))
    }

    fn connect_http(&self, rt: &Rt, server: &Server, url: &str) -> Result<Connection, McpError> {
        // No redirects and no proxy: every request goes to the declared endpoint.
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(server.timeout)
            .build()
            .map_err(|e| McpError::Start {
                server: server.name.clone(),
                why: e.to_string(),
            })?;
        let events: Events = Arc::default();
        let handler = KnoxClient::new(&server.name, &server.roots, Arc::clone(&events));
        let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
        let started = block(rt, async {
            let transport = StreamableHttpClientTransport::with_client(client, config);
            tokio::time::timeout(server.timeout, handler.serve(transport)).await
        })?;
        let service = match started {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(McpError::Start {
                    server: server.name.clone(),
                    why: format!("the MCP handshake with {url} failed: {e}"),
                });
            }
            Err(_) => {
                return Err(McpError::Start {
                    server: server.name.clone(),
                    why: format!(
                        "no MCP handshake with {url} within {} s",
                        server.timeout.as_secs()
                    ),
                });
            }
        };
        Ok(Connection {
            server: server.name.clone(),
            service: Some(service),
            child: None,
            denied: None,
            reported: 0,
            events,
            confinement: Some(json!({
                "mcp_server": server.name,
                "transport": "streamable-http",
                "endpoint": url,
            })),
            timeout: server.timeout,
            audit_complete: true,
        })
    }
}

/// One open session with a server (and, for stdio, its confined process).
#[derive(Debug)]
pub struct Connection {
    server: String,
    service: Option<RunningService<RoleClient, KnoxClient>>,
    child: Option<ConfinedChild>,
    denied: Option<Receiver<DeniedSyscall>>,
    /// Denials already handed out (the final `Outcome` repeats them all).
    reported: usize,
    events: Events,
    confinement: Option<Value>,
    timeout: Duration,
    /// Whether the last drain read every Landlock denial ([`ConfinedChild::audit_barrier`]).
    audit_complete: bool,
}

/// Why a call failed, and whether the session is unusable after it.
struct CallError {
    why: String,
    /// The server answered with a JSON-RPC error: the session still works.
    protocol: bool,
}

impl Connection {
    /// How the server is confined (recorded with each output).
    pub fn confinement(&self) -> Option<&Value> {
        self.confinement.as_ref()
    }

    /// Whether the last [`Connection::drain`] read every Landlock denial: `false` when
    /// some may be missing, which the call's confinement record then says.
    pub fn audit_complete(&self) -> bool {
        self.audit_complete
    }

    /// `tools/list`, every page.
    pub fn list_tools(&mut self, rt: &Rt) -> Result<Vec<Tool>, McpError> {
        let Some(service) = &self.service else {
            return Err(McpError::Closed(self.server.clone()));
        };
        let peer = service.peer().clone();
        let timeout = self.timeout;
        match block(rt, async move {
            tokio::time::timeout(timeout, peer.list_all_tools()).await
        })? {
            Ok(Ok(tools)) => Ok(tools),
            Ok(Err(e)) => Err(McpError::Call {
                server: self.server.clone(),
                why: format!("tools/list: {e}"),
            }),
            Err(_) => Err(McpError::Call {
                server: self.server.clone(),
                why: format!("tools/list: no answer within {} s", self.timeout.as_secs()),
            }),
        }
    }

    fn call(
        &mut self,
        rt: &Rt,
        tool: &str,
        args: serde_json::Map<String, Value>,
    ) -> Result<CallToolResult, CallError> {
        let Some(service) = &self.service else {
            return Err(CallError {
                why: "the session is closed".into(),
                protocol: false,
            });
        };
        let peer = service.peer().clone();
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(args);
        let timeout = self.timeout;
        let answer = block(rt, async move {
            tokio::time::timeout(timeout, peer.call_tool(params)).await
        })
        .map_err(|e| CallError {
            why: e.to_string(),
            protocol: false,
        })?;
        match answer {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(CallError {
                protocol: matches!(e, rmcp::ServiceError::McpError(_)),
                why: format!("tools/call `{tool}`: {e}"),
            }),
            Err(_) => Err(CallError {
                why: format!(
                    "tools/call `{tool}`: no answer within {} s (timeout)",
                    self.timeout.as_secs()
                ),
                protocol: false,
            }),
        }
    }

    /// Kernel denials and protocol refusals since the last drain (whether Landlock's
    /// were all read: [`Connection::audit_complete`]).
    pub fn drain(&mut self) -> Vec<KernelEvent> {
        let mut out: Vec<KernelEvent> = Vec::new();
        if let Some(child) = &self.child {
            self.audit_complete = child.audit_barrier();
        }
        if let Some(rx) = &self.denied {
            for d in rx.try_iter() {
                self.reported += 1;
                out.push(syscall_event(&d));
            }
        }
        out.append(&mut self.events.lock().unwrap_or_else(PoisonError::into_inner));
        out
    }

    /// Lets the session's tasks handle what happened since the last call (a server
    /// that exited, a transport that closed), so [`Connection::alive`] sees it: a run's
    /// runtime only runs while a call is being made on it.
    fn settle(&self, rt: &Rt) {
        let _ = block(rt, async {
            for _ in 0..SETTLE_YIELDS {
                tokio::task::yield_now().await;
            }
        });
    }

    /// Whether the session still works.
    fn alive(&self) -> bool {
        self.service
            .as_ref()
            .is_some_and(|s| !s.is_closed() && !s.peer().is_transport_closed())
    }

    /// Closes the session and ends the process: what it left unreported (denials,
    /// limits hit, how it ended).
    pub fn close(mut self, rt: &Rt) -> Vec<KernelEvent> {
        if let Some(mut service) = self.service.take() {
            let _ = block(rt, service.close_with_timeout(CLOSE_GRACE));
        }
        self.finish(false)
    }

    /// Ends the process (killing its tree) and reports what is left.
    fn finish(&mut self, report_exit: bool) -> Vec<KernelEvent> {
        let mut out = self.drain();
        let Some(child) = self.child.take() else {
            return out;
        };
        child.kill_tree();
        if let Ok(o) = child.wait_timeout(CLOSE_GRACE) {
            out.extend(o.denied.iter().skip(self.reported).map(syscall_event));
            self.reported = o.denied.len();
            out.extend(o.limit_hits.iter().map(|h| limit_event(limit_name(h))));
            if report_exit {
                let how = match (o.status, o.signal) {
                    (Some(c), _) => format!("exited with status {c}"),
                    (_, Some(s)) => format!("was killed by signal {s}"),
                    _ => "ended".to_owned(),
                };
                let stderr = String::from_utf8_lossy(&o.stderr);
                let tail: String = stderr
                    .chars()
                    .rev()
                    .take(400)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                let tail = tail.trim();
                out.push(limit_event(if tail.is_empty() {
                    format!("MCP server `{}` {how}", self.server)
                } else {
                    format!("MCP server `{}` {how}; stderr: {tail}", self.server)
                }));
            }
        }
        out
    }

    /// A failed start: the process is ended and its stderr named in the error.
    fn fail_start(mut self, failure: String) -> McpError {
        let events = self.finish(true);
        let detail: Vec<String> = events.iter().filter_map(describe).collect();
        McpError::Start {
            server: self.server.clone(),
            why: if detail.is_empty() {
                failure
            } else {
                format!("{failure} ({})", detail.join("; "))
            },
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            child.kill_tree();
        }
    }
}

/// One line for an event, for error messages.
fn describe(e: &KernelEvent) -> Option<String> {
    match (&e.syscall, &e.detail) {
        (Some(s), Some(d)) => Some(format!("denied {s} ({d})")),
        (Some(s), None) => Some(format!("denied {s}")),
        (None, Some(d)) => Some(d.clone()),
        (None, None) => None,
    }
}

/// One run's sessions: opened at a server's first call, reused for every later one,
/// closed (process tree killed) when the run ends; their tasks on the run's runtime.
struct McpRun<'r> {
    host: &'r McpHost,
    cx: RunContext<'r>,
    workspace: PathBuf,
    consumed: grant::Spent,
    sessions: HashMap<String, Mutex<Option<Connection>>>,
    rt: Rt,
}

impl ToolHost for McpHost {
    fn runner<'r>(&'r self, cx: RunContext<'r>) -> Result<Box<dyn ToolRunner + 'r>, String> {
        let workspace = self.workspaces.join(cx.run_id);
        if self.sandbox.is_some() {
            self.create_workspace(&workspace)
                .map_err(|e| e.to_string())?;
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Box::new(McpRun {
            rt: Some(rt),
            host: self,
            cx,
            workspace,
            consumed: grant::Spent::new(),
            sessions: self
                .servers
                .iter()
                .map(|s| (s.name.clone(), Mutex::new(None)))
                .collect(),
        }))
    }
}

impl Drop for McpRun<'_> {
    fn drop(&mut self) {
        for slot in self.sessions.values_mut() {
            let conn = slot
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(c) = conn {
                let _ = c.close(&self.rt);
            }
        }
        if self.host.sandbox.is_some() && !self.host.keep_workspaces {
            let _ = std::fs::remove_dir_all(&self.workspace);
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn refusal(reason: String) -> ToolResult {
    ToolResult::refused("MCP host", reason)
}

/// Splits `server.tool` at the first dot.
pub fn split_tool(name: &str) -> Option<(&str, &str)> {
    name.split_once('.')
        .filter(|(s, t)| crate::config::valid_server_name(s) && !t.is_empty())
}

impl McpRun<'_> {
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
            .map_err(|e| e.to_string())
    }
}

impl ToolRunner for McpRun<'_> {
    fn run(&self, action: &Action, grant: Option<&Grant>) -> ToolResult {
        if let Err(reason) = self.admit(action, grant) {
            return refusal(reason);
        }
        let aliased = self.host.servers.iter().find_map(|s| {
            s.aliases
                .get(&action.tool)
                .map(|t| (s.name.as_str(), t.as_str()))
        });
        let Some((name, tool)) = aliased.or_else(|| split_tool(&action.tool)) else {
            return refusal(format!(
                "tool `{}` is not named SERVER.TOOL nor served under an alias",
                action.tool
            ));
        };
        let (Some(slot), Some(server)) = (
            self.sessions.get(name),
            self.host.servers.iter().find(|s| s.name == name),
        ) else {
            return refusal(format!("no MCP server `{name}` is declared"));
        };
        // One call at a time per server: its denials are then this call's.
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        let mut kernel = Vec::new();
        if let Some(c) = slot.as_ref() {
            c.settle(&self.rt);
        }
        if slot.as_ref().is_some_and(|c| !c.alive())
            && let Some(mut dead) = slot.take()
        {
            kernel.extend(dead.finish(true));
        }
        if slot.is_none() {
            match self.host.connect_on(&self.rt, server, &self.workspace) {
                Ok(c) => *slot = Some(c),
                Err(e) => {
                    kernel.push(limit_event(e.to_string()));
                    return ToolResult {
                        output: json!({"error": e.to_string()}),
                        kernel,
                        confinement: None,
                    };
                }
            }
        }
        let Some(conn) = slot.as_mut() else {
            return refusal(format!("MCP server `{name}` has no session"));
        };
        let called = conn.call(&self.rt, tool, action.params.clone());
        kernel.extend(conn.drain());
        let mut confinement = conn.confinement().cloned();
        if !conn.audit_complete()
            && let Some(c) = confinement.as_mut().and_then(Value::as_object_mut)
        {
            c.insert("denial_audit".into(), json!(knox_sandbox::AUDIT_INCOMPLETE));
        }
        let output = match called {
            Ok(result) => serde_json::to_value(&result).unwrap_or_else(
                |e| json!({"error": format!("the result does not serialize: {e}")}),
            ),
            Err(CallError {
                why,
                protocol: true,
            }) => json!({"error": format!("MCP server `{name}` answered: {why}")}),
            Err(CallError { why, .. }) => {
                // A failed call (timeout, crash, garbage) ends the session: the
                // process tree is killed, the next call starts a fresh one.
                if let Some(mut c) = slot.take() {
                    kernel.extend(c.finish(true));
                }
                kernel.push(limit_event(format!("MCP server `{name}`: {why}")));
                json!({"error": format!("MCP server `{name}` failed: {why}")})
            }
        };
        ToolResult {
            output,
            kernel,
            confinement,
        }
    }
}
