//! The streaming side of `knox run --stream-to URL`: a thread follows the run's journals
//! (`*.journal.jsonl` in the output folder, written by the monitor as each node is
//! committed) and delivers every new whole line to the store, signed with the
//! provider's key; the sealed bundles are then submitted as `knox submit` does.
//!
//! The journal is the stream: what the store receives is exactly what the monitor
//! wrote to the disk, and what it verifies is what `knox verify` reads from that file.
//! A delivery that fails (the store is down) is retried at the next tick from the same
//! offset; the run itself never waits for the store.

use std::collections::BTreeMap;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::client::{Client, ClientError};
use crate::live::{Delivered, LiveRun};

/// The suffix of the journals followed.
pub const JOURNAL_SUFFIX: &str = ".journal.jsonl";
/// The most bytes read from one journal per delivery (a delivery stays well under the
/// server's body limit).
const MAX_CHUNK: u64 = 8 << 20;

/// What the store answers to a delivery.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct LiveAnswer {
    /// The live run as the store now shows it.
    pub run: LiveRun,
    /// What this delivery did.
    pub delivered: Delivered,
}

/// What a streamer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Deliveries the store accepted.
    pub deliveries: u64,
    /// Node lines delivered.
    pub lines: u64,
    /// Deliveries that failed (retried at the next tick), and the last error.
    pub failures: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
}

impl Client {
    /// Delivers a journal fragment (`header\n` then node lines, each ending `\n`).
    pub fn deliver(&self, fragment: &[u8]) -> Result<LiveAnswer, ClientError> {
        self.ok("POST", "/api/live", fragment)
    }
}

/// One journal followed.
#[derive(Debug, Default)]
struct Followed {
    /// The header line, with its `\n`, once read.
    header: Option<Vec<u8>>,
    /// Bytes of the file delivered so far.
    offset: u64,
}

/// Follows the journals of a folder until [`Streamer::finish`].
#[derive(Debug)]
pub struct Streamer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<StreamStats>,
}

impl Streamer {
    /// Starts following `dir` every `tick`, delivering with `client`.
    pub fn watch(client: Client, dir: PathBuf, tick: Duration) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("knox-stream".into())
            .spawn(move || follow(&client, &dir, tick, &flag))?;
        Ok(Self { stop, thread })
    }

    /// Delivers what is left (one last pass over every journal) and stops.
    pub fn finish(self) -> StreamStats {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_else(|_| StreamStats {
            last_error: Some("the streaming thread panicked".into()),
            ..StreamStats::default()
        })
    }
}

/// The thread: passes over the folder until stopped, then a last one.
fn follow(client: &Client, dir: &Path, tick: Duration, stop: &AtomicBool) -> StreamStats {
    let mut files: BTreeMap<PathBuf, Followed> = BTreeMap::new();
    let mut stats = StreamStats::default();
    loop {
        let last = stop.load(Ordering::SeqCst);
        pass(client, dir, &mut files, &mut stats);
        if last {
            return stats;
        }
        std::thread::sleep(tick);
    }
}

/// One pass: every journal of `dir`, its new whole lines delivered.
fn pass(
    client: &Client,
    dir: &Path,
    files: &mut BTreeMap<PathBuf, Followed>,
    stats: &mut StreamStats,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(JOURNAL_SUFFIX))
        {
            let f = files.entry(path.clone()).or_default();
            // Bounded: each round delivers at most MAX_CHUNK bytes and stops at EOF.
            for _ in 0..64 {
                match step(client, &path, f) {
                    Ok(None) => break,
                    Ok(Some(n)) => {
                        stats.deliveries += 1;
                        stats.lines += n;
                    }
                    Err(e) => {
                        stats.failures += 1;
                        stats.last_error = Some(format!("{}: {e}", path.display()));
                        break;
                    }
                }
            }
        }
    }
}

/// Delivers the next whole lines of one journal: `None` when there were none, else
/// the number of node lines sent (the first delivery may carry the header alone).
fn step(client: &Client, path: &Path, f: &mut Followed) -> Result<Option<u64>, String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    file.seek(SeekFrom::Start(f.offset))
        .map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    file.take(MAX_CHUNK)
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    // Only whole lines: the monitor may be writing the next one.
    let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
        if buf.len() as u64 == MAX_CHUNK {
            return Err(format!("a journal line is longer than {MAX_CHUNK} bytes"));
        }
        return Ok(None);
    };
    let whole = buf.get(..=end).unwrap_or_default();
    let (header, nodes) = match &f.header {
        Some(h) => (h.clone(), whole),
        None => {
            let cut = whole.iter().position(|&b| b == b'\n').unwrap_or(end);
            let (h, rest) = whole.split_at(cut + 1);
            (h.to_vec(), rest)
        }
    };
    let mut fragment = header.clone();
    fragment.extend_from_slice(nodes);
    client.deliver(&fragment).map_err(|e| e.to_string())?;
    f.header = Some(header);
    f.offset += whole.len() as u64;
    Ok(Some(nodes.iter().filter(|&&b| b == b'\n').count() as u64))
}
