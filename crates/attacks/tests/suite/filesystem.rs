//! Landlock path rules: reads and writes outside the grants are denied.

use knox_sandbox::{Access, Family};

use super::support::{EACCES, Fixture, TestResult, run, run_unconfined, s};
use crate::require_kernel;

#[test]
fn canary_outside_the_grants_is_readable_unconfined_but_not_confined() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let canary = fx.outside.join("canary.txt");
    std::fs::write(&canary, "secret")?;
    assert!(
        run_unconfined(&["read", s(&canary)])?.ok,
        "the canary must be readable without the sandbox"
    );
    let (outcome, probe) = run(&fx.policy(&[Family::Offline])?, &["read", s(&canary)])?;
    let probe = probe.ok_or("no probe output")?;
    assert!(!probe.ok, "{outcome:?}");
    assert_eq!(probe.errno, Some(EACCES));
    assert_eq!(outcome.landlock_abi, outcome.enforcement.landlock_abi);
    assert!(outcome.landlock_abi >= 6);
    Ok(())
}

#[test]
fn read_inside_a_read_grant_is_allowed() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let file = fx.outside.join("granted.txt");
    std::fs::write(&file, "fine")?;
    let policy = fx
        .policy(&[Family::Offline])?
        .grant(&fx.outside, &[Access::Read]);
    let (_, probe) = run(&policy, &["read", s(&file)])?;
    assert!(probe.ok_or("no probe output")?.ok);
    Ok(())
}

#[test]
fn writes_outside_the_workspace_are_denied_and_inside_allowed() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let policy = fx.policy(&[Family::Offline])?;
    let outside = fx.outside.join("written.txt");
    let (_, probe) = run(&policy, &["write", s(&outside)])?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EACCES));
    assert!(!outside.exists());
    let inside = fx.workspace.join("written.txt");
    let (_, probe) = run(&policy, &["write", s(&inside)])?;
    assert!(probe.ok_or("no probe output")?.ok);
    assert_eq!(std::fs::read(&inside)?, b"knox");
    Ok(())
}

#[test]
fn create_unlink_rename_link_symlink_outside_are_denied() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let victim = fx.outside.join("victim.txt");
    std::fs::write(&victim, "keep")?;
    let policy = fx
        .policy(&[Family::Offline])?
        .grant(&fx.outside, &[Access::Read]);
    let attempts: Vec<Vec<String>> = vec![
        vec!["create".into(), s(&fx.outside.join("new.txt")).into()],
        vec!["unlink".into(), s(&victim).into()],
        vec!["mkdir".into(), s(&fx.outside.join("d")).into()],
        vec![
            "rename".into(),
            s(&victim).into(),
            s(&fx.workspace.join("stolen.txt")).into(),
        ],
        vec![
            "link".into(),
            s(&victim).into(),
            s(&fx.workspace.join("hard.txt")).into(),
        ],
        vec![
            "symlink".into(),
            s(&victim).into(),
            s(&fx.outside.join("sym")).into(),
        ],
    ];
    for args in &attempts {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (outcome, probe) = run(&policy, &args)?;
        let probe = probe.ok_or("no probe output")?;
        assert!(!probe.ok, "{args:?} must be denied: {outcome:?}");
    }
    assert_eq!(std::fs::read_to_string(&victim)?, "keep");
    assert_eq!(
        std::fs::read_dir(&fx.outside)?.count(),
        1,
        "nothing created outside"
    );
    Ok(())
}

#[test]
fn proc_self_is_not_writable() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let (_, probe) = run(&fx.policy(&[Family::Offline])?, &["proc-self-write"])?;
    assert!(!probe.ok_or("no probe output")?.ok);
    Ok(())
}
