#![doc = include_str!("../README.md")]

/// `println!` that ends quietly when standard output is closed (`knox … | head`)
/// instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// `print!` that ignores a closed standard output.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

pub mod cli;
pub mod error;
pub mod files;
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
