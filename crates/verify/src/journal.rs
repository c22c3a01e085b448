//! Verifying the on-disk journal of a run that did not finish: an integrity-checked
//! prefix at best.

use crate::manifests::TrustedManifests;
use knox_types::aeg::Node;
use knox_types::bundle::{
    Bundle, Counts, JOURNAL_FORMAT as CURRENT, JOURNAL_FORMAT_V1, JournalHeader, MAX_BUNDLE_BYTES,
    Summary,
};
use serde_json::Value;

use crate::written::{self, Reader};
use crate::{Options, ReadError, Report, Steps};

/// Format of the journal header Knox writes.
pub const JOURNAL_FORMAT: &str = CURRENT;

/// Whether `bytes` look like a journal (its first line declares a journal format).
pub fn is_journal(bytes: &[u8]) -> bool {
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    serde_json::from_slice::<Value>(first)
        .ok()
        .and_then(|v| {
            v.get("format")
                .and_then(Value::as_str)
                .map(|f| f == JOURNAL_FORMAT || f == JOURNAL_FORMAT_V1)
        })
        .unwrap_or(false)
}

/// Verifies a journal: the same steps as a bundle, but there is no signed summary, so
/// the best outcome is `prefix`. A torn last line (the process died mid-write) is
/// ignored and reported. Every line is read strictly (a repeated key is tampering) and,
/// in a version-2 journal, the header's APM, prompt and platform evidence and every
/// node's payload must be canonical as written.
pub fn verify_journal<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifests: &M,
    opts: Options<'_>,
) -> Result<Report, ReadError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let first = lines.next().unwrap_or_default();
    let scan = knox_types::json::scan(first, &written::header_part)?;
    let header: JournalHeader = knox_types::json::from_scanned(first, &scan)?;
    let canonical = match header.format.as_str() {
        JOURNAL_FORMAT => true,
        JOURNAL_FORMAT_V1 => false,
        _ => return Err(ReadError::Format(header.format)),
    };
    let mut r = Reader {
        file: bytes,
        canonical,
        found: Default::default(),
    };
    r.spans(first, &scan, 0, None, Some(&header.apm));
    let mut base = first.len() + 1;
    let mut nodes = Vec::new();
    let mut torn = false;
    while let Some(line) = lines.next() {
        let at = base;
        base += line.len() + 1;
        if line.is_empty() {
            continue;
        }
        let last = lines.peek().is_none();
        let scan = match knox_types::json::scan(line, &written::node_part) {
            Ok(s) => s,
            // Only the very last line may be torn: it was never terminated by `\n`.
            Err(_) if last => {
                torn = true;
                continue;
            }
            Err(mut e) => {
                e.offset += at;
                (e.line, e.column) = knox_types::json::line_column(bytes, e.offset);
                return Err(ReadError::Syntax(e));
            }
        };
        match knox_types::json::from_scanned::<Node>(line, &scan) {
            Ok(n) => {
                r.spans(line, &scan, at, Some(nodes.len() as u64), None);
                nodes.push(n);
            }
            Err(_) if last => torn = true,
            Err(e) => return Err(ReadError::Json(e)),
        }
    }
    let format = if canonical {
        knox_types::bundle::BUNDLE_FORMAT
    } else {
        knox_types::bundle::BUNDLE_FORMAT_V1
    };
    let bundle = Bundle {
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
        manifest: None,
        contract: header.contract,
        as_written: Some(r.found),
    };
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
    let mut report = crate::build_report(s, &bundle, platform, hw, findings, false);
    if torn {
        report.warnings.push(
            "the journal's last line was torn (the run died while writing it) and was ignored"
                .into(),
        );
    }
    Ok(report)
}
