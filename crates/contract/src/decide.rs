//! The decision function: total over any JSON, it returns a [`Decision`] for every
//! input and never panics.
//!
//! Order of checks: the contract's validity window; the action's structure; the
//! capability it names (resolution); the path, argv or endpoint against that
//! capability; the action cap; the budget (spent + reserved + this action's cost, the
//! cost taken from the signed capability); the approval, when the capability's impact
//! level needs one. The first failing check is the decision's reason.

use std::collections::BTreeSet;

use knox_types::Action;
use knox_types::digest::Digest;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::{HttpParams, Request};
use crate::approval::{self, Approval};
use crate::format::{Contract, DirAccess, EndpointCap, Impact, argv_matches, valid_relative};
use crate::url;

/// What the session has used so far.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// Cents settled as spent.
    pub spent_cents: u64,
    /// Cents reserved by authorized actions not settled yet.
    pub reserved_cents: u64,
    /// Actions authorized so far (reserved or settled).
    pub actions: u64,
    /// Approval nonces (hex) already accepted.
    pub used_approvals: BTreeSet<String>,
}

/// The check that decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The contract's validity window.
    Window,
    /// The action is not a well-formed contract action.
    Structure,
    /// No such capability (or of another kind or access).
    Capability,
    /// The path is not a clean relative path.
    Path,
    /// The argv matches no template.
    Argv,
    /// The URL or method is not the endpoint's.
    Endpoint,
    /// The action cap.
    ActionCap,
    /// The budget.
    Budget,
    /// A required approval is missing or invalid.
    Approval,
}

impl Check {
    /// Its name in evidence and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Window => "window",
            Self::Structure => "structure",
            Self::Capability => "capability",
            Self::Path => "path",
            Self::Argv => "argv",
            Self::Endpoint => "endpoint",
            Self::ActionCap => "action_cap",
            Self::Budget => "budget",
            Self::Approval => "approval",
        }
    }
}

/// What an allowed (or pending) action costs and under which capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Allowed {
    /// The capability id.
    pub capability: String,
    /// `H(α)`.
    pub action_hash: Digest,
    /// Cost from the signed capability.
    pub cost_cents: u64,
    /// Impact from the signed capability.
    pub impact: Impact,
    /// The approval nonce consumed, when one was needed.
    pub approval_nonce: Option<String>,
}

/// A denial and its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denial {
    /// Which check.
    pub check: Check,
    /// Why, in words.
    pub reason: String,
}

/// The decision over one action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run it, reserving `cost_cents`.
    Allow(Allowed),
    /// It needs a human approval first: paused, recorded as pending.
    Pending(Allowed),
    /// Refused.
    Deny(Denial),
}

impl Decision {
    /// Whether the action may run.
    pub fn is_allow(&self) -> bool {
        matches!(self, Self::Allow(_))
    }

    /// The deciding check of a denial.
    pub fn check(&self) -> Option<Check> {
        match self {
            Self::Deny(d) => Some(d.check),
            Self::Pending(_) => Some(Check::Approval),
            Self::Allow(_) => None,
        }
    }
}

fn deny(check: Check, reason: impl Into<String>) -> Decision {
    Decision::Deny(Denial {
        check,
        reason: reason.into(),
    })
}

/// Decides `action` (any JSON; a Knox action is `{"tool", "params"}`) under a
/// validated `contract` whose hash is `contract_hash`, with an optional approval token
/// (any JSON), at `now_ms`, given what the session has used.
pub fn decide(
    contract: &Contract,
    contract_hash: &Digest,
    action: &Value,
    approval: Option<&Value>,
    state: &State,
    now_ms: u64,
) -> Decision {
    if now_ms < contract.valid_from_ms || now_ms > contract.valid_until_ms {
        return deny(
            Check::Window,
            format!(
                "the contract is valid from {} to {} ms, now is {now_ms}",
                contract.valid_from_ms, contract.valid_until_ms
            ),
        );
    }
    let act: Action = match serde_json::from_value(action.clone()) {
        Ok(a) => a,
        Err(e) => return deny(Check::Structure, format!("not an action: {e}")),
    };
    if let Err(e) = knox_types::action::check_tool_name(&act.tool) {
        return deny(Check::Structure, e.to_string());
    }
    let req = match Request::parse(&act.tool, &act.params) {
        Ok(r) => r,
        Err(e) => return deny(Check::Structure, e),
    };
    let (cost, impact) = match boundary(contract, &req) {
        Ok(c) => c,
        Err(d) => return d,
    };
    if state.actions >= contract.max_actions {
        return deny(
            Check::ActionCap,
            format!("the session's {} actions are used", contract.max_actions),
        );
    }
    let committed = state.spent_cents.saturating_add(state.reserved_cents);
    if committed.saturating_add(cost) > contract.budget_cents {
        return deny(
            Check::Budget,
            format!(
                "{committed} cents spent or reserved + {cost} > budget {}",
                contract.budget_cents
            ),
        );
    }
    let action_hash = act.hash();
    let mut allowed = Allowed {
        capability: req.capability().to_owned(),
        action_hash,
        cost_cents: cost,
        impact,
        approval_nonce: None,
    };
    if contract.approval_required.contains(&impact) {
        let Some(token) = approval else {
            return Decision::Pending(allowed);
        };
        let token: Approval = match serde_json::from_value(token.clone()) {
            Ok(t) => t,
            Err(e) => return deny(Check::Approval, format!("malformed approval token: {e}")),
        };
        if let Err(e) = approval::check(
            contract,
            contract_hash,
            &action_hash,
            &token,
            now_ms,
            &state.used_approvals,
        ) {
            return deny(Check::Approval, e.to_string());
        }
        allowed.approval_nonce = Some(token.nonce_hex());
    }
    Decision::Allow(allowed)
}

/// Like [`decide`], with the contract itself as untrusted JSON: a value that is not a
/// structurally valid contract is a denial (`structure`), never a panic. (For a
/// signed contract use [`crate::signed::verify`] first, then [`decide`].)
pub fn decide_json(
    contract: &Value,
    action: &Value,
    approval: Option<&Value>,
    state: &State,
    now_ms: u64,
) -> Decision {
    let c: Contract = match serde_json::from_value(contract.clone()) {
        Ok(c) => c,
        Err(e) => return deny(Check::Structure, format!("not a contract: {e}")),
    };
    if let Err(e) = c.validate() {
        return deny(Check::Structure, format!("invalid contract: {e}"));
    }
    decide(&c, &c.hash(), action, approval, state, now_ms)
}

/// Capability resolution and the path / argv / endpoint checks (no budget, cap or
/// approval: the executor re-checks the boundary with this before it acts); the
/// capability's cost and impact on success, the denial otherwise.
pub fn boundary(contract: &Contract, req: &Request) -> Result<(u64, Impact), Decision> {
    let no_cap = |kind: &str, id: &str| {
        deny(
            Check::Capability,
            format!(
                "no {kind} capability `{}`",
                id.chars().take(64).collect::<String>()
            ),
        )
    };
    match req {
        Request::Read(p) => {
            let d = contract
                .directories
                .get(&p.dir)
                .ok_or_else(|| no_cap("directory", &p.dir))?;
            check_path(&p.path)?;
            Ok((d.cost_cents, d.impact))
        }
        Request::Write(p) => {
            let d = contract
                .directories
                .get(&p.dir)
                .ok_or_else(|| no_cap("directory", &p.dir))?;
            if d.access != DirAccess::Write {
                return Err(deny(
                    Check::Capability,
                    format!("directory capability `{}` is read-only", p.dir),
                ));
            }
            check_path(&p.path)?;
            Ok((d.cost_cents, d.impact))
        }
        Request::Exec(p) => {
            let e = contract
                .executables
                .get(&p.exe)
                .ok_or_else(|| no_cap("executable", &p.exe))?;
            if !e.argv.iter().any(|t| argv_matches(t, &p.args)) {
                return Err(deny(
                    Check::Argv,
                    format!(
                        "arguments {:?} match none of `{}`'s {} templates",
                        p.args.iter().take(16).collect::<Vec<_>>(),
                        p.exe,
                        e.argv.len()
                    ),
                ));
            }
            Ok((e.cost_cents, e.impact))
        }
        Request::Http(p) => {
            let e = contract
                .endpoints
                .get(&p.endpoint)
                .ok_or_else(|| no_cap("endpoint", &p.endpoint))?;
            check_endpoint(e, p)?;
            Ok((e.cost_cents, e.impact))
        }
    }
}

/// An HTTP request against its endpoint capability `e`: the URL's scheme, host and
/// port are the endpoint's, its path under the endpoint's prefix, its method allowed.
fn check_endpoint(e: &EndpointCap, p: &HttpParams) -> Result<(), Decision> {
    let u = url::parse(&p.url).map_err(|e| deny(Check::Endpoint, e))?;
    if u.scheme != e.scheme || u.host != e.host || u.port != e.port {
        return Err(deny(
            Check::Endpoint,
            format!(
                "{}://{}:{} is not endpoint `{}` ({}://{}:{})",
                u.scheme.as_str(),
                u.host,
                u.port,
                p.endpoint,
                e.scheme.as_str(),
                e.host,
                e.port
            ),
        ));
    }
    if !url::under_prefix(&u.path, &e.path_prefix) {
        return Err(deny(
            Check::Endpoint,
            format!("path `{}` is not under `{}`", u.path, e.path_prefix),
        ));
    }
    if !e.methods.contains(&p.method) {
        return Err(deny(
            Check::Endpoint,
            format!("method `{}` is not allowed on `{}`", p.method, p.endpoint),
        ));
    }
    Ok(())
}

fn check_path(p: &str) -> Result<(), Decision> {
    if valid_relative(p) {
        Ok(())
    } else {
        Err(deny(
            Check::Path,
            format!(
                "`{}` is not a relative path without `.`/`..` components",
                p.chars().take(128).collect::<String>()
            ),
        ))
    }
}
