//! The on-disk journal: a run's prefix is verifiable; tampering with it is not hidden.

use knox::session::{ExecutorKind, WorkloadRun};
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
