//! The evidence mutator of the robustness campaign (issue #16, item 6): structure-aware
//! mutants of real evidence (the bundles of every topology and a journal written by
//! `knox run`, `tests/fixtures/`), each verified from its bytes, against an oracle that
//! knows which mutations change meaning.
//!
//! Mutation classes, at every position of every bundle (every member of every object,
//! every element of every array, at any depth):
//! - a scalar replaced (a number moved by one, a string changed or emptied, a boolean
//!   flipped, a value of another type), a member removed, an unknown member added, a
//!   container emptied;
//! - a member repeated in the bytes (the same value, or another one before it — a
//!   reader that takes the first occurrence would see other evidence);
//! - splices across runs (a node, the APM, the prompt, the platform evidence, the
//!   summary or its signature taken from another run's bundle, at the same place);
//! - node replays (a node copied over another, or inserted again after itself);
//! - journals: every line's fields as above, lines dropped, repeated or swapped.
//!
//! The oracle: a mutant whose JSON value differs from the original's (read strictly),
//! or whose bytes repeat a member name, changes meaning and must **not** verify
//! `complete` — except a bundle whose prompt in clear is withheld, which the format
//! allows; a journal mutant never verifies `complete`; no mutant panics the verifier.
//! (Its first run found 52 accepted mutants, each a member left out that reads as
//! `null`: a node's `parent` or `block_reason`, a model's `weights_hash`. Those members
//! must now be written.)
//!
//! CI runs a deterministic sample (one position in seven, one mutation class per
//! position in rotation); `KNOX_MUTANTS=full` runs every class at every position, which
//! `scripts/robustness` does and `docs/robustness.md` reports. Each probe prints
//! `robustness: mutants <probe> tried=N changed=M accepted=A panicked=P`.

#![expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::OnceLock;

use knox_policy::ToolkitManifest;
use knox_verify::{Options, Outcome};
use serde_json::{Map, Value, json};

const ALLOW: Options = Options::DANGEROUS_SIMULATED;

/// One bundle file per topology (evidence format v2), a bundle of format v3 (its
/// signed summary places it in its key's chain of runs: `tests/suite/key_chain.rs`), and the
/// journal beside one of them.
const TOPOLOGIES: [&str; 6] = [
    "st-sa",
    "mt-sa-seq-2",
    "mt-sa-int-3",
    "mt-ma-4-2",
    "mt-ma-3-3",
    "../chain/run-1",
];
const JOURNAL: &str = "mt-ma-4-2.journal.jsonl";

fn manifest() -> &'static ToolkitManifest {
    static M: OnceLock<ToolkitManifest> = OnceLock::new();
    M.get_or_init(|| knox_policy::shipped::current().unwrap())
}

fn fixture(name: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/topologies")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn full() -> bool {
    std::env::var("KNOX_MUTANTS").is_ok_and(|v| v == "full")
}

/// The verifier's verdict on `bytes`: `Ok(outcome)` or `Err(read error)`; a panic is
/// reported as `None`.
fn verdict(bytes: &[u8]) -> Option<Result<Outcome, String>> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        knox_verify::evidence::verify_bytes(bytes, manifest(), ALLOW)
            .map(|r| r.outcome)
            .map_err(|e| e.to_string())
    }))
    .ok()
}

/// What a probe found.
#[derive(Default)]
struct Tally {
    tried: u64,
    changed: u64,
    accepted: Vec<String>,
    panicked: Vec<String>,
}

impl Tally {
    /// Verifies one mutant; `changed`: the oracle counts it as a change of meaning, so
    /// `complete` is a finding.
    fn check(&mut self, what: &dyn Fn() -> String, bytes: &[u8], changed: bool) {
        self.tried += 1;
        if changed {
            self.changed += 1;
        }
        match verdict(bytes) {
            None => self.panicked.push(what()),
            Some(Ok(Outcome::Complete)) if changed => self.accepted.push(what()),
            Some(_) => {}
        }
    }

    fn report(&self, probe: &str) {
        eprintln!(
            "robustness: mutants {probe} tried={} changed={} accepted={} panicked={}",
            self.tried,
            self.changed,
            self.accepted.len(),
            self.panicked.len()
        );
        let show = |v: &[String]| v.iter().take(40).cloned().collect::<Vec<_>>().join("\n  ");
        assert!(
            self.accepted.is_empty(),
            "{probe}: {} mutants that change meaning verified complete:\n  {}",
            self.accepted.len(),
            show(&self.accepted)
        );
        assert!(
            self.panicked.is_empty(),
            "{probe}: {} mutants panicked the verifier:\n  {}",
            self.panicked.len(),
            show(&self.panicked)
        );
        assert!(self.tried > 0, "{probe}: no mutant tried");
    }
}

/// Whether mutant `m` of bundle `doc` only withholds the prompt in clear, which the
/// format allows (evidence format §2: its hash stays in the attested APM, so nothing
/// the bundle says changes).
fn withheld(doc: &Value, m: &Value) -> bool {
    let mut without = doc.clone();
    without.as_object_mut().unwrap().remove("prompt");
    *m == without
}

/// Every position of `v` as an RFC 6901 pointer (the root excluded), depth first.
fn positions(v: &Value, at: &mut String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let len = at.len();
                at.push('/');
                at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                out.push(at.clone());
                positions(c, at, out);
                at.truncate(len);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let len = at.len();
                let _ = write!(at, "/{i}");
                out.push(at.clone());
                positions(c, at, out);
                at.truncate(len);
            }
        }
        _ => {}
    }
}

/// The parent pointer of `p` and its last reference token (unescaped).
fn split(p: &str) -> (&str, String) {
    let i = p.rfind('/').unwrap();
    (&p[..i], p[i + 1..].replace("~1", "/").replace("~0", "~"))
}

/// Value-level mutations of the value at `p` (each a new document), by class.
const CLASSES: usize = 5;

fn mutate(doc: &Value, p: &str, class: usize) -> Vec<(String, Value)> {
    let target = doc.pointer(p).unwrap();
    let mut out = Vec::new();
    let mut with = |what: String, f: &dyn Fn(&mut Value)| {
        let mut d = doc.clone();
        f(&mut d);
        out.push((what, d));
    };
    match class {
        // A scalar changed in place.
        0 => {
            let replacement = match target {
                Value::Number(n) => n
                    .as_u64()
                    .map(|u| json!(u.wrapping_add(1)))
                    .or_else(|| n.as_i64().map(|i| json!(i.wrapping_sub(1))))
                    .unwrap_or_else(|| json!(n.as_f64().unwrap_or(0.0) + 1.0)),
                Value::String(s) if s.is_empty() => json!("x"),
                Value::String(s) => {
                    // Flip the last character within its class, so hex stays hex.
                    let mut t: Vec<char> = s.chars().collect();
                    let last = t.last_mut().unwrap();
                    *last = match *last {
                        '0' => '1',
                        'f' => 'e',
                        'a'..='e' | '1'..='9' => char::from(*last as u8 ^ 1),
                        c if c.is_ascii_alphabetic() => {
                            if c == 'z' {
                                'y'
                            } else {
                                char::from(c as u8 + 1)
                            }
                        }
                        _ => 'x',
                    };
                    Value::String(t.into_iter().collect())
                }
                Value::Bool(b) => json!(!b),
                Value::Null => json!(0),
                Value::Array(a) if !a.is_empty() => json!([]),
                Value::Object(m) if !m.is_empty() => json!({}),
                _ => json!(null),
            };
            with(format!("{p}: changed"), &|d| {
                *d.pointer_mut(p).unwrap() = replacement.clone();
            });
        }
        // Another type.
        1 => {
            let other = match target {
                Value::String(_) => json!(7),
                Value::Number(n) => json!(n.to_string()),
                Value::Bool(b) => json!(if *b { 1 } else { 0 }),
                Value::Null => json!(""),
                Value::Array(_) => json!({}),
                Value::Object(_) => json!([]),
            };
            with(format!("{p}: another type"), &|d| {
                *d.pointer_mut(p).unwrap() = other.clone();
            });
        }
        // Removed (a member) or dropped (an element).
        2 => {
            let (parent, token) = split(p);
            with(
                format!("{p}: removed"),
                &|d| match d.pointer_mut(parent).unwrap() {
                    Value::Object(m) => {
                        m.remove(&token);
                    }
                    Value::Array(a) => {
                        a.remove(token.parse::<usize>().unwrap());
                    }
                    _ => unreachable!(),
                },
            );
        }
        // An unknown member beside it (objects), the element repeated (arrays).
        3 => {
            let (parent, token) = split(p);
            with(
                format!("{p}: sibling added"),
                &|d| match d.pointer_mut(parent).unwrap() {
                    Value::Object(m) => {
                        m.insert(format!("{token}_"), json!("unknown"));
                    }
                    Value::Array(a) => {
                        let i = token.parse::<usize>().unwrap();
                        let e = a[i].clone();
                        a.insert(i + 1, e);
                    }
                    _ => unreachable!(),
                },
            );
        }
        // Swapped with the next element (arrays) or moved into a wrapper (objects).
        _ => {
            let (parent, token) = split(p);
            with(
                format!("{p}: moved"),
                &|d| match d.pointer_mut(parent).unwrap() {
                    Value::Object(m) => {
                        let v = m.remove(&token).unwrap();
                        m.insert(token.clone(), json!({ "value": v }));
                    }
                    Value::Array(a) => {
                        let i = token.parse::<usize>().unwrap();
                        if i + 1 < a.len() {
                            a.swap(i, i + 1);
                        } else if i > 0 {
                            a.swap(i, i - 1);
                        } else {
                            a.push(json!(null));
                        }
                    }
                    _ => unreachable!(),
                },
            );
        }
    }
    out.retain(|(_, d)| d != doc);
    out
}

/// `v` written as JSON, with the member `dup` of the object at pointer `at` written a
/// second time with `value` — before the real one when `first`, so a reader that takes
/// the first occurrence sees `value` and one that takes the last sees the original.
fn write_with_duplicate(
    v: &Value,
    here: &str,
    at: &str,
    dup: &str,
    value: &Value,
    first: bool,
) -> String {
    match v {
        Value::Object(m) => {
            let mut s = String::from("{");
            let mut sep = "";
            let extra = |s: &mut String, sep: &mut &str| {
                let _ = write!(
                    s,
                    "{sep}{}:{}",
                    serde_json::to_string(dup).unwrap(),
                    serde_json::to_string(value).unwrap()
                );
                *sep = ",";
            };
            for (k, c) in m {
                if here == at && k == dup && first {
                    extra(&mut s, &mut sep);
                }
                let child = format!("{here}/{}", k.replace('~', "~0").replace('/', "~1"));
                let _ = write!(
                    s,
                    "{sep}{}:{}",
                    serde_json::to_string(k).unwrap(),
                    write_with_duplicate(c, &child, at, dup, value, first)
                );
                sep = ",";
                if here == at && k == dup && !first {
                    extra(&mut s, &mut sep);
                }
            }
            s.push('}');
            s
        }
        Value::Array(a) => {
            let mut s = String::from("[");
            for (i, c) in a.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&write_with_duplicate(
                    c,
                    &format!("{here}/{i}"),
                    at,
                    dup,
                    value,
                    first,
                ));
            }
            s.push(']');
            s
        }
        scalar => serde_json::to_string(scalar).unwrap(),
    }
}

/// The mutation classes tried at the `index`th position: all of them in full mode;
/// else one class at one position in [`SAMPLE`], in rotation.
fn classes_for(index: usize) -> Vec<usize> {
    if full() {
        (0..CLASSES).collect()
    } else if index.is_multiple_of(SAMPLE) {
        vec![(index / SAMPLE) % CLASSES]
    } else {
        Vec::new()
    }
}

/// Outside full mode, one position in `SAMPLE` is mutated (a debug-build verification
/// costs milliseconds; CI keeps the probe to a minute or two).
const SAMPLE: usize = 7;

fn bundles() -> Vec<(&'static str, Vec<u8>, Value)> {
    TOPOLOGIES
        .iter()
        .map(|t| {
            let bytes = fixture(&format!("{t}.json"));
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            (*t, bytes, v)
        })
        .collect()
}

#[test]
fn untouched_fixtures_verify_so_the_oracle_is_meaningful() {
    for (t, bytes, _) in bundles() {
        assert_eq!(verdict(&bytes), Some(Ok(Outcome::Complete)), "{t}");
    }
    assert_eq!(verdict(&fixture(JOURNAL)), Some(Ok(Outcome::Prefix)));
}

#[test]
fn no_field_mutant_of_a_bundle_verifies_complete() {
    let mut tally = Tally::default();
    for (t, _, doc) in bundles() {
        let mut ps = Vec::new();
        positions(&doc, &mut String::new(), &mut ps);
        for (i, p) in ps.iter().enumerate() {
            for class in classes_for(i) {
                for (what, m) in mutate(&doc, p, class) {
                    let bytes = serde_json::to_vec(&m).unwrap();
                    tally.check(&|| format!("{t} {what}"), &bytes, !withheld(&doc, &m));
                }
            }
        }
    }
    tally.report("fields");
}

#[test]
fn no_bundle_with_a_repeated_member_verifies_complete() {
    let mut tally = Tally::default();
    for (t, _, doc) in bundles() {
        let mut ps = Vec::new();
        positions(&doc, &mut String::new(), &mut ps);
        for (i, p) in ps.iter().enumerate() {
            let (parent, token) = split(p);
            if !doc.pointer(parent).unwrap().is_object() {
                continue;
            }
            if !full() && !i.is_multiple_of(3 * SAMPLE) {
                continue;
            }
            let original = doc.pointer(p).unwrap();
            let other = mutate(&doc, p, 0)
                .first()
                .and_then(|(_, d)| d.pointer(p).cloned())
                .unwrap_or(json!(null));
            for (value, first) in [(original, false), (&other, true), (&other, false)] {
                let bytes = write_with_duplicate(&doc, "", parent, &token, value, first);
                tally.check(
                    &|| format!("{t} {p}: repeated (first: {first})"),
                    bytes.as_bytes(),
                    true,
                );
            }
        }
    }
    tally.report("duplicate-keys");
}

#[test]
fn no_splice_across_runs_or_node_replay_verifies_complete() {
    let mut tally = Tally::default();
    let all = bundles();
    for (ta, _, a) in &all {
        for (tb, _, b) in &all {
            if ta == tb {
                continue;
            }
            // The parts of run `b` put into run `a`, at the same place.
            for part in [
                "/apm",
                "/prompt",
                "/platform",
                "/summary",
                "/key",
                "/apm_attestation",
            ] {
                let (Some(pa), Some(pb)) = (a.pointer(part), b.pointer(part)) else {
                    continue;
                };
                let mut m = a.clone();
                *m.pointer_mut(part).unwrap() = pb.clone();
                let changed = pa != pb;
                tally.check(
                    &|| format!("{ta} with {tb}'s {part}"),
                    &serde_json::to_vec(&m).unwrap(),
                    changed,
                );
            }
            let na = a["nodes"].as_array().unwrap();
            let nb = b["nodes"].as_array().unwrap();
            for i in 0..na.len().min(nb.len()) {
                if !full() && !i.is_multiple_of(SAMPLE) {
                    continue;
                }
                let mut m = a.clone();
                m["nodes"][i] = nb[i].clone();
                let changed = na[i] != nb[i];
                tally.check(
                    &|| format!("{ta} with {tb}'s node {i}"),
                    &serde_json::to_vec(&m).unwrap(),
                    changed,
                );
            }
        }
        // Node replays inside one run.
        let nodes = a["nodes"].as_array().unwrap();
        for i in 0..nodes.len() {
            if !full() && !i.is_multiple_of(3) {
                continue;
            }
            for j in [i + 1, i + 2, nodes.len() - 1] {
                if j >= nodes.len() || j == i {
                    continue;
                }
                let mut over = a.clone();
                over["nodes"][j] = nodes[i].clone();
                tally.check(
                    &|| format!("{ta} node {i} replayed over {j}"),
                    &serde_json::to_vec(&over).unwrap(),
                    nodes[i] != nodes[j],
                );
            }
            let mut again = a.clone();
            again["nodes"]
                .as_array_mut()
                .unwrap()
                .insert(i + 1, nodes[i].clone());
            tally.check(
                &|| format!("{ta} node {i} inserted again"),
                &serde_json::to_vec(&again).unwrap(),
                true,
            );
        }
    }
    tally.report("splices-and-replays");
}

#[test]
fn no_journal_mutant_verifies_complete() {
    let mut tally = Tally::default();
    let text = String::from_utf8(fixture(JOURNAL)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let join = |ls: &[String]| ls.join("\n") + "\n";
    let owned: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let mut index = 0usize;
    for (n, line) in lines.iter().enumerate() {
        let doc: Value = serde_json::from_str(line).unwrap();
        let mut ps = Vec::new();
        positions(&doc, &mut String::new(), &mut ps);
        for p in &ps {
            index += 1;
            for class in classes_for(index) {
                for (what, m) in mutate(&doc, p, class) {
                    let mut ls = owned.clone();
                    ls[n] = serde_json::to_string(&m).unwrap();
                    // A journal is never complete, mutated or not.
                    tally.check(&|| format!("line {n} {what}"), join(&ls).as_bytes(), true);
                }
            }
        }
        // Lines dropped, repeated, swapped.
        let mut dropped = owned.clone();
        dropped.remove(n);
        tally.check(
            &|| format!("line {n} dropped"),
            join(&dropped).as_bytes(),
            true,
        );
        let mut repeated = owned.clone();
        repeated.insert(n, owned[n].clone());
        tally.check(
            &|| format!("line {n} repeated"),
            join(&repeated).as_bytes(),
            true,
        );
        if n + 1 < owned.len() {
            let mut swapped = owned.clone();
            swapped.swap(n, n + 1);
            tally.check(
                &|| format!("lines {n} and {} swapped", n + 1),
                join(&swapped).as_bytes(),
                true,
            );
        }
    }
    tally.report("journal");
}

#[test]
fn the_mutator_changes_values_and_writes_real_duplicates() {
    // The mutator's own check: every class changes the document, and a repeated member
    // is really in the bytes (serde_json, which keeps the last occurrence, reads the
    // original value back while a first-occurrence reader would see the other one).
    let (_, _, doc) = bundles().remove(0);
    let mut ps = Vec::new();
    positions(&doc, &mut String::new(), &mut ps);
    assert!(ps.len() > 100, "a bundle has many positions: {}", ps.len());
    for class in 0..CLASSES {
        for (what, m) in mutate(&doc, &ps[ps.len() / 2], class) {
            assert_ne!(m, doc, "{what}");
        }
    }
    let same = write_with_duplicate(&doc, "", "", "nonexistent", &json!(1), false);
    let back: Value = serde_json::from_str(&same).unwrap();
    assert_eq!(back, doc);
    let m: Map<String, Value> = serde_json::from_str(&write_with_duplicate(
        &json!({"a": 1, "b": 2}),
        "",
        "",
        "a",
        &json!(9),
        true,
    ))
    .unwrap();
    // serde_json keeps the last occurrence: the original value.
    assert_eq!(m["a"], json!(1));
}

/// The first run's finding, kept as its own regression test: a node's `parent` or
/// `block_reason`, or a model's `weights_hash`, left out instead of written as `null`
/// verified complete (a lenient reading of "absent" as `null`), while the format
/// measures the member. It is unreadable now, naming the member.
#[test]
fn a_member_left_out_instead_of_null_is_not_complete() {
    let (_, _, doc) = bundles().remove(1);
    let nodes = doc["nodes"].as_array().unwrap();
    let blocked = nodes
        .iter()
        .position(|n| n["block_reason"].is_null())
        .unwrap();
    for (pointer, member) in [
        ("/nodes/0".to_owned(), "parent"),
        (format!("/nodes/{blocked}"), "block_reason"),
        ("/models/0".to_owned(), "weights_hash"),
    ] {
        let mut m = doc.clone();
        let parent = m.pointer_mut(&pointer).unwrap().as_object_mut().unwrap();
        assert!(
            parent.get(member).is_some_and(Value::is_null),
            "{pointer}/{member}"
        );
        parent.remove(member);
        match verdict(&serde_json::to_vec(&m).unwrap()) {
            Some(Err(e)) => assert!(e.contains(member), "{pointer}: {e}"),
            other => panic!("{pointer}/{member} left out: {other:?}"),
        }
    }
}

/// A bundle's `models` left out where the list is empty would read as that empty
/// list: it must be written too (found by the full mutator run, on the key-chain
/// fixture, whose run declares no model).
#[test]
fn a_bundles_empty_models_left_out_is_not_complete() {
    let mut doc: Value = serde_json::from_slice(&fixture("../chain/run-1.json")).unwrap();
    assert_eq!(doc["models"], Value::Array(Vec::new()));
    doc.as_object_mut().unwrap().remove("models");
    match verdict(&serde_json::to_vec(&doc).unwrap()) {
        Some(Err(e)) => assert!(e.contains("models"), "{e}"),
        other => panic!("`models` left out: {other:?}"),
    }
}

/// #35: members the format makes optional, added where the evidence has none: an
/// embedded toolkit manifest the APM does not name, an unnamed refresh report (a
/// genuine simulated one, binding the bundle's key, nonce and chain head), and a
/// capability contract. Each is bytes no signature binds: none verifies complete.
#[test]
fn no_optional_member_added_to_a_bundle_verifies_complete() {
    let mut tally = Tally::default();
    let authority = knox_attest::PartyKey::from_seed([5; 32]);
    let now = 1_767_000_000_000;
    let contract = knox_contract::example::template(now, now + 1, &"0".repeat(64));
    let signed = json!({
        "authority": authority.public_key(),
        "envelope": knox_contract::signed::sign(&authority, &contract).unwrap(),
    });
    for (name, _, doc) in bundles() {
        let b: knox_types::bundle::Bundle = serde_json::from_value(doc.clone()).unwrap();
        let key: [u8; 32] = b.key.public_key.0.as_slice().try_into().unwrap();
        let refresh = knox_attest::platform::PlatformBackend::collect(
            &knox_attest::simulated::Simulated,
            &knox_attest::platform::KeyBinding {
                public_key: key,
                nonce: b.platform.nonce.0.clone(),
                chain_head: Some(b.summary.chain_head.0),
            },
        )
        .unwrap();
        let other_manifest = String::from_utf8(
            knox_policy::shipped::terminal()
                .unwrap()
                .canonical_bytes()
                .to_vec(),
        )
        .unwrap();
        let added: [(&str, Value); 5] = [
            ("manifest", json!(other_manifest)),
            ("manifest", json!("{}")),
            ("refresh", serde_json::to_value(&refresh).unwrap()),
            ("contract", signed.clone()),
            (
                "contract",
                json!({"authority": authority.public_key(), "envelope": b.envelope}),
            ),
        ];
        for (member, value) in added {
            if doc.get(member).is_some() {
                continue;
            }
            let mut m = doc.clone();
            m.as_object_mut().unwrap().insert(member.into(), value);
            let bytes = serde_json::to_vec(&m).unwrap();
            tally.check(&|| format!("{name}: /{member} added"), &bytes, true);
        }
    }
    tally.report("optional members");
}
