//! `knox-probe CASE [ARGS]`: makes one attack and prints `{case, ok, errno}` as one JSON line.
//!
//! Cases are rows of [`cases::CASES`]: a name, an argument synopsis and a function from the
//! arguments to a [`Res`]. Adding a corpus case is adding a row. `ok` means the
//! operation succeeded (the sandbox let it through); `errno` is the error it got.

mod cases;
mod sys;

use std::process::ExitCode;

/// Result of one case.
#[derive(Debug, Default)]
pub struct Res {
    ok: bool,
    errno: Option<i32>,
    detail: Option<String>,
}

impl Res {
    /// The operation succeeded.
    pub fn ok() -> Self {
        Self {
            ok: true,
            ..Self::default()
        }
    }

    /// The operation failed with `errno`.
    pub fn err(errno: i32) -> Self {
        Self {
            ok: false,
            errno: Some(errno),
            detail: None,
        }
    }

    /// From a raw system call result.
    pub fn sys(r: sys::Sys) -> Self {
        r.map_or_else(Self::err, |_| Self::ok())
    }

    /// From a std I/O result.
    pub fn io<T>(r: std::io::Result<T>) -> Self {
        match r {
            Ok(_) => Self::ok(),
            Err(e) => Self::err(e.raw_os_error().unwrap_or(-1)),
        }
    }

    /// Adds a detail string.
    #[must_use]
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

/// One row: name, synopsis, function.
pub type Case = (
    &'static str,
    &'static str,
    fn(&[String]) -> Result<Res, String>,
);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((name, rest)) = args.split_first() else {
        for (name, synopsis, _) in cases::CASES {
            println!("{name} {synopsis}");
        }
        return ExitCode::from(2);
    };
    let Some((_, synopsis, run)) = cases::CASES.iter().find(|(n, _, _)| n == name) else {
        eprintln!("unknown case `{name}`");
        return ExitCode::from(2);
    };
    match run(rest) {
        Ok(res) => {
            let line = serde_json::json!({"case": name, "ok": res.ok, "errno": res.errno, "detail": res.detail});
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(usage) => {
            eprintln!("usage: knox-probe {name} {synopsis}: {usage}");
            ExitCode::from(2)
        }
    }
}
