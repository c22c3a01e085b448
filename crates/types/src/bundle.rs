//! The evidence bundle: everything a verifier needs, in one self-describing JSON file.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::aeg::Node;
use crate::apm::{Apm, ApmInputs};
use crate::bytes::HexBytes;
use crate::canon::CanonError;
use crate::digest::Digest;
use crate::dsse::{APM_PREDICATE, Envelope, SUMMARY_PREDICATE, Statement, Subject};

/// Format identifier of the bundles Knox writes: the APM, the prompt, the platform
/// evidence and every node payload are written in their canonical (RFC 8785) form and
/// verified as written, and the signed summary places the run in its key's chain of
/// runs ([`KeyChain`]). From version 4 the monitor's rules are those of agents as they
/// are: an agent may have several allowed calls awaiting their outputs at once
/// (parallel tool calls), an allowed call whose output never came back is closed by an
/// `unanswered` node when the run is sealed, and a blocked call never uses up the plan
/// step it matched ([`MonitorRules`]). From version 5 block reasons are worded plainly
/// ([`MonitorRules::plain_reasons`]).
pub const BUNDLE_FORMAT: &str = "knox-evidence/v5";

/// The bundle format before plain block reasons, still verified under its own rules
/// ([`MonitorRules::V4`]): as [`BUNDLE_FORMAT`] otherwise.
pub const BUNDLE_FORMAT_V4: &str = "knox-evidence/v4";

/// The bundle format before the rules of version 4, still verified under its own
/// rules ([`MonitorRules::V3`]): as [`BUNDLE_FORMAT`] otherwise.
pub const BUNDLE_FORMAT_V3: &str = "knox-evidence/v3";

/// The bundle format before per-key chains of runs, still verified: as
/// [`BUNDLE_FORMAT`], without [`Summary::key_chain`].
pub const BUNDLE_FORMAT_V2: &str = "knox-evidence/v2";

/// The previous bundle format, still verified: the same structure, its parts not
/// necessarily canonical as written (they are canonicalised before hashing).
pub const BUNDLE_FORMAT_V1: &str = "knox-evidence/v1";

/// Format identifier of the journal header Knox writes: canonical parts, as
/// [`BUNDLE_FORMAT`], signed checkpoint lines ([`crate::checkpoint`]) between the node
/// lines, and their cadence signed in the header's APM attestation
/// ([`ApmStatement::checkpoints`]): a gap longer than it promises is tampering. Its
/// nodes follow the rules of [`BUNDLE_FORMAT`] ([`MonitorRules::CURRENT`]).
pub const JOURNAL_FORMAT: &str = "knox-journal/v6";

/// The journal format whose nodes follow the rules of [`BUNDLE_FORMAT_V4`], still
/// verified: as [`JOURNAL_FORMAT`] otherwise.
pub const JOURNAL_FORMAT_V5: &str = "knox-journal/v5";

/// The journal format whose nodes follow the rules of [`BUNDLE_FORMAT_V3`], still
/// verified: as [`JOURNAL_FORMAT`] otherwise.
pub const JOURNAL_FORMAT_V4: &str = "knox-journal/v4";

/// The journal format whose checkpoint cadence was not signed, still verified: the
/// same lines, but checkpoints removed from it cannot be told from a crash.
pub const JOURNAL_FORMAT_V3: &str = "knox-journal/v3";

/// The journal format before checkpoints, still verified: the same lines without
/// checkpoints, so no node of it is authenticated before the run seals.
pub const JOURNAL_FORMAT_V2: &str = "knox-journal/v2";

/// The previous journal format, still verified.
pub const JOURNAL_FORMAT_V1: &str = "knox-journal/v1";

/// The rules the monitor followed, which the verifier's replay follows: fixed by the
/// evidence format (a bundle's signed `summary.format`, a journal header's format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MonitorRules {
    /// An agent may have several allowed calls awaiting their outputs at once (the
    /// tool calls of one model answer), each output naming its call as its parent,
    /// and allowed calls whose output never came back are closed by `unanswered`
    /// nodes. Before: one allowed call at a time, its output before the next call.
    pub parallel_calls: bool,
    /// A call that matched its plan step and that a later guard blocked uses the step
    /// up (the rule before format v4). From v4 it does not: only an allowed call moves
    /// the plan on, so an injected call a later guard blocks cannot cancel the user's
    /// own planned call.
    pub blocked_uses_step: bool,
    /// The tolerant mode's read steps accept a parameter left out, or given, at the
    /// default its input schema's `default` keyword states (from format v4; before,
    /// only a default the tool's description stated in prose counted).
    pub schema_defaults: bool,
    /// Block reasons name what the user and the agent see (from format v5): a
    /// required parameter left out as "missing required parameter `x`" (before: "do
    /// not match the input schema at `` (required)"), an undeclared one as "unknown
    /// parameter `x`", an off-plan call by the proposal's number in the agent's calls
    /// and the plan step (1-based, as the plan lists them), the tolerant mode's steps
    /// by number and tool (before: the 0-based trajectory position only).
    pub plain_reasons: bool,
}

impl MonitorRules {
    /// The rules of [`BUNDLE_FORMAT`] and [`JOURNAL_FORMAT`].
    pub const CURRENT: Self = Self {
        parallel_calls: true,
        blocked_uses_step: false,
        schema_defaults: true,
        plain_reasons: true,
    };
    /// The rules of [`BUNDLE_FORMAT_V4`] and [`JOURNAL_FORMAT_V5`].
    pub const V4: Self = Self {
        parallel_calls: true,
        blocked_uses_step: false,
        schema_defaults: true,
        plain_reasons: false,
    };
    /// The rules of formats up to [`BUNDLE_FORMAT_V3`] and [`JOURNAL_FORMAT_V4`].
    pub const V3: Self = Self {
        parallel_calls: false,
        blocked_uses_step: true,
        schema_defaults: false,
        plain_reasons: false,
    };

    /// The rules of a bundle of format `format` (the current ones for a format this
    /// crate does not know: a verifier refuses those before replaying).
    pub fn of_bundle_format(format: &str) -> Self {
        match format {
            BUNDLE_FORMAT_V4 => Self::V4,
            BUNDLE_FORMAT_V3 | BUNDLE_FORMAT_V2 | BUNDLE_FORMAT_V1 => Self::V3,
            _ => Self::CURRENT,
        }
    }
}

/// Largest bundle file a verifier reads.
pub const MAX_BUNDLE_BYTES: usize = 256 << 20;

/// An evidence bundle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// Run identifier.
    pub run_id: String,
    /// The prompt's inputs in clear, when the provider discloses them; its hash must be
    /// the APM's `inputs.prompt`.
    #[serde(serialize_with = "crate::json::canonical")]
    pub prompt: Option<Value>,
    /// The APM.
    #[serde(serialize_with = "crate::json::canonical")]
    pub apm: Apm,
    /// Signature binding the APM hash to its inputs.
    pub apm_attestation: ApmAttestation,
    /// AEG nodes in commit order.
    pub nodes: Vec<Node>,
    /// The signed summary, in clear (it must equal the envelope's predicate).
    pub summary: Summary,
    /// DSSE envelope: an in-toto Statement v1 whose predicate is the summary, signed by
    /// the in-TEE key.
    pub envelope: Envelope,
    /// The in-TEE public key.
    pub key: PublicKey,
    /// Hardware (or simulated) evidence binding the key.
    #[serde(serialize_with = "crate::json::canonical")]
    pub platform: PlatformEvidence,
    /// A refresh report made at the end of the run, binding the chain head to the key.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::json::canonical"
    )]
    pub refresh: Option<PlatformEvidence>,
    /// Models used, by role. Always written, `[]` when the run used none: a bundle
    /// that leaves it out is unreadable (a lenient reader would take it for `[]`).
    pub models: Vec<ModelInfo>,
    /// The toolkit manifest's canonical bytes (UTF-8 JSON, as a string), when the run's
    /// manifest is not one every verifier of this build knows: a verifier uses it only
    /// when `H("knox/manifest", bytes)` equals the APM's `inputs.manifest`. Absent in
    /// bundles written before it was added, and for the shipped manifests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The signed capability contract the run was bounded by, when the APM names one
    /// (`apm.inputs.contract`): a verifier uses it only when its signature verifies
    /// under the authority key it names and its contract hashes to that name. Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<SignedContract>,
    /// What the strict reader found in the bytes this bundle was read from; `None` for
    /// a bundle built in memory. Not part of the format.
    #[serde(skip)]
    pub as_written: Option<AsWritten>,
}

/// What reading a bundle's or journal's bytes found: the hashes of its parts exactly as
/// written and every fault of the encoding (a repeated key, a part not in its canonical
/// form, an APM whose typed reading differs from what is written).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AsWritten {
    /// `H("knox/apm", APM as written)`.
    pub apm_hash: Option<Digest>,
    /// `H("knox/prompt", prompt as written)`, when the prompt is disclosed.
    pub prompt_hash: Option<Digest>,
    /// `H("knox/platform", platform evidence as written)`.
    pub platform_hash: Option<Digest>,
    /// `H("knox/refresh", refresh report as written)`.
    pub refresh_hash: Option<Digest>,
    /// Faults, in document order: the node concerned (by position) when there is one,
    /// and what is wrong, with where.
    pub faults: Vec<(Option<u64>, String)>,
    /// The bytes were a compact container (`knox-compact`), and what is described
    /// here is the JSON it expands to.
    pub compact: bool,
    /// The compact container was a store's (§9.5): it named shared parts, read from
    /// its store.
    pub shared_parts: bool,
}

/// The first line of a run's journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalHeader {
    /// [`JOURNAL_FORMAT`].
    pub format: String,
    /// Run identifier.
    pub run_id: String,
    /// The prompt in clear, as in a bundle.
    #[serde(serialize_with = "crate::json::canonical")]
    pub prompt: Option<Value>,
    /// The APM.
    #[serde(serialize_with = "crate::json::canonical")]
    pub apm: Apm,
    /// Its attestation.
    pub apm_attestation: ApmAttestation,
    /// The in-TEE key.
    pub key: PublicKey,
    /// Evidence binding the key.
    #[serde(serialize_with = "crate::json::canonical")]
    pub platform: PlatformEvidence,
    /// Models used, by role.
    pub models: Vec<ModelInfo>,
    /// The signed capability contract, as in a bundle ([`Bundle::contract`]), so a
    /// journal's prefix can be replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<SignedContract>,
    /// The toolkit manifest's canonical bytes, as in a bundle ([`Bundle::manifest`]):
    /// present when the run's manifest is not one every verifier knows, so a journal's
    /// prefix (a live run, a crashed one) verifies with no other file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
}

/// A signed capability contract as evidence carries it: the authority's DSSE envelope
/// and the authority's public key (which a verifier may require to be a specific one).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedContract {
    /// The authority's public key.
    pub authority: PublicKey,
    /// The envelope, as the authority signed it.
    pub envelope: crate::dsse::Envelope,
}

/// The statement an APM attestation signs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApmStatement {
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// The hashes of `(p, C, R, stop)`.
    pub inputs: ApmInputs,
    /// `H("knox/platform", platform evidence)`: the in-TEE key signs the very platform
    /// evidence that binds it, every byte of it (a TDX report's `attested_at` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Digest>,
    /// The checkpoint cadence of the run's journal (journal format v4): signed here, so
    /// a journal with checkpoints removed is tampered, not a crash's prefix. Absent in
    /// earlier evidence, and from APMs attested outside a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<crate::checkpoint::CheckpointPolicy>,
    /// `H("knox/key", authority public key)` of the capability contract's authority,
    /// for a run bounded by one (`inputs.contract`): the contract's hash covers its
    /// body, not who signed it, so the signer is bound here. Absent in earlier evidence
    /// and for runs without a contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_authority: Option<Digest>,
}

/// An APM attestation: the statement in clear and a DSSE envelope whose in-toto
/// predicate is that statement, signed by the in-TEE key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApmAttestation {
    /// What is signed.
    pub statement: ApmStatement,
    /// The signed envelope.
    pub envelope: Envelope,
}

impl ApmStatement {
    /// The in-toto statement signed for this APM statement.
    pub fn to_statement(&self) -> Result<Statement, CanonError> {
        Statement::new(
            vec![Subject::one("knox-apm", "knoxApm", self.apm_hash.to_hex())],
            APM_PREDICATE,
            self,
        )
    }
}

impl Summary {
    /// How the next run of the same key names this one:
    /// `H("knox/seal", canonical(summary without refresh))`. The refresh report is left
    /// out so that a report bound after sealing (`bind_refresh`) does not change it.
    pub fn seal_digest(&self) -> Result<Digest, CanonError> {
        let mut s = self.clone();
        s.refresh = None;
        Digest::of_json(crate::digest::tag::SEAL, &s)
    }

    /// The in-toto statement signed for this summary.
    pub fn to_statement(&self) -> Result<Statement, CanonError> {
        let mut digest = serde_json::Map::new();
        digest.insert(
            "knoxChainHead".into(),
            Value::String(self.chain_head.to_hex()),
        );
        digest.insert(
            "knoxStructureRoot".into(),
            Value::String(self.structure_root.to_hex()),
        );
        let subject = Subject {
            name: format!("knox-aeg:{}", self.run_id),
            digest,
        };
        Statement::new(vec![subject], SUMMARY_PREDICATE, self)
    }
}

/// The AEG summary the bundle signature covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// [`BUNDLE_FORMAT`].
    pub format: String,
    /// Run identifier.
    pub run_id: String,
    /// `c_N`.
    pub chain_head: Digest,
    /// `s`.
    pub structure_root: Digest,
    /// `H(APM)`.
    pub apm_hash: Digest,
    /// Node counts.
    pub counts: Counts,
    /// `H("knox/refresh", refresh report)`, when the bundle carries one: the in-TEE key
    /// signs every byte of it (a TDX report's `attested_at` included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<Digest>,
    /// Where this run stands in its key's chain of runs (format v3; absent before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_chain: Option<KeyChain>,
}

/// A sealed run's place in the chain of runs signed by the same in-TEE key: every run
/// the key seals is numbered and names the run sealed before it, so a verifier of the
/// runs a provider hands over sees a run left out (a number missing), and a run signed
/// twice at one place (a fork).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyChain {
    /// 0 for the key's first sealed run, then one more for each.
    pub seq: u64,
    /// For run 0, [`KeyChain::start`] of the key's platform evidence; then the previous
    /// run's [`Summary::seal_digest`].
    pub prev: Digest,
}

impl KeyChain {
    /// What run 0 names as its predecessor: `H("knox/key-chain-start", H_platform)`,
    /// where `H_platform = H("knox/platform", platform evidence)` is the hash the APM
    /// attestation binds.
    pub fn start(platform_hash: &Digest) -> Digest {
        Digest::tagged(crate::digest::tag::KEY_CHAIN_START, &[&platform_hash.0])
    }
}

/// Node counts by outcome.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    /// All nodes.
    pub nodes: u64,
    /// `tool_call` nodes.
    pub tool_calls: u64,
    /// `tool_output` nodes (executed actions).
    pub executed: u64,
    /// `blocked` nodes.
    pub blocked: u64,
    /// `interrupt` nodes.
    pub interrupts: u64,
}

/// A public key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicKey {
    /// Always `ed25519`.
    pub alg: String,
    /// The 32-byte key.
    pub public_key: HexBytes,
}

/// Platform evidence binding the in-TEE key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformEvidence {
    /// The platform mode (`simulated`, `tdx`).
    pub mode: PlatformMode,
    /// Media type of `evidence`.
    pub media_type: String,
    /// The 64-byte report_data the hardware report carries.
    pub report_data: HexBytes,
    /// The epoch/campaign nonce bound into report_data.
    pub nonce: HexBytes,
    /// Backend-specific evidence.
    pub evidence: Value,
}

/// A model that took part in the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// `planner`, `executor` or `judge`.
    pub role: ModelRole,
    /// Model name (`dataset`, `benign`, `local:…`, `openai:…`).
    pub name: String,
    /// SHA-256 of the weights, when there are weights (`null` otherwise: written).
    #[serde(deserialize_with = "crate::json::present")]
    pub weights_hash: Option<Digest>,
    /// True when the hash was declared rather than measured.
    pub declared: bool,
}

/// A string-named closed set read from evidence: the known names are variants, any
/// other name is kept in `Other` so that an untrusted bundle naming it still parses and
/// the verifier can refuse it, naming it. Serialised as the bare name.
macro_rules! named_set {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal,)+ }) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $var,)+
            /// A name outside the known set, as read from evidence.
            Other(String),
        }

        impl $name {
            /// The name as written in evidence.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$var => $s,)+
                    Self::Other(s) => s,
                }
            }

            /// Whether the name is one of the known set.
            #[must_use]
            pub const fn is_known(&self) -> bool {
                !matches!(self, Self::Other(_))
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($s => Self::$var,)+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match s.as_str() {
                    $($s => Self::$var,)+
                    _ => Self::Other(s),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map(Self::from)
            }
        }
    };
}

named_set! {
    /// How a bundle's platform evidence was produced.
    PlatformMode {
        /// `simulated`: no root of trust, accepted only when explicitly allowed.
        Simulated = "simulated",
        /// `tdx`: an Intel TDX quote, optionally with NVIDIA GPU evidence.
        Tdx = "tdx",
    }
}

named_set! {
    /// The part a model plays in a run.
    ModelRole {
        /// `planner`: writes the plan the APM fixes.
        Planner = "planner",
        /// `executor`: proposes the tool calls.
        Executor = "executor",
        /// `judge`: classifies information flows for the regulation guard.
        Judge = "judge",
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests")]

    use super::{ModelRole, PlatformMode};

    #[test]
    fn known_and_unknown_names_write_back_their_bytes() {
        for (name, mode) in [
            ("simulated", PlatformMode::Simulated),
            ("tdx", PlatformMode::Tdx),
            ("tdx+nvidia", PlatformMode::Other("tdx+nvidia".into())),
            ("", PlatformMode::Other(String::new())),
        ] {
            let json = serde_json::to_string(name).unwrap();
            let read: PlatformMode = serde_json::from_str(&json).unwrap();
            assert_eq!(read, mode);
            assert_eq!(read.is_known(), !matches!(mode, PlatformMode::Other(_)));
            assert_eq!(serde_json::to_string(&read).unwrap(), json);
            assert_eq!(read.to_string(), name);
        }
        for (name, role) in [
            ("planner", ModelRole::Planner),
            ("executor", ModelRole::Executor),
            ("judge", ModelRole::Judge),
            ("Judge", ModelRole::Other("Judge".into())),
        ] {
            let json = serde_json::to_string(name).unwrap();
            let read: ModelRole = serde_json::from_str(&json).unwrap();
            assert_eq!(read, role);
            assert_eq!(serde_json::to_string(&read).unwrap(), json);
            assert_eq!(ModelRole::from(name), role);
            let mut canonical = Vec::new();
            crate::canon_ser::write(&role, &mut canonical).unwrap();
            assert_eq!(canonical, json.as_bytes());
        }
        // Not a string: still an error, never a panic.
        assert!(serde_json::from_str::<ModelRole>("3").is_err());
    }
}

/// Format identifier of a key announcement ([`Announcement`]).
pub const ANNOUNCEMENT_FORMAT: &str = "knox-key-announcement/v1";

/// The run id of a key announcement's summary: never a run's (run ids Knox writes are
/// a workload's, a session's or a conversation's).
pub const ANNOUNCEMENT_RUN_ID: &str = "key-announcement";

/// An in-TEE key's announcement: its first summary (number 0 of its chain of runs),
/// signed when the key is made and handed to a store before any run, so that a Knox
/// process whose runs are all withheld still shows — as a key announced and never
/// followed. Its summary is a run's with nothing in it: run id
/// [`ANNOUNCEMENT_RUN_ID`], no node (`chain_head` the chain's start, `structure_root`
/// the empty tree's), no APM (`apm_hash` all zeros), and `key_chain` `{seq: 0, prev:
/// KeyChain::start(H(platform))}`; the key's first run is then number 1 and names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Announcement {
    /// [`ANNOUNCEMENT_FORMAT`].
    pub format: String,
    /// The in-TEE public key announced.
    pub key: PublicKey,
    /// Hardware (or simulated) evidence binding it.
    #[serde(serialize_with = "crate::json::canonical")]
    pub platform: PlatformEvidence,
    /// The signed summary, in clear (it must equal the envelope's predicate).
    pub summary: Summary,
    /// DSSE envelope: an in-toto Statement v1 whose predicate is the summary, signed by
    /// the key.
    pub envelope: Envelope,
}

impl Announcement {
    /// The summary an announcement of a key whose platform evidence hashes to
    /// `platform_hash` signs (before its signature).
    pub fn summary_for(platform_hash: &Digest) -> Summary {
        Summary {
            format: BUNDLE_FORMAT.into(),
            run_id: ANNOUNCEMENT_RUN_ID.into(),
            chain_head: crate::aeg::chain_start(),
            structure_root: crate::merkle::root(&[]),
            apm_hash: Digest::default(),
            counts: Counts::default(),
            refresh: None,
            key_chain: Some(KeyChain {
                seq: 0,
                prev: KeyChain::start(platform_hash),
            }),
        }
    }
}
