//! The `knox` subcommands, and the file handling they share: every path argument is
//! made absolute as it is parsed ([`path`]), every input read and output written
//! through the helpers below, so a failure names the file, says what to do, and has a
//! kind (hence an exit code) once.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Kind, fail};

pub mod bench;
pub mod corpus;
pub mod demo;
pub mod eval;
pub mod hardware;
pub mod keys;
pub mod model;
pub mod prove;
pub mod receipts;
pub mod regulations;
pub mod run;
pub mod verify;

/// What an input file is, and the most bytes knox reads of it: every file input of
/// every command is read through [`read_input`] with one of these, so none can grow
/// without bound (`/dev/zero`) or block (a FIFO with no writer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    /// The inputs it covers, for the table in `--help` and the README.
    pub what: &'static str,
    /// The most bytes read.
    pub bytes: u64,
}

/// Evidence: bundles, journals (`verify`, `receipts`, `prove node`, `regulations
/// analyze`, standard input) — the verifier's own limit.
pub const EVIDENCE: Cap = Cap {
    what: "evidence bundles and journals (verify, receipts, prove node, regulations analyze; stdin)",
    bytes: knox_types::bundle::MAX_BUNDLE_BYTES as u64,
};
/// `eval --pool`.
pub const POOL: Cap = Cap {
    what: "eval --pool",
    bytes: knox_eval::pool::MAX_POOL_BYTES,
};
/// Configuration: `--needs`, `--policy`, `--regulation-context`.
pub const CONFIG: Cap = Cap {
    what: "--needs, --policy, --regulation-context",
    bytes: 1 << 20,
};
/// A regulator's private key (`--key`).
pub const KEY: Cap = Cap {
    what: "--key",
    bytes: 64 << 10,
};
/// Intel collateral (`--collateral`).
pub const COLLATERAL: Cap = Cap {
    what: "--collateral",
    bytes: 16 << 20,
};
/// Verification receipts, inclusion proofs, quotes, certificate chains.
pub const SMALL: Cap = Cap {
    what: "receipts, inclusion proofs (prove check), quotes, GPU certificate chains",
    bytes: 1 << 20,
};
/// GPU evidence (`gpu verify --evidence`).
pub const GPU_EVIDENCE: Cap = Cap {
    what: "gpu verify --evidence",
    bytes: 16 << 20,
};

/// Every cap, for documentation.
pub const CAPS: [Cap; 7] = [EVIDENCE, POOL, CONFIG, KEY, COLLATERAL, SMALL, GPU_EVIDENCE];

/// The clap value parser of every path argument: the path made absolute against the
/// current directory, once, as it is parsed — so a relative `--out` means the same in
/// a confined worker, a journal or a summary as on the command line.
pub fn path(s: &str) -> Result<PathBuf, String> {
    std::path::absolute(s).map_err(|e| format!("`{s}` is not a usable path: {e}"))
}

/// `--cache-dir` made absolute (it is declared in `model.rs`, without [`path`]).
pub fn absolute_cache_dir(p: Option<&Path>) -> Result<Option<PathBuf>> {
    p.map(std::path::absolute)
        .transpose()
        .map_err(|e| usage(format!("--cache-dir: {e}")))
}

/// [`path`], except that `-` (standard input) stays `-`.
pub fn path_or_stdin(s: &str) -> Result<PathBuf, String> {
    if s == "-" {
        return Ok(PathBuf::from("-"));
    }
    path(s)
}

/// A failure to read the input `p` as "missing input" (66: absent, unreadable, not a
/// regular file) or "bad input" (65: larger than its cap), naming the file.
fn input_error(e: knox_monitor::files::ReadError) -> anyhow::Error {
    use knox_monitor::files::ReadError;
    match &e {
        ReadError::TooLarge(..) => fail(Kind::DataErr, e.to_string()),
        ReadError::Io(p, io) if io.kind() == std::io::ErrorKind::PermissionDenied => fail(
            Kind::NoInput,
            format!("`{}` cannot be read: permission denied", p.display()),
        ),
        _ => fail(Kind::NoInput, e.to_string()),
    }
}

/// Reads the input file `p`, a regular file of at most `cap` bytes (a FIFO, device or
/// directory is refused at once, without reading). A failure names the file; its kind
/// is "missing input" (66) or, for a file too large, "bad input" (65).
pub fn read_input(p: &Path, cap: Cap) -> Result<Vec<u8>> {
    knox_monitor::files::read_capped(p, cap.bytes).map_err(input_error)
}

/// [`read_input`], reading standard input (at most `cap` bytes) for `-`.
pub fn read_input_or_stdin(p: &Path, cap: Cap) -> Result<Vec<u8>> {
    use std::io::Read as _;
    if p.as_os_str() != "-" {
        return read_input(p, cap);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(cap.bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Kind::IoErr, format!("reading standard input: {e}")))?;
    if bytes.len() as u64 > cap.bytes {
        return Err(fail(
            Kind::DataErr,
            format!(
                "standard input is larger than {} bytes, the most knox reads for this input",
                cap.bytes
            ),
        ));
    }
    Ok(bytes)
}

/// [`read_input`] as UTF-8 text.
pub fn read_text(p: &Path, cap: Cap) -> Result<String> {
    String::from_utf8(read_input(p, cap)?).map_err(|_| {
        fail(
            Kind::DataErr,
            format!("`{}` is not UTF-8 text", p.display()),
        )
    })
}

/// Refuses `output` (named by `option`) when it is one of `inputs` (the same path, or
/// the same file through another name): writing it would destroy what was read.
/// "usage" (64).
pub fn refuse_overwrite(option: &str, output: &Path, inputs: &[&Path]) -> Result<()> {
    let id = knox_monitor::files::identity(output);
    for input in inputs {
        let same = input == &output
            || id.is_some_and(|id| knox_monitor::files::identity(input) == Some(id));
        if same {
            return Err(usage(format!(
                "{option} `{}` is an input of this command: writing it would overwrite what was read; choose another file",
                output.display()
            )));
        }
    }
    Ok(())
}

/// Takes the output directory `p` of a command for the whole command: created if
/// needed, locked (a second knox process writing into it is refused), and, unless
/// `force`, refused when it already holds files. "cannot create output" (73).
pub fn out_dir(p: &Path, force: bool) -> Result<knox_monitor::files::OutDir> {
    knox_monitor::files::OutDir::lock(p, force).map_err(|e| fail(Kind::CantCreate, e.to_string()))
}

/// Creates the output directory `p` (and its parents); "cannot create output" (73)
/// when that fails.
pub fn create_dir(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p).map_err(|e| {
        fail(
            Kind::CantCreate,
            format!("cannot create the output directory `{}`: {e}", p.display()),
        )
    })
}

/// Writes the output file `p` atomically (a temporary file in the same directory,
/// fsynced, renamed over `p`, the directory fsynced): `p` is the old file or the new
/// one, never empty or cut. "cannot create output" (73) when that fails.
pub fn write_file(p: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    knox_monitor::files::write_atomic(p, bytes.as_ref()).map_err(|e| {
        fail(
            Kind::CantCreate,
            format!("cannot write `{}`: {e}", p.display()),
        )
    })
}

/// `e`, a failure to parse the input file `p`, as "bad input" (65) naming the file.
pub fn bad_input(p: &Path, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
    fail(
        Kind::DataErr,
        format!("`{}` is not {what}: {e}", p.display()),
    )
}

/// A command-line mistake found after parsing (conflicting options): "usage" (64).
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    fail(Kind::Usage, message)
}

/// A progress bar of `total` steps on standard error, labelled `msg`: drawn only when
/// standard error is a terminal (indicatif hides it otherwise), so piped and `--json`
/// output stay clean.
pub fn progress_bar(total: u64, msg: &str) -> indicatif::ProgressBar {
    let pb = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} (eta {eta})",
    ) {
        pb.set_style(style);
    }
    pb.set_message(msg.to_owned());
    pb
}
