//! Base seccomp profiles: reviewed data files in `profiles/`, validated when loaded.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// A tool family: a group of tools with the same kernel needs beyond the runtime baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// Works on files in its workspace; no network.
    Offline,
    /// Makes outbound TCP connections to authorized ports.
    NetworkClient,
    /// Runs a shell and the commands it starts.
    Terminal,
    /// Node.js's runtime (an MCP server written for node).
    Node,
    /// The Python interpreter and asyncio (an MCP server written in Python).
    Python,
}

impl Family {
    /// Every family, in a fixed order.
    pub const ALL: [Family; 5] = [
        Family::Offline,
        Family::NetworkClient,
        Family::Terminal,
        Family::Node,
        Family::Python,
    ];

    /// The profile file's name (without `.toml`).
    pub fn name(self) -> &'static str {
        match self {
            Family::Offline => "offline",
            Family::NetworkClient => "network-client",
            Family::Terminal => "terminal",
            Family::Node => "node",
            Family::Python => "python",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Family::Offline => include_str!("../profiles/offline.toml"),
            Family::NetworkClient => include_str!("../profiles/network-client.toml"),
            Family::Terminal => include_str!("../profiles/terminal.toml"),
            Family::Node => include_str!("../profiles/node.toml"),
            Family::Python => include_str!("../profiles/python.toml"),
        }
    }
}

const RUNTIME: &str = include_str!("../profiles/runtime.toml");

/// Why a profile failed to load.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file is not valid TOML for a profile.
    #[error("profile `{profile}` does not parse: {source}")]
    Parse {
        /// Profile name.
        profile: &'static str,
        /// Parser error.
        source: toml::de::Error,
    },
    /// The file names a system call the x86_64 table does not know.
    #[error("profile `{profile}` names unknown system call `{name}`")]
    UnknownSyscall {
        /// Profile name.
        profile: &'static str,
        /// The name.
        name: String,
    },
    /// A system call is listed twice (a sign of an unreviewed merge).
    #[error("profile `{profile}` lists `{name}` twice")]
    Duplicate {
        /// Profile name.
        profile: &'static str,
        /// The name.
        name: String,
    },
    /// The `name` field does not match the file.
    #[error("profile file `{expected}` says it is `{got}`")]
    Name {
        /// File name.
        expected: &'static str,
        /// Name inside.
        got: String,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: String,
    summary: String,
    syscalls: Vec<String>,
}

/// A validated base profile: a named set of system calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    name: &'static str,
    summary: String,
    syscalls: BTreeSet<String>,
}

impl Profile {
    /// The runtime baseline every tool process needs (loader, allocator, threads, stdio).
    pub fn runtime() -> Result<Self, ProfileError> {
        Self::parse("runtime", RUNTIME)
    }

    /// The syscalls a family needs on top of [`Profile::runtime`].
    pub fn family(family: Family) -> Result<Self, ProfileError> {
        Self::parse(family.name(), family.source())
    }

    /// Profile name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// One-line description from the file.
    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// The system calls, by name.
    pub fn syscalls(&self) -> &BTreeSet<String> {
        &self.syscalls
    }

    fn parse(profile: &'static str, text: &str) -> Result<Self, ProfileError> {
        let file: ProfileFile =
            toml::from_str(text).map_err(|source| ProfileError::Parse { profile, source })?;
        if file.name != profile {
            return Err(ProfileError::Name {
                expected: profile,
                got: file.name,
            });
        }
        let mut syscalls = BTreeSet::new();
        for name in file.syscalls {
            if crate::filter::syscall_number(&name).is_none() {
                return Err(ProfileError::UnknownSyscall { profile, name });
            }
            if !syscalls.insert(name.clone()) {
                return Err(ProfileError::Duplicate { profile, name });
            }
        }
        Ok(Self {
            name: profile,
            summary: file.summary,
            syscalls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_loads() -> Result<(), ProfileError> {
        Profile::runtime()?;
        for family in Family::ALL {
            assert_eq!(Profile::family(family)?.name(), family.name());
        }
        Ok(())
    }

    #[test]
    fn unknown_syscall_name_is_an_error() {
        let text = "name = \"t\"\nsummary = \"\"\nsyscalls = [\"read\", \"frobnicate\"]\n";
        assert!(matches!(
            Profile::parse("t", text),
            Err(ProfileError::UnknownSyscall { .. })
        ));
    }

    #[test]
    fn duplicate_is_an_error() {
        let text = "name = \"t\"\nsummary = \"\"\nsyscalls = [\"read\", \"read\"]\n";
        assert!(matches!(
            Profile::parse("t", text),
            Err(ProfileError::Duplicate { .. })
        ));
    }

    #[test]
    fn families_do_not_grant_what_no_tool_needs() -> Result<(), ProfileError> {
        let mut all = Profile::runtime()?.syscalls().clone();
        for family in Family::ALL {
            all.extend(Profile::family(family)?.syscalls().iter().cloned());
        }
        for forbidden in [
            "ptrace",
            "mount",
            "unshare",
            "setns",
            "bpf",
            "init_module",
            "kexec_load",
            // Landlock does not check metadata changes; a uid-0 tool owns root's files.
            "chmod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "utimensat",
            "utimes",
            "utime",
            "futimesat",
        ] {
            assert!(
                !all.contains(forbidden),
                "`{forbidden}` must never be in a base profile"
            );
        }
        Ok(())
    }
}
