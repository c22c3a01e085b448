//! The on-disk journal: a run's prefix is verifiable; tampering with it is not hidden.

use knox::session::ExecutorKind;
use knox_monitor::aeg::Checkpoints;
use knox_types::aeg::{Node, NodeKind};
use knox_types::checkpoint::Checkpoint;
use knox_types::payload::Body;
use knox_verify::Outcome;

use super::support::{ALLOW, manifest, outcomes_with, workload};

fn journal() -> (tempfile::TempDir, Vec<u8>, knox_types::bundle::Bundle) {
    let dir = tempfile::tempdir().unwrap();
    let o = outcomes_with(&workload("mt-ma:4:2", 4), ExecutorKind::Injected, |b| {
        b.journal_dir(dir.path())
    })
    .remove(0);
    let path = dir
        .path()
        .join(format!("{}.journal.jsonl", o.bundle.run_id));
    let bytes = std::fs::read(path).unwrap();
    (dir, bytes, o.bundle)
}

fn check(bytes: &[u8]) -> knox_verify::Report {
    knox_verify::journal::verify_journal(bytes, manifest(), ALLOW).unwrap()
}

/// [`check`] of a journal whose checkpoint lines were not kept, as a store keeping node
/// lines alone reads it: only its signed cadence goes unchecked, so whatever still
/// catches an edit there is the replay, not the checkpoints.
fn check_stripped(bytes: &[u8]) -> knox_verify::Report {
    knox_verify::journal::verify_streamed_nodes(bytes, manifest(), ALLOW).unwrap()
}

#[test]
fn a_complete_journal_holds_every_node_and_verifies_as_a_prefix() {
    let (_d, bytes, bundle) = journal();
    let read = Lines::read(&bytes);
    assert_eq!(read.nodes().cloned().collect::<Vec<_>>(), bundle.nodes);
    // The default interval: a checkpoint after every 16 nodes (none needed at the end).
    let every = Checkpoints::DEFAULT.every_nodes as usize;
    assert_eq!(read.checkpoints().count(), bundle.nodes.len() / every);
    let r = check(&bytes);
    assert_eq!(r.outcome, Outcome::Prefix, "{r}");
    let signed = bundle.nodes.len() / every * every;
    assert_eq!(r.authenticated, Some(signed as u64), "{r}");
}

#[test]
fn a_killed_run_leaves_a_verifiable_prefix_even_when_the_last_line_is_torn() {
    let (_d, bytes, _) = journal();
    let newlines: Vec<usize> = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .collect();
    for &cut in newlines.iter().skip(1) {
        // Cut after a whole line, and in the middle of the next one.
        assert_eq!(check(&bytes[..=cut]).outcome, Outcome::Prefix);
        let torn = (cut + 20).min(bytes.len() - 1);
        let r = check(&bytes[..torn]);
        assert_eq!(r.outcome, Outcome::Prefix, "{r}");
    }
}

#[test]
fn tampering_with_a_journal_is_detected() {
    let (_d, bytes, _) = journal();
    let text = String::from_utf8(bytes).unwrap();
    let forged = text.replacen("\"allowed\":false", "\"allowed\":true", 1);
    assert_ne!(forged, text);
    assert!(matches!(
        check(forged.as_bytes()).outcome,
        Outcome::Tampered { node: Some(_), .. }
    ));
}

#[test]
fn a_run_killed_with_sigkill_leaves_journals_that_verify_as_prefixes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_knox"))
        .args([
            "run",
            "--workload",
            "mt-ma:6:4",
            "--flows",
            "1054",
            "--journal",
            "--out",
        ])
        .arg(dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Let it write some journals, then kill it without warning.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let journals = || {
        std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".journal.jsonl"))
            .collect::<Vec<_>>()
    };
    while journals().len() < 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    let found = journals();
    assert!(found.len() >= 5, "the run wrote {} journals", found.len());
    for path in found {
        let r = check(&std::fs::read(&path).unwrap());
        assert_eq!(r.outcome, Outcome::Prefix, "{}: {r}", path.display());
    }
    // If the run had finished first, the test proved nothing about a kill.
    assert!(!status.success(), "the run finished before it was killed");
}

/// A crash at any point (#16 defect 6), including inside a call's check sequence before
/// its regulation check, right after a checkpoint or inside a checkpoint's line, leaves
/// a journal that verifies as a prefix: journals of every topology, with and without
/// regulations, with a checkpoint every 1 to 3 nodes, and of confined terminal runs
/// whose kernel denials are nodes (where the sandbox is available), cut after every line
/// and in the middle of every checkpoint line, are never tampered and never unreadable; the nodes
/// a cut leaves authenticated are those before its last whole checkpoint, so they never
/// decrease as the cut moves on; each run's sealed bundle is complete.
#[test]
fn a_journal_cut_at_every_line_boundary_verifies_as_a_prefix() {
    let context = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../regulations/examples/clinic.toml"
    );
    let mut runs: Vec<Vec<String>> = Vec::new();
    for regulated in [false, true] {
        for (i, spec) in super::support::TOPOLOGIES.iter().enumerate() {
            let mut args: Vec<String> = ["run", "--workload", spec, "--flows", "8"]
                .map(String::from)
                .into();
            args.extend(["--checkpoint-every-nodes".into(), (1 + i % 3).to_string()]);
            if regulated {
                args.extend(
                    [
                        "--regulations",
                        "GDPR,HIPAA",
                        "--regulation-context",
                        context,
                    ]
                    .map(String::from),
                );
            }
            runs.push(args);
        }
    }
    let confined = ["run", "--suite", "terminal", "--tools", "confined"]
        .into_iter()
        .chain(["--workload", "mt-sa-seq:4", "--checkpoint-every-nodes", "2"])
        .map(String::from)
        .collect();
    runs.push(confined);
    let mut cuts = Cuts::default();
    let mut denials = 0;
    for args in runs {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = super::support::knox();
        cmd.args(&args)
            .arg("--journal")
            .arg("--out")
            .arg(dir.path());
        let out = cmd.output().unwrap();
        if super::support::sandbox_unavailable(&out) {
            continue;
        }
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut journals: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".journal.jsonl"))
            .collect();
        journals.sort();
        assert!(!journals.is_empty(), "{args:?}: no journal written");
        for path in journals {
            let bytes = std::fs::read(&path).unwrap();
            let bundle = path.to_string_lossy().replace(".journal.jsonl", ".json");
            let sealed: knox_types::bundle::Bundle =
                serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
            let r = super::support::verify(&sealed);
            assert_eq!(r.outcome, Outcome::Complete, "{bundle}: {r}");
            denials += sealed
                .nodes
                .iter()
                .filter(|n| {
                    n.kind == NodeKind::Blocked && n.payload.to_value()["guard"] == "kernel"
                })
                .count();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            cuts.every_cut(&name, &bytes);
        }
    }
    assert!(
        cuts.failures.is_empty(),
        "{} of {} cuts are not a prefix authenticated up to their last checkpoint:\n{}",
        cuts.failures.len(),
        cuts.tried,
        cuts.failures.join("\n")
    );
    assert!(cuts.after_checkpoint > 0 && cuts.inside_checkpoint > 0);
    eprintln!(
        "{} cuts ({} right after a checkpoint, {} inside one); {denials} kernel denials",
        cuts.tried, cuts.after_checkpoint, cuts.inside_checkpoint
    );
}

/// Cuts of journals and what went wrong with them.
#[derive(Default)]
struct Cuts {
    tried: usize,
    after_checkpoint: usize,
    inside_checkpoint: usize,
    failures: Vec<String>,
}

impl Cuts {
    /// Cuts `bytes` after every line and in the middle of every checkpoint line (a torn
    /// node line: `a_killed_run_leaves_a_verifiable_prefix_even_when_the_last_line_is_torn`):
    /// each must be a prefix authenticating the nodes before its last whole checkpoint
    /// line, and that count never decreases with the cut.
    fn every_cut(&mut self, name: &str, bytes: &[u8]) {
        let mut ends = Vec::new();
        let mut start = 0;
        for (i, _) in bytes.iter().enumerate().filter(|(_, b)| **b == b'\n') {
            if start > 0 && serde_json::from_slice::<Checkpoint>(&bytes[start..i]).is_ok() {
                ends.push((start + (i - start) / 2, &bytes[start..i]));
            }
            ends.push((i + 1, &bytes[start..i]));
            start = i + 1;
        }
        let (mut nodes, mut signed, mut last) = (0u64, 0u64, 0u64);
        for (end, line) in ends {
            self.tried += 1;
            let whole = bytes.get(end - 1) == Some(&b'\n');
            let is_checkpoint = serde_json::from_slice::<Checkpoint>(line).is_ok();
            if whole && end > line.len() + 1 {
                if is_checkpoint {
                    signed = nodes;
                    self.after_checkpoint += 1;
                } else {
                    nodes += 1;
                }
            } else if is_checkpoint {
                self.inside_checkpoint += 1;
            }
            match knox_verify::journal::verify_journal(&bytes[..end], manifest(), ALLOW) {
                Ok(r) if r.outcome == Outcome::Prefix && r.authenticated == Some(signed) => {
                    if signed < last {
                        self.failures
                            .push(format!("{name} cut at byte {end}: {signed} < {last}"));
                    }
                    last = signed;
                }
                Ok(r) => self.failures.push(format!(
                    "{name} cut at byte {end}: expected {signed} authenticated: {r}"
                )),
                Err(e) => self
                    .failures
                    .push(format!("{name} cut at byte {end}: unreadable: {e}")),
            }
        }
    }
}

/// The gap a cut leaves is only forgiven at the journal's end: a regulation check
/// dropped from the middle of a journal (the rest renumbered and re-measured) or from a
/// sealed bundle is still `regulation check missing` (#16 defect 6).
#[test]
fn a_regulation_check_missing_before_the_end_is_still_tampering() {
    let dir = tempfile::tempdir().unwrap();
    let context = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../regulations/examples/clinic.toml"
    );
    super::support::succeeds(
        super::support::knox()
            .args(["run", "--workload", "st-sa", "--flows", "1", "--journal"])
            .args([
                "--regulations",
                "GDPR,HIPAA",
                "--regulation-context",
                context,
            ])
            .arg("--out")
            .arg(dir.path()),
    );
    let path = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".journal.jsonl"))
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let header = lines.next().unwrap().to_vec();
    // Read as a forger would, who cannot sign checkpoints: they are dropped.
    let nodes: Vec<knox_types::aeg::Node> = lines
        .filter(|l| serde_json::from_slice::<Checkpoint>(l).is_err())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let journal = |nodes: &[knox_types::aeg::Node]| {
        let mut out = header.clone();
        for n in nodes {
            out.push(b'\n');
            out.extend(serde_json::to_vec(n).unwrap());
        }
        out.push(b'\n');
        out
    };
    // Without its checkpoints, the signed cadence alone makes it tampered (#35)...
    match check(&journal(&nodes)).outcome {
        Outcome::Tampered { reason, .. } => {
            assert!(reason.contains("checkpoints were removed"), "{reason}")
        }
        other => panic!("checkpoints dropped: {other:?}"),
    }
    // ...and read as node lines alone, the replay still judges each edit.
    assert_eq!(check_stripped(&journal(&nodes)).outcome, Outcome::Prefix);
    let at = nodes
        .iter()
        .position(|n| n.kind == NodeKind::Check && n.payload.to_value()["guard"] == "regulation")
        // A regulated run records a regulation check.
        .unwrap();
    let mut forged = nodes.clone();
    forged.remove(at);
    for (i, n) in forged.iter_mut().enumerate() {
        n.seq = i as u64;
        n.parent = n.parent.map(|p| if p > at as u64 { p - 1 } else { p });
        n.measurement = n.compute_measurement();
    }
    // Cut right at the gap: a prefix. With any node after the gap: tampered.
    assert_eq!(
        check_stripped(&journal(&forged[..at])).outcome,
        Outcome::Prefix
    );
    for end in [at + 1, forged.len()] {
        match check_stripped(&journal(&forged[..end])).outcome {
            Outcome::Tampered { reason, .. } => {
                assert!(reason.contains("regulation check"), "{reason}")
            }
            other => panic!("gap followed by {end} nodes: {other:?}"),
        }
    }
    // The sealed bundle with the same gap is tampered.
    let bundle = path.to_string_lossy().replace(".journal.jsonl", ".json");
    let mut sealed: knox_types::bundle::Bundle =
        serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
    sealed.nodes = forged;
    assert!(matches!(
        super::support::verify(&sealed).outcome,
        Outcome::Tampered { .. }
    ));
}

/// A journal's lines as read: its header, then node and checkpoint lines in order.
#[derive(Clone)]
struct Lines {
    header: Vec<u8>,
    lines: Vec<Line>,
}

#[derive(Clone)]
enum Line {
    Node(Box<Node>),
    Checkpoint(Checkpoint),
}

impl Line {
    fn text(&self) -> String {
        match self {
            Self::Node(n) => serde_json::to_string(n).unwrap(),
            Self::Checkpoint(c) => serde_json::to_string(c).unwrap(),
        }
    }
}

impl Lines {
    fn read(bytes: &[u8]) -> Self {
        let mut it = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
        let header = it.next().unwrap().to_vec();
        let lines = it
            .map(|l| match serde_json::from_slice::<Checkpoint>(l) {
                Ok(c) => Line::Checkpoint(c),
                Err(_) => Line::Node(Box::new(serde_json::from_slice(l).unwrap())),
            })
            .collect();
        Self { header, lines }
    }

    /// The file, written as a forger would.
    fn write(&self) -> Vec<u8> {
        let mut out = self.header.clone();
        out.push(b'\n');
        for l in &self.lines {
            out.extend(l.text().into_bytes());
            out.push(b'\n');
        }
        out
    }

    fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.lines.iter().filter_map(|l| match l {
            Line::Node(n) => Some(&**n),
            Line::Checkpoint(_) => None,
        })
    }

    fn checkpoints(&self) -> impl Iterator<Item = &Checkpoint> {
        self.lines.iter().filter_map(|l| match l {
            Line::Checkpoint(c) => Some(c),
            Line::Node(_) => None,
        })
    }

    /// The line index of node `seq`.
    fn line_of(&self, seq: usize) -> usize {
        let mut nodes = 0;
        self.lines
            .iter()
            .position(|l| {
                let hit = matches!(l, Line::Node(_)) && nodes == seq;
                nodes += usize::from(matches!(l, Line::Node(_)));
                hit
            })
            .unwrap()
    }

    /// The first `n` lines.
    fn cut(&self, n: usize) -> Self {
        Self {
            header: self.header.clone(),
            lines: self.lines[..n].to_vec(),
        }
    }

    /// Without any checkpoint: what a forger who cannot sign leaves.
    fn unsigned(&self) -> Self {
        let mut s = self.clone();
        s.lines.retain(|l| matches!(l, Line::Node(_)));
        s
    }
}

/// One run of `mt-ma:4:2` (four flows, the injected executor: attacks blocked) under a
/// fresh key, with a checkpoint every three nodes: its journal's lines.
fn checkpointed(nonce: &[u8]) -> Lines {
    let dir = tempfile::tempdir().unwrap();
    let runs = outcomes_with(&workload("mt-ma:4:2", 4), ExecutorKind::Injected, |b| {
        b.nonce(nonce.to_vec())
            .checkpoints(Checkpoints {
                every_nodes: 3,
                every_ms: u64::MAX,
            })
            .journal_dir(dir.path())
    });
    let path = dir
        .path()
        .join(format!("{}.journal.jsonl", runs[0].bundle.run_id));
    Lines::read(&std::fs::read(path).unwrap())
}

/// A forgery of `honest` whose first edited node is `first`, a forgery that verified
/// as a prefix before checkpoints (it still does with its checkpoints stripped):
/// up to the first checkpoint line after the first line it changes, it is tampered,
/// naming that checkpoint's line; cut just before that checkpoint (the edit in the
/// unauthenticated tail), it is a prefix whose authenticated nodes are those the last
/// checkpoint before the edit signs. Returns whether the forgery was viable (some edits
/// are caught by the replay anyway).
fn caught_before_the_last_checkpoint(
    honest: &Lines,
    forged: &Lines,
    first: usize,
    what: &str,
) -> bool {
    // The first line that differs (a deletion may leave a checkpoint there).
    let at = (0..forged.lines.len())
        .find(|&i| honest.lines.get(i).map(Line::text) != Some(forged.lines[i].text()))
        .unwrap_or(forged.lines.len());
    let Some(cp) =
        (at..forged.lines.len()).find(|&i| matches!(forged.lines[i], Line::Checkpoint(_)))
    else {
        return false;
    };
    let signed = forged.cut(cp + 1);
    // Only the checkpoints catch it: with none kept, the replay finds nothing.
    if check_stripped(&signed.unsigned().write()).outcome != Outcome::Prefix {
        return false;
    }
    let r = check(&signed.write());
    match &r.outcome {
        Outcome::Tampered { reason, .. } => assert!(
            reason.contains(&format!("checkpoint on line {}", cp + 2)),
            "{what}: {r}"
        ),
        other => panic!("{what}: an edit before a checkpoint verified {other:?}"),
    }
    let tail = forged.cut(cp);
    let r = check(&tail.write());
    let k = honest
        .cut(at)
        .checkpoints()
        .last()
        .map_or(0, |c| c.checkpoint.nodes);
    assert_eq!(r.outcome, Outcome::Prefix, "{what} in the tail: {r}");
    assert_eq!(r.authenticated, Some(k), "{what} in the tail: {r}");
    assert!(k <= first as u64, "{what}");
    true
}

/// Re-measures every node from `from` on (the forger's last step).
fn remeasure(l: &mut Lines, from: usize) {
    for line in &mut l.lines {
        if let Line::Node(n) = line
            && n.seq as usize >= from
        {
            n.measurement = n.compute_measurement();
        }
    }
}

/// #16 defect 4: a tool's output rewritten and the node re-measured. Before the last
/// checkpoint it is tampered; after it, a prefix that authenticates only what precedes.
#[test]
fn a_rewritten_tool_output_before_a_checkpoint_is_tampered() {
    let honest = checkpointed(b"rewrite");
    assert_eq!(check(&honest.write()).outcome, Outcome::Prefix);
    let mut viable = 0;
    for n in honest.nodes().filter(|n| n.kind == NodeKind::ToolOutput) {
        let mut forged = honest.clone();
        let at = forged.line_of(n.seq as usize);
        let Line::Node(node) = &mut forged.lines[at] else {
            unreachable!()
        };
        let mut v = node.payload.to_value();
        v["output"] = serde_json::json!({"note": "nothing happened"});
        node.payload = Body::read(node.kind, v);
        remeasure(&mut forged, n.seq as usize);
        viable += usize::from(caught_before_the_last_checkpoint(
            &honest,
            &forged,
            n.seq as usize,
            "rewritten output",
        ));
    }
    assert!(
        viable > 0,
        "no rewritten output verified as a prefix without checkpoints"
    );
}

/// #16 defect 4: a blocked attack (its call, checks and `blocked` node) deleted and the
/// nodes after it renumbered and re-measured.
#[test]
fn a_deleted_blocked_attack_before_a_checkpoint_is_tampered() {
    let honest = checkpointed(b"delete");
    let nodes: Vec<Node> = honest.nodes().cloned().collect();
    let mut viable = 0;
    for b in nodes.iter().filter(|n| n.kind == NodeKind::Blocked) {
        let check_node = &nodes[b.parent.unwrap() as usize];
        let call = check_node.parent.unwrap();
        let (first, last) = (call, b.seq);
        let gone = last - first + 1;
        let up = nodes[call as usize].parent;
        let mut forged = honest.clone();
        forged
            .lines
            .retain(|l| !matches!(l, Line::Node(n) if (first..=last).contains(&n.seq)));
        for l in &mut forged.lines {
            if let Line::Node(n) = l {
                if n.seq > last {
                    n.seq -= gone;
                }
                n.parent = n.parent.and_then(|p| match p {
                    p if (first..=last).contains(&p) => up,
                    p if p > last => Some(p - gone),
                    p => Some(p),
                });
            }
        }
        remeasure(&mut forged, first as usize);
        viable += usize::from(caught_before_the_last_checkpoint(
            &honest,
            &forged,
            first as usize,
            "deleted attack",
        ));
    }
    assert!(
        viable > 0,
        "no deleted attack verified as a prefix without checkpoints"
    );
}

/// #16 defect 4: another execution of the same run (same run id and APM, another key)
/// put under this journal's header. Its checkpoints are not signed by this header's
/// key, and this journal's checkpoints do not sign its nodes.
#[test]
fn another_executions_nodes_under_this_header_are_tampered() {
    let a = checkpointed(b"execution-a");
    let b = checkpointed(b"execution-b");
    // Another execution's whole journal under this header: its checkpoints are not
    // signed by this header's key; without them it would verify as this run's prefix.
    let spliced = Lines {
        header: a.header.clone(),
        lines: b.lines.clone(),
    };
    assert_eq!(
        check_stripped(&spliced.unsigned().write()).outcome,
        Outcome::Prefix
    );
    match check(&spliced.write()).outcome {
        Outcome::Tampered { reason, .. } => {
            assert!(reason.contains("signature"), "{reason}");
        }
        other => panic!("a spliced execution verified {other:?}"),
    }
    // This journal's checkpoints over the other execution's nodes, where they differ.
    let theirs: Vec<Node> = b.nodes().cloned().collect();
    let mut forged = a.clone();
    for l in &mut forged.lines {
        if let Line::Node(n) = l
            && let Some(m) = theirs.get(n.seq as usize)
        {
            **n = m.clone();
        }
    }
    let first = a.nodes().zip(&theirs).position(|(x, y)| x != y);
    if let Some(first) = first {
        assert!(caught_before_the_last_checkpoint(
            &a,
            &forged,
            first,
            "spliced nodes"
        ));
    } else {
        eprintln!("the two executions wrote the same nodes: only their checkpoints differ");
    }
}
