//! `SandboxPolicy`: what a tool process may do, as the monitor derives it from Auth.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::profile::{Family, Profile, ProfileError};

/// Largest policy document [`SandboxPolicy::from_json`] accepts, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// One access right a [`PathRule`] grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Open files for reading, list directories.
    Read,
    /// Open files for writing, truncate them.
    Write,
    /// Create regular files, directories, symlinks, FIFOs and sockets; link or rename into.
    Create,
    /// Unlink files, remove directories, rename out of.
    Remove,
    /// Rename a new file over an existing one in the same directory (make and remove
    /// regular files; no directories, no moves between directories).
    Replace,
    /// `execve` files. Also grants what the dynamic loader needs (read on the
    /// system library directories, execute on the ELF interpreter).
    Execute,
}

/// Access rights granted on everything beneath `path` (or on `path` itself if it is a file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathRule {
    /// Absolute path; canonicalized (`..`, symlinks) before it becomes a Landlock rule.
    pub path: PathBuf,
    /// Rights granted beneath `path`.
    pub access: BTreeSet<Access>,
}

/// Resource limits of one confined tool process (and everything it starts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Processes and threads in the tool's cgroup (`pids.max`); `RLIMIT_NPROC` without cgroups.
    pub max_processes: u32,
    /// Largest file the tool may write (`RLIMIT_FSIZE`); writes past it fail with `EFBIG`.
    pub max_file_bytes: u64,
    /// Memory of the tool's cgroup (`memory.max` / `memory.limit_in_bytes`);
    /// `RLIMIT_AS` when no memory cgroup is available.
    pub max_memory_bytes: u64,
    /// CPU time (`RLIMIT_CPU` soft limit; `SIGXCPU` there, `SIGKILL` one second later).
    pub cpu_seconds: u64,
    /// Open file descriptors (`RLIMIT_NOFILE`); at least [`MIN_OPEN_FILES`].
    pub max_open_files: u64,
    /// Virtual address space (`RLIMIT_AS`). When absent, `RLIMIT_AS` is set to
    /// `max_memory_bytes` only if no memory cgroup enforces that limit: thread stacks
    /// and allocator arenas reserve far more address space than they use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_address_space_bytes: Option<u64>,
}

/// Fewest file descriptors a tool may be limited to: the child needs 8 before `execve`.
pub const MIN_OPEN_FILES: u64 = 16;

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_processes: 64,
            max_file_bytes: 64 << 20,
            max_memory_bytes: 512 << 20,
            cpu_seconds: 30,
            max_open_files: 256,
            max_address_space_bytes: None,
        }
    }
}

/// What a tool process may do: the kernel half of Auth.
///
/// Everything not granted is denied: paths by Landlock, TCP ports by Landlock,
/// system calls by seccomp (recorded by the supervisor), resources by rlimits and cgroups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPolicy {
    /// Path grants. The workspace is granted read, write, create and remove implicitly.
    #[serde(default)]
    pub paths: Vec<PathRule>,
    /// TCP ports the tool may `connect` to (any address).
    #[serde(default)]
    pub tcp_connect_ports: BTreeSet<u16>,
    /// TCP ports the tool may `bind`.
    #[serde(default)]
    pub tcp_bind_ports: BTreeSet<u16>,
    /// System calls the tool may make, by name (x86_64 names). Anything else is
    /// denied with `EPERM` and recorded.
    pub syscalls: BTreeSet<String>,
    /// Resource limits.
    pub limits: Limits,
    /// The tool's working directory; must exist.
    pub workspace: PathBuf,
    /// Refuse to run on a Landlock ABI older than this (a regulator's minimum).
    #[serde(default)]
    pub min_landlock_abi: Option<u8>,
    /// Protections this policy accepts to lose on kernels that cannot enforce
    /// them; without, such a kernel refuses the run, naming the missing feature.
    #[serde(default)]
    pub degraded: BTreeSet<crate::layers::Degraded>,
}

/// Why a policy was rejected.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy document is larger than [`MAX_POLICY_BYTES`].
    #[error("policy is {got} bytes, limit is {limit}")]
    TooLarge {
        /// Size of the document.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The policy document is not valid JSON for [`SandboxPolicy`].
    #[error("policy does not parse: {0}")]
    Parse(#[from] serde_json::Error),
    /// A system call name is not known for x86_64.
    #[error("unknown system call `{name}`")]
    UnknownSyscall {
        /// The name.
        name: String,
    },
    /// A path is relative.
    #[error("path `{path}` is not absolute")]
    RelativePath {
        /// The path.
        path: PathBuf,
    },
    /// The workspace cannot be canonicalized.
    #[error("workspace `{path}` is unusable: {source}")]
    Workspace {
        /// The workspace path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A limit is outside what the sandbox can enforce.
    #[error("limit `{name}` is {got}, expected {expected}")]
    Limit {
        /// Limit name.
        name: &'static str,
        /// Value given.
        got: u64,
        /// What is accepted.
        expected: &'static str,
    },
    /// A base profile failed to load.
    #[error(transparent)]
    Profile(#[from] ProfileError),
}

impl SandboxPolicy {
    /// Parses a policy document, capping its size before parsing.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PolicyError> {
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                got: bytes.len(),
                limit: MAX_POLICY_BYTES,
            });
        }
        Ok(serde_json::from_slice(bytes)?)
    }

    /// A policy whose syscalls are the runtime baseline plus the given families,
    /// with no path or port grants beyond the workspace.
    pub fn for_families(
        families: &[Family],
        workspace: impl Into<PathBuf>,
    ) -> Result<Self, PolicyError> {
        let mut syscalls = Profile::runtime()?.syscalls().clone();
        for family in families {
            syscalls.extend(Profile::family(*family)?.syscalls().iter().cloned());
        }
        Ok(Self {
            paths: Vec::new(),
            tcp_connect_ports: BTreeSet::new(),
            tcp_bind_ports: BTreeSet::new(),
            syscalls,
            limits: Limits::default(),
            workspace: workspace.into(),
            min_landlock_abi: None,
            degraded: BTreeSet::new(),
        })
    }

    /// Adds a path grant (builder style).
    #[must_use]
    pub fn grant(mut self, path: impl Into<PathBuf>, access: &[Access]) -> Self {
        self.paths.push(PathRule {
            path: path.into(),
            access: access.iter().copied().collect(),
        });
        self
    }

    /// Checks what can be checked without touching the file system.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for name in &self.syscalls {
            crate::filter::syscall_number(name)
                .ok_or_else(|| PolicyError::UnknownSyscall { name: name.clone() })?;
        }
        for rule in &self.paths {
            require_absolute(&rule.path)?;
        }
        require_absolute(&self.workspace)?;
        self.validate_limits()
    }

    fn validate_limits(&self) -> Result<(), PolicyError> {
        let l = &self.limits;
        let check = |name, got: u64, ok: bool, expected| {
            if ok {
                Ok(())
            } else {
                Err(PolicyError::Limit {
                    name,
                    got,
                    expected,
                })
            }
        };
        check(
            "max_processes",
            l.max_processes.into(),
            l.max_processes >= 1,
            ">= 1",
        )?;
        check(
            "max_open_files",
            l.max_open_files,
            l.max_open_files >= MIN_OPEN_FILES,
            ">= 16",
        )?;
        check(
            "cpu_seconds",
            l.cpu_seconds,
            (1..=1 << 30).contains(&l.cpu_seconds),
            "1..=2^30",
        )?;
        check(
            "max_memory_bytes",
            l.max_memory_bytes,
            l.max_memory_bytes >= 1 << 20,
            ">= 1 MiB",
        )
    }
}

fn require_absolute(path: &Path) -> Result<(), PolicyError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(PolicyError::RelativePath {
            path: path.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_rejected() {
        let doc = br#"{"syscalls":[],"limits":{"max_processes":1,"max_file_bytes":1,
            "max_memory_bytes":1,"cpu_seconds":1,"max_open_files":16},"workspace":"/tmp","extra":1}"#;
        assert!(matches!(
            SandboxPolicy::from_json(doc),
            Err(PolicyError::Parse(_))
        ));
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn unknown_syscall_is_rejected() -> TestResult {
        let mut p = SandboxPolicy::for_families(&[], "/tmp")?;
        p.syscalls.insert("not_a_syscall".into());
        assert!(matches!(
            p.validate(),
            Err(PolicyError::UnknownSyscall { .. })
        ));
        Ok(())
    }

    #[test]
    fn relative_paths_are_rejected() -> TestResult {
        let p = SandboxPolicy::for_families(&[], "/tmp")?.grant("relative/dir", &[Access::Read]);
        assert!(matches!(
            p.validate(),
            Err(PolicyError::RelativePath { .. })
        ));
        Ok(())
    }

    #[test]
    fn policy_round_trips_through_json() -> TestResult {
        let p = SandboxPolicy::for_families(&[Family::Offline], "/tmp")?
            .grant("/usr/bin", &[Access::Read, Access::Execute]);
        let back = SandboxPolicy::from_json(&serde_json::to_vec(&p)?)?;
        assert_eq!(back, p);
        Ok(())
    }
}
