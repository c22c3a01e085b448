#![doc = include_str!("../README.md")]

use std::fs::{File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// `O_NONBLOCK` on Linux: opening a FIFO with no writer returns at once instead of
/// waiting (the file is then refused as not a regular file).
const O_NONBLOCK: i32 = 0o4000;

/// Name of the lock file [`OutDir::lock`] keeps in an output directory.
pub const LOCK_FILE: &str = ".knox.lock";

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

/// Every file this process has read as an input through [`read_capped`], by identity
/// (device, inode) with the name it was read by. No write through this crate replaces
/// one of them ([`refuse_input`]): an output never destroys an input, whichever command
/// and option named it (`report --key K --out K`, `contract sign C --out C`, a
/// `run --force` whose `--out` holds its own manifest under an output's name).
static INPUTS: Mutex<Vec<Input>> = Mutex::new(Vec::new());

/// An input read: its identity, and its birth time where the file system keeps one (so
/// an inode freed by a deleted input and reused for a new file is not taken for it).
struct Input {
    id: (u64, u64),
    born: Option<std::time::SystemTime>,
    path: PathBuf,
}

impl Input {
    fn is(&self, meta: &std::fs::Metadata) -> bool {
        self.id == (meta.dev(), meta.ino())
            && match (self.born, meta.created().ok()) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

fn note_input(meta: &std::fs::Metadata, path: &Path) {
    let mut inputs = INPUTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !inputs.iter().any(|i| i.is(meta)) {
        inputs.push(Input {
            id: (meta.dev(), meta.ino()),
            born: meta.created().ok(),
            path: path.to_path_buf(),
        });
    }
}

/// Refuses to write `path` when it exists and is a file this process read as an input
/// (the same file by any name: a hard link or symbolic link included). Every write of
/// this crate calls it; the error names both paths.
pub fn refuse_input(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let inputs = INPUTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match inputs.iter().find(|i| i.is(&meta)) {
        None => Ok(()),
        Some(i) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "`{}` is an input of this command (read as `{}`): an output never overwrites an input; choose another output",
                path.display(),
                i.path.display()
            ),
        )),
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
    note_input(&meta, path);
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(cap)).unwrap_or(0));
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| ReadError::Io(owned(), e))?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge(owned(), cap));
    }
    Ok(bytes)
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

/// Fsyncs the directory `dir`, so a rename or creation in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
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
/// written, fsynced and renamed over `path`; then the directory is fsynced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, bytes, WriteOptions::default())
}

/// [`write_atomic`] with a mode, and optionally refusing an existing `path` (then the
/// file is linked into place, which fails if the name exists, even under a race).
/// Refused when `path` is an input this process read ([`refuse_input`]).
pub fn write_atomic_with(path: &Path, bytes: &[u8], opts: WriteOptions) -> io::Result<()> {
    refuse_input(path)?;
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
        sync_dir(parent(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Creates the append-only file `path` (opened `O_APPEND`) holding `header` already
/// written and fsynced: it is written under a temporary name and linked into place, so
/// `path` never exists empty or with a partial header. An existing `path` is never
/// replaced (a journal is evidence): the call fails with `AlreadyExists`.
pub fn create_with_header(path: &Path, header: &[u8]) -> io::Result<File> {
    refuse_input(path)?;
    let tmp = temporary(path)?;
    let result = (|| {
        let mut f = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(header)?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)?;
        std::fs::remove_file(&tmp)?;
        sync_dir(parent(path))?;
        Ok(f)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Why an output directory was not taken.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// Another process holds its lock.
    #[error(
        "`{0}` is in use by another knox process (it holds `{LOCK_FILE}` there): wait for it to finish or choose another --out"
    )]
    Busy(PathBuf),
    /// It holds files and `--force` was not given.
    #[error(
        "`{0}` is not empty: choose a new or empty --out, or add --force to write into it (other files of an output's name are replaced; evidence never is)"
    )]
    NotEmpty(PathBuf),
    /// `--force` was given, but it holds sealed evidence, which is never replaced.
    #[error(
        "`{0}` holds evidence (`{1}`), which --force never replaces: choose a new or empty --out, or move the evidence elsewhere"
    )]
    HoldsEvidence(PathBuf, String),
    /// It exists and is not a directory.
    #[error("`{0}` exists and is not a directory")]
    NotADirectory(PathBuf),
    /// It cannot be created, locked or listed.
    #[error("cannot use the output directory `{0}`: {1}")]
    Io(PathBuf, io::Error),
}

/// An output directory held by this process: an exclusive `flock` on its
/// [`LOCK_FILE`], released when this value is dropped (or the process ends, however).
#[derive(Debug)]
pub struct OutDir {
    path: PathBuf,
    _lock: File,
}

impl OutDir {
    /// Creates `dir` (and its parents) if needed and locks it; refuses it when another
    /// process holds it, and, unless `force`, when it holds any file (the lock file
    /// aside). With `force` it is still refused when it holds evidence
    /// ([`evidence_in`]): `--force` never destroys evidence.
    pub fn lock(dir: &Path, force: bool) -> Result<Self, OutDirError> {
        let held = Self::take(dir, force)?;
        if force && let Some(name) = evidence_in(dir) {
            return Err(OutDirError::HoldsEvidence(dir.to_path_buf(), name));
        }
        Ok(held)
    }

    /// An evidence folder that accumulates: created if needed and locked as
    /// [`OutDir::lock`] does, but accepted whatever it holds — what is written there
    /// never replaces a file (bundles and journals are created new, under run ids unique
    /// to their key), so a gateway launched again into the same folder adds its
    /// sessions beside the earlier ones.
    pub fn accumulate(dir: &Path) -> Result<Self, OutDirError> {
        Self::take(dir, true)
    }

    fn take(dir: &Path, force: bool) -> Result<Self, OutDirError> {
        let owned = || dir.to_path_buf();
        if dir.exists() && !dir.is_dir() {
            return Err(OutDirError::NotADirectory(owned()));
        }
        // Checked before the lock file is made (a refused folder is left as it was) and
        // again once locked (another process may have written meanwhile).
        let holds_files = || -> Result<bool, OutDirError> {
            match std::fs::read_dir(dir) {
                Ok(mut entries) => {
                    Ok(entries.any(|e| e.map_or(true, |e| e.file_name() != LOCK_FILE)))
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(OutDirError::Io(owned(), e)),
            }
        };
        if !force && holds_files()? {
            return Err(OutDirError::NotEmpty(owned()));
        }
        std::fs::create_dir_all(dir).map_err(|e| OutDirError::Io(owned(), e))?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(dir.join(LOCK_FILE))
            .map_err(|e| OutDirError::Io(owned(), e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(OutDirError::Busy(owned())),
            Err(std::fs::TryLockError::Error(e)) => return Err(OutDirError::Io(owned(), e)),
        }
        if !force && holds_files()? {
            return Err(OutDirError::NotEmpty(owned()));
        }
        Ok(Self {
            path: owned(),
            _lock: lock,
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The name of a file of sealed or streamed evidence in `dir`, if it holds one: a
/// journal (`*.journal.jsonl`), a key announcement (`*.announcement.json`), a JSON
/// file whose first 4 KiB name a Knox evidence format (`"format":"knox-evidence/…"`, a
/// bundle), or a compact bundle (a file beginning with CBOR's self-describing tag, as
/// every `knox-compact` file does). Unreadable entries are skipped.
pub fn evidence_in(dir: &Path) -> Option<String> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries.flatten().find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        if !is_file {
            return None;
        }
        if name.ends_with(".journal.jsonl") || name.ends_with(".announcement.json") {
            return Some(name);
        }
        let json = name.ends_with(".json");
        if !json && !name.ends_with(".cbor") {
            return None;
        }
        let mut head = Vec::with_capacity(4096);
        File::open(e.path())
            .and_then(|f| f.take(4096).read_to_end(&mut head))
            .ok()?;
        if !json {
            return head.starts_with(&[0xd9, 0xd9, 0xf7]).then_some(name);
        }
        let text = String::from_utf8_lossy(&head);
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        compact
            .contains("\"format\":\"knox-evidence/")
            .then_some(name)
    })
}

/// The identity (device, inode) of an existing file, for telling whether an output
/// would overwrite an input; `None` when `path` does not exist.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("knox-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn no_write_replaces_a_file_read_as_an_input_by_any_name() {
        let d = scratch("inputs");
        let key = d.join("k.key");
        std::fs::write(&key, b"secret").unwrap();
        let other = d.join("other.json");
        std::fs::write(&other, b"unread").unwrap();
        assert_eq!(read_capped(&key, 64).unwrap(), b"secret");
        let hard = d.join("hard.key");
        std::fs::hard_link(&key, &hard).unwrap();
        let soft = d.join("soft.key");
        std::os::unix::fs::symlink(&key, &soft).unwrap();
        for target in [&key, &hard, &soft] {
            let e = write_atomic(target, b"report").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
            assert!(e.to_string().contains("k.key"), "{e}");
            assert!(create_with_header(target, b"{}\n").is_err());
        }
        assert_eq!(std::fs::read(&key).unwrap(), b"secret");
        // An input deleted, and its inode reused by a new file: that file is no input.
        let gone = d.join("gone.json");
        std::fs::write(&gone, b"read").unwrap();
        read_capped(&gone, 64).unwrap();
        std::fs::remove_file(&gone).unwrap();
        for i in 0..64 {
            let fresh = d.join(format!("fresh-{i}.json"));
            std::fs::write(&fresh, b"new").unwrap();
            write_atomic(&fresh, b"newer").unwrap();
        }
        // A file not read, and a new name, are written as before.
        write_atomic(&other, b"two").unwrap();
        write_atomic(&d.join("new.json"), b"new").unwrap();
        assert_eq!(std::fs::read(&other).unwrap(), b"two");
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let d = scratch("atomic");
        let p = d.join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let opts = WriteOptions {
            create_new: true,
            ..WriteOptions::default()
        };
        assert!(write_atomic_with(&p, b"three", opts).is_err());
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn capped_reader_refuses_large_and_irregular_files() {
        let d = scratch("capped");
        let p = d.join("x");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_capped(&p, 5).unwrap(), b"12345");
        assert!(matches!(read_capped(&p, 4), Err(ReadError::TooLarge(..))));
        assert!(matches!(read_capped(&d, 4), Err(ReadError::NotRegular(..))));
        assert!(matches!(
            read_capped(Path::new("/dev/zero"), 4),
            Err(ReadError::NotRegular(..))
        ));
        assert!(matches!(
            read_capped(&d.join("none"), 4),
            Err(ReadError::NotFound(..))
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn out_dir_is_exclusive_and_refuses_files_without_force() {
        let d = scratch("outdir");
        let held = OutDir::lock(&d, false).unwrap();
        assert!(matches!(OutDir::lock(&d, true), Err(OutDirError::Busy(_))));
        drop(held);
        std::fs::write(d.join("x"), b"").unwrap();
        std::fs::remove_file(d.join(LOCK_FILE)).unwrap();
        assert!(matches!(
            OutDir::lock(&d, false),
            Err(OutDirError::NotEmpty(_))
        ));
        assert!(
            !d.join(LOCK_FILE).exists(),
            "a refused folder is left as it was"
        );
        assert!(OutDir::lock(&d, true).is_ok());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
