//! Collects a tool's stdout and stderr on one worker thread, keeping at most a fixed number of bytes of each.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;

use crate::sys;

/// Bytes an empty pipe accepts without blocking (Linux default: 16 pages).
pub(crate) const PIPE_CAPACITY: usize = 64 * 1024;

/// What the tool wrote.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// Standard output, truncated to the limit.
    pub(crate) stdout: Vec<u8>,
    /// Standard error, truncated to the limit.
    pub(crate) stderr: Vec<u8>,
}

/// One stream being drained.
struct Stream {
    file: Option<File>,
    kept: Vec<u8>,
    open: bool,
}

impl Stream {
    /// Reads once; past `max` bytes the data is read and dropped so the tool never blocks.
    fn drain(&mut self, buf: &mut [u8], max: usize) {
        let Some(file) = self.file.as_mut() else {
            self.open = false;
            return;
        };
        match file.read(buf) {
            Ok(0) => self.open = false,
            Ok(n) => {
                let room = max.saturating_sub(self.kept.len()).min(n);
                self.kept
                    .extend_from_slice(buf.get(..room).unwrap_or_default());
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => self.open = false,
        }
    }
}

/// Drains both pipes until both reach end of file (every writer, the tool and
/// anything it started, has closed them or died). Without `stdout` (a worker,
/// whose stdout carries frames) only standard error is collected.
pub(crate) fn collect(
    stdout: Option<File>,
    stderr: File,
    max: usize,
) -> impl FnOnce() -> Collected + Send {
    move || {
        let mut streams = [stdout, Some(stderr)].map(|file| match file {
            Some(file) => Stream {
                file: Some(file),
                kept: Vec::new(),
                open: true,
            },
            None => Stream {
                file: None,
                kept: Vec::new(),
                open: false,
            },
        });
        let mut buf = vec![0_u8; 16 * 1024];
        while streams.iter().any(|s| s.open) {
            let fds: Vec<_> = streams
                .iter()
                .map(|s| s.file.as_ref().filter(|_| s.open).map(AsFd::as_fd))
                .collect();
            let Ok(ready) = sys::poll_many(&fds) else {
                break;
            };
            for (stream, ready) in streams.iter_mut().zip(ready) {
                if ready {
                    stream.drain(&mut buf, max);
                }
            }
        }
        let [out, err] = streams;
        Collected {
            stdout: out.kept,
            stderr: err.kept,
        }
    }
}
