//! The regulation check a `check` node records, computed once for the monitor and the
//! verifier.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use knox_policy::ToolEntry;
use knox_types::Action;
use knox_types::apm::{ExpectedCall, RegulationSpec, RemoteModel};
use knox_types::digest::Digest;
use knox_types::payload::{CheckDetail, CheckPayload, GuardKind, JudgeOpinion};
use knox_types::regulation::{InfoFlow, RegulationDecision};

use crate::flow::{self, Directory, Seen};
use crate::norms::{FlowExtra, Norms};

/// The note recorded when no policy set is configured.
pub const NOT_EVALUATED_NOTE: &str =
    "no regulation policy set configured: flagged for manual review";

/// Why a run's regulation spec and a policy set do not fit together.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegulatorError {
    /// The APM names a policy set other than the one given.
    #[error(
        "regulation policy set mismatch: the APM names {expected}, the policy set given hashes to {actual}"
    )]
    Mismatch {
        /// Hash in the APM.
        expected: Digest,
        /// Hash of the set given.
        actual: Digest,
    },
    /// The APM names a policy set but none was given.
    #[error("the APM names regulation policy set {0}, but no policy set was given")]
    Missing(Digest),
    /// A regulation in force has no policies in the set.
    #[error("regulation `{0}` is in force but the policy set does not define it")]
    Undefined(String),
}

/// Most decisions a regulator memoizes (the memo is cleared when full).
const MEMO_CAP: usize = 4096;

/// The regulation guard of one run.
#[derive(Debug)]
pub struct Regulator<'n> {
    norms: Option<&'n Norms>,
    regulations: Vec<String>,
    dir: Directory,
    /// The facts beyond a flow the context states (the controller's obligations).
    extra: FlowExtra,
    /// Decisions by the facts Cedar sees: a run discloses to the same recipients with
    /// the same facts again and again, and a decision is a pure function of them.
    memo: Mutex<HashMap<String, Vec<RegulationDecision>>>,
}

impl<'n> Regulator<'n> {
    /// The guard for `spec` (from the APM), deciding with `norms` — which must be the set
    /// whose hash the spec carries. A spec without a policy hash is not evaluated: every
    /// disclosure is `not_applicable` and flagged.
    pub fn new(spec: &RegulationSpec, norms: Option<&'n Norms>) -> Result<Self, RegulatorError> {
        let norms = match (spec.policy_hash, norms) {
            (None, _) => None,
            (Some(h), None) => return Err(RegulatorError::Missing(h)),
            (Some(h), Some(n)) if n.hash() != h => {
                return Err(RegulatorError::Mismatch {
                    expected: h,
                    actual: n.hash(),
                });
            }
            (Some(_), Some(n)) => {
                if let Some(r) = spec.regulations.iter().find(|r| !n.defines(r)) {
                    return Err(RegulatorError::Undefined(r.clone()));
                }
                Some(n)
            }
        };
        Ok(Self {
            norms,
            regulations: spec.regulations.clone(),
            dir: spec
                .context
                .as_ref()
                .map(Directory::new)
                .unwrap_or_default(),
            extra: FlowExtra {
                obligations: spec
                    .context
                    .as_ref()
                    .map(|c| c.obligations.clone())
                    .unwrap_or_default(),
                ..FlowExtra::default()
            },
            memo: Mutex::new(HashMap::new()),
        })
    }

    /// Whether `tool` gets a regulation check: it discloses and regulations are in force.
    pub fn applies(&self, tool: &ToolEntry) -> bool {
        !self.regulations.is_empty() && tool.annotations.discloses.is_some()
    }

    /// Whether a policy set decides (otherwise every verdict is `not_applicable`).
    pub fn evaluates(&self) -> bool {
        self.norms.is_some()
    }

    /// `φ` of `action`, when a policy set decides and the tool discloses.
    pub fn flow(
        &self,
        tool: &ToolEntry,
        action: &Action,
        expected: Option<&ExpectedCall>,
        task: Option<u32>,
        seen: &[Seen<'_>],
    ) -> Option<InfoFlow> {
        self.norms?;
        flow::derive(tool, action, expected, task, &self.dir, seen)
    }

    /// The check of handing `tool`'s output (in task `task`) to the operator of the
    /// remote `model`: decided as any disclosure is, without a judge, and marked with
    /// the model. The verdict is the norms'; the guards pipeline settles whether it
    /// passes (`compliant`, or outside every regulation's scope).
    pub fn egress(&self, tool: &ToolEntry, task: Option<u32>, model: &RemoteModel) -> CheckPayload {
        let flow = self
            .norms
            .and_then(|_| flow::egress(tool, task, &self.dir, &model.endpoint));
        let mut c = self.check(flow, None);
        if let CheckDetail::Regulation { model: m, .. } = &mut c.detail {
            *m = Some(Box::new(model.clone()));
        }
        c
    }

    /// The check for `flow` (from [`Regulator::flow`]), with the judge's opinion when one
    /// was asked: its information types and purpose fill in what the labels left
    /// unknown, and its verdict is compared with the deterministic one, never
    /// substituted for it.
    pub fn check(&self, flow: Option<InfoFlow>, judge: Option<JudgeOpinion>) -> CheckPayload {
        let (Some(norms), Some(mut flow)) = (self.norms, flow) else {
            return CheckPayload {
                guard: GuardKind::Regulation,
                passed: true,
                detail: CheckDetail::Regulation {
                    verdict: "not_applicable".into(),
                    policies: vec![],
                    flow: None,
                    decisions: vec![],
                    judge: None,
                    note: Some(NOT_EVALUATED_NOTE.into()),
                    model: None,
                },
            };
        };
        let mut judge = judge;
        if let Some(j) = &judge {
            if flow.info_types.is_empty() && !j.info_types.is_empty() {
                flow.info_types = j.info_types.clone();
                flow.sources.push("judge".into());
            }
            if flow.purpose == "unspecified"
                && let Some(p) = &j.purpose
            {
                flow.purpose = crate::address::label(p);
            }
        }
        let mut decisions = Vec::new();
        let mut errors = Vec::new();
        for k in 0..flow.recipients.len() {
            match self.decide(norms, &flow, k) {
                Ok(d) => decisions.extend(d),
                Err(e) => errors.push(e.to_string()),
            }
        }
        let (verdict, policies) = combine(&decisions, !errors.is_empty());
        if let Some(j) = judge.as_mut() {
            j.agrees = j.verdict.as_ref().map(|v| *v == verdict);
        }
        let note = note(&verdict, &decisions, &flow, &errors);
        CheckPayload {
            guard: GuardKind::Regulation,
            passed: verdict != "non_compliant",
            detail: CheckDetail::Regulation {
                verdict,
                policies,
                flow: Some(Box::new(flow)),
                decisions,
                judge: judge.map(Box::new),
                note: Some(note),
                model: None,
            },
        }
    }
}

impl Regulator<'_> {
    /// The decisions for recipient `k` of `flow`, memoized by the facts Cedar sees.
    fn decide(
        &self,
        norms: &Norms,
        flow: &InfoFlow,
        k: usize,
    ) -> Result<Vec<RegulationDecision>, crate::NormError> {
        let Some(r) = flow.recipients.get(k) else {
            return norms.decide_extra(&self.regulations, flow, k, &self.extra);
        };
        let key = facts_key(flow, r);
        let memo = |m: &Mutex<HashMap<String, Vec<RegulationDecision>>>| {
            m.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&key)
                .cloned()
        };
        if let Some(d) = memo(&self.memo) {
            return Ok(d);
        }
        let d = norms.decide_extra(&self.regulations, flow, k, &self.extra)?;
        let mut m = self.memo.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() >= MEMO_CAP {
            m.clear();
        }
        m.insert(key, d.clone());
        Ok(d)
    }
}

/// Everything a decision depends on, as one string; every field is length-prefixed, so
/// two different sets of facts never share a key.
fn facts_key(flow: &InfoFlow, r: &knox_types::regulation::RecipientFacts) -> String {
    use std::fmt::Write as _;
    let mut k = String::with_capacity(256);
    let mut field = |s: &str| {
        let _ = write!(k, "{}:{s}\u{1f}", s.len());
    };
    for p in [&flow.sender, &r.party] {
        field(&p.id);
        field(&p.role);
        field(&p.organisation);
        field(&p.jurisdiction);
        for b in [p.listed, p.in_eea, p.adequacy, p.baa, p.safeguards] {
            field(if b { "1" } else { "0" });
        }
    }
    field(&flow.tool);
    field(&flow.subject);
    field(&flow.purpose);
    field(&flow.info_types.len().to_string());
    for t in &flow.info_types {
        field(t);
    }
    for b in [r.consent, r.explicit_consent, r.authorization, r.to_subject] {
        field(if b { "1" } else { "0" });
    }
    k
}

/// The overall verdict: non-compliant if any regulation finds any recipient
/// non-compliant (or the evaluation failed), else compliant if any decided compliant,
/// else not applicable; with the deciding policies of that verdict.
pub(crate) fn combine(decisions: &[RegulationDecision], failed: bool) -> (String, Vec<String>) {
    let pick = |v: &str| {
        let mut ids: Vec<String> = decisions
            .iter()
            .filter(|d| d.verdict == v)
            .flat_map(|d| d.policies.iter().cloned())
            .collect();
        ids.sort();
        ids.dedup();
        ids
    };
    if failed {
        return ("non_compliant".into(), vec!["evaluation-error".into()]);
    }
    for v in ["non_compliant", "compliant"] {
        if decisions.iter().any(|d| d.verdict == v) {
            return (v.into(), pick(v));
        }
    }
    ("not_applicable".into(), vec![])
}

fn note(
    verdict: &str,
    decisions: &[RegulationDecision],
    flow: &InfoFlow,
    errors: &[String],
) -> String {
    if let Some(e) = errors.first() {
        return format!("evaluation failed: {e}");
    }
    let decisive: Vec<String> = decisions
        .iter()
        .filter(|d| d.verdict == verdict)
        .map(|d| {
            let cites: Vec<String> = d
                .policies
                .iter()
                .zip(&d.provisions)
                .map(|(p, c)| format!("{p} ({c})"))
                .collect();
            format!("{} for {}: {}", d.regulation, d.recipient, cites.join(", "))
        })
        .collect();
    let mut warnings: Vec<&str> = decisions
        .iter()
        .flat_map(|d| d.warnings.iter().map(String::as_str))
        .collect();
    warnings.sort_unstable();
    warnings.dedup();
    match verdict {
        "not_applicable" if !warnings.is_empty() => format!(
            "the norms cannot decide: {}: flagged for manual review",
            warnings.join("; ")
        ),
        "not_applicable" if flow.info_types.is_empty() => {
            "no data label reaches the disclosed content: flagged for manual review".into()
        }
        "not_applicable" => format!(
            "no regulation in force covers {} data sent by {}: flagged for manual review",
            flow.info_types
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join("+"),
            flow.sender.id
        ),
        _ => decisive.join("; "),
    }
}
