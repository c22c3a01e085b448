//! Older Landlock ABIs, by capping: the layers that stand in for what they lack.

use std::net::TcpListener;

use knox_sandbox::{Family, Layer, Protection, Sandbox, SandboxConfig};

use super::support::{EPERM, Fixture, TestResult, denied, run_with};
use crate::require_kernel;

fn capped(abi: u8) -> Result<Sandbox, knox_sandbox::SandboxError> {
    Sandbox::new(SandboxConfig {
        landlock_abi_max: Some(abi),
        ..SandboxConfig::default()
    })
}

/// Before ABI 4 the supervisor makes an authorized `connect` itself, on a
/// duplicate of the tool's socket: the tool's socket is really connected (the
/// listener accepts it), an unauthorized port is still denied and recorded, and
/// the evidence says which layer did it.
#[test]
fn without_landlock_tcp_the_supervisor_connects_on_the_tools_behalf() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = capped(3)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let port = listener.local_addr()?.port();
    let mut policy = fx.policy(&[Family::NetworkClient])?;
    policy.tcp_connect_ports.insert(port);
    let (outcome, probe) = run_with(&sandbox, &policy, &["connect", &port.to_string()])?;
    assert!(probe.ok_or("no probe output")?.ok, "{outcome:?}");
    assert!(outcome.denied.is_empty(), "{:?}", outcome.denied);
    assert!(
        listener.accept().is_ok(),
        "the tool's connection must have arrived"
    );
    let layers = outcome.enforcement.layers.ok_or("no layers recorded")?;
    assert_eq!(layers.landlock_abi, 3);
    assert_eq!(
        layers.enforced_by.get(&Protection::TcpConnect),
        Some(&Layer::SupervisorPerforms)
    );

    let other = TcpListener::bind("127.0.0.1:0")?;
    let other_port = other.local_addr()?.port().to_string();
    let (outcome, probe) = run_with(&sandbox, &policy, &["connect", &other_port])?;
    let probe = probe.ok_or("no probe output")?;
    assert!(!probe.ok && probe.errno == Some(EPERM), "{probe:?}");
    assert_eq!(denied(&outcome, "connect").len(), 1, "{outcome:?}");
    Ok(())
}

/// Before ABI 4, an authorized `bind` is made by the supervisor too.
#[test]
fn without_landlock_tcp_the_supervisor_binds_on_the_tools_behalf() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let free = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut policy = fx.policy(&[Family::NetworkClient])?;
    policy
        .syscalls
        .extend(["bind".to_owned(), "listen".to_owned()]);
    policy.tcp_bind_ports.insert(free);
    let (outcome, probe) = run_with(&capped(2)?, &policy, &["bind", &free.to_string()])?;
    assert!(probe.ok_or("no probe output")?.ok, "{outcome:?}");
    assert!(outcome.denied.is_empty(), "{:?}", outcome.denied);
    Ok(())
}

/// Before ABI 6 (no signal scoping) a tool may still signal its own process,
/// and nothing else: the supervisor denies and records the rest.
#[test]
fn without_scoping_signals_reach_only_the_tools_own_process() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sh = std::fs::canonicalize("/bin/sh")?;
    let policy = fx.policy(&[Family::Terminal])?.grant(
        &sh,
        &[knox_sandbox::Access::Read, knox_sandbox::Access::Execute],
    );
    let sandbox = capped(5)?;
    let script = "kill -0 $$ && echo self-ok; kill -0 1 || echo init-denied";
    let outcome = sandbox
        .spawn(
            &policy,
            &[sh.as_os_str(), "-c".as_ref(), script.as_ref()],
            &[],
            b"",
        )?
        .wait()?;
    let stdout = String::from_utf8_lossy(&outcome.stdout);
    assert!(stdout.contains("self-ok"), "{outcome:?}");
    assert!(stdout.contains("init-denied"), "{outcome:?}");
    let kills = denied(&outcome, "kill");
    assert_eq!(kills.len(), 1, "{:?}", outcome.denied);
    assert_eq!(kills.first().map(|d| d.args[0]), Some(1));
    Ok(())
}
