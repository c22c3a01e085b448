//! Reusable threads for per-spawn supervisors and output collectors (creating a thread costs tens of µs).
//!
//! Every job gets a thread of its own at once: a supervisor job must never wait
//! behind another one, because the child it serves is blocked in its mediated
//! `execve` until it runs. A job either claims an idle worker or starts a new one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// A growing set of worker threads; they exit when the last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Workers {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    jobs: Mutex<Sender<Job>>,
    queue: Arc<Mutex<Receiver<Job>>>,
    idle: Arc<AtomicUsize>,
}

/// The result of a job, once it has run.
#[derive(Debug)]
pub(crate) struct Pending<T>(Receiver<T>);

impl<T> Pending<T> {
    /// Waits for the job; `None` if it panicked.
    pub(crate) fn join(self) -> Option<T> {
        self.0.recv().ok()
    }
}

impl Workers {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        let inner = Inner {
            jobs: Mutex::new(tx),
            queue: Arc::new(Mutex::new(rx)),
            idle: Arc::new(AtomicUsize::new(0)),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Runs `f` on a thread of its own (an idle worker, or a new one).
    pub(crate) fn run<T, F>(&self, name: &str, f: F) -> std::io::Result<Pending<T>>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        let claimed = self
            .inner
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if claimed.is_ok() {
            let sent = self.inner.jobs.lock().map(|jobs| jobs.send(job));
            if let Ok(Ok(())) = sent {
                return Ok(Pending(rx));
            }
            return Err(std::io::Error::other("worker queue closed"));
        }
        let (queue, idle) = (Arc::clone(&self.inner.queue), Arc::clone(&self.inner.idle));
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                job();
                serve(&queue, &idle);
            })?;
        Ok(Pending(rx))
    }
}

/// A worker's life after its first job: announce itself idle, take the next job.
fn serve(queue: &Mutex<Receiver<Job>>, idle: &AtomicUsize) {
    loop {
        idle.fetch_add(1, Ordering::AcqRel);
        let next = match queue.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        match next {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_concurrently_and_threads_are_reused() -> Result<(), Box<dyn std::error::Error>> {
        let workers = Workers::new();
        // Two jobs that each wait for the other: they must not share a thread.
        let (a_tx, a_rx) = mpsc::channel::<()>();
        let (b_tx, b_rx) = mpsc::channel::<()>();
        let first = workers.run("t", move || {
            let _ = a_tx.send(());
            b_rx.recv().is_ok()
        })?;
        let second = workers.run("t", move || {
            let _ = b_tx.send(());
            a_rx.recv().is_ok()
        })?;
        assert_eq!((first.join(), second.join()), (Some(true), Some(true)));
        let ids = (0..4)
            .map(|_| {
                workers
                    .run("t", || std::thread::current().id())
                    .map(Pending::join)
            })
            .collect::<Result<Vec<_>, _>>()?;
        assert!(ids.iter().all(Option::is_some));
        Ok(())
    }
}
