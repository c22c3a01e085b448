//! A run told as a story: the user's prompt and plan, then every proposal in the order
//! it was made — which agent, which tool, with what arguments, what each guard said,
//! whether it ran or was blocked and why, what it returned — and what the kernel denied
//! while a tool ran, start-up noise of a tool's runtime told apart from a call's.
//!
//! Built from the evidence's nodes alone (a sealed bundle's or a live run's prefix), so
//! the run page and the live page tell the same story; nothing here decides anything:
//! the verifier's outcome is the run's, this is how it reads.

use knox_types::aeg::{Node, NodeKind};
use knox_types::apm::Apm;
use knox_types::payload::{BlockedPayload, CheckPayload, InterruptPayload, KernelEvent};

/// The longest argument or output text shown in full on a page; longer ones are cut
/// (the node's canonical JSON, one click away, has all of it).
pub const SHOWN_CHARS: usize = 2_000;

/// What became of a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Every guard passed and the tool ran.
    Executed,
    /// A guard blocked it: which, and why.
    Blocked {
        /// The blocking guard's name.
        guard: String,
        /// Its reason, as the evidence records it.
        reason: String,
    },
    /// Neither ran nor blocked in the evidence (a prefix that ends here).
    Pending,
}

/// One guard's check of a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The check node.
    pub seq: u64,
    /// The guard's name.
    pub guard: String,
    /// Whether it passed.
    pub passed: bool,
    /// What it recorded (its detail, compact JSON, cut at [`SHOWN_CHARS`]).
    pub detail: String,
}

/// A kernel event recorded while a tool ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The blocked node that records it.
    pub seq: u64,
    /// `syscall`, `limit`, `refusal` or another event name.
    pub event: String,
    /// What was denied: the system call and its decoded argument, or the detail.
    pub what: String,
    /// The runtime whose documented start-up probe this is ([`startup_probe`]), when it
    /// is one: shown apart, as start-up noise, not as something the call did.
    pub startup: Option<&'static str>,
}

/// One proposal: a `tool_call` node and every node that answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    /// The `tool_call` node.
    pub seq: u64,
    /// The proposing agent.
    pub agent: String,
    /// The tool proposed (`(malformed)` when the proposal did not parse).
    pub tool: String,
    /// Its arguments, pretty JSON (or the raw text of a malformed proposal), cut at
    /// [`SHOWN_CHARS`].
    pub args: String,
    /// What became of it.
    pub decision: Decision,
    /// Each guard's check, in order.
    pub checks: Vec<Check>,
    /// The `tool_output` node and what the tool returned (compact JSON, cut).
    pub output: Option<(u64, String)>,
    /// What the kernel denied while the tool ran.
    pub denials: Vec<Denial>,
}

/// A run-level event: an interrupt or a node that answers no proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The node.
    pub seq: u64,
    /// Its kind.
    pub kind: &'static str,
    /// Its agent.
    pub agent: String,
    /// What it says.
    pub what: String,
}

/// A run as it reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Story {
    /// The user's instructions, one per task.
    pub prompt: Vec<String>,
    /// The plan: each agent's expected calls (tool and arguments, compact JSON).
    pub plan: Vec<(String, Vec<(String, String)>)>,
    /// Every proposal, in order.
    pub proposals: Vec<Proposal>,
    /// Interrupts and other nodes outside a proposal.
    pub events: Vec<Event>,
}

impl Story {
    /// Proposals blocked, and of those by the kernel alone.
    pub fn blocked(&self) -> usize {
        self.proposals
            .iter()
            .filter(|p| matches!(p.decision, Decision::Blocked { .. }))
            .count()
    }

    /// Kernel denials that are a runtime's documented start-up probes, and the others.
    pub fn denials(&self) -> (usize, usize) {
        let all = self.proposals.iter().flat_map(|p| &p.denials);
        let startup = all.clone().filter(|d| d.startup.is_some()).count();
        (startup, all.count() - startup)
    }
}

/// Cuts `s` at [`SHOWN_CHARS`] characters, saying so.
fn cut(s: String) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((i, _)) => format!("{}… ({} characters in all)", &s[..i], s.chars().count()),
        None => s,
    }
}

/// The story of `nodes` (in sequence order, as evidence holds them) under `apm`.
pub fn tell(apm: Option<&Apm>, nodes: &[Node]) -> Story {
    let mut story = Story::default();
    if let Some(apm) = apm {
        story.prompt = apm.tasks.iter().map(|t| t.instruction.clone()).collect();
        story.plan = apm
            .agents
            .iter()
            .map(|a| {
                let calls = a
                    .trajectory
                    .iter()
                    .map(|c| {
                        let args = serde_json::to_string(&c.params).unwrap_or_default();
                        (c.tool.clone(), cut(args))
                    })
                    .collect();
                (a.id.clone(), calls)
            })
            .collect();
    }
    // Each node's proposal: the nearest `tool_call` on its path to the root. Parents
    // come before children in evidence; a parent that does not is treated as none.
    let mut owner: Vec<Option<usize>> = Vec::with_capacity(nodes.len());
    let mut index = std::collections::HashMap::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        index.insert(n.seq, i);
        let inherited = n
            .parent
            .and_then(|p| index.get(&p).copied())
            .filter(|&p| p < i)
            .and_then(|p| owner.get(p).copied().flatten());
        if n.kind == NodeKind::ToolCall {
            owner.push(Some(story.proposals.len()));
            story.proposals.push(proposal(n));
        } else {
            owner.push(inherited);
            match inherited.and_then(|p| story.proposals.get_mut(p)) {
                Some(p) => answer(p, n),
                None => {
                    if !matches!(
                        n.kind,
                        NodeKind::Root | NodeKind::AgentStep | NodeKind::AgentBranch
                    ) {
                        story.events.push(event(n));
                    }
                }
            }
        }
    }
    story
}

fn proposal(n: &Node) -> Proposal {
    let call = n.payload.tool_call();
    let (tool, args) = match call {
        Some(c) => match (&c.actual, &c.raw) {
            (Some(a), _) => (
                a.tool.clone(),
                serde_json::to_string_pretty(&a.params).unwrap_or_default(),
            ),
            (None, Some(raw)) => ("(malformed)".to_owned(), raw.clone()),
            (None, None) => ("(malformed)".to_owned(), String::new()),
        },
        None => ("(unreadable)".to_owned(), String::new()),
    };
    Proposal {
        seq: n.seq,
        agent: n.agent.clone(),
        tool,
        args: cut(args),
        decision: Decision::Pending,
        checks: Vec::new(),
        output: None,
        denials: Vec::new(),
    }
}

/// Adds node `n`, which answers proposal `p`.
fn answer(p: &mut Proposal, n: &Node) {
    match n.kind {
        NodeKind::Check => {
            if let Some(c) = n.payload.check() {
                p.checks.push(check(n.seq, c));
            }
        }
        NodeKind::ToolOutput => {
            if let Some(o) = n.payload.tool_output() {
                let text = serde_json::to_string(&o.output).unwrap_or_default();
                p.output = Some((n.seq, cut(text)));
            }
            if p.decision == Decision::Pending {
                p.decision = Decision::Executed;
            }
        }
        NodeKind::Blocked => {
            let b = n.payload.get::<BlockedPayload>().ok();
            match b.and_then(|b| b.kernel.as_ref()) {
                // What the kernel denied while the tool ran: the call itself stands as
                // the guards decided it (its output follows).
                Some(k) if k.event != "refusal" => p.denials.push(denial(n.seq, k)),
                // A guard's block, or the broker's refusal to execute.
                _ => {
                    p.decision = Decision::Blocked {
                        guard: b.map_or("unknown", |b| b.guard.as_str()).to_owned(),
                        reason: n.block_reason.clone().unwrap_or_default(),
                    };
                }
            }
        }
        _ => {}
    }
}

fn check(seq: u64, c: &CheckPayload) -> Check {
    Check {
        seq,
        guard: c.guard.as_str().to_owned(),
        passed: c.passed,
        detail: cut(serde_json::to_string(&c.detail).unwrap_or_default()),
    }
}

fn denial(seq: u64, k: &KernelEvent) -> Denial {
    let what = match (&k.syscall, &k.detail) {
        (Some(s), Some(d)) => format!("{s}: {d}"),
        (Some(s), None) => s.clone(),
        (None, Some(d)) => d.clone(),
        (None, None) => String::new(),
    };
    Denial {
        seq,
        event: k.event.clone(),
        startup: startup_probe(k),
        what,
    }
}

fn event(n: &Node) -> Event {
    let what = match n.kind {
        NodeKind::Interrupt => n
            .payload
            .get::<InterruptPayload>()
            .map(|i| i.cause.as_str().to_owned())
            .unwrap_or_default(),
        _ => n.block_reason.clone().unwrap_or_default(),
    };
    Event {
        seq: n.seq,
        kind: n.kind.as_str(),
        agent: n.agent.clone(),
        what,
    }
}

/// The documented start-up probes of the runtimes tool servers run on: what a runtime
/// does when it starts, whatever the tool, and the sandbox denies. Each entry is exact
/// (a system call and the one argument it is denied with, or the system call alone
/// where it takes no path or address), so a call's own denial never reads as one.
/// docs/server.md lists them.
pub const STARTUP_PROBES: &[(&str, &str, Option<&str>)] = &[
    // V8 asks for a memory protection key at start; seccomp denies `pkey_alloc`.
    ("node", "pkey_alloc", None),
    // glibc's name service asks nscd first: a connect to its socket, denied by the
    // sandbox's network rules, before falling back to files.
    (
        "glibc (python, node)",
        "connect",
        Some("/var/run/nscd/socket"),
    ),
    ("glibc (python, node)", "connect", Some("/run/nscd/socket")),
];

/// The runtime whose documented start-up probe `k` is ([`STARTUP_PROBES`]).
pub fn startup_probe(k: &KernelEvent) -> Option<&'static str> {
    if k.event != "syscall" {
        return None;
    }
    let syscall = k.syscall.as_deref()?;
    STARTUP_PROBES
        .iter()
        .find(|(_, s, arg)| {
            *s == syscall
                && match arg {
                    None => k.detail.is_none(),
                    Some(a) => k.detail.as_deref() == Some(*a),
                }
        })
        .map(|(runtime, _, _)| *runtime)
}
