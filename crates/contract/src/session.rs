//! A contract session as the monitor runs it, and its hash-chained journal.
//!
//! Every proposal becomes a `decision` entry (the action and approval as submitted,
//! the time, the decision, and for an allowed action the reservation); every executed
//! or refused action a `settlement` entry. Entries are chained
//! (`c_i = H("knox/contract-entry", c_{i-1} ‖ canonical(entry_i))`) and the head is
//! signed by the monitor's key when the session ends. [`verify_journal`] recomputes
//! every decision from the recorded action, approval, time and the ledger rebuilt
//! from the entries before it, so a journal whose decisions do not follow from the
//! signed contract is refused; an unsealed journal (a crash) is accepted as a
//! *prefix*, its unsettled reservations still held.
//!
//! This is the contract's own record; the same decisions as AEG nodes of a Knox
//! bundle are the follow-up described in `docs/contracts.md`.

use knox_attest::TeeKey;
use knox_attest::grant::{self, GrantIssueError};
use knox_types::Action;
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::digest::Digest;
use knox_types::grant::Grant;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decide::{Decision, decide};
use crate::ledger::{Ledger, LedgerError, LedgerEvent};
use crate::signed::Verified;

/// Domain separation of journal chain steps.
pub const ENTRY_TAG: &str = "knox/contract-entry";
/// Domain separation of the seal signature.
pub const SEAL_CONTEXT: &[u8] = b"knox/contract-journal\0";

/// One journal entry.
#[expect(
    clippy::large_enum_variant,
    reason = "a journal holds few entries, each written once; the variants are its wire format"
)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case", deny_unknown_fields)]
pub enum Entry {
    /// A proposal and its decision.
    Decision {
        /// Position in the journal.
        seq: u64,
        /// When it was decided (Unix ms).
        at_ms: u64,
        /// The action as submitted.
        action: Value,
        /// The approval token as submitted.
        approval: Option<Value>,
        /// The decision.
        decision: Decision,
        /// The reservation, for an allowed action.
        reserved: Option<LedgerEvent>,
    },
    /// The outcome of an allowed action.
    Settlement {
        /// Position in the journal.
        seq: u64,
        /// When it settled.
        at_ms: u64,
        /// The ledger event.
        event: LedgerEvent,
        /// Why the executor refused, when it did (`executed: false`).
        refused: Option<String>,
    },
}

/// A journal: the entries and, once the session ended, the monitor's signature over
/// the chain head.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Journal {
    /// The contract's hash.
    pub contract_hash: Digest,
    /// Entries in order.
    pub entries: Vec<Entry>,
    /// The chain head over all entries.
    pub head: Digest,
    /// Ed25519 signature of the monitor over `SEAL_CONTEXT ‖ contract hash ‖ head`.
    pub seal: Option<HexBytes>,
}

/// What a proposal got.
#[derive(Debug, Clone)]
pub struct Proposed {
    /// The decision.
    pub decision: Decision,
    /// For an allowed action: its reservation id and the grant the executor needs.
    pub grant: Option<(u64, Grant)>,
}

/// The monitor's side of a contract session.
#[derive(Debug)]
pub struct ContractSession<'k> {
    verified: Verified,
    key: &'k TeeKey,
    ledger: Ledger,
    journal: Journal,
}

/// Why a session step failed (not a denial: denials are decisions).
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The grant could not be issued.
    #[error(transparent)]
    Grant(#[from] GrantIssueError),
    /// The ledger refused an event.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

fn step(prev: &Digest, e: &Entry) -> Digest {
    let bytes = knox_types::canon::to_canonical(e).unwrap_or_default();
    Digest::tagged(ENTRY_TAG, &[&prev.0, &bytes])
}

fn seal_message(contract: &Digest, head: &Digest) -> Vec<u8> {
    let mut m = contract.0.to_vec();
    m.extend_from_slice(&head.0);
    m
}

impl<'k> ContractSession<'k> {
    /// A session under `verified`, its grants and seal signed by `key`.
    pub fn new(verified: Verified, key: &'k TeeKey) -> Self {
        let journal = Journal {
            contract_hash: verified.hash,
            entries: Vec::new(),
            head: Digest::default(),
            seal: None,
        };
        Self {
            verified,
            key,
            ledger: Ledger::new(),
            journal,
        }
    }

    /// The contract.
    pub fn contract(&self) -> &Verified {
        &self.verified
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn push(&mut self, e: Entry) {
        self.journal.head = step(&self.journal.head, &e);
        self.journal.entries.push(e);
    }

    fn seq(&self) -> u64 {
        self.journal.entries.len() as u64
    }

    /// Decides `action` (any JSON) with an optional approval token, records the
    /// decision, and for an allowed action reserves its cost and issues the grant.
    pub fn propose(
        &mut self,
        action: &Value,
        approval: Option<&Value>,
        now_ms: u64,
    ) -> Result<Proposed, SessionError> {
        let c = &self.verified;
        let decision = decide(
            &c.contract,
            &c.hash,
            action,
            approval,
            self.ledger.state(),
            now_ms,
        );
        let mut grant_out = None;
        let mut reserved = None;
        if let Decision::Allow(a) = &decision
            && let Ok(act) = serde_json::from_value::<Action>(action.clone())
        {
            let ev = self.ledger.reserve(a);
            self.ledger.apply(&ev)?;
            let id = match &ev {
                LedgerEvent::Reserved { id, .. } => *id,
                LedgerEvent::Settled { id, .. } => *id,
            };
            let g = grant::issue(self.key, c.hash, &act, "agent", self.seq())?;
            grant_out = Some((id, g));
            reserved = Some(ev);
        }
        let seq = self.seq();
        self.push(Entry::Decision {
            seq,
            at_ms: now_ms,
            action: action.clone(),
            approval: approval.cloned(),
            decision: decision.clone(),
            reserved,
        });
        Ok(Proposed {
            decision,
            grant: grant_out,
        })
    }

    /// Records the outcome of reservation `id`.
    pub fn settle(
        &mut self,
        id: u64,
        refused: Option<String>,
        now_ms: u64,
    ) -> Result<(), SessionError> {
        let event = LedgerEvent::Settled {
            id,
            executed: refused.is_none(),
        };
        self.ledger.apply(&event)?;
        let seq = self.seq();
        self.push(Entry::Settlement {
            seq,
            at_ms: now_ms,
            event,
            refused,
        });
        Ok(())
    }

    /// The journal so far (unsealed: what a crash leaves).
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Ends the session: signs the chain head.
    pub fn seal(mut self) -> Journal {
        let m = seal_message(&self.journal.contract_hash, &self.journal.head);
        self.journal.seal = Some(self.key.sign(SEAL_CONTEXT, &m));
        self.journal
    }
}

/// What verifying a journal found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalReport {
    /// `complete` (sealed) or `prefix` (unsealed: the session did not end).
    pub status: &'static str,
    /// Entries checked.
    pub entries: usize,
    /// Decisions recomputed (all of them).
    pub decisions: usize,
    /// Allowed, pending and denied decisions.
    pub allowed: usize,
    /// Pending approvals.
    pub pending: usize,
    /// Denied.
    pub denied: usize,
    /// Reservations still held at the end.
    pub held: usize,
    /// Cents spent.
    pub spent_cents: u64,
}

/// Why a journal is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JournalError {
    /// The journal is for another contract.
    #[error("journal is for contract {0}, not the one given")]
    OtherContract(String),
    /// An entry is out of sequence.
    #[error("entry {0} is out of sequence")]
    Sequence(usize),
    /// A recorded decision is not the one the contract gives.
    #[error("entry {seq}: recorded decision differs from the recomputed one ({recomputed})")]
    Decision {
        /// The entry.
        seq: usize,
        /// The recomputed decision, as JSON.
        recomputed: String,
    },
    /// The recorded reservation is not the one the ledger gives.
    #[error("entry {0}: reservation differs from the ledger's")]
    Reservation(usize),
    /// The ledger refused an event.
    #[error("entry {seq}: {error}")]
    Ledger {
        /// The entry.
        seq: usize,
        /// The error.
        error: LedgerError,
    },
    /// The chain head does not match the entries.
    #[error("chain head does not match the entries")]
    Chain,
    /// The seal does not verify.
    #[error("the seal does not verify under the monitor's key")]
    Seal,
}

/// Verifies `journal` against the verified contract and the monitor's key:
/// recomputes every decision and the ledger, checks the chain and the seal.
pub fn verify_journal(
    journal: &Journal,
    contract: &Verified,
    monitor: &PublicKey,
) -> Result<JournalReport, JournalError> {
    if journal.contract_hash != contract.hash {
        return Err(JournalError::OtherContract(journal.contract_hash.to_hex()));
    }
    let mut ledger = Ledger::new();
    let mut head = Digest::default();
    let mut r = JournalReport {
        status: "prefix",
        entries: journal.entries.len(),
        decisions: 0,
        allowed: 0,
        pending: 0,
        denied: 0,
        held: 0,
        spent_cents: 0,
    };
    for (i, e) in journal.entries.iter().enumerate() {
        match e {
            Entry::Decision {
                seq,
                at_ms,
                action,
                approval,
                decision,
                reserved,
            } => {
                if *seq != i as u64 {
                    return Err(JournalError::Sequence(i));
                }
                let again = decide(
                    &contract.contract,
                    &contract.hash,
                    action,
                    approval.as_ref(),
                    ledger.state(),
                    *at_ms,
                );
                if &again != decision {
                    return Err(JournalError::Decision {
                        seq: i,
                        recomputed: serde_json::to_string(&again).unwrap_or_default(),
                    });
                }
                r.decisions += 1;
                match &again {
                    Decision::Allow(a) => {
                        r.allowed += 1;
                        let ev = ledger.reserve(a);
                        if reserved.as_ref() != Some(&ev) {
                            return Err(JournalError::Reservation(i));
                        }
                        ledger
                            .apply(&ev)
                            .map_err(|error| JournalError::Ledger { seq: i, error })?;
                    }
                    Decision::Pending(_) | Decision::Deny(_) => {
                        if matches!(again, Decision::Pending(_)) {
                            r.pending += 1;
                        } else {
                            r.denied += 1;
                        }
                        if reserved.is_some() {
                            return Err(JournalError::Reservation(i));
                        }
                    }
                }
            }
            Entry::Settlement { seq, event, .. } => {
                if *seq != i as u64 || !matches!(event, LedgerEvent::Settled { .. }) {
                    return Err(JournalError::Sequence(i));
                }
                ledger
                    .apply(event)
                    .map_err(|error| JournalError::Ledger { seq: i, error })?;
            }
        }
        head = step(&head, e);
    }
    if head != journal.head {
        return Err(JournalError::Chain);
    }
    if let Some(sig) = &journal.seal {
        let m = seal_message(&journal.contract_hash, &head);
        knox_attest::key::verify_signature(monitor, SEAL_CONTEXT, &m, sig)
            .map_err(|_| JournalError::Seal)?;
        r.status = "complete";
    }
    r.held = ledger.held().len();
    r.spent_cents = ledger.state().spent_cents;
    Ok(r)
}
