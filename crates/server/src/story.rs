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
use knox_types::payload::{
    BlockedPayload, CheckDetail, CheckPayload, ContractOutcome, InterruptPayload, KernelEvent,
    ProofOfInferencePayload,
};

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
    /// What the guards recorded that a reader needs beside the decision: a
    /// regulation's verdict and deciding policies, the contract's capability, approval
    /// and reservation, a data flow's sources.
    pub notes: Vec<String>,
    /// What the kernel denied while the tool ran.
    pub denials: Vec<Denial>,
    /// Every node of the proposal: its `tool_call` and every node answering it.
    pub nodes: Vec<u64>,
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
    /// How many proposals were blocked (by a guard or the broker).
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
        notes: Vec::new(),
        denials: Vec::new(),
        nodes: vec![n.seq],
    }
}

/// Adds node `n`, which answers proposal `p`.
fn answer(p: &mut Proposal, n: &Node) {
    p.nodes.push(n.seq);
    match n.kind {
        NodeKind::Check => {
            if let Some(c) = n.payload.check() {
                p.checks.push(check(n.seq, c));
                p.notes.extend(note(&c.detail));
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

/// What a check's detail says that the decision alone does not.
fn note(d: &CheckDetail) -> Option<String> {
    match d {
        CheckDetail::Regulation {
            verdict,
            policies,
            note,
            ..
        } if verdict != "not_applicable" => {
            let mut s = format!("regulation: {}", verdict.replace('_', "-"));
            if !policies.is_empty() {
                s += &format!(" ({})", policies.join(", "));
            }
            if let Some(n) = note {
                s += &format!(" — {n}");
            }
            Some(s)
        }
        CheckDetail::Contract(c) => {
            let outcome = match c.outcome {
                ContractOutcome::Allow => "allowed",
                ContractOutcome::Pending => "pending a human approval",
                ContractOutcome::Deny => "denied",
            };
            let mut s = format!("contract: {outcome}");
            if let Some(cap) = &c.capability {
                s += &format!(", capability {cap}");
            }
            if let Some(n) = &c.approval_nonce {
                s += &format!(", approval {n} consumed");
            }
            if let Some(r) = c.reservation {
                s += &format!(", reservation {r}");
            }
            if let Some(r) = &c.reason {
                s += &format!(" — {r}");
            }
            Some(s)
        }
        CheckDetail::DataFlow {
            sinks,
            content,
            provenance,
            ..
        } => {
            // What each value carries: the outputs it came from (its labels), those
            // the plan clears, and what ran.
            let nodes = |v: &[u64]| {
                v.iter()
                    .map(|n| format!("#{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let mut parts: Vec<String> = provenance
                .iter()
                .filter(|a| !a.sources.is_empty())
                .map(|a| {
                    format!(
                        "`{}` carries {} (cleared: {}), {}",
                        a.param,
                        nodes(&a.sources),
                        if a.cleared.is_empty() {
                            "none".to_owned()
                        } else {
                            nodes(&a.cleared)
                        },
                        a.ran
                    )
                })
                .collect();
            parts.extend(sinks.iter().filter_map(|k| {
                k.source.map(|src| {
                    let how = if k.authorized {
                        "authorized"
                    } else {
                        "not authorized"
                    };
                    format!("`{}` from output #{src}, {how}", k.param)
                })
            }));
            parts.extend(content.iter().map(|c| {
                let how = if c.declared { "declared" } else { "undeclared" };
                format!(
                    "output #{} reaches {} ({}, {how})",
                    c.source,
                    c.params.join(", "),
                    c.via
                )
            }));
            (!parts.is_empty()).then(|| format!("data flow: {}", parts.join("; ")))
        }
        _ => None,
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
        NodeKind::ProofOfInference => n
            .payload
            .get::<ProofOfInferencePayload>()
            .map(|m| {
                let role = serde_json::to_value(&m.role)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default();
                let how = match (&m.weights_hash, m.declared) {
                    (Some(h), _) => format!("weights {}", h.to_hex()),
                    (None, true) => "declared, not measured".to_owned(),
                    (None, false) => "not measured".to_owned(),
                };
                format!("{role}: {} ({how})", m.model)
            })
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

/// What a start-up probe is denied with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeArg {
    /// A system call without a pointer argument: nothing decoded.
    Nothing,
    /// Exactly this decoded argument.
    Exact(&'static str),
    /// Landlock's refusal to read the process's own `/proc/PID/FILE` (its pid is the
    /// event's): this file of no other process.
    OwnProcRead(&'static str),
}

/// One documented start-up probe of a runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The runtime that makes it.
    pub runtime: &'static str,
    /// The system call.
    pub syscall: &'static str,
    /// What it is denied with.
    pub arg: ProbeArg,
}

/// The documented start-up probes of the runtimes tool servers run on: what a runtime
/// does when it starts, whatever the tool, and the sandbox denies. Each entry is exact
/// — the system call and the argument it is denied with — so a call's own denial never
/// reads as one: a connect to any other socket, an open of any other path or of
/// another process's file, stays a denial of the call. docs/server.md lists them.
pub const STARTUP_PROBES: &[Probe] = &[
    // V8 asks for a memory protection key when it starts; seccomp denies `pkey_alloc`
    // (it has no pointer argument to decode).
    Probe {
        runtime: "node (V8)",
        syscall: "pkey_alloc",
        arg: ProbeArg::Nothing,
    },
    // glibc's name service asks nscd first, a connect to its socket that the sandbox's
    // network rules deny, then falls back to files.
    Probe {
        runtime: "glibc name service",
        syscall: "connect",
        arg: ProbeArg::Exact("unix:/var/run/nscd/socket"),
    },
    // glibc's `pthread_getattr_np` on the main thread (Python and Node ask it for
    // their stack's bounds at start) reads the process's own memory map, which the
    // sandbox's Landlock rules do not grant.
    Probe {
        runtime: "glibc stack bounds",
        syscall: "openat",
        arg: ProbeArg::OwnProcRead("maps"),
    },
    // The same record when Landlock's audit carried no system call record.
    Probe {
        runtime: "glibc stack bounds",
        syscall: "landlock",
        arg: ProbeArg::OwnProcRead("maps"),
    },
];

/// The runtime whose documented start-up probe `k` is ([`STARTUP_PROBES`]).
pub fn startup_probe(k: &KernelEvent) -> Option<&'static str> {
    if k.event != "syscall" {
        return None;
    }
    let syscall = k.syscall.as_deref()?;
    STARTUP_PROBES
        .iter()
        .find(|p| {
            p.syscall == syscall
                && match p.arg {
                    ProbeArg::Nothing => k.detail.is_none(),
                    ProbeArg::Exact(a) => k.detail.as_deref() == Some(a),
                    ProbeArg::OwnProcRead(file) => k.pid.is_some_and(|pid| {
                        k.detail.as_deref().is_some_and(|d| {
                            d.starts_with(&format!(
                                "landlock fs.read_file: path=/proc/{pid}/{file} "
                            ))
                        })
                    }),
                }
        })
        .map(|p| p.runtime)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use knox_types::payload::Body;

    const FIXTURES: [&[u8]; 3] = [
        include_bytes!("../../verify/tests/fixtures/topologies/st-sa.json"),
        include_bytes!("../../verify/tests/fixtures/topologies/mt-sa-int-3.json"),
        include_bytes!("../../verify/tests/fixtures/topologies/mt-ma-4-2.json"),
    ];

    /// The proposal a node answers, found by walking its parents (the oracle).
    fn call_of(nodes: &[Node], mut seq: u64) -> Option<u64> {
        loop {
            let n = nodes.iter().find(|n| n.seq == seq)?;
            if n.kind == NodeKind::ToolCall {
                return Some(seq);
            }
            seq = n.parent?;
        }
    }

    /// Every `tool_call` is one proposal, in order; every check, output and block is
    /// told with the proposal it answers; a proposal is blocked exactly when a guard's
    /// `blocked` node answers it, and executed when it has an output; the prompt and
    /// plan are the APM's.
    #[test]
    fn each_proposal_is_told_with_what_answered_it() {
        for bytes in FIXTURES {
            let b = knox_verify::parse_bundle(bytes).unwrap();
            let story = tell(Some(&b.apm), &b.nodes);
            let calls: Vec<u64> = b
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::ToolCall)
                .map(|n| n.seq)
                .collect();
            let told: Vec<u64> = story.proposals.iter().map(|p| p.seq).collect();
            assert_eq!(told, calls);
            for p in &story.proposals {
                let answers: Vec<&Node> = b
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.kind != NodeKind::ToolCall && call_of(&b.nodes, n.seq) == Some(p.seq)
                    })
                    .collect();
                let checks = answers.iter().filter(|n| n.kind == NodeKind::Check).count();
                assert_eq!(p.checks.len(), checks, "{}", p.seq);
                let blocked = answers.iter().any(|n| {
                    n.kind == NodeKind::Blocked
                        && n.payload
                            .get::<BlockedPayload>()
                            .is_ok_and(|x| x.kernel.as_ref().is_none_or(|k| k.event == "refusal"))
                });
                let output = answers.iter().any(|n| n.kind == NodeKind::ToolOutput);
                match &p.decision {
                    Decision::Blocked { guard, reason } => {
                        assert!(blocked, "{}", p.seq);
                        assert!(!guard.is_empty() && !reason.is_empty());
                        assert!(p.checks.iter().any(|c| !c.passed && &c.guard == guard));
                    }
                    Decision::Executed => assert!(output && !blocked, "{}", p.seq),
                    Decision::Pending => assert!(!output && !blocked, "{}", p.seq),
                }
            }
            assert!(
                story.blocked() > 0,
                "every fixture has a blocked injected call"
            );
            let prompt: Vec<&str> = b.apm.tasks.iter().map(|t| t.instruction.as_str()).collect();
            assert_eq!(story.prompt, prompt);
            assert_eq!(story.plan.len(), b.apm.agents.len());
        }
    }

    /// A prefix (a live run) ends in a proposal with no outcome yet.
    #[test]
    fn a_prefix_ends_in_a_pending_proposal() {
        let b = knox_verify::parse_bundle(FIXTURES[0]).unwrap();
        let last = b
            .nodes
            .iter()
            .rposition(|n| n.kind == NodeKind::ToolCall)
            .unwrap();
        let story = tell(None, &b.nodes[..=last]);
        assert_eq!(story.proposals.last().unwrap().decision, Decision::Pending);
        assert!(story.prompt.is_empty());
    }

    fn event(event: &str, syscall: Option<&str>, detail: Option<&str>) -> KernelEvent {
        KernelEvent {
            event: event.into(),
            syscall: syscall.map(str::to_owned),
            nr: None,
            pid: Some(7),
            args: vec![],
            detail: detail.map(str::to_owned),
        }
    }

    /// Only the documented probes, exactly, read as start-up: another socket, another
    /// call on the same path, or a limit stays the call's.
    #[test]
    fn only_the_documented_probes_are_start_up() {
        let nscd = "unix:/var/run/nscd/socket";
        assert_eq!(
            startup_probe(&event("syscall", Some("pkey_alloc"), None)),
            Some("node (V8)")
        );
        assert_eq!(
            startup_probe(&event("syscall", Some("connect"), Some(nscd))),
            Some("glibc name service")
        );
        let own = "landlock fs.read_file: path=/proc/7/maps dev=\"proc\" ino=4026532";
        assert_eq!(
            startup_probe(&event("syscall", Some("openat"), Some(own))),
            Some("glibc stack bounds")
        );
        for other in [
            // Another process's map, another file of its own, a write.
            event(
                "syscall",
                Some("openat"),
                Some("landlock fs.read_file: path=/proc/8/maps dev=\"proc\" ino=1"),
            ),
            event(
                "syscall",
                Some("openat"),
                Some("landlock fs.read_file: path=/proc/7/mapsx dev=\"proc\" ino=1"),
            ),
            event(
                "syscall",
                Some("openat"),
                Some("landlock fs.read_file: path=/proc/7/environ dev=\"proc\" ino=1"),
            ),
            event(
                "syscall",
                Some("openat"),
                Some("landlock fs.write_file: path=/proc/7/maps dev=\"proc\" ino=1"),
            ),
            event("syscall", Some("pkey_alloc"), Some("anything")),
            event(
                "syscall",
                Some("connect"),
                Some("unix:/var/run/nscd/socket2"),
            ),
            event("syscall", Some("connect"), Some("127.0.0.1:443")),
            event("syscall", Some("connect"), None),
            event("syscall", Some("openat"), Some("/var/run/nscd/socket")),
            event("limit", Some("pkey_alloc"), None),
            event("refusal", None, Some(nscd)),
        ] {
            assert_eq!(startup_probe(&other), None, "{other:?}");
        }
        // In a story: the probe is told apart, the other denial is the call's.
        let b = knox_verify::parse_bundle(FIXTURES[0]).unwrap();
        let mut nodes = b.nodes.clone();
        let call = nodes
            .iter()
            .find(|n| n.kind == NodeKind::ToolCall)
            .unwrap()
            .seq;
        let next = nodes.len() as u64;
        for (i, k) in [
            event("syscall", Some("pkey_alloc"), None),
            event("syscall", Some("openat"), Some("/etc/shadow")),
        ]
        .into_iter()
        .enumerate()
        {
            let mut n = nodes[usize::try_from(call).unwrap()].clone();
            n.seq = next + i as u64;
            n.parent = Some(call);
            n.kind = NodeKind::Blocked;
            n.allowed = false;
            n.payload = Body::from(BlockedPayload {
                guard: knox_types::payload::GuardKind::Kernel,
                kernel: Some(k),
            });
            nodes.push(n);
        }
        let story = tell(None, &nodes);
        assert_eq!(story.denials(), (1, 1));
        let p = story.proposals.iter().find(|p| p.seq == call).unwrap();
        assert_eq!(p.denials[0].startup, Some("node (V8)"));
        assert_eq!(p.denials[1].startup, None);
        assert!(
            !matches!(p.decision, Decision::Blocked { .. }),
            "kernel denials do not decide"
        );
    }
}
