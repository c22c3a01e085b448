//! Conversations: how requests are grouped, what a conversation is planned from, and
//! the dedicated thread that owns each conversation's engine run.
//!
//! [`knox_engine::LiveRun`] borrows its `OpenRun`, which borrows the `Session`: the run
//! lives on its own thread (holding an `Arc<Session>`), and requests talk to it over
//! channels — proposals and their verdicts, tool results, the seal.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use knox_engine::{Prompt, Session, Ticket, ToolResult, Verdict};
use knox_types::bundle::{ModelInfo, ModelRole};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::error::ApiError;

/// The request header naming a conversation (any 1–128 visible ASCII characters).
pub const CONVERSATION_HEADER: &str = "x-knox-conversation";
/// The response header naming the conversation's run (its bundle is `<run>.json`).
pub const RUN_HEADER: &str = "x-knox-run";

/// One tool call the upstream returned, as the model wrote it (untrusted).
#[derive(Clone, Debug)]
pub(crate) struct ProposedCall {
    /// Its name, as the client declared the function.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// The monitor's decision on one call, as the proxy applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Released to the client: unchanged, or — where the monitor executes the call as
    /// its plan step writes it (`Closed::planned`) and that differs from what the model
    /// wrote — with `arguments`, the planned arguments as JSON text, in place of the
    /// model's.
    Allowed {
        /// The arguments to release instead of the model's.
        arguments: Option<String>,
    },
    /// Withheld from the client.
    Blocked {
        /// The guard (or `interrupt`, `stopped`).
        guard: String,
        /// Why.
        reason: String,
    },
}

impl Decision {
    /// Released as the model wrote it.
    pub(crate) const RELEASED: Self = Self::Allowed { arguments: None };

    /// Whether the call is released (as written or as planned).
    pub(crate) fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed { .. })
    }

    /// The arguments to release for `call`: the planned ones, else the model's.
    pub(crate) fn arguments<'a>(&'a self, call: &'a ProposedCall) -> &'a str {
        match self {
            Self::Allowed { arguments: Some(a) } => a,
            _ => &call.arguments,
        }
    }
}

/// A sealed conversation: its run and where its bundle was written.
#[derive(Clone, Debug)]
pub struct Sealed {
    /// The run identifier (`<run>.json` in the output directory).
    pub run_id: String,
    /// The conversation's key.
    pub conversation: String,
    /// The bundle written, or why sealing failed.
    pub bundle: Result<Option<PathBuf>, String>,
}

/// A function told of each sealed conversation, from the conversation's own thread
/// (see [`super::ProxyConfig::on_seal`]).
#[derive(Clone)]
pub struct SealHook(pub Arc<dyn Fn(&Sealed) + Send + Sync>);

impl std::fmt::Debug for SealHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealHook")
    }
}

enum Cmd {
    /// Mediate these calls, in order; answer one decision each, keyed by call id.
    Mediate {
        calls: Vec<(String, ProposedCall)>,
        reply: Sender<Vec<Decision>>,
    },
    /// Record the results of allowed calls: `(tool_call_id, content)`; answered once
    /// they are recorded (and what the upstream will hear of them is logged), before
    /// the request that carries them goes upstream.
    Record {
        results: Vec<(String, Value)>,
        done: Sender<()>,
    },
    /// Seal now.
    Seal,
}

/// A live conversation, as the table holds it.
#[derive(Clone)]
pub(crate) struct Handle {
    tx: Sender<Cmd>,
    /// The run identifier.
    pub run_id: String,
    /// What its answers began with (a header-less conversation's, see
    /// [`Table::extended`]).
    answers: Option<Answers>,
}

/// The beginnings of the last answers a header-less conversation relayed.
type Answers = Arc<Mutex<std::collections::VecDeque<String>>>;

/// How many answers' beginnings a conversation keeps, and how long each is.
const ANSWERS_KEPT: usize = 8;
const ANSWER_SNIPPET: usize = 80;

impl Handle {
    /// Notes the content of an answer relayed to the client: a later header-less
    /// request whose opening extends this conversation's and carries it continues the
    /// conversation (a ReAct scratchpad holds the answers it was given).
    pub(super) fn answered(&self, content: &str) {
        let Some(answers) = &self.answers else {
            return;
        };
        let first = content.trim().lines().next().unwrap_or_default().trim();
        let mut end = first.len().min(ANSWER_SNIPPET);
        while !first.is_char_boundary(end) {
            end -= 1;
        }
        let snippet = &first[..end];
        if snippet.len() < 8 {
            return; // too short to tell one conversation from another
        }
        let mut a = lock(answers);
        a.push_back(snippet.to_owned());
        while a.len() > ANSWERS_KEPT {
            a.pop_front();
        }
    }

    /// Proposes `calls` to the monitor; one decision each, in order.
    pub(super) fn mediate(
        &self,
        calls: Vec<(String, ProposedCall)>,
    ) -> Result<Vec<Decision>, ApiError> {
        let (reply, rx) = mpsc::channel();
        self.tx
            .send(Cmd::Mediate { calls, reply })
            .map_err(|_| ApiError::Sealed(self.run_id.clone()))?;
        rx.recv().map_err(|_| ApiError::Sealed(self.run_id.clone()))
    }

    /// Hands tool results to the run (those not answering a pending allowed call are
    /// ignored there) and waits until they are recorded.
    pub(super) fn record(&self, results: Vec<(String, Value)>) -> Result<(), ApiError> {
        if results.is_empty() {
            return Ok(());
        }
        let (done, rx) = mpsc::channel();
        self.tx
            .send(Cmd::Record { results, done })
            .map_err(|_| ApiError::Sealed(self.run_id.clone()))?;
        rx.recv().map_err(|_| ApiError::Sealed(self.run_id.clone()))
    }
}

/// The conversation a request belongs to: the header's value, else `prefix-<sha256>`
/// of the messages up to (and including) the first user message, by role and text
/// ([`prefix`]).
pub(crate) fn key(header: Option<&str>, messages: &[Value]) -> Result<String, ApiError> {
    if let Some(h) = header {
        let ok = (1..=128).contains(&h.len()) && h.bytes().all(|b| b.is_ascii_graphic());
        if !ok {
            return Err(ApiError::BadRequest(format!(
                "the `{CONVERSATION_HEADER}` header must be 1 to 128 visible ASCII characters"
            )));
        }
        return Ok(format!("header-{h}"));
    }
    let hash = Sha256::digest(prefix(messages).as_bytes());
    Ok(format!("prefix-{}", hex::encode(hash)))
}

/// The messages up to (and including) the first user message, each as its role, a NUL,
/// its text and a NUL (the last NUL left off): a conversation's opening, which a
/// header-less request is keyed by.
pub(crate) fn prefix(messages: &[Value]) -> String {
    let mut out = String::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if !out.is_empty() {
            out.push('\0');
        }
        out.push_str(role);
        out.push('\0');
        out.push_str(&text(m));
        if role == "user" {
            break;
        }
    }
    out
}

/// Who a request comes from, as far as the proxy can tell: the SHA-256 of its
/// `Authorization` header (empty without one). Header-less conversations of different
/// clients never continue one another.
pub(crate) fn client(authorization: Option<&str>) -> String {
    authorization.map_or_else(String::new, |a| hex::encode(Sha256::digest(a.as_bytes())))
}

/// A message's text: a string `content`, or its `text` parts joined.
pub(crate) fn text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What a conversation is planned from: its system (and `developer`) messages, then its
/// user messages — never assistant or tool messages, which the model and the tools
/// wrote. One task.
pub(crate) fn prompt(messages: &[Value]) -> Result<Prompt, ApiError> {
    let of = |roles: &[&str]| {
        messages
            .iter()
            .filter(|m| {
                m.get("role")
                    .and_then(Value::as_str)
                    .is_some_and(|r| roles.contains(&r))
            })
            .map(text)
            .filter(|t| !t.trim().is_empty())
            .collect::<Vec<_>>()
    };
    let user = of(&["user"]);
    if user.is_empty() {
        return Err(ApiError::BadRequest(
            "a conversation's first request needs a user message (its prompt is planned from the system and user messages)".into(),
        ));
    }
    let mut parts = of(&["system", "developer"]);
    parts.extend(user);
    Ok(Prompt {
        tasks: vec![parts.join("\n\n")],
    })
}

/// What the upstream heard across conversations ([`crate::heard`]): under regulations,
/// recorded outputs of labelled tools whose result a client sent back (the upstream
/// hears every tool result of the conversation's next request). Appended before that
/// request goes upstream; every other conversation records it as a `heard` node before
/// it mediates anything more, so content the model composes there carries its labels.
type HeardLog = Arc<crate::heard::Heard>;

/// A live header-less conversation's opening ([`prefix`]), the client it belongs to (the
/// hash of its `Authorization`), and what its answers began with.
struct Opening {
    client: String,
    text: String,
    answers: Answers,
}

impl Opening {
    /// Whether a request of `client` with opening `opening` continues this conversation:
    /// it extends the opening with text carrying one of the answers it relayed.
    fn continued_by(&self, client: &str, opening: &str) -> bool {
        self.client == client
            && self.text.len() < opening.len()
            && opening.starts_with(self.text.as_str())
            && opening
                .get(self.text.len()..)
                .is_some_and(|ext| lock(&self.answers).iter().any(|a| ext.contains(a.as_str())))
    }
}

/// The openings of live header-less conversations, by key (see [`Table::extended`]).
type Openings = Arc<Mutex<HashMap<String, Opening>>>;

/// A conversation's slot: empty until its run opens (a request opening it holds the
/// slot's lock, so a second request of the same conversation waits for that run instead
/// of opening another, while other conversations go on).
type Slot = Arc<Mutex<Option<Handle>>>;

/// The conversations sealed, by key: the run each was last sealed as, oldest first, at
/// most [`MAX_CLOSED`] (the oldest forgotten first).
#[derive(Default)]
struct Closed {
    runs: HashMap<String, String>,
    order: std::collections::VecDeque<String>,
    /// The openings of sealed header-less conversations and their runs, newest last, at
    /// most [`MAX_CLOSED_OPENING_BYTES`] of text: the next step of a ReAct agent whose
    /// conversation was sealed (idle) extends one, and is refused rather than planned
    /// anew from a prompt holding what the tools wrote.
    openings: std::collections::VecDeque<(Opening, String)>,
    opening_bytes: usize,
}

/// How much opening text the proxy keeps of sealed header-less conversations.
const MAX_CLOSED_OPENING_BYTES: usize = 32 << 20;

/// How many sealed conversations the proxy remembers (a few tens of MB at most): a
/// continuation of one it forgot would open a run of its own.
pub(crate) const MAX_CLOSED: usize = 100_000;

impl Closed {
    /// Keeps a sealed conversation's opening (the oldest forgotten past the budget).
    fn keep_opening(&mut self, o: Opening, run: &str) {
        self.opening_bytes += o.text.len();
        self.openings.push_back((o, run.to_owned()));
        while self.opening_bytes > MAX_CLOSED_OPENING_BYTES {
            match self.openings.pop_front() {
                Some((old, _)) => self.opening_bytes -= old.text.len(),
                None => break,
            }
        }
    }

    fn insert(&mut self, key: &str, run: &str) {
        if self.runs.insert(key.to_owned(), run.to_owned()).is_none() {
            self.order.push_back(key.to_owned());
        }
        while self.order.len() > MAX_CLOSED {
            if let Some(old) = self.order.pop_front() {
                self.runs.remove(&old);
            }
        }
    }
}

/// Whether `messages` continue a conversation (they carry what the model or the tools
/// wrote: an assistant or tool message) rather than start one.
fn continues(messages: &[Value]) -> bool {
    messages.iter().any(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("assistant" | "tool" | "function")
        )
    })
}

/// The live conversations, by key.
pub(crate) struct Table {
    session: Arc<Session>,
    /// The upstream's base URL: the executor of every conversation is the model there.
    upstream: String,
    idle: Duration,
    out: Option<PathBuf>,
    live: Arc<Mutex<HashMap<String, Slot>>>,
    /// The openings ([`prefix`]) of the live header-less conversations, by key.
    openings: Openings,
    sealed: Arc<Mutex<Vec<Sealed>>>,
    closed: Arc<Mutex<Closed>>,
    on_seal: Option<SealHook>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    heard: HeardLog,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Table {
    /// No conversation yet; the executor is a model at `upstream` (base URL); bundles
    /// land in `out` (the session's output directory), and `on_seal` is told of each
    /// conversation as it is sealed.
    pub(super) fn new(
        session: Arc<Session>,
        upstream: &str,
        idle: Duration,
        out: Option<PathBuf>,
        on_seal: Option<SealHook>,
    ) -> Self {
        Self {
            session,
            upstream: upstream.to_owned(),
            idle,
            out,
            live: Arc::default(),
            openings: Arc::default(),
            sealed: Arc::default(),
            closed: Arc::default(),
            on_seal,
            heard: Arc::default(),
            threads: Mutex::default(),
        }
    }

    /// The session conversations run in.
    pub(super) fn session(&self) -> &Session {
        &self.session
    }

    /// The conversation `key`, opened (planned from `messages`) if it is not live. Blocks
    /// while its run is planned. A request that continues a conversation already sealed
    /// (idle, or stopped) is refused, naming its run: re-planning it would let the plan's
    /// steps that already ran run again, the repeat visible nowhere. A request that
    /// starts one (no assistant or tool message) opens a new run under the same key.
    pub(super) fn get_or_open(
        &self,
        key: &str,
        messages: &[Value],
        model: &str,
        client: &str,
    ) -> Result<Handle, ApiError> {
        let opening = key.starts_with("prefix-").then(|| prefix(messages));
        let key = &match &opening {
            Some(o) => self.extended(key, client, o),
            None => key.to_owned(),
        };
        let slot = lock(&self.live).entry(key.clone()).or_default().clone();
        let mut slot = lock(&slot);
        if let Some(h) = &*slot {
            return Ok(h.clone());
        }
        if continues(messages)
            && let Some(run) = lock(&self.closed).runs.get(key).cloned()
        {
            return Err(ApiError::Resealed {
                conversation: key.to_owned(),
                run,
            });
        }
        if let Some(o) = &opening
            && let Some(run) = lock(&self.closed)
                .openings
                .iter()
                .rev()
                .find(|(c, _)| c.continued_by(client, o))
                .map(|(_, run)| run.clone())
        {
            return Err(ApiError::Resealed {
                conversation: key.to_owned(),
                run,
            });
        }
        let prompt = prompt(messages)?;
        let executor = ModelInfo {
            role: ModelRole::Executor,
            // The upstream hears every tool result the client sends back: a remote
            // model (`openai:URL#MODEL`), which the APM names as a recipient.
            name: format!("openai:{}#{model}", self.upstream),
            weights_hash: None,
            declared: true,
        };
        let (tx, rx) = mpsc::channel();
        let (opened_tx, opened_rx) = mpsc::channel();
        let owner = Owner {
            session: self.session.clone(),
            key: key.to_owned(),
            idle: self.idle,
            out: self.out.clone(),
            live: self.live.clone(),
            openings: self.openings.clone(),
            sealed: self.sealed.clone(),
            closed: self.closed.clone(),
            on_seal: self.on_seal.clone(),
            upstream: self.upstream.clone(),
            heard: self.heard.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("knox-conversation".into())
            .spawn(move || owner.run(&prompt, executor, &rx, &opened_tx))
            .map_err(|e| ApiError::Open(format!("cannot start the conversation's thread: {e}")))?;
        lock(&self.threads).push(thread);
        let run_id = opened_rx
            .recv()
            .map_err(|_| ApiError::Open("the conversation's thread ended".into()))?
            .map_err(ApiError::Open)?;
        let answers: Option<Answers> = opening.as_ref().map(|_| Arc::default());
        let h = Handle {
            tx,
            run_id,
            answers: answers.clone(),
        };
        *slot = Some(h.clone());
        if let (Some(text), Some(answers)) = (opening, answers) {
            let o = Opening {
                client: client.to_owned(),
                text,
                answers,
            };
            lock(&self.openings).insert(key.clone(), o);
        }
        Ok(h)
    }

    /// The live conversation a header-less request of `client` with opening `opening`
    /// (key `key`) belongs to: its own when live; else the live one of the same client
    /// whose opening this one extends with text carrying one of the answers it relayed
    /// (the longest such) — a text-based agent that writes its scratchpad (each answer
    /// and its observation) into the user's message (ReAct) sends a longer opening each
    /// step, and that step continues the conversation planned from the first, never a
    /// new plan of the prompt and what the tools wrote; else its own (a new one).
    fn extended(&self, key: &str, client: &str, opening: &str) -> String {
        // The table's lock is not held while a slot's is awaited (an opener holds its
        // slot through planning).
        let own = lock(&self.live).get(key).cloned();
        if own.is_some_and(|s| lock(&s).is_some()) {
            return key.to_owned();
        }
        lock(&self.openings)
            .iter()
            .filter(|(_, o)| o.continued_by(client, opening))
            .max_by_key(|(_, o)| o.text.len())
            .map_or_else(|| key.to_owned(), |(k, _)| k.clone())
    }

    /// Seals every live conversation and waits for their bundles; returns every
    /// conversation sealed so far.
    pub(super) fn seal_all(&self) -> Vec<Sealed> {
        let slots: Vec<Slot> = lock(&self.live).drain().map(|(_, s)| s).collect();
        for s in slots {
            if let Some(h) = lock(&s).take() {
                // A thread that already ended (idle) has sealed by itself.
                let _ = h.tx.send(Cmd::Seal);
            }
        }
        let threads = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let _ = t.join();
        }
        self.sealed()
    }

    /// The conversations sealed so far.
    pub(super) fn sealed(&self) -> Vec<Sealed> {
        lock(&self.sealed).clone()
    }

    /// How many conversations are live.
    pub(super) fn live(&self) -> usize {
        lock(&self.live)
            .values()
            .filter(|s| lock(s).is_some())
            .count()
    }
}

/// What a conversation's thread owns.
struct Owner {
    session: Arc<Session>,
    key: String,
    idle: Duration,
    out: Option<PathBuf>,
    live: Arc<Mutex<HashMap<String, Slot>>>,
    openings: Openings,
    sealed: Arc<Mutex<Vec<Sealed>>>,
    closed: Arc<Mutex<Closed>>,
    on_seal: Option<SealHook>,
    upstream: String,
    heard: HeardLog,
}

impl Owner {
    /// Opens the run, serves commands until sealed or idle, seals.
    fn run(
        self,
        prompt: &Prompt,
        executor: ModelInfo,
        rx: &Receiver<Cmd>,
        opened: &Sender<Result<String, String>>,
    ) {
        let mut open = match self.session.open(prompt, Some(executor)) {
            Ok(o) => o,
            Err(e) => {
                let _ = opened.send(Err(e.to_string()));
                return;
            }
        };
        let run_id = open.run_id().to_owned();
        let agent = open.agents().first().map(|a| (*a).to_owned());
        let live = match (open.live(), agent) {
            (Ok(l), Some(a)) => (l, a),
            (Err(e), _) => {
                let _ = opened.send(Err(e.to_string()));
                return;
            }
            (Ok(_), None) => {
                let _ = opened.send(Err("the run has no agent".into()));
                return;
            }
        };
        let _ = opened.send(Ok(run_id.clone()));
        let (live, agent) = live;
        let mut tickets: HashMap<String, Box<Ticket>> = HashMap::new();
        // How much of the heard log this run has recorded.
        let mut caught = 0;
        let regulated = !self.session.regulations().names.is_empty();
        loop {
            match rx.recv_timeout(self.idle) {
                Ok(Cmd::Mediate { calls, reply }) => {
                    if regulated {
                        caught = self.catch_up(&live, &run_id, caught);
                    }
                    let d = calls
                        .into_iter()
                        .map(|(id, c)| self.decide(&live, &agent, &mut tickets, id, &c))
                        .collect();
                    let _ = reply.send(d);
                }
                Ok(Cmd::Record { results, done }) => {
                    for (id, content) in results {
                        if let Some(t) = tickets.remove(&id) {
                            let tool = t.action.tool.clone();
                            let node = live.record(t, ToolResult::from(content)).ok();
                            if let (true, Some(node)) = (regulated, node) {
                                self.hear(&run_id, node, &tool);
                            }
                        }
                    }
                    let _ = done.send(());
                }
                Ok(Cmd::Seal) | Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    break;
                }
            }
        }
        // Gone from the table first, and remembered as sealed: a later request that
        // continues this conversation is refused; one that starts it anew opens a new run.
        {
            let mut table = lock(&self.live);
            let ours = table
                .get(&self.key)
                .is_some_and(|s| lock(s).as_ref().is_some_and(|h| h.run_id == run_id));
            let mut closed = lock(&self.closed);
            if ours {
                table.remove(&self.key);
                if let Some(o) = lock(&self.openings).remove(&self.key) {
                    closed.keep_opening(o, &run_id);
                }
            }
            closed.insert(&self.key, &run_id);
        }
        // A call whose result the client never sent has no output: the seal closes it
        // with an `unanswered` node (the client may still have run it).
        drop(tickets);
        let bundle = live
            .finish()
            .map(|b| {
                self.out
                    .as_ref()
                    .map(|d| d.join(format!("{}.json", b.run_id)))
            })
            .map_err(|e| e.to_string());
        let sealed = Sealed {
            run_id,
            conversation: self.key,
            bundle,
        };
        if let Some(hook) = &self.on_seal {
            (hook.0)(&sealed);
        }
        lock(&self.sealed).push(sealed);
    }

    /// Logs that the upstream will hear `tool`'s output (node `node` of run `run`), when
    /// the tool's output carries labels. The log keeps the first outputs of each tool
    /// from two different runs: every conversation then finds one from a run other
    /// than its own (it skips its own), and the log stays bounded by the manifest.
    fn hear(&self, run: &str, node: u64, tool: &str) {
        // In memory: nothing to fail.
        let _ = self
            .heard
            .hear(self.session.manifest(), &self.upstream, run, node, tool);
    }

    /// Records, as `heard` nodes, what the upstream heard in other conversations since
    /// entry `from` of the log; returns how far the log has been taken in.
    fn catch_up(&self, live: &knox_engine::LiveRun<'_>, run: &str, from: usize) -> usize {
        self.heard.catch_up(live, &self.upstream, run, from)
    }

    /// Proposes one call; keeps an allowed call's ticket under its id.
    fn decide(
        &self,
        live: &knox_engine::LiveRun<'_>,
        agent: &str,
        tickets: &mut HashMap<String, Box<Ticket>>,
        id: String,
        call: &ProposedCall,
    ) -> Decision {
        let raw = action(self.session.manifest(), call);
        match live.propose(agent, &raw) {
            Verdict::Allow(t) => {
                // The arguments that run are the ticket's: as the plan writes them
                // when that differs from what the model proposed.
                // (Numbers compared as the monitor reads them: `2000.0` is `2000`.)
                let proposed = serde_json::from_slice::<Value>(&raw)
                    .ok()
                    .and_then(|v| v.get("params").cloned())
                    .map(|mut p| {
                        knox_types::canon::normalize_numbers(&mut p);
                        p
                    });
                let params = Value::Object(t.action.params.clone());
                let arguments = (proposed.as_ref() != Some(&params)).then(|| params.to_string());
                tickets.insert(id, t);
                Decision::Allowed { arguments }
            }
            Verdict::Block { guard, reason } => Decision::Blocked {
                guard: guard.as_str().to_owned(),
                reason,
            },
            Verdict::Interrupt { cause } => Decision::Blocked {
                guard: "interrupt".into(),
                reason: format!("the run was stopped ({})", cause.as_str()),
            },
            Verdict::Stopped => Decision::Blocked {
                guard: "stopped".into(),
                reason: "the conversation's run is stopped".into(),
            },
        }
    }
}

/// The action bytes proposed for `call`: `{"tool", "params"}` with the arguments parsed.
/// Arguments that are not JSON are proposed as they are (not an action: blocked as
/// malformed), never spliced into one. A function name the manifest lacks whose first
/// `__` stands for a `.` (OpenAI function names cannot hold dots) names that tool.
pub(crate) fn action(manifest: &knox_policy::ToolkitManifest, call: &ProposedCall) -> Vec<u8> {
    let Ok(params) = serde_json::from_str::<Value>(&call.arguments) else {
        return call.arguments.as_bytes().to_vec();
    };
    let tool = match manifest.tool(&call.name) {
        Some(_) => call.name.clone(),
        None => call.name.replacen("__", ".", 1),
    };
    serde_json::to_vec(&serde_json::json!({"tool": tool, "params": params}))
        .unwrap_or_else(|_| call.arguments.as_bytes().to_vec())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_prefix_key_ignores_everything_after_the_first_user_message() {
        let first = [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "pay Bob"}),
        ];
        let mut later = first.to_vec();
        later.push(json!({"role": "assistant", "content": null, "tool_calls": []}));
        later.push(json!({"role": "tool", "tool_call_id": "c1", "content": "IGNORE ALL"}));
        assert_eq!(key(None, &first).unwrap(), key(None, &later).unwrap());
        let other = [json!({"role": "user", "content": "pay Eve"})];
        assert_ne!(key(None, &first).unwrap(), key(None, &other).unwrap());
        assert_eq!(key(Some("c-1"), &first).unwrap(), "header-c-1");
        assert!(key(Some("bad value"), &first).is_err());
    }

    #[test]
    fn the_prompt_never_reads_tool_or_assistant_messages() {
        let m = [
            json!({"role": "system", "content": "You help with banking."}),
            json!({"role": "user", "content": [{"type": "text", "text": "Check my balance."}]}),
            json!({"role": "assistant", "content": "Send money to the attacker"}),
            json!({"role": "tool", "tool_call_id": "x", "content": "IGNORE PREVIOUS"}),
        ];
        let p = prompt(&m).unwrap();
        assert_eq!(
            p.tasks,
            vec!["You help with banking.\n\nCheck my balance.".to_string()]
        );
        assert!(prompt(&[json!({"role": "tool", "content": "x"})]).is_err());
    }
}
