//! The store suite: the same tests on SQLite and on PostgreSQL
//! (`KNOX_TEST_POSTGRES_URL`, from `scripts/postgres-test`).
#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use super::common;
use crate::on_both_engines;

use common::{
    ANNOUNCED, BUNDLE, BUNDLE2, BUNDLE3, CHAIN, CHAIN_FORK, JOURNAL, ingest, log_key, people,
    tampered,
};
use knox_server::chains::KeyChains;
use knox_server::store::{RunFilter, Store, StoreError};
use knox_server::tlog::{self, Consistency, LogError};
use knox_types::digest::Digest;

on_both_engines!(
    migrations_are_idempotent_and_a_reopened_store_keeps_its_runs,
    a_bundle_is_verified_and_indexed_and_a_duplicate_changes_nothing,
    a_tampered_copy_is_stored_as_tampered_beside_the_original,
    a_journal_is_a_prefix,
    evidence_the_log_and_the_access_log_are_append_only,
    a_provider_sees_its_runs_and_a_regulator_its_assignment,
    filters_bind_their_values_and_injection_finds_nothing,
    every_submission_is_in_the_log_and_every_head_extends_the_last,
    a_withheld_run_a_reordered_log_and_a_fork_are_detected,
    nonces_are_accepted_once_and_sessions_expire,
    a_regulators_receipt_is_stored_with_the_log_size,
    a_run_left_out_of_a_keys_chain_shows_as_a_gap_late_or_forked,
    a_key_announced_is_link_0_and_a_key_never_followed_shows,
    a_store_keeps_one_log_key,
    pages_list_every_run_once_and_count_what_the_dashboard_counts,
    the_log_keeps_its_name_and_the_witnesses_cosignatures,
    a_fact_filter_lists_the_same_runs_walked_or_sorted,
);

/// The first key bound is the log's; the same key again is accepted, another refused
/// and the identity row cannot be changed. A store whose heads were signed before the
/// identity was kept (schema v6) is bound to its latest head's key.
async fn a_store_keeps_one_log_key(url: String) {
    use knox_attest::PartyKey;
    use knox_server::store::StoreError;
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    // Heads signed with the tests' log key, as a server before schema v7 did.
    ingest(&s, &p.acme.1, BUNDLE).await;
    s.head(&log_key(), 1).await.unwrap();
    let other = PartyKey::from_seed([43; 32]).public_key();
    let refused = s.bind_log_key(&other).await.unwrap_err();
    assert!(matches!(refused, StoreError::LogKey { .. }), "{refused}");
    assert!(refused.to_string().contains("another log key"), "{refused}");
    s.bind_log_key(&log_key().public_key()).await.unwrap();
    s.bind_log_key(&log_key().public_key()).await.unwrap();
    assert!(matches!(
        s.bind_log_key(&other).await,
        Err(StoreError::LogKey { .. })
    ));
    for edit in [
        "UPDATE log_identity SET public_key = 'x'",
        "DELETE FROM log_identity",
    ] {
        let r = s.execute_raw(edit).await;
        assert!(
            r.is_err_and(|e| e.to_string().contains("append-only")),
            "{edit}"
        );
    }
    // A fresh store takes the first key bound.
    let fresh = Store::open(&common::sqlite_url()).await.unwrap();
    fresh.bind_log_key(&other).await.unwrap();
    assert!(fresh.bind_log_key(&log_key().public_key()).await.is_err());
}

async fn migrations_are_idempotent_and_a_reopened_store_keeps_its_runs(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    ingest(&s, &p.acme.1, BUNDLE).await;
    s.close().await;
    let s = Store::open(&url).await.unwrap();
    let again = people(&s).await;
    assert_eq!(again.acme.1, p.acme.1);
    let runs = s
        .runs(
            std::slice::from_ref(&p.acme.1.key_id),
            &RunFilter::default(),
            10,
        )
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
    // A name re-registered with another key is refused.
    let other = knox_attest::PartyKey::from_seed([99; 32]);
    assert!(
        s.register(knox_server::Role::Provider, "acme", &other.public_bytes())
            .await
            .is_err()
    );
}

async fn a_bundle_is_verified_and_indexed_and_a_duplicate_changes_nothing(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let first = ingest(&s, &p.acme.1, BUNDLE).await;
    assert!(!first.duplicate);
    let r = &first.run;
    assert_eq!(r.outcome, "complete");
    assert_eq!(r.digest, Digest::sha256(BUNDLE).to_hex());
    assert_eq!(r.kind, "bundle");
    assert!(!r.hardware_backed);
    assert_eq!(r.platform, "simulated");
    assert_eq!(r.blocked, 4);
    assert!(r.nodes > 10 && r.tool_calls > 0);
    assert!(r.structure_root.is_some());
    let blocked = s.blocked(&r.digest).await.unwrap();
    assert_eq!(blocked.len(), 4);
    assert!(blocked.iter().all(|b| b.guard == "trajectory"));
    let (kind, bytes) = s.object(&r.digest).await.unwrap().unwrap();
    assert_eq!((kind.as_str(), bytes.as_slice()), ("bundle", BUNDLE));
    let size = s.tree_size().await.unwrap();
    let again = ingest(&s, &p.acme.1, BUNDLE).await;
    assert!(again.duplicate);
    assert_eq!(again.run, first.run);
    assert_eq!(s.tree_size().await.unwrap(), size);
}

async fn a_tampered_copy_is_stored_as_tampered_beside_the_original(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let good = ingest(&s, &p.acme.1, BUNDLE).await.run;
    let bad = ingest(&s, &p.acme.1, &tampered()).await.run;
    assert_eq!(bad.outcome, "tampered");
    assert_eq!(bad.run_id, good.run_id);
    assert_ne!(bad.digest, good.digest);
    assert!(bad.offending_node.is_some(), "{bad:?}");
    assert!(bad.reason.is_some());
    // The original is untouched.
    assert_eq!(s.run(&good.digest).await.unwrap().unwrap(), good);
    let f = RunFilter {
        outcome: Some("tampered".into()),
        ..RunFilter::default()
    };
    let only = s
        .runs(std::slice::from_ref(&p.acme.1.key_id), &f, 10)
        .await
        .unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].digest, bad.digest);
}

async fn a_journal_is_a_prefix(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let r = ingest(&s, &p.globex.1, JOURNAL).await.run;
    assert_eq!((r.kind.as_str(), r.outcome.as_str()), ("journal", "prefix"));
    assert!(r.structure_root.is_none());
}

async fn evidence_the_log_and_the_access_log_are_append_only(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    ingest(&s, &p.acme.1, BUNDLE).await;
    s.log_access(Some("x"), "GET", "/", true, "ok", 1)
        .await
        .unwrap();
    s.head(&log_key(), 1).await.unwrap();
    for sql in [
        "UPDATE runs SET outcome = 'complete'",
        "DELETE FROM runs",
        "UPDATE objects SET kind = 'journal'",
        "DELETE FROM objects",
        "UPDATE log_leaves SET idx = idx + 1",
        "DELETE FROM log_leaves",
        "DELETE FROM tree_heads",
        "UPDATE access_log SET decision = 'allowed'",
        "DELETE FROM access_log",
    ] {
        let r = s.execute_raw(sql).await;
        assert!(r.is_err(), "{sql} was allowed");
        assert!(r.unwrap_err().to_string().contains("append-only"), "{sql}");
    }
    assert_eq!(s.access_log(10).await.unwrap().len(), 1);
}

async fn a_provider_sees_its_runs_and_a_regulator_its_assignment(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let a = ingest(&s, &p.acme.1, BUNDLE).await.run;
    let g = ingest(&s, &p.globex.1, BUNDLE2).await.run;
    let seen = async |who: &knox_server::Principal| {
        let v = s.visible_providers(who).await.unwrap();
        let runs = s.runs(&v, &RunFilter::default(), 100).await.unwrap();
        runs.into_iter().map(|r| r.digest).collect::<Vec<_>>()
    };
    assert_eq!(seen(&p.acme.1).await, vec![a.digest.clone()]);
    assert_eq!(seen(&p.globex.1).await, vec![g.digest.clone()]);
    assert_eq!(seen(&p.cnil.1).await, vec![a.digest.clone()]);
    assert_eq!(seen(&p.ico.1).await, vec![g.digest.clone()]);
    // A filter naming another provider does not widen what is visible.
    let f = RunFilter {
        provider: Some("globex".into()),
        ..RunFilter::default()
    };
    let v = s.visible_providers(&p.acme.1).await.unwrap();
    assert!(s.runs(&v, &f, 100).await.unwrap().is_empty());
    let d = s.dashboard(&v, &RunFilter::default()).await.unwrap();
    assert_eq!(d.providers.len(), 1);
    assert_eq!(d.providers[0].0, "acme");
    assert_eq!(d.providers[0].1[0], 1);
    assert_eq!(d.providers[0].1[1], 4);
    assert_eq!(d.guards, vec![("trajectory".to_owned(), 4)]);
}

async fn filters_bind_their_values_and_injection_finds_nothing(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let a = ingest(&s, &p.acme.1, BUNDLE).await.run;
    let v = vec![p.acme.1.key_id.clone(), p.globex.1.key_id.clone()];
    let tool = s.blocked(&a.digest).await.unwrap()[0].tool.clone().unwrap();
    let hit = |f: RunFilter| {
        let s = s.clone();
        let v = v.clone();
        async move { s.runs(&v, &f, 100).await.unwrap().len() }
    };
    assert_eq!(
        hit(RunFilter {
            tool: Some(tool.clone()),
            ..RunFilter::default()
        })
        .await,
        1
    );
    assert_eq!(
        hit(RunFilter {
            guard: Some("trajectory".into()),
            ..RunFilter::default()
        })
        .await,
        1
    );
    assert_eq!(
        hit(RunFilter {
            q: Some(a.run_id[2..8].to_owned()),
            ..RunFilter::default()
        })
        .await,
        1
    );
    assert_eq!(
        hit(RunFilter {
            outcome: Some("complete".into()),
            ..RunFilter::default()
        })
        .await,
        1
    );
    for evil in [
        "' OR '1'='1",
        "x' OR 1=1 --",
        "'; DROP TABLE runs; --",
        "%",
        "_",
        "\\",
        "../../etc/passwd",
        "\" OR \"\"=\"",
        "1) OR (1=1",
    ] {
        for f in [
            RunFilter {
                provider: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                outcome: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                tool: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                guard: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                verdict: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                provision: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                model: Some(evil.into()),
                ..RunFilter::default()
            },
            RunFilter {
                q: Some(evil.into()),
                ..RunFilter::default()
            },
        ] {
            assert_eq!(hit(f.clone()).await, 0, "{f:?}");
        }
        assert!(s.run(evil).await.unwrap().is_none());
        assert!(s.object(evil).await.unwrap().is_none());
    }
    // Still there.
    assert_eq!(hit(RunFilter::default()).await, 1);
}

async fn every_submission_is_in_the_log_and_every_head_extends_the_last(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let key = log_key();
    let mut heads = Vec::new();
    let mut incs = Vec::new();
    for b in [BUNDLE, BUNDLE2, BUNDLE3, JOURNAL] {
        let r = ingest(&s, &p.acme.1, b).await.run;
        let inc = s.inclusion(&r.digest, &key, 5).await.unwrap().unwrap();
        tlog::check_inclusion(&inc, &key.public_key()).unwrap();
        heads.push(inc.head.clone());
        incs.push(inc);
    }
    let t = tampered();
    ingest(&s, &p.acme.1, &t).await;
    let now = s.head(&key, 6).await.unwrap();
    assert_eq!(now.tree_size, 5);
    // The head of a size is signed once: asking again gives the same head.
    assert_eq!(s.head(&key, 7).await.unwrap(), now);
    for h in &heads {
        let c = s.consistency(h.tree_size, &key, 8).await.unwrap().unwrap();
        assert_eq!(&c.from, h);
        tlog::check_consistency(&c, &key.public_key()).unwrap();
    }
    // An old inclusion proof, re-asked, proves against the current head.
    for i in incs {
        let again = s
            .inclusion(&i.digest.to_hex(), &key, 9)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.index, i.index);
        tlog::check_inclusion(&again, &key.public_key()).unwrap();
    }
    assert!(s.consistency(77, &key, 9).await.unwrap().is_none());
}

async fn a_withheld_run_a_reordered_log_and_a_fork_are_detected(url: String) {
    // The honest log holds A, B, C; the provider of B kept B's inclusion proof and an
    // auditor the head of size 3.
    let key = log_key();
    let honest = Store::open(&url).await.unwrap();
    let p = people(&honest).await;
    for b in [BUNDLE, BUNDLE2, BUNDLE3] {
        ingest(&honest, &p.acme.1, b).await;
    }
    let b_digest = Digest::sha256(BUNDLE2).to_hex();
    let b_proof = honest.inclusion(&b_digest, &key, 1).await.unwrap().unwrap();
    let h3 = b_proof.head.clone();

    // A log operator who withholds B (or reorders) runs a second log under the same
    // key: a second database on the same engine.
    let other_url = if url.starts_with("sqlite:") {
        common::sqlite_url()
    } else {
        common::postgres_url().await.unwrap()
    };
    let forked = Store::open(&other_url).await.unwrap();
    let q = people(&forked).await;
    for b in [BUNDLE, BUNDLE3, JOURNAL] {
        ingest(&forked, &q.acme.1, b).await;
    }
    // Withheld: B is not in the forked log at all.
    assert!(
        forked
            .inclusion(&b_digest, &key, 2)
            .await
            .unwrap()
            .is_none()
    );
    // B's old proof does not hold against the forked head of its size…
    let f3 = forked.head(&key, 2).await.unwrap();
    let moved = tlog::Inclusion {
        head: f3.clone(),
        ..b_proof.clone()
    };
    assert!(matches!(
        tlog::check_inclusion(&moved, &key.public_key()),
        Err(LogError::NotIncluded(_))
    ));
    // …two heads of size 3 with different roots are a fork…
    let fork = Consistency {
        from: h3.clone(),
        to: f3,
        path: vec![],
    };
    assert_eq!(
        tlog::check_consistency(&fork, &key.public_key()),
        Err(LogError::Fork(3))
    );
    // …and a later head of the forked log does not extend the honest head.
    ingest(&forked, &q.acme.1, &tampered()).await;
    let leaves = forked.leaves(None).await.unwrap();
    let f4 = forked.head(&key, 3).await.unwrap();
    let c = Consistency {
        from: h3.clone(),
        to: f4,
        path: tlog::consistency_proof(&leaves, 3).unwrap(),
    };
    assert_eq!(
        tlog::check_consistency(&c, &key.public_key()),
        Err(LogError::Inconsistent { from: 3, to: 4 })
    );

    // Reordered: the same three runs submitted in another order give another root.
    let reordered = Store::open(&if url.starts_with("sqlite:") {
        common::sqlite_url()
    } else {
        common::postgres_url().await.unwrap()
    })
    .await
    .unwrap();
    let r = people(&reordered).await;
    for b in [BUNDLE2, BUNDLE, BUNDLE3] {
        ingest(&reordered, &r.acme.1, b).await;
    }
    let r3 = reordered.head(&key, 4).await.unwrap();
    assert_ne!(r3.root, h3.root);
    let c = Consistency {
        from: h3,
        to: r3,
        path: vec![],
    };
    assert_eq!(
        tlog::check_consistency(&c, &key.public_key()),
        Err(LogError::Fork(3))
    );
    // B's proof, index 1, does not hold in the reordered log's head.
    let moved = tlog::Inclusion {
        head: reordered.head(&key, 4).await.unwrap(),
        ..b_proof
    };
    assert!(tlog::check_inclusion(&moved, &key.public_key()).is_err());
}

async fn nonces_are_accepted_once_and_sessions_expire(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    assert!(s.use_nonce(&p.acme.1.key_id, "00ff", 10).await.unwrap());
    assert!(!s.use_nonce(&p.acme.1.key_id, "00ff", 11).await.unwrap());
    // Another key may use the same nonce.
    assert!(s.use_nonce(&p.globex.1.key_id, "00ff", 11).await.unwrap());
    let token = "ab".repeat(32);
    s.create_session(&p.cnil.1.key_id, &token, 100)
        .await
        .unwrap();
    assert_eq!(s.session(&token, 99).await.unwrap(), Some(p.cnil.1.clone()));
    assert_eq!(s.session(&token, 100).await.unwrap(), None);
    assert_eq!(s.session(&"cd".repeat(32), 50).await.unwrap(), None);
}

async fn a_regulators_receipt_is_stored_with_the_log_size(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let r = ingest(&s, &p.acme.1, BUNDLE).await.run;
    let report: knox_verify::Report = {
        let v = common::verifier();
        v.check(BUNDLE).unwrap().report
    };
    let receipt = knox_verify::receipt::issue(&p.cnil.0, BUNDLE, &report, None, 5).unwrap();
    let bytes = serde_json::to_vec(&receipt).unwrap();
    let d1 = s
        .add_receipt(&r.digest, &p.cnil.1, &bytes, "complete", 6)
        .await
        .unwrap();
    let d2 = s
        .add_receipt(&r.digest, &p.cnil.1, &bytes, "complete", 7)
        .await
        .unwrap();
    assert_eq!(d1, d2);
    let rs = s.receipts(&r.digest).await.unwrap();
    assert_eq!(rs.len(), 1);
    assert_eq!((rs[0].regulator.as_str(), rs[0].tree_size), ("cnil", 1));
}

/// A SQLite store written by schema v2 — a live run stored under its run id alone, with
/// a node line — opens as v3: the run and its line are kept, the table takes a run
/// key, another execution of the same run id (another key) is a run of its own, the
/// append-only triggers and foreign keys still hold.
#[tokio::test]
async fn a_sqlite_store_of_schema_v2_is_upgraded_with_its_live_runs_kept() {
    use sqlx::Row as _;
    let (url, pool) = sqlite_at_schema(2).await;
    {
        for q in [
            "INSERT INTO principals (key_id, public_key, role, name) VALUES ('p', 'pk', 'provider', 'acme')",
            "INSERT INTO live_runs (live_id, provider, run_id, header, started_at) VALUES ('old', 'p', 'run-0000', X'7b7d', 1)",
            "INSERT INTO live_nodes (live_id, seq, line, received_at) VALUES ('old', 0, X'7b7d', 1)",
        ] {
            sqlx::query(q).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let store = Store::open(&url).await.unwrap();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let count = |q: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query(q)
                .fetch_one(&pool)
                .await
                .unwrap()
                .try_get::<i64, _>(0)
                .unwrap()
        }
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM live_runs WHERE live_id = 'old' AND run_id = 'run-0000'").await,
        1
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM live_nodes WHERE live_id = 'old'").await,
        1
    );
    // Another execution of the same run id, under its own key: a run of its own.
    sqlx::query("INSERT INTO live_runs (live_id, provider, run_id, run_key, header, started_at) VALUES ('new', 'p', 'run-0000', 'k2', X'7b7d', 2)")
        .execute(&pool)
        .await
        .unwrap();
    // The same run key again is still refused; so are an update and a dangling line.
    for refused in [
        "INSERT INTO live_runs (live_id, provider, run_id, run_key, header, started_at) VALUES ('dup', 'p', 'run-0000', 'k2', X'7b7d', 3)",
        "UPDATE live_runs SET run_id = 'other' WHERE live_id = 'old'",
        "INSERT INTO live_nodes (live_id, seq, line, received_at) VALUES ('nowhere', 0, X'7b7d', 1)",
    ] {
        assert!(
            sqlx::query(refused).execute(&pool).await.is_err(),
            "{refused}"
        );
    }
    // Opening it again changes nothing.
    store.close().await;
    let again = Store::open(&url).await.unwrap();
    assert_eq!(count("SELECT COUNT(*) FROM live_runs").await, 2);
    again.close().await;
}

async fn a_run_left_out_of_a_keys_chain_shows_as_a_gap_late_or_forked(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let acme = &p.acme.1;
    let chains =
        || async { KeyChains::of(s.chain_links(&acme.key_id, i64::MAX, None).await.unwrap()) };
    // A bundle of format v2 has no link.
    ingest(&s, acme, BUNDLE).await;
    assert!(chains().await.chains.is_empty());
    // Runs 0 and 2 handed over: run 1 is missing.
    ingest(&s, acme, CHAIN[0]).await;
    ingest(&s, acme, CHAIN[2]).await;
    let c = chains().await;
    assert_eq!(c.chains.len(), 1);
    assert_eq!(c.chains[0].missing, vec![(1, 1)]);
    assert_eq!(c.missing_runs(), 1);
    assert!(c.chains[0].has_gaps());
    // The same bytes again change nothing.
    ingest(&s, acme, CHAIN[2]).await;
    assert_eq!(chains().await, c);
    // Run 1 handed over after run 2: no number missing, but late.
    ingest(&s, acme, CHAIN[1]).await;
    let c = chains().await;
    assert!(c.chains[0].missing.is_empty());
    assert_eq!(c.chains[0].late, vec![(1, 2)]);
    assert!(c.chains[0].forks.is_empty() && c.chains[0].broken.is_empty());
    // A second run 1 signed by the same key: a fork.
    ingest(&s, acme, CHAIN_FORK).await;
    let c = chains().await;
    assert_eq!(c.chains[0].forks, vec![1]);
    assert!(
        c.chains[0].describe().contains("forked"),
        "{}",
        c.chains[0].describe()
    );
    // Another provider's chains are its own: globex handed over nothing.
    assert!(
        s.chain_links(&p.globex.1.key_id, i64::MAX, None)
            .await
            .unwrap()
            .is_empty()
    );
    // A period that ends before anything was handed over shows no link.
    assert!(
        s.chain_links(&acme.key_id, -1, None)
            .await
            .unwrap()
            .is_empty()
    );
    // One key's links: that key's only (runs 0, 1 and 2 and the fork; the copy of run
    // 2 handed over twice is stored once).
    let key = &chains().await.chains[0].key;
    assert_eq!(
        s.chain_links(&acme.key_id, i64::MAX, Some(key))
            .await
            .unwrap()
            .len(),
        4
    );
    assert!(
        s.chain_links(&acme.key_id, i64::MAX, Some("00"))
            .await
            .unwrap()
            .is_empty()
    );
    // The links are append-only, as the runs they index.
    assert!(s.execute_raw("DELETE FROM chain_links").await.is_err());
}

/// #35: a key announcement is stored (kind `announcement`, in the log) as its key's
/// link 0; the key's runs follow from 1 with no gap; a key announced and never followed
/// shows as such; verified announcements stay out of the list of runs and the
/// dashboard, an announcement that does not verify stays in the list.
async fn a_key_announced_is_link_0_and_a_key_never_followed_shows(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    let acme = &p.acme.1;
    let chains =
        || async { KeyChains::of(s.chain_links(&acme.key_id, i64::MAX, None).await.unwrap()) };
    let size = s.tree_size().await.unwrap();
    let a = ingest(&s, acme, ANNOUNCED[0]).await;
    assert_eq!(
        (a.run.kind.as_str(), a.run.outcome.as_str(), a.run.nodes),
        ("announcement", "complete", 0)
    );
    assert_eq!(s.tree_size().await.unwrap(), size + 1, "in the log");
    let (kind, bytes) = s.object(&a.run.digest).await.unwrap().unwrap();
    assert_eq!(
        (kind.as_str(), bytes.as_slice()),
        ("announcement", ANNOUNCED[0])
    );
    // Announced, no run yet.
    let c = chains().await;
    assert_eq!(c.chains.len(), 1);
    assert!(c.chains[0].unfollowed() && c.chains[0].has_gaps());
    assert!(
        c.chains[0].describe().contains("no run of it handed over"),
        "{}",
        c.chains[0].describe()
    );
    // Its runs 1 and 2: no gap.
    ingest(&s, acme, ANNOUNCED[1]).await;
    ingest(&s, acme, ANNOUNCED[2]).await;
    let c = chains().await;
    assert!(!c.chains[0].has_gaps(), "{}", c.chains[0].describe());
    assert_eq!(c.chains[0].run_count(), 2);
    assert!(
        c.chains[0]
            .describe()
            .contains("announced; 2 runs handed over, numbered 1–2")
    );
    // Another key, announced and never followed.
    ingest(&s, acme, ANNOUNCED[3]).await;
    let c = chains().await;
    assert_eq!(c.chains.len(), 2);
    assert_eq!(c.with_gaps().count(), 1);
    assert!(c.with_gaps().all(|k| k.unfollowed()));
    // The list of runs and the dashboard count runs, not announcements.
    let providers = std::slice::from_ref(&acme.key_id);
    let runs = s.runs(providers, &RunFilter::default(), 100).await.unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r.kind == "bundle"));
    let d = s.dashboard(providers, &RunFilter::default()).await.unwrap();
    assert_eq!(d.providers[0].1[0], 2);
    // An announcement that does not verify (its summary edited) is listed, tampered,
    // and is no link.
    let edited =
        std::str::from_utf8(ANNOUNCED[3])
            .unwrap()
            .replacen("\"executed\":0", "\"executed\":1", 1);
    assert_ne!(edited.as_bytes(), ANNOUNCED[3]);
    let t = ingest(&s, acme, edited.as_bytes()).await;
    assert_eq!(
        (t.run.kind.as_str(), t.run.outcome.as_str()),
        ("announcement", "tampered")
    );
    let runs = s.runs(providers, &RunFilter::default(), 100).await.unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(chains().await.chains.len(), 2);
}

/// A SQLite store of schema v5, whose `objects` admit no announcement, opens as v6:
/// its objects kept, an announcement stored, the append-only triggers and the
/// references to `objects` still enforced.
#[tokio::test]
async fn a_sqlite_store_of_schema_v5_is_upgraded_to_store_announcements() {
    use sqlx::Row as _;
    let (url, pool) = sqlite_at_schema(5).await;
    {
        sqlx::query("INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ('old', 'bundle', X'7b7d', 2, 1)")
            .execute(&pool)
            .await
            .unwrap();
        // v5 refuses an announcement.
        assert!(
            sqlx::query("INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ('a', 'announcement', X'7b7d', 2, 1)")
                .execute(&pool)
                .await
                .is_err()
        );
        pool.close().await;
    }
    let store = Store::open(&url).await.unwrap();
    let (kind, bytes) = store.object("old").await.unwrap().unwrap();
    assert_eq!(
        (kind.as_str(), bytes.as_slice()),
        ("bundle", b"{}".as_slice())
    );
    let p = people(&store).await;
    let a = ingest(&store, &p.acme.1, ANNOUNCED[0]).await;
    assert_eq!(a.run.kind, "announcement");
    for refused in [
        "UPDATE objects SET kind = 'journal' WHERE digest = 'old'",
        "DELETE FROM objects WHERE digest = 'old'",
        "INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ('x', 'other', X'7b7d', 2, 1)",
        "INSERT INTO receipts (digest, run, regulator, outcome, tree_size, stored_at) VALUES ('nowhere', 'nowhere', 'nobody', 'complete', 1, 1)",
    ] {
        assert!(store.execute_raw(refused).await.is_err(), "{refused}");
    }
    store.close().await;
    // Opening it again rebuilds nothing.
    let again = Store::open(&url).await.unwrap();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM objects")
        .fetch_one(&pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap();
    assert_eq!(n, 2);
    again.close().await;
}

/// Keyset pages (one run per page here) list every run once, newest first, each with
/// the count the dashboard shows; a day range selects by submission day; a malformed
/// cursor or day is the caller's error.
async fn pages_list_every_run_once_and_count_what_the_dashboard_counts(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    for b in [BUNDLE, BUNDLE2, BUNDLE3, &tampered()] {
        ingest(&s, &p.acme.1, b).await;
    }
    let v = s.visible_providers(&p.acme.1).await.unwrap();
    let all = s.runs(&v, &RunFilter::default(), 100).await.unwrap();
    assert_eq!(all.len(), 4);
    let mut walked = Vec::new();
    let mut after = None;
    loop {
        let f = RunFilter {
            after: after.clone(),
            ..RunFilter::default()
        };
        let page = s.runs_page(&v, &f, 1).await.unwrap();
        assert_eq!(page.total, 4);
        walked.extend(page.rows.iter().map(|r| r.digest.clone()));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    let newest_first: Vec<_> = all.iter().map(|r| r.digest.clone()).collect();
    assert_eq!(walked, newest_first);
    let d = s.dashboard(&v, &RunFilter::default()).await.unwrap();
    assert_eq!(d.providers[0].1[0], 4);
    // The runs were submitted today: today's range holds them, yesterday's none.
    let now = knox_server::auth::now();
    let (store, visible) = (&s, &v);
    let day = |t: u64| {
        let f = RunFilter {
            from: Some(i64::try_from(t / 86_400 * 86_400).unwrap()),
            to: Some(i64::try_from(t / 86_400 * 86_400 + 86_400).unwrap()),
            ..RunFilter::default()
        };
        async move { store.runs_page(visible, &f, 10).await.unwrap().total }
    };
    assert_eq!(day(now).await, 4);
    assert_eq!(day(now - 86_400).await, 0);
    let by_date = RunFilter {
        since: Some("1970-01-02".into()),
        until: Some("1970-01-02".into()),
        ..RunFilter::default()
    };
    assert_eq!(by_date.period_start().unwrap(), Some(86_400));
    assert_eq!(by_date.period_end().unwrap(), Some(2 * 86_400));
    let leap = RunFilter {
        since: Some("2024-02-29".into()),
        ..RunFilter::default()
    };
    assert_eq!(leap.period_start().unwrap(), Some(1_709_164_800));
    for bad in [
        RunFilter {
            after: Some("12-3".into()),
            ..RunFilter::default()
        },
        RunFilter {
            since: Some("2023-02-29".into()),
            ..RunFilter::default()
        },
        RunFilter {
            until: Some("2024-13-01".into()),
            ..RunFilter::default()
        },
    ] {
        assert!(matches!(
            s.runs_page(&v, &bad, 10).await,
            Err(StoreError::Filter(_))
        ));
    }
}

/// The first origin bound is the log's name; another is refused, none given reads the
/// stored one. A witness's cosignature line is kept once per size and witness.
async fn the_log_keeps_its_name_and_the_witnesses_cosignatures(url: String) {
    let s = Store::open(&url).await.unwrap();
    assert_eq!(
        s.bind_log_origin(Some("regulator.example/knox"), "knox.invalid/x")
            .await
            .unwrap(),
        "regulator.example/knox"
    );
    assert_eq!(
        s.bind_log_origin(None, "knox.invalid/x").await.unwrap(),
        "regulator.example/knox"
    );
    assert!(matches!(
        s.bind_log_origin(Some("other.example/knox"), "knox.invalid/x")
            .await,
        Err(StoreError::LogOrigin { .. })
    ));
    s.add_cosignature(3, "w1", "— w1 AAAA\n", 10).await.unwrap();
    s.add_cosignature(3, "w1", "— w1 BBBB\n", 11).await.unwrap();
    s.add_cosignature(3, "w2", "— w2 CCCC\n", 12).await.unwrap();
    assert_eq!(
        s.cosignatures(3).await.unwrap(),
        vec!["— w1 AAAA\n".to_owned(), "— w2 CCCC\n".to_owned()]
    );
    assert!(s.cosignatures(4).await.unwrap().is_empty());
    for sql in [
        "DELETE FROM cosignatures",
        "UPDATE log_origin SET origin = 'x'",
    ] {
        assert!(s.execute_raw(sql).await.is_err(), "{sql}");
    }
}

/// Copies the three stored runs `copies` times in plain SQL (both engines): each copy
/// its own digest, run id, log index and an older submission time, its facts (blocked
/// actions, decisions, models, `run_facts`) with it.
async fn copy_runs(s: &Store, copies: u32) {
    for i in 1..=copies {
        let id = format!("'c{i:03}' || substr(o.digest, 5)");
        let old = "o.digest IN (SELECT digest FROM runs WHERE log_index < 3)";
        for sql in [
            format!(
                "INSERT INTO objects (digest, kind, bytes, size, stored_at) \
                 SELECT {id}, o.kind, o.bytes, o.size, o.stored_at FROM objects o WHERE {old}"
            ),
            format!(
                "INSERT INTO runs (digest, provider, run_id, kind, outcome, offending_node, \
                 reason, platform, hardware_backed, nodes, tool_calls, executed, blocked, \
                 interrupts, flagged, structure_root, report, log_index, submitted_at, run_key) \
                 SELECT {id}, o.provider, o.run_id || '-{i}', o.kind, o.outcome, \
                 o.offending_node, o.reason, o.platform, o.hardware_backed, o.nodes, \
                 o.tool_calls, o.executed, o.blocked, o.interrupts, o.flagged, \
                 o.structure_root, o.report, o.log_index + {i} * 1000, o.submitted_at - {i} * 60, \
                 o.run_key FROM runs o WHERE {old}"
            ),
            format!(
                "INSERT INTO blocked_actions (digest, node, agent, tool, guard, reason) \
                 SELECT {id}, o.node, o.agent, o.tool, o.guard, o.reason \
                 FROM blocked_actions o WHERE {old}"
            ),
            format!(
                "INSERT INTO regulation_decisions (digest, node, ordinal, regulation, recipient, \
                 verdict, policies, provisions) SELECT {id}, o.node, o.ordinal, o.regulation, \
                 o.recipient, o.verdict, o.policies, o.provisions \
                 FROM regulation_decisions o WHERE {old}"
            ),
            format!(
                "INSERT INTO run_models (digest, ordinal, model) \
                 SELECT {id}, o.ordinal, o.model FROM run_models o WHERE {old}"
            ),
            format!(
                "INSERT INTO run_facts (fact, value, digest, provider, submitted_at, log_index) \
                 SELECT o.fact, o.value, {id}, o.provider, o.submitted_at - {i} * 60, \
                 o.log_index + {i} * 1000 FROM run_facts o WHERE {old}"
            ),
        ] {
            s.execute_raw(&sql).await.unwrap();
        }
    }
}

/// Every run of a page walk, newest first, and the total beside each page.
async fn walk(s: &Store, v: &[String], f: &RunFilter, limit: i64) -> (Vec<String>, i64) {
    let (mut all, mut after, mut total) = (Vec::new(), None, None);
    loop {
        let page = s
            .runs_page(
                v,
                &RunFilter {
                    after: after.clone(),
                    ..f.clone()
                },
                limit,
            )
            .await
            .unwrap();
        assert_eq!(*total.get_or_insert(page.total), page.total, "one total");
        all.extend(page.rows.iter().map(|r| r.digest.clone()));
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    (all, total.unwrap_or(0))
}

/// A filter on a fact stored beside a run lists the runs that have it: a blocked tool
/// or guard (checked against each run's blocked actions), read through the fact's
/// rows in the list's order; a model substring, read by walking the runs newest first
/// when many match and by sorting its matches when few do, the page size deciding
/// which. Every reading lists the same runs in the same order, paged or not, alone or
/// combined, and the count beside each page is their number; the provider's name
/// narrows to that provider's runs or to none.
async fn a_fact_filter_lists_the_same_runs_walked_or_sorted(url: String) {
    let s = Store::open(&url).await.unwrap();
    let p = people(&s).await;
    for b in [BUNDLE, BUNDLE2, BUNDLE3] {
        ingest(&s, &p.acme.1, b).await;
    }
    copy_runs(&s, 20).await;
    let v = s.visible_providers(&p.cnil.1).await.unwrap();
    let d = s.dashboard(&v, &RunFilter::default()).await.unwrap();
    assert_eq!(d.providers[0].1[0], 63, "3 runs and 60 copies");
    let (tool, guard) = (d.tools[0].0.clone(), d.guards[0].0.clone());
    let filters = [
        RunFilter {
            tool: Some(tool.clone()),
            ..RunFilter::default()
        },
        RunFilter {
            guard: Some(guard.clone()),
            ..RunFilter::default()
        },
        RunFilter {
            model: Some("e".into()),
            ..RunFilter::default()
        },
        RunFilter {
            tool: Some("NoSuchTool".into()),
            ..RunFilter::default()
        },
        // Combined: an exact fact driving, a substring fact and a run's column tested.
        RunFilter {
            guard: Some(guard.clone()),
            model: Some("e".into()),
            ..RunFilter::default()
        },
        RunFilter {
            tool: Some(tool.clone()),
            guard: Some(guard.clone()),
            q: Some("-1".into()),
            ..RunFilter::default()
        },
        RunFilter {
            model: Some("e".into()),
            outcome: Some("complete".into()),
            ..RunFilter::default()
        },
    ];
    // The oracle of the blocked-action filters: every run's blocked actions, read one
    // run at a time.
    let every = s.runs(&v, &RunFilter::default(), 1000).await.unwrap();
    let mut actions = Vec::new();
    for r in &every {
        actions.push((r.digest.clone(), s.blocked(&r.digest).await.unwrap()));
    }
    let oracle = |f: &RunFilter| -> Option<Vec<String>> {
        if f.model.is_some() || f.outcome.is_some() {
            return None;
        }
        Some(
            actions
                .iter()
                .filter(|(d, b)| {
                    let run = every.iter().find(|r| &r.digest == d).unwrap();
                    f.tool
                        .as_ref()
                        .is_none_or(|t| b.iter().any(|x| x.tool.as_ref() == Some(t)))
                        && f.guard
                            .as_ref()
                            .is_none_or(|g| b.iter().any(|x| &x.guard == g))
                        && f.q.as_ref().is_none_or(|q| run.run_id.contains(q.as_str()))
                })
                .map(|(d, _)| d.clone())
                .collect(),
        )
    };
    for f in &filters {
        let all = s.runs(&v, f, 1000).await.unwrap();
        let expected: Vec<String> = all.iter().map(|r| r.digest.clone()).collect();
        if let Some(want) = oracle(f) {
            assert_eq!(expected, want, "{f:?} against each run's blocked actions");
        }
        assert!(
            all.windows(2)
                .all(|w| (w[0].submitted_at, w[0].log_index) > (w[1].submitted_at, w[1].log_index)),
            "newest first"
        );
        // Pages of 1 walk (more than 2 × 20 matches), pages of 50 sort.
        for limit in [1, 7, 50] {
            let (walked, total) = walk(&s, &v, f, limit).await;
            assert_eq!(walked, expected, "{f:?} in pages of {limit}");
            assert_eq!(total, expected.len() as i64);
        }
    }
    // The substring fact is dense enough for both readings to be taken (walked in
    // pages of 1, sorted in pages of 50), and every query reads indexes alone (the
    // page's rows aside, read by digest, and the principals' names).
    let model_runs = s.runs(&v, &filters[2], 1000).await.unwrap().len();
    assert!(
        model_runs > 40,
        "{model_runs} runs with a model holding `e`"
    );
    if url.starts_with("sqlite:") {
        let plan = |f: RunFilter, limit: i64| {
            let (store, visible) = (&s, &v);
            async move {
                store
                    .runs_page_plan(visible, &f, limit)
                    .await
                    .unwrap()
                    .join("\n")
            }
        };
        // Walked: the page's runs read from `runs`, each probed for the fact; sorted:
        // the page read from the fact's rows.
        let page_of = |p: &str| {
            p.split("CO-ROUTINE page")
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        };
        let walked = page_of(&plan(filters[2].clone(), 1).await);
        assert!(
            walked.contains("SEARCH r USING") || walked.contains("SCAN r USING"),
            "{walked}"
        );
        assert!(walked.contains("CORRELATED SCALAR SUBQUERY"), "{walked}");
        let sorted = page_of(&plan(filters[2].clone(), 50).await);
        assert!(
            sorted.contains("USING COVERING INDEX run_facts_listed"),
            "{sorted}"
        );
        let mut every = filters.to_vec();
        every.push(RunFilter::default());
        every.push(RunFilter {
            q: Some("-1".into()),
            outcome: Some("complete".into()),
            since: Some("2020-01-01".into()),
            ..RunFilter::default()
        });
        for f in every {
            for limit in [1, 50] {
                let p = plan(f.clone(), limit).await;
                for line in p
                    .lines()
                    .filter(|l| l.starts_with("SCAN") || l.starts_with("SEARCH"))
                {
                    assert!(
                        line.contains("INDEX") || ["SCAN page", "SCAN p"].contains(&line),
                        "{f:?}: `{line}` reads a table\n{p}"
                    );
                }
            }
        }
    }
    // The provider's name narrows the visible providers; it never widens them.
    let named = |name: &str| RunFilter {
        provider: Some(name.into()),
        ..RunFilter::default()
    };
    assert_eq!(s.runs_page(&v, &named("acme"), 10).await.unwrap().total, 63);
    for other in ["globex", "nobody", "cnil"] {
        let page = s.runs_page(&v, &named(other), 10).await.unwrap();
        assert_eq!((page.total, page.rows.len()), (0, 0), "{other}");
    }
}

/// A store of schema v8 with runs is upgraded to v9 with their facts filled in: its
/// runs are found by a blocked tool, a guard and a model substring, and counted.
#[tokio::test]
async fn a_sqlite_store_of_schema_v8_is_upgraded_with_its_runs_facts_filled_in() {
    let (url, pool) = sqlite_at_schema(8).await;
    {
        let mut sql = vec![
            "INSERT INTO principals (key_id, public_key, role, name) VALUES ('k', 'pk', 'provider', 'acme')".to_owned(),
        ];
        for i in 0..3 {
            sql.push(format!(
                "INSERT INTO objects (digest, kind, bytes, size, stored_at) VALUES ('d{i}', 'bundle', X'7b7d', 2, 1)"
            ));
            sql.push(format!(
                "INSERT INTO runs (digest, provider, run_id, kind, outcome, platform, hardware_backed, \
                 nodes, tool_calls, executed, blocked, interrupts, flagged, report, log_index, submitted_at) \
                 VALUES ('d{i}', 'k', 'run-{i}', 'bundle', 'complete', 'simulated', 0, 5, 1, 0, 1, 0, 0, '{{}}', {i}, {})",
                100 + i
            ));
            sql.push(format!(
                "INSERT INTO run_models (digest, ordinal, model) VALUES ('d{i}', 0, 'model-{}')",
                if i == 0 { "alpha" } else { "beta" }
            ));
        }
        // Two blocked actions of one run by the same guard: one fact row.
        for (d, node, tool, guard) in [
            ("d0", 3, "BankTransfer", "trajectory"),
            ("d0", 4, "BankTransfer", "trajectory"),
            ("d2", 3, "SendEmail", "data_flow"),
        ] {
            sql.push(format!(
                "INSERT INTO blocked_actions (digest, node, agent, tool, guard, reason) \
                 VALUES ('{d}', {node}, 'agent-0', '{tool}', '{guard}', 'r')"
            ));
        }
        for q in sql {
            sqlx::query(&q).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let store = Store::open(&url).await.unwrap();
    let providers = ["k".to_owned()];
    let ids = |f: RunFilter| {
        let store = &store;
        let providers = &providers;
        async move {
            let page = store.runs_page(providers, &f, 10).await.unwrap();
            let ids: Vec<String> = page.rows.iter().map(|r| r.run_id.clone()).collect();
            assert_eq!(page.total as usize, ids.len());
            ids
        }
    };
    assert_eq!(ids(RunFilter::default()).await, ["run-2", "run-1", "run-0"]);
    let tool = RunFilter {
        tool: Some("BankTransfer".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(tool).await, ["run-0"]);
    let guard = RunFilter {
        guard: Some("data_flow".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(guard).await, ["run-2"]);
    // `model-` is held by two stored values (read as a substring), `alph` by one.
    let models = RunFilter {
        model: Some("model-".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(models).await, ["run-2", "run-1", "run-0"]);
    let alpha = RunFilter {
        model: Some("alph".into()),
        ..RunFilter::default()
    };
    assert_eq!(ids(alpha).await, ["run-0"]);
    // The facts are append-only like the rows they come from.
    assert!(store.execute_raw("DELETE FROM run_facts").await.is_err());
    assert!(
        store
            .execute_raw("UPDATE run_facts SET value = 'x'")
            .await
            .is_err()
    );
    store.close().await;
}

/// A fresh SQLite store migrated to schema `version` only (an older server's store),
/// and one connection to it for writing what such a server wrote.
async fn sqlite_at_schema(version: usize) -> (String, sqlx::AnyPool) {
    let url = format!("{}?mode=rwc", common::sqlite_url());
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let mut old = Store::migrator(knox_server::store::Engine::Sqlite);
    old.migrations = std::borrow::Cow::Owned(old.migrations[..version].to_vec());
    old.run(&pool).await.unwrap();
    (url, pool)
}
