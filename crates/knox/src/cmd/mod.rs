//! The `knox` subcommands, and the file handling they share: every path argument is
//! made absolute as it is parsed ([`path`]), every input read and output written
//! through the helpers below, so a failure names the file, says what to do, and has a
//! kind (hence an exit code) once. The helpers the verifier's commands need too are
//! `knox_verifier::files`, re-exported here; the verifier's commands themselves
//! (`verify`, `receipts`, `prove`, `quote`/`gpu verify`, `regulations show`, `keygen`)
//! are `knox_verifier`'s, shared with `knox-verify`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Kind, fail};

pub mod bench;
pub mod contract;
pub mod corpus;
pub mod demo;
pub mod eval;
pub mod gateway;
pub mod hardware;
pub mod keys;
pub mod log;
pub mod mcp;
pub mod model;
pub mod prompt;
pub mod prove;
pub mod receipts;
pub mod regulations;
pub mod run;
pub mod serve;
pub mod serve_model;
pub mod toolkit;
pub mod verify;

pub use knox_verifier::files::{
    COLLATERAL, CONFIG, Cap, EVIDENCE, GPU_EVIDENCE, KEY, MANIFEST, SMALL, bad_input, path,
    path_or_stdin, read_input, read_input_or_stdin, read_text, refuse_overwrite, usage, write_file,
    write_new,
};

/// `eval --pool`.
pub const POOL: Cap = Cap {
    what: "eval --pool",
    bytes: knox_eval::pool::MAX_POOL_BYTES,
};
/// Every cap, for documentation.
pub const CAPS: [Cap; 8] = [
    EVIDENCE,
    POOL,
    CONFIG,
    KEY,
    COLLATERAL,
    SMALL,
    GPU_EVIDENCE,
    MANIFEST,
];

/// `--cache-dir` made absolute (it is declared in `model.rs`, without [`path`]).
pub fn absolute_cache_dir(p: Option<&Path>) -> Result<Option<PathBuf>> {
    p.map(std::path::absolute)
        .transpose()
        .map_err(|e| usage(format!("--cache-dir: {e}")))
}

/// A failed engine run as a failure of its kind: a bundle that could not be written
/// (an output over an input, a full disk) is "cannot create output" (73), saying why;
/// anything else is internal (70).
pub fn engine_failure(e: knox_engine::EngineError) -> anyhow::Error {
    match &e {
        knox_engine::EngineError::Output { path, source } => fail(
            Kind::CantCreate,
            format!("cannot write `{}`: {source}", path.display()),
        ),
        _ => fail(Kind::Software, e.to_string()),
    }
}

/// Takes the output directory `p` of a command for the whole command: created if
/// needed, locked (a second knox process writing into it is refused), and, unless
/// `force`, refused when it already holds files — with `force` still refused when it
/// holds evidence, which is never replaced. "cannot create output" (73).
pub fn out_dir(p: &Path, force: bool) -> Result<knox_files::OutDir> {
    knox_files::OutDir::lock(p, force).map_err(|e| fail(Kind::CantCreate, e.to_string()))
}

/// Takes the evidence folder `p` of a gateway: created if needed, locked as
/// [`out_dir`] does, accepted whatever it holds (its runs never collide with earlier
/// ones, and nothing in it is replaced). "cannot create output" (73).
pub fn evidence_dir(p: &Path) -> Result<knox_files::OutDir> {
    knox_files::OutDir::accumulate(p).map_err(|e| fail(Kind::CantCreate, e.to_string()))
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
