//! The `knox` subcommands, and the file handling they share: every path argument is
//! made absolute as it is parsed ([`path`]), every input read and output written
//! through the helpers below, so a failure names the file, says what to do, and has a
//! kind (hence an exit code) once. The helpers are every command's,
//! `knox_command::files`, re-exported here; the verifier's commands themselves
//! (`verify`, `receipts`, `prove`, `quote`/`gpu verify`, `regulations show`, `keygen`)
//! are `knox_verify_cli`'s, shared with `knox-verify`.

use crate::error::{Kind, fail};

pub mod demo;
pub mod gateway;
pub mod hardware;
pub mod keys;
pub mod prompt;
pub mod prove;
pub mod receipts;
pub mod run;
pub mod serve_model;
/// `knox bench`, `knox contract`, `knox corpus`, `knox eval`, `knox regulations`:
/// `knox_eval::cli`.
pub use knox_eval::cli::{bench, contract, corpus, eval, regulations};
/// `knox mcp import` and the `--mcp` tool host: `knox_mcp::cli`.
pub use knox_mcp::cli as mcp;
/// `knox toolkit`: `knox_mcp::cli::toolkit`.
pub use knox_mcp::cli::toolkit;
/// `knox model` and the `--planner`/`--executor`/`--judge` choices: `knox_models::cli`.
pub use knox_models::cli as model;
/// `knox serve`, `submit`, `login`, `report`, `log` and live streams: `knox_server::cli`.
pub use knox_server::cli as serve;
/// `knox log`: `knox_server::cli::log`.
pub use knox_server::cli::log;
pub mod verify;

pub use knox_command::files::{
    COLLATERAL, CONFIG, Cap, EVIDENCE, GPU_EVIDENCE, KEY, MANIFEST, SMALL, bad_input, create_dir,
    evidence_dir, out_dir, path, path_or_stdin, read_input, read_input_or_stdin, read_text,
    refuse_overwrite, usage, write_file, write_new,
};

pub use knox_eval::cli::{POOL, progress_bar};
pub use knox_models::cli::absolute_cache_dir;
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

/// Announces `rt`'s in-TEE key and writes the announcement to
/// `<out>/key-<first 16 hex of its key id>.announcement.json` (a fresh key's: no earlier
/// file has its name); its bytes, to submit.
pub fn write_announcement(
    rt: &knox_monitor::run::Runtime,
    out: &std::path::Path,
) -> anyhow::Result<Vec<u8>> {
    knox_server::cli::announcement_file(&crate::session::announcement(rt)?, out)
}
