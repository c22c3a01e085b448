//! The guards evaluated on a well-formed action — trajectory, mediated system calls,
//! data flow — computed once, here, for both the monitor (which records them) and the
//! verifier (which recomputes and compares them).

use std::collections::{BTreeSet, HashMap};

use knox_types::Action;
use knox_types::apm::{Authorization, Closed, ExpectedCall};
use knox_types::digest::Digest;
use knox_types::payload::{CheckDetail, CheckPayload, GuardKind};
use serde_json::Value;

use crate::auth;
use crate::dataflow::{self, LinkUntrusted, RunOutput, Tainted};
use crate::manifest::Effect;
use crate::manifest::ToolEntry;
use crate::provenance;
use crate::trajectory::{self, RegexCache};

/// Per-run memo: compiled constraint patterns, and `needs − Auth` per tool (Auth is fixed
/// for a run).
#[derive(Debug, Default)]
pub struct Caches {
    regexes: RegexCache,
    missing: HashMap<String, BTreeSet<String>>,
}

/// What one agent has seen, as these guards need it.
#[derive(Clone, Copy)]
pub struct AgentView<'a> {
    /// `e_j`, when the trajectory has one at the pointer.
    pub expected: Option<&'a ExpectedCall>,
    /// Output of the agent's executed trajectory call `k`.
    pub outputs: &'a dyn Fn(u32) -> Option<Value>,
    /// Untrusted outputs the agent received.
    pub tainted: &'a [Tainted<'a>],
    /// The prompt's task instructions.
    pub prompt: &'a [&'a str],
    /// The trajectory check when the caller decided it (the tolerant mode's automaton);
    /// `None`: `action` is compared with `expected`.
    pub trajectory: Option<&'a trajectory::Outcome>,
    /// The channels the APM closes.
    pub closed: Closed,
    /// The run's outputs this evaluation sees (every agent's, in commit order), when
    /// the APM closes the content or label channel.
    pub run: &'a [RunOutput<'a>],
    /// Whether a data link carries an untrusted value (the recipient channel).
    pub links: LinkUntrusted<'a>,
    /// The outputs holding data that the agent's model read (in commit order), for
    /// the provenance stage ([`Closed::provenance`]), worked out when it asks.
    pub context: &'a dyn Fn() -> Vec<provenance::Source>,
    /// For a call no plan matched under a contract that alone bounds the run, when the
    /// contract clears its sink (a `ContractHttp` request, under
    /// [`Closed::provenance`]): the outputs holding data the model read, each with
    /// whether the contract clears the call for it ([`provenance::decide_unplanned`]).
    pub contract_sources: Option<&'a dyn Fn() -> Vec<(u64, bool)>>,
}

impl std::fmt::Debug for AgentView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentView")
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}

/// The trajectory, syscall and (for tools with sinks) data-flow checks of `action`,
/// in evaluation order.
pub fn checks(
    entry: &ToolEntry,
    action: &Action,
    action_hash: &Digest,
    auth: &Authorization,
    view: AgentView<'_>,
    caches: &mut Caches,
) -> Vec<CheckPayload> {
    let t = match view.trajectory {
        Some(t) => t.clone(),
        None => trajectory::check(
            view.expected,
            action,
            action_hash,
            view.outputs,
            &mut caches.regexes,
        ),
    };
    // The parameters that run: the plan's form of what it fixes (`planned`), and —
    // for a call matched to its step under `provenance` — the plan's value of each
    // composed parameter not cleared for every output the model read.
    let planned = t.executed.filter(|_| view.closed.planned);
    let (executed, flows) = match view.expected {
        Some(e) if view.closed.provenance && t.matched => {
            let given = planned.as_ref().unwrap_or(&action.params);
            let d = provenance::decide(entry, e, given, view.prompt, view.context);
            (d.params.or(planned), d.flows)
        }
        None if view.closed.provenance => match view.contract_sources {
            Some(sources) => (
                planned,
                provenance::decide_unplanned(&action.params, &sources()),
            ),
            None => (planned, Vec::new()),
        },
        _ => (planned, Vec::new()),
    };
    let executed = executed.filter(|p| *p != action.params);
    let ran = match &executed {
        Some(p) => std::borrow::Cow::Owned(Action {
            tool: action.tool.clone(),
            params: p.clone(),
        }),
        None => std::borrow::Cow::Borrowed(action),
    };
    let mut out = vec![CheckPayload {
        guard: GuardKind::Trajectory,
        passed: t.matched,
        detail: CheckDetail::Trajectory {
            mode: t.mode.into(),
            params: t.params,
            reason: t.reason,
            executed,
            options: t.options,
        },
    }];
    let missing = caches
        .missing
        .entry(entry.name.clone())
        .or_insert_with(|| auth::missing(&entry.needs, auth))
        .clone();
    out.push(CheckPayload {
        guard: GuardKind::Syscall,
        passed: missing.is_empty(),
        detail: CheckDetail::Syscall {
            toolkit: entry.toolkit.clone(),
            needs: entry.needs_hash,
            missing,
        },
    });
    out.extend(dataflow_check(entry, &ran, &view, flows));
    out
}

/// The data-flow check of the call that runs (`ran`), when `entry` has sinks, the
/// call discloses under an APM closing the content or label channel (it then records
/// which outputs reach the content and how many of the run's outputs were seen: the
/// regulation check's labels come from the same ones), or a composed parameter's
/// `provenance` was decided.
fn dataflow_check(
    entry: &ToolEntry,
    ran: &Action,
    view: &AgentView<'_>,
    provenance: Vec<knox_types::payload::ArgFlow>,
) -> Option<CheckPayload> {
    let discloses =
        (view.closed.content || view.closed.labels) && entry.effect() == Effect::Disclose;
    if entry.annotations.sinks.is_empty() && !discloses && provenance.is_empty() {
        return None;
    }
    let links = view.closed.recipients.then_some(view.links);
    let sinks = dataflow::check(
        &entry.annotations.sinks,
        ran,
        view.expected,
        view.prompt,
        view.tainted,
        links,
    );
    let content = if discloses && view.closed.content {
        dataflow::content_flows(ran, view.expected, view.prompt, view.run)
    } else {
        Vec::new()
    };
    let passed = dataflow::passes(&sinks)
        && content.iter().all(|c| c.declared)
        && provenance::passes(&provenance);
    // How many of the run's outputs the call saw: for a disclosure's content check,
    // and for a provenance decision whose context was the run's (the verifier replays
    // either with exactly those outputs, whatever other agents committed meanwhile).
    let shared = view.closed.content || view.closed.labels;
    let outputs = (discloses || (shared && !provenance.is_empty()))
        .then(|| u32::try_from(view.run.len()).unwrap_or(u32::MAX));
    Some(CheckPayload {
        guard: GuardKind::DataFlow,
        passed,
        detail: CheckDetail::DataFlow {
            sinks,
            content,
            outputs,
            provenance,
        },
    })
}

/// The sources of `f` it is not cleared for (at most eight), listed.
fn uncleared_of(f: &knox_types::payload::ArgFlow) -> String {
    let list: Vec<String> = f
        .sources
        .iter()
        .filter(|s| !f.cleared.contains(s))
        .take(8)
        .map(u64::to_string)
        .collect();
    list.join(", ")
}

/// Why a failed data-flow check blocks: a withheld or uncleared composed parameter
/// (unless an untrusted sink value says more), an untrusted value in a sink, or an
/// undeclared flow into a disclosure's content.
fn dataflow_reason(
    sinks: &[knox_types::payload::SinkCheck],
    content: &[knox_types::payload::ContentFlow],
    provenance: &[knox_types::payload::ArgFlow],
) -> String {
    let bad_sink = sinks.iter().find(|c| c.source.is_some() && !c.authorized);
    let bad_flow = content.iter().find(|c| !c.declared);
    let withheld = provenance.iter().find(|f| f.ran == provenance::WITHHELD);
    let uncleared = provenance.iter().find(|f| f.ran == provenance::UNCLEARED);
    if let (Some(w), None) = (uncleared, bad_sink) {
        return format!(
            "`{}` was composed after reading node {}, which the contract does not clear the request's endpoint to receive (its `receives`)",
            w.param,
            uncleared_of(w)
        );
    }
    if let (Some(w), None) = (withheld, bad_sink) {
        return format!(
            "`{}` was composed after reading node {}, which the plan does not clear it for, and no planned value may run in its place",
            w.param,
            uncleared_of(w)
        );
    }
    match (bad_sink, bad_flow) {
        (Some(bad), _) => format!(
            "untrusted value in sink `{}` (from tool_output node {})",
            bad.param,
            bad.source.unwrap_or_default()
        ),
        (None, Some(f)) => format!(
            "undeclared flow from tool_output node {} into `{}` ({})",
            f.source,
            f.params.join("`+`"),
            f.via
        ),
        (None, None) => "untrusted value in a sink".into(),
    }
}

/// Why a failed regulation check blocks: the disclosure's verdict, or — for an
/// output going to a remote model (`model`) — that model's operator as the recipient.
fn regulation_reason(
    verdict: &str,
    policies: &[String],
    note: Option<&str>,
    model: Option<&knox_types::apm::RemoteModel>,
    flow: Option<&knox_types::regulation::InfoFlow>,
) -> String {
    let Some(model) = model else {
        return if verdict == "not_applicable" {
            format!(
                "not_applicable after a labelled read, pending approval: {}",
                note.unwrap_or_default()
            )
        } else {
            format!("non-compliant: {}", policies.join(", "))
        };
    };
    let types = flow
        .map(|f| f.info_types.iter().cloned().collect::<Vec<_>>().join("+"))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "labelled data".into());
    let to = format!(
        "its output ({types}) would go to the remote {} `{}`, whose operator at {} is the recipient",
        model.role, model.model, model.endpoint
    );
    if verdict == "non_compliant" {
        format!("{to}: non-compliant: {}", policies.join(", "))
    } else {
        format!(
            "{to}: no policy permits it, pending approval: {}",
            note.unwrap_or_default()
        )
    }
}

/// Where the call a `block_reason` explains stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct At {
    /// The trajectory position the call was checked against (0-based; `u32::MAX`, or
    /// the trajectory's length with the check's `mode` `none`, when no step was).
    pub position: u32,
    /// The proposal's number among its agent's proposals (1-based), when reasons are
    /// worded plainly (evidence format v5); `None` for the wording before.
    pub proposal: Option<u32>,
}

/// Why a failed check blocks, in words for the `block_reason`; `None` for a passed check.
pub fn block_reason(check: &CheckPayload, at: At) -> Option<String> {
    if check.passed {
        return None;
    }
    let position = at.position;
    Some(match &check.detail {
        CheckDetail::Trajectory { reason, mode, .. } => {
            let reason = reason.as_deref().unwrap_or("mismatch");
            // A step is named only when one was expected (not past the plan's end).
            let step = position != u32::MAX && mode != "none";
            match at.proposal {
                Some(n) if step => format!(
                    "proposal {n} is off the plan (checked against plan step {}): {reason}",
                    u64::from(position) + 1
                ),
                Some(n) => format!("proposal {n} is off the plan: {reason}"),
                None => format!("off trajectory at position {position}: {reason}"),
            }
        }
        CheckDetail::Syscall { missing, .. } => {
            let list: Vec<&str> = missing.iter().map(String::as_str).take(8).collect();
            format!("needs outside Auth: {}", list.join(", "))
        }
        CheckDetail::DataFlow {
            sinks,
            content,
            provenance,
            ..
        } => dataflow_reason(sinks, content, provenance),
        CheckDetail::Regulation {
            verdict,
            policies,
            note,
            model,
            flow,
            ..
        } => regulation_reason(
            verdict,
            policies,
            note.as_deref(),
            model.as_deref(),
            flow.as_deref(),
        ),
        CheckDetail::Input { error } => format!(
            "malformed proposal: {}",
            error.as_deref().unwrap_or_default()
        ),
        CheckDetail::Stop { .. } => "interrupted".into(),
        CheckDetail::Contract(c) => match c.outcome {
            knox_types::payload::ContractOutcome::Pending => format!(
                "contract: pending approval of `{}` (impact {})",
                c.capability.as_deref().unwrap_or_default(),
                c.impact.as_deref().unwrap_or_default()
            ),
            _ => format!(
                "contract check `{}` failed: {}",
                c.check.as_deref().unwrap_or_default(),
                c.reason.as_deref().unwrap_or_default()
            ),
        },
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn off_plan(mode: &str, reason: &str) -> CheckPayload {
        CheckPayload {
            guard: GuardKind::Trajectory,
            passed: false,
            detail: CheckDetail::Trajectory {
                mode: mode.into(),
                params: vec![],
                reason: Some(reason.into()),
                executed: None,
                options: None,
            },
        }
    }

    #[test]
    fn an_off_plan_reason_names_the_proposal_and_a_step_only_when_one_was_expected() {
        let c = off_plan("exact", "expected tool `A`, got `B`");
        let at = |position, proposal| At { position, proposal };
        assert_eq!(
            block_reason(&c, at(1, Some(3))).unwrap(),
            "proposal 3 is off the plan (checked against plan step 2): expected tool `A`, got `B`"
        );
        assert_eq!(
            block_reason(&c, at(1, None)).unwrap(),
            "off trajectory at position 1: expected tool `A`, got `B`"
        );
        // Past the plan's end (exact mode: the trajectory's length, mode `none`).
        let past = off_plan("none", "no further call is expected on this trajectory");
        assert_eq!(
            block_reason(&past, at(2, Some(3))).unwrap(),
            "proposal 3 is off the plan: no further call is expected on this trajectory"
        );
        assert_eq!(
            block_reason(&c, at(u32::MAX, Some(1))).unwrap(),
            "proposal 1 is off the plan: expected tool `A`, got `B`"
        );
    }
}
