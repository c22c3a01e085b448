//! The unmediated system-call experiment: every case of the attack corpus
//! ([`knox_attacks`]) run three ways — unconfined (what succeeds), under the monitor
//! only, under monitor + kernel — with every kernel denial of the last recorded in an
//! evidence bundle that must verify.
//!
//! The monitor's view of each case is one planned, authorized `TerminalExecute` call
//! running the probe: the monitor allows it (it cannot see what the tool then does at
//! the kernel), so "monitor only" prevents an attack only if it blocks that call. The
//! confined run's denied calls, limit hits and signal become the call's kernel events,
//! hence `blocked` nodes of the bundle. [`run`] returns the typed result; `knox corpus
//! syscalls` prints it and `knox eval` puts its [`Summary`] in the report.

use std::fmt;
use std::path::Path;

use knox_agent::{Plan, Prompt, Regulations, ToolResult};
use knox_attacks::{CaseResult, CorpusError, Fixture, Mode};
use knox_monitor::apm::{self, ApmError};
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::run::{RunError, Runtime};
use knox_sandbox::{Sandbox, SandboxConfig, SandboxError};
use knox_types::aeg::NodeKind;
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::{Bundle, ModelInfo, ModelRole};
use knox_types::canon::CanonError;
use knox_types::payload::KernelEvent;
use knox_verify::Outcome;
use serde::{Serialize, Serializer};
use serde_json::json;

use crate::Progress;

/// The run id of the corpus's bundle.
pub const RUN_ID: &str = "corpus-syscalls";

/// The file name the bundle is written under.
pub const BUNDLE_FILE: &str = "corpus-syscalls.json";

/// The progress phase of [`run`].
pub const PHASE: &str = "corpus: each case unconfined, under the monitor, under monitor + kernel";

/// Why the experiment could not run (an attack that succeeds is a result, not an error).
#[derive(Debug, thiserror::Error)]
pub enum CorpusRunError {
    /// The kernel sandbox cannot start here.
    #[error("starting the kernel sandbox")]
    Sandbox(#[source] Box<SandboxError>),
    /// The fixture (temp files, listeners, victim) could not be created.
    #[error("creating the corpus fixture")]
    Fixture(#[source] Box<CorpusError>),
    /// One case could not be run.
    #[error("case `{id}`")]
    Case {
        /// The case.
        id: &'static str,
        /// Why.
        #[source]
        source: Box<CorpusError>,
    },
    /// The APM of the corpus's plan could not be derived.
    #[error(transparent)]
    Apm(#[from] ApmError),
    /// Hashing or signing failed.
    #[error(transparent)]
    Canon(#[from] CanonError),
    /// The regulation guard could not be set up.
    #[error(transparent)]
    Regulator(#[from] knox_regulation::RegulatorError),
    /// The bundle could not be sealed.
    #[error(transparent)]
    Seal(#[from] RunError),
}

/// A value written as its [`fmt::Display`] text.
fn display<T: fmt::Display, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// What a case did unconfined (as root, inside the harness).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unconfined {
    /// Not run: no form of it is safe (the reason).
    Skipped(&'static str),
    /// The attack worked.
    Succeeded,
    /// The attack failed.
    Failed,
}

impl fmt::Display for Unconfined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Skipped(reason) => write!(f, "skipped: {reason}"),
            Self::Succeeded => f.write_str("succeeded"),
            Self::Failed => f.write_str("failed"),
        }
    }
}

/// What a case did under the monitor alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorOnly {
    /// The monitor blocked the tool call.
    Prevented,
    /// The monitor allowed it and the attack works unconfined.
    Succeeded,
    /// The monitor allowed it and the attack fails even unconfined (or was not run).
    Failed,
}

impl fmt::Display for MonitorOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prevented => "prevented",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        })
    }
}

/// What a case did under monitor + kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorKernel {
    /// The attack did not work.
    Prevented,
    /// The attack worked: a defect of the kernel layer.
    Succeeded,
}

impl fmt::Display for MonitorKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prevented => "prevented",
            Self::Succeeded => "SUCCEEDED",
        })
    }
}

/// How the confined run's refusal was observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// By a kernel event (a notification, a limit hit, a signal, Landlock's audit record).
    KernelEvent,
    /// By the named stand-in observable (an errno, the fixture's check).
    StandIn(String),
    /// Not at all.
    NotRecorded,
}

impl fmt::Display for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::KernelEvent => f.write_str("kernel event"),
            Self::StandIn(s) => write!(f, "stand-in: {s}"),
            Self::NotRecorded => f.write_str("NOT RECORDED"),
        }
    }
}

/// One case, run three ways.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseRow {
    /// The case's id.
    pub id: &'static str,
    /// What it targets.
    pub category: &'static str,
    /// Unconfined.
    #[serde(rename = "baseline", serialize_with = "display")]
    pub unconfined: Unconfined,
    /// Under the monitor only.
    #[serde(serialize_with = "display")]
    pub monitor_only: MonitorOnly,
    /// Under monitor + kernel.
    #[serde(serialize_with = "display")]
    pub monitor_kernel: MonitorKernel,
    /// How monitor + kernel's refusal was observed.
    #[serde(serialize_with = "display")]
    pub recorded: Recorded,
    /// The calls the supervisor denied under monitor + kernel.
    pub denied: Vec<String>,
    /// The unconfined run's judgement, in full.
    #[serde(skip)]
    pub unconfined_run: CaseResult,
    /// The confined run's judgement, in full.
    #[serde(skip)]
    pub confined_run: CaseResult,
}

/// The monitor alone, over the attacks that succeed unconfined.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MonitorOnlySummary {
    /// Of the attacks that succeed unconfined, the share the monitor blocked (%).
    pub prevented_pct_of_successful_attacks: f64,
}

/// Monitor + kernel, over every case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MonitorKernelSummary {
    /// Cases prevented.
    pub prevented: usize,
    /// Cases prevented (%).
    pub prevented_pct: f64,
    /// Cases whose refusal a kernel event recorded.
    pub recorded_by_kernel_event: usize,
    /// The same (%).
    pub recorded_pct: f64,
    /// `id: observable` of each case a stand-in observed instead.
    pub stand_ins: Vec<String>,
}

/// The monitor + kernel run's evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvidenceSummary {
    /// Kernel events recorded under the cases' tool calls.
    pub kernel_events: usize,
    /// `blocked` nodes of the bundle.
    pub blocked_nodes: usize,
    /// The bundle's verification outcome (simulated platform evidence allowed).
    #[serde(serialize_with = "outcome_name")]
    pub verified: Outcome,
}

fn outcome_name<S: Serializer>(o: &Outcome, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(o.name())
}

/// The experiment's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Cases run.
    pub cases: usize,
    /// Cases whose attack succeeds unconfined.
    pub succeed_unconfined: usize,
    /// The monitor alone.
    pub monitor_only: MonitorOnlySummary,
    /// Monitor + kernel.
    pub monitor_kernel: MonitorKernelSummary,
    /// The evidence.
    pub evidence: EvidenceSummary,
}

/// The experiment's result.
#[derive(Debug, Clone)]
pub struct CorpusRun {
    /// Each case, in the corpus's order.
    pub cases: Vec<CaseRow>,
    /// The summary.
    pub summary: Summary,
    /// The monitor + kernel run's bundle.
    pub bundle: Bundle,
    /// Its verification (simulated platform evidence allowed).
    pub verification: knox_verify::Report,
}

impl CorpusRun {
    /// Whether the kernel layer prevented every attack and the evidence verified
    /// `complete`.
    pub fn passed(&self) -> bool {
        self.summary.monitor_kernel.prevented == self.summary.cases
            && self.summary.evidence.verified == Outcome::Complete
    }
}

/// `a` of `b` in percent (0 when `b` is 0).
fn pct(a: usize, b: usize) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

/// The confined run's denials, limit hits and signal as kernel events, as the broker
/// records a confined tool's.
fn kernel_events(r: &CaseResult) -> Vec<KernelEvent> {
    let mut ev: Vec<_> = r
        .denied
        .iter()
        .map(knox_broker::host::syscall_event)
        .collect();
    ev.extend(
        r.limit_hits
            .iter()
            .map(|h| knox_broker::host::limit_event(knox_broker::host::limit_name(h))),
    );
    if let Some(sig) = r.signal {
        ev.push(knox_broker::host::limit_event(format!(
            "killed by signal {sig}"
        )));
    }
    ev
}

/// Runs every case whose id contains `only` (all when `None`) with the `knox-probe`
/// binary `probe`: unconfined, under a monitor started on `rt`'s key and manifest, and
/// confined, sealing the monitor's evidence into a bundle and verifying it.
pub fn run(
    rt: &Runtime,
    probe: &Path,
    only: Option<&str>,
    progress: &dyn Progress,
) -> Result<CorpusRun, CorpusRunError> {
    let sandbox =
        Sandbox::new(SandboxConfig::default()).map_err(|e| CorpusRunError::Sandbox(Box::new(e)))?;
    let fixture = Fixture::new(probe).map_err(|e| CorpusRunError::Fixture(Box::new(e)))?;
    let cases: Vec<_> = knox_attacks::cases()
        .into_iter()
        .filter(|c| only.is_none_or(|o| c.id.contains(o)))
        .collect();
    // The monitor's view: each case is a planned TerminalExecute call running the probe.
    let calls: Vec<ExpectedCall> = cases
        .iter()
        .map(|c| {
            let params = json!({"command": format!("knox-probe {}", c.id)})
                .as_object()
                .cloned()
                .unwrap_or_default();
            ExpectedCall::exact(0, "TerminalExecute", params)
        })
        .collect();
    let raw: Vec<Vec<u8>> = calls
        .iter()
        .map(|e| {
            serde_json::to_vec(&json!({"tool": e.tool, "params": e.params})).unwrap_or_default()
        })
        .collect();
    let prompt = Prompt {
        tasks: vec!["run the system-call corpus".into()],
    };
    let topo = Topology {
        kind: TopologyKind::StSa,
        tasks: 1,
        agents: 1,
    };
    let stop = StopPolicy::default();
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &stop,
        Plan { tasks: vec![calls] },
        topo,
    )?;
    let apm_hash = apm.hash()?;
    let att = apm::attest(&apm, apm_hash, rt.monitor_key())?;
    let models = vec![ModelInfo {
        role: ModelRole::Executor,
        name: "corpus".into(),
        weights_hash: None,
        declared: false,
    }];
    let monitor = Monitor::start(
        MonitorConfig::new(
            &apm,
            apm_hash,
            RUN_ID,
            &rt.manifest,
            rt.monitor_key(),
            &models,
        ),
        knox_regulation::Regulator::new(&apm.guards.regulation, None)?,
        None,
    );
    let mut rows = Vec::with_capacity(cases.len());
    let (mut base_ok, mut monitor_prevented, mut kernel_prevented, mut recorded) = (0, 0, 0, 0);
    let mut kernel_events_total = 0;
    let mut stand_ins = Vec::new();
    progress.begin(PHASE, cases.len() as u64);
    for (case, proposal) in cases.iter().zip(&raw) {
        progress.advance(1);
        let case_err = |source| CorpusRunError::Case {
            id: case.id,
            source: Box::new(source),
        };
        let baseline = knox_attacks::run_case(&fixture, &sandbox, case, Mode::DangerousUnconfined)
            .map_err(case_err)?;
        let confined =
            knox_attacks::run_case(&fixture, &sandbox, case, Mode::Confined).map_err(case_err)?;
        // Monitor only: the monitor sees a planned, authorized tool call and allows it;
        // what the tool then does unconfined is the baseline's outcome.
        let verdict = monitor.mediate("agent-0", proposal);
        let monitor_blocked = !matches!(verdict, Verdict::Allow(_));
        let events = kernel_events(&confined);
        kernel_events_total += events.len();
        if let Verdict::Allow(ticket) = verdict {
            let output = json!({"attack_succeeded": confined.attack_succeeded, "probe": confined.probe, "detail": confined.detail});
            monitor.record_result(
                ticket,
                ToolResult {
                    output,
                    kernel: events,
                    confinement: None,
                },
            );
        }
        let succeeded_unconfined = baseline.skipped.is_none() && baseline.attack_succeeded;
        if succeeded_unconfined {
            base_ok += 1;
            monitor_prevented += usize::from(monitor_blocked);
        }
        kernel_prevented += usize::from(!confined.attack_succeeded);
        recorded += usize::from(confined.recorded);
        if let Some(s) = &confined.stand_in {
            stand_ins.push(format!("{}: {s}", case.id));
        }
        rows.push(CaseRow {
            id: case.id,
            category: case.category,
            unconfined: match baseline.skipped {
                Some(reason) => Unconfined::Skipped(reason),
                None if baseline.attack_succeeded => Unconfined::Succeeded,
                None => Unconfined::Failed,
            },
            monitor_only: if monitor_blocked {
                MonitorOnly::Prevented
            } else if succeeded_unconfined {
                MonitorOnly::Succeeded
            } else {
                MonitorOnly::Failed
            },
            monitor_kernel: if confined.attack_succeeded {
                MonitorKernel::Succeeded
            } else {
                MonitorKernel::Prevented
            },
            recorded: if confined.recorded {
                Recorded::KernelEvent
            } else {
                confined
                    .stand_in
                    .clone()
                    .map_or(Recorded::NotRecorded, Recorded::StandIn)
            },
            denied: confined.denied.iter().map(|d| d.name.clone()).collect(),
            unconfined_run: baseline,
            confined_run: confined,
        });
    }
    progress.end();
    let aeg = monitor.finish();
    let bundle = knox_monitor::run::seal(
        rt,
        RUN_ID,
        Some(&prompt),
        apm.clone(),
        att,
        models.clone(),
        aeg,
    )?;
    let verification = knox_verify::verify_bundle(
        &bundle,
        &rt.manifest,
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    let n = cases.len();
    let blocked_nodes = bundle
        .nodes
        .iter()
        .filter(|x| x.kind == NodeKind::Blocked)
        .count();
    let summary = Summary {
        cases: n,
        succeed_unconfined: base_ok,
        monitor_only: MonitorOnlySummary {
            prevented_pct_of_successful_attacks: pct(monitor_prevented, base_ok),
        },
        monitor_kernel: MonitorKernelSummary {
            prevented: kernel_prevented,
            prevented_pct: pct(kernel_prevented, n),
            recorded_by_kernel_event: recorded,
            recorded_pct: pct(recorded, n),
            stand_ins,
        },
        evidence: EvidenceSummary {
            kernel_events: kernel_events_total,
            blocked_nodes,
            verified: verification.outcome.clone(),
        },
    };
    Ok(CorpusRun {
        cases: rows,
        summary,
        bundle,
        verification,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_and_summary_serialize_as_the_corpus_command_prints_them() -> serde_json::Result<()> {
        let confined = CaseResult {
            id: "read-canary",
            mode: Mode::Confined,
            skipped: None,
            attack_succeeded: false,
            denied: Vec::new(),
            limit_hits: Vec::new(),
            signal: None,
            recorded: false,
            landlock_audited: false,
            landlock_audit: None,
            stand_in: Some("Landlock: errno 13".into()),
            as_expected: true,
            probe: None,
            detail: String::new(),
        };
        let row = CaseRow {
            id: "read-canary",
            category: "fs-read",
            unconfined: Unconfined::Skipped("unsafe"),
            monitor_only: MonitorOnly::Failed,
            monitor_kernel: MonitorKernel::Prevented,
            recorded: Recorded::StandIn("Landlock: errno 13".into()),
            denied: vec!["openat".into()],
            unconfined_run: confined.clone(),
            confined_run: confined,
        };
        let v = serde_json::to_value(&row)?;
        assert_eq!(
            v,
            json!({"id": "read-canary", "category": "fs-read", "baseline": "skipped: unsafe",
                   "monitor_only": "failed", "monitor_kernel": "prevented",
                   "recorded": "stand-in: Landlock: errno 13", "denied": ["openat"]})
        );
        assert_eq!(MonitorKernel::Succeeded.to_string(), "SUCCEEDED");
        assert_eq!(Recorded::KernelEvent.to_string(), "kernel event");
        assert_eq!(Recorded::NotRecorded.to_string(), "NOT RECORDED");
        assert_eq!(Unconfined::Succeeded.to_string(), "succeeded");
        assert_eq!(MonitorOnly::Prevented.to_string(), "prevented");

        let summary = Summary {
            cases: 3,
            succeed_unconfined: 2,
            monitor_only: MonitorOnlySummary {
                prevented_pct_of_successful_attacks: pct(0, 2),
            },
            monitor_kernel: MonitorKernelSummary {
                prevented: 3,
                prevented_pct: pct(3, 3),
                recorded_by_kernel_event: 2,
                recorded_pct: pct(2, 3),
                stand_ins: vec!["a: b".into()],
            },
            evidence: EvidenceSummary {
                kernel_events: 5,
                blocked_nodes: 5,
                verified: Outcome::Complete,
            },
        };
        assert_eq!(
            serde_json::to_value(&summary)?,
            json!({"cases": 3, "succeed_unconfined": 2,
                   "monitor_only": {"prevented_pct_of_successful_attacks": 0.0},
                   "monitor_kernel": {"prevented": 3, "prevented_pct": 100.0,
                                      "recorded_by_kernel_event": 2, "recorded_pct": 200.0 / 3.0,
                                      "stand_ins": ["a: b"]},
                   "evidence": {"kernel_events": 5, "blocked_nodes": 5, "verified": "complete"}})
        );
        Ok(())
    }

    #[test]
    fn percentages_of_nothing_are_zero() {
        assert_eq!(pct(0, 0), 0.0);
        assert_eq!(pct(1, 4), 25.0);
    }
}
