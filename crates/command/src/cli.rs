//! What `knox` and `knox-verify` share around their commands: parsing the command line
//! (a usage error is exit 64 and, under `--json`, a JSON error object on standard
//! output) and turning a command's result into the process exit status.

use std::process::ExitCode;

use crate::error::{self, Kind};

/// Parses the command line into `C`. `--help` and `--version` print and end with
/// success; a wrong command line prints why and ends with "usage" (64) — under
/// `--json`, also as a JSON error object on standard output.
pub fn parse<C: clap::Parser>() -> Result<C, ExitCode> {
    C::try_parse().map_err(|e| {
        if !e.use_stderr() {
            // --help, --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        if std::env::args().any(|a| a == "--json") {
            let message = e.render().to_string();
            let first = message.lines().next().unwrap_or_default();
            crate::outln!(
                "{}",
                error::json(Kind::Usage, first.trim_start_matches("error: "))
            );
        }
        let _ = e.print();
        ExitCode::from(Kind::Usage.code())
    })
}

/// Reports a failure of `kind` (under `--json`, also as a JSON object on stdout) and
/// returns its exit status.
pub fn failed(kind: Kind, message: &str, json: bool) -> ExitCode {
    if json {
        crate::outln!("{}", error::json(kind, message));
    }
    eprintln!("error: {message}");
    ExitCode::from(kind.code())
}

/// The exit status of a command's `result`: its own code, or its failure reported
/// (under `--json` as a JSON object) with the failure's kind's code.
pub fn finish(result: anyhow::Result<i32>, json: bool) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => failed(error::classify(&e), &format!("{e:#}"), json),
    }
}

/// Writes `bytes` to standard output, ignoring a closed pipe.
pub fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(error::fail(
            Kind::IoErr,
            format!("writing to standard output: {e}"),
        )),
        _ => Ok(()),
    }
}
