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

pub mod cmd;
pub mod error;
pub mod fuzz;
pub mod session;
pub mod signals;
