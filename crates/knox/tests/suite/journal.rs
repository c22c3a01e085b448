//! The on-disk journal: a run's prefix is verifiable; tampering with it is not hidden.

use knox::session::{ExecutorKind, WorkloadRun};
use knox_types::aeg::NodeKind;
use knox_verify::Outcome;

use super::support::{ALLOW, manifest, outcomes};

fn journal() -> (tempfile::TempDir, Vec<u8>, knox_types::bundle::Bundle) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = WorkloadRun::new("mt-ma:4:2".parse().unwrap(), ExecutorKind::Injected, 4);
    w.journal_dir = Some(dir.path());
    let o = outcomes(&w).remove(0);
    let path = dir
        .path()
        .join(format!("{}.journal.jsonl", o.bundle.run_id));
    let bytes = std::fs::read(path).unwrap();
    (dir, bytes, o.bundle)
}

fn check(bytes: &[u8]) -> knox_verify::Report {
    knox_verify::journal::verify_journal(bytes, manifest(), ALLOW).unwrap()
}

#[test]
fn a_complete_journal_holds_every_node_and_verifies_as_a_prefix() {
    let (_d, bytes, bundle) = journal();
    let lines = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(
        lines,
        bundle.nodes.len() + 1,
        "header plus one line per node"
    );
    let r = check(&bytes);
    assert_eq!(r.outcome, Outcome::Prefix, "{r}");
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
/// its regulation check, leaves a journal that verifies as a prefix: journals of every
/// topology, with and without regulations, cut after every line, are never tampered and
/// never unreadable; each run's sealed bundle is complete.
#[test]
fn a_journal_cut_at_every_line_boundary_verifies_as_a_prefix() {
    let context = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../regulations/examples/clinic.toml"
    );
    let mut cuts = 0usize;
    let mut failures = Vec::new();
    for regulated in [false, true] {
        for spec in super::support::TOPOLOGIES {
            let dir = tempfile::tempdir().unwrap();
            let mut cmd = super::support::knox();
            cmd.args(["run", "--workload", spec, "--flows", "8", "--journal"]);
            if regulated {
                cmd.args([
                    "--regulations",
                    "GDPR,HIPAA",
                    "--regulation-context",
                    context,
                ]);
            }
            super::support::succeeds(cmd.arg("--out").arg(dir.path()));
            let mut journals: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".journal.jsonl"))
                .collect();
            journals.sort();
            assert!(!journals.is_empty(), "{spec}: no journal written");
            for path in journals {
                let bytes = std::fs::read(&path).unwrap();
                let bundle = path.to_string_lossy().replace(".journal.jsonl", ".json");
                let sealed: knox_types::bundle::Bundle =
                    serde_json::from_slice(&std::fs::read(&bundle).unwrap()).unwrap();
                let r = super::support::verify(&sealed);
                assert_eq!(r.outcome, Outcome::Complete, "{bundle}: {r}");
                let ends = bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i + 1);
                for end in ends {
                    cuts += 1;
                    let name = path.file_name().unwrap().to_string_lossy();
                    match knox_verify::journal::verify_journal(&bytes[..end], manifest(), ALLOW) {
                        Ok(r) if r.outcome == Outcome::Prefix => {}
                        Ok(r) => failures.push(format!("{name} cut at byte {end}: {r}")),
                        Err(e) => {
                            failures.push(format!("{name} cut at byte {end}: unreadable: {e}"))
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cuts} cuts are not a prefix:\n{}",
        failures.len(),
        failures.join("\n")
    );
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
    let nodes: Vec<knox_types::aeg::Node> =
        lines.map(|l| serde_json::from_slice(l).unwrap()).collect();
    let journal = |nodes: &[knox_types::aeg::Node]| {
        let mut out = header.clone();
        for n in nodes {
            out.push(b'\n');
            out.extend(serde_json::to_vec(n).unwrap());
        }
        out.push(b'\n');
        out
    };
    // Rewritten as the forger would write it, the journal is still a prefix.
    assert_eq!(check(&journal(&nodes)).outcome, Outcome::Prefix);
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
    assert_eq!(check(&journal(&forged[..at])).outcome, Outcome::Prefix);
    for end in [at + 1, forged.len()] {
        match check(&journal(&forged[..end])).outcome {
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
