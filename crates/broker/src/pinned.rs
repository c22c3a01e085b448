//! Capability ids to files, for real: every path is resolved beneath its capability's
//! root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`,
//! so no `..`, absolute path or symbolic link — planted before the check or swapped in
//! between check and use — leads out of the root: the kernel refuses the open itself.
//!
//! A pinned executable is opened the same way, its **opened descriptor** is hashed
//! and compared with the contract's SHA-256, and that descriptor is what the sandbox
//! executes (`knox_sandbox::Sandbox::spawn_fd`): the bytes checked are the file run,
//! whatever is renamed over the path meanwhile. A binary that its owner's group or
//! others may write is refused, since its bytes could change under the open
//! descriptor after the hash.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use knox_contract::format::{DirectoryCap, ExecutableCap};
use knox_types::digest::Digest;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use sha2::{Digest as _, Sha256};

/// Largest file a read action returns.
pub const MAX_READ: u64 = 1 << 20;

/// Why a capability path could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PinError {
    /// The capability's root cannot be opened as a directory.
    #[error("capability root `{root}`: {errno}")]
    Root {
        /// The root.
        root: String,
        /// The error.
        errno: String,
    },
    /// The path is not a clean relative path.
    #[error("`{0}` is not a relative path without `.`/`..` components")]
    Lexical(String),
    /// The kernel refused to resolve the path beneath the root (an escape: `..`, an
    /// absolute or symbolic link on the way), or it does not exist.
    #[error("`{path}` does not resolve beneath `{root}` without symbolic links: {errno}")]
    Beneath {
        /// The root.
        root: String,
        /// The relative path.
        path: String,
        /// What `openat2` said.
        errno: String,
    },
    /// Not a regular file.
    #[error("`{0}` is not a regular file")]
    NotRegular(String),
    /// The binary can be written by its group or others.
    #[error("`{0}` is writable by group or others: its bytes could change after the check")]
    Writable(String),
    /// The opened binary's bytes are not the pinned ones.
    #[error("`{path}` has SHA-256 {got}, the contract pins {expected}")]
    Digest {
        /// The path.
        path: String,
        /// Pinned.
        expected: String,
        /// Found.
        got: String,
    },
    /// Reading or writing failed.
    #[error("`{path}`: {error}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        error: String,
    },
    /// The file is too large to return.
    #[error("`{0}` exceeds {MAX_READ} bytes")]
    TooLarge(String),
}

const BENEATH: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// Opens a capability root (trusted: it comes from the signed contract) as a directory.
pub fn open_root(root: &str) -> Result<OwnedFd, PinError> {
    rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| PinError::Root {
        root: root.into(),
        errno: e.to_string(),
    })
}

/// `openat2(root, rel, flags, mode, BENEATH | NO_SYMLINKS | NO_MAGICLINKS)`, after the
/// lexical check (which only makes the error clearer: the kernel enforces it).
pub fn open_beneath(
    root: &str,
    root_fd: impl AsFd,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> Result<OwnedFd, PinError> {
    if !knox_contract::format::valid_relative(rel) {
        return Err(PinError::Lexical(rel.chars().take(128).collect()));
    }
    rustix::fs::openat2(root_fd, rel, flags | OFlags::CLOEXEC, mode, BENEATH).map_err(|e| {
        PinError::Beneath {
            root: root.into(),
            path: rel.chars().take(128).collect(),
            errno: e.to_string(),
        }
    })
}

/// An executable opened beneath its root whose bytes matched the pin.
#[derive(Debug)]
pub struct PinnedProgram {
    /// The opened binary: execute this descriptor.
    pub fd: OwnedFd,
    /// SHA-256 of its bytes, as read through `fd`.
    pub digest: Digest,
    /// `root/path`, for policies and messages.
    pub path: PathBuf,
}

/// Opens `cap`'s binary beneath its root, hashes the opened descriptor and compares
/// with the pin.
pub fn open_pinned(cap: &ExecutableCap) -> Result<PinnedProgram, PinError> {
    let root = open_root(&cap.root)?;
    let fd = open_beneath(&cap.root, &root, &cap.path, OFlags::RDONLY, Mode::empty())?;
    let path = Path::new(&cap.root).join(&cap.path);
    let shown = path.display().to_string();
    let st = rustix::fs::fstat(&fd).map_err(|e| PinError::Io {
        path: shown.clone(),
        error: e.to_string(),
    })?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(PinError::NotRegular(shown));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(PinError::Writable(shown));
    }
    let digest = hash_fd(&fd).map_err(|e| PinError::Io {
        path: shown.clone(),
        error: e.to_string(),
    })?;
    let expected = cap.sha256.clone();
    if digest.to_hex() != expected {
        return Err(PinError::Digest {
            path: shown,
            expected,
            got: digest.to_hex(),
        });
    }
    Ok(PinnedProgram { fd, digest, path })
}

/// SHA-256 of the file open at `fd`, read from offset 0 (the descriptor's offset is
/// left where the read ended; `execve` does not use it).
pub fn hash_fd(fd: &OwnedFd) -> std::io::Result<Digest> {
    let f = File::from(fd.try_clone()?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut offset = 0u64;
    loop {
        let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, offset)?;
        if n == 0 {
            break;
        }
        h.update(buf.get(..n).unwrap_or_default());
        offset = offset.saturating_add(n as u64);
    }
    Ok(Digest(h.finalize().into()))
}

/// SHA-256 of the file at `path` (for writing a pin).
pub fn hash_path(path: &Path) -> std::io::Result<Digest> {
    hash_fd(&OwnedFd::from(File::open(path)?))
}

/// Reads `rel` beneath `dir`'s root (at most [`MAX_READ`] bytes).
pub fn read_beneath(dir: &DirectoryCap, rel: &str) -> Result<Vec<u8>, PinError> {
    let root = open_root(&dir.root)?;
    let fd = open_beneath(&dir.root, &root, rel, OFlags::RDONLY, Mode::empty())?;
    let io = |e: std::io::Error| PinError::Io {
        path: rel.into(),
        error: e.to_string(),
    };
    let mut out = Vec::new();
    File::from(fd)
        .take(MAX_READ + 1)
        .read_to_end(&mut out)
        .map_err(io)?;
    if out.len() as u64 > MAX_READ {
        return Err(PinError::TooLarge(rel.into()));
    }
    Ok(out)
}

/// Writes (creates or truncates) `rel` beneath `dir`'s root, creating missing parent
/// directories beneath it; every component is opened with the same resolution rules,
/// so a symbolic link anywhere on the way is refused by the kernel.
pub fn write_beneath(dir: &DirectoryCap, rel: &str, content: &[u8]) -> Result<(), PinError> {
    if !knox_contract::format::valid_relative(rel) {
        return Err(PinError::Lexical(rel.chars().take(128).collect()));
    }
    let root = open_root(&dir.root)?;
    let (parents, name) = match rel.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, rel),
    };
    let mut cur = root;
    for comp in parents.into_iter().flat_map(|p| p.split('/')) {
        let flags = OFlags::PATH | OFlags::DIRECTORY;
        cur = match open_beneath(&dir.root, &cur, comp, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(_) => {
                // Missing: create it (mkdirat does not follow a link in its last
                // component), then open it beneath again.
                let _ = rustix::fs::mkdirat(&cur, comp, Mode::from_raw_mode(0o755));
                open_beneath(&dir.root, &cur, comp, flags, Mode::empty())?
            }
        };
    }
    let fd = open_beneath(
        &dir.root,
        &cur,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o644),
    )?;
    File::from(fd).write_all(content).map_err(|e| PinError::Io {
        path: rel.into(),
        error: e.to_string(),
    })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use knox_contract::format::{ArgPattern, DirAccess, Impact};

    use super::*;

    fn dir(root: &Path) -> DirectoryCap {
        DirectoryCap {
            root: root.to_str().unwrap().into(),
            access: DirAccess::Write,
            cost_cents: 0,
            impact: Impact::Low,
        }
    }

    #[test]
    fn writes_stay_beneath_the_root() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("ws");
        let outside = t.path().join("home");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        let d = dir(&root);
        write_beneath(&d, "notes/a.txt", b"hello").unwrap();
        assert_eq!(std::fs::read(root.join("notes/a.txt")).unwrap(), b"hello");
        assert_eq!(read_beneath(&d, "notes/a.txt").unwrap(), b"hello");
        // traversal and absolute paths
        assert!(matches!(
            write_beneath(&d, "../home/.bashrc", b"x"),
            Err(PinError::Lexical(_))
        ));
        assert!(matches!(
            write_beneath(&d, "/etc/passwd", b"x"),
            Err(PinError::Lexical(_))
        ));
        // a symbolic link planted in the root, as a directory or as the file itself
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.join(".bashrc"), root.join("rc")).unwrap();
        assert!(matches!(
            write_beneath(&d, "escape/.bashrc", b"x"),
            Err(PinError::Beneath { .. })
        ));
        assert!(matches!(
            write_beneath(&d, "rc", b"x"),
            Err(PinError::Beneath { .. })
        ));
        assert!(matches!(
            read_beneath(&d, "escape/.bashrc"),
            Err(PinError::Beneath { .. })
        ));
        assert!(!outside.join(".bashrc").exists());
    }

    fn exe(root: &Path, name: &str, sha: &str) -> ExecutableCap {
        ExecutableCap {
            root: root.to_str().unwrap().into(),
            path: name.into(),
            sha256: sha.into(),
            argv: vec![vec![ArgPattern::Lit("x".into())]],
            workdir: None,
            cost_cents: 0,
            impact: Impact::Low,
        }
    }

    #[test]
    fn the_opened_binary_is_hashed_and_a_swap_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let tool = t.path().join("tool");
        std::fs::write(&tool, b"#!/bin/true\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let pin = hash_path(&tool).unwrap().to_hex();
        let cap = exe(t.path(), "tool", &pin);
        let p = open_pinned(&cap).unwrap();
        assert_eq!(p.digest.to_hex(), pin);
        // swapped binary: another file renamed over the path
        std::fs::write(t.path().join("evil"), b"#!/bin/sh\necho pwned\n").unwrap();
        std::fs::set_permissions(
            t.path().join("evil"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::rename(t.path().join("evil"), &tool).unwrap();
        assert!(matches!(open_pinned(&cap), Err(PinError::Digest { .. })));
        // the descriptor opened before the swap still holds the pinned bytes
        assert_eq!(hash_fd(&p.fd).unwrap().to_hex(), pin);
        // a symbolic link at the pinned path (even to the pinned bytes) is refused
        std::fs::remove_file(&tool).unwrap();
        std::fs::write(t.path().join("real"), b"#!/bin/true\n").unwrap();
        std::fs::set_permissions(
            t.path().join("real"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink(t.path().join("real"), &tool).unwrap();
        assert!(matches!(open_pinned(&cap), Err(PinError::Beneath { .. })));
        // writable by others
        let w = exe(t.path(), "real", &pin);
        std::fs::set_permissions(
            t.path().join("real"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        assert!(matches!(open_pinned(&w), Err(PinError::Writable(_))));
        // traversal
        let up = exe(t.path(), "../tool", &pin);
        assert!(matches!(open_pinned(&up), Err(PinError::Lexical(_))));
    }
}
