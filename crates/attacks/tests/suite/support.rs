//! Fixtures: a temp workspace, a policy for the probe, and running one probe case.

use std::path::{Path, PathBuf};

use knox_sandbox::{Access, Family, Outcome, Sandbox, SandboxConfig, SandboxPolicy};
use serde::Deserialize;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The probe binary Cargo built for these tests.
pub fn probe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_knox-probe"))
}

/// One probe result line.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Probe {
    pub case: String,
    pub ok: bool,
    pub errno: Option<i32>,
    pub detail: Option<String>,
}

/// A temp directory with a workspace inside and a sibling directory outside it.
#[derive(Debug)]
pub struct Fixture {
    _root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub outside: PathBuf,
}

impl Fixture {
    pub fn new() -> std::io::Result<Self> {
        let root = tempfile::Builder::new()
            .prefix("knox-sandbox-test")
            .tempdir()?;
        let workspace = root.path().join("workspace");
        let outside = root.path().join("outside");
        std::fs::create_dir(&workspace)?;
        std::fs::create_dir(&outside)?;
        Ok(Self {
            workspace: std::fs::canonicalize(workspace)?,
            outside: std::fs::canonicalize(outside)?,
            _root: root,
        })
    }

    /// Runtime baseline + `families`, execute on the probe, nothing else.
    pub fn policy(&self, families: &[Family]) -> Result<SandboxPolicy, Box<dyn std::error::Error>> {
        Ok(SandboxPolicy::for_families(families, &self.workspace)?
            .grant(probe(), &[Access::Read, Access::Execute]))
    }
}

/// Whether this kernel can run the sandbox at all (Landlock ABI ≥ 1, seccomp user
/// notification, cgroups for root); prints why not. Only a missing kernel feature
/// skips a test — any other failure fails it.
pub fn kernel_supports_sandbox() -> bool {
    let Ok(policy) = SandboxPolicy::for_families(&[], "/") else {
        return false;
    };
    match Sandbox::new(SandboxConfig::default()).and_then(|s| s.prepare(&policy)) {
        Ok(_) => true,
        Err(e @ knox_sandbox::SandboxError::Landlock(_))
        | Err(e @ knox_sandbox::SandboxError::Cgroup(_)) => {
            eprintln!("SKIPPED: the kernel cannot run the sandbox here: {e}");
            false
        }
        Err(e) => {
            eprintln!("sandbox setup failed: {e}");
            true
        }
    }
}

/// Skips the current test (returns early) when the kernel lacks a required feature.
#[macro_export]
macro_rules! require_kernel {
    () => {
        if !$crate::suite::support::kernel_supports_sandbox() {
            return Ok(());
        }
    };
}

/// Runs `knox-probe ARGS` under `policy`; returns the outcome and the parsed result line.
pub fn run(
    policy: &SandboxPolicy,
    args: &[&str],
) -> Result<(Outcome, Option<Probe>), Box<dyn std::error::Error>> {
    run_with(&Sandbox::new(SandboxConfig::default())?, policy, args)
}

/// Like [`run`] with a given sandbox.
pub fn run_with(
    sandbox: &Sandbox,
    policy: &SandboxPolicy,
    args: &[&str],
) -> Result<(Outcome, Option<Probe>), Box<dyn std::error::Error>> {
    let mut argv = vec![probe().into_os_string()];
    argv.extend(args.iter().map(Into::into));
    let outcome = sandbox.spawn(policy, &argv, &[], b"")?.wait()?;
    let line = String::from_utf8_lossy(&outcome.stdout)
        .lines()
        .last()
        .map(str::to_owned);
    let probe = line.and_then(|l| serde_json::from_str(&l).ok());
    Ok((outcome, probe))
}

/// Runs `knox-probe ARGS` without any confinement, for the "it works outside" half.
pub fn run_unconfined(args: &[&str]) -> Result<Probe, Box<dyn std::error::Error>> {
    let out = std::process::Command::new(probe()).args(args).output()?;
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::to_owned)
        .unwrap_or_default();
    Ok(serde_json::from_str(&line)?)
}

/// The denied calls named `name` the supervisor recorded (not Landlock's).
pub fn denied<'a>(outcome: &'a Outcome, name: &str) -> Vec<&'a knox_sandbox::DeniedSyscall> {
    outcome
        .denied
        .iter()
        .filter(|d| d.name == name && d.landlock.is_none())
        .collect()
}

/// `path` as a string (test paths are UTF-8).
pub fn s(path: &Path) -> &str {
    path.to_str().unwrap_or_default()
}

pub const EPERM: i32 = 1;
pub const EACCES: i32 = 13;

/// Whether the tests run as root (uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// Holders of [`AuditOn`] in this process, whether audit was off before the
/// first, and the backlog limit found.
static AUDIT_ON: std::sync::Mutex<(usize, bool, u32)> = std::sync::Mutex::new((0, false, 0));
/// Records the kernel may queue while a test holds [`AuditOn`]: the corpus's
/// loops on denied calls make thousands of records in a burst.
const TEST_BACKLOG: u32 = 1 << 16;

/// The kernel's audit turned on for a test (the tests' explicit opt-in: Landlock
/// writes its records only then) with a backlog the corpus's bursts fit in, and
/// both put back as they were found when the last holder in this process drops
/// it. Other tests running meanwhile may see it on.
#[derive(Debug)]
pub struct AuditOn(());

impl AuditOn {
    /// `None` (with a note) when this machine cannot have Landlock audit: not root
    /// (no `CAP_AUDIT_CONTROL`), or Landlock ABI below 7. As root on ABI ≥ 7 a
    /// kernel that refuses is an error.
    pub fn take() -> Result<Option<Self>, Box<dyn std::error::Error>> {
        let abi = Sandbox::new(SandboxConfig::default())?
            .prepare(&SandboxPolicy::for_families(&[], "/")?)?
            .layers()
            .landlock_abi_kernel;
        if abi < 7 || !is_root() {
            eprintln!(
                "SKIPPED: Landlock audit needs ABI 7 (the kernel has {abi}) and root (has: {})",
                is_root()
            );
            return Ok(None);
        }
        let mut holders = AUDIT_ON
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = knox_sandbox::audit::enable_kernel_audit()?;
        if holders.0 == 0 {
            holders.1 = before.enabled == 0;
            holders.2 = knox_sandbox::audit::set_backlog_limit(TEST_BACKLOG)?.backlog_limit;
        }
        holders.0 += 1;
        Ok(Some(Self(())))
    }
}

impl Drop for AuditOn {
    fn drop(&mut self) {
        let mut holders = AUDIT_ON
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        holders.0 = holders.0.saturating_sub(1);
        if holders.0 == 0 {
            let _ = knox_sandbox::audit::set_backlog_limit(holders.2);
            if holders.1 {
                let _ = knox_sandbox::audit::set_kernel_audit(false);
            }
        }
    }
}

/// The denials the seccomp supervisor recorded (not Landlock's audit records).
pub fn seccomp_denied(outcome: &Outcome) -> Vec<&knox_sandbox::DeniedSyscall> {
    outcome
        .denied
        .iter()
        .filter(|d| d.landlock.is_none())
        .collect()
}
