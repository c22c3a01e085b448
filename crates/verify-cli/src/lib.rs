#![doc = include_str!("../README.md")]

// The conventions every Knox command shares (exit codes, file handling, output):
// `knox-command`'s, re-exported where the verifier's commands and the CLI have always
// found them.
pub use knox_command::{cli, error, exit_codes, files, out, outln};

pub mod hardware;
pub mod keys;
pub mod prove;
pub mod receipts;
pub mod regulations;
pub mod verify;

/// `--version` of `knox` and `knox-verify`: the package version and the commit it was
/// built from (`unknown` when built outside a git checkout, e.g. from a tarball).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KNOX_COMMIT"),
    ")"
);
