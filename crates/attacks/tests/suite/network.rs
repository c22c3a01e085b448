//! TCP connect and bind: allowed only to authorized ports; other socket kinds denied.

use std::net::TcpListener;

use knox_sandbox::Family;

use super::support::{
    EACCES, EPERM, Fixture, TestResult, denied, run, run_unconfined, seccomp_denied,
};
use crate::require_kernel;

#[test]
fn connect_to_an_unauthorized_loopback_port_is_denied_and_recorded() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port().to_string();
    assert!(
        run_unconfined(&["connect", &port])?.ok,
        "the listener must be reachable without the sandbox"
    );
    let (outcome, probe) = run(&fx.policy(&[Family::NetworkClient])?, &["connect", &port])?;
    let probe = probe.ok_or("no probe output")?;
    assert!(!probe.ok);
    assert!(matches!(probe.errno, Some(EPERM | EACCES)), "{probe:?}");
    let connects = denied(&outcome, "connect");
    assert_eq!(connects.len(), 1, "{outcome:?}");
    let want = format!("addr=127.0.0.1:{port}");
    assert_eq!(
        connects.first().and_then(|d| d.decoded.as_deref()),
        Some(want.as_str())
    );
    Ok(())
}

#[test]
fn connect_to_an_authorized_port_is_allowed() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let mut policy = fx.policy(&[Family::NetworkClient])?;
    policy.tcp_connect_ports.insert(port);
    let (outcome, probe) = run(&policy, &["connect", &port.to_string()])?;
    assert!(probe.ok_or("no probe output")?.ok, "{outcome:?}");
    assert!(seccomp_denied(&outcome).is_empty(), "{:?}", outcome.denied);
    Ok(())
}

#[test]
fn bind_needs_both_the_syscall_and_the_port() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let free = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut policy = fx.policy(&[Family::NetworkClient])?;
    let (outcome, probe) = run(&policy, &["bind", &free.to_string()])?;
    assert!(!probe.ok_or("no probe output")?.ok);
    let binds = denied(&outcome, "bind");
    let want = format!("addr=127.0.0.1:{free}");
    assert_eq!(
        binds.first().and_then(|d| d.decoded.as_deref()),
        Some(want.as_str()),
        "{outcome:?}"
    );
    policy
        .syscalls
        .extend(["bind".to_owned(), "listen".to_owned()]);
    policy.tcp_bind_ports.insert(free);
    let (outcome, probe) = run(&policy, &["bind", &free.to_string()])?;
    assert!(probe.ok_or("no probe output")?.ok, "{outcome:?}");
    Ok(())
}

#[test]
fn udp_raw_netlink_and_packet_sockets_are_denied() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let policy = fx.policy(&[Family::NetworkClient])?;
    for case in [
        "socket-udp",
        "socket-raw",
        "socket-netlink",
        "socket-packet",
    ] {
        let (outcome, probe) = run(&policy, &[case])?;
        let probe = probe.ok_or("no probe output")?;
        assert_eq!(probe.errno, Some(EPERM), "{case}: {probe:?}");
        assert_eq!(denied(&outcome, "socket").len(), 1, "{case}: {outcome:?}");
    }
    let (_, probe) = run(&policy, &["socket-inet6"])?;
    assert!(
        probe.ok_or("no probe output")?.ok,
        "TCP over IPv6 is a network-client socket"
    );
    Ok(())
}

#[test]
fn offline_tools_cannot_open_any_inet_socket() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let (outcome, probe) = run(&fx.policy(&[Family::Offline])?, &["socket-inet6"])?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    let socket = denied(&outcome, "socket");
    assert_eq!(
        socket.first().and_then(|d| d.decoded.as_deref()),
        Some("domain=10, type=0x1, protocol=0")
    );
    Ok(())
}

#[test]
fn pathname_unix_sockets_are_denied_even_to_network_clients() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let path = fx.outside.join("daemon.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path)?;
    assert!(run_unconfined(&["unix-connect", path.to_str().unwrap_or_default()])?.ok);
    let policy = fx.policy(&[Family::NetworkClient])?;
    let (outcome, probe) = run(
        &policy,
        &["unix-connect", path.to_str().unwrap_or_default()],
    )?;
    assert_eq!(probe.ok_or("no probe output")?.errno, Some(EPERM));
    let connects = denied(&outcome, "connect");
    let want = format!("addr=unix:{}", path.display());
    assert_eq!(
        connects.first().and_then(|d| d.decoded.as_deref()),
        Some(want.as_str())
    );
    Ok(())
}
