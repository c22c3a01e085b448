//! Policy analysis of a plan before it runs: does any disclosure the APM permits exceed
//! the regulation baseline for some content the plan lets reach it?
//!
//! For every disclosing call of every agent's trajectory, the flow is derived from the
//! planned parameters and the run's regulation context (recipients, sender, purpose,
//! consent), and its content is taken to carry any combination of the information
//! types the agent's earlier planned calls return (their labels) plus what the tool
//! carries by itself, with every data subject those labels name. The analysis decides
//! every such flow with the norms; a non-compliant one is a counterexample: the plan
//! lets the agent make that disclosure, and with that content it is not lawful. The
//! domain is finite (label types × subjects), so the analysis is exhaustive up to
//! [`MAX_EXHAUSTIVE`] reachable types; beyond that it checks each single type and the
//! full set.

use std::collections::BTreeSet;

use knox_policy::ToolkitManifest;
use knox_policy::manifest::Subject;
use knox_types::Action;
use knox_types::apm::Apm;
use knox_types::regulation::InfoFlow;
use serde::Serialize;
use serde_json::Value;

use crate::check::Regulator;
use crate::flow::info_name;

/// Most reachable information types enumerated exhaustively (2^n combinations).
pub const MAX_EXHAUSTIVE: usize = 10;

/// One disclosure of the plan and what the analysis found.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// Agent.
    pub agent: String,
    /// Trajectory position.
    pub position: usize,
    /// The disclosing tool.
    pub tool: String,
    /// Combinations of content facts decided.
    pub cases: usize,
    /// Whether every case was exhaustive (false when too many types were reachable).
    pub exhaustive: bool,
    /// The first non-compliant flow, if any.
    pub counterexample: Option<Counterexample>,
}

/// A flow the plan permits that the norms do not.
#[derive(Clone, Debug, Serialize)]
pub struct Counterexample {
    /// The flow.
    pub flow: InfoFlow,
    /// Deciding policies.
    pub policies: Vec<String>,
    /// Why, in words.
    pub note: String,
}

/// Analyzes every disclosing call of `apm` with `regulator` (built for the APM's
/// regulation spec).
pub fn analyze(apm: &Apm, manifest: &ToolkitManifest, regulator: &Regulator<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for plan in &apm.agents {
        let mut reachable: BTreeSet<String> = BTreeSet::new();
        let mut subjects: BTreeSet<&'static str> = BTreeSet::new();
        for (position, e) in plan.trajectory.iter().enumerate() {
            let Some(tool) = manifest.tool(&e.tool) else {
                continue;
            };
            if regulator.applies(tool) {
                let action = Action {
                    tool: e.tool.clone(),
                    params: e.params.clone(),
                };
                if let Some(base) = regulator.flow(tool, &action, Some(e), Some(e.task), &[]) {
                    out.push(analyze_one(
                        regulator, &plan.id, position, base, &reachable, &subjects,
                    ));
                }
            }
            if let Some(r) = &tool.annotations.returns {
                reachable.extend(r.info_types.iter().map(|t| info_name(*t)));
                subjects.insert(match r.subject {
                    Subject::User => "user",
                    Subject::ThirdParty => "third_party",
                    Subject::Mixed => "mixed",
                });
            }
        }
    }
    out
}

fn analyze_one(
    regulator: &Regulator<'_>,
    agent: &str,
    position: usize,
    base: InfoFlow,
    reachable: &BTreeSet<String>,
    subjects: &BTreeSet<&'static str>,
) -> Finding {
    let types: Vec<&String> = reachable.iter().collect();
    let exhaustive = types.len() <= MAX_EXHAUSTIVE;
    let mut combos: Vec<BTreeSet<String>> = Vec::new();
    if exhaustive {
        for mask in 0u32..(1u32 << types.len()) {
            combos.push(
                types
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, t)| (*t).clone())
                    .collect(),
            );
        }
    } else {
        combos.push(BTreeSet::new());
        combos.extend(types.iter().map(|t| [(*t).clone()].into()));
        combos.push(reachable.clone());
    }
    let mut subject_cases: Vec<String> = subjects.iter().map(|s| (*s).to_string()).collect();
    if subject_cases.is_empty() {
        subject_cases.push(base.subject.clone());
    }
    let mut cases = 0;
    let mut counterexample = None;
    'all: for extra in &combos {
        for subject in &subject_cases {
            let mut flow = base.clone();
            flow.info_types.extend(extra.iter().cloned());
            if !extra.is_empty() {
                flow.subject = if base.sources.is_empty() || base.subject == *subject {
                    subject.clone()
                } else {
                    "mixed".into()
                };
                for r in &mut flow.recipients {
                    r.to_subject = r.party.role == "self" && flow.subject == "user";
                }
            }
            cases += 1;
            let check = regulator.check(Some(flow.clone()), None);
            if let knox_types::payload::CheckDetail::Regulation {
                verdict,
                policies,
                note,
                ..
            } = check.detail
                && verdict == "non_compliant"
            {
                counterexample = Some(Counterexample {
                    flow,
                    policies,
                    note: note.unwrap_or_default(),
                });
                break 'all;
            }
        }
    }
    Finding {
        agent: agent.to_string(),
        position,
        tool: base.tool.clone(),
        cases,
        exhaustive,
        counterexample,
    }
}

/// Parses an APM from a bundle or an APM file.
pub fn apm_of(json: &Value) -> Option<Apm> {
    let v = json.get("apm").unwrap_or(json);
    serde_json::from_value(v.clone()).ok()
}
