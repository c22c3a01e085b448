//! Live runs over a real loopback server, on SQLite and PostgreSQL, with signed
//! requests: a streamed run in progress then complete; duplicate and re-ordered
//! deliveries change nothing; a tampered delivery is kept as tampered and never
//! replaces what was stored; a run whose monitor died stays a verified prefix; the
//! streamer follows a journal being written, torn last line included.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use super::common;

use std::io::Write as _;
use std::time::Duration;

use common::{JOURNAL, LIVE_BUNDLE, Served, serve, serve_with};
use knox_attest::PartyKey;
use knox_server::client::{Client, ClientError};
use knox_server::live::LiveRun;
use knox_server::stream::{LiveAnswer, Streamer};
use serde_json::Value;

macro_rules! on_both_engines_sync {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(&crate::suite::common::sqlite_url());
            }
            #[test]
            fn postgres() {
                if let Some(url) = crate::suite::common::postgres_url_blocking() {
                    super::$name(&url);
                }
            }
        }
    )*};
}

on_both_engines_sync!(
    a_streamed_run_is_in_progress_then_complete,
    a_bundle_sealed_before_the_stream_arrives_completes_it,
    duplicate_and_reordered_deliveries_change_nothing,
    a_tampered_delivery_is_kept_as_tampered_never_replacing,
    a_tampered_first_delivery_is_caught_by_the_chain,
    a_sealed_bundle_that_is_tampered_makes_the_live_run_tampered,
    a_run_whose_monitor_died_stays_a_verified_prefix,
    deliveries_that_are_not_journals_or_not_from_providers_are_refused,
    the_streamer_follows_a_journal_being_written,
);

fn client(s: &Served, key: &PartyKey) -> Client {
    Client::new(&s.base, PartyKey::from_seed(key.seed())).unwrap()
}

/// The run key (key id of the run's signing key) a journal header line names.
fn run_key(header: &[u8]) -> String {
    let h: knox_types::bundle::JournalHeader = serde_json::from_slice(header).unwrap();
    knox_server::ingest::run_key(&h.key)
}

/// The journal's header line and node lines, each with its `\n`.
fn journal() -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut lines = JOURNAL.split_inclusive(|&b| b == b'\n').map(<[u8]>::to_vec);
    let header = lines.next().unwrap();
    (header, lines.collect())
}

fn fragment(header: &[u8], nodes: &[Vec<u8>]) -> Vec<u8> {
    let mut f = header.to_vec();
    for n in nodes {
        f.extend_from_slice(n);
    }
    f
}

fn deliver(c: &Client, header: &[u8], nodes: &[Vec<u8>]) -> LiveAnswer {
    c.deliver(&fragment(header, nodes)).unwrap()
}

/// `GET /api/live/ID` as `c`: the status and the run, or the HTTP status refused.
fn live(c: &Client, id: &str) -> Result<(String, LiveRun), u16> {
    let (status, body) = c.request("GET", &format!("/api/live/{id}"), b"").unwrap();
    if status != 200 {
        return Err(status);
    }
    let v: Value = serde_json::from_slice(&body).unwrap();
    Ok((
        v["status"].as_str().unwrap().to_owned(),
        serde_json::from_value(v["run"].clone()).unwrap(),
    ))
}

fn a_streamed_run_is_in_progress_then_complete(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    assert_eq!(nodes.len(), 64);
    let a = deliver(&acme, &header, &[]);
    assert_eq!((a.run.received, a.run.verified), (0, 0));
    let a = deliver(&acme, &header, &nodes[..20]);
    assert_eq!(a.delivered.stored, 20);
    let id = a.run.live_id.clone();
    let (status, run) = live(&acme, &id).unwrap();
    assert_eq!(status, "in progress");
    assert_eq!(
        (run.outcome.as_str(), run.verified, run.received),
        ("prefix", 20, 20)
    );
    // The regulator assigned to acme sees it; another provider and another regulator
    // are answered as if it did not exist.
    assert_eq!(
        live(&client(&s, &s.people.cnil.0), &id).unwrap().0,
        "in progress"
    );
    assert_eq!(live(&client(&s, &s.people.globex.0), &id).unwrap_err(), 404);
    assert_eq!(live(&client(&s, &s.people.ico.0), &id).unwrap_err(), 404);
    deliver(&acme, &header, &nodes[20..]);
    let (status, run) = live(&acme, &id).unwrap();
    assert_eq!((status.as_str(), run.verified), ("in progress", 64));
    let sealed = acme.submit(LIVE_BUNDLE).unwrap();
    assert_eq!(sealed.outcome, "complete");
    let (status, run) = live(&acme, &id).unwrap();
    assert_eq!(status, "complete");
    assert_eq!(run.verified, 64);
    assert_eq!(run.bundle.as_deref(), Some(sealed.digest.as_str()));
    assert_eq!(run.reason, None);
}

/// The sealed bundle submitted before any delivery (a streamer that lags behind the
/// run): the deliveries that follow link it, and the run is complete once the stream
/// has caught up with it — not left in progress for ever.
fn a_bundle_sealed_before_the_stream_arrives_completes_it(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    let sealed = acme.submit(LIVE_BUNDLE).unwrap();
    assert_eq!(sealed.outcome, "complete");
    let a = deliver(&acme, &header, &nodes[..10]);
    let id = a.run.live_id.clone();
    assert_eq!(a.run.bundle.as_deref(), Some(sealed.digest.as_str()));
    deliver(&acme, &header, &nodes[10..]);
    let (status, run) = live(&acme, &id).unwrap();
    assert_eq!(status, "complete");
    assert_eq!((run.verified, run.received), (64, 64));
    assert_eq!(run.bundle.as_deref(), Some(sealed.digest.as_str()));
    // A delivery that contradicts the sealed bundle still makes the run tampered.
    let other = client(&s, &s.people.acme.0);
    let mut bad = nodes.clone();
    bad[3] = forged(&nodes, 3);
    let a = deliver(&other, &header, &bad[3..4]);
    assert_eq!(a.run.outcome, "tampered");
}

fn duplicate_and_reordered_deliveries_change_nothing(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    // The last nodes first: stored, but nothing is verifiable before node 0 arrives.
    let a = deliver(&acme, &header, &nodes[30..]);
    assert_eq!((a.run.received, a.run.verified), (34, 0));
    // Then the rest, in reverse order within the delivery.
    let mut first: Vec<Vec<u8>> = nodes[..30].to_vec();
    first.reverse();
    let a = deliver(&acme, &header, &first);
    assert_eq!((a.run.received, a.run.verified), (64, 64));
    let before = a.run;
    // Everything again, twice, shuffled: duplicates only.
    let mut again = nodes.clone();
    again.rotate_left(17);
    for _ in 0..2 {
        let a = deliver(&acme, &header, &again);
        assert_eq!(a.delivered.stored, 0);
        assert_eq!(a.delivered.duplicates, 64);
        assert_eq!(a.delivered.conflicts, 0);
        assert_eq!(
            LiveRun {
                updated_at: before.updated_at,
                ..a.run
            },
            before
        );
    }
    let stored = s.rt.block_on(s.store.live_nodes(&before.live_id)).unwrap();
    assert_eq!(stored.len(), 64);
    for (seq, line) in &stored {
        assert_eq!(
            [line.as_slice(), b"\n"].concat(),
            nodes[usize::try_from(*seq).unwrap()]
        );
    }
    acme.submit(LIVE_BUNDLE).unwrap();
    assert_eq!(live(&acme, &before.live_id).unwrap().0, "complete");
}

/// Node `seq` of the journal with one value rewritten (its reason or agent): the
/// same sequence number, different bytes.
fn forged(nodes: &[Vec<u8>], seq: usize) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&nodes[seq]).unwrap();
    v["agent"] = Value::String("mallory".into());
    let mut line = serde_json::to_vec(&v).unwrap();
    line.push(b'\n');
    assert_ne!(line, nodes[seq]);
    line
}

fn a_tampered_delivery_is_kept_as_tampered_never_replacing(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    let a = deliver(&acme, &header, &nodes[..10]);
    assert_eq!(a.run.outcome, "prefix");
    let a = deliver(&acme, &header, &[forged(&nodes, 5)]);
    assert_eq!(a.delivered.conflicts, 1);
    assert_eq!(a.run.outcome, "tampered");
    assert_eq!(a.run.offending_node, Some(5));
    assert_eq!(a.run.conflicts, 1);
    // The genuine line is still the one stored.
    let stored = s.rt.block_on(s.store.live_nodes(&a.run.live_id)).unwrap();
    assert_eq!([stored[5].1.as_slice(), b"\n"].concat(), nodes[5]);
    // A different header for the same run id is a conflict too.
    let other =
        String::from_utf8(header.clone())
            .unwrap()
            .replacen("\"models\":", "\"models\" :", 1);
    let a = deliver(&acme, other.as_bytes(), &[]);
    assert_eq!(a.run.conflicts, 2);
    // Nothing later makes it complete: the contradiction stays on record.
    deliver(&acme, &header, &nodes[10..]);
    acme.submit(LIVE_BUNDLE).unwrap();
    let (status, run) = live(&acme, &a.run.live_id).unwrap();
    assert_eq!(status, "tampered");
    assert!(run.reason.unwrap().contains("contradicts the node 5"));
}

fn a_tampered_first_delivery_is_caught_by_the_chain(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    let mut first = nodes[..10].to_vec();
    first[3] = forged(&nodes, 3);
    let a = deliver(&acme, &header, &first);
    assert_eq!(a.run.outcome, "tampered");
    assert_eq!(a.run.offending_node, Some(3));
    // The genuine node 3, sent later, does not replace the forged one: a conflict.
    let a = deliver(&acme, &header, &nodes[3..4]);
    assert_eq!(a.delivered.conflicts, 1);
    assert_eq!(a.run.outcome, "tampered");
}

fn a_sealed_bundle_that_is_tampered_makes_the_live_run_tampered(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    let a = deliver(&acme, &header, &nodes);
    assert_eq!(a.run.verified, 64);
    let text = std::str::from_utf8(LIVE_BUNDLE).unwrap();
    let from = "\"agent\":\"agent-1\"";
    assert!(text.contains(from), "fixture changed");
    let bad = text.replacen(from, "\"agent\":\"agent-9\"", 1);
    let r = acme.submit(bad.as_bytes()).unwrap();
    assert_eq!(r.outcome, "tampered");
    let (status, run) = live(&acme, &a.run.live_id).unwrap();
    assert_eq!(status, "tampered");
    assert!(
        run.reason
            .unwrap()
            .starts_with("the sealed bundle is tampered")
    );
}

fn a_run_whose_monitor_died_stays_a_verified_prefix(url: &str) {
    // Stale after 0 s: a run that is not sealed is shown as the prefix it is.
    let s = serve_with(url, 0);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    // The monitor died while writing node 30: the streamer never sends a torn line.
    let a = deliver(&acme, &header, &nodes[..30]);
    let (status, run) = live(&acme, &a.run.live_id).unwrap();
    assert_eq!(status, "prefix");
    assert_eq!((run.verified, run.received, run.bundle), (30, 30, None));
    assert_eq!(run.reason, None);
}

fn deliveries_that_are_not_journals_or_not_from_providers_are_refused(url: &str) {
    let s = serve(url);
    let acme = client(&s, &s.people.acme.0);
    let (header, nodes) = journal();
    let refused = |c: &Client, body: &[u8]| match c.deliver(body) {
        Err(ClientError::Refused { status, .. }) => status,
        other => panic!("accepted: {other:?}"),
    };
    assert_eq!(refused(&acme, LIVE_BUNDLE), 400);
    assert_eq!(refused(&acme, b"not json\n"), 400);
    assert_eq!(
        refused(&acme, &fragment(&header, &[b"{\"no\":1}\n".to_vec()])),
        400
    );
    // A torn last line (no `\n`) is refused, not guessed at.
    let mut torn = fragment(&header, &nodes[..2]);
    torn.pop();
    assert_eq!(refused(&acme, &torn), 400);
    assert_eq!(
        refused(
            &client(&s, &s.people.cnil.0),
            &fragment(&header, &nodes[..2])
        ),
        403
    );
    assert!(
        s.rt.block_on(
            s.store
                .live_runs(std::slice::from_ref(&s.people.acme.1.key_id), 10)
        )
        .unwrap()
        .is_empty()
    );
    // Another provider's delivery of the same run id is its own live run.
    let a = deliver(&client(&s, &s.people.globex.0), &header, &nodes[..2]);
    let b = deliver(&acme, &header, &nodes[..3]);
    assert_ne!(a.run.live_id, b.run.live_id);
    assert_eq!((a.run.received, b.run.received), (2, 3));
}

fn the_streamer_follows_a_journal_being_written(url: &str) {
    let s = serve(url);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.journal.jsonl");
    let (header, nodes) = journal();
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&header).unwrap();
    let streamer = Streamer::watch(
        client(&s, &s.people.acme.0),
        dir.path().to_owned(),
        Duration::from_millis(10),
    )
    .unwrap();
    let acme = client(&s, &s.people.acme.0);
    let id = knox_server::live::live_id(
        &s.people.acme.1.key_id,
        "mt-ma-4-2-injected-0000",
        &run_key(&header),
    );
    for chunk in nodes.chunks(9) {
        for n in chunk {
            // Each line in two writes: the streamer may see half of one.
            let (a, b) = n.split_at(n.len() / 2);
            f.write_all(a).unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(3));
            f.write_all(b).unwrap();
        }
        std::thread::sleep(Duration::from_millis(15));
    }
    let stats = streamer.finish();
    assert_eq!(stats.failures, 0, "{stats:?}");
    assert_eq!(stats.lines, 64);
    assert!(stats.deliveries >= 2, "{stats:?}");
    let (status, run) = live(&acme, &id).unwrap();
    assert_eq!(
        (status.as_str(), run.verified, run.conflicts),
        ("in progress", 64, 0)
    );
    acme.submit(LIVE_BUNDLE).unwrap();
    assert_eq!(live(&acme, &id).unwrap().0, "complete");
}
