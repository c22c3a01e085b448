//! The `knox` subcommands.

pub mod bench;
pub mod corpus;
pub mod demo;
pub mod hardware;
pub mod keys;
pub mod prove;
pub mod receipts;
pub mod run;
pub mod verify;
