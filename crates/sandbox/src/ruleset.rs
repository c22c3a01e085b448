//! Landlock: canonicalizes path grants and builds the ruleset (in the parent) that the child enforces.

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access as _, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath,
    PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use crate::policy::{Access, SandboxPolicy};
use crate::sys;

/// The newest Landlock ABI whose access rights the sandbox uses (file-system
/// rights up to `IoctlDev` (5), TCP bind/connect (4), signal and abstract-socket
/// scoping (6); 7 adds only audit). Any ABI from [`crate::layers::MIN_ABI`] works:
/// what an older one lacks is enforced by another layer ([`crate::layers`]). The
/// ruleset handles exactly the rights of the ABI in use
/// ([`CompatLevel::HardRequirement`]), so nothing is silently dropped.
pub const FULL_RIGHTS_ABI: u8 = 6;

/// `LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON` (ABI 7): audit denials of the executed tool,
/// which by default are only logged for the process that called `landlock_restrict_self`.
const LOG_NEW_EXEC_ON: u32 = 2;

/// Where the dynamic loader finds libraries; read-only when a policy grants execute.
const LOADER_READ: [&str; 6] = [
    "/lib",
    "/lib64",
    "/usr/lib",
    "/usr/lib64",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
];
/// ELF interpreters; the kernel opens them for execution (Landlock checks `Execute`).
const LOADER_EXEC: [&str; 1] = ["/lib64/ld-linux-x86-64.so.2"];

/// Devices every tool may use: the bit bucket (read and write) and the zero and
/// random sources (read). No device ioctls (`IoctlDev` is never granted).
const RUNTIME_DEVICES: [(&str, &[Access]); 4] = [
    ("/dev/null", &[Access::Read, Access::Write]),
    ("/dev/zero", &[Access::Read]),
    ("/dev/urandom", &[Access::Read]),
    ("/dev/random", &[Access::Read]),
];

/// Why the Landlock ruleset could not be built.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The ABI in use cannot enforce the policy.
    #[error(transparent)]
    Layers(#[from] crate::layers::LayerError),
    /// The landlock crate reported an error (including incomplete enforcement).
    #[error("landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// A granted path could not be opened (it vanished after canonicalization).
    #[error("landlock: {0}")]
    PathFd(#[from] landlock::PathFdError),
    /// The ruleset was not created (not enforceable).
    #[error("landlock ruleset was not created")]
    NotEnforced,
}

/// One canonical path grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRule {
    /// Canonical path.
    pub path: PathBuf,
    /// Rights requested.
    pub access: BTreeSet<Access>,
    /// Whether `path` is a directory (otherwise only file rights apply).
    pub is_dir: bool,
    /// Added by the sandbox itself (workspace, runtime devices, loader paths),
    /// not by the policy: never an execute root for the supervisor.
    pub implicit: bool,
}

/// Canonical grants plus the notes explaining what was skipped or added.
#[derive(Debug, Clone, Default)]
pub struct ResolvedPaths {
    /// Grants to turn into Landlock rules.
    pub rules: Vec<ResolvedRule>,
    /// Human-readable notes for the evidence (skipped paths, implicit grants).
    pub notes: Vec<String>,
}

impl ResolvedPaths {
    /// Canonical roots under which `execve` is authorized: the policy's own
    /// execute grants. The ELF interpreter's implicit grant is for the kernel
    /// loading a granted program; executing it directly (`ld.so PROGRAM`) would run
    /// any readable file, so the supervisor does not count it.
    pub fn exec_roots(&self) -> impl Iterator<Item = &Path> {
        self.rules
            .iter()
            .filter(|r| !r.implicit && r.access.contains(&Access::Execute))
            .map(|r| r.path.as_path())
    }
}

/// Canonicalizes the policy's path grants.
///
/// A grant whose path does not exist is skipped with a note rather than an error:
/// Landlock can only attach a rule to an existing file, and granting the nearest
/// existing ancestor instead would widen the grant. The workspace is an error if it
/// does not exist (the tool cannot start without it) and is granted read, write,
/// create and remove. When any grant includes execute, the loader's paths are added.
pub fn resolve(policy: &SandboxPolicy, workspace: &Path) -> ResolvedPaths {
    let mut out = ResolvedPaths::default();
    let all_but_exec = [Access::Read, Access::Write, Access::Create, Access::Remove];
    out.rules.push(ResolvedRule {
        path: workspace.to_path_buf(),
        access: all_but_exec.into(),
        is_dir: true,
        implicit: true,
    });
    out.notes.push(format!(
        "workspace `{}` granted read, write, create, remove",
        workspace.display()
    ));
    for (device, access) in RUNTIME_DEVICES {
        add_quiet(&mut out, device, &access.iter().copied().collect());
    }
    out.notes.push("runtime devices granted: /dev/null (read, write), /dev/zero, /dev/urandom, /dev/random (read)".into());
    for rule in &policy.paths {
        add(&mut out, &rule.path, &rule.access);
    }
    if policy
        .paths
        .iter()
        .any(|r| r.access.contains(&Access::Execute))
    {
        for path in LOADER_READ {
            add_quiet(&mut out, path, &[Access::Read].into());
        }
        for path in LOADER_EXEC {
            add_quiet(&mut out, path, &[Access::Read, Access::Execute].into());
        }
        out.notes
            .push("execute granted: loader paths granted read, the ELF interpreter execute".into());
    }
    out
}

fn add(out: &mut ResolvedPaths, path: &Path, access: &BTreeSet<Access>) {
    match std::fs::canonicalize(path) {
        Ok(canonical) => {
            let is_dir = canonical.is_dir();
            if !is_dir
                && access
                    .iter()
                    .any(|a| matches!(a, Access::Create | Access::Remove))
            {
                out.notes.push(format!(
                    "`{}` is a file: create/remove do not apply",
                    canonical.display()
                ));
            }
            out.rules.push(ResolvedRule {
                path: canonical,
                access: access.clone(),
                is_dir,
                implicit: false,
            });
        }
        Err(e) => out.notes.push(format!("`{}` skipped: {e}", path.display())),
    }
}

fn add_quiet(out: &mut ResolvedPaths, path: &str, access: &BTreeSet<Access>) {
    if let Ok(canonical) = std::fs::canonicalize(path) {
        let is_dir = canonical.is_dir();
        out.rules.push(ResolvedRule {
            path: canonical,
            access: access.clone(),
            is_dir,
            implicit: true,
        });
    }
}

/// Landlock rights for a grant, limited to those ABI `abi` handles.
pub fn rights(access: &BTreeSet<Access>, is_dir: bool, abi: u8) -> BitFlags<AccessFs> {
    let abi = ABI::from(i32::from(abi));
    let mut r = BitFlags::<AccessFs>::empty();
    for a in access {
        r |= match a {
            Access::Read => AccessFs::ReadFile | AccessFs::ReadDir,
            Access::Write => AccessFs::WriteFile | AccessFs::Truncate,
            Access::Create => {
                AccessFs::MakeReg
                    | AccessFs::MakeDir
                    | AccessFs::MakeSym
                    | AccessFs::MakeFifo
                    | AccessFs::MakeSock
                    | AccessFs::Refer
            }
            Access::Remove => AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Refer,
            Access::Replace => AccessFs::MakeReg | AccessFs::RemoveFile,
            Access::Execute => AccessFs::Execute.into(),
        };
    }
    if is_dir {
        r & AccessFs::from_all(abi)
    } else {
        r & AccessFs::from_file(abi)
    }
}

/// A filled Landlock ruleset, ready for `landlock_restrict_self` in the child.
#[derive(Debug)]
pub struct LandlockRuleset {
    pub(crate) fd: OwnedFd,
    /// ABI the running kernel reports.
    pub kernel_abi: i32,
    /// ABI whose rights the ruleset handles.
    pub abi: u8,
    /// Flags for `landlock_restrict_self`.
    pub restrict_flags: u32,
}

/// Builds the ruleset for ABI `abi` (at most the kernel's): every file-system
/// right of that ABI handled (so denied unless granted); from ABI 4, TCP bind and
/// connect handled with the listed ports granted; from ABI 6, signals and abstract
/// UNIX sockets scoped to the sandbox; from ABI 7, denials of the tool audited.
pub fn build(
    paths: &ResolvedPaths,
    connect: &BTreeSet<u16>,
    bind: &BTreeSet<u16>,
    audit_denials: bool,
    abi: u8,
) -> Result<LandlockRuleset, LandlockError> {
    let kernel_abi = sys::landlock_abi().unwrap_or(0);
    let level = ABI::from(i32::from(abi));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(level))?;
    if abi >= 4 {
        ruleset = ruleset.handle_access(AccessNet::from_all(level))?;
    }
    if abi >= 6 {
        ruleset = ruleset.scope(Scope::from_all(level))?;
    }
    let mut ruleset = ruleset.create()?;
    for rule in &paths.rules {
        let fd = PathFd::new(&rule.path)?;
        let rights = rights(&rule.access, rule.is_dir, abi);
        if !rights.is_empty() {
            ruleset = ruleset.add_rule(PathBeneath::new(fd, rights))?;
        }
    }
    if abi >= 4 {
        for port in connect {
            ruleset = ruleset.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
        for port in bind {
            ruleset = ruleset.add_rule(NetPort::new(*port, AccessNet::BindTcp))?;
        }
    }
    let fd: Option<OwnedFd> = ruleset.into();
    let restrict_flags = if audit_denials && abi >= 7 {
        LOG_NEW_EXEC_ON
    } else {
        0
    };
    Ok(LandlockRuleset {
        fd: fd.ok_or(LandlockError::NotEnforced)?,
        kernel_abi,
        abi,
        restrict_flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_grants_drop_directory_rights() {
        let r = rights(&[Access::Read, Access::Create].into(), false, 6);
        assert!(r.contains(AccessFs::ReadFile));
        assert!(!r.contains(AccessFs::ReadDir));
        assert!(!r.contains(AccessFs::MakeReg));
    }

    #[test]
    fn rights_are_limited_to_the_abi() {
        let all: BTreeSet<Access> = [Access::Write, Access::Create].into();
        assert!(!rights(&all, true, 1).contains(AccessFs::Refer));
        assert!(rights(&all, true, 2).contains(AccessFs::Refer));
        assert!(!rights(&all, true, 2).contains(AccessFs::Truncate));
        assert!(rights(&all, true, 3).contains(AccessFs::Truncate));
    }

    #[test]
    fn missing_paths_are_skipped_with_a_note() -> Result<(), Box<dyn std::error::Error>> {
        let mut policy = SandboxPolicy::for_families(&[], "/tmp")?;
        policy = policy.grant("/nonexistent/knox/path", &[Access::Read]);
        let resolved = resolve(&policy, Path::new("/tmp"));
        assert_eq!(
            resolved.rules.len(),
            1 + RUNTIME_DEVICES.len(),
            "only the workspace and devices"
        );
        assert!(
            resolved
                .notes
                .iter()
                .any(|n| n.contains("/nonexistent/knox/path"))
        );
        Ok(())
    }

    #[test]
    fn implicit_loader_grants_are_not_execute_roots() -> Result<(), Box<dyn std::error::Error>> {
        let policy = SandboxPolicy::for_families(&[], "/tmp")?
            .grant("/usr/bin/true", &[Access::Read, Access::Execute]);
        let resolved = resolve(&policy, Path::new("/tmp"));
        let loader = std::fs::canonicalize(LOADER_EXEC[0])?;
        assert!(
            resolved
                .rules
                .iter()
                .any(|r| r.path == loader && r.access.contains(&Access::Execute)),
            "Landlock still lets the kernel load the interpreter"
        );
        let roots: Vec<&Path> = resolved.exec_roots().collect();
        assert_eq!(roots, [std::fs::canonicalize("/usr/bin/true")?.as_path()]);
        Ok(())
    }

    #[test]
    fn dotdot_and_symlinks_are_canonicalized() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let real = dir.path().join("real");
        std::fs::create_dir(&real)?;
        std::os::unix::fs::symlink(&real, dir.path().join("link"))?;
        let policy = SandboxPolicy::for_families(&[], "/tmp")?
            .grant(dir.path().join("link/../real/./"), &[Access::Read])
            .grant(dir.path().join("link"), &[Access::Read]);
        let resolved = resolve(&policy, Path::new("/tmp"));
        let real = std::fs::canonicalize(real)?;
        let granted: Vec<_> = resolved
            .rules
            .iter()
            .skip(1 + RUNTIME_DEVICES.len())
            .collect();
        assert_eq!(granted.len(), 2);
        assert!(granted.iter().all(|r| r.path == real), "{resolved:?}");
        Ok(())
    }
}
