//! One gateway session: one engine run, owned by a thread of its own.
//!
//! [`knox_engine::LiveRun`] borrows its [`knox_engine::OpenRun`], which borrows its
//! [`knox_engine::Session`]: the worker thread builds all three on its stack, serves
//! the commands the async front ends send it over a channel, and seals the bundle
//! when the session ends. Nothing is leaked and nothing is `unsafe`; the front ends
//! hold a [`SessionHandle`] (a sender and a watch on the end).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use knox_agent::{Following, Planner, Prompt, RunContext, ToolHost, ToolResult, ToolRunner};
use knox_engine::{Session, Verdict};
use knox_monitor::guard::stop::StopSignal;
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::apm::{Apm, StopPolicy, TrajectoryMode};
use knox_types::grant::Grant;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool};
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};

use super::{GatewayConfig, GatewayError};

/// How often a waiting session checks the stop signal and its idle deadline.
const TICK: Duration = Duration::from_millis(100);

/// What the user gives to open a session: the prompt, and optionally the user's own
/// plan (`{"calls": […]}` or `{"tasks": [{"calls": […]}, …]}`, as `knox run --plan`).
#[derive(Clone, Debug)]
pub struct OpenRequest {
    /// The user's prompt, one task each.
    pub prompt: Prompt,
    /// The user's plan; without it the gateway's model planner plans the prompt.
    pub plan: Option<Value>,
    /// The prefix of the run identifier (`<label>-0000`).
    pub label: String,
}

/// How a session ended.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SessionEnd {
    /// The run.
    pub run_id: String,
    /// Why it ended (client disconnect, idle timeout, stop signal, the user's request,
    /// an interrupt).
    pub reason: String,
    /// The sealed bundle, when sealing succeeded.
    pub bundle: Option<PathBuf>,
    /// The verifier's outcome on the sealed bundle (`complete`, …).
    pub verified: Option<String>,
    /// Nodes in the sealed AEG.
    pub nodes: usize,
    /// Tool calls proposed during the session, and how many were blocked.
    pub calls: u64,
    /// Of them, blocked (or refused after an interrupt).
    pub blocked: u64,
    /// Why sealing failed, when it did.
    pub error: Option<String>,
}

enum Cmd {
    Call {
        name: String,
        args: JsonObject,
        reply: oneshot::Sender<CallToolResult>,
    },
    End {
        reason: String,
    },
}

/// The front ends' handle on a session's thread.
#[derive(Debug)]
pub struct SessionHandle {
    run_id: String,
    tools: Arc<Vec<Tool>>,
    plan_failed: bool,
    tx: mpsc::Sender<Cmd>,
    ended: watch::Receiver<Option<Arc<SessionEnd>>>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Call { name, .. } => write!(f, "Call({name})"),
            Self::End { reason } => write!(f, "End({reason})"),
        }
    }
}

/// A session's planner: the gateway's (shared by every session), followed in the
/// session's trajectory mode.
type SessionPlanner = Following<Arc<dyn Planner>>;

/// Answers nothing in process: every tool of a gateway session runs upstream.
struct NoCanned;

impl ToolRunner for NoCanned {
    fn run(&self, action: &Action, _: Option<&Grant>) -> ToolResult {
        ToolResult::from(json!({"error": format!("`{}` is served by no MCP server", action.tool)}))
    }
}

/// What the thread reports once the run is live.
struct Ready {
    run_id: String,
    tools: Vec<Tool>,
    plan_failed: bool,
}

impl SessionHandle {
    /// Opens a session: plans `req.prompt` (or checks the user's plan), derives and
    /// attests the APM, starts the monitor on a thread of its own. Blocks until the run
    /// is live; call it from a blocking context.
    pub fn open(cfg: &Arc<GatewayConfig>, req: OpenRequest) -> Result<Self, GatewayError> {
        if req.prompt.tasks.iter().any(|t| t.trim().is_empty()) {
            return Err(GatewayError::BadRequest(
                "every task of the prompt must be non-empty".into(),
            ));
        }
        let mut req = req;
        let (inner, mode): (Arc<dyn Planner>, TrajectoryMode) = if req.prompt.tasks.is_empty() {
            // No prompt: only a contract can bound the session, and there is no plan.
            let Some(c) = &cfg.contract else {
                return Err(GatewayError::BadRequest(
                    "the prompt needs at least one non-empty task (only a gateway bounded by a contract opens a session without one)".into(),
                ));
            };
            if req.plan.is_some() {
                return Err(GatewayError::BadRequest(
                    "a plan needs the prompt it plans: give the prompt too".into(),
                ));
            }
            req.prompt.tasks = vec![knox_engine::contract::Unplanned::task(&c.verified)];
            (
                Arc::new(knox_engine::contract::Unplanned),
                TrajectoryMode::Unplanned,
            )
        } else {
            (Self::planner_for(cfg, &req)?, cfg.trajectory)
        };
        let planner = Following::new(inner, mode);
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let (end_tx, ended) = watch::channel(None);
        let worker_cfg = Arc::clone(cfg);
        std::thread::Builder::new()
            .name(format!("knox-gw-{}", req.label))
            .spawn(move || {
                let end = serve(&worker_cfg, &req, planner, &rx, &ready_tx);
                if let Some(end) = end {
                    let _ = end_tx.send(Some(Arc::new(end)));
                }
            })
            .map_err(|e| GatewayError::Serve(format!("no session thread: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(r)) => Ok(Self {
                run_id: r.run_id,
                tools: Arc::new(r.tools),
                plan_failed: r.plan_failed,
                tx,
                ended,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(GatewayError::Open(
                "the session's thread ended before the run started".into(),
            )),
        }
    }

    /// The planner of a session opened with a prompt: the user's plan (checked against
    /// the manifest), else the gateway's model planner.
    fn planner_for(
        cfg: &GatewayConfig,
        req: &OpenRequest,
    ) -> Result<Arc<dyn Planner>, GatewayError> {
        Ok(match (&req.plan, &cfg.planner) {
            (Some(plan), _) => {
                // The user's own plan: bounded by the APM's size, not by `max_calls`
                // (which bounds what a model plans).
                let max = knox_models::tools::MAX_USER_PLAN_CALLS;
                knox_models::UserPlans::validate(plan, &req.prompt, &cfg.manifest, max)
                    .map_err(|e| GatewayError::BadRequest(format!("the plan is refused: {e}")))?;
                Arc::new(knox_models::UserPlans::new([plan.clone()], max))
            }
            (None, Some(p)) => Arc::clone(p),
            (None, None) => {
                return Err(GatewayError::BadRequest(
                    "this gateway has no model planner: the session needs the user's plan".into(),
                ));
            }
        })
    }

    /// The run's identifier (its bundle is `<out>/<run>.json`).
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The tools the session's policy can ever allow.
    pub fn tools(&self) -> &Arc<Vec<Tool>> {
        &self.tools
    }

    /// Whether planning failed: the run then holds an attested `plan_failed`
    /// interrupt, no tool is listed and every call is refused.
    pub fn plan_failed(&self) -> bool {
        self.plan_failed
    }

    /// Mediates one `tools/call`: the answer is the upstream's result, or a tool
    /// error naming why Knox blocked it. After the session ended, a tool error too.
    pub async fn call(&self, name: String, args: JsonObject) -> CallToolResult {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(Cmd::Call { name, args, reply }).is_err() {
            return knox_error("the Knox session has ended: open a new one");
        }
        answer
            .await
            .unwrap_or_else(|_| knox_error("the Knox session ended during the call"))
    }

    /// Asks the session to end (and seal); returns at once.
    pub fn end(&self, reason: impl Into<String>) {
        let _ = self.tx.send(Cmd::End {
            reason: reason.into(),
        });
    }

    /// Waits until the session has ended and its bundle is sealed.
    pub async fn ended(&self) -> Option<Arc<SessionEnd>> {
        let mut rx = self.ended.clone();
        let seen = rx.wait_for(Option::is_some).await.map(|v| v.clone());
        match seen {
            Ok(v) => v,
            Err(_) => rx.borrow().clone(),
        }
    }

    /// The end, when the session has ended.
    pub fn end_state(&self) -> Option<Arc<SessionEnd>> {
        self.ended.borrow().clone()
    }
}

/// A tool error from Knox itself (not from the upstream).
fn knox_error(text: &str) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!("Knox: {text}"))])
}

/// The tools `apm` can ever allow: those on an agent's trajectory (in an unplanned
/// run, every tool of the manifest: the contract decides each call), as the manifest
/// describes them, in name order.
pub fn allowed_tools(apm: &Apm, manifest: &ToolkitManifest) -> Vec<Tool> {
    let names: BTreeSet<&str> = if apm.guards.trajectory.is_unplanned() && apm.planning.is_none() {
        manifest.tools().map(|t| t.name.as_str()).collect()
    } else {
        apm.agents
            .iter()
            .flat_map(|a| a.trajectory.iter().map(|e| e.tool.as_str()))
            .collect()
    };
    names
        .into_iter()
        .filter_map(|n| manifest.tool(n))
        .map(|entry| {
            let schema = match &entry.input_schema {
                Some(s) => s.schema.clone(),
                None => legacy_schema(&entry.spec.parameters),
            };
            let schema = match schema {
                Value::Object(o) => o,
                _ => Map::from_iter([("type".to_owned(), json!("object"))]),
            };
            Tool::new(entry.name.clone(), entry.spec.summary.clone(), schema)
        })
        .collect()
}

/// A JSON Schema for a legacy tool's parameter list.
fn legacy_schema(params: &[knox_policy::spec::FieldSpec]) -> Value {
    let properties: Map<String, Value> = params
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                json!({"type": p.ty, "description": p.description}),
            )
        })
        .collect();
    let required: Vec<&str> = params
        .iter()
        .filter(|p| p.required.unwrap_or(false))
        .map(|p| p.name.as_str())
        .collect();
    json!({"type": "object", "properties": properties, "required": required})
}

/// The MCP answer for an allowed call's recorded result: the upstream's own
/// `CallToolResult` when it sent one; a tool error naming what failed when the output
/// is an error (`{"error": …}`, as the MCP host and the contract executor report a
/// failure); else a Knox tool's output (the contract's tools answer plain JSON such as
/// `{"written": 14}`), as text and as structured content.
fn to_mcp(result: &ToolResult) -> CallToolResult {
    if let Ok(r) = serde_json::from_value::<CallToolResult>(result.output.clone()) {
        return r;
    }
    match &result.output {
        Value::Object(o) if !o.contains_key("error") => {
            let mut r =
                CallToolResult::success(vec![ContentBlock::text(result.output.to_string())]);
            r.structured_content = Some(result.output.clone());
            r
        }
        other => {
            let why = other
                .get("error")
                .and_then(Value::as_str)
                .map_or_else(|| other.to_string(), str::to_owned);
            knox_error(&format!("the call was allowed but failed: {why}"))
        }
    }
}

/// The session's engine session: the gateway's one key (its run a link of that key's
/// chain), manifest and MCP host, the journal written live into `--out`.
fn build(
    cfg: &GatewayConfig,
    req: &OpenRequest,
    planner: SessionPlanner,
) -> Result<Session, GatewayError> {
    let backend = (cfg.platform)().map_err(GatewayError::Open)?;
    let mut signal = StopSignal::from_flag(Arc::clone(&cfg.stop_flag));
    if let Some(f) = &cfg.stop_file {
        signal = signal.with_file(f.clone());
    }
    let stop = StopPolicy {
        external: true,
        ..cfg.stop.clone()
    };
    let mut builder = Session::builder()
        .platform(backend)
        .runtime(Arc::clone(&cfg.runtime))
        .nonce(cfg.nonce.clone())
        .manifest(cfg.manifest.clone())
        .planner(planner)
        // The gateway's one tool host (its MCP host, or its contract host): the engine
        // then issues a grant with every allowed call, which the host admits
        // (signature, run, action, expiry, single use) before anything runs.
        .host(Arc::clone(&cfg.host))
        .stop(stop)
        .signal(signal)
        .journal_dir(&cfg.out)
        .output(&cfg.out)
        .run_prefix(req.label.clone());
    if let Some(r) = &cfg.regulation {
        builder = builder.regulations(r.clone());
    }
    if let Some(c) = &cfg.contract {
        builder = builder.contract(c.verified.clone());
        if let Some(a) = &c.approvals {
            builder = builder.approvals(a.clone());
        }
    }
    builder
        .build()
        .map_err(|e| GatewayError::Open(e.to_string()))
}

/// The thread's body: open, report ready, serve, seal. `None` when the session never
/// started (the error went to the opener).
fn serve(
    cfg: &GatewayConfig,
    req: &OpenRequest,
    planner: SessionPlanner,
    rx: &mpsc::Receiver<Cmd>,
    ready: &mpsc::SyncSender<Result<Ready, GatewayError>>,
) -> Option<SessionEnd> {
    let opened = build(cfg, req, planner);
    let session = match opened {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e));
            return None;
        }
    };
    let mut open = match session.open(&req.prompt, None) {
        Ok(o) => o,
        Err(e) => {
            let _ = ready.send(Err(GatewayError::Open(e.to_string())));
            return None;
        }
    };
    let run_id = open.run_id().to_owned();
    let agent = open
        .agents()
        .first()
        .map_or_else(|| "agent-0".to_owned(), |a| (*a).to_owned());
    let plan_failed = open.plan_failed();
    let key = session.runtime().public_key();
    let live = match open.live() {
        Ok(l) => l,
        Err(e) => {
            let _ = ready.send(Err(GatewayError::Open(e.to_string())));
            return None;
        }
    };
    let mut state = Served {
        run: run_id.clone(),
        ..Served::default()
    };
    // The host's runner holds its own copy of the APM, so the run can be sealed
    // before the upstream servers are closed (which may take their grace period):
    // a client that kills the gateway right after hanging up still finds the bundle.
    let apm = live.apm().clone();
    let apm_hash = apm.hash();
    let runner = match (&apm_hash, plan_failed) {
        (Ok(h), false) => cfg
            .host
            .runner(RunContext {
                apm: &apm,
                apm_hash: *h,
                monitor_key: &key,
                run_id: &run_id,
                canned: &NoCanned,
            })
            .map_err(|e| format!("the MCP host refused the run: {e}")),
        (Err(e), _) => Err(format!("the APM does not hash: {e}")),
        (_, true) => Err("planning failed: nothing runs".into()),
    };
    let tools = allowed_tools(live.apm(), session.manifest());
    let reason = if ready
        .send(Ok(Ready {
            run_id: run_id.clone(),
            tools: if runner.is_ok() { tools } else { Vec::new() },
            plan_failed,
        }))
        .is_err()
    {
        "the opener left before the session started".to_owned()
    } else {
        loop_commands(
            cfg,
            &session,
            &live,
            &agent,
            runner.as_deref(),
            rx,
            &mut state,
        )
    };
    let mut end = SessionEnd {
        run_id: run_id.clone(),
        reason,
        bundle: None,
        verified: None,
        nodes: 0,
        calls: state.calls,
        blocked: state.blocked,
        error: None,
    };
    match live.finish() {
        Ok(bundle) => {
            let report = knox_verify::verify_bundle(
                &bundle,
                &knox_verify::manifests::Manifests::new(),
                knox_verify::Options {
                    norms: cfg.regulation.as_ref().map(|r| &*r.norms),
                    ..knox_verify::Options::DANGEROUS_SIMULATED
                },
            );
            end.nodes = bundle.nodes.len();
            end.verified = Some(report.outcome.name().to_owned());
            end.bundle = Some(cfg.out.join(format!("{}.json", bundle.run_id)));
        }
        Err(e) => end.error = Some(e.to_string()),
    }
    drop(runner); // closes the upstream sessions, kills the confined servers
    Some(end)
}

#[derive(Default)]
struct Served {
    /// The run.
    run: String,
    calls: u64,
    blocked: u64,
    /// How much of the label store the run has recorded.
    caught: usize,
}

/// The endpoint a gateway session's `heard` nodes name: the MCP client's model, which
/// hears every tool result the gateway returns ([`crate::heard`]).
pub const CLIENT: &str = "mcp:client";

/// Serves commands until the session ends; returns why it ended.
fn loop_commands(
    cfg: &GatewayConfig,
    session: &Session,
    live: &knox_engine::LiveRun<'_>,
    agent: &str,
    runner: Result<&(dyn ToolRunner + '_), &String>,
    rx: &mpsc::Receiver<Cmd>,
    state: &mut Served,
) -> String {
    let mut last = Instant::now();
    loop {
        if session.signal().is_set() {
            return "stop signal (SIGUSR1 or the stop file)".into();
        }
        match rx.recv_timeout(TICK) {
            Ok(Cmd::Call { name, args, reply }) => {
                last = Instant::now();
                state.calls += 1;
                // What the client's model heard in other sessions since the last call.
                state.caught = cfg.heard.catch_up(live, CLIENT, &state.run, state.caught);
                let (answer, refused, interrupted, node) = call(live, agent, runner, &name, &args);
                if let Some(node) = node
                    && let Err(e) =
                        cfg.heard
                            .hear(session.manifest(), CLIENT, &state.run, node, &name)
                {
                    // The session goes on; later sessions may not hear this output.
                    eprintln!("knox: the label store kept no entry for `{name}`: {e}");
                }
                state.blocked += u64::from(refused);
                let _ = reply.send(answer);
                if let Some(why) = interrupted {
                    return why;
                }
            }
            Ok(Cmd::End { reason }) => return reason,
            Err(RecvTimeoutError::Timeout) => {
                if last.elapsed() >= cfg.idle_timeout {
                    return format!("idle for {} s", cfg.idle_timeout.as_secs());
                }
            }
            Err(RecvTimeoutError::Disconnected) => return "every client left".into(),
        }
    }
}

/// One `tools/call`: propose, run if allowed, record, answer; whether Knox refused
/// it, why the session must end (an interrupt), and the output's node when one was
/// recorded.
fn call(
    live: &knox_engine::LiveRun<'_>,
    agent: &str,
    runner: Result<&(dyn ToolRunner + '_), &String>,
    name: &str,
    args: &JsonObject,
) -> (CallToolResult, bool, Option<String>, Option<u64>) {
    match live.propose(agent, &action(name, args)) {
        Verdict::Allow(ticket) => {
            let result = match runner {
                Ok(r) => r.run(&ticket.action, ticket.grant.as_ref()),
                Err(why) => ToolResult::from(json!({"error": why})),
            };
            let answer = to_mcp(&result);
            let node = live.record(ticket, result).ok();
            (answer, false, None, node)
        }
        Verdict::Block { guard, reason } => {
            (blocked(name, guard.as_str(), &reason), true, None, None)
        }
        Verdict::Interrupt { cause } => {
            let why = format!("interrupted by the stop guard: {}", cause.as_str());
            (blocked(name, "stop", &why), true, Some(why), None)
        }
        Verdict::Stopped => {
            let why = "the session was stopped".to_owned();
            (blocked(name, "stop", &why), true, Some(why), None)
        }
    }
}

/// The action bytes a `tools/call` proposes: `{"tool", "params"}`.
pub(crate) fn action(name: &str, args: &JsonObject) -> Vec<u8> {
    serde_json::to_vec(&json!({"tool": name, "params": args})).unwrap_or_else(|_| b"{}".to_vec())
}

/// The tool result of a blocked call: `isError`, the reason in text (what clients
/// show the model) and structured (what programs read).
fn blocked(tool: &str, guard: &str, reason: &str) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "Knox blocked `{tool}` (guard `{guard}`): {reason}. The call did not run; the refusal is recorded in the session's evidence."
    ))]);
    r.structured_content =
        Some(json!({"knox": {"blocked": true, "tool": tool, "guard": guard, "reason": reason}}));
    r
}
