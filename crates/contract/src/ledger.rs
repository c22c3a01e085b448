//! The session's budget ledger: reservations at authorization, settlements after
//! execution. Each event is what the monitor records (as an AEG node), so replaying
//! a journal's events rebuilds the ledger: a crash between a reservation and its
//! settlement leaves the reservation held, never released, so a restarted session
//! cannot spend it twice.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decide::{Allowed, State};

/// One ledger event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum LedgerEvent {
    /// An action was authorized: its cost is held.
    Reserved {
        /// Reservation number, increasing from 0.
        id: u64,
        /// The capability.
        capability: String,
        /// Cents held.
        cost_cents: u64,
        /// The approval nonce consumed, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_nonce: Option<String>,
    },
    /// The action ran (`executed`: its cost is spent) or was refused at execution
    /// (the hold is released; the action still counts against the cap).
    Settled {
        /// The reservation.
        id: u64,
        /// Whether the action ran.
        executed: bool,
    },
}

/// Why an event does not apply.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LedgerError {
    /// A reservation number out of order.
    #[error("reservation {got} out of order (expected {expected})")]
    Order {
        /// Found.
        got: u64,
        /// Expected.
        expected: u64,
    },
    /// Settling a reservation that is not held.
    #[error("reservation {0} is not held")]
    NotHeld(u64),
    /// An approval nonce used twice.
    #[error("approval nonce {0} used twice")]
    ApprovalReused(String),
}

/// The ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    state: State,
    held: BTreeMap<u64, u64>,
    next: u64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the decision function needs.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The number the next reservation gets.
    pub fn next_id(&self) -> u64 {
        self.next
    }

    /// Reservations not settled.
    pub fn held(&self) -> &BTreeMap<u64, u64> {
        &self.held
    }

    /// The event reserving an allowed action; apply it (after recording it).
    pub fn reserve(&self, a: &Allowed) -> LedgerEvent {
        LedgerEvent::Reserved {
            id: self.next,
            capability: a.capability.clone(),
            cost_cents: a.cost_cents,
            approval_nonce: a.approval_nonce.clone(),
        }
    }

    /// Applies one event.
    pub fn apply(&mut self, e: &LedgerEvent) -> Result<(), LedgerError> {
        match e {
            LedgerEvent::Reserved {
                id,
                cost_cents,
                approval_nonce,
                ..
            } => {
                if *id != self.next {
                    return Err(LedgerError::Order {
                        got: *id,
                        expected: self.next,
                    });
                }
                if let Some(n) = approval_nonce
                    && !self.state.used_approvals.insert(n.clone())
                {
                    return Err(LedgerError::ApprovalReused(n.clone()));
                }
                self.next = self.next.saturating_add(1);
                self.held.insert(*id, *cost_cents);
                self.state.reserved_cents = self.state.reserved_cents.saturating_add(*cost_cents);
                self.state.actions = self.state.actions.saturating_add(1);
            }
            LedgerEvent::Settled { id, executed } => {
                let cost = self.held.remove(id).ok_or(LedgerError::NotHeld(*id))?;
                self.state.reserved_cents = self.state.reserved_cents.saturating_sub(cost);
                if *executed {
                    self.state.spent_cents = self.state.spent_cents.saturating_add(cost);
                }
            }
        }
        Ok(())
    }

    /// Rebuilds a ledger from recorded events (a journal's prefix after a crash).
    pub fn replay<'a>(
        events: impl IntoIterator<Item = &'a LedgerEvent>,
    ) -> Result<Self, LedgerError> {
        let mut l = Self::new();
        for e in events {
            l.apply(e)?;
        }
        Ok(l)
    }
}
