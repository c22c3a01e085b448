//! Older Landlock ABIs, by capping: the layers that stand in for what they lack.

use std::net::TcpListener;

use knox_sandbox::{Family, Layer, Protection, Sandbox, SandboxConfig};

use super::support::{
    AuditOn, EPERM, Fixture, TestResult, denied, probe, run_with, s, seccomp_denied,
};
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

/// At ABI 7, with the kernel's audit on, Landlock's own record of a denial is
/// read back into the evidence: the probe's `openat` of a file outside the
/// grants is a denied call marked `landlock` (what was missing, the path),
/// streamed while the tool runs and kept in the outcome, nothing lost. Capped at
/// ABI 6 nothing is read, and the layers say so.
#[test]
fn at_abi_7_landlock_denials_are_read_from_the_audit_stream() -> TestResult {
    require_kernel!();
    let Some(_audit) = AuditOn::take()? else {
        return Ok(());
    };
    let fx = Fixture::new()?;
    let secret = fx.outside.join("secret.txt");
    std::fs::write(&secret, "secret")?;
    let policy = fx.policy(&[])?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let prepared = sandbox.prepare(&policy)?;
    assert_eq!(
        prepared.layers().enforced_by.get(&Protection::DenialAudit),
        Some(&Layer::Landlock)
    );
    let probe = probe();
    let argv = [s(&probe), "read-text", s(&secret)];
    let mut child = sandbox.spawn_prepared(&prepared, &argv, &[], b"")?;
    let pid = child.pid();
    let events = child.denied_events().ok_or("no stream")?;
    let outcome = child.wait()?;
    let streamed: Vec<_> = events.try_iter().collect();
    let reads: Vec<_> = outcome
        .denied
        .iter()
        .filter(|d| {
            d.landlock
                .as_ref()
                .is_some_and(|l| l.object.contains(&format!("path={}", s(&secret))))
        })
        .collect();
    assert_eq!(reads.len(), 1, "{:?}", outcome.denied);
    let read = reads.first().ok_or("no read")?;
    assert_eq!((read.pid, read.name.as_str()), (pid, "openat"), "{read:?}");
    let landlock = read.landlock.as_ref().ok_or("not Landlock's")?;
    assert_eq!(landlock.blockers, ["fs.read_file"]);
    assert!(streamed.contains(read), "{streamed:?}");
    let audit = outcome
        .landlock_audit
        .as_ref()
        .ok_or("Landlock's records were not read")?;
    assert!(audit.complete(), "{audit:?}");
    assert!(seccomp_denied(&outcome).is_empty(), "{:?}", outcome.denied);

    let capped = capped(6)?;
    let prepared = capped.prepare(&policy)?;
    assert_eq!(
        prepared.layers().enforced_by.get(&Protection::DenialAudit),
        Some(&Layer::Unavailable)
    );
    let outcome = capped.spawn_prepared(&prepared, &argv, &[], b"")?.wait()?;
    assert!(
        outcome.denied.iter().all(|d| d.landlock.is_none()) && outcome.landlock_audit.is_none(),
        "{outcome:?}"
    );
    Ok(())
}
