#![doc = include_str!("../README.md")]

pub mod announcement;
pub mod ear;
pub mod evidence;
pub mod fuzz;
pub mod journal;
pub mod manifests;
pub mod proof;
pub mod receipt;
pub mod replay;
pub mod report;
mod written;

use knox_attest::platform::{self, AppraisalOptions};
use knox_policy::ToolkitManifest;
use knox_types::bundle::{
    BUNDLE_FORMAT, BUNDLE_FORMAT_V1, BUNDLE_FORMAT_V2, BUNDLE_FORMAT_V3, BUNDLE_FORMAT_V4, Bundle,
    KeyChain, MAX_BUNDLE_BYTES, PlatformMode,
};
use knox_types::dsse::{APM_PREDICATE, SUMMARY_PREDICATE};
use knox_types::merkle;

pub use report::{ChainLink, Outcome, Report, Step};

use crate::manifests::{Chosen, TrustedManifests};
use crate::replay::{Context, Fail, RegulationReplay};

/// What the verifier accepts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options<'a> {
    /// Accept simulated platform evidence. Insecure: nothing vouches for the key.
    pub dangerous_allow_simulated: bool,
    /// The regulator's policy: accepted hardware, measurements, model weights.
    pub policy: Option<&'a knox_hw::policy::RegulatorPolicy>,
    /// The regulation policy set to recompute regulation verdicts with; `None` uses the
    /// set embedded in this build. A bundle whose APM names another set is refused.
    pub norms: Option<&'a knox_regulation::Norms>,
}

impl Options<'_> {
    /// Accept simulated evidence (insecure; for development and self-checks).
    pub const DANGEROUS_SIMULATED: Options<'static> = Options {
        dangerous_allow_simulated: true,
        policy: None,
        norms: None,
    };
}

/// Evidence that could not even be read as a bundle or journal.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Larger than [`MAX_BUNDLE_BYTES`].
    #[error("evidence of {0} bytes exceeds the {MAX_BUNDLE_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not JSON of the bundle's shape.
    #[error("not a knox evidence bundle: {0}")]
    Json(#[from] serde_json::Error),
    /// Not JSON at all (syntax, nesting), with the position.
    #[error("not a knox evidence bundle: {0}")]
    Syntax(#[from] knox_types::json::JsonError),
    /// A format this verifier does not read.
    #[error("unsupported format `{0}`")]
    Format(String),
    /// A compact file (`knox-compact`) that does not hold a bundle.
    #[error(transparent)]
    Compact(#[from] knox_types::compact::CompactError),
}

/// Parses a bundle from bytes (size cap, strict JSON, strict fields, format check).
/// What the bytes as written say — a repeated key, a part not canonical, the hashes of
/// the APM and prompt as written — is kept in [`Bundle::as_written`] and reported by
/// [`verify_bundle`] as tampering, naming where.
///
/// A compact file (`knox-compact/v2` or `/v1`, `docs/evidence-format.md` §9) is read as the
/// bundle it expands to.
pub fn parse_bundle(bytes: &[u8]) -> Result<Bundle, ReadError> {
    parse_bundle_in(bytes, &knox_types::compact::no_parts)
}

/// [`parse_bundle`] for a bundle of a store (§9.5): the shared parts a compact file refers
/// to are read from `parts` by digest (for files on disk, from
/// [`knox_types::compact::part_file_name`] in their folder: `knox verify` does); each is
/// checked to be the part its digest names, and then, as every member, verified as part
/// of the bundle it expands to.
pub fn parse_bundle_in(
    bytes: &[u8],
    parts: &dyn Fn(&knox_types::digest::Digest) -> Option<Vec<u8>>,
) -> Result<Bundle, ReadError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    if knox_types::compact::is_compact(bytes) {
        let shared = std::cell::Cell::new(false);
        let read = |d: &knox_types::digest::Digest| {
            shared.set(true);
            parts(d)
        };
        let mut b = parse_bundle(&knox_types::compact::expand_to_json_in(bytes, &read)?)?;
        if let Some(w) = &mut b.as_written {
            w.compact = true;
            w.shared_parts = shared.get();
        }
        return Ok(b);
    }
    let scan = knox_types::json::scan(bytes, &written::bundle_part)?;
    let mut b: Bundle = knox_types::json::from_scanned(bytes, &scan)?;
    let canonical = match b.format.as_str() {
        BUNDLE_FORMAT | BUNDLE_FORMAT_V4 | BUNDLE_FORMAT_V3 | BUNDLE_FORMAT_V2 => true,
        BUNDLE_FORMAT_V1 => false,
        _ => return Err(ReadError::Format(b.format)),
    };
    let mut r = written::Reader {
        file: bytes,
        canonical,
        found: Default::default(),
    };
    r.spans(
        bytes,
        &scan,
        0,
        None,
        Some(&b.apm),
        written::Typed::Nodes(&b.nodes),
    );
    b.as_written = Some(r.found);
    Ok(b)
}

/// Accumulates steps and the first failure.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    steps: Vec<Step>,
    tampered: Option<Fail>,
    refused: Option<String>,
}

impl Steps {
    pub(crate) fn pass(&mut self, name: &'static str, detail: impl Into<String>) {
        self.steps.push(Step {
            name,
            result: "pass",
            detail: detail.into(),
        });
    }

    pub(crate) fn fail(&mut self, name: &'static str, f: Fail) {
        let detail = f.to_string();
        self.steps.push(Step {
            name,
            result: "fail",
            detail,
        });
        self.tampered.get_or_insert(f);
    }

    pub(crate) fn refuse(&mut self, name: &'static str, why: String) {
        self.steps.push(Step {
            name,
            result: "refused",
            detail: why.clone(),
        });
        self.refused.get_or_insert(why);
    }

    pub(crate) fn skip(&mut self, name: &'static str, why: impl Into<String>) {
        self.steps.push(Step {
            name,
            result: "skipped",
            detail: why.into(),
        });
    }

    pub(crate) fn outcome(&self, finished: bool) -> Outcome {
        match (&self.tampered, &self.refused) {
            (Some(f), _) => Outcome::Tampered {
                node: f.node,
                reason: f.reason.clone(),
            },
            (None, Some(reason)) => Outcome::Refused {
                reason: reason.clone(),
            },
            (None, None) if finished => Outcome::Complete,
            (None, None) => Outcome::Prefix,
        }
    }
}

/// Verifies a bundle against the toolkit manifests the verifier trusts (a single
/// [`ToolkitManifest`] is that one plus the ones this build knows; see
/// [`manifests`]), or the one the bundle embeds when its hash is the APM's. Never
/// panics; every finding is in the report.
pub fn verify_bundle<M: TrustedManifests + ?Sized>(
    b: &Bundle,
    manifests: &M,
    opts: Options<'_>,
) -> Report {
    let mut s = Steps::default();
    encoding_step(&mut s, b);
    let (platform, hardware_backed) = evidence_step(&mut s, b, opts);
    let chosen = manifests::choose(b, manifests);
    let apm_hash = apm_step(&mut s, b, &chosen);
    let manifest = chosen.as_ref().ok().map(Chosen::manifest);
    prompt_step(&mut s, b);
    models_step(&mut s, b, opts);
    sandbox_step(&mut s, b, opts);
    refresh_step(&mut s, b, opts);
    // Summary and its signature.
    let signed = match summary_step(b, apm_hash) {
        Ok(()) => {
            s.pass(
                "signature",
                "summary signed by the in-TEE key (DSSE, in-toto Statement v1)",
            );
            true
        }
        Err(why) => {
            s.fail("signature", Fail::unplaced(why));
            false
        }
    };
    let link = key_chain_step(&mut s, b, signed);
    let findings = graph_steps(&mut s, b, manifest, apm_hash, true, opts.norms);
    let mut report = build_report(s, b, platform, hardware_backed, findings, true);
    report.key_chain = link;
    if let Ok(Chosen::Embedded(m)) = &chosen {
        report.warnings.push(format!(
            "the toolkit manifest {} was taken from the bundle (its hash is the APM's), not from the verifier's trusted set: review its tools and needs",
            m.hash()
        ));
    }
    report
}

/// Whether bundles of `format` carry their run's place in its key's chain of runs
/// (formats v3 and later).
fn chained(format: &str) -> bool {
    matches!(format, BUNDLE_FORMAT | BUNDLE_FORMAT_V4 | BUNDLE_FORMAT_V3)
}

/// The run's place in its key's chain of runs (format v3): present, and for the key's
/// first run, starting at the key's platform evidence. Whether the runs before it were
/// handed over is for a reader of many bundles to see ([`ChainLink`]); only a signed
/// link is reported.
fn key_chain_step(s: &mut Steps, b: &Bundle, signed: bool) -> Option<report::ChainLink> {
    let Some(chain) = b.summary.key_chain else {
        if chained(&b.format) {
            s.fail(
                "key chain",
                Fail::unplaced(
                    "the signed summary has no key chain: formats v3 and later number every run of its key",
                ),
            );
        } else {
            s.skip(
                "key chain",
                format!("format {}: written before per-key chains of runs", b.format),
            );
        }
        return None;
    };
    if !chained(&b.format) {
        s.fail(
            "key chain",
            Fail::unplaced(format!(
                "a key chain in a bundle of format {}, which has none",
                b.format
            )),
        );
        return None;
    }
    if chain.seq == 0 {
        let platform = match b.as_written.as_ref().and_then(|w| w.platform_hash) {
            Some(h) => Ok(h),
            None => knox_types::Digest::of_json(knox_types::digest::tag::PLATFORM, &b.platform),
        };
        match platform {
            Ok(h) if KeyChain::start(&h) == chain.prev => {}
            Ok(_) => {
                s.fail(
                    "key chain",
                    Fail::unplaced(
                        "run 0 of the key's chain does not start at the key's platform evidence",
                    ),
                );
                return None;
            }
            Err(e) => {
                s.fail(
                    "key chain",
                    Fail::unplaced(format!("platform evidence: {e}")),
                );
                return None;
            }
        }
    }
    if !signed {
        return None;
    }
    let seal = match b.summary.seal_digest() {
        Ok(d) => d,
        Err(e) => {
            s.fail("key chain", Fail::unplaced(e.to_string()));
            return None;
        }
    };
    let detail = if chain.seq == 0 {
        "run 0 of its key's chain, which starts at the key's platform evidence".to_owned()
    } else {
        format!(
            "run {} of its key's chain; the run before it sealed as {}",
            chain.seq, chain.prev
        )
    };
    s.pass("key chain", detail);
    Some(report::ChainLink {
        key: knox_attest::key::key_id(&b.key.public_key.0).to_hex(),
        seq: chain.seq,
        prev: chain.prev,
        seal,
    })
}

/// A refresh report, when present, must bind the signed chain head to the same key.
fn refresh_step(s: &mut Steps, b: &Bundle, opts: Options<'_>) {
    let Some(refresh) = &b.refresh else {
        if b.summary.refresh.is_some() {
            s.fail(
                "refresh",
                Fail::unplaced(
                    "the signed summary names a refresh report the bundle does not carry",
                ),
            );
        }
        return;
    };
    if let Some(why) = refresh_unbound(b, refresh) {
        s.fail("refresh", Fail::unplaced(why));
        return;
    }
    let o = AppraisalOptions {
        dangerous_allow_simulated: opts.dangerous_allow_simulated,
        policy: opts.policy,
        chain_head: Some(b.summary.chain_head.0),
    };
    match platform::appraise(refresh, &b.key, o) {
        Ok(a) => s.pass(
            "refresh",
            format!(
                "{} refresh report binds the chain head to the signing key",
                a.mode
            ),
        ),
        Err(e) if e.is_refusal() => s.refuse("refresh", e.to_string()),
        Err(e) => s.fail("refresh", Fail::unplaced(format!("refresh report: {e}"))),
    }
}

/// Whether the refresh report is the one the signed summary names (required from
/// format v2 for every mode: Knox always names the report it adds, and a report no
/// signature names — simulated included — is bytes nothing binds).
fn refresh_unbound(b: &Bundle, refresh: &knox_types::bundle::PlatformEvidence) -> Option<String> {
    let Some(signed) = b.summary.refresh else {
        return (b.format != BUNDLE_FORMAT_V1).then(|| {
            format!(
                "the signed summary does not bind the `{}` refresh report: formats v2 and later require its hash",
                refresh.mode
            )
        });
    };
    let written = b.as_written.as_ref().and_then(|w| w.refresh_hash);
    let actual = match written {
        Some(h) => h,
        None => match knox_types::Digest::of_json(knox_types::digest::tag::REFRESH, refresh) {
            Ok(h) => h,
            Err(e) => return Some(e.to_string()),
        },
    };
    (signed != actual).then(|| {
        format!(
            "the refresh report (hash {actual}) is not the one the signed summary binds ({signed})"
        )
    })
}

/// Every model plays a role this verifier knows: a bundle or journal naming another
/// role is refused, naming it. Under an APM that makes remote models recipients
/// (`guards.closed.models`), every remote model the bundle lists must be one the APM
/// names (`guards.remote`): its operator's share of the run was decided against it.
/// Adds a step only when one of these fails.
pub(crate) fn roles_step(s: &mut Steps, b: &Bundle) -> bool {
    if let Some(m) = b.models.iter().find(|m| !m.role.is_known()) {
        s.refuse(
            "models",
            format!(
                "model `{}` has the role `{}`, which this verifier does not know (planner, executor or judge)",
                m.name, m.role
            ),
        );
        return false;
    }
    let guards = &b.apm.guards;
    let unnamed = b
        .models
        .iter()
        .filter_map(knox_types::apm::RemoteModel::of)
        .find(|r| guards.closed.models && !guards.remote.contains(r));
    if let Some(r) = unnamed {
        s.refuse(
            "models",
            format!(
                "{} model `{}` is remote (its operator at {} receives the run's data), and the APM does not name it",
                r.role, r.model, r.endpoint
            ),
        );
        return false;
    }
    true
}

/// With a regulator policy, every model that has weights must have accepted weights.
fn models_step(s: &mut Steps, b: &Bundle, opts: Options<'_>) {
    if !roles_step(s, b) {
        return;
    }
    let Some(policy) = opts.policy else { return };
    for m in &b.models {
        let Some(h) = m.weights_hash else { continue };
        if let Err(v) = policy.check_weights_hash(&h.to_hex()) {
            s.refuse("models", format!("{} model `{}`: {v}", m.role, m.name));
            return;
        }
    }
    s.pass(
        "models",
        "every model's weights hash is accepted by the policy",
    );
}

/// With a regulator policy that has a `[sandbox]` section: every confined tool call
/// ran on a Landlock ABI at least the policy's minimum (as the tool output's
/// `confinement.layers.landlock_abi` records it), and, when the policy requires it,
/// every tool output came from a confined tool.
fn sandbox_step(s: &mut Steps, b: &Bundle, opts: Options<'_>) {
    let Some(rules) = opts.policy.and_then(|p| p.sandbox()) else {
        return;
    };
    let (mut confined, mut unconfined) = (0_usize, 0_usize);
    for n in b
        .nodes
        .iter()
        .filter(|n| n.kind == knox_types::aeg::NodeKind::ToolOutput)
    {
        let Some(confinement) = n
            .payload
            .tool_output()
            .and_then(|o| o.confinement.as_ref())
            .filter(|c| !c.is_null())
        else {
            unconfined += 1;
            if rules.require_confined_tools {
                s.refuse(
                    "sandbox",
                    format!(
                        "node {}: the tool ran unconfined, and the policy requires confined tools",
                        n.seq
                    ),
                );
                return;
            }
            continue;
        };
        let abi = confinement
            .pointer("/layers/landlock_abi")
            .and_then(serde_json::Value::as_u64);
        match abi {
            Some(a) if a >= u64::from(rules.min_landlock_abi) => confined += 1,
            Some(a) => {
                s.refuse(
                    "sandbox",
                    format!(
                        "node {}: the tool ran on Landlock ABI {a}; the policy requires at least {}",
                        n.seq, rules.min_landlock_abi
                    ),
                );
                return;
            }
            None => {
                s.refuse(
                    "sandbox",
                    format!(
                        "node {}: the tool's confinement does not record its Landlock ABI; the policy requires at least {}",
                        n.seq, rules.min_landlock_abi
                    ),
                );
                return;
            }
        }
    }
    s.pass(
        "sandbox",
        format!(
            "{confined} confined tool calls on Landlock ABI >= {}; {unconfined} unconfined",
            rules.min_landlock_abi
        ),
    );
}

/// The envelope carries a valid signature by the bundle's key over the summary in
/// clear, which names this run and this APM.
fn summary_step(b: &Bundle, apm_hash: Option<knox_types::Digest>) -> Result<(), String> {
    let signed = knox_attest::dsse::verify(&b.envelope, &b.key, SUMMARY_PREDICATE)
        .map_err(|e| format!("summary envelope: {e}"))?;
    let clear = b.summary.to_statement().map_err(|e| e.to_string())?;
    if signed != clear {
        return Err("the summary in clear differs from the signed one".into());
    }
    if Some(b.summary.apm_hash) != apm_hash {
        return Err("the signed summary names another APM".into());
    }
    if b.summary.run_id != b.run_id || b.summary.format != b.format {
        return Err("the signed summary names another run or format".into());
    }
    Ok(())
}

/// Step 1: the platform evidence binds the key and is acceptable.
pub(crate) fn evidence_step(s: &mut Steps, b: &Bundle, opts: Options<'_>) -> (PlatformMode, bool) {
    evidence_of(s, &b.platform, &b.key, opts)
}

/// [`evidence_step`] of `evidence` binding `key`.
pub(crate) fn evidence_of(
    s: &mut Steps,
    evidence: &knox_types::bundle::PlatformEvidence,
    key: &knox_types::bundle::PublicKey,
    opts: Options<'_>,
) -> (PlatformMode, bool) {
    let appraisal = platform::appraise(
        evidence,
        key,
        AppraisalOptions {
            dangerous_allow_simulated: opts.dangerous_allow_simulated,
            policy: opts.policy,
            chain_head: None,
        },
    );
    match appraisal {
        Ok(a) => {
            let note = if a.hardware_backed {
                "hardware-backed"
            } else {
                "NOT hardware-backed (accepted: --allow-simulated)"
            };
            s.pass(
                "evidence",
                format!(
                    "{} evidence binds the signing key; {note}; {}",
                    a.mode, a.detail
                ),
            );
            (a.mode, a.hardware_backed)
        }
        Err(e) if e.is_refusal() => {
            s.refuse("evidence", e.to_string());
            (evidence.mode.clone(), false)
        }
        Err(e) => {
            s.fail("evidence", Fail::unplaced(e.to_string()));
            (evidence.mode.clone(), false)
        }
    }
}

/// The bytes as written: strict JSON, and (version 2) every part canonical.
pub(crate) fn encoding_step(s: &mut Steps, b: &Bundle) {
    let Some(w) = &b.as_written else { return };
    // A compact file is read as the JSON it expands to (§9).
    let container = match (w.compact, w.shared_parts) {
        (true, true) => {
            "a knox-compact file of a store, expanded with the shared parts it names to its JSON: "
        }
        (true, false) => "a knox-compact file, expanded to its JSON: ",
        _ => "",
    };
    match w.faults.first() {
        None if b.format != BUNDLE_FORMAT_V1 => s.pass(
            "encoding",
            format!("{container}strict JSON (no repeated key); the APM, prompt, platform evidence and every payload canonical as written, hashed as written"),
        ),
        None => s.pass(
            "encoding",
            format!("{container}strict JSON (no repeated key); format v1: parts canonicalised before hashing, the APM hashed as written"),
        ),
        Some(f) => {
            let mut f = Fail::from(f.clone());
            if w.faults.len() > 1 {
                f.reason = format!(
                    "{} (and {} more encoding faults)",
                    f.reason,
                    w.faults.len() - 1
                );
            }
            s.fail("encoding", f);
        }
    }
}

/// The prompt in clear, when disclosed, is the one the APM attests.
pub(crate) fn prompt_step(s: &mut Steps, b: &Bundle) {
    let Some(prompt) = b.prompt.as_ref() else {
        s.skip("prompt", "not disclosed: only its hash, in the APM");
        return;
    };
    let written = b.as_written.as_ref().and_then(|w| w.prompt_hash);
    let hash = match written {
        Some(h) => Ok(h),
        None => knox_types::Digest::of_json(knox_types::digest::tag::PROMPT, prompt),
    };
    match hash {
        Ok(h) if h == b.apm.inputs.prompt => {
            s.pass("prompt", "the prompt in clear is the one the APM attests")
        }
        Ok(h) => s.fail(
            "prompt",
            Fail::unplaced(format!(
                "the prompt in clear (hash {h}) is not the one the APM attests (inputs.prompt {})",
                b.apm.inputs.prompt
            )),
        ),
        Err(e) => s.fail(
            "prompt",
            Fail::unplaced(format!("the prompt in clear: {e}")),
        ),
    }
}

/// Whether the platform evidence is the one the APM attestation signs: `None` when it
/// is, or when nothing requires it to be (format 1; simulated evidence, which is fixed).
fn platform_unbound(b: &Bundle) -> Option<String> {
    let signed = b.apm_attestation.statement.platform?;
    let written = b.as_written.as_ref().and_then(|w| w.platform_hash);
    let actual = match written {
        Some(h) => h,
        None => match knox_types::Digest::of_json(knox_types::digest::tag::PLATFORM, &b.platform) {
            Ok(h) => h,
            Err(e) => return Some(e.to_string()),
        },
    };
    (signed != actual).then(|| {
        format!(
            "the platform evidence (hash {actual}) is not the one the APM attestation binds ({signed})"
        )
    })
}

/// Version 2 binds hardware platform evidence in the APM attestation.
fn platform_required(b: &Bundle) -> Option<String> {
    (b.apm_attestation.statement.platform.is_none()
        && b.format != BUNDLE_FORMAT_V1
        && b.platform.mode != PlatformMode::Simulated)
        .then(|| {
            format!(
                "the APM attestation does not bind the `{}` platform evidence: formats v2 and later require its hash for every mode but simulated (whose evidence is fixed)",
                b.platform.mode
            )
        })
}

/// The APM attestation and the manifest it names; returns `H(APM)` when computable:
/// over the APM as written when the bundle was read from bytes.
pub(crate) fn apm_step(
    s: &mut Steps,
    b: &Bundle,
    chosen: &Result<Chosen<'_>, String>,
) -> Option<knox_types::Digest> {
    let (apm, att, key) = (&b.apm, &b.apm_attestation, &b.key);
    let written = b.as_written.as_ref().and_then(|w| w.apm_hash);
    let apm_hash = match written.map_or_else(|| apm.hash(), Ok) {
        Ok(h) => h,
        Err(e) => {
            s.fail("apm", Fail::unplaced(e.to_string()));
            return None;
        }
    };
    let signed = knox_attest::dsse::verify(&att.envelope, key, APM_PREDICATE)
        .map_err(|e| e.to_string())
        .and_then(|st| match att.statement.to_statement() {
            Ok(clear) if clear == st => Ok(()),
            Ok(_) => Err("the statement in clear differs from the signed one".to_string()),
            Err(e) => Err(e.to_string()),
        });
    if let Err(e) = signed {
        s.fail("apm", Fail::unplaced(format!("APM attestation: {e}")));
    } else if att.statement.apm_hash != apm_hash || att.statement.inputs != apm.inputs {
        s.fail(
            "apm",
            Fail::unplaced("the APM differs from the one its attestation binds"),
        );
    } else if let Some(why) = platform_unbound(b).or_else(|| platform_required(b)) {
        s.fail("apm", Fail::unplaced(why));
    } else if let Some(why) = manifests::embedded_unbound(b) {
        s.fail("apm", Fail::unplaced(why));
    } else if let Err(why) = chosen {
        s.refuse("apm", why.clone());
    } else {
        let platform = if b.apm_attestation.statement.platform.is_some() {
            " and to the platform evidence"
        } else {
            ""
        };
        let embedded = if matches!(chosen, Ok(Chosen::Embedded(_))) {
            "; toolkit manifest from the bundle"
        } else {
            ""
        };
        s.pass(
            "apm",
            format!("APM {apm_hash} attested and bound to its inputs{platform}{embedded}"),
        );
    }
    Some(apm_hash)
}

/// Steps 2–5 over the nodes: chain, proof of inference, policy consistency, topology.
pub(crate) fn graph_steps(
    s: &mut Steps,
    b: &Bundle,
    manifest: Option<&ToolkitManifest>,
    apm_hash: Option<knox_types::Digest>,
    finished: bool,
    norms: Option<&knox_regulation::Norms>,
) -> Option<replay::Findings> {
    let (head, leaves, counts) = match replay::chain(&b.nodes) {
        Ok(x) => x,
        Err(f) => {
            s.fail("chain", f);
            return None;
        }
    };
    // When the hashes recompute but the signed head does not match, a node was edited
    // and re-measured (or nodes were cut or appended): the replay usually names the
    // node, so its finding is reported first.
    let mut chain_failures: Vec<Fail> = Vec::new();
    if finished {
        if head != b.summary.chain_head {
            let last = b.nodes.last().map(|n| n.seq);
            chain_failures.push(Fail {
                node: last,
                reason:
                    "chain head differs from the signed one: nodes were edited, dropped or appended"
                        .into(),
            });
        } else if counts != b.summary.counts {
            chain_failures.push(Fail::unplaced("node counts differ from the signed summary"));
        }
    }
    let findings = policy_step(s, b, manifest, apm_hash, finished, norms);
    match chain_failures.pop() {
        Some(f) => s.fail("chain", f),
        None if finished => s.pass(
            "chain",
            format!(
                "{} measurements recomputed, chain head matches",
                b.nodes.len()
            ),
        ),
        None => s.pass(
            "chain",
            format!(
                "{} measurements recomputed (unsigned prefix)",
                b.nodes.len()
            ),
        ),
    }
    if finished {
        if merkle::root(&leaves) == b.summary.structure_root {
            s.pass("topology", "structure root matches");
        } else {
            s.fail(
                "topology",
                Fail::unplaced("structure root differs from the signed one"),
            );
        }
    }
    findings
}

/// The policy set embedded in this build, loaded once.
fn embedded_norms() -> Option<&'static knox_regulation::Norms> {
    static NORMS: std::sync::OnceLock<Option<knox_regulation::Norms>> = std::sync::OnceLock::new();
    NORMS
        .get_or_init(|| knox_regulation::Norms::embedded().ok())
        .as_ref()
}

/// Whether regulation verdicts can be recomputed: the APM's policy set must be the
/// verifier's (a mismatch refuses the bundle).
fn regulation_step<'n>(
    s: &mut Steps,
    spec: &knox_types::apm::RegulationSpec,
    norms: Option<&'n knox_regulation::Norms>,
) -> RegulationReplay<'n> {
    if spec.policy_hash.is_none() {
        return RegulationReplay::NotConfigured;
    }
    let norms: Option<&'n knox_regulation::Norms> = match norms {
        Some(n) => Some(n),
        None => embedded_norms(),
    };
    match knox_regulation::Regulator::new(spec, norms) {
        Ok(r) => {
            s.pass(
                "regulation",
                format!(
                    "policy set {} ({}) matches the APM: every regulation verdict recomputed",
                    norms.map(|n| n.hash().to_string()).unwrap_or_default(),
                    spec.regulations.join(", ")
                ),
            );
            RegulationReplay::Recompute(Box::new(r))
        }
        Err(e) => {
            s.refuse("regulation", e.to_string());
            RegulationReplay::Unavailable
        }
    }
}

/// The `contract` step: the signed capability contract the APM names
/// (`apm.inputs.contract`) must be embedded, verify under the authority key it names
/// and hash to that name; a contract the APM does not name must not be there. `Err`
/// when the evidence is tampered (the step says why); `Ok(None)` for a run without one.
fn contract_step(s: &mut Steps, b: &Bundle) -> Result<Option<knox_contract::Verified>, ()> {
    match (&b.apm.inputs.contract, &b.contract) {
        (None, None) => Ok(None),
        (None, Some(_)) => {
            s.fail(
                "contract",
                Fail::unplaced("the bundle embeds a capability contract the APM does not name"),
            );
            Err(())
        }
        (Some(h), None) => {
            s.fail(
                "contract",
                Fail::unplaced(format!(
                    "the APM names capability contract {h}, the bundle embeds none"
                )),
            );
            Err(())
        }
        (Some(h), Some(sc)) => match knox_contract::signed::verify(&sc.envelope, &sc.authority) {
            Err(e) => {
                s.fail(
                    "contract",
                    Fail::unplaced(format!("the embedded capability contract: {e}")),
                );
                Err(())
            }
            Ok(v) if v.hash != *h => {
                s.fail(
                    "contract",
                    Fail::unplaced(format!(
                        "the embedded capability contract is {}, the APM names {h}",
                        v.hash
                    )),
                );
                Err(())
            }
            Ok(v)
                if b.apm_attestation
                    .statement
                    .contract_authority
                    .is_some_and(|a| a != knox_attest::key::key_id(&v.authority.public_key.0)) =>
            {
                s.fail(
                    "contract",
                    Fail::unplaced(format!(
                        "the embedded capability contract is signed by authority {}, but the APM attestation binds authority {}: it was signed again by another key",
                        knox_attest::key::key_id(&v.authority.public_key.0),
                        b.apm_attestation
                            .statement
                            .contract_authority
                            .map_or_else(String::new, |a| a.to_string())
                    )),
                );
                Err(())
            }
            Ok(v) => {
                s.pass(
                    "contract",
                    format!(
                        "capability contract `{}` {} signed by authority {}; every contract decision recomputed",
                        v.contract.id,
                        v.hash,
                        knox_attest::key::key_id(&v.authority.public_key.0)
                    ),
                );
                Ok(Some(v))
            }
        },
    }
}

/// Steps 3–5: proof of inference, policy consistency and topology by replay.
fn policy_step(
    s: &mut Steps,
    b: &Bundle,
    manifest: Option<&ToolkitManifest>,
    apm_hash: Option<knox_types::Digest>,
    finished: bool,
    norms: Option<&knox_regulation::Norms>,
) -> Option<replay::Findings> {
    let Some(apm_hash) = apm_hash else {
        s.skip("policy", "no APM hash");
        return None;
    };
    let Some(manifest) = manifest.filter(|m| m.hash() == b.apm.inputs.manifest) else {
        s.skip("policy", "manifest unavailable: decisions not recomputed");
        return None;
    };
    let regulation = regulation_step(s, &b.apm.guards.regulation, norms);
    let contract = match contract_step(s, b) {
        Ok(c) => c,
        Err(()) => return None,
    };
    let cx = Context {
        apm: &b.apm,
        apm_hash,
        manifest,
        run_id: &b.run_id,
        models: &b.models,
        key: &b.key,
        regulation: &regulation,
        contract: contract.as_ref(),
        rules: knox_types::bundle::MonitorRules::of_bundle_format(&b.format),
    };
    match replay::replay(&cx, &b.nodes, finished) {
        Ok(f) => {
            s.pass(
                "inference",
                format!(
                    "{} proof_of_inference node(s) match the declared models",
                    b.models.len()
                ),
            );
            if finished && !f.unfinished.is_empty() {
                s.fail(
                    "policy",
                    Fail {
                        node: f.unfinished.first().copied(),
                        reason: "allowed call without its output in a finished run".into(),
                    },
                );
            } else {
                s.pass("policy", "every guard decision recomputed from the APM and matches; topology as dispatched");
            }
            Some(f)
        }
        Err(f) => {
            s.fail("policy", f);
            None
        }
    }
}

pub(crate) fn build_report(
    s: Steps,
    b: &Bundle,
    platform: PlatformMode,
    hardware_backed: bool,
    f: Option<replay::Findings>,
    finished: bool,
) -> Report {
    let f = f.unwrap_or_default();
    let count = |k| b.nodes.iter().filter(|n| n.kind == k).count() as u64;
    let mut warnings = f.warnings;
    if !hardware_backed {
        warnings.push(knox_attest::simulated::NOTE.to_string());
    }
    Report {
        outcome: s.outcome(finished),
        run_id: b.run_id.clone(),
        platform,
        hardware_backed,
        steps: s.steps,
        nodes: b.nodes.len() as u64,
        tool_calls: count(knox_types::aeg::NodeKind::ToolCall),
        executed: count(knox_types::aeg::NodeKind::ToolOutput),
        blocked: f.blocked,
        interrupts: f.interrupts,
        flagged_for_review: f.flagged,
        // ⌈log2 p⌉ of each agent's product, in integers.
        choice_bits: (!f.choices.is_empty()).then(|| {
            f.choices
                .iter()
                .map(|p| 128 - p.saturating_sub(1).leading_zeros())
                .sum::<u32>()
        }),
        models: b
            .models
            .iter()
            .map(|m| {
                let h = m
                    .weights_hash
                    .map_or_else(|| "no weights".to_string(), |h| h.to_hex());
                format!(
                    "{}={} ({h}{})",
                    m.role,
                    m.name,
                    if m.declared { ", declared" } else { "" }
                )
            })
            .collect(),
        authenticated: None,
        key_chain: None,
        // Set only on allowed calls (a call another guard blocks reserves nothing), and
        // checked by the replay.
        approvals: b
            .nodes
            .iter()
            .filter_map(|n| match &n.payload.check()?.detail {
                knox_types::payload::CheckDetail::Contract(c) => c.approval_nonce.clone(),
                _ => None,
            })
            .collect(),
        warnings,
    }
}
