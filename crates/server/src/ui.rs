//! The web UI: server-rendered HTML (maud escapes every value), inline SVG, and a few
//! lines of JavaScript to show a clicked node's canonical JSON and inclusion proof.

use knox_types::aeg::{Node, NodeKind};
use knox_types::bundle::Bundle;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::live::LiveRun;
use crate::store::{
    AccessEntry, BlockedRow, DecisionRow, Principal, ReceiptRow, RunFilter, RunRow, RunsPage,
};
use crate::story::{Decision, Story};
use crate::tlog::Inclusion;

/// The most nodes drawn on a run page (the rest are listed as a count).
pub const MAX_DRAWN_NODES: usize = 20_000;

const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}
header{background:#1f2a44;color:#fff;padding:.6em 1.2em;display:flex;gap:1.5em;align-items:center}
header a{color:#fff;text-decoration:none} main{padding:1em 1.5em}
table{border-collapse:collapse;background:#fff;width:100%} td,th{border-bottom:1px solid #dde;padding:.35em .6em;text-align:left;font-size:.92em}
.badge{display:inline-block;padding:.1em .6em;border-radius:1em;font-weight:600;font-size:.85em;color:#fff}
.complete{background:#1a7f37}.prefix{background:#9a6700}.tampered{background:#cf222e}.refused{background:#6e7781}
.hw{font-size:.85em;color:#57606a} .card{background:#fff;padding:1em;margin:.8em 0;border:1px solid #dde;border-radius:6px}
.gap{color:#cf222e;font-weight:600}
form.filters input,form.filters select{margin-right:.5em} pre{white-space:pre-wrap;word-break:break-all;background:#f0f2f5;padding:.6em;font-size:.8em}
svg .node{cursor:pointer} svg .blocked circle{fill:#cf222e} svg .offending circle{stroke:#cf222e;stroke-width:5;fill:#fff}
svg text{font-size:11px;font-family:monospace} .offending-label{fill:#cf222e;font-weight:700}
#timeline td{vertical-align:top} #timeline tr.blocked{background:#fff5f5} #timeline tr.offending{outline:3px solid #cf222e}
div.offending-label{color:#cf222e;font-weight:700;font-size:.85em} #timeline details pre{max-width:40em}
.reason{color:#cf222e} .check{font-size:.8em;color:#1a7f37;white-space:nowrap} .check.failed{color:#cf222e;font-weight:700}
.startup{color:#6e7781;font-size:.85em} .denied{color:#cf222e;font-size:.85em} code.args{font-size:.85em}
.note{font-size:.8em;color:#57606a;margin-top:.2em}
";

const NODE_JS: &str = r#"
document.querySelectorAll('svg .node, a.node-link').forEach(function(g){g.addEventListener('click',function(){
 var d=document.getElementById('node-detail');d.textContent='loading node '+g.dataset.seq+'…';
 fetch(g.dataset.href,{credentials:'same-origin'}).then(function(r){return r.text()}).then(function(t){d.textContent=t});
});});
if(location.hash==='#graph'){var gd=document.getElementById('graph');if(gd){gd.open=true;}}
var m=location.hash.match(/^#node-([0-9]+)$/);
if(m){var g=document.querySelector('a.node-link[data-seq="'+m[1]+'"]')||document.querySelector('svg .node[data-seq="'+m[1]+'"]');if(g){g.dispatchEvent(new Event('click'));}}
"#;

/// The page frame.
pub fn page(title: &str, who: Option<&Principal>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " — Knox" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                header {
                    strong { "Knox evidence store" }
                    a href="/" { "Dashboard" }
                    a href="/runs" { "Runs" }
                    a href="/report" { "Exit report" }
                    a href="/log" { "Transparency log" }
                    @if let Some(p) = who {
                        span.hw style="color:#cfd8e3;margin-left:auto" { (p.role.name()) " " (p.name) }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// An outcome badge, with the platform in plain words.
pub fn badge(r: &RunRow) -> Markup {
    html! {
        span.badge.(r.outcome.as_str()) data-outcome=(r.outcome) { (r.outcome) }
        " "
        span.hw {
            @if r.hardware_backed { "hardware-backed" } @else { "simulated — no hardware vouches for it" }
        }
    }
}

pub(crate) fn when(secs: i64) -> String {
    // Days since the epoch → civil date (Howard Hinnant's algorithm), UTC.
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// The runs list with its filters.
pub fn runs(who: &Principal, f: &RunFilter, page: &RunsPage, live: &[(LiveRun, String)]) -> Markup {
    let v = |o: &Option<String>| o.clone().unwrap_or_default();
    let rows = &page.rows;
    let next = crate::http::next_query(f, page);
    let first = serde_urlencoded::to_string(RunFilter {
        after: None,
        ..f.clone()
    })
    .unwrap_or_default();
    let body = html! {
        (live_list(live))
        form.filters method="get" action="/runs" {
            input name="q" placeholder="run id" value=(v(&f.q));
            input name="provider" placeholder="provider" value=(v(&f.provider));
            select name="outcome" {
                option value="" { "any outcome" }
                @for o in ["complete", "prefix", "tampered", "refused"] {
                    option value=(o) selected[f.outcome.as_deref() == Some(o)] { (o) }
                }
            }
            input name="tool" placeholder="blocked tool" value=(v(&f.tool));
            input name="guard" placeholder="guard" value=(v(&f.guard));
            input name="verdict" placeholder="verdict" value=(v(&f.verdict));
            input name="provision" placeholder="provision" value=(v(&f.provision));
            input name="model" placeholder="model weights" value=(v(&f.model));
            label { "from " input type="date" name="since" value=(v(&f.since)); }
            label { "to " input type="date" name="until" value=(v(&f.until)); }
            button type="submit" { "Filter" }
        }
        p #count {
            @if page.total == 0 {
                "none"
            } @else {
                (rows.len()) " of " (page.total) " run(s)"
                @if f.after.is_some() { " (a later page)" }
            }
        }
        table #runs {
            thead { tr { th { "Run" } th { "Provider" } th { "Outcome" } th { "Blocked" } th { "Nodes" } th { "Submitted" } } }
            tbody {
                @for r in rows {
                    tr.run data-digest=(r.digest) {
                        td { a href={ "/runs/" (r.digest) } { (r.run_id) } br; span.hw { (r.kind) " " (r.digest.get(..16).unwrap_or_default()) "…" } }
                        td { (r.provider_name) }
                        td { (badge(r)) }
                        td { (r.blocked) }
                        td { (r.nodes) }
                        td { (when(r.submitted_at)) }
                    }
                }
            }
        }
        p.pager {
            @if f.after.is_some() { a href={ "/runs?" (first) } { "← newest" } " " }
            @if let Some(q) = next { a #next href={ "/runs?" (q) } { "next page →" } }
        }
    };
    self::page("Runs", Some(who), body)
}

/// Everything a run page shows.
#[derive(Debug)]
pub struct RunPage<'a> {
    /// The run.
    pub run: &'a RunRow,
    /// Its bundle, when it parses as one.
    pub bundle: Option<&'a Bundle>,
    /// Blocked actions.
    pub blocked: &'a [BlockedRow],
    /// Regulation decisions.
    pub decisions: &'a [DecisionRow],
    /// Receipts.
    pub receipts: &'a [ReceiptRow],
    /// Its place in the transparency log.
    pub inclusion: Option<&'a Inclusion>,
    /// Other runs with the same run id (conflicting submissions).
    pub same_run_id: &'a [RunRow],
    /// The chain of runs of the key that signed it, as handed over (format v3).
    pub chain: Option<&'a crate::chains::KeyChain>,
    /// The graph alone, open (`?view=graph`), instead of the story.
    pub graph_only: bool,
}

/// The AEG as SVG, readable at any size: check nodes collapsed into their proposal
/// (its label counts them; a failed one is drawn when it is the first offending
/// node), one row per node drawn, a column per role (the run and its agents, then
/// proposals and run events, then what answered them) rather than an indent per
/// depth, so a long run is a column, not a staircase; edges to the nearest drawn
/// ancestor; the picture as wide as its longest label, never clipped. Blocked nodes
/// red with their reason, the first offending node ringed and labelled.
pub fn aeg_svg(
    digest: &str,
    bundle: &Bundle,
    offending: Option<i64>,
    reason: Option<&str>,
) -> Markup {
    let offending = offending.and_then(|o| u64::try_from(o).ok());
    let mut checks: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    // Each node's nearest drawn ancestor (itself when drawn).
    let mut drawn_as: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let mut rows: Vec<(&Node, Option<u64>)> = Vec::new();
    for n in &bundle.nodes {
        let up = n.parent.and_then(|p| drawn_as.get(&p).copied());
        if n.kind == NodeKind::Check
            && offending != Some(n.seq)
            && let Some(p) = up
        {
            *checks.entry(p).or_default() += 1;
            drawn_as.insert(n.seq, p);
            continue;
        }
        drawn_as.insert(n.seq, n.seq);
        if rows.len() < MAX_DRAWN_NODES {
            rows.push((n, up));
        }
    }
    let column = |k: NodeKind| -> u32 {
        match k {
            NodeKind::Root | NodeKind::AgentStep | NodeKind::AgentBranch => 0,
            NodeKind::ToolCall
            | NodeKind::Interrupt
            | NodeKind::Heard
            | NodeKind::Unanswered
            | NodeKind::ProofOfInference => 1,
            NodeKind::Check | NodeKind::ToolOutput | NodeKind::Blocked => 2,
        }
    };
    let label = |n: &Node| -> String {
        let mut l = format!("{} {} · {}", n.seq, n.kind.as_str(), n.agent);
        if let Some(a) = n.payload.tool_call().and_then(|c| c.actual.as_ref()) {
            l += &format!(" · {}", a.tool);
        }
        if let Some(c) = checks.get(&n.seq) {
            l += &format!(" ({c} checks)");
        }
        if let Some(r) = &n.block_reason {
            l += &format!(" — blocked: {r}");
        }
        if offending == Some(n.seq) {
            l += &format!(" ◀ first offending node: {}", reason.unwrap_or("tampered"));
        }
        l
    };
    let labels: Vec<String> = rows.iter().map(|(n, _)| label(n)).collect();
    let row_of: std::collections::HashMap<u64, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, (n, _))| (n.seq, i))
        .collect();
    let row = 22u32;
    let x = |k: NodeKind| 16 + column(k) * 40;
    let y = |i: usize| row / 2 + row * u32::try_from(i).unwrap_or(0);
    let height = row
        * u32::try_from(rows.len())
            .unwrap_or(u32::MAX / row)
            .saturating_add(1);
    let width = rows
        .iter()
        .zip(&labels)
        .map(|((n, _), l)| x(n.kind) + 12 + 7 * u32::try_from(l.chars().count()).unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(400)
        + 16;
    html! {
        svg #aeg xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) viewBox={ "0 0 " (width) " " (height) } {
            @for (i, (n, up)) in rows.iter().enumerate() {
                @if let Some(p) = up.and_then(|u| row_of.get(&u).copied()).filter(|p| *p < i) {
                    @if let Some((pn, _)) = rows.get(p) {
                        path d={ "M" (x(pn.kind)) " " (y(p)) " V" (y(i)) " H" (x(n.kind)) } fill="none" stroke="#aab" {}
                    }
                }
            }
            @for (i, ((n, _), l)) in rows.iter().zip(&labels).enumerate() {
                @let blocked = n.kind == NodeKind::Blocked || !n.allowed;
                @let off = offending == Some(n.seq);
                @let class = if off { "node offending" } else if blocked { "node blocked" } else { "node" };
                g class=(class) data-seq=(n.seq) data-kind=(n.kind.as_str()) data-href={ "/runs/" (digest) "/nodes/" (n.seq) } {
                    title { (l) }
                    circle cx=(x(n.kind)) cy=(y(i)) r="7" fill=(kind_colour(n.kind)) stroke="#334" {}
                    text x=(x(n.kind) + 12) y=(y(i) + 4) class=[off.then_some("offending-label")] { (l) }
                }
            }
        }
    }
}

/// The user's prompt and plan, from the APM the run was held to.
pub fn asked(s: &Story) -> Markup {
    html! {
        div.card #prompt {
            h2 { "What the user asked" }
            @if s.prompt.is_empty() { p.none { "No prompt in the evidence (a prefix without its header)." } }
            ol { @for t in &s.prompt { li { (t) } } }
            @for (agent, calls) in &s.plan {
                details.plan {
                    summary { "Plan of " strong { (agent) } ": " (calls.len()) " call(s)" }
                    table { tr { th { "#" } th { "Tool" } th { "Arguments" } }
                        @for (i, (tool, args)) in calls.iter().enumerate() {
                            tr { td { (i + 1) } td { code { (tool) } } td { code.args { (args) } } }
                        } }
                }
            }
        }
    }
}

/// The decision cell of a proposal.
fn decision(d: &Decision) -> Markup {
    match d {
        Decision::Executed => html! { span.badge.complete { "executed" } },
        Decision::Blocked { guard, reason } => html! {
            span.badge.tampered { "blocked by " (guard) } " " span.reason { (reason) }
        },
        Decision::Pending => html! { span.badge.prefix { "no outcome yet" } },
    }
}

/// Every proposal in order: agent, tool, arguments, decision, checks, output, and
/// what the kernel denied while the tool ran (a runtime's start-up probes apart).
/// Each row's number opens that node's canonical JSON and inclusion proof (`href`:
/// `None` where the nodes have no proof to fetch, a live prefix).
pub fn timeline(s: &Story, node_href: Option<&str>, offending: Option<u64>) -> Markup {
    let (startup, during) = s.denials();
    html! {
        h2 { "Timeline" }
        p.hw #timeline-summary {
            (s.proposals.len()) " proposal(s), " (s.blocked()) " blocked; the kernel denied "
            (during) " system call(s) during calls"
            @if startup > 0 { " and " (startup) " start-up probe(s) of a tool's runtime (listed in docs/server.md, not the calls' doing)" }
            "."
        }
        table #timeline {
            thead { tr { th { "#" } th { "Agent" } th { "Tool" } th { "Arguments" } th { "Decision" } th { "Guards" } th { "Output" } th { "Kernel" } } }
            tbody {
                @for p in &s.proposals {
                    @let off = offending.filter(|o| p.nodes.contains(o));
                    tr.blocked[matches!(p.decision, Decision::Blocked { .. })] .offending[off.is_some()] id={ "call-" (p.seq) } {
                        td { @if let Some(h) = node_href { a.node-link href={ "#node-" (p.seq) } data-seq=(p.seq) data-href={ (h) (p.seq) } { (p.seq) } } @else { (p.seq) } }
                        td { (p.agent) }
                        td { code { (p.tool) } }
                        td { @if p.args.len() > 60 {
                                details { summary { code { (p.args.chars().take(60).collect::<String>()) "…" } } pre { (p.args) } }
                            } @else { code { (p.args) } } }
                        td { (decision(&p.decision))
                            @if let Some(o) = off { div.offending-label { "◀ node " (o) ": the first offending node" } }
                            @for n in &p.notes { div.note { (n) } } }
                        td.checks { @for c in &p.checks {
                            span.check.failed[!c.passed] title=(c.detail) { (c.guard) @if c.passed { " ✓" } @else { " ✗" } } " "
                        } }
                        td { @if let Some((_, out)) = &p.output {
                                @if out.len() > 60 {
                                    details { summary { code { (out.chars().take(60).collect::<String>()) "…" } } pre { (out) } }
                                } @else { code { (out) } }
                            } }
                        td { @for d in &p.denials {
                                @if let Some(rt) = d.startup {
                                    div.startup title={ "a documented start-up probe of " (rt) } { "start-up (" (rt) "): " (d.what) }
                                } @else {
                                    div.denied { (d.event) ": " (d.what) }
                                }
                            } }
                    }
                }
            }
        }
        @if !s.events.is_empty() {
            h3 { "Run events" }
            table #events { tr { th { "#" } th { "Kind" } th { "Agent" } th { "What" } }
                @for e in &s.events { tr { td { (e.seq) } td { (e.kind) } td { (e.agent) } td { (e.what) } } } }
        }
    }
}

/// A topology in words.
fn topology(t: &knox_types::apm::Topology) -> String {
    use knox_types::apm::TopologyKind as K;
    let kind = match t.kind {
        K::StSa => "one task, one agent",
        K::MtSaSeq => "several tasks, one agent, one after the other",
        K::MtSaInt => "several tasks, one agent, calls interleaved",
        K::MtMa => "several tasks over concurrent sub-agents",
    };
    format!(
        "{kind} ({} task(s), {} executor agent(s))",
        t.tasks, t.agents
    )
}

fn kind_colour(k: NodeKind) -> &'static str {
    match k {
        NodeKind::Root => "#1f2a44",
        NodeKind::AgentStep | NodeKind::AgentBranch => "#6639ba",
        NodeKind::ToolCall => "#0969da",
        NodeKind::Check => "#8c959f",
        NodeKind::ToolOutput => "#1a7f37",
        NodeKind::Blocked => "#cf222e",
        NodeKind::Interrupt => "#9a6700",
        NodeKind::ProofOfInference => "#bf3989",
        NodeKind::Heard => "#953800",
        NodeKind::Unanswered => "#57606a",
    }
}

/// A run page.
pub fn run(who: &Principal, p: &RunPage<'_>) -> Markup {
    let r = p.run;
    let report: serde_json::Value = serde_json::from_str(&r.report).unwrap_or_default();
    let body = html! {
        div.card #summary {
            p { (badge(r)) }
            @if let Some(reason) = &r.reason {
                p #reason { strong { (r.outcome) ": " } @if let Some(n) = r.offending_node { "first offending node " (n) ": " } (reason) }
            }
            p { "Provider " strong { (r.provider_name) } " · run " code { (r.run_id) } " · " (r.kind) " · submitted " (when(r.submitted_at)) }
            p { "Digest " code { (r.digest) } }
            p { (r.nodes) " nodes, " (r.tool_calls) " tool calls, " (r.executed) " executed, " (r.blocked) " blocked, " (r.interrupts) " interrupts, " (r.flagged) " flagged for review" }
            p { "Platform evidence: " (r.platform) " — " @if r.hardware_backed { "hardware-backed" } @else { "simulated (no hardware vouches for the signing key)" } }
            @if let Some(root) = &r.structure_root { p { "Signed structure root " code { (root) } } }
            @if let Some(link) = report.get("key_chain") {
                p #key-chain { "Run " (link.get("seq").and_then(serde_json::Value::as_u64).unwrap_or_default()) " of its key's chain of runs"
                    @if let Some(c) = p.chain { span.gap[c.has_gaps()] { " — " (c.describe()) } } }
            }
            p { a href={ "/runs/" (r.digest) "/download" } { "Download the evidence" } }
            @if !p.same_run_id.is_empty() {
                p style="color:#cf222e" { "Other submissions name the same run id: "
                    @for o in p.same_run_id { a href={ "/runs/" (o.digest) } { (o.outcome) " " (o.digest.get(..12).unwrap_or_default()) } " " } }
            }
        }
        @if let Some(b) = p.bundle {
            @if !p.graph_only {
                @let story = crate::story::tell(Some(&b.apm), &b.nodes);
                (asked(&story))
                (timeline(
                    &story,
                    Some(&format!("/runs/{}/nodes/", r.digest)),
                    r.offending_node.and_then(|o| u64::try_from(o).ok()),
                ))
            }
            pre #node-detail { "Click a node number for its canonical JSON and its inclusion proof against the signed structure root." }
            p.hw { @if p.graph_only { a href={ "/runs/" (r.digest) } { "The run as a story" } } @else { a href={ "/runs/" (r.digest) "?view=graph" } { "The graph alone" } } }
            // A tampered run's graph is open: its offending node is ringed there.
            details #graph open[p.graph_only || r.offending_node.is_some()] {
                summary { "Execution graph (AEG): " (b.nodes.len()) " nodes, check nodes folded into their proposal" }
                p.hw { "Click a node for its canonical JSON and its inclusion proof." }
                div.card style="overflow:auto;max-height:80vh" { (aeg_svg(&r.digest, b, r.offending_node, r.reason.as_deref())) }
                @if b.nodes.len() > MAX_DRAWN_NODES { p { "Only the first " (MAX_DRAWN_NODES) " nodes drawn (the timeline has every proposal)." } }
            }
            h2 { "APM" }
            div.card {
                p { "Topology: " (topology(&b.apm.topology)) }
            }
            h2 { "Platform evidence" }
            div.card { pre { (serde_json::to_string_pretty(&b.platform).unwrap_or_default().chars().take(4000).collect::<String>()) } }
        }
        h2 { "Blocked actions" }
        table #blocked { tr { th { "Node" } th { "Agent" } th { "Tool" } th { "Guard" } th { "Reason" } }
            @for b in p.blocked { tr { td { (b.node) } td { (b.agent) } td { (b.tool.as_deref().unwrap_or("—")) } td { (b.guard) } td { (b.reason) } } } }
        h2 { "Regulation decisions" }
        table { tr { th { "Node" } th { "Regulation" } th { "Recipient" } th { "Verdict" } th { "Policies" } th { "Provisions" } }
            @for d in p.decisions { tr { td { (d.node) } td { (d.regulation) } td { (d.recipient) } td { (d.verdict) } td { (d.policies) } td { (d.provisions) } } } }
        h2 { "Verification steps" }
        table { @for s in report.get("steps").and_then(|s| s.as_array()).into_iter().flatten() {
            tr { td { (s.get("name").and_then(|v| v.as_str()).unwrap_or_default()) } td { (s.get("result").and_then(|v| v.as_str()).unwrap_or_default()) } td { (s.get("detail").and_then(|v| v.as_str()).unwrap_or_default()) } } } }
        h2 { "Receipts" }
        table { tr { th { "Regulator" } th { "Outcome" } th { "Log size" } th { "Receipt" } }
            @for rc in p.receipts { tr { td { (rc.regulator) } td { (rc.outcome) } td { (rc.tree_size) } td { code { (rc.digest) } } } } }
        @if let Some(inc) = p.inclusion {
            h2 { "Transparency log" }
            div.card { p { "Leaf " (inc.index) " of " (inc.head.tree_size) "; signed root " code { (inc.head.root) } }
                pre { (serde_json::to_string_pretty(inc).unwrap_or_default()) } }
        }
        script { (PreEscaped(NODE_JS)) }
    };
    page(&format!("Run {}", r.run_id), Some(who), body)
}

/// Bars as inline SVG.
pub fn bars(rows: &[(String, i64)]) -> Markup {
    if rows.is_empty() {
        return html! { p.none { "none" } };
    }
    let max = rows.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
    let h = 20 * u32::try_from(rows.len()).unwrap_or(0) + 4;
    html! {
        svg xmlns="http://www.w3.org/2000/svg" width="720" height=(h) {
            @for (i, (label, n)) in rows.iter().enumerate() {
                @let y = 20 * u32::try_from(i).unwrap_or(0);
                @let w = 1 + 380 * n / max;
                text x="0" y=(y + 14) { (label.chars().take(36).collect::<String>()) }
                rect x="250" y=(y + 3) width=(w) height="14" fill="#0969da" {}
                text x=(255 + w) y=(y + 14) { (n) }
            }
        }
    }
}

pub use crate::store::Dashboard;

/// What the chains of runs show, in one sentence (the UI and the exit report).
pub const CHAINS_NOTE: &str = "Every in-TEE key numbers the runs it seals and names the run before each, so a run the provider left out shows as a missing number, two runs signed at one number as a fork, and a run handed over after a later one as late. Runs sealed after the last one handed over show once a later run of the key arrives. A key announced when made (link 0) with no run handed over is a process whose runs were all withheld, or that is still running.";

/// The chains of runs of each provider: one line per key, the ones with a gap marked.
pub fn chains(list: &[(String, crate::chains::KeyChains)]) -> Markup {
    html! {
        h2 { "Runs left out (each key's chain of runs)" }
        div.card #chains {
            p.hw { (CHAINS_NOTE) }
            @if list.iter().all(|(_, c)| c.chains.is_empty()) {
                p { "No run of evidence format v3 yet (none carries a key chain)." }
            }
            ul {
                @for (provider, cs) in list {
                    @for c in &cs.chains {
                        li.gap[c.has_gaps()] data-key=(c.key) {
                            strong { (provider) } ": " (c.describe())
                            @if !c.forks.is_empty() || !c.late.is_empty() {
                                " — "
                                @for l in c.runs.iter().filter(|l| c.forks.contains(&l.seq) || c.late.iter().any(|(n, _)| *n == l.seq)) {
                                    a href={ "/runs/" (l.digest) } { "run " (l.seq) " (" (l.outcome) ")" } " "
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The dashboard.
pub fn dashboard(
    who: &Principal,
    d: &Dashboard,
    chain_list: &[(String, crate::chains::KeyChains)],
) -> Markup {
    let body = html! {
        table { tr { th { "Provider" } th { "Runs" } th { "Blocked actions" } th { "Tool calls" } th { "Tampered" } th { "Prefixes" } th { "Refused" } }
            @for (p, n) in &d.providers { tr { td { a href={ "/runs?provider=" (p) } { (p) } } @for v in n { td { (v) } } } } }
        h2 { "Blocked rate per provider and day (% of tool calls)" } div.card { (bars(&d.rate)) }
        h2 { "Top blocked tools" } div.card { (bars(&d.tools)) }
        h2 { "Top blocking guards" } div.card { (bars(&d.guards)) }
        h2 { "Regulation verdicts by provision" } div.card { (bars(&d.provisions)) }
        (chains(chain_list))
    };
    page("Dashboard", Some(who), body)
}

/// What the exit report page shows.
#[derive(Debug)]
pub struct ReportPage<'a> {
    /// Provider's name.
    pub provider: &'a str,
    /// Period start, Unix seconds.
    pub from: i64,
    /// Period end as shown.
    pub to: i64,
    /// The provider's runs in the period.
    pub rows: &'a [RunRow],
    /// Figures over them.
    pub dashboard: &'a Dashboard,
    /// The log's signed head now.
    pub head: Option<&'a crate::tlog::TreeHead>,
    /// The PDF button's link (the same period).
    pub pdf_href: &'a str,
    /// The provider's chains of runs, as handed over by the end of the period.
    pub chains: &'a crate::chains::KeyChains,
}

/// One approval token that more than one sealed run used: its nonce and those runs. A
/// token is accepted once, across runs and processes (`ApprovalSource::consume`); two
/// runs naming one token in their evidence are an incident (copied into two approval
/// directories, or a monitor that does not record its use).
#[derive(Debug)]
pub struct ApprovalReuse<'a> {
    /// The token's nonce (hex).
    pub nonce: String,
    /// The sealed runs whose evidence used it.
    pub runs: Vec<&'a RunRow>,
}

/// The approval tokens used by more than one of `rows`' sealed bundles (each run's
/// verified report lists the nonces its allowed contract checks used).
pub fn approval_reuses(rows: &[RunRow]) -> Vec<ApprovalReuse<'_>> {
    let mut by: std::collections::BTreeMap<String, Vec<&RunRow>> = Default::default();
    for r in rows
        .iter()
        .filter(|r| r.kind == "bundle" && r.outcome == "complete")
    {
        let rep: serde_json::Value = serde_json::from_str(&r.report).unwrap_or_default();
        for n in rep
            .get("approvals")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
        {
            by.entry(n.to_owned()).or_default().push(r);
        }
    }
    by.into_iter()
        .filter(|(_, runs)| runs.len() > 1)
        .map(|(nonce, runs)| ApprovalReuse { nonce, runs })
        .collect()
}

/// The exit report: the provider's runs in the period, what was blocked and why,
/// incidents, evidence, receipts; every figure links to its runs.
pub fn report(who: &Principal, r: &ReportPage<'_>) -> Markup {
    let ReportPage {
        provider,
        from,
        to,
        rows,
        dashboard: d,
        head,
        pdf_href,
        chains: key_chains,
    } = *r;
    let incidents: Vec<&RunRow> = rows.iter().filter(|r| r.outcome != "complete").collect();
    let reuses = approval_reuses(rows);
    let body = html! {
        div.card {
            p { "Provider " strong #provider { (provider) } ", period " (when(from)) " to " (when(to)) "." }
            p { a #pdf href=(pdf_href) download { "Download this report as PDF" } }
            p { "Regulation policy set and toolkit manifest: those embedded in this build of the verifier; each run's APM names their hashes (below, per run)." }
            @if let Some(h) = head { p { "Transparency log at the time of this report: " (h.tree_size) " entries, signed root " code { (h.root) } "." } }
        }
        h2 { "Runs and their verification" }
        p #totals { (rows.len()) " runs; "
            (rows.iter().filter(|r| r.outcome == "complete").count()) " complete, "
            (rows.iter().filter(|r| r.outcome == "prefix").count()) " prefix, "
            (rows.iter().filter(|r| r.outcome == "tampered").count()) " tampered, "
            (rows.iter().filter(|r| r.outcome == "refused").count()) " refused; "
            (rows.iter().map(|r| r.blocked).sum::<i64>()) " actions blocked; "
            (rows.iter().filter(|r| r.hardware_backed).count()) " hardware-backed." }
        table { tr { th { "Run" } th { "Outcome" } th { "Blocked" } th { "Platform" } th { "APM inputs" } }
            @for r in rows {
                @let rep: serde_json::Value = serde_json::from_str(&r.report).unwrap_or_default();
                tr { td { a href={ "/runs/" (r.digest) } { (r.run_id) } } td { (badge(r)) } td { (r.blocked) } td { (r.platform) }
                     td.hw { @for m in rep.get("models").and_then(|m| m.as_array()).into_iter().flatten() { (m.as_str().unwrap_or_default()) br; } } }
            }
        }
        h2 { "What was blocked, by tool" } div.card { (bars(&d.tools)) }
        h2 { "By guard" } div.card { (bars(&d.guards)) }
        h2 { "Regulation verdicts by provision" } div.card { (bars(&d.provisions)) }
        h2 { "Incidents" }
        @if incidents.is_empty() && reuses.is_empty() { p { "None: every run verified complete." } }
        ul { @for r in &incidents { li { a href={ "/runs/" (r.digest) } { (r.run_id) } ": " (r.outcome) @if let Some(x) = &r.reason { " — " (x) } } }
             @for u in &reuses { li.reuse { "approval token " code { (u.nonce) } " used by " (u.runs.len()) " runs (a token is accepted once): "
                 @for (i, r) in u.runs.iter().enumerate() { @if i > 0 { ", " } a href={ "/runs/" (r.digest) } { (r.run_id) } } } } }
        (chains(&[(provider.to_owned(), key_chains.clone())]))
    };
    page(&format!("Exit report — {provider}"), Some(who), body)
}

/// The access log.
pub fn access(who: &Principal, rows: &[AccessEntry]) -> Markup {
    let body = html! {
        table { tr { th { "#" } th { "When" } th { "Principal" } th { "Request" } th { "Decision" } th { "Why" } }
            @for e in rows { tr { td { (e.id) } td { (when(e.at)) } td { code { (e.principal.as_deref().unwrap_or("—")) } } td { (e.method) " " code { (e.target) } } td { (e.decision) } td { (e.reason) } } } }
    };
    page("Access log", Some(who), body)
}

/// A refusal page (never says whether the thing asked for exists).
pub fn refusal(title: &str, message: &str) -> Markup {
    page(title, None, html! { p { (message) } })
}

/// A live run's status badge (`in progress` is drawn as a prefix still growing).
pub fn live_badge(status: &str) -> Markup {
    html! { span.badge.(live_class(status)) data-status=(status) { (status) } }
}

/// The live runs, above the runs list.
pub fn live_list(rows: &[(LiveRun, String)]) -> Markup {
    html! {
        @if !rows.is_empty() {
            h2 { "Live runs" }
            table #live {
                thead { tr { th { "Run" } th { "Provider" } th { "Status" } th { "Verified / received" } th { "Last delivery" } } }
                tbody {
                    @for (r, status) in rows {
                        tr.live data-live=(r.live_id) {
                            td { a href={ "/live/" (r.live_id) } { (r.run_id) } }
                            td { (r.provider_name) }
                            td { (live_badge(status)) }
                            td { (r.verified) " / " (r.received) }
                            td { (when(r.updated_at)) }
                        }
                    }
                }
            }
            h2 { "Submitted runs" }
        }
    }
}

/// Polls the live run's status while it is in progress (a long poll: the server
/// answers when the status changes) and shows the change; at most 100 polls.
const LIVE_JS: &str = r#"
(function(){var el=document.getElementById('live-status');if(!el)return;var n=0;
var seen=el.dataset.received;
function refresh(){fetch(location.pathname,{credentials:'same-origin'}).then(function(r){return r.text()}).then(function(t){
  var d=new DOMParser().parseFromString(t,'text/html');var a=d.getElementById('live-timeline'),b=document.getElementById('live-timeline');
  if(a&&b){b.innerHTML=a.innerHTML;}}).catch(function(){});}
function poll(){if(n++>1000||el.dataset.status!=='in progress')return;
 fetch(location.pathname+'/status?since='+encodeURIComponent(el.dataset.status)+'&seen='+seen,{credentials:'same-origin'})
 .then(function(r){return r.json()}).then(function(s){
  el.dataset.status=s.status;el.textContent=s.status;el.className='badge '+s.class;
  document.getElementById('live-counts').textContent=s.run.verified+' nodes verified of '+s.run.received+' received';
  if(s.run.reason){document.getElementById('live-reason').textContent=s.run.reason;}
  if(s.run.bundle){var a=document.getElementById('sealed');a.href='/runs/'+s.run.bundle;a.textContent=s.run.bundle;}
  if(String(s.run.received)!==String(seen)){seen=s.run.received;refresh();}
  poll();}).catch(function(){});}
poll();})();
"#;

/// The class of a live status's badge.
pub fn live_class(status: &str) -> &'static str {
    match status {
        "complete" => "complete",
        "tampered" => "tampered",
        "refused" => "refused",
        _ => "prefix",
    }
}

/// A live run: status, verified prefix, the nodes received so far.
pub fn live(
    who: &Principal,
    run: &LiveRun,
    status: &str,
    header: Option<&[u8]>,
    nodes: &[(i64, Vec<u8>)],
) -> Markup {
    let body = html! {
        div.card {
            p { "Status: " span.badge.(live_class(status)) #live-status data-status=(status) data-received=(run.received) { (status) } }
            p { "Provider " (run.provider_name) ", run " code { (run.run_id) } ", first delivery " (when(run.started_at)) "." }
            p #live-counts { (run.verified) " nodes verified of " (run.received) " received" }
            @if run.conflicts > 0 { p { (run.conflicts) " deliveries contradicted a stored line; both are kept." } }
            p #live-reason { (run.reason.as_deref().unwrap_or_default()) }
            p { "Sealed bundle: " a #sealed href=(run.bundle.as_ref().map(|b| format!("/runs/{b}")).unwrap_or_default()) { (run.bundle.as_deref().unwrap_or("not yet")) } }
        }
        @let apm = header.and_then(|h| serde_json::from_slice::<knox_types::bundle::JournalHeader>(h).ok()).map(|h| h.apm);
        @let parsed: Vec<Node> = nodes.iter().filter_map(|(_, line)| serde_json::from_slice(line).ok()).collect();
        @let story = crate::story::tell(apm.as_ref(), &parsed);
        (asked(&story))
        div #live-timeline { (timeline(&story, None, run.offending_node.and_then(|o| u64::try_from(o).ok()))) }
        @if parsed.len() < nodes.len() { p.gap { (nodes.len() - parsed.len()) " node line(s) do not parse: the verifier's outcome above says why." } }
        script { (PreEscaped(LIVE_JS)) }
    };
    page(&format!("Live run {}", run.run_id), Some(who), body)
}

#[cfg(test)]
#[expect(clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn row(digest: &str, kind: &str, outcome: &str, approvals: &[&str]) -> RunRow {
        RunRow {
            digest: digest.into(),
            provider: "p".into(),
            provider_name: "acme".into(),
            run_id: format!("run-{digest}"),
            kind: kind.into(),
            outcome: outcome.into(),
            offending_node: None,
            reason: None,
            platform: "simulated".into(),
            hardware_backed: false,
            nodes: 1,
            tool_calls: 1,
            executed: 1,
            blocked: 0,
            interrupts: 0,
            flagged: 0,
            structure_root: None,
            report: serde_json::json!({ "approvals": approvals }).to_string(),
            log_index: 0,
            submitted_at: 0,
            run_key: None,
        }
    }

    /// #35: a token two sealed runs used is an incident of the exit report; a journal
    /// (the same run's prefix), a tampered bundle and a token used once are not.
    #[test]
    fn an_approval_token_in_two_sealed_runs_is_an_incident() {
        let rows = [
            row("a", "bundle", "complete", &["n1", "n2"]),
            row("b", "bundle", "complete", &["n1"]),
            row("c", "journal", "prefix", &["n2"]),
            row("d", "bundle", "tampered", &["n2"]),
            row("e", "bundle", "complete", &[]),
        ];
        let reuses = approval_reuses(&rows);
        assert_eq!(reuses.len(), 1, "{reuses:?}");
        assert_eq!(reuses[0].nonce, "n1");
        let runs: Vec<&str> = reuses[0].runs.iter().map(|r| r.digest.as_str()).collect();
        assert_eq!(runs, ["a", "b"]);
        let who = Principal {
            key_id: "k".into(),
            public_key: "00".repeat(32),
            role: crate::store::Role::Regulator,
            name: "cnil".into(),
        };
        let chains = crate::chains::KeyChains::default();
        let dashboard = Dashboard::default();
        let page = report(
            &who,
            &ReportPage {
                provider: "acme",
                from: 0,
                to: 1,
                rows: &rows,
                dashboard: &dashboard,
                head: None,
                pdf_href: "/report.pdf",
                chains: &chains,
            },
        )
        .into_string();
        assert!(
            page.contains("approval token <code>n1</code> used by 2 runs"),
            "{page}"
        );
    }
}
