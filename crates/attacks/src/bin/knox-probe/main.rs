//! `knox-probe CASE [ARGS]`: makes one attack and prints `{case, ok, errno, detail}` as one JSON line.
//!
//! Cases are rows of the tables in [`cases`]: a name, an argument synopsis and a
//! function from the arguments to a [`Res`]. Adding a corpus case is adding a row.
//! `ok` means the operation succeeded (the sandbox let it through); `errno` is the
//! error it got.
//!
//! Two more modes:
//! - `knox-probe worker`: a confined worker ([`knox_sandbox::Worker`]); each
//!   request frame is a JSON array `["CASE", "ARG", ...]`, run in-process, and
//!   each response frame is the JSON object the one-shot mode prints.
//! - `knox-probe victim SECRET`: the attack corpus's victim process; keeps SECRET
//!   in memory, prints `ADDRESS LENGTH` of it, then echoes each line of its input
//!   (the fixture's barrier for signals on their way) until its input closes.

mod cases;
mod sys;

use std::io::{BufRead as _, Write as _};
use std::process::ExitCode;

use knox_sandbox::frame;

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

/// Runs case `name`; the JSON line, or the usage error.
fn run(name: &str, args: &[String]) -> Result<serde_json::Value, String> {
    let (_, synopsis, f) = cases::find(name).ok_or_else(|| format!("unknown case `{name}`"))?;
    let res = f(args).map_err(|usage| format!("usage: knox-probe {name} {synopsis}: {usage}"))?;
    Ok(serde_json::json!({"case": name, "ok": res.ok, "errno": res.errno, "detail": res.detail}))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((mode, _)) if mode == "worker" => worker(),
        Some((mode, rest)) if mode == "victim" => victim(rest),
        Some((name, rest)) => match run(name, rest) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        None => {
            for (name, synopsis, _) in cases::tables().into_iter().flatten() {
                println!("{name} {synopsis}");
            }
            ExitCode::from(2)
        }
    }
}

/// Serves request frames until standard input closes.
fn worker() -> ExitCode {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    loop {
        let request = match frame::read_frame(&mut input) {
            Ok(Some(request)) => request,
            Ok(None) => return ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("worker: {e}");
                return ExitCode::from(2);
            }
        };
        let reply = match serde_json::from_slice::<Vec<String>>(&request) {
            Ok(argv) => match argv.split_first() {
                Some((name, rest)) => {
                    run(name, rest).unwrap_or_else(|e| serde_json::json!({"error": e}))
                }
                None => serde_json::json!({"error": "empty request"}),
            },
            Err(e) => {
                serde_json::json!({"error": format!("request is not a JSON array of strings: {e}")})
            }
        };
        if let Err(e) = frame::write_frame(&mut output, reply.to_string().as_bytes()) {
            eprintln!("worker: {e}");
            return ExitCode::from(2);
        }
    }
}

/// Holds SECRET at a stable address, reports it, and waits for end of input.
fn victim(args: &[String]) -> ExitCode {
    let secret: &'static mut [u8] =
        Vec::leak(args.first().cloned().unwrap_or_default().into_bytes());
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{} {}", secret.as_ptr() as usize, secret.len())
        .and_then(|()| out.flush())
        .is_err()
    {
        return ExitCode::from(2);
    }
    // Each line comes back: the fixture's barrier (a signal sent before it has been
    // delivered by the time the echo is written).
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    // Keep the secret alive (and observable) until the end.
    std::hint::black_box(&secret);
    ExitCode::SUCCESS
}
