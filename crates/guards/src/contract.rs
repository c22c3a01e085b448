//! The `contract` stage: a run bounded by a signed capability contract has every
//! well-formed proposal decided by `knox_contract::decide`, in the ledger state the
//! run's earlier nodes rebuild (reservations made by allowed calls, settlements
//! recorded with their outputs), at the time and with the approval token the check
//! records — so the verifier decides again with exactly the monitor's inputs.
//!
//! A tool that is not one of the contract's four (`ContractReadFile`,
//! `ContractWriteFile`, `ContractExec`, `ContractHttp`) is denied (`structure`): the
//! contract bounds everything the run does.

use knox_contract::{Decision, Ledger, Verified};
use knox_types::Action;
use knox_types::payload::{CheckDetail, CheckPayload, ContractCheck, ContractOutcome, GuardKind};
use serde_json::Value;

/// What the contract stage decides one proposal with, besides the contract.
#[derive(Clone, Copy, Debug)]
pub struct ContractInput<'x> {
    /// When it is decided (Unix ms).
    pub at_ms: u64,
    /// The approval token presented with the action, if any (any JSON).
    pub approval: Option<&'x Value>,
    /// The run's ledger before this proposal.
    pub ledger: &'x Ledger,
    /// The run that already used the presented token, as the approvals store says
    /// (`None`: unused, or not asked yet). An approval otherwise valid is then refused.
    pub used_by: Option<&'x str>,
}

/// The `contract` check of `action` under `contract`. Its `reservation` is the one the
/// ledger gives next when the contract allows; [`settle_reservation`] clears it when a
/// later guard blocks the call (nothing is reserved then).
pub fn check(
    contract: &Verified,
    action: &Action,
    input: Option<ContractInput<'_>>,
) -> CheckPayload {
    let empty = Ledger::new();
    let (at_ms, approval, ledger, used_by) = match input {
        Some(i) => (i.at_ms, i.approval, i.ledger, i.used_by),
        None => (0, None, &empty, None),
    };
    let state = ledger.state();
    let mut c = ContractCheck {
        at_ms,
        approval: approval.cloned(),
        outcome: ContractOutcome::Deny,
        check: None,
        reason: None,
        capability: None,
        cost_cents: None,
        impact: None,
        approval_nonce: None,
        approval_used_by: None,
        reservation: None,
        spent_cents: state.spent_cents,
        reserved_cents: state.reserved_cents,
        actions: state.actions,
    };
    if input.is_none() {
        c.check = Some("structure".into());
        c.reason = Some("no time or ledger to decide the contract with".into());
        return payload(c);
    }
    let value = serde_json::to_value(action).unwrap_or(Value::Null);
    let decision = knox_contract::decide(
        &contract.contract,
        &contract.hash,
        &value,
        approval,
        state,
        at_ms,
    );
    let (allowed, pending) = match decision {
        Decision::Allow(a) => (a, false),
        Decision::Pending(a) => (a, true),
        Decision::Deny(d) => {
            c.check = Some(d.check.as_str().into());
            c.reason = Some(d.reason);
            return payload(c);
        }
    };
    c.capability = Some(allowed.capability);
    c.cost_cents = Some(allowed.cost_cents);
    c.impact = serde_json::to_value(allowed.impact)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned));
    if pending {
        c.outcome = ContractOutcome::Pending;
        c.check = Some("approval".into());
    } else if let (Some(nonce), Some(by)) = (&allowed.approval_nonce, used_by) {
        // Valid, but spent: another run (another process) used it first.
        c.check = Some("approval".into());
        c.reason = Some(format!(
            "approval token {nonce} was already used by run `{by}`: a token is accepted once, across runs and processes"
        ));
        c.approval_used_by = Some(by.to_owned());
    } else {
        c.outcome = ContractOutcome::Allow;
        c.approval_nonce = allowed.approval_nonce;
        c.reservation = Some(ledger.next_id());
    }
    payload(c)
}

fn payload(c: ContractCheck) -> CheckPayload {
    CheckPayload {
        guard: GuardKind::Contract,
        passed: c.outcome == ContractOutcome::Allow,
        detail: CheckDetail::Contract(Box::new(c)),
    }
}

/// Clears the reservation of a contract check whose call a later guard blocked.
pub fn settle_reservation(checks: &mut [CheckPayload]) {
    for c in checks {
        if let CheckDetail::Contract(cc) = &mut c.detail {
            cc.reservation = None;
            cc.approval_nonce = None;
        }
    }
}

/// The contract check among `checks`, when there is one.
pub fn of(checks: &[CheckPayload]) -> Option<&ContractCheck> {
    checks.iter().find_map(|c| match &c.detail {
        CheckDetail::Contract(cc) => Some(&**cc),
        _ => None,
    })
}

/// The ledger event of an allowed call's contract check.
pub fn reserved(c: &ContractCheck) -> Option<knox_contract::LedgerEvent> {
    Some(knox_contract::LedgerEvent::Reserved {
        id: c.reservation?,
        capability: c.capability.clone()?,
        cost_cents: c.cost_cents?,
        approval_nonce: c.approval_nonce.clone(),
    })
}

/// The contract's request tool: the one whose parameters leave the machine.
pub const HTTP: &str = "ContractHttp";

/// The capability an allowed call of one of the contract's tools acts through, as
/// `directories/ID`, `executables/ID` or `endpoints/ID` (its kind and id in the
/// contract), when its output holds data: a file read, a program run, an endpoint's
/// answer. `None` for a write (its status carries nothing) and for any other tool.
pub fn capability_of(action: &Action) -> Option<String> {
    let (kind, param) = match action.tool.as_str() {
        "ContractReadFile" => ("directories", "dir"),
        "ContractExec" => ("executables", "exe"),
        HTTP => ("endpoints", "endpoint"),
        _ => return None,
    };
    let id = action.params.get(param)?.as_str()?;
    Some(format!("{kind}/{id}"))
}

/// Whether a `ContractHttp` `action` under `contract` may carry the data of an output
/// that came through `from` ([`capability_of`]; `None`: heard elsewhere, or of no
/// capability): its endpoint's `receives` lists that capability's id, or the output
/// is the endpoint's own answer (issue 36, item 1).
pub fn receives(contract: &Verified, action: &Action, from: Option<&str>) -> bool {
    let Some(id) = action.params.get("endpoint").and_then(Value::as_str) else {
        return false;
    };
    let Some(endpoint) = contract.contract.endpoints.get(id) else {
        return false;
    };
    let Some((kind, of)) = from.and_then(|f| f.split_once('/')) else {
        return false;
    };
    (kind == "endpoints" && of == id) || endpoint.receives.contains(of)
}

/// The outputs holding data a `ContractHttp` `action` of agent `st` carries, in commit
/// order — the run's (`run`, when the APM shares the run's outputs: every agent's that
/// came through a capability, and what the model heard elsewhere), else the agent's
/// own that came through a capability — each with whether the contract clears the
/// request's endpoint for it ([`receives`]).
pub fn sources(
    contract: &Verified,
    action: &Action,
    st: &crate::AgentState,
    run: &[std::sync::Arc<crate::SharedOutput>],
) -> Vec<(u64, bool)> {
    let clears = |from: Option<&str>| receives(contract, action, from);
    if run.is_empty() {
        st.read
            .iter()
            .filter(|r| r.capability.is_some())
            .map(|r| (r.node, clears(r.capability.as_deref())))
            .collect()
    } else {
        run.iter()
            .filter(|r| r.heard || r.capability.is_some())
            .map(|r| (r.node, clears(r.capability.as_deref())))
            .collect()
    }
}
