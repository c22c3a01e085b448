//! The file handling the commands share: every path argument is made absolute as it is
//! parsed ([`path`]), every input read and output written through the helpers below,
//! so a failure names the file, says what to do, and has a kind (hence an exit code)
//! once.
//!
//! The bounded read and the atomic write themselves are `knox_files`' (std only, so
//! the verifier links it); this module gives their failures a kind and an exit code.

use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use anyhow::Result;
pub use knox_files::{ReadError, WriteOptions, identity, read_capped, write_atomic_with};

use crate::error::{Kind, fail};

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
/// Configuration: `--needs`, `--policy`, `--regulation-context`.
pub const CONFIG: Cap = Cap {
    what: "--needs, --policy, --regulation-context",
    bytes: 1 << 20,
};
/// Toolkit manifests, tool definitions, plans, responses and task files (`knox verify
/// --manifest`, `knox toolkit`, `knox run --manifest/--plan/--responses/--tasks`).
pub const MANIFEST: Cap = Cap {
    what: "--manifest, toolkit manifests, --openai, --plan, --responses, --tasks",
    bytes: 16 << 20,
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
    what: "receipts, inclusion proofs (prove check), kept log checkpoints (log verify --from), quotes, GPU certificate chains",
    bytes: 1 << 20,
};
/// GPU evidence (`gpu verify --evidence`).
pub const GPU_EVIDENCE: Cap = Cap {
    what: "gpu verify --evidence",
    bytes: 16 << 20,
};

/// The clap value parser of every path argument: the path made absolute against the
/// current directory, once, as it is parsed — so a relative `--out` means the same in
/// a confined worker, a journal or a summary as on the command line.
pub fn path(s: &str) -> Result<PathBuf, String> {
    std::path::absolute(s).map_err(|e| format!("`{s}` is not a usable path: {e}"))
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
fn input_error(e: ReadError) -> anyhow::Error {
    match &e {
        ReadError::TooLarge(..) => fail(Kind::DataErr, e.to_string()),
        ReadError::Io(p, io) if io.kind() == io::ErrorKind::PermissionDenied => fail(
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
    read_capped(p, cap.bytes).map_err(input_error)
}

/// [`read_input`], reading standard input (at most `cap` bytes) for `-`.
pub fn read_input_or_stdin(p: &Path, cap: Cap) -> Result<Vec<u8>> {
    if p.as_os_str() != "-" {
        return read_input(p, cap);
    }
    let mut bytes = Vec::new();
    io::stdin()
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
    let id = identity(output);
    for input in inputs {
        let same = input == &output || id.is_some_and(|id| identity(input) == Some(id));
        if same {
            return Err(usage(format!(
                "{option} `{}` is an input of this command: writing it would overwrite what was read; choose another file",
                output.display()
            )));
        }
    }
    Ok(())
}

/// Refuses the output `p` when it is a file this process read as an input (by any
/// name), before any work is done: "cannot create output" (73), naming both. Every
/// write checks this again ([`knox_files::refuse_input`]); calling it early only spares
/// the work (a request to a server, a signature) whose result could not be written.
pub fn refuse_input_as_output(p: &Path) -> Result<()> {
    knox_files::refuse_input(p).map_err(|e| fail(Kind::CantCreate, e.to_string()))
}

/// Writes the output file `p` atomically (a temporary file in the same directory,
/// fsynced, renamed over `p`, the directory fsynced): `p` is the old file or the new
/// one, never empty or cut. "cannot create output" (73) when that fails.
pub fn write_file(p: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    write_atomic_with(p, bytes.as_ref(), WriteOptions::default()).map_err(|e| {
        fail(
            Kind::CantCreate,
            format!("cannot write `{}`: {e}", p.display()),
        )
    })
}

/// Writes the evidence file `p` (a bundle) atomically, as [`write_file`] does, but never
/// over an existing file: "cannot create output" (73) when `p` exists — evidence of an
/// earlier run is never replaced.
pub fn write_new(p: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    write_atomic_with(
        p,
        bytes.as_ref(),
        WriteOptions {
            create_new: true,
            ..WriteOptions::default()
        },
    )
    .map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AlreadyExists {
            "a file of that name exists, and evidence is never replaced".to_owned()
        } else {
            e.to_string()
        };
        fail(
            Kind::CantCreate,
            format!("cannot write `{}`: {why}", p.display()),
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

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_regular_files_within_their_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_capped(&p, 5).unwrap(), b"12345");
        assert!(matches!(read_capped(&p, 4), Err(ReadError::TooLarge(_, 4))));
        assert!(matches!(
            read_capped(d.path(), 5),
            Err(ReadError::NotRegular(_, "a directory"))
        ));
        let missing = d.path().join("missing");
        assert!(matches!(
            read_capped(&missing, 5),
            Err(ReadError::NotFound(_))
        ));
        // Kinds: too large is bad input (65), the others missing input (66).
        let kind = |e: anyhow::Error| crate::error::classify(&e);
        let too_large = Cap {
            what: "test",
            bytes: 4,
        };
        assert_eq!(kind(read_input(&p, too_large).unwrap_err()), Kind::DataErr);
        assert_eq!(
            kind(read_input(&missing, SMALL).unwrap_err()),
            Kind::NoInput
        );
        // A FIFO with no writer is refused at once, not waited on.
        let fifo = d.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            assert!(matches!(
                read_capped(&fifo, 5),
                Err(ReadError::NotRegular(_, "a FIFO (named pipe)"))
            ));
        }
    }

    #[test]
    fn outputs_replace_atomically_and_never_overwrite_an_input() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        write_file(&p, b"one").unwrap();
        write_file(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let opts = WriteOptions {
            mode: 0o600,
            create_new: true,
        };
        assert!(write_atomic_with(&p, b"three", opts).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        // No temporary file left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
        // The same file under another name is the same input.
        let link = d.path().join("link.json");
        std::fs::hard_link(&p, &link).unwrap();
        assert!(refuse_overwrite("--receipt", &link, &[&p]).is_err());
        assert!(refuse_overwrite("--receipt", &d.path().join("new.json"), &[&p]).is_ok());
    }
}
