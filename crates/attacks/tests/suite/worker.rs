//! Workers: one confined process serving many framed requests, with per-request evidence.

use std::time::Duration;

use knox_sandbox::{CallFailure, LimitHit, Sandbox, SandboxConfig, SandboxError, Worker};
use serde::Deserialize;

use super::support::{AuditOn, Fixture, TestResult, probe, s, seccomp_denied};
use crate::require_kernel;

const SECOND: Duration = Duration::from_secs(10);

/// The probe's reply to one request.
#[derive(Debug, Deserialize)]
struct Reply {
    case: String,
    ok: bool,
    errno: Option<i32>,
    detail: Option<String>,
}

fn start(sandbox: &Sandbox, fx: &Fixture) -> Result<Worker, Box<dyn std::error::Error>> {
    let prepared = sandbox.prepare(&fx.policy(&[knox_sandbox::Family::Offline])?)?;
    let argv = [s(&probe()).to_owned(), "worker".to_owned()];
    Ok(sandbox.spawn_worker(&prepared, &argv, &[])?)
}

/// Landlock's record of the runtime's start-up read of its own
/// `/proc/<pid>/maps` (ABI 7, audit on): the worker may still be starting when
/// the first request is sent, so it can belong to the first call.
fn startup(d: &knox_sandbox::DeniedSyscall) -> bool {
    d.landlock
        .as_ref()
        .is_some_and(|l| l.object.starts_with(&format!("path=/proc/{}/maps ", d.pid)))
}

/// A reply's denials other than the start-up read, during the first call.
fn made_by(reply: &knox_sandbox::WorkerReply, first: bool) -> Vec<&knox_sandbox::DeniedSyscall> {
    reply
        .denied
        .iter()
        .filter(|d| !(first && startup(d)))
        .collect()
}

fn request(args: &[&str]) -> Vec<u8> {
    serde_json::to_vec(args).unwrap_or_default()
}

fn parse(reply: &knox_sandbox::WorkerReply) -> Result<Reply, Box<dyn std::error::Error>> {
    let bytes = reply
        .response
        .as_ref()
        .map_err(|f| format!("no response: {f:?}"))?;
    Ok(serde_json::from_slice(bytes)?)
}

#[test]
fn one_worker_serves_many_calls() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    let pid = worker.pid();
    for i in 0..50 {
        let word = format!("call-{i}");
        let reply = worker.call(&request(&["echo", &word]), SECOND)?;
        let parsed = parse(&reply)?;
        assert_eq!((parsed.case.as_str(), parsed.ok), ("echo", true));
        assert_eq!(parsed.detail.as_deref(), Some(word.as_str()));
        assert!(
            made_by(&reply, i == 0).is_empty() && reply.exited.is_none(),
            "{reply:?}"
        );
    }
    assert_eq!(
        (worker.pid(), worker.calls()),
        (pid, 50),
        "the same process served every call"
    );
    let outcome = worker.shutdown()?;
    assert!(outcome.success(), "{outcome:?}");
    // With Landlock's audit read (ABI 7, audit on) the runtime's start-up read
    // of its own /proc/<pid>/maps is denied: it came before the first request.
    assert!(
        seccomp_denied(&outcome).is_empty() && outcome.stdout.is_empty(),
        "{outcome:?}"
    );
    Ok(())
}

#[test]
fn denials_are_attributed_to_the_request_that_made_them() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    let script: [(&[&str], &[&str]); 6] = [
        (&["true"], &[]),
        (&["bpf"], &["bpf"]),
        (&["true"], &[]),
        (&["keyctl"], &["keyctl"]),
        (&["setuid", "65534"], &["setuid"]),
        (&["echo", "after"], &[]),
    ];
    let mut all = Vec::new();
    for round in 0..5 {
        for (i, (args, want)) in script.into_iter().enumerate() {
            let reply = worker.call(&request(args), SECOND)?;
            let first = round == 0 && i == 0;
            let names: Vec<&str> = made_by(&reply, first)
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            assert_eq!(names, want, "{args:?}: {reply:?}");
            // Only the runtime's start-up read can come before a request.
            assert!(reply.idle_denied.iter().all(startup), "{reply:?}");
            if !want.is_empty() {
                assert_eq!(parse(&reply)?.errno, Some(1), "EPERM reached the worker");
            }
            all.extend(names.into_iter().map(str::to_owned));
        }
    }
    let outcome = worker.shutdown()?;
    let total: Vec<String> = seccomp_denied(&outcome)
        .iter()
        .map(|d| d.name.clone())
        .collect();
    assert_eq!(total, all, "the outcome keeps every denial, in order");
    Ok(())
}

/// Landlock's denials reach a worker's reply through the kernel's audit stream
/// (ABI 7): each is attributed to the request that caused it, although the
/// record arrives after the call returned (the barrier after the response).
#[test]
fn landlock_denials_are_attributed_to_the_request_that_made_them() -> TestResult {
    require_kernel!();
    let Some(_audit) = AuditOn::take()? else {
        return Ok(());
    };
    let fx = Fixture::new()?;
    let secret = fx.outside.join("secret.txt");
    std::fs::write(&secret, "secret")?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    let mut seen = 0;
    for i in 0..10 {
        let args: &[&str] = if i % 2 == 0 {
            &["read-text", s(&secret)]
        } else {
            &["true"]
        };
        let reply = worker.call(&request(args), SECOND)?;
        let landlock: Vec<_> = made_by(&reply, i == 0)
            .into_iter()
            .filter_map(|d| d.landlock.as_ref())
            .collect();
        if i % 2 == 0 {
            assert_eq!(parse(&reply)?.errno, Some(13), "EACCES reached the worker");
            assert_eq!(landlock.len(), 1, "{args:?}: {reply:?}");
            let denial = landlock.first().ok_or("no denial")?;
            assert_eq!(denial.blockers, ["fs.read_file"]);
            assert!(
                denial.object.contains(&format!("path={}", s(&secret))),
                "{denial:?}"
            );
            seen += 1;
        } else {
            assert!(made_by(&reply, false).is_empty(), "{args:?}: {reply:?}");
        }
    }
    let outcome = worker.shutdown()?;
    let audit = outcome
        .landlock_audit
        .as_ref()
        .ok_or("Landlock's records were not read")?;
    assert!(audit.complete(), "{audit:?}");
    let reads = outcome
        .denied
        .iter()
        .filter(|d| {
            d.landlock
                .as_ref()
                .is_some_and(|l| l.object.contains(s(&secret)))
        })
        .count();
    assert_eq!((seen, reads), (5, 5));
    Ok(())
}

#[test]
fn a_worker_that_crashes_mid_call_is_reported_and_not_reused() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    assert!(worker.call(&request(&["true"]), SECOND)?.response.is_ok());
    // An x32 system call: the filter kills the process (SIGSYS) inside the call.
    let reply = worker.call(&request(&["x32", "39", "0", "0", "0"]), SECOND)?;
    assert_eq!(reply.response, Err(CallFailure::Exited), "{reply:?}");
    let outcome = reply.exited.ok_or("no outcome")?;
    assert_eq!(outcome.signal, Some(31), "{outcome:?}");
    let again = worker.call(&request(&["true"]), SECOND);
    assert!(
        matches!(again, Err(SandboxError::WorkerExited)),
        "{again:?}"
    );
    Ok(())
}

#[test]
fn a_memory_kill_during_a_call_is_that_calls_limit_hit() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    if sandbox.cgroup_version().is_none() {
        eprintln!("SKIPPED: no memory cgroup (not root?)");
        return Ok(());
    }
    let mut policy = fx.policy(&[knox_sandbox::Family::Offline])?;
    policy.limits.max_memory_bytes = 64 << 20;
    let prepared = sandbox.prepare(&policy)?;
    let argv = [s(&probe()).to_owned(), "worker".to_owned()];
    let mut worker = sandbox.spawn_worker(&prepared, &argv, &[])?;
    let first = worker.call(&request(&["memory-bomb", "8"]), SECOND)?;
    assert!(
        first.response.is_ok() && first.limit_hits.is_empty(),
        "{first:?}"
    );
    let reply = worker.call(&request(&["memory-bomb", "512"]), SECOND)?;
    assert_eq!(reply.response, Err(CallFailure::Exited), "{reply:?}");
    assert!(
        reply
            .limit_hits
            .iter()
            .any(|h| matches!(h, LimitHit::Memory { .. })),
        "{reply:?}"
    );
    Ok(())
}

#[test]
fn a_call_past_its_timeout_kills_the_worker_tree() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    let pid = worker.pid();
    let reply = worker.call(&request(&["cpu-spin", "30"]), Duration::from_millis(300))?;
    assert_eq!(
        reply.response,
        Err(CallFailure::TimedOut { timeout_ms: 300 }),
        "{reply:?}"
    );
    assert!(
        reply
            .limit_hits
            .contains(&LimitHit::WallClock { timeout_ms: 300 }),
        "{reply:?}"
    );
    let outcome = reply.exited.ok_or("no outcome")?;
    assert_eq!(outcome.signal, Some(9), "{outcome:?}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the worker is gone"
    );
    Ok(())
}

#[test]
fn a_worker_breaking_the_framing_is_killed() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    // Four 0xff bytes before the real reply read as a 4 GiB frame header.
    let reply = worker.call(&request(&["stdout-raw", "ffffffff"]), SECOND)?;
    assert_eq!(
        reply.response,
        Err(CallFailure::OversizedFrame { len: 0xffff_ffff }),
        "{reply:?}"
    );
    assert!(reply.exited.is_some());
    Ok(())
}

#[test]
fn large_requests_and_responses_cross_the_pipes() -> TestResult {
    require_kernel!();
    let fx = Fixture::new()?;
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let mut worker = start(&sandbox, &fx)?;
    let big = "k".repeat(1 << 20);
    let reply = worker.call(&request(&["echo", &big]), SECOND)?;
    assert_eq!(parse(&reply)?.detail.map(|d| d.len()), Some(1 << 20));
    let too_big = vec![0_u8; knox_sandbox::frame::MAX_FRAME_BYTES + 1];
    assert!(matches!(
        worker.call(&too_big, SECOND),
        Err(SandboxError::Frame(_))
    ));
    assert!(
        worker.call(&request(&["true"]), SECOND)?.response.is_ok(),
        "still usable"
    );
    Ok(())
}
