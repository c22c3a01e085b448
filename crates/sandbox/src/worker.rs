//! `Worker`: one confined process serving many framed requests of a run, each with its own timeout and evidence.
//!
//! The exchange is strict request/response on the worker's standard input and
//! output ([`crate::frame`]). Attribution of kernel events to a request rests on
//! one ordering guarantee: the supervisor queues a denial *before* it answers the
//! notified call, and the worker is stopped inside that call until the answer. So
//! every denial the worker met while serving a request is queued before its
//! response can be written, and draining the queue after the response was read
//! yields exactly those denials (plus any made by other threads of the worker
//! that raced the response — concurrency inside the worker is its own). Denials
//! queued while no request was being served are reported separately, as idle.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::cgroup::Counters;
use crate::child::{ConfinedChild, LimitHit, Outcome};
use crate::frame::{self, Decoder, FrameError};
use crate::spawn::{SandboxError, io};
use crate::supervisor::DeniedSyscall;
use crate::sys::{self, poll};

/// How long [`Worker::shutdown`] waits for the worker to exit after its input closed.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "failure")]
pub enum CallFailure {
    /// No response within the call's timeout; the worker's tree was killed.
    TimedOut {
        /// The timeout in milliseconds.
        timeout_ms: u64,
    },
    /// The worker died, or closed its output, before responding.
    Exited,
    /// The worker announced a response above [`frame::MAX_FRAME_BYTES`]; it was killed.
    OversizedFrame {
        /// The announced length.
        len: u64,
    },
    /// The worker wrote output while no request was pending; it was killed
    /// (the framing can no longer be trusted).
    UnsolicitedOutput,
}

/// The result of one [`Worker::call`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerReply {
    /// The response payload, or why there is none.
    pub response: Result<Vec<u8>, CallFailure>,
    /// System calls denied while this request was being served, in arrival order.
    pub denied: Vec<DeniedSyscall>,
    /// System calls denied between the previous response and this request (the
    /// worker acted while idle); not attributable to any request.
    pub idle_denied: Vec<DeniedSyscall>,
    /// Whether `denied` and `idle_denied` hold every denial Landlock's audit
    /// recorded ([`ConfinedChild::audit_barrier`]): `false` when records may be
    /// missing (a barrier not back in time, records lost by the kernel or the
    /// reader); `true` too when Landlock's denials are not audited.
    #[serde(default = "complete")]
    pub audit_complete: bool,
    /// Limits hit while this request was being served: refused forks and OOM
    /// kills counted by the cgroup during the call, the call's timeout, and the
    /// caps that ended the worker if it died.
    pub limit_hits: Vec<LimitHit>,
    /// How the worker ended, if it is gone after this call (died, or was killed
    /// for a timeout or a protocol violation); later calls fail with
    /// [`SandboxError::WorkerExited`].
    pub exited: Option<Outcome>,
    /// Wall-clock time of the call.
    pub elapsed: Duration,
}

fn complete() -> bool {
    true
}

/// A confined worker process. Dropping it kills its tree.
#[derive(Debug)]
pub struct Worker {
    child: Option<ConfinedChild>,
    pid: u32,
    stdin: Option<File>,
    stdout: File,
    events: Option<Receiver<DeniedSyscall>>,
    max_output: usize,
    calls: u64,
}

/// How the exchange of one call ended.
enum Exchange {
    Response(Vec<u8>),
    Failed(CallFailure),
}

impl Worker {
    pub(crate) fn new(
        mut child: ConfinedChild,
        stdin: File,
        stdout: File,
        max_output: usize,
    ) -> Result<Self, SandboxError> {
        sys::set_nonblocking(stdin.as_fd()).map_err(io("worker stdin"))?;
        sys::set_nonblocking(stdout.as_fd()).map_err(io("worker stdout"))?;
        Ok(Self {
            pid: child.pid(),
            events: child.denied_events(),
            child: Some(child),
            stdin: Some(stdin),
            stdout,
            max_output,
            calls: 0,
        })
    }

    /// The worker's pid (in this process's pid namespace).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Requests served so far (answered or not).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Sends one request frame and waits up to `timeout` for one response frame.
    ///
    /// Past the timeout, or if the worker breaks the framing, its whole tree is
    /// killed and the reply carries the failure and the final [`Outcome`]. A
    /// request above [`frame::MAX_FRAME_BYTES`] is refused before anything is sent.
    pub fn call(&mut self, request: &[u8], timeout: Duration) -> Result<WorkerReply, SandboxError> {
        let wire = frame::encode(request)?;
        let child = self.child.as_ref().ok_or(SandboxError::WorkerExited)?;
        let before = child.cgroup_counters();
        let started = Instant::now();
        let idle_complete = self.audit_barrier();
        let idle_denied = self.drain_events();
        self.calls += 1;
        let exchange = match self.pending_output()? {
            Some(failure) => Exchange::Failed(failure),
            None => self.exchange(&wire, started + timeout, timeout)?,
        };
        let call_complete = self.audit_barrier();
        let mut denied = self.drain_events();
        let mut limit_hits = self.cgroup_hits(before);
        let (response, exited) = match exchange {
            Exchange::Response(bytes) => (Ok(bytes), None),
            Exchange::Failed(failure) => {
                let outcome = self.finish(&failure, timeout)?;
                denied.extend(self.drain_events());
                if let CallFailure::TimedOut { timeout_ms } = failure {
                    limit_hits.push(LimitHit::WallClock { timeout_ms });
                }
                limit_hits.extend(outcome.limit_hits.iter().filter(|h| ended_by(h)).cloned());
                (Err(failure), Some(outcome))
            }
        };
        Ok(WorkerReply {
            response,
            denied,
            idle_denied,
            audit_complete: idle_complete && call_complete,
            limit_hits,
            exited,
            elapsed: started.elapsed(),
        })
    }

    /// Closes the worker's input and waits up to [`SHUTDOWN_GRACE`] for it to exit.
    pub fn shutdown(self) -> Result<Outcome, SandboxError> {
        self.shutdown_within(SHUTDOWN_GRACE)
    }

    /// Closes the worker's input and waits up to `grace` for it to exit; past it
    /// the tree is killed (a wall-clock hit). The outcome covers the worker's whole
    /// life: every denial, the caps, and in `stdout` whatever it wrote after its
    /// last response. A worker that already ended in a call (whose reply carried
    /// its outcome) gives [`SandboxError::WorkerExited`].
    pub fn shutdown_within(mut self, grace: Duration) -> Result<Outcome, SandboxError> {
        drop(self.stdin.take());
        let child = self.child.take().ok_or(SandboxError::WorkerExited)?;
        let mut outcome = child.wait_deadline(Instant::now() + grace, grace)?;
        outcome.stdout = self.leftover_output();
        Ok(outcome)
    }

    /// Landlock's records arrive after the calls that caused them: waits until
    /// those of this request have been read (and streamed) before draining.
    fn audit_barrier(&self) -> bool {
        self.child.as_ref().is_none_or(ConfinedChild::audit_barrier)
    }

    fn drain_events(&self) -> Vec<DeniedSyscall> {
        self.events
            .as_ref()
            .map(|rx| rx.try_iter().collect())
            .unwrap_or_default()
    }

    /// Before a request: output already waiting means the worker wrote unasked,
    /// end of file that it is gone.
    fn pending_output(&mut self) -> Result<Option<CallFailure>, SandboxError> {
        let ready = sys::poll_set(&[(self.stdout.as_fd(), poll::IN)], 0)
            .map_err(io("polling the worker"))?;
        if ready.first().is_none_or(|r| *r == 0) {
            return Ok(None);
        }
        let mut byte = [0_u8; 1];
        Ok(match self.stdout.read(&mut byte) {
            Ok(0) => Some(CallFailure::Exited),
            Ok(_) => Some(CallFailure::UnsolicitedOutput),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
            Err(_) => Some(CallFailure::Exited),
        })
    }

    /// Writes the request and reads the response, both non-blocking, until the
    /// response is complete, the worker is gone, or `deadline` passes. The
    /// request is written while the response is read, so a worker that answers
    /// before reading all of a large request cannot deadlock the broker.
    fn exchange(
        &mut self,
        wire: &[u8],
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Exchange, SandboxError> {
        let mut written = 0;
        let mut decoder = Decoder::default();
        let child = self.child.as_ref().ok_or(SandboxError::WorkerExited)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                return Ok(Exchange::Failed(CallFailure::TimedOut { timeout_ms }));
            }
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            let sending = written < wire.len();
            let mut fds = vec![(self.stdout.as_fd(), poll::IN), (child.pidfd(), poll::IN)];
            if let (true, Some(stdin)) = (sending, self.stdin.as_ref()) {
                fds.push((stdin.as_fd(), poll::OUT));
            }
            let ready = sys::poll_set(&fds, ms).map_err(io("polling the worker"))?;
            drop(fds);
            if ready.get(2).is_some_and(|r| *r != 0) {
                written += send(&mut self.stdin, wire.get(written..).unwrap_or_default());
            }
            let exited = ready.get(1).is_some_and(|r| *r != 0);
            if ready.first().is_some_and(|r| *r != 0) || exited {
                match read_available(&mut self.stdout, &mut decoder) {
                    Ok(Some(response)) => return Ok(Exchange::Response(response)),
                    Ok(None) if exited => return Ok(Exchange::Failed(CallFailure::Exited)),
                    Ok(None) => {}
                    Err(Closed::Eof) => return Ok(Exchange::Failed(CallFailure::Exited)),
                    Err(Closed::Oversized(len)) => {
                        return Ok(Exchange::Failed(CallFailure::OversizedFrame { len }));
                    }
                }
            }
        }
    }

    /// Cgroup events counted since `before`.
    fn cgroup_hits(&self, before: Option<Counters>) -> Vec<LimitHit> {
        let now = self.child.as_ref().and_then(ConfinedChild::cgroup_counters);
        let (Some(before), Some(now)) = (before, now) else {
            return Vec::new();
        };
        let mut hits = Vec::new();
        let refused_forks = now.pids_max.saturating_sub(before.pids_max);
        if refused_forks > 0 {
            hits.push(LimitHit::Processes { refused_forks });
        }
        let oom_kills = now.oom_kills.saturating_sub(before.oom_kills);
        if oom_kills > 0 {
            hits.push(LimitHit::Memory { oom_kills });
        }
        hits
    }

    /// Ends the worker after a failed call: kills its tree (at once, except when
    /// it is already gone) and collects its outcome.
    fn finish(
        &mut self,
        failure: &CallFailure,
        timeout: Duration,
    ) -> Result<Outcome, SandboxError> {
        drop(self.stdin.take());
        let child = self.child.take().ok_or(SandboxError::WorkerExited)?;
        let mut outcome = match failure {
            CallFailure::TimedOut { .. } => child.wait_deadline(Instant::now(), timeout)?,
            _ => {
                child.kill_tree();
                child.wait_deadline(Instant::now() + SHUTDOWN_GRACE, SHUTDOWN_GRACE)?
            }
        };
        outcome.stdout = self.leftover_output();
        Ok(outcome)
    }

    /// Reads what is left on the worker's output once its tree is dead (capped).
    fn leftover_output(&mut self) -> Vec<u8> {
        let mut kept = Vec::new();
        let mut buf = [0_u8; 16 * 1024];
        loop {
            match self.stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let room = self.max_output.saturating_sub(kept.len()).min(n);
                    kept.extend_from_slice(buf.get(..room).unwrap_or_default());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        kept
    }
}

/// Writes what the pipe takes; on a broken pipe stops sending (the worker
/// closed its input — its exit or end of output follows).
fn send(stdin: &mut Option<File>, rest: &[u8]) -> usize {
    let Some(pipe) = stdin.as_mut() else {
        return rest.len();
    };
    match pipe.write(rest) {
        Ok(n) => n,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
        Err(_) => {
            *stdin = None;
            rest.len()
        }
    }
}

/// Why the response stream ended early.
enum Closed {
    Eof,
    Oversized(u64),
}

/// Reads everything available without blocking, at most up to the end of the frame.
fn read_available(stdout: &mut File, decoder: &mut Decoder) -> Result<Option<Vec<u8>>, Closed> {
    loop {
        let want = decoder.want();
        let asked = want.len();
        match stdout.read(want) {
            Ok(0) => {
                let _ = decoder.filled(0, asked);
                return Err(Closed::Eof);
            }
            Ok(n) => match decoder.filled(n, asked) {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(FrameError::TooLarge { got, .. }) => return Err(Closed::Oversized(got)),
                Err(_) => return Err(Closed::Eof),
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                let _ = decoder.filled(0, asked);
            }
            Err(_) => {
                // WouldBlock: nothing more for now (any other error ends at the next poll).
                let _ = decoder.filled(0, asked);
                return Ok(None);
            }
        }
    }
}

/// Whether a hit says how the worker ended (its signal or the timeout) rather
/// than a cgroup count, which the per-call counters already attribute.
fn ended_by(hit: &LimitHit) -> bool {
    matches!(hit, LimitHit::CpuTime | LimitHit::FileSize)
}
