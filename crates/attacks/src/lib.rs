//! The unmediated-attack corpus: attacks a compromised tool makes straight at the kernel, run confined and unconfined.
//!
//! Each [`Case`] is one attack made by the `knox-probe` binary against targets a
//! [`Fixture`] created (its temp files, loopback listeners, victim process), and
//! states what the kernel layer must do with it under the confined policy
//! ([`Expected`]) and what happens without the sandbox ([`Baseline`]).
//! [`run_case`] runs one case in one [`Mode`] and judges it from the outside:
//! the probe's own report, the fixture's files and victim, and the sandbox's
//! evidence (denied calls, limit hits, the signal).
//!
//! The unconfined baseline runs as the caller (root, for the corpus's purpose)
//! but never unconstrained: through [`Mode::DangerousUnconfined`] the probe gets a
//! cgroup with caps above the tool's, rlimits, a timeout, and private mount, UTS
//! and IPC namespaces; privileged cases are made in forms that fail or only touch
//! the probe itself ([`Baseline::FailsByConstruction`]); and cases that no form
//! makes safe are not run ([`Baseline::Skipped`]).

#![doc = include_str!("../README.md")]

mod cases;
mod fixture;
mod sys;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use knox_sandbox::audit::AuditReport;
use knox_sandbox::{DeniedSyscall, LimitHit, Limits, Outcome, PolicyError, Sandbox, SandboxError};

pub use cases::cases;
pub use fixture::{Fixture, VictimInfo};

/// How long one case may run before its tree is killed.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(30);

/// Which kernel layer decides a case that gives no kernel event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Landlock: paths, TCP ports, signal and abstract-socket scopes.
    Landlock,
    /// The seccomp program's fixed answers (`clone3` gets `ENOSYS`, unrecorded).
    Filter,
    /// An rlimit whose refusal only the tool sees (`EFBIG`, `EMFILE`).
    Rlimit,
    /// The kernel's credential checks (uids, capabilities), made before any
    /// LSM is asked: `/proc/<pid>/root` of a process holding capabilities the
    /// tool dropped is refused by `ptrace_may_access` before Landlock would
    /// refuse it, so Landlock writes no audit record.
    Credentials,
}

/// A cap whose hit the sandbox records as a [`LimitHit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cap {
    /// `pids.max` refused forks or threads.
    Processes,
    /// The memory cgroup killed the tool.
    Memory,
    /// `RLIMIT_CPU` killed the tool.
    CpuTime,
    /// `RLIMIT_FSIZE` killed the tool (`SIGXFSZ` with its default action).
    FileSize,
}

impl Cap {
    fn hit(self, hits: &[LimitHit]) -> bool {
        hits.iter().any(|h| {
            matches!(
                (self, h),
                (Cap::Processes, LimitHit::Processes { .. })
                    | (Cap::Memory, LimitHit::Memory { .. })
                    | (Cap::CpuTime, LimitHit::CpuTime)
                    | (Cap::FileSize, LimitHit::FileSize)
            )
        })
    }
}

/// What the kernel layer must do with a case under the confined policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Expected {
    /// The filter notifies the supervisor, which records `syscall` and answers `EPERM`.
    Denied {
        /// The recorded call's x86_64 name (`nr:<n>` if the x86_64 table has none).
        syscall: &'static str,
    },
    /// The filter kills the process (foreign architecture, x32 numbers).
    Killed {
        /// The signal (`SIGSYS`).
        signal: i32,
    },
    /// A cap stops it and the run records the hit.
    Capped {
        /// The cap.
        cap: Cap,
    },
    /// No kernel event: `layer` refuses with `errno`, which the probe reports —
    /// the stand-in observable.
    Refused {
        /// The errno the probe must see.
        errno: i32,
        /// The layer that refuses.
        layer: Layer,
    },
    /// No kernel event and no error: the kernel silently drops the effect, and
    /// the fixture's check (`check`) is the stand-in observable.
    Contained {
        /// The layer that drops it.
        layer: Layer,
        /// What the fixture checks.
        check: &'static str,
    },
}

impl Expected {
    /// Whether the kernel gives an event for it (a notification, a limit hit, a signal).
    pub fn recorded_by_kernel(&self) -> bool {
        matches!(
            self,
            Expected::Denied { .. } | Expected::Killed { .. } | Expected::Capped { .. }
        )
    }
}

/// What happens to a case without the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "baseline", content = "reason")]
pub enum Baseline {
    /// It succeeds (as root, under the harness caps and namespaces).
    Succeeds,
    /// It is made so that it fails even unconfined (the reason says how); it runs
    /// to show that it is harmless, and its errno shows how far the kernel let it go.
    FailsByConstruction(&'static str),
    /// It is not run unconfined: no form of it is safe (the reason says why).
    Skipped(&'static str),
}

/// What counts as the attack having worked (besides any change the fixture sees).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "success")]
pub enum Success {
    /// The probe reports `ok`.
    ProbeOk,
    /// The probe's detail contains the fixture's secret.
    Leak,
    /// The probe's errno is one of these argument errors, which the kernel checks
    /// only after the caller's privilege: the privileged call was let through and
    /// only its deliberately invalid argument stopped it.
    PastPermissionCheck {
        /// The argument errors.
        errnos: &'static [i32],
    },
    /// The probe's count `key=N` went past the confined policy's cap.
    Exceeds {
        /// The detail key.
        key: &'static str,
        /// Which cap.
        limit: LimitOf,
    },
    /// Only the fixture can tell (the victim's survival).
    FixtureOnly,
}

/// A limit of the confined policy, for [`Success::Exceeds`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitOf {
    /// `max_processes`.
    Processes,
    /// `max_open_files`.
    OpenFiles,
    /// `max_file_bytes`.
    FileBytes,
    /// `max_memory_bytes`, in MiB.
    MemoryMib,
    /// `cpu_seconds`, in milliseconds.
    CpuMillis,
}

impl LimitOf {
    fn of(self, l: &Limits) -> u64 {
        match self {
            LimitOf::Processes => u64::from(l.max_processes),
            LimitOf::OpenFiles => l.max_open_files,
            LimitOf::FileBytes => l.max_file_bytes,
            LimitOf::MemoryMib => l.max_memory_bytes >> 20,
            LimitOf::CpuMillis => l.cpu_seconds * 1000,
        }
    }
}

/// The policy a case runs under when confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CasePolicy {
    /// [`Fixture::confined_policy`]: runtime + offline.
    Offline,
    /// Runtime + offline + network-client (no port granted).
    NetworkClient,
    /// Runtime + offline + terminal.
    Terminal,
    /// Runtime + offline + python (a Python MCP server's).
    Python,
    /// The offline policy plus these calls (to reach a later layer).
    OfflineWith(&'static [&'static str]),
}

/// What one case needs to build its probe arguments.
#[derive(Debug)]
pub struct CaseContext<'a> {
    /// The fixture.
    pub fixture: &'a Fixture,
    /// The case's id (its directories' name).
    pub id: &'static str,
    /// `outside/<id>/`: `victim.txt`, `dir/`.
    pub outside: PathBuf,
    /// `workspace/<id>/`: `file.txt`, `mnt/`, `old/`, symlinks `to-canary`,
    /// `to-victim`, `race`.
    pub inside: PathBuf,
    /// The victim process.
    pub victim: VictimInfo,
}

impl CaseContext<'_> {
    /// A path in `outside/<id>/`, as an argument.
    pub fn out(&self, name: &str) -> String {
        arg(&self.outside.join(name))
    }

    /// A path in `workspace/<id>/`, as an argument.
    pub fn ins(&self, name: &str) -> String {
        arg(&self.inside.join(name))
    }

    /// A path in `workspace/tools/`, as an argument.
    pub fn tool(&self, name: &str) -> String {
        arg(&self.fixture.workspace().join("tools").join(name))
    }

    /// The canary, as an argument.
    pub fn canary(&self) -> String {
        arg(&self.fixture.canary())
    }

    /// The victim's pid, as an argument.
    pub fn pid(&self) -> String {
        self.victim.pid.to_string()
    }
}

/// A path as a probe argument (fixture paths are UTF-8).
pub fn arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// One attack of the corpus.
#[derive(Debug, Clone)]
pub struct Case {
    /// Stable identifier.
    pub id: &'static str,
    /// What it targets: `network`, `exec`, `fs-read`, `fs-write`, `process`,
    /// `namespace`, `privilege`, `kernel`, `arch`, `resource`.
    pub category: &'static str,
    /// What the attack does.
    pub description: &'static str,
    /// What the kernel layer must do under confinement.
    pub expected: Expected,
    /// What happens without the sandbox.
    pub baseline: Baseline,
    /// What counts as the attack having worked.
    pub success: Success,
    /// The policy it runs under when confined.
    pub policy: CasePolicy,
    /// The `knox-probe` case it runs.
    pub probe: &'static str,
    /// The probe's arguments.
    pub args: fn(&CaseContext<'_>) -> Vec<String>,
}

/// How to run a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Under the case's confined policy: the sandbox under test.
    Confined,
    /// DANGEROUS: the baseline without Landlock, seccomp or the capability drop
    /// (see the module docs for the harness that still caps it).
    DangerousUnconfined,
}

/// The probe's one-line JSON report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// The probe case.
    pub case: String,
    /// Whether the operation succeeded.
    pub ok: bool,
    /// The errno it failed with.
    pub errno: Option<i32>,
    /// Case-specific detail.
    pub detail: Option<String>,
}

/// The judgement of one run of one case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CaseResult {
    /// The case.
    pub id: &'static str,
    /// How it ran.
    pub mode: Mode,
    /// `Some(reason)` if it was not run (an unconfined baseline that is unsafe).
    pub skipped: Option<&'static str>,
    /// Whether the attack worked: by the case's [`Success`], or by a change the
    /// fixture saw (a file outside the workspace changed; the victim died, stopped,
    /// is traced, or its secret changed).
    pub attack_succeeded: bool,
    /// Denied calls the supervisor recorded.
    pub denied: Vec<DeniedSyscall>,
    /// Limits the run hit.
    pub limit_hits: Vec<LimitHit>,
    /// The signal that ended the probe.
    pub signal: Option<i32>,
    /// Whether the kernel gave an observable event matching the expectation
    /// (a notification of the expected call, the expected limit hit or signal,
    /// Landlock's audit record of a denial).
    pub recorded: bool,
    /// Whether Landlock's audit records were read for this run (ABI ≥ 7 with
    /// the kernel's audit enabled): then Landlock's denials are kernel events.
    pub landlock_audited: bool,
    /// What was read of them, and what may have been lost.
    pub landlock_audit: Option<AuditReport>,
    /// For cases without a kernel event: the stand-in observable, and whether
    /// it was seen.
    pub stand_in: Option<String>,
    /// Whether what was observed is what [`Case::expected`] says (confined runs).
    pub as_expected: bool,
    /// The probe's report, if it printed one.
    pub probe: Option<ProbeReport>,
    /// A one-line summary for reports.
    pub detail: String,
}

/// Why a case could not be run.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The sandbox refused to start the probe.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The case's policy is invalid.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A fixture operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The victim process did not start or report its secret's address.
    #[error("the victim process did not start")]
    Victim,
}

impl CorpusError {
    fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> CorpusError {
        move |source| CorpusError::Io { what, source }
    }
}

/// Runs `case` once in `mode` against `fixture` and judges the result.
pub fn run_case(
    fixture: &Fixture,
    sandbox: &Sandbox,
    case: &Case,
    mode: Mode,
) -> Result<CaseResult, CorpusError> {
    if let (Mode::DangerousUnconfined, Baseline::Skipped(reason)) = (mode, case.baseline) {
        return Ok(skipped(case, mode, reason));
    }
    let victim = fixture.victim()?;
    let (outside, inside) = fixture.prepare_case(case.id)?;
    let ctx = CaseContext {
        fixture,
        id: case.id,
        outside,
        inside,
        victim,
    };
    let mut argv = vec![arg(fixture.probe()), case.probe.to_owned()];
    argv.extend((case.args)(&ctx));
    let before = fixture.snapshot(&ctx.outside);
    let outcome = spawn(fixture, sandbox, case, mode, &argv);
    let after = fixture.snapshot(&ctx.outside);
    let victim_harmed = !fixture.victim_intact();
    fixture.clean_case(case.id);
    let outcome = outcome?;
    let probe = report(&outcome);
    let changed = before != after;
    Ok(judge(
        case,
        mode,
        fixture.limits(),
        fixture.secret(),
        &outcome,
        probe,
        changed,
        victim_harmed,
    ))
}

fn spawn(
    fixture: &Fixture,
    sandbox: &Sandbox,
    case: &Case,
    mode: Mode,
    argv: &[String],
) -> Result<Outcome, CorpusError> {
    let child = match mode {
        Mode::Confined => {
            let policy = fixture.case_policy(case.policy)?;
            sandbox.spawn(&policy, argv, &[], b"")?
        }
        Mode::DangerousUnconfined => {
            let limits = fixture.harness_limits();
            sandbox.dangerous_spawn_limits_only(&fixture.workspace(), &limits, argv, &[])?
        }
    };
    Ok(child.wait_timeout(CASE_TIMEOUT)?)
}

fn report(outcome: &Outcome) -> Option<ProbeReport> {
    let text = String::from_utf8_lossy(&outcome.stdout);
    serde_json::from_str(text.lines().last()?).ok()
}

fn skipped(case: &Case, mode: Mode, reason: &'static str) -> CaseResult {
    CaseResult {
        id: case.id,
        mode,
        skipped: Some(reason),
        attack_succeeded: false,
        denied: Vec::new(),
        limit_hits: Vec::new(),
        signal: None,
        recorded: false,
        landlock_audited: false,
        landlock_audit: None,
        stand_in: None,
        as_expected: false,
        probe: None,
        detail: format!("not run: {reason}"),
    }
}

/// Whether the probe's own report says the attack worked.
fn probe_success(
    success: Success,
    probe: Option<&ProbeReport>,
    limits: &Limits,
    secret: &str,
) -> bool {
    let Some(p) = probe else {
        return false;
    };
    match success {
        Success::ProbeOk => p.ok,
        Success::Leak => p.ok && p.detail.as_deref().is_some_and(|d| d.contains(secret)),
        Success::PastPermissionCheck { errnos } => {
            p.ok || p.errno.is_some_and(|e| errnos.contains(&e))
        }
        Success::Exceeds { key, limit } => count(p, key).is_some_and(|n| n > limit.of(limits)),
        Success::FixtureOnly => false,
    }
}

/// `key=N` from the probe's detail.
fn count(p: &ProbeReport, key: &str) -> Option<u64> {
    let detail = p.detail.as_deref()?;
    detail.split_whitespace().find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.parse().ok()).flatten()
    })
}

/// Whether Landlock's audit stream gave a denial of the attack: any Landlock
/// record of the run other than the Rust runtime's start-up read of the probe's
/// own `/proc/<pid>/maps` (glibc's `pthread_getattr_np` for the main thread's
/// stack guard), which every confined Rust program makes and Landlock denies.
fn landlock_recorded(outcome: &Outcome) -> bool {
    outcome.denied.iter().any(|d| {
        d.landlock.as_ref().is_some_and(|l| {
            let own_maps = format!("path=/proc/{}/maps ", d.pid);
            !(l.blockers == ["fs.read_file"] && l.object.starts_with(&own_maps))
        })
    })
}

#[expect(
    clippy::too_many_arguments,
    reason = "one judgement from every observable"
)]
fn judge(
    case: &Case,
    mode: Mode,
    limits: &Limits,
    secret: &str,
    outcome: &Outcome,
    probe: Option<ProbeReport>,
    changed: bool,
    victim_harmed: bool,
) -> CaseResult {
    let attack_succeeded =
        probe_success(case.success, probe.as_ref(), limits, secret) || changed || victim_harmed;
    let errno = probe.as_ref().and_then(|p| p.errno);
    let (recorded, stand_in, matched) = match case.expected {
        Expected::Denied { syscall } => {
            let seen = outcome.denied.iter().any(|d| d.name == syscall);
            (seen, None, seen)
        }
        Expected::Killed { signal } => {
            let seen = outcome.signal == Some(signal);
            (seen, None, seen)
        }
        Expected::Capped { cap } => {
            let seen = cap.hit(&outcome.limit_hits);
            (seen, None, seen)
        }
        // Landlock's own audit record of the denial (ABI ≥ 7, audit read) is the
        // kernel event; without it the errno or the fixture's check stands in.
        Expected::Refused {
            layer: Layer::Landlock,
            ..
        }
        | Expected::Contained {
            layer: Layer::Landlock,
            ..
        } if landlock_recorded(outcome) => (true, None, !attack_succeeded),
        Expected::Refused { errno: want, layer } => {
            let seen = errno == Some(want);
            let note = format!("{layer:?}: probe saw errno {errno:?}, expected {want}");
            (false, Some(note), seen)
        }
        Expected::Contained { layer, check } => {
            let note = format!("{layer:?}: {check}: {}", !attack_succeeded);
            (false, Some(note), !attack_succeeded)
        }
    };
    let detail = format!(
        "probe={} errno={errno:?} signal={:?} denied=[{}] hits={:?} changed={changed} victim_harmed={victim_harmed}",
        probe
            .as_ref()
            .map_or("none".to_owned(), |p| p.ok.to_string()),
        outcome.signal,
        outcome
            .denied
            .iter()
            .map(|d| match &d.landlock {
                Some(l) => format!("{}[landlock {} {}]", d.name, l.blockers.join(","), l.object),
                None => d.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(","),
        outcome.limit_hits,
    );
    CaseResult {
        id: case.id,
        mode,
        skipped: None,
        attack_succeeded,
        denied: outcome.denied.clone(),
        limit_hits: outcome.limit_hits.clone(),
        signal: outcome.signal,
        recorded,
        landlock_audited: outcome.landlock_audit.is_some(),
        landlock_audit: outcome.landlock_audit.clone(),
        stand_in,
        as_expected: matched && !attack_succeeded,
        probe,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ok: bool, errno: Option<i32>, detail: &str) -> ProbeReport {
        ProbeReport {
            case: "t".into(),
            ok,
            errno,
            detail: Some(detail.into()),
        }
    }

    #[test]
    fn success_is_read_from_the_probe_report() {
        let limits = Fixture::tool_limits();
        let judge = |s, r: &ProbeReport| probe_success(s, Some(r), &limits, "SECRET");
        assert!(judge(Success::Leak, &report(true, None, "xSECRETx")));
        assert!(!judge(Success::Leak, &report(true, None, "decoy")));
        let past = Success::PastPermissionCheck { errnos: &[22] };
        assert!(judge(past, &report(false, Some(22), "")));
        assert!(!judge(past, &report(false, Some(1), "")));
        let forks = Success::Exceeds {
            key: "forked",
            limit: LimitOf::Processes,
        };
        assert!(judge(forks, &report(true, None, "forked=64")));
        assert!(!judge(forks, &report(false, Some(11), "forked=31")));
        assert!(!judge(forks, &report(false, Some(11), "forked=32")));
        assert!(!judge(Success::FixtureOnly, &report(true, None, "")));
        assert!(!probe_success(Success::ProbeOk, None, &limits, "SECRET"));
    }
}
