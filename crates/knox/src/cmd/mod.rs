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

/// Largest input file any command reads (evidence bundles are capped lower by the
/// verifier itself).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

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

/// What went wrong opening `p` for reading, and what to do about it.
fn open_error(p: &Path, e: &std::io::Error) -> anyhow::Error {
    let shown = p.display();
    match e.kind() {
        std::io::ErrorKind::NotFound => fail(
            Kind::NoInput,
            format!("`{shown}` does not exist: check the path"),
        ),
        std::io::ErrorKind::IsADirectory => fail(
            Kind::NoInput,
            format!("`{shown}` is a directory: name a file in it"),
        ),
        std::io::ErrorKind::PermissionDenied => fail(
            Kind::NoInput,
            format!("`{shown}` cannot be read: permission denied"),
        ),
        _ => fail(Kind::NoInput, format!("`{shown}` cannot be read: {e}")),
    }
}

/// Reads at most [`MAX_INPUT_BYTES`] from `r`, which is `p`.
fn read_capped(p: &Path, r: impl std::io::Read) -> Result<Vec<u8>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    r.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| open_error(p, &e))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(fail(
            Kind::DataErr,
            format!(
                "`{}` is larger than {MAX_INPUT_BYTES} bytes: not an input knox reads",
                p.display()
            ),
        ));
    }
    Ok(bytes)
}

/// Reads a file of at most [`MAX_INPUT_BYTES`], without first allocating for a larger
/// one. A failure names the file; its kind is "missing input" (66) or, for a file too
/// large, "bad input" (65).
pub fn read_input(p: &Path) -> Result<Vec<u8>> {
    let file = std::fs::File::open(p).map_err(|e| open_error(p, &e))?;
    read_capped(p, file)
}

/// [`read_input`], reading standard input for `-`.
pub fn read_input_or_stdin(p: &Path) -> Result<Vec<u8>> {
    if p.as_os_str() == "-" {
        return read_capped(Path::new("<stdin>"), std::io::stdin().lock());
    }
    read_input(p)
}

/// [`read_input`] as UTF-8 text.
pub fn read_text(p: &Path) -> Result<String> {
    String::from_utf8(read_input(p)?).map_err(|_| {
        fail(
            Kind::DataErr,
            format!("`{}` is not UTF-8 text", p.display()),
        )
    })
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

/// Writes the output file `p`; "cannot create output" (73) when that fails.
pub fn write_file(p: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(p, bytes).map_err(|e| {
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
