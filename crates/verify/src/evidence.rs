//! One file of evidence — a bundle or a journal — read from its bytes and verified:
//! the report, the signed structure root when complete, and the counts the file itself
//! claims (shown, marked unverified, when the chain is broken).

use crate::manifests::TrustedManifests;
use knox_types::aeg::NodeKind;
use knox_types::bundle::Bundle;
use knox_types::digest::Digest;

use crate::{Options, Outcome, ReadError, Report};

/// What was read and what verifying it said.
#[derive(Debug)]
pub struct Evidence {
    /// The verifier's report.
    pub report: Report,
    /// The structure root the bundle's summary signs, when the bundle verified complete.
    pub structure_root: Option<Digest>,
    /// Counts taken from the file as read (a bundle; `None` for a journal).
    pub as_read: Option<AsRead>,
}

/// Counts of a bundle as read, before and whatever verification says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsRead {
    /// Nodes.
    pub nodes: usize,
    /// Tool-call nodes.
    pub tool_calls: usize,
    /// Blocked nodes.
    pub blocked: usize,
}

impl AsRead {
    /// The counts of `b`.
    pub fn of(b: &Bundle) -> Self {
        let count = |k: NodeKind| b.nodes.iter().filter(|n| n.kind == k).count();
        Self {
            nodes: b.nodes.len(),
            tool_calls: count(NodeKind::ToolCall),
            blocked: count(NodeKind::Blocked),
        }
    }
}

/// Verifies a bundle or a journal from its bytes; an error when they are neither.
pub fn verify_evidence<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifest: &M,
    opts: Options<'_>,
) -> Result<Evidence, ReadError> {
    verify_evidence_in(bytes, &knox_types::compact::no_parts, manifest, opts)
}

/// [`verify_evidence`], a compact bundle's shared parts read from `parts`
/// ([`crate::parse_bundle_in`]).
pub fn verify_evidence_in<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    parts: &dyn Fn(&knox_types::digest::Digest) -> Option<Vec<u8>>,
    manifest: &M,
    opts: Options<'_>,
) -> Result<Evidence, ReadError> {
    if crate::journal::is_journal(bytes) {
        let report = crate::journal::verify_journal(bytes, manifest, opts)?;
        return Ok(Evidence {
            report,
            structure_root: None,
            as_read: None,
        });
    }
    if crate::announcement::is_announcement(bytes) {
        let report = crate::announcement::verify_announcement(bytes, opts)?;
        return Ok(Evidence {
            report,
            structure_root: None,
            as_read: None,
        });
    }
    let bundle = crate::parse_bundle_in(bytes, parts)?;
    Ok(of_bundle(&bundle, manifest, opts))
}

/// Verifies a parsed bundle.
pub fn of_bundle<M: TrustedManifests + ?Sized>(
    bundle: &Bundle,
    manifest: &M,
    opts: Options<'_>,
) -> Evidence {
    let report = crate::verify_bundle(bundle, manifest, opts);
    Evidence {
        structure_root: (report.outcome == Outcome::Complete)
            .then_some(bundle.summary.structure_root),
        as_read: Some(AsRead::of(bundle)),
        report,
    }
}

/// [`verify_evidence`], the report only.
pub fn verify_bytes<M: TrustedManifests + ?Sized>(
    bytes: &[u8],
    manifest: &M,
    opts: Options<'_>,
) -> Result<Report, ReadError> {
    verify_evidence(bytes, manifest, opts).map(|e| e.report)
}
