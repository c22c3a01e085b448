//! Verifying the on-disk journal of a run that did not finish: an integrity-checked
//! prefix at best.

use crate::manifests::TrustedManifests;
use knox_types::aeg::{Node, chain_start, chain_step};
use knox_types::bundle::{
    AsWritten, Bundle, Counts, JOURNAL_FORMAT as CURRENT, JOURNAL_FORMAT_V1, JOURNAL_FORMAT_V2,
    JOURNAL_FORMAT_V3, JOURNAL_FORMAT_V4, JOURNAL_FORMAT_V5, JournalHeader, MAX_BUNDLE_BYTES,
    PublicKey, Summary,
};
use knox_types::checkpoint::{CHECKPOINT_CONTEXT, Checkpoint};
use knox_types::digest::Digest;
use knox_types::merkle::Frontier;

use crate::replay::Fail;
use crate::written::{self, Reader, Typed};
use crate::{Options, ReadError, Report, Steps};

/// Format of the journal header Knox writes.
pub const JOURNAL_FORMAT: &str = CURRENT;

/// Whether `bytes` look like a journal (its first line is an object whose `format` is
/// a journal format). Only `format` is read: every other member is skipped unbuilt, so
/// asking this of a one-line bundle costs a scan of it, not a parse.
pub fn is_journal(bytes: &[u8]) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Format;
    impl<'de> Visitor<'de> for Format {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
            let mut format = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == "format" {
                    format = map.next_value::<Option<String>>()?;
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(format)
        }
    }
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut de = serde_json::Deserializer::from_slice(first);
    let format = de.deserialize_map(Format).ok().flatten();
    // Nothing but white space may follow the object, as `from_slice` requires.
    de.end().is_ok()
        && format.is_some_and(|f| {
            [
                JOURNAL_FORMAT,
                JOURNAL_FORMAT_V5,
                JOURNAL_FORMAT_V4,
                JOURNAL_FORMAT_V3,
                JOURNAL_FORMAT_V2,
                JOURNAL_FORMAT_V1,
            ]
            .contains(&f.as_str())
        })
}

/// Verifies a journal: the same steps as a bundle, but there is no signed summary, so
/// the best outcome is `prefix`. A torn last line (the process died mid-write) is
/// ignored and reported. Every line is read strictly (a repeated key is tampering) and,
/// from version 2, the header's APM, prompt and platform evidence and every node's
/// payload must be canonical as written. In version 3 every checkpoint line must be
/// signed by the header's key over the run, the count of the nodes before it, their
/// chain head and structure root; the report's `authenticated` is the count the last
/// one signs (0 without one, and in earlier versions).
pub fn verify_journal<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifests: &M,
    opts: Options<'_>,
) -> Result<Report, ReadError> {
    verify_journal_lines(bytes, manifests, opts, true)
}

/// [`verify_journal`] of a journal rebuilt from its node lines alone, by a store that
/// does not keep checkpoint lines (`knox serve`'s live runs): the signed checkpoint
/// cadence is not checked (its step says so), and no node is authenticated but by the
/// sealed bundle that completes the run. Everything else is checked as in a journal.
pub fn verify_streamed_nodes<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifests: &M,
    opts: Options<'_>,
) -> Result<Report, ReadError> {
    verify_journal_lines(bytes, manifests, opts, false)
}

fn verify_journal_lines<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifests: &M,
    opts: Options<'_>,
    checkpoints_kept: bool,
) -> Result<Report, ReadError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let first = lines.next().unwrap_or_default();
    let scan = knox_types::json::scan(first, &written::header_part)?;
    let header: JournalHeader = knox_types::json::from_scanned(first, &scan)?;
    let (canonical, checkpointed, cadence_signed) = match header.format.as_str() {
        JOURNAL_FORMAT | JOURNAL_FORMAT_V5 | JOURNAL_FORMAT_V4 => (true, true, true),
        JOURNAL_FORMAT_V3 => (true, true, false),
        JOURNAL_FORMAT_V2 => (true, false, false),
        JOURNAL_FORMAT_V1 => (false, false, false),
        _ => return Err(ReadError::Format(header.format)),
    };
    let header_format = header.format.clone();
    let mut r = Reader {
        file: bytes,
        canonical,
        found: Default::default(),
    };
    r.spans(first, &scan, 0, None, Some(&header.apm), Typed::None);
    let body = read_body(bytes, first.len() + 1, lines, checkpointed, &mut r)?;
    // The bundle format whose rules the journal's nodes follow (its replay's).
    let format = if header_format == JOURNAL_FORMAT {
        knox_types::bundle::BUNDLE_FORMAT
    } else if header_format == JOURNAL_FORMAT_V5 {
        knox_types::bundle::BUNDLE_FORMAT_V4
    } else if canonical {
        knox_types::bundle::BUNDLE_FORMAT_V3
    } else {
        knox_types::bundle::BUNDLE_FORMAT_V1
    };
    let bundle = unsigned_bundle(header, format, body.nodes, r.found);
    let mut s = Steps::default();
    crate::encoding_step(&mut s, &bundle);
    let (platform, hw) = crate::evidence_step(&mut s, &bundle, opts);
    let chosen = crate::manifests::choose(&bundle, manifests);
    let apm_hash = crate::apm_step(&mut s, &bundle, &chosen);
    let manifest = chosen.as_ref().ok().map(crate::manifests::Chosen::manifest);
    crate::prompt_step(&mut s, &bundle);
    crate::roles_step(&mut s, &bundle);
    s.skip("signature", "journal: the run never signed a summary");
    let findings = crate::graph_steps(&mut s, &bundle, manifest, apm_hash, false, opts.norms);
    let authenticated = checkpoint_steps(
        &mut s,
        &bundle,
        &body.checkpoints,
        Signed {
            checkpointed,
            cadence_signed,
            checkpoints_kept,
            canonical,
            header_format: &header_format,
        },
    );
    let mut report = crate::build_report(s, &bundle, platform, hw, findings, false);
    report.authenticated = Some(authenticated);
    if body.torn {
        report.warnings.push(
            "the journal's last line was torn (the run died while writing it) and was ignored"
                .into(),
        );
    }
    Ok(report)
}

/// A journal's lines after its header.
struct Body {
    /// The node lines, in order.
    nodes: Vec<Node>,
    /// The checkpoint lines, where they stand.
    checkpoints: Vec<Placed>,
    /// Whether the last line was torn (and ignored).
    torn: bool,
}

/// Reads the lines after the header (which ends at byte `base`): node lines, and
/// checkpoint lines where the format has them; only the very last line may be torn (it
/// was never terminated by `\n`). Every line's spans go to `r`.
fn read_body<'b>(
    bytes: &'b [u8],
    mut base: usize,
    mut lines: std::iter::Peekable<impl Iterator<Item = &'b [u8]>>,
    checkpointed: bool,
    r: &mut Reader<'b>,
) -> Result<Body, ReadError> {
    let mut body = Body {
        nodes: Vec::new(),
        checkpoints: Vec::new(),
        torn: false,
    };
    let mut number = 1;
    while let Some(line) = lines.next() {
        number += 1;
        let at = base;
        base += line.len() + 1;
        if line.is_empty() {
            continue;
        }
        let last = lines.peek().is_none();
        let scan = match knox_types::json::scan(line, &written::node_part) {
            Ok(s) => s,
            Err(_) if last => {
                body.torn = true;
                continue;
            }
            Err(mut e) => {
                e.offset += at;
                (e.line, e.column) = knox_types::json::line_column(bytes, e.offset);
                return Err(ReadError::Syntax(e));
            }
        };
        let seq = body.nodes.len() as u64;
        match knox_types::json::from_scanned::<Node>(line, &scan) {
            Ok(n) => {
                r.spans(line, &scan, at, Some(seq), None, Typed::Line(&n));
                body.nodes.push(n);
            }
            // A checkpoint line has none of a node's members (version 3 on).
            Err(e) => match knox_types::json::from_scanned::<Checkpoint>(line, &scan) {
                Ok(c) if checkpointed => {
                    r.spans(line, &scan, at, None, None, Typed::None);
                    body.checkpoints.push(Placed {
                        line: number,
                        after: seq,
                        checkpoint: c,
                    });
                }
                _ if last => body.torn = true,
                _ => return Err(ReadError::Json(e)),
            },
        }
    }
    Ok(body)
}

/// The journal as a bundle of `format` with no signed summary (empty summary and
/// envelope): what the verifier's steps read.
fn unsigned_bundle(
    header: JournalHeader,
    format: &str,
    nodes: Vec<Node>,
    found: AsWritten,
) -> Bundle {
    Bundle {
        format: format.into(),
        run_id: header.run_id,
        prompt: header.prompt,
        apm: header.apm,
        apm_attestation: header.apm_attestation,
        nodes,
        summary: Summary {
            format: String::new(),
            run_id: String::new(),
            chain_head: Default::default(),
            structure_root: Default::default(),
            apm_hash: Default::default(),
            counts: Counts::default(),
            refresh: None,
            key_chain: None,
        },
        envelope: knox_types::dsse::Envelope {
            payload: String::new(),
            payload_type: String::new(),
            signatures: vec![],
        },
        key: header.key,
        platform: header.platform,
        refresh: None,
        models: header.models,
        manifest: header.manifest,
        contract: header.contract,
        as_written: Some(found),
    }
}

/// What a journal's format signs of its checkpoints.
struct Signed<'h> {
    /// The format has checkpoint lines (version 3 on).
    checkpointed: bool,
    /// Their cadence is signed with the APM (version 4 on).
    cadence_signed: bool,
    /// The checkpoint lines were kept (not a journal rebuilt from node lines).
    checkpoints_kept: bool,
    /// Written canonically (version 2 on).
    canonical: bool,
    /// The format the (unsigned) header declares.
    header_format: &'h str,
}

/// The checkpoint and cadence steps: the nodes the last checkpoint authenticates (0
/// without checkpoints). A signed cadence binds whatever the header's (unsigned)
/// format says: relabelled as an earlier version, the journal still owes its
/// checkpoints.
fn checkpoint_steps(s: &mut Steps, bundle: &Bundle, checkpoints: &[Placed], f: Signed<'_>) -> u64 {
    let authenticated = if f.checkpointed {
        checkpoint_step(s, bundle, checkpoints)
    } else {
        s.skip(
            "checkpoints",
            format!(
                "{} has no checkpoints: no node is signed, only the header's APM attestation",
                bundle_format_name(f.canonical)
            ),
        );
        0
    };
    if !f.checkpoints_kept {
        s.skip(
            "checkpoint cadence",
            "rebuilt from its node lines: checkpoint lines were not kept, so their cadence is not checked",
        );
    } else if f.cadence_signed || bundle.apm_attestation.statement.checkpoints.is_some() {
        let relabelled = (!f.cadence_signed).then_some(f.header_format);
        cadence_step(s, bundle, checkpoints, relabelled);
    } else if f.checkpointed {
        s.skip(
            "checkpoint cadence",
            format!("{JOURNAL_FORMAT_V3} does not sign its checkpoint cadence: checkpoints removed from it cannot be told from a crash"),
        );
    }
    authenticated
}

/// The journal format a version-1 or -2 journal declared (for the report).
fn bundle_format_name(canonical: bool) -> &'static str {
    if canonical {
        JOURNAL_FORMAT_V2
    } else {
        JOURNAL_FORMAT_V1
    }
}

/// A checkpoint line, where it stands.
struct Placed {
    /// 1-based line of the file.
    line: usize,
    /// How many node lines precede it.
    after: u64,
    checkpoint: Checkpoint,
}

/// Checks every checkpoint against the nodes before it and returns how many nodes the
/// last one authenticates (0 when there is none or one fails).
///
/// The chain is recomputed from the recorded measurements and positions: the chain
/// step of [`crate::graph_steps`] has checked each against its node's content (or
/// failed), so a checkpoint that matches signs the nodes as written.
fn checkpoint_step(s: &mut Steps, b: &Bundle, checkpoints: &[Placed]) -> u64 {
    let mut chain = chain_start();
    let mut frontier = Frontier::default();
    let mut nodes = b.nodes.iter();
    let mut last = None;
    for p in checkpoints {
        while frontier.len() < p.after {
            let Some(n) = nodes.next() else { break };
            chain = chain_step(&chain, frontier.len(), &n.measurement);
            frontier.push(n.leaf_hash());
        }
        if let Err(why) = check_one(b, &p.checkpoint, p.after, &chain, &frontier.root()) {
            s.fail(
                "checkpoints",
                Fail::unplaced(format!("checkpoint on line {}: {why}", p.line)),
            );
            return 0;
        }
        last = Some(p);
    }
    let total = b.nodes.len() as u64;
    let Some(p) = last else {
        s.pass(
            "checkpoints",
            format!("no checkpoint: none of the {total} nodes is authenticated, only the header"),
        );
        return 0;
    };
    s.pass(
        "checkpoints",
        format!(
            "{} checkpoint(s) verify; nodes 0..{k} signed by the checkpoint on line {}, nodes {k}..{total} ({}) an unauthenticated tail",
            checkpoints.len(),
            p.line,
            total - p.after,
            k = p.after,
        ),
    );
    p.after
}

/// In a v4 journal, every checkpoint the header's APM attestation promises is there: at
/// most `every_nodes` nodes before the first checkpoint, between two, and after the
/// last (a crash may cut the journal just before a due checkpoint, never later).
/// Checkpoints deleted from the middle, or all of them, leave a longer gap: tampering,
/// not the prefix of a crash. (The clear statement is the signed one: the APM step
/// fails otherwise.)
///
/// `relabelled`: the earlier format the header declares, when the APM attestation
/// signs a cadence all the same (only a v4 writer signs one): tampering.
fn cadence_step(s: &mut Steps, b: &Bundle, checkpoints: &[Placed], relabelled: Option<&str>) {
    if let Some(format) = relabelled {
        s.fail(
            "checkpoint cadence",
            Fail::unplaced(format!(
                "the APM attestation signs a checkpoint cadence, which only a {JOURNAL_FORMAT_V4} journal or later has, but the header says `{format}`: the header's format was changed"
            )),
        );
        return;
    }
    let Some(policy) = b.apm_attestation.statement.checkpoints else {
        s.fail(
            "checkpoint cadence",
            Fail::unplaced(format!(
                "a {JOURNAL_FORMAT_V4} journal or later's APM attestation must sign its checkpoint cadence, and it signs none"
            )),
        );
        return;
    };
    let gap = policy.max_gap();
    let total = b.nodes.len() as u64;
    let mut from = 0u64;
    for to in checkpoints
        .iter()
        .map(|p| p.after)
        .chain(std::iter::once(total))
    {
        if to.saturating_sub(from) > gap {
            let at = if to == total {
                "after the last checkpoint".to_string()
            } else {
                format!("before the checkpoint signing {to} nodes")
            };
            s.fail(
                "checkpoint cadence",
                Fail::unplaced(format!(
                    "nodes {from}..{to} ({} nodes, {at}) carry no checkpoint, but the run's signed cadence is one at least every {gap} nodes: checkpoints were removed",
                    to - from
                )),
            );
            return;
        }
        from = to;
    }
    s.pass(
        "checkpoint cadence",
        format!(
            "a checkpoint at least every {gap} nodes, as the APM attestation signs ({} checkpoint(s), {total} nodes)",
            checkpoints.len()
        ),
    );
}

/// Why one checkpoint, preceded by `after` nodes whose chain head and structure root
/// are `chain` and `root`, does not sign them.
fn check_one(
    b: &Bundle,
    c: &Checkpoint,
    after: u64,
    chain: &Digest,
    root: &Digest,
) -> Result<(), String> {
    let body = &c.checkpoint;
    verify_sig(&b.key, c)?;
    if body.run_id != b.run_id {
        return Err(format!(
            "it signs run `{}`, the header names run `{}`: a checkpoint of another run",
            body.run_id, b.run_id
        ));
    }
    if body.apm_hash != b.apm_attestation.statement.apm_hash {
        return Err(format!(
            "it signs APM {}, the header's attestation names APM {}",
            body.apm_hash, b.apm_attestation.statement.apm_hash
        ));
    }
    if body.nodes != after {
        return Err(format!(
            "it signs {} nodes, {after} precede it: nodes were removed, inserted or it was moved",
            body.nodes
        ));
    }
    if body.chain_head != *chain {
        return Err(format!(
            "the chain head of the {after} nodes before it differs from the signed one: a node before it was edited (and re-measured), replaced or reordered"
        ));
    }
    if body.structure_root != *root {
        return Err(format!(
            "the structure root of the {after} nodes before it differs from the signed one"
        ));
    }
    Ok(())
}

/// The checkpoint's signature under the header's key.
fn verify_sig(key: &PublicKey, c: &Checkpoint) -> Result<(), String> {
    let signed = c
        .checkpoint
        .signed_bytes()
        .map_err(|e| format!("cannot encode it: {e}"))?;
    knox_attest::key::verify_signature(key, CHECKPOINT_CONTEXT, &signed, &c.sig)
        .map_err(|e| format!("its signature under the header's key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::is_journal;

    #[test]
    fn a_journal_is_told_from_a_bundle_by_its_first_lines_format() {
        let journal =
            b"{\"apm\":{\"agents\":[1,{\"x\":\"\\u0041\"}]},\"format\":\"knox-journal/v3\"}\n{}";
        assert!(is_journal(journal));
        assert!(is_journal(b"{\"format\":\"knox-journal/v1\"}"));
        assert!(is_journal(b" {\"format\":\"knox-journal/v2\"} \n"));
        // A bundle, other formats, no format, not an object, trailing bytes, bad JSON.
        assert!(!is_journal(
            b"{\"format\":\"knox-evidence/v2\",\"nodes\":[{\"format\":\"knox-journal/v3\"}]}"
        ));
        assert!(!is_journal(b"{\"format\":null}\n"));
        assert!(!is_journal(b"{\"apm\":{}}\n"));
        assert!(!is_journal(b"[\"knox-journal/v3\"]\n"));
        assert!(!is_journal(b"{\"format\":\"knox-journal/v3\"} x\n"));
        assert!(!is_journal(b"{\"format\":\"knox-journal/v3\"\n}"));
        assert!(!is_journal(b""));
    }
}
