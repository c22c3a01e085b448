#![doc = include_str!("../README.md")]

pub mod action;
pub mod approval;
pub mod decide;
pub mod example;
pub mod format;
pub mod fuzz;
pub mod ledger;
pub mod session;
pub mod signed;
pub mod url;

pub use action::{Request, TOOL_EXEC, TOOL_HTTP, TOOL_READ, TOOL_WRITE};
pub use approval::{Approval, ApprovalBody, ApprovalError};
pub use decide::{Allowed, Check, Decision, Denial, State, decide, decide_json};
pub use format::{
    ArgPattern, Contract, ContractError, DirAccess, DirectoryCap, EndpointCap, ExecutableCap, Hole,
    Impact, Scheme,
};
pub use ledger::{Ledger, LedgerError, LedgerEvent};
pub use signed::{SignedError, Verified};
