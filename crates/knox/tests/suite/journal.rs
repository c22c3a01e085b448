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
