//! execve: only binaries under an execute grant run; denials are recorded with the path.

use knox_sandbox::{Access, Family, Sandbox, SandboxConfig, SandboxError, SandboxPolicy};

use super::support::{EPERM, Fixture, TestResult, denied, probe, run, s, seccomp_denied};
use crate::require_kernel;

#[test]
fn exec_of_an_unlisted_binary_is_denied_and_recorded_with_its_path() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let (outcome, result) = run(&fx.policy(&[Family::Offline])?, &["exec", "/usr/bin/id"])?;
    let result = result.ok_or("no probe output")?;
    assert_eq!(result.errno, Some(EPERM), "{outcome:?}");
    let execs = denied(&outcome, "execve");
    assert_eq!(execs.len(), 1, "{outcome:?}");
    let event = execs.first().ok_or("no event")?;
    assert_eq!(event.nr, 59);
    assert_eq!(event.decoded.as_deref(), Some("path=\"/usr/bin/id\""));
    Ok(())
}

#[test]
fn exec_of_a_granted_binary_runs() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let policy = fx
        .policy(&[Family::Offline])?
        .grant("/usr/bin/true", &[Access::Read, Access::Execute]);
    let (outcome, result) = run(&policy, &["exec", "/usr/bin/true"])?;
    let result = result.ok_or("no probe output")?;
    assert!(result.ok, "{outcome:?}");
    assert_eq!(result.detail.as_deref(), Some("status=Some(0) stdout="));
    Ok(())
}

#[test]
fn relative_exec_is_decoded_against_the_working_directory() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    std::fs::copy("/usr/bin/true", fx.workspace.join("tool"))?;
    let (outcome, _) = run(&fx.policy(&[Family::Offline])?, &["exec", "./tool"])?;
    let execs = denied(&outcome, "execve");
    let want = format!("path={:?}", fx.workspace.join("./tool"));
    assert_eq!(
        execs.first().and_then(|d| d.decoded.as_deref()),
        Some(want.as_str()),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn spawning_a_program_outside_the_execute_grants_is_refused() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let err = sandbox
        .spawn(&fx.policy(&[])?, &["/usr/bin/id"], &[], b"")
        .err();
    assert!(
        matches!(err, Some(SandboxError::ProgramNotAuthorized { .. })),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn stdin_env_and_stdout_round_trip() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let policy = fx.policy(&[])?;
    let argv = [
        s(&probe()).to_owned(),
        "echo".into(),
        "hello".into(),
        "world".into(),
    ];
    let outcome = sandbox
        .spawn(&policy, &argv, &[("KNOX".into(), "1".into())], b"ignored")?
        .wait()?;
    assert!(outcome.success(), "{outcome:?}");
    let out = String::from_utf8(outcome.stdout.clone())?;
    assert!(out.contains("\"detail\":\"hello world\""), "{out}");
    assert!(
        seccomp_denied(&outcome).is_empty(),
        "the baseline must cover a plain run: {:?}",
        outcome.denied
    );
    Ok(())
}

#[test]
fn exec_failure_after_mediation_is_reported_as_a_setup_error() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let not_executable = fx.outside.join("script");
    std::fs::write(&not_executable, "#!/bin/sh\n")?;
    let policy = fx
        .policy(&[])?
        .grant(&not_executable, &[Access::Read, Access::Execute]);
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let err = sandbox.spawn(&policy, &[&not_executable], &[], b"").err();
    assert!(
        matches!(&err, Some(SandboxError::ChildSetup { step: knox_sandbox::ChildStep::Exec, source })
            if source.raw_os_error() == Some(13)),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn setup_failure_before_exec_names_the_step() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let prepared = sandbox.prepare(&fx.policy(&[])?)?;
    std::fs::remove_dir(&fx.workspace)?;
    let err = sandbox
        .spawn_prepared(&prepared, &[probe()], &[], b"")
        .err();
    assert!(
        matches!(
            &err,
            Some(SandboxError::ChildSetup {
                step: knox_sandbox::ChildStep::Chdir,
                ..
            })
        ),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn handles_are_shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Sandbox>();
    send_sync::<knox_sandbox::PreparedPolicy>();
    send::<knox_sandbox::ConfinedChild>();
}

#[test]
fn concurrent_spawns_from_many_threads_each_get_their_own_verdicts() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let prepared = sandbox.prepare(&fx.policy(&[Family::Offline])?)?;
    std::thread::scope(|scope| {
        let runs: Vec<_> = (0..8)
            .map(|i| {
                let (sandbox, prepared, probe) = (&sandbox, &prepared, probe());
                scope.spawn(move || -> Result<knox_sandbox::Outcome, SandboxError> {
                    let case = if i % 2 == 0 { "bpf" } else { "true" };
                    sandbox
                        .spawn_prepared(prepared, &[probe.as_os_str(), case.as_ref()], &[], b"")?
                        .wait()
                })
            })
            .collect();
        for (i, run) in runs.into_iter().enumerate() {
            let outcome = run.join().map_err(|_| "thread panicked")??;
            let expected = if i % 2 == 0 { 1 } else { 0 };
            assert_eq!(
                seccomp_denied(&outcome).len(),
                expected,
                "run {i}: {:?}",
                outcome.denied
            );
        }
        Ok(())
    })
}

#[test]
fn a_shell_runs_under_the_terminal_family_without_denials() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let policy = SandboxPolicy::for_families(&[Family::Offline, Family::Terminal], &fx.workspace)?
        .grant("/usr/bin", &[Access::Read, Access::Execute])
        .grant("/bin", &[Access::Read, Access::Execute]);
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let script = "echo hello > out.txt && cat out.txt && ls && /usr/bin/true | wc -l";
    let path = [("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
    let outcome = sandbox
        .spawn(&policy, &["/bin/sh", "-c", script], &path, b"")?
        .wait()?;
    assert!(
        outcome.success(),
        "{outcome:?} {}",
        String::from_utf8_lossy(&outcome.stderr)
    );
    assert_eq!(
        String::from_utf8(outcome.stdout.clone())?,
        "hello\nout.txt\n0\n"
    );
    assert!(seccomp_denied(&outcome).is_empty(), "{:?}", outcome.denied);
    Ok(())
}
