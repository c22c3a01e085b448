//! What every Knox command shares, whichever crate owns the command (`knox-verify`'s
//! commands in `knox-verify-cli`, the store's in `knox_server::cli`, the CLI's own):
//!
//! - [`error`]: every failure classified once into a kind, the kind mapped to the exit
//!   status (the BSD `sysexits.h` numbers) and, under `--json`, to a JSON error object;
//!   [`exit_codes!`] writes the table for a command's `--help`.
//! - [`files`]: every path argument made absolute as it is parsed, every input read
//!   with a cap and every output written atomically, so a failure names the file and
//!   says what to do.
//! - [`cli`]: parsing, the JSON failure line and the exit status of a command's result.
//! - [`outln!`] and [`out!`]: printing that ends quietly when standard output is closed.

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
