//! The gateways' label store (issue 36, item 2): which labelled outputs a model has
//! heard, across the runs a gateway serves.
//!
//! A model that read labelled data in one conversation or session can write it into
//! any later one — a remote model's operator keeps what it was sent, an MCP client's
//! model keeps its conversation — so every run of the same model records, before it
//! mediates anything more, a `heard` node for each labelled output another run
//! returned to that model. Content the model composes afterwards then carries that
//! output's labels, whatever it looks like (`knox_policy::provenance`).
//!
//! The store holds at most two entries per tool and endpoint (or one per run): which
//! tools' labels a model heard is what decides, not how often, so the store stays
//! bounded by the manifest. With a file (`<out>/heard.jsonl`, one
//! [`HeardPayload`] per line) it outlives the process: every gateway writing evidence
//! to the same directory — one user's — sees what earlier ones heard. The file is
//! locked while an entry is appended, so gateways sharing it do not interleave lines.
//! A line that does not parse is skipped: the store only ever adds `heard` nodes, each
//! of which the monitor accepts only for a labelled tool of the run's manifest.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use knox_engine::LiveRun;
use knox_policy::ToolkitManifest;
use knox_types::payload::HeardPayload;

/// The file a gateway keeps its label store in, beside its bundles.
pub const FILE: &str = "heard.jsonl";

/// Most entries of one tool and endpoint the store keeps.
const PER_TOOL: usize = 2;

/// Which labelled outputs each model heard, in the order they were heard.
#[derive(Debug, Default)]
pub struct Heard {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    log: Vec<HeardPayload>,
    /// The store's file and how far it has been read.
    file: Option<(PathBuf, u64)>,
}

impl Heard {
    /// A store kept in memory: this process's runs only.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A store kept in `dir`'s [`FILE`] (both created when missing), with what earlier
    /// gateways wrote there.
    pub fn in_dir(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE);
        // Created now, so a directory the gateway cannot write fails at start, not at
        // the first labelled output.
        OpenOptions::new().create(true).append(true).open(&path)?;
        let store = Self {
            inner: Mutex::new(Inner {
                log: Vec::new(),
                file: Some((path, 0)),
            }),
        };
        store.lock().refresh()?;
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records that the model at `endpoint` heard the output `node` of `tool` in run
    /// `run`, when `tool`'s output carries labels in `manifest` and the store does not
    /// already hold enough of that tool. A file that cannot be written loses nothing
    /// already held; the error says why the entry is not kept.
    pub fn hear(
        &self,
        manifest: &ToolkitManifest,
        endpoint: &str,
        run: &str,
        node: u64,
        tool: &str,
    ) -> std::io::Result<()> {
        if !labelled(manifest, tool) {
            return Ok(());
        }
        let entry = HeardPayload {
            endpoint: endpoint.to_owned(),
            run: run.to_owned(),
            node,
            tool: tool.to_owned(),
        };
        let mut inner = self.lock();
        let Some((path, _)) = inner.file.clone() else {
            if inner.admits(&entry) {
                inner.log.push(entry);
            }
            return Ok(());
        };
        let mut file = OpenOptions::new().append(true).read(true).open(&path)?;
        file.lock()?;
        // Under the lock: what other gateways appended counts before deciding.
        inner.read_from(&mut file)?;
        if inner.admits(&entry) {
            let mut line = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
            line.push(b'\n');
            file.write_all(&line)?;
            file.flush()?;
            inner.read_from(&mut file)?;
        }
        Ok(())
    }

    /// Records into `live` (run `run`, its model at `endpoint`) a `heard` node for every
    /// entry from entry `from` on that another run heard through the same endpoint;
    /// returns how far the store has been taken in.
    pub fn catch_up(&self, live: &LiveRun<'_>, endpoint: &str, run: &str, from: usize) -> usize {
        let mut inner = self.lock();
        // A file another gateway appended to is read again; one that cannot be read
        // keeps what the store holds.
        let _ = inner.refresh();
        for h in inner
            .log
            .iter()
            .skip(from)
            .filter(|h| h.run != run && h.endpoint == endpoint)
        {
            // Only a tool of this manifest with labels is logged: the monitor accepts it.
            let _ = live.heard(h.clone());
        }
        inner.log.len()
    }

    /// The entries held, in order.
    pub fn entries(&self) -> Vec<HeardPayload> {
        let mut inner = self.lock();
        let _ = inner.refresh();
        inner.log.clone()
    }
}

impl Inner {
    /// Whether `entry` is kept: its run has no entry of its tool, and the endpoint has
    /// fewer than [`PER_TOOL`] of it.
    fn admits(&self, entry: &HeardPayload) -> bool {
        let of_tool: Vec<&HeardPayload> = self
            .log
            .iter()
            .filter(|h| h.tool == entry.tool && h.endpoint == entry.endpoint)
            .collect();
        of_tool.len() < PER_TOOL && of_tool.iter().all(|h| h.run != entry.run)
    }

    /// Takes in what the file holds past what was read.
    fn refresh(&mut self) -> std::io::Result<()> {
        let Some((path, _)) = self.file.clone() else {
            return Ok(());
        };
        let mut file = File::open(path)?;
        self.read_from(&mut file)
    }

    fn read_from(&mut self, file: &mut File) -> std::io::Result<()> {
        let Some((_, read)) = &mut self.file else {
            return Ok(());
        };
        if file.metadata()?.len() <= *read {
            return Ok(());
        }
        file.seek(SeekFrom::Start(*read))?;
        let mut rest = Vec::new();
        file.read_to_end(&mut rest)?;
        // Only whole lines: one being appended is read next time.
        let whole = rest.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in rest.get(..whole).unwrap_or_default().split(|b| *b == b'\n') {
            if let Ok(h) = serde_json::from_slice::<HeardPayload>(line) {
                self.log.push(h);
            }
        }
        *read += whole as u64;
        Ok(())
    }
}

/// Whether `tool`'s output carries labels (information types) in `manifest`.
fn labelled(manifest: &ToolkitManifest, tool: &str) -> bool {
    manifest
        .tool(tool)
        .and_then(|t| t.annotations.returns.as_ref())
        .is_some_and(|r| !r.info_types.is_empty())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn entry(run: &str, tool: &str) -> HeardPayload {
        HeardPayload {
            endpoint: "e".into(),
            run: run.into(),
            node: 1,
            tool: tool.into(),
        }
    }

    #[test]
    fn the_store_keeps_two_runs_of_a_tool_and_one_entry_per_run() {
        let mut inner = Inner::default();
        assert!(inner.admits(&entry("a", "t")));
        inner.log.push(entry("a", "t"));
        assert!(!inner.admits(&entry("a", "t")), "one per run");
        assert!(inner.admits(&entry("b", "t")));
        inner.log.push(entry("b", "t"));
        assert!(!inner.admits(&entry("c", "t")), "two per tool");
        assert!(inner.admits(&entry("c", "u")), "another tool");
        let other = HeardPayload {
            endpoint: "f".into(),
            ..entry("c", "t")
        };
        assert!(inner.admits(&other), "another endpoint");
    }

    #[test]
    fn a_file_store_is_read_by_the_next_gateway_and_skips_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let mut first = serde_json::to_string(&entry("a", "t")).unwrap();
        first.push_str("\nnot json\n{\"endpoint\":\"e\",\"run\":\"b\",\"no");
        std::fs::write(&path, first).unwrap();
        let store = Heard::in_dir(dir.path()).unwrap();
        assert_eq!(
            store.entries(),
            vec![entry("a", "t")],
            "a partial line waits"
        );
        // The partial line is completed by its writer.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"de\":2,\"tool\":\"t\"}\n").unwrap();
        let got = store.entries();
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].run, "b");
        assert_eq!(got[1].node, 2);
    }
}
