//! Verifying the on-disk journal of a run that did not finish: an integrity-checked
//! prefix at best.

use knox_policy::ToolkitManifest;
use knox_types::aeg::Node;
use knox_types::apm::Apm;
use knox_types::bundle::MAX_BUNDLE_BYTES;
use knox_types::bundle::{
    ApmAttestation, Bundle, Counts, ModelInfo, PlatformEvidence, PublicKey, Summary,
};
use serde::Deserialize;
use serde_json::Value;

use crate::{Options, ReadError, Report, Steps};

/// Format of a journal's header line.
pub const JOURNAL_FORMAT: &str = "knox-journal/v1";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    run_id: String,
    prompt: Option<Value>,
    apm: Apm,
    apm_attestation: ApmAttestation,
    key: PublicKey,
    platform: PlatformEvidence,
    models: Vec<ModelInfo>,
}

/// Whether `bytes` look like a journal (its first line declares the journal format).
pub fn is_journal(bytes: &[u8]) -> bool {
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    serde_json::from_slice::<Value>(first)
        .ok()
        .and_then(|v| {
            v.get("format")
                .and_then(Value::as_str)
                .map(|f| f == JOURNAL_FORMAT)
        })
        .unwrap_or(false)
}

/// Verifies a journal: the same steps as a bundle, but there is no signed summary, so
/// the best outcome is `prefix`. A torn last line (the process died mid-write) is
/// ignored and reported.
pub fn verify_journal(
    bytes: &[u8],
    manifest: &ToolkitManifest,
    opts: Options<'_>,
) -> Result<Report, ReadError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    let header: Header = serde_json::from_slice(lines.next().unwrap_or_default())?;
    if header.format != JOURNAL_FORMAT {
        return Err(ReadError::Format(header.format));
    }
    let mut nodes = Vec::new();
    let mut torn = false;
    while let Some(line) = lines.next() {
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Node>(line) {
            Ok(n) => nodes.push(n),
            // Only the very last line may be torn: it was never terminated by `\n`.
            Err(_) if lines.peek().is_none() => torn = true,
            Err(e) => return Err(ReadError::Json(e)),
        }
    }
    let bundle = Bundle {
        format: knox_types::bundle::BUNDLE_FORMAT.into(),
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
    };
    let mut s = Steps::default();
    let (platform, hw) = crate::evidence_step(&mut s, &bundle, opts);
    let apm_hash = crate::apm_step(
        &mut s,
        &bundle.apm,
        &bundle.apm_attestation,
        &bundle.key,
        manifest,
    );
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
