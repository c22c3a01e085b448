//! The unmediated-attack corpus: every case confined (all prevented, all observed) and the unconfined baseline (safe, mostly successful).

use std::collections::BTreeSet;

use knox_attacks::{self as corpus, Baseline, CaseResult, Expected, Fixture, Mode};
use knox_sandbox::{Sandbox, SandboxConfig};

use super::support::{TestResult, probe};
use crate::require_kernel;

/// Cases the kernel gives no event for, and what stands in: the errno the probe
/// reports (Landlock, the filter's fixed `ENOSYS`, an rlimit) or the fixture's
/// check. Keep in sync with the table: the test fails on any difference.
const STAND_INS: &[&str] = &[
    "net-client-abstract-connect",
    "read-canary",
    "read-canary-dotdot",
    "read-canary-symlink",
    "read-canary-hardlink",
    "read-canary-proc-self-root",
    "read-canary-proc-victim-root",
    "read-canary-symlink-race",
    "list-outside-dir",
    "read-victim-environ",
    "write-outside",
    "append-outside",
    "create-outside",
    "truncate-outside",
    "rename-out-of-outside",
    "rename-over-outside",
    "rename-exchange-outside",
    "unlink-outside",
    "link-into-outside",
    "symlink-outside",
    "mkdir-outside",
    "rmdir-outside",
    "write-through-symlink",
    "write-dotdot",
    "write-readonly-grant",
    "write-proc-self-mem",
    "write-proc-self-attr",
    "write-proc-self-oom-score-adj",
    "write-proc-self-setgroups",
    "write-victim-proc-mem",
    "cgroup-escape",
    "kill-victim-terminal",
    "tgkill-victim",
    "sigio-victim",
    "clone3-newns",
    "tiocsti",
    "file-size-bomb",
    "fd-exhaust",
];

/// The stand-ins left when Landlock's audit records are read (ABI 7, audit on):
/// what Landlock did not decide — the credential check before it, the filter's
/// fixed `ENOSYS`, the rlimits.
const NOT_LANDLOCK: &[&str] = &[
    "read-canary-proc-victim-root",
    "clone3-newns",
    "file-size-bomb",
    "fd-exhaust",
];

/// Whether one result must be a stand-in: without Landlock's records every
/// Landlock refusal is one, with them only what Landlock did not decide. `None`
/// when records may be missing (the kernel or the reader lost some, or the
/// barrier did not come back: e.g. another test turned the kernel's audit off
/// meanwhile) — then either is accepted, and the ABI test lists the run.
fn expected_stand_in(r: &corpus::CaseResult) -> Option<bool> {
    let list = match &r.landlock_audit {
        None => STAND_INS,
        Some(a) if a.barrier && a.kernel_lost == 0 && a.reader_overruns == 0 => NOT_LANDLOCK,
        Some(_) => return None,
    };
    Some(list.contains(&r.id))
}

/// Runs every case in `mode` with a fresh fixture; also returns the fixture's
/// root (gone by then), which every probe's command line names.
fn run_all(mode: Mode) -> Result<(Vec<CaseResult>, String), Box<dyn std::error::Error>> {
    let fixture = Fixture::new(probe())?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut results = Vec::new();
    for case in corpus::cases() {
        results.push(corpus::run_case(&fixture, &sandbox, &case, mode)?);
    }
    let root = fixture
        .workspace()
        .parent()
        .map(corpus::arg)
        .unwrap_or_default();
    Ok((results, root))
}

/// A signal an attack sent is judged with the case that sent it, never with the
/// next: an unconfined `kill` of the victim, or a `SIGTERM` it has the kernel send
/// through `SIGIO`, counts as a success, and a confined attack run right after it —
/// on a victim restarted because the signal took effect — as prevented, however
/// slowly the victim dies (the fixture's echo barrier; before it, a victim still
/// dying when the unconfined case was judged counted as intact then and as harmed
/// after the confined one).
#[test]
fn a_signal_is_judged_with_the_case_that_sent_it() -> TestResult {
    require_kernel!();
    // Four fixtures at once keep the machine's cores busy, as concurrent corpus runs
    // do: a victim is then not always scheduled to die before it is looked at.
    let rounds = || -> Result<(), String> {
        let fixture = Fixture::new(probe()).map_err(|e| e.to_string())?;
        let sandbox = Sandbox::new(SandboxConfig::default()).map_err(|e| e.to_string())?;
        let cases = corpus::cases();
        let run = |id, mode| {
            let case = cases
                .iter()
                .find(|c| c.id == id)
                .ok_or(format!("no case {id}"))?;
            corpus::run_case(&fixture, &sandbox, case, mode).map_err(|e| e.to_string())
        };
        for round in 0..20 {
            for id in ["kill-victim", "sigio-victim"] {
                let sent = run(id, Mode::DangerousUnconfined)?;
                if !sent.attack_succeeded {
                    return Err(format!("round {round}: {id} unconfined: {}", sent.detail));
                }
                let r = run(id, Mode::Confined)?;
                if r.attack_succeeded || !r.as_expected {
                    return Err(format!("round {round}: {id} confined: {}", r.detail));
                }
            }
        }
        Ok(())
    };
    let results: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4).map(|_| s.spawn(rounds)).collect();
        runs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a round panicked".into())))
            .collect()
    });
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    Ok(())
}

#[test]
fn every_attack_is_prevented_and_observed_when_confined() -> TestResult {
    require_kernel!();
    let cases = corpus::cases();
    let (results, _) = run_all(Mode::Confined)?;
    let cgroups = Sandbox::new(SandboxConfig::default())?
        .cgroup_version()
        .is_some();
    let mut failures = Vec::new();
    for (case, r) in cases.iter().zip(&results) {
        // Without cgroups (non-root callers) pids.max and memory.max are RLIMIT_NPROC
        // and RLIMIT_AS: the attack is still stopped, but no hit is counted.
        let uncounted = !cgroups
            && matches!(
                case.expected,
                Expected::Capped {
                    cap: corpus::Cap::Processes | corpus::Cap::Memory
                }
            );
        let observed = r.as_expected || (uncounted && !r.attack_succeeded);
        if r.attack_succeeded || !observed {
            failures.push(format!("{}: {}", r.id, r.detail));
        }
        if case.expected.recorded_by_kernel() && !uncounted {
            assert!(r.recorded && r.stand_in.is_none(), "{}: {r:?}", r.id);
        }
    }
    assert!(
        failures.is_empty(),
        "not prevented or not as expected:\n{}",
        failures.join("\n")
    );
    let stand_ins: BTreeSet<&str> = results
        .iter()
        .filter(|r| r.stand_in.is_some())
        .map(|r| r.id)
        .collect();
    let expected: BTreeSet<&str> = results
        .iter()
        .filter(|r| expected_stand_in(r).unwrap_or(r.stand_in.is_some()))
        .map(|r| r.id)
        .collect();
    assert_eq!(stand_ins, expected);
    let recorded = results.iter().filter(|r| r.recorded).count();
    println!(
        "confined: {} cases, {} prevented, {recorded} recorded by a kernel event, {} by a stand-in \
         ({} runs with Landlock's audit records read)",
        results.len(),
        results.iter().filter(|r| !r.attack_succeeded).count(),
        stand_ins.len(),
        results.iter().filter(|r| r.landlock_audited).count(),
    );
    Ok(())
}

/// What must not change on the host while the baseline runs.
fn host_state() -> Vec<String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    vec![
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/domainname"),
        read("/proc/swaps"),
        read("/proc/self/mountinfo"),
        read("/proc/modules"),
    ]
}

#[test]
fn the_unconfined_baseline_is_safe_and_shows_what_the_sandbox_prevents() -> TestResult {
    require_kernel!();
    if knox_sandbox_is_root() {
        baseline()
    } else {
        eprintln!("SKIPPED: the unconfined baseline needs root (its namespaces and caps)");
        Ok(())
    }
}

fn knox_sandbox_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

fn baseline() -> TestResult {
    let before = host_state();
    let cases = corpus::cases();
    let (results, root) = run_all(Mode::DangerousUnconfined)?;
    assert_eq!(host_state(), before, "the baseline changed the host");
    assert!(
        !root.is_empty() && !std::path::Path::new(&root).exists(),
        "fixture left behind"
    );
    let leftovers: Vec<String> = std::fs::read_dir("/proc")?
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&root))
        .collect();
    assert!(
        leftovers.is_empty(),
        "processes outlived the baseline: {leftovers:?}"
    );
    let mut expected_to_succeed = 0;
    let mut succeeded = Vec::new();
    let mut did_not = Vec::new();
    for (case, r) in cases.iter().zip(&results) {
        match case.baseline {
            Baseline::Skipped(_) => assert!(r.skipped.is_some(), "{}", r.id),
            Baseline::FailsByConstruction(_) => {
                assert!(
                    !r.attack_succeeded,
                    "{} must fail by construction: {}",
                    r.id, r.detail
                );
            }
            Baseline::Succeeds => {
                expected_to_succeed += 1;
                if r.attack_succeeded {
                    succeeded.push(r.id);
                } else {
                    did_not.push(format!("{}: {}", r.id, r.detail));
                }
            }
        }
    }
    println!(
        "unconfined: {} of {expected_to_succeed} attacks expected to succeed did:\n  {}\nthese did not (kernel configuration or missing capabilities here):\n  {}",
        succeeded.len(),
        succeeded.join(" "),
        did_not.join("\n  ")
    );
    // The attacks that need nothing more than root and a stock kernel.
    for core in [
        "net-connect-tcp4",
        "net-client-fastopen",
        "exec-unlisted-binary",
        "exec-memfd",
        "read-canary",
        "read-canary-symlink-race",
        "write-outside",
        "chmod-outside",
        "ptrace-attach-victim",
        "vm-readv-victim",
        "kill-victim",
        "mount-tmpfs",
        "sethostname",
        "i386-getpid",
        "fork-bomb",
        "memory-bomb",
    ] {
        assert!(succeeded.contains(&core), "{core} must succeed unconfined");
    }
    assert!(
        succeeded.len() * 4 >= expected_to_succeed * 3,
        "only {} of {expected_to_succeed} succeeded unconfined",
        succeeded.len()
    );
    Ok(())
}

/// The corpus at every Landlock ABI from 1 to 7, capped on this kernel: every
/// attack prevented, or the whole run refused naming the missing feature. Levels
/// above the kernel's own run at the kernel's ABI (the cap cannot raise it).
#[test]
fn every_landlock_abi_level_prevents_the_corpus_or_refuses() -> TestResult {
    use knox_attacks::CorpusError;
    use knox_sandbox::ruleset::LandlockError;
    use knox_sandbox::{Layer, Protection, SandboxError};
    require_kernel!();
    // Opt in to the kernel's audit (root, ABI 7): at ABI 7 Landlock's own
    // records must then make every Landlock refusal a kernel event.
    let audit = super::support::AuditOn::take()?;
    let fixture = Fixture::new(probe())?;
    let cases = corpus::cases();
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for cap in 1..=7_u8 {
        let sandbox = Sandbox::new(SandboxConfig {
            landlock_abi_max: Some(cap),
            ..SandboxConfig::default()
        })?;
        let policy = fixture.confined_policy()?;
        let layers = sandbox.prepare(&policy)?.layers().clone();
        assert_eq!(
            layers.landlock_abi,
            cap.min(layers.landlock_abi_kernel),
            "the cap must set the ABI in use"
        );
        let (mut prevented, mut refused, mut recorded) = (0, Vec::new(), 0);
        let audited = audit.is_some() && layers.landlock_abi >= 7;
        // Runs whose Landlock records may be incomplete (the kernel or the reader
        // lost records meanwhile): reported, not hidden.
        let mut incomplete = Vec::new();
        for case in &cases {
            match corpus::run_case(&fixture, &sandbox, case, Mode::Confined) {
                Ok(r) if r.attack_succeeded => {
                    failures.push(format!("abi {cap}: {}: {}", r.id, r.detail))
                }
                Ok(r) => {
                    prevented += 1;
                    recorded += usize::from(r.recorded);
                    if let Some(a) = r.landlock_audit.as_ref().filter(|a| !a.complete()) {
                        incomplete.push(format!("{}: {a:?}", r.id));
                    }
                    // Before ABI 7 nothing is read; at 7 (audit on) everything is.
                    if r.landlock_audited != audited
                        || expected_stand_in(&r).is_some_and(|s| s != r.stand_in.is_some())
                    {
                        failures.push(format!(
                            "abi {cap}: {}: audited={} (expected {audited}), stand-in {:?}: {}",
                            r.id, r.landlock_audited, r.stand_in, r.detail
                        ));
                    }
                }
                Err(CorpusError::Sandbox(SandboxError::Landlock(LandlockError::Layers(e)))) => {
                    refused.push(format!("{}: {e}", case.id));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let not_landlock: Vec<String> = layers
            .enforced_by
            .iter()
            .filter(|(_, l)| **l != Layer::Landlock)
            .map(|(p, l)| format!("{p:?}={l:?}"))
            .collect();
        assert!(
            layers.landlock_abi >= 6
                || layers.enforced_by.get(&Protection::Signals) == Some(&Layer::SupervisorDeny)
        );
        if !incomplete.is_empty() {
            println!(
                "abi {cap}: Landlock records not all kept (lost, or past the cap): {incomplete:?}"
            );
        }
        table.push(format!(
            "| {cap} | {} | {prevented}/{} | {} | {recorded} | {} |",
            layers.landlock_abi,
            cases.len(),
            refused.len(),
            if not_landlock.is_empty() {
                "all Landlock".to_owned()
            } else {
                not_landlock.join(", ")
            }
        ));
    }
    println!(
        "| cap | ABI in use | prevented | refused | recorded by a kernel event | layers other than Landlock |\n|---|---|---|---|---|---|\n{}",
        table.join("\n")
    );
    assert!(
        failures.is_empty(),
        "attacks that succeeded, or recorded otherwise than expected:\n{}",
        failures.join("\n")
    );
    Ok(())
}
