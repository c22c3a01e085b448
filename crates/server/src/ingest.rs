//! Verification on ingest: every submission is verified under the regulator's policy
//! (`knox_verify`), and what the index needs — outcome, counts, blocked actions,
//! regulation decisions, models, platform facts — is taken from the report and, for a
//! bundle, from its check nodes.

use knox_hw::policy::RegulatorPolicy;
use knox_policy::ToolkitManifest;
use knox_regulation::Norms;
use knox_types::digest::Digest;
use knox_types::payload::CheckDetail;
use knox_verify::{Options, Report};

/// The regulator's verification settings.
#[derive(Debug)]
pub struct Verifier {
    /// The toolkit manifest APMs are checked against.
    pub manifest: ToolkitManifest,
    /// The regulator's hardware/model policy.
    pub policy: Option<RegulatorPolicy>,
    /// The regulator's regulation policy set (default: the embedded one).
    pub norms: Option<Norms>,
    /// INSECURE: accept simulated platform evidence.
    pub allow_simulated: bool,
}

/// One regulation decision of a check node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The check node.
    pub node: u64,
    /// Regulation.
    pub regulation: String,
    /// Recipient.
    pub recipient: String,
    /// Verdict.
    pub verdict: String,
    /// Deciding policies.
    pub policies: Vec<String>,
    /// Provisions.
    pub provisions: Vec<String>,
}

/// A submission read and verified.
#[derive(Debug)]
pub struct Checked {
    /// `bundle`, `journal` or `announcement` (a key announcement, evidence format
    /// §6a: an in-TEE key's link 0, no run).
    pub kind: &'static str,
    /// The verifier's report.
    pub report: Report,
    /// The signed structure root, when complete.
    pub structure_root: Option<Digest>,
    /// Regulation decisions recorded in check nodes.
    pub decisions: Vec<Decision>,
    /// Key id of the run's signing key (the bundle's, the journal header's or the key
    /// announced), when it can be read.
    pub run_key: Option<String>,
}

/// Key id (hex) of a run's signing key.
pub fn run_key(key: &knox_types::bundle::PublicKey) -> String {
    knox_attest::key::key_id(&key.public_key.0).to_hex()
}

/// Just the key a journal's header line, or an announcement, names.
#[derive(serde::Deserialize)]
struct HeaderKey {
    key: knox_types::bundle::PublicKey,
}

/// The run key a journal's first line names, when it names one.
fn journal_key(bytes: &[u8]) -> Option<String> {
    let first = bytes.split(|&b| b == b'\n').next()?;
    let h: HeaderKey = serde_json::from_slice(first).ok()?;
    Some(run_key(&h.key))
}

/// The key an announcement names, when it can be read (also from an announcement
/// that does not verify: the store files it under the key it claims).
fn announced_key(bytes: &[u8]) -> Option<String> {
    let a: HeaderKey = serde_json::from_slice(bytes).ok()?;
    Some(run_key(&a.key))
}

/// Why a submission was not stored.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// Neither a bundle nor a journal.
    #[error("not evidence: {0}")]
    Unreadable(#[from] knox_verify::ReadError),
}

impl Verifier {
    /// The embedded toolkit manifest and regulation set, no hardware policy.
    pub fn embedded(allow_simulated: bool) -> Result<Self, knox_policy::ManifestError> {
        Ok(Self {
            manifest: knox_policy::shipped::current()?,
            policy: None,
            norms: None,
            allow_simulated,
        })
    }

    fn options(&self) -> Options<'_> {
        Options {
            dangerous_allow_simulated: self.allow_simulated,
            policy: self.policy.as_ref(),
            norms: self.norms.as_ref(),
        }
    }

    /// Verifies a live run's journal as the store rebuilds it, from its node lines
    /// alone (checkpoint lines are not kept: their cadence is not checked).
    pub fn check_streamed(&self, journal: &[u8]) -> Result<knox_verify::Report, IngestError> {
        Ok(knox_verify::journal::verify_streamed_nodes(
            journal,
            &self.manifest,
            self.options(),
        )?)
    }

    /// Reads and verifies a submission. Never panics: anything that is not evidence is
    /// an error, anything that is evidence has a report.
    pub fn check(&self, bytes: &[u8]) -> Result<Checked, IngestError> {
        if knox_verify::announcement::is_announcement(bytes) {
            let report = knox_verify::announcement::verify_announcement(bytes, self.options())?;
            return Ok(Checked {
                kind: "announcement",
                report,
                structure_root: None,
                decisions: Vec::new(),
                run_key: announced_key(bytes),
            });
        }
        if knox_verify::journal::is_journal(bytes) {
            let ev = knox_verify::evidence::verify_evidence(bytes, &self.manifest, self.options())?;
            return Ok(Checked {
                kind: "journal",
                report: ev.report,
                structure_root: None,
                decisions: Vec::new(),
                run_key: journal_key(bytes),
            });
        }
        let bundle = knox_verify::parse_bundle(bytes)?;
        let ev = knox_verify::evidence::of_bundle(&bundle, &self.manifest, self.options());
        let mut decisions = Vec::new();
        for n in &bundle.nodes {
            let Some(check) = n.payload.check() else {
                continue;
            };
            if let CheckDetail::Regulation { decisions: ds, .. } = &check.detail {
                for d in ds {
                    decisions.push(Decision {
                        node: n.seq,
                        regulation: d.regulation.clone(),
                        recipient: d.recipient.clone(),
                        verdict: d.verdict.clone(),
                        policies: d.policies.clone(),
                        provisions: d.provisions.clone(),
                    });
                }
            }
        }
        Ok(Checked {
            kind: "bundle",
            report: ev.report,
            structure_root: ev.structure_root,
            decisions,
            run_key: Some(run_key(&bundle.key)),
        })
    }
}
