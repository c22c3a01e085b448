//! `ConfinedChild` and `Outcome`: waiting, timeouts, killing the tree, attributing limit hits.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cgroup::{CgroupVersion, Counters, Lease};
use crate::launch::Started;
use crate::output;
use crate::policy::Limits;
use crate::spawn::{SandboxConfig, SandboxError, io};
use crate::supervisor::{self, DeniedSyscall};
use crate::sys::{self, Exit, Readiness};
use crate::workers::{Pending, Workers};

/// Which layers were in force for a run — part of the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// Landlock ABI the sandbox requires (the policy's minimum, else 1).
    pub landlock_abi_required: u8,
    /// Landlock ABI of the running kernel.
    pub landlock_abi: i32,
    /// The ABI in use and which layer enforced each protection (`None` for the
    /// dangerous unconfined baseline).
    pub layers: Option<crate::layers::Layers>,
    /// Cgroup interface capping processes and memory, if any.
    pub cgroup: Option<CgroupVersion>,
    /// Whether the tool ran in a new user namespace.
    pub user_namespace: bool,
    /// Whether every capability was dropped before `execve`.
    pub capabilities_dropped: bool,
    /// The unprivileged uid and gid the tool ran as, if not the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as: Option<crate::identity::RunAs>,
    /// Size of the seccomp program.
    pub seccomp_instructions: usize,
    /// Skipped paths, implicit grants, fallbacks.
    pub notes: Vec<String>,
}

/// A limit the run ran into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "limit")]
pub enum LimitHit {
    /// The wall-clock timeout passed; the process tree was killed.
    WallClock {
        /// The timeout in milliseconds.
        timeout_ms: u64,
    },
    /// `RLIMIT_CPU` (killed by `SIGXCPU`, or by `SIGKILL` after using the CPU budget).
    CpuTime,
    /// The memory cgroup killed processes.
    Memory {
        /// OOM kills in the cgroup.
        oom_kills: u64,
    },
    /// Forks were refused at `pids.max`.
    Processes {
        /// Refused forks.
        refused_forks: u64,
    },
    /// Killed by `SIGXFSZ` (a tool that restored the default disposition; otherwise
    /// writes past `RLIMIT_FSIZE` fail with `EFBIG`, which only the tool sees).
    FileSize,
}

/// How a confined run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// Exit code, if the tool exited.
    pub status: Option<i32>,
    /// Terminating signal, if it was killed.
    pub signal: Option<i32>,
    /// Standard output (up to `max_output_bytes`).
    pub stdout: Vec<u8>,
    /// Standard error (up to `max_output_bytes`).
    pub stderr: Vec<u8>,
    /// Denied system calls, in arrival order.
    pub denied: Vec<DeniedSyscall>,
    /// Denials not stored past [`supervisor::MAX_RECORDED`].
    pub denied_dropped: u64,
    /// Whether Landlock's audit records of the run were all read (`None` when
    /// they were not read: ABI < 7, or the kernel's audit unavailable — see
    /// the `denial-audit` layer). Its denials are in `denied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock_audit: Option<crate::audit::AuditReport>,
    /// Limits hit.
    pub limit_hits: Vec<LimitHit>,
    /// Landlock ABI in use.
    pub landlock_abi: i32,
    /// The layers in force.
    pub enforcement: Enforcement,
    /// User plus system CPU time of the tool process (not its descendants).
    pub cpu_time: Duration,
    /// Wall-clock time from spawn to exit.
    pub wall_time: Duration,
}

impl Outcome {
    /// Whether the tool exited with status 0.
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }
}

/// A running confined tool. Dropping it without [`ConfinedChild::wait`] kills its tree.
#[derive(Debug)]
pub struct ConfinedChild {
    pid: i32,
    pidfd: OwnedFd,
    lease: Option<Lease>,
    stdin: Option<JoinHandle<()>>,
    output: Option<Pending<output::Collected>>,
    supervisor: Option<Pending<supervisor::Report>>,
    stop: Arc<AtomicBool>,
    events: Option<Receiver<DeniedSyscall>>,
    enforcement: Enforcement,
    started: Instant,
    timeout: Duration,
    limits: Limits,
    reaped: bool,
    /// The kernel's lost-record count at the last audit barrier (`u64::MAX`: unknown).
    audit_lost: std::sync::atomic::AtomicU64,
}

/// Writes the tool's input. What fits in an empty pipe is written at once, without
/// a thread; larger input gets a writer thread. A tool that exits without reading
/// closes the pipe: `EPIPE` is expected and ignored.
fn feed(mut pipe: File, input: &[u8]) -> Option<JoinHandle<()>> {
    if input.len() <= output::PIPE_CAPACITY {
        let _ = pipe.write_all(input);
        return None;
    }
    let bytes = input.to_vec();
    Some(std::thread::spawn(move || {
        let _ = pipe.write_all(&bytes);
    }))
}

impl ConfinedChild {
    /// A started tool whose `stdin` is written (and closed) at once and whose
    /// output is collected until it exits.
    pub(crate) fn assemble(
        started: Started,
        lease: Option<Lease>,
        limits: &Limits,
        enforcement: Enforcement,
        stdin: &[u8],
        config: &SandboxConfig,
        workers: &Workers,
    ) -> Self {
        let (mut child, pipe, _) =
            Self::build(started, lease, limits, enforcement, config, workers, true);
        child.stdin = feed(pipe, stdin);
        child
    }

    /// A started worker: standard error is collected, standard input and
    /// output are handed back for the frame exchange.
    pub(crate) fn assemble_worker(
        started: Started,
        lease: Option<Lease>,
        limits: &Limits,
        enforcement: Enforcement,
        config: &SandboxConfig,
        workers: &Workers,
    ) -> (Self, File, Option<File>) {
        Self::build(started, lease, limits, enforcement, config, workers, false)
    }

    fn build(
        started: Started,
        lease: Option<Lease>,
        limits: &Limits,
        enforcement: Enforcement,
        config: &SandboxConfig,
        workers: &Workers,
        collect_stdout: bool,
    ) -> (Self, File, Option<File>) {
        let Started {
            pid,
            pidfd,
            supervisor,
            events,
            stop,
            stdin,
            stdout,
            stderr,
        } = started;
        let (collected, kept) = if collect_stdout {
            (Some(stdout), None)
        } else {
            (None, Some(stdout))
        };
        let collect = output::collect(collected, stderr, config.max_output_bytes);
        // Without a collector thread the tool could block on a full pipe; if none can
        // be started the output is dropped (the pipes close) rather than the run hung.
        let output = workers.run("knox-output", collect).ok();
        let child = Self {
            pid,
            pidfd,
            lease,
            stdin: None,
            output,
            supervisor,
            stop,
            events: Some(events),
            enforcement,
            started: Instant::now(),
            timeout: config.timeout,
            limits: limits.clone(),
            reaped: false,
            audit_lost: std::sync::atomic::AtomicU64::new(u64::MAX),
        };
        if child.landlock_audited()
            && let Some(lost) = crate::audit::running().and_then(|t| t.lost())
        {
            child
                .audit_lost
                .store(u64::from(lost), std::sync::atomic::Ordering::Release);
        }
        (child, stdin, kept)
    }

    /// The pidfd, readable once the tool has exited.
    pub(crate) fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The cgroup's event counters now, if the tool has a cgroup.
    pub(crate) fn cgroup_counters(&self) -> Option<Counters> {
        self.lease.as_ref().map(Lease::counters)
    }

    /// Whether Landlock's audit records of this tool are read (then they
    /// arrive after the calls that caused them: see [`crate::audit`]).
    pub(crate) fn landlock_audited(&self) -> bool {
        self.enforcement.layers.as_ref().is_some_and(|l| {
            l.enforced_by.get(&crate::layers::Protection::DenialAudit)
                == Some(&crate::layers::Layer::Landlock)
        })
    }

    /// The layers in force for this tool, with their notes (what it was granted
    /// implicitly, paths skipped, idmapped mounts made or not).
    pub fn enforcement(&self) -> &Enforcement {
        &self.enforcement
    }

    /// The tool's pid (in this process's pid namespace).
    pub fn pid(&self) -> u32 {
        self.pid.unsigned_abs()
    }

    /// Takes the stream of denials as they happen (each is also in [`Outcome::denied`]).
    pub fn denied_events(&mut self) -> Option<Receiver<DeniedSyscall>> {
        self.events.take()
    }

    /// Landlock's audit records arrive after the calls that caused them: waits
    /// (bounded) until those of what the tool did so far have been read and sent
    /// to [`ConfinedChild::denied_events`], so that draining the stream next
    /// yields them. `false` when they may not all be there: the barrier did not
    /// come back in time, the reader overflowed, or the kernel lost audit records
    /// since the last barrier (its `lost` counter moved). `true` when every record
    /// is read, or when Landlock's denials are not audited at all.
    pub fn audit_barrier(&self) -> bool {
        if !self.landlock_audited() {
            return true;
        }
        let Some(tap) = crate::audit::running() else {
            return false;
        };
        let back = tap.barrier();
        let lost = tap.lost().map_or(u64::MAX, u64::from);
        let before = self
            .audit_lost
            .swap(lost, std::sync::atomic::Ordering::AcqRel);
        back && lost != u64::MAX && before == lost
    }

    /// Kills the tool and everything it started (its cgroup, and its process group).
    pub fn kill_tree(&self) {
        if !self.reaped {
            // The pid is still ours (at worst a zombie): signalling it is safe.
            let _ = sys::kill(-self.pid, sys::signal::KILL);
            let _ = sys::kill(self.pid, sys::signal::KILL);
        }
        if let Some(lease) = &self.lease {
            let _ = lease.kill_all();
        }
    }

    /// Waits for the tool with the configured timeout.
    pub fn wait(self) -> Result<Outcome, SandboxError> {
        let timeout = self.timeout;
        self.wait_timeout(timeout)
    }

    /// Waits for the tool; past `timeout` (from spawn) its whole tree is killed.
    pub fn wait_timeout(self, timeout: Duration) -> Result<Outcome, SandboxError> {
        let deadline = self.started + timeout;
        self.wait_deadline(deadline, timeout)
    }

    /// Waits for the tool until `deadline`, then kills its whole tree and reports
    /// a wall-clock hit of `timeout`.
    pub(crate) fn wait_deadline(
        mut self,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Outcome, SandboxError> {
        let mut timed_out = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
            match sys::poll_in(self.pidfd.as_fd(), ms).map_err(io("waiting for the tool"))? {
                Readiness::Ready | Readiness::Hangup => break,
                Readiness::Timeout if left.is_zero() => {
                    timed_out = true;
                    self.kill_tree();
                    break;
                }
                Readiness::Timeout => {}
            }
        }
        let (exit, cpu_time) = self.reap_and_join()?;
        let wall_time = self.started.elapsed();
        let (denied, denied_dropped, landlock_audit) =
            match self.supervisor.take().and_then(Pending::join) {
                Some(report) => (report.denied, report.dropped, report.audit),
                _ => (Vec::new(), 0, None),
            };
        let output::Collected { stdout, stderr } = self
            .output
            .take()
            .and_then(Pending::join)
            .unwrap_or_default();
        let limit_hits = self.limit_hits(exit, cpu_time, timed_out.then_some(timeout));
        let (status, signal) = match exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        Ok(Outcome {
            status,
            signal,
            stdout,
            stderr,
            denied,
            denied_dropped,
            landlock_audit,
            limit_hits,
            landlock_abi: self.enforcement.landlock_abi,
            enforcement: self.enforcement.clone(),
            cpu_time,
            wall_time,
        })
    }

    /// Reaps the tool, kills whatever it left behind, stops the supervisor and stdin.
    fn reap_and_join(&mut self) -> Result<(Exit, Duration), SandboxError> {
        // Nothing the tool started may outlive it. Killed before reaping: while the
        // tool is an unreaped zombie its pid, and so its process-group id, cannot be
        // reused by an unrelated process.
        self.kill_tree();
        let reaped = sys::reap_blocking(self.pid).map_err(io("reaping the tool"))?;
        self.reaped = true;
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.stdin.take() {
            let _ = h.join();
        }
        Ok(reaped)
    }

    fn limit_hits(
        &self,
        exit: Exit,
        cpu_time: Duration,
        timeout: Option<Duration>,
    ) -> Vec<LimitHit> {
        let mut hits = Vec::new();
        if let Some(t) = timeout {
            hits.push(LimitHit::WallClock {
                timeout_ms: u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
            });
        }
        let counters = self.lease.as_ref().map(Lease::hits).unwrap_or_default();
        let cpu_spent = cpu_time >= Duration::from_secs(self.limits.cpu_seconds);
        match exit {
            Exit::Signal(sys::signal::XCPU) => hits.push(LimitHit::CpuTime),
            Exit::Signal(sys::signal::KILL) if cpu_spent => hits.push(LimitHit::CpuTime),
            Exit::Signal(sys::signal::XFSZ) => hits.push(LimitHit::FileSize),
            _ => {}
        }
        if counters.oom_kills > 0 {
            hits.push(LimitHit::Memory {
                oom_kills: counters.oom_kills,
            });
        }
        if counters.pids_max > 0 {
            hits.push(LimitHit::Processes {
                refused_forks: counters.pids_max,
            });
        }
        hits
    }
}

impl Drop for ConfinedChild {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_tree();
            let _ = sys::reap_blocking(self.pid);
        }
        self.stop.store(true, Ordering::Release);
    }
}
