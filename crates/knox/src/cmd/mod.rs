//! The `knox` subcommands.

pub mod bench;
pub mod demo;
pub mod run;
pub mod verify;
