//! seccomp: calls outside the allowlist are denied with EPERM and recorded by name and number.

use std::process::{Command, Stdio};

use knox_sandbox::Family;

use super::support::{EPERM, Fixture, TestResult, denied, run, s};
use crate::require_kernel;

/// (probe case, args, syscall name, x86_64 number)
const DENIED: &[(&str, &[&str], &str, i32)] = &[
    ("unshare", &[], "unshare", 272),
    ("clone-newns", &[], "clone", 56),
    ("setns", &[], "setns", 308),
    ("setuid", &["65534"], "setuid", 105),
    ("capset", &[], "capset", 126),
    ("keyctl", &[], "keyctl", 250),
    ("bpf", &[], "bpf", 321),
    ("perf-event-open", &[], "perf_event_open", 298),
    ("io-uring-setup", &[], "io_uring_setup", 425),
    ("userfaultfd", &[], "userfaultfd", 323),
    ("personality", &[], "personality", 135),
    ("init-module", &[], "init_module", 175),
    ("chroot", &["/"], "chroot", 161),
    ("umount", &["/nonexistent-knox-mount"], "umount2", 166),
];

#[test]
fn privileged_calls_are_denied_and_recorded_by_name_and_number() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let policy = fx.policy(&[Family::Offline, Family::NetworkClient])?;
    for (case, args, name, nr) in DENIED {
        let mut argv = vec![*case];
        argv.extend_from_slice(args);
        let (outcome, probe) = run(&policy, &argv)?;
        let probe = probe.ok_or("no probe output")?;
        assert_eq!(probe.errno, Some(EPERM), "{case}: {outcome:?}");
        let events = denied(&outcome, name);
        assert_eq!(events.len(), 1, "{case}: {:?}", outcome.denied);
        assert_eq!(events.first().map(|e| e.nr), Some(*nr));
    }
    Ok(())
}

#[test]
fn mount_on_a_temp_dir_is_denied_with_decoded_paths() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let target = fx.workspace.join("mnt");
    std::fs::create_dir(&target)?;
    let (outcome, probe) = run(&fx.policy(&[Family::Offline])?, &["mount", s(&target)])?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    let mounts = denied(&outcome, "mount");
    let event = mounts.first().ok_or("mount not recorded")?;
    assert_eq!(event.nr, 165);
    let decoded = event.decoded.as_deref().unwrap_or_default();
    assert!(decoded.contains(&format!("target={target:?}")), "{decoded}");
    assert!(decoded.contains("fstype=\"knox-no-such-fs\""), "{decoded}");
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(!mounted.contains(s(&target)), "nothing may be left mounted");
    Ok(())
}

#[test]
fn ptrace_attach_to_a_process_the_test_started_is_denied() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut sleeper = Command::new("/bin/sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()?;
    let pid = sleeper.id().to_string();
    let result = run(&fx.policy(&[Family::Offline])?, &["ptrace-attach", &pid]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let (outcome, probe) = result?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    let event = denied(&outcome, "ptrace");
    assert_eq!(
        event.first().map(|e| (e.nr, e.args[1])),
        Some((101, pid.parse()?)),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn signals_to_processes_outside_the_sandbox_are_denied() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut sleeper = Command::new("/bin/sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()?;
    let pid = sleeper.id().to_string();
    // The terminal family lists `kill`; Landlock's signal scope still stops it.
    let result = run(&fx.policy(&[Family::Terminal])?, &["kill", &pid, "9"]);
    let alive = sleeper.try_wait()?.is_none();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let (_, probe) = result?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    assert!(alive, "the test's own process must survive");
    Ok(())
}

#[test]
fn x32_system_calls_kill_the_process() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let (outcome, probe) = run(&fx.policy(&[])?, &["x32-getpid"])?;
    assert!(probe.is_none(), "the probe must not survive an x32 call");
    assert_eq!(outcome.signal, Some(31), "SIGSYS: {outcome:?}");
    Ok(())
}

#[test]
fn denials_stream_while_the_tool_runs() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = knox_sandbox::Sandbox::new(knox_sandbox::SandboxConfig::default())?;
    let argv = [s(&super::support::probe()).to_owned(), "bpf".into()];
    let mut child = sandbox.spawn(&fx.policy(&[])?, &argv, &[], b"")?;
    let events = child.denied_events().ok_or("no stream")?;
    let outcome = child.wait()?;
    let streamed: Vec<_> = events.try_iter().collect();
    // Each source in its own order; Landlock's audit records (ABI 7, audit on)
    // arrive later than the supervisor's and follow them in the outcome.
    let split = |v: &[knox_sandbox::DeniedSyscall]| {
        let (seccomp, landlock): (Vec<_>, Vec<_>) =
            v.iter().cloned().partition(|d| d.landlock.is_none());
        (seccomp, landlock)
    };
    assert_eq!(split(&streamed), split(&outcome.denied));
    let (seccomp, _) = split(&streamed);
    assert_eq!(seccomp.first().map(|e| e.name.as_str()), Some("bpf"));
    Ok(())
}

#[test]
fn prlimit_on_another_process_is_denied_but_on_itself_allowed() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut sleeper = Command::new("/bin/sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()?;
    let pid = sleeper.id().to_string();
    let policy = fx.policy(&[])?;
    let other = run(&policy, &["prlimit-other", &pid]);
    let own = run(&policy, &["prlimit-self"]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let (outcome, probe) = other?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    assert_eq!(denied(&outcome, "prlimit64").len(), 1, "{outcome:?}");
    assert!(own?.1.ok_or("no probe output")?.ok);
    Ok(())
}

#[test]
fn the_tool_holds_no_capability_even_as_root() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let mut policy = fx.policy(&[])?;
    policy.syscalls.insert("capget".into());
    let (outcome, probe) = run(&policy, &["capget"])?;
    let probe = probe.ok_or("no probe output")?;
    assert!(probe.ok, "{outcome:?}");
    assert_eq!(
        probe.detail.as_deref(),
        Some("effective=0x0 permitted=0x0 inheritable=0x0")
    );
    Ok(())
}
