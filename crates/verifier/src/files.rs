//! The file handling the commands share: every path argument is made absolute as it is
//! parsed ([`path`]), every input read and output written through the helpers below,
//! so a failure names the file, says what to do, and has a kind (hence an exit code)
//! once.
//!
//! The bounded read ([`read_capped`]) and atomic write ([`write_atomic_with`]) are the
//! same as `knox_monitor::files`, which the verifier may not link (it brings the
//! monitor).

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;

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

/// `O_NONBLOCK` on Linux: opening a FIFO with no writer returns at once instead of
/// waiting (the file is then refused as not a regular file).
const O_NONBLOCK: i32 = 0o4000;

/// Why an input file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// It does not exist.
    #[error("`{0}` does not exist: check the path")]
    NotFound(PathBuf),
    /// It is a directory, a FIFO, a device or a socket.
    #[error("`{0}` is {1}, not a regular file: name a file")]
    NotRegular(PathBuf, &'static str),
    /// It is larger than the cap for what it is.
    #[error("`{0}` is larger than {1} bytes, the most knox reads for this input")]
    TooLarge(PathBuf, u64),
    /// Opening or reading it failed.
    #[error("`{0}` cannot be read: {1}")]
    Io(PathBuf, io::Error),
}

/// What a file of type `t` is, in words, when it is not a regular file.
fn not_regular(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Reads the regular file `path`, of at most `cap` bytes. Never blocks on a FIFO (it is
/// opened non-blocking and refused), never reads more than `cap + 1` bytes, never
/// allocates for more than it read.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    let owned = || path.to_path_buf();
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound(owned()),
            _ => ReadError::Io(owned(), e),
        })?;
    let meta = file.metadata().map_err(|e| ReadError::Io(owned(), e))?;
    if let Some(what) = not_regular(meta.file_type()) {
        return Err(ReadError::NotRegular(owned(), what));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(cap)).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(owned(), e))?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge(owned(), cap));
    }
    Ok(bytes)
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

/// The identity (device, inode) of an existing file, for telling whether an output
/// would overwrite an input; `None` when `path` does not exist.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
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

/// A name for a temporary file beside `path`, unique in this process.
fn temporary(path: &Path) -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("the path names no file"))?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(path.with_file_name(tmp))
}

/// The directory holding `path`.
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Options of [`write_atomic_with`].
#[derive(Debug, Clone, Copy)]
pub struct WriteOptions {
    /// The file's mode (e.g. 0o600 for a private key).
    pub mode: u32,
    /// Refuse when `path` exists instead of replacing it.
    pub create_new: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self {
            mode: 0o644,
            create_new: false,
        }
    }
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory,
/// written, fsynced and renamed over `path` (or, with `create_new`, linked into place,
/// which fails if the name exists, even under a race); then the directory is fsynced.
pub fn write_atomic_with(path: &Path, bytes: &[u8], opts: WriteOptions) -> io::Result<()> {
    let tmp = temporary(path)?;
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(opts.mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        if opts.create_new {
            std::fs::hard_link(&tmp, path)?;
            std::fs::remove_file(&tmp)?;
        } else {
            std::fs::rename(&tmp, path)?;
        }
        File::open(parent(path))?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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
