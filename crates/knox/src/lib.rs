#![doc = include_str!("../README.md")]

/// `println!` and `print!` that ignore a closed standard output, and the exit-code
/// table of a command's `--help`: shared with `knox-verify`.
pub use knox_command::{exit_codes, out, outln};

pub mod cmd;
pub mod error;
/// The glue of commands that run the embedded suites: `knox_eval::cli::session`.
pub use knox_eval::cli::session;
pub mod signals;
