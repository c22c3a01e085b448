//! rlimits and cgroups: process, file-size, memory, CPU, descriptor and wall-clock caps.

use std::time::Duration;

use knox_sandbox::{Family, LimitHit, Sandbox, SandboxConfig};

use super::support::{Fixture, TestResult, probe, run, run_with, s};
use crate::require_kernel;

const EFBIG: i32 = 27;
const EAGAIN: i32 = 11;
const EMFILE: i32 = 24;

fn cgroups_or_skip(sandbox: &Sandbox) -> bool {
    if sandbox.cgroup_version().is_none() {
        eprintln!("SKIPPED: no cgroups (not root?): pids.max/memory caps are not in force");
        return false;
    }
    true
}

/// As root the cap is the cgroup's `pids.max` (`RLIMIT_NPROC` does not bind root);
/// as any other user without cgroups it is `RLIMIT_NPROC` in a fresh user namespace.
#[test]
fn fork_bomb_is_capped() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut policy = fx.policy(&[])?;
    policy.limits.max_processes = 20;
    let (outcome, probe) = run_with(&sandbox, &policy, &["fork-bomb", "200"])?;
    let probe = probe.ok_or("no probe output")?;
    assert_eq!(probe.errno, Some(EAGAIN), "{outcome:?}");
    let forked: u32 = probe
        .detail
        .as_deref()
        .and_then(|d| d.strip_prefix("forked="))
        .ok_or("detail")?
        .parse()?;
    assert!(forked < 20, "forked {forked}");
    if sandbox.cgroup_version().is_some() {
        assert!(
            outcome
                .limit_hits
                .iter()
                .any(|h| matches!(h, LimitHit::Processes { .. })),
            "{outcome:?}"
        );
    } else {
        assert!(
            outcome.enforcement.user_namespace,
            "{:?}",
            outcome.enforcement
        );
    }
    Ok(())
}

#[test]
fn thread_bomb_is_capped_by_pids_max() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    if !cgroups_or_skip(&sandbox) {
        return Ok(());
    }
    let mut policy = fx.policy(&[])?;
    policy.limits.max_processes = 30;
    let (outcome, probe) = run_with(&sandbox, &policy, &["thread-bomb", "500"])?;
    let probe = probe.ok_or("no probe output")?;
    assert!(!probe.ok, "{outcome:?}");
    let threads: u32 = probe
        .detail
        .as_deref()
        .and_then(|d| d.strip_prefix("threads="))
        .ok_or("detail")?
        .parse()?;
    assert!(threads < 30, "started {threads}");
    Ok(())
}

#[test]
fn writing_past_rlimit_fsize_fails_with_efbig() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut policy = fx.policy(&[Family::Offline])?;
    policy.limits.max_file_bytes = 1 << 20;
    let big = fx.workspace.join("big.bin");
    let (outcome, probe) = run(&policy, &["file-size-bomb", s(&big), "8388608"])?;
    let probe = probe.ok_or("no probe output")?;
    assert_eq!(probe.errno, Some(EFBIG), "{outcome:?}");
    assert_eq!(std::fs::metadata(&big)?.len(), 1 << 20);
    assert!(
        outcome.success(),
        "SIGXFSZ is ignored, so the tool survives: {outcome:?}"
    );
    Ok(())
}

#[test]
fn memory_bomb_is_killed_by_the_memory_cgroup() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    if !cgroups_or_skip(&sandbox) {
        return Ok(());
    }
    let mut policy = fx.policy(&[])?;
    policy.limits.max_memory_bytes = 64 << 20;
    let (outcome, probe) = run_with(&sandbox, &policy, &["memory-bomb", "512"])?;
    assert!(probe.is_none(), "the bomb must not finish: {probe:?}");
    assert_eq!(outcome.signal, Some(9), "{outcome:?}");
    assert!(
        outcome
            .limit_hits
            .iter()
            .any(|h| matches!(h, LimitHit::Memory { .. })),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn cpu_spin_is_stopped_by_rlimit_cpu() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut policy = fx.policy(&[])?;
    policy.limits.cpu_seconds = 1;
    let (outcome, probe) = run(&policy, &["cpu-spin", "30"])?;
    assert!(probe.is_none(), "{probe:?}");
    assert!(
        matches!(outcome.signal, Some(24 | 9)),
        "SIGXCPU or SIGKILL: {outcome:?}"
    );
    assert!(
        outcome.limit_hits.contains(&LimitHit::CpuTime),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn descriptor_exhaustion_stops_at_rlimit_nofile() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut policy = fx.policy(&[])?;
    policy.limits.max_open_files = 32;
    let (_, probe) = run(&policy, &["fd-exhaust", "10000"])?;
    let probe = probe.ok_or("no probe output")?;
    assert_eq!(probe.errno, Some(EMFILE));
    let opened: u32 = probe
        .detail
        .as_deref()
        .and_then(|d| d.strip_prefix("opened="))
        .ok_or("detail")?
        .parse()?;
    assert!(opened < 32, "opened {opened}");
    Ok(())
}

/// Processes whose command line contains `token`.
fn survivors(token: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(token))
        .collect()
}

#[test]
fn timeout_kills_the_whole_tree() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig {
        timeout: Duration::from_millis(500),
        ..SandboxConfig::default()
    })?;
    // Children that never exit on their own, then a parent that spins past the timeout.
    let token = s(&fx.workspace).to_owned();
    let argv = [
        s(&probe()).to_owned(),
        "fork-then-spin".into(),
        "4".into(),
        "30".into(),
        token.clone(),
    ];
    let outcome = sandbox.spawn(&fx.policy(&[])?, &argv, &[], b"")?.wait()?;
    assert_eq!(outcome.signal, Some(9), "{outcome:?}");
    assert!(
        outcome
            .limit_hits
            .iter()
            .any(|h| matches!(h, LimitHit::WallClock { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        survivors(&token),
        Vec::<String>::new(),
        "nothing may outlive the tool"
    );
    Ok(())
}

#[test]
fn cgroups_are_reused_and_removed_on_drop() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let config = SandboxConfig {
        pool_prefill: 1,
        ..SandboxConfig::default()
    };
    let sandbox = Sandbox::new(config)?;
    if !cgroups_or_skip(&sandbox) {
        return Ok(());
    }
    let policy = fx.policy(&[])?;
    for _ in 0..3 {
        let (outcome, probe) = run_with(&sandbox, &policy, &["true"])?;
        assert!(probe.ok_or("no probe output")?.ok, "{outcome:?}");
    }
    let pools = sandbox.cgroup_pool_dirs();
    assert!(!pools.is_empty());
    for pool in &pools {
        let slots = std::fs::read_dir(pool)?
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .count();
        assert_eq!(
            slots, 1,
            "three sequential runs must reuse one cgroup in {pool:?}"
        );
    }
    drop(sandbox);
    for pool in &pools {
        assert!(!pool.exists(), "{pool:?} must be removed on drop");
    }
    Ok(())
}
