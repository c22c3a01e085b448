//! The regulation norms: a Cedar policy set per regulation, validated against the
//! Knox schema, every policy carrying its provision and proven on its examples when the
//! set loads; and the decision of one flow under it.
//!
//! A policy set is a directory (the embedded default is `regulations/` at the
//! repository root) holding `knox.cedarschema` and, per regulation, a manifest
//! (`hipaa.toml`) naming its Cedar file, its default provision and its examples. Each
//! Cedar policy is annotated `@id`, `@kind` (`scope` or `norm`), `@provision` and
//! `@summary`. For one regulation and one recipient, the scope policies decide whether
//! the regulation applies (Cedar `Allow` = in scope); the norm policies then decide it:
//! `Allow` is compliant (the satisfied permits decide), `Deny` non-compliant (the
//! satisfied forbids decide, or — when nothing permits — the default provision).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, Policy, PolicyId, PolicySet, Request,
    RestrictedExpression, Schema, ValidationMode, Validator,
};
use knox_types::digest::{Digest, tag};
use knox_types::regulation::{InfoFlow, RecipientFacts, RegulationDecision};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use crate::obligations::{self, Obligation, ObligationDef};
use crate::phi::Phi;
use crate::slice::{self, Facts, Read, Sliced};
use crate::vocab::{TermKind, UnknownTerm, VOCABULARY_FILE, Vocabulary};

/// The schema file every policy set holds.
pub const SCHEMA_FILE: &str = "knox.cedarschema";

/// Largest policy-set file read from disk.
const MAX_FILE: u64 = 1 << 20;

/// The policy set Knox ships (`regulations/`), embedded at build time.
pub const EMBEDDED: [(&str, &str); 6] = [
    (
        VOCABULARY_FILE,
        include_str!("../../../regulations/vocabulary.toml"),
    ),
    (
        SCHEMA_FILE,
        include_str!("../../../regulations/knox.cedarschema"),
    ),
    ("gdpr.toml", include_str!("../../../regulations/gdpr.toml")),
    (
        "gdpr.cedar",
        include_str!("../../../regulations/gdpr.cedar"),
    ),
    (
        "hipaa.toml",
        include_str!("../../../regulations/hipaa.toml"),
    ),
    (
        "hipaa.cedar",
        include_str!("../../../regulations/hipaa.cedar"),
    ),
];

/// Why a policy set was refused.
#[derive(Debug, thiserror::Error)]
pub enum NormError {
    /// A file could not be read.
    #[error("reading `{path}`: {error}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        error: std::io::Error,
    },
    /// A file is missing or malformed.
    #[error("`{file}`: {reason}")]
    File {
        /// File name.
        file: String,
        /// What is wrong.
        reason: String,
    },
    /// A policy breaks a rule of the set (annotations, ids, schema).
    #[error("policy `{policy}`: {reason}")]
    Policy {
        /// Policy id (or position).
        policy: String,
        /// What is wrong.
        reason: String,
    },
    /// An example failed: the policy does not say what its examples say it must.
    #[error("policy `{policy}` fails its example #{index}: {reason}")]
    Example {
        /// Policy id.
        policy: String,
        /// 1-based position of the example in its manifest.
        index: usize,
        /// What happened.
        reason: String,
    },
    /// A request could not be built (a fact the schema rejects).
    #[error("building the Cedar request: {0}")]
    Request(String),
}

/// What one policy says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInfo {
    /// `scope` or `norm`.
    pub kind: String,
    /// The provision it encodes.
    pub provision: String,
    /// One line for readers.
    pub summary: String,
    /// `permit` or `forbid`.
    pub effect: &'static str,
}

#[derive(Debug)]
struct Regulation {
    title: String,
    default_policy: String,
    default_provision: String,
    scope: PolicySet,
    norms: PolicySet,
    /// The same policies with their guards: what a decision evaluates (`slice`).
    scope_sliced: Sliced,
    norms_sliced: Sliced,
    info: BTreeMap<String, PolicyInfo>,
    examples: usize,
    /// Obligations beside flows, and their descriptions by id.
    obligations: Vec<Obligation>,
    obligation_info: BTreeMap<String, PolicyInfo>,
}

/// A loaded, validated and example-checked policy set.
#[derive(Debug)]
pub struct Norms {
    regulations: BTreeMap<String, Regulation>,
    files: BTreeMap<String, String>,
    hash: Digest,
    authorizer: Authorizer,
    sender: EntityUid,
    recipient: EntityUid,
    action: EntityUid,
    vocab: Vocabulary,
    /// The facts some policy reads: the context of a decision holds only these.
    read: Read,
}

/// The facts of a flow beyond [`InfoFlow`] (a run derives none of them: the public
/// flow format of [`Phi`] states them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowExtra {
    /// The data subject's role (`patient`, `employee`, `child`, …; `unknown`).
    pub subject_role: String,
    /// The purpose the data was collected for (`unspecified` when not stated).
    pub collected_for: String,
    /// Facts of the transmission principle (`court_order`, `deidentified`, …).
    pub conditions: BTreeSet<String>,
    /// The controller's obligations, by name: `met`, `unmet` or `not_required`
    /// ([`crate::obligations`]).
    pub obligations: BTreeMap<String, String>,
}

impl Default for FlowExtra {
    fn default() -> Self {
        Self {
            subject_role: "unknown".into(),
            collected_for: "unspecified".into(),
            conditions: BTreeSet::new(),
            obligations: BTreeMap::new(),
        }
    }
}

/// A flow's terms after normalisation.
#[derive(Debug)]
struct Terms {
    sender_role: String,
    recipient_role: String,
    purpose: String,
    info_types: BTreeSet<String>,
    subject_role: String,
    collected_for: String,
    conditions: BTreeSet<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    regulation: String,
    title: String,
    policies: String,
    default_policy: String,
    default_provision: String,
    #[serde(default)]
    example: Vec<Example>,
    #[serde(default)]
    obligation: Vec<ObligationDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Example {
    policy: String,
    expect: Expect,
    #[serde(default)]
    verdict: Option<String>,
    flow: Phi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Expect {
    Match,
    NoMatch,
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn uid(s: &str) -> Result<EntityUid, NormError> {
    EntityUid::from_str(s).map_err(|e| NormError::Request(e.to_string()))
}

impl Norms {
    /// The policy set embedded in this build.
    pub fn embedded() -> Result<Self, NormError> {
        Self::from_files(
            EMBEDDED
                .iter()
                .map(|(n, t)| ((*n).to_string(), (*t).to_string()))
                .collect(),
        )
    }

    /// Loads the policy set in directory `dir`.
    pub fn load_dir(dir: &Path) -> Result<Self, NormError> {
        let io = |path: &Path, error| NormError::Io {
            path: path.display().to_string(),
            error,
        };
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let entry = entry.map_err(|e| io(dir, e))?;
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let wanted = [".toml", ".cedar", ".cedarschema"]
                .iter()
                .any(|ext| name.ends_with(ext));
            if !wanted || !path.is_file() {
                continue;
            }
            // Knox's one capped reader: never blocks on a FIFO, never reads past the cap.
            let bytes = knox_files::read_capped(&path, MAX_FILE).map_err(|e| NormError::File {
                file: name.into(),
                reason: e.to_string(),
            })?;
            let text = String::from_utf8(bytes).map_err(|_| NormError::File {
                file: name.into(),
                reason: format!("`{}` is not UTF-8 text", path.display()),
            })?;
            files.insert(name.to_string(), text);
        }
        Self::from_files(files)
    }

    /// Loads a policy set from file names and contents.
    pub fn from_files(files: BTreeMap<String, String>) -> Result<Self, NormError> {
        let file = |name: &str| {
            files.get(name).ok_or_else(|| NormError::File {
                file: name.into(),
                reason: "missing".into(),
            })
        };
        let schema_text = file(SCHEMA_FILE)?;
        let (schema, _) =
            Schema::from_cedarschema_str(schema_text).map_err(|e| NormError::File {
                file: SCHEMA_FILE.into(),
                reason: e.to_string(),
            })?;
        let validator = Validator::new(schema.clone());
        let mut used = BTreeMap::new();
        used.insert(SCHEMA_FILE.to_string(), sha256_hex(schema_text));
        let vocab_text = file(VOCABULARY_FILE)?;
        let vocab = Vocabulary::parse(vocab_text).map_err(|reason| NormError::File {
            file: VOCABULARY_FILE.into(),
            reason,
        })?;
        used.insert(VOCABULARY_FILE.to_string(), sha256_hex(vocab_text));
        let mut norms = Self {
            regulations: BTreeMap::new(),
            files: BTreeMap::new(),
            hash: Digest([0; 32]),
            authorizer: Authorizer::new(),
            sender: uid(r#"Knox::Party::"sender""#)?,
            recipient: uid(r#"Knox::Party::"recipient""#)?,
            action: uid(r#"Knox::Action::"disclose""#)?,
            vocab,
            read: Read::ALL,
        };
        let mut all_ids = BTreeSet::new();
        let mut pending = Vec::new();
        for (name, text) in files
            .iter()
            .filter(|(n, _)| n.ends_with(".toml") && *n != VOCABULARY_FILE)
        {
            let m: Manifest = toml::from_str(text).map_err(|e| NormError::File {
                file: name.clone(),
                reason: e.to_string(),
            })?;
            let reg_name = m.regulation.trim().to_ascii_uppercase();
            if reg_name.is_empty() || norms.regulations.contains_key(&reg_name) {
                return Err(NormError::File {
                    file: name.clone(),
                    reason: format!("regulation `{}` is empty or defined twice", m.regulation),
                });
            }
            let src = file(&m.policies)?;
            used.insert(name.clone(), sha256_hex(text));
            used.insert(m.policies.clone(), sha256_hex(src));
            let parsed = PolicySet::from_str(src).map_err(|e| NormError::File {
                file: m.policies.clone(),
                reason: e.to_string(),
            })?;
            let result = validator.validate(&parsed, ValidationMode::Strict);
            if !result.validation_passed() {
                let errs: Vec<String> = result.validation_errors().map(|e| e.to_string()).collect();
                return Err(NormError::File {
                    file: m.policies.clone(),
                    reason: format!("schema validation: {}", errs.join("; ")),
                });
            }
            let prefix = format!("{}-", reg_name.to_ascii_lowercase());
            let mut reg = Regulation {
                title: m.title.clone(),
                default_policy: m.default_policy.clone(),
                default_provision: m.default_provision.clone(),
                scope: PolicySet::new(),
                norms: PolicySet::new(),
                scope_sliced: Sliced::default(),
                norms_sliced: Sliced::default(),
                info: BTreeMap::new(),
                examples: m.example.len(),
                obligations: Vec::new(),
                obligation_info: BTreeMap::new(),
            };
            for d in m.obligation {
                let o = Obligation::new(&reg_name, d).map_err(|reason| NormError::File {
                    file: name.clone(),
                    reason,
                })?;
                if !all_ids.insert(o.id.clone()) {
                    return Err(NormError::Policy {
                        policy: o.id,
                        reason: "id used twice in the policy set".into(),
                    });
                }
                reg.obligation_info.insert(
                    o.id.clone(),
                    PolicyInfo {
                        kind: "obligation".into(),
                        provision: o.provision.clone(),
                        summary: o.summary.clone(),
                        effect: "obligation",
                    },
                );
                reg.obligations.push(o);
            }
            if !m.default_policy.starts_with(&prefix) || m.default_provision.trim().is_empty() {
                return Err(NormError::File {
                    file: name.clone(),
                    reason: format!(
                        "default_policy must start with `{prefix}` and default_provision must be set"
                    ),
                });
            }
            all_ids.insert(m.default_policy.clone());
            for p in parsed.policies() {
                let (id, info, renamed) = annotated(p, &prefix)?;
                if !all_ids.insert(id.clone()) {
                    return Err(NormError::Policy {
                        policy: id,
                        reason: "id used twice in the policy set".into(),
                    });
                }
                let set = if info.kind == "scope" {
                    &mut reg.scope
                } else {
                    &mut reg.norms
                };
                set.add(renamed).map_err(|e| NormError::Policy {
                    policy: id.clone(),
                    reason: e.to_string(),
                })?;
                reg.info.insert(id, info);
            }
            reg.scope_sliced = Sliced::new(&reg.scope);
            reg.norms_sliced = Sliced::new(&reg.norms);
            pending.push((reg_name.clone(), m.example));
            norms.regulations.insert(reg_name, reg);
        }
        if norms.regulations.is_empty() {
            return Err(NormError::File {
                file: "*.toml".into(),
                reason: "no regulation manifest in the policy set".into(),
            });
        }
        norms.read = Read::of(
            norms
                .regulations
                .values()
                .flat_map(|r| r.scope.policies().chain(r.norms.policies())),
        );
        for (reg, examples) in pending {
            norms.check_examples(&reg, &examples, &schema)?;
        }
        norms.hash = Digest::of_json(tag::POLICY_SET, &used).map_err(|e| NormError::File {
            file: "(set)".into(),
            reason: e.to_string(),
        })?;
        norms.files = used;
        Ok(norms)
    }

    /// `H("knox/policy-set", canonical({file: sha256}))` over the files the set uses.
    pub fn hash(&self) -> Digest {
        self.hash
    }

    /// The files the set uses and their SHA-256.
    pub fn files(&self) -> &BTreeMap<String, String> {
        &self.files
    }

    /// Regulation names (upper case).
    pub fn regulations(&self) -> impl Iterator<Item = &str> {
        self.regulations.keys().map(String::as_str)
    }

    /// Whether the set defines `name` (case-insensitive).
    pub fn defines(&self, name: &str) -> bool {
        self.regulations
            .contains_key(&name.trim().to_ascii_uppercase())
    }

    /// The regulation's title, policy count and example count.
    pub fn describe(&self, name: &str) -> Option<(String, usize, usize)> {
        self.regulations
            .get(&name.trim().to_ascii_uppercase())
            .map(|r| (r.title.clone(), r.info.len(), r.examples))
    }

    /// The policies of regulation `name` (id and description, in id order) and its
    /// default policy id and provision.
    #[expect(clippy::type_complexity, reason = "a listing")]
    pub fn listing(&self, name: &str) -> Option<(Vec<(&str, &PolicyInfo)>, (&str, &str))> {
        self.regulations
            .get(&name.trim().to_ascii_uppercase())
            .map(|r| {
                (
                    r.info.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                    (r.default_policy.as_str(), r.default_provision.as_str()),
                )
            })
    }

    /// What policy `id` says of itself.
    pub fn policy(&self, id: &str) -> Option<&PolicyInfo> {
        self.regulations
            .values()
            .find_map(|r| r.info.get(id).or_else(|| r.obligation_info.get(id)))
    }

    /// The obligations beside flows of regulation `name` ([`crate::obligations`]).
    pub fn obligations(&self, name: &str) -> Option<&[Obligation]> {
        self.regulations
            .get(&name.trim().to_ascii_uppercase())
            .map(|r| r.obligations.as_slice())
    }

    /// The provision policy `id` (or a regulation's default policy) cites.
    pub fn provision(&self, id: &str) -> Option<&str> {
        self.regulations.values().find_map(|r| {
            r.info
                .get(id)
                .or_else(|| r.obligation_info.get(id))
                .map(|i| i.provision.as_str())
                .or_else(|| (r.default_policy == id).then_some(r.default_provision.as_str()))
        })
    }

    /// Decides `flow` under regulation `name` for its recipient number `k`.
    pub fn decide_one(
        &self,
        name: &str,
        flow: &InfoFlow,
        k: usize,
    ) -> Result<RegulationDecision, NormError> {
        let mut d = self.decide(&[name.to_string()], flow, k)?;
        d.pop()
            .ok_or_else(|| NormError::Request("no decision".into()))
    }

    /// Decides `flow` for its recipient number `k` under each regulation of `names`
    /// (one Cedar request, evaluated against each regulation's scope and norms).
    /// Every role, purpose and information type is normalised through the set's
    /// vocabulary first; a term it does not define makes every decision
    /// `not_applicable` with a warning naming the term.
    pub fn decide(
        &self,
        names: &[String],
        flow: &InfoFlow,
        k: usize,
    ) -> Result<Vec<RegulationDecision>, NormError> {
        self.decide_extra(names, flow, k, &FlowExtra::default())
    }

    /// [`Norms::decide`] with the facts a run does not derive (subject role, the
    /// purpose of collection, conditions of the transmission principle).
    pub fn decide_extra(
        &self,
        names: &[String],
        flow: &InfoFlow,
        k: usize,
        extra: &FlowExtra,
    ) -> Result<Vec<RegulationDecision>, NormError> {
        self.decide_sliced(names, flow, k, extra, true)
    }

    /// [`Norms::decide_extra`] with every policy of the set evaluated, not the slice
    /// that can match, on a context holding every fact, not only those the policies
    /// read: the reference the slicing and the context's pruning are measured and
    /// proven against.
    #[doc(hidden)]
    pub fn decide_whole_set(
        &self,
        names: &[String],
        flow: &InfoFlow,
        k: usize,
        extra: &FlowExtra,
    ) -> Result<Vec<RegulationDecision>, NormError> {
        self.decide_sliced(names, flow, k, extra, false)
    }

    /// [`Norms::decide_extra`], evaluating each regulation's policies in the slice that
    /// can match the flow on a context of the facts they read (`sliced`, what every
    /// decision does) or all of them on every fact (the reference both are proven
    /// equal to, in tests).
    pub(crate) fn decide_sliced(
        &self,
        names: &[String],
        flow: &InfoFlow,
        k: usize,
        extra: &FlowExtra,
        sliced: bool,
    ) -> Result<Vec<RegulationDecision>, NormError> {
        let recipient = flow
            .recipients
            .get(k)
            .ok_or_else(|| NormError::Request(format!("no recipient #{k}")))?;
        let mut regs = Vec::with_capacity(names.len());
        for name in names {
            let upper = name.trim().to_ascii_uppercase();
            let reg = self.regulations.get(&upper).ok_or_else(|| {
                NormError::Request(format!("no policies for regulation `{name}`"))
            })?;
            regs.push((upper, reg));
        }
        let (terms, mut unknown) = self.normalise(flow, recipient, extra);
        let stated = obligations::statements(
            self.regulations.values().flat_map(|r| r.obligations.iter()),
            &extra.obligations,
            &mut unknown,
        );
        if !unknown.is_empty() {
            let warnings: Vec<String> = unknown.iter().map(ToString::to_string).collect();
            return Ok(regs
                .into_iter()
                .map(|(regulation, _)| RegulationDecision {
                    regulation,
                    recipient: recipient.party.id.clone(),
                    verdict: "not_applicable".into(),
                    policies: vec![],
                    provisions: vec![],
                    warnings: warnings.clone(),
                })
                .collect());
        }
        let facts = facts_of(flow, recipient, &terms);
        let mut ask = Ask {
            norms: self,
            facts,
            sliced,
            request: None,
        };
        regs.into_iter()
            .map(|(upper, reg)| -> Result<RegulationDecision, NormError> {
                let mut d = self.decide_with(reg, upper, recipient, &mut ask)?;
                obligations::apply(&reg.obligations, &stated, &mut d);
                Ok(d)
            })
            .collect()
    }

    /// How many policies of the set have a guard the slicer reads, and how many there
    /// are.
    #[cfg(test)]
    pub(crate) fn slicing(&self) -> (usize, usize) {
        self.regulations.values().fold((0, 0), |(g, a), r| {
            (
                g + r.scope_sliced.guarded() + r.norms_sliced.guarded(),
                a + r.info.len(),
            )
        })
    }

    /// How many policies of the set the guards read whole.
    #[cfg(test)]
    pub(crate) fn completeness(&self) -> usize {
        self.regulations
            .values()
            .map(|r| r.scope_sliced.complete() + r.norms_sliced.complete())
            .sum()
    }

    /// The facts a decision's Cedar context holds.
    #[cfg(test)]
    pub(crate) fn read_facts(&self) -> &Read {
        &self.read
    }

    /// The vocabulary flows are normalised with.
    pub fn vocabulary(&self) -> &Vocabulary {
        &self.vocab
    }

    /// The normalised terms of `flow` for `recipient`, and the terms the vocabulary
    /// does not define.
    fn normalise(
        &self,
        flow: &InfoFlow,
        recipient: &RecipientFacts,
        extra: &FlowExtra,
    ) -> (Terms, Vec<UnknownTerm>) {
        let v = &self.vocab;
        let mut unknown = Vec::new();
        let u = &mut unknown;
        let sender_role = v.normalise(TermKind::Role, "sender.role", &flow.sender.role, u);
        let recipient_role =
            v.normalise(TermKind::Role, "recipient.role", &recipient.party.role, u);
        let purpose = v.normalise(TermKind::Purpose, "purpose", &flow.purpose, u);
        let mut info_types = BTreeSet::new();
        for t in &flow.info_types {
            v.normalise_into(TermKind::InfoType, "info_types", t, &mut info_types, u);
        }
        let subject_role = v.normalise(TermKind::Role, "subject_role", &extra.subject_role, u);
        let collected_for =
            v.normalise(TermKind::Purpose, "collected_for", &extra.collected_for, u);
        let mut conditions = BTreeSet::new();
        for c in &extra.conditions {
            v.normalise_into(TermKind::Condition, "conditions", c, &mut conditions, u);
        }
        let terms = Terms {
            sender_role,
            recipient_role,
            purpose,
            info_types,
            subject_role,
            collected_for,
            conditions,
        };
        (terms, unknown)
    }

    fn decide_with(
        &self,
        reg: &Regulation,
        name: String,
        recipient: &RecipientFacts,
        ask: &mut Ask<'_, '_>,
    ) -> Result<RegulationDecision, NormError> {
        let mut decision = RegulationDecision {
            regulation: name,
            recipient: recipient.party.id.clone(),
            verdict: String::new(),
            policies: vec![],
            provisions: vec![],
            warnings: vec![],
        };
        let scope = ask.authorize(&reg.scope, &reg.scope_sliced)?;
        if scope.as_ref().is_none_or(|a| !a.allow) {
            decision.verdict = "not_applicable".into();
            decision.policies = scope.map(|a| a.reasons).unwrap_or_default();
        } else {
            let r = ask.authorize(&reg.norms, &reg.norms_sliced)?;
            match r {
                // A policy that errs is skipped by Cedar; a skipped forbid must not let a
                // flow through, so any evaluation error decides non-compliant.
                Some(a) if !a.errors.is_empty() => {
                    decision.verdict = "non_compliant".into();
                    decision.policies = a.errors;
                }
                Some(a) if a.allow => {
                    decision.verdict = "compliant".into();
                    decision.policies = a.reasons;
                }
                r => {
                    decision.verdict = "non_compliant".into();
                    decision.policies = r.map(|a| a.reasons).unwrap_or_default();
                    if decision.policies.is_empty() {
                        decision.policies = vec![reg.default_policy.clone()];
                    }
                }
            }
        }
        decision.provisions = decision
            .policies
            .iter()
            .map(|p| {
                reg.info
                    .get(p)
                    .map(|i| i.provision.as_str())
                    .or_else(|| {
                        (reg.default_policy == *p).then_some(reg.default_provision.as_str())
                    })
                    .unwrap_or("(evaluation error)")
                    .to_string()
            })
            .collect();
        Ok(decision)
    }

    /// The Cedar request of one flow's `facts` (the parties travel in the context, so
    /// the entity store is empty). The context is built from the same [`Facts`] the
    /// slices are cut with, fact by fact from their paths: the guards and Cedar cannot
    /// read different values. It holds the facts `read` marks: every one for what the
    /// schema describes (the policy examples, the whole-set reference), else those some
    /// policy of the set reads (`self.read`).
    fn request(
        &self,
        facts: &Facts<'_>,
        schema: Option<&Schema>,
        read: &Read,
    ) -> Result<(Request, Entities), NormError> {
        let err = |e: &dyn std::fmt::Display| NormError::Request(e.to_string());
        let s = |v: &str| RestrictedExpression::new_string(v.to_string());
        let mut top: Vec<(String, RestrictedExpression)> = Vec::with_capacity(13);
        let mut parties: [Vec<(String, RestrictedExpression)>; 2] = [vec![], vec![]];
        let strings = slice::STRINGS
            .iter()
            .zip(facts.strings)
            .zip(read.strings)
            .filter(|(_, r)| *r)
            .map(|((p, v), _)| (*p, s(v)));
        let bools = slice::BOOLS
            .iter()
            .zip(facts.bools)
            .zip(read.bools)
            .filter(|(_, r)| *r)
            .map(|((p, v), _)| (*p, RestrictedExpression::new_bool(v)));
        for (path, value) in strings.chain(bools) {
            match path.split_once('.') {
                Some(("sender", attr)) => parties[0].push((attr.to_string(), value)),
                Some((_, attr)) => parties[1].push((attr.to_string(), value)),
                None => top.push((path.to_string(), value)),
            }
        }
        for ((path, set), _) in slice::SETS
            .iter()
            .zip(facts.sets)
            .zip(read.sets)
            .filter(|(_, r)| *r)
        {
            top.push((
                (*path).to_string(),
                RestrictedExpression::new_set(set.iter().map(|t| s(t))),
            ));
        }
        let [sender, recipient] = parties;
        for (name, fields) in [("sender", sender), ("recipient", recipient)] {
            if fields.is_empty() {
                continue;
            }
            top.push((
                name.to_string(),
                RestrictedExpression::new_record(fields).map_err(|e| err(&e))?,
            ));
        }
        let context = Context::from_pairs(top).map_err(|e| err(&e))?;
        let request = Request::new(
            self.sender.clone(),
            self.action.clone(),
            self.recipient.clone(),
            context,
            schema,
        )
        .map_err(|e| err(&e))?;
        Ok((request, Entities::empty()))
    }

    fn check_examples(
        &self,
        reg_name: &str,
        examples: &[Example],
        schema: &Schema,
    ) -> Result<(), NormError> {
        let Some(reg) = self.regulations.get(reg_name) else {
            return Ok(());
        };
        let mut seen: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
        for (i, ex) in examples.iter().enumerate() {
            let index = i + 1;
            let fail = |reason: String| NormError::Example {
                policy: ex.policy.clone(),
                index,
                reason,
            };
            let set = if reg.info.get(&ex.policy).is_some_and(|p| p.kind == "scope") {
                &reg.scope
            } else {
                &reg.norms
            };
            let Some(policy) = set.policy(&PolicyId::new(&ex.policy)) else {
                return Err(fail(format!("no policy `{}` in {reg_name}", ex.policy)));
            };
            let (flow, extra) = ex.flow.to_flow();
            let recipient = flow
                .recipients
                .first()
                .ok_or_else(|| fail("example without a recipient".into()))?;
            let (terms, unknown) = self.normalise(&flow, recipient, &extra);
            if let Some(u) = unknown.first() {
                return Err(fail(u.to_string()));
            }
            // Built against the schema: the examples also prove the request builder
            // produces what the schema describes.
            let facts = facts_of(&flow, recipient, &terms);
            let (request, entities) = self
                .request(&facts, Some(schema), &Read::ALL)
                .map_err(|e| fail(e.to_string()))?;
            let single =
                PolicySet::from_policies([policy.clone()]).map_err(|e| fail(e.to_string()))?;
            let r = self.authorizer.is_authorized(&request, &single, &entities);
            if let Some(e) = r.diagnostics().errors().next() {
                return Err(fail(format!("evaluation error: {e}")));
            }
            let matched = r
                .diagnostics()
                .reason()
                .any(|id: &PolicyId| id.to_string() == ex.policy);
            if matched != (ex.expect == Expect::Match) {
                return Err(fail(format!(
                    "expected {}, the policy {}",
                    if ex.expect == Expect::Match {
                        "a match"
                    } else {
                        "no match"
                    },
                    if matched { "matched" } else { "did not match" }
                )));
            }
            let e = seen.entry(ex.policy.as_str()).or_default();
            if matched {
                e.0 = true;
            } else {
                e.1 = true;
            }
            if let Some(want) = &ex.verdict {
                let got = self
                    .decide_extra(&[reg_name.to_string()], &flow, 0, &extra)
                    .map_err(|e| fail(e.to_string()))?
                    .pop()
                    .ok_or_else(|| fail("no decision".into()))?;
                if &got.verdict != want {
                    return Err(fail(format!(
                        "{reg_name} decides `{}` ({}), the example says `{want}`",
                        got.verdict,
                        got.policies.join(", ")
                    )));
                }
            }
        }
        for id in reg.info.keys() {
            match seen.get(id.as_str()) {
                Some((true, true)) => {}
                _ => {
                    return Err(NormError::Policy {
                        policy: id.clone(),
                        reason: "needs at least one must-match and one must-not-match example"
                            .into(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// One flow's questions to Cedar: its facts, the slices cut from them, and the request
/// — built on first use, so a flow every slice of which is empty never builds one.
#[derive(Debug)]
struct Ask<'n, 'f> {
    norms: &'n Norms,
    facts: Facts<'f>,
    /// Slices and the pruned context (else the whole set on every fact).
    sliced: bool,
    request: Option<(Request, Entities)>,
}

impl Ask<'_, '_> {
    /// The answer for the policies of `whole` (or of its slice, when slicing) that can
    /// hold; `None` for none — what Cedar answers for an empty set (deny, no reasons,
    /// no errors) without asking it. A slice its guards decide ([`slice::Slice`]) is
    /// answered from them; any other is asked of Cedar.
    fn authorize(
        &mut self,
        whole: &PolicySet,
        sliced: &Sliced,
    ) -> Result<Option<Answer>, NormError> {
        let cut;
        let set = if self.sliced {
            cut = sliced.slice(&self.facts).map_err(NormError::Request)?;
            if cut.set.is_empty() {
                return Ok(None);
            }
            if let Some((allow, reasons)) = &cut.decided {
                return Ok(Some(Answer {
                    allow: *allow,
                    reasons: reasons.clone(),
                    errors: vec![],
                }));
            }
            &cut.set
        } else {
            whole
        };
        if set.is_empty() {
            return Ok(None);
        }
        if self.request.is_none() {
            let read = if self.sliced {
                &self.norms.read
            } else {
                &Read::ALL
            };
            self.request = Some(self.norms.request(&self.facts, None, read)?);
        }
        Ok(self.request.as_ref().map(|(request, entities)| {
            let r = self.norms.authorizer.is_authorized(request, set, entities);
            Answer {
                allow: r.decision() == Decision::Allow,
                reasons: sorted_reasons(&r),
                errors: r
                    .diagnostics()
                    .errors()
                    .map(|e| match e {
                        cedar_policy::AuthorizationError::PolicyEvaluationError(pe) => {
                            format!("{}:error", pe.policy_id())
                        }
                    })
                    .collect(),
            }
        }))
    }
}

/// What a set of policies answers for one request: allowed, the satisfied policies that
/// decide (sorted ids), and the policies whose evaluation erred.
#[derive(Debug)]
struct Answer {
    allow: bool,
    reasons: Vec<String>,
    errors: Vec<String>,
}

/// The facts of `flow` for `recipient` with its normalised `terms`, in the order of
/// [`slice::STRINGS`], [`slice::BOOLS`] and [`slice::SETS`].
fn facts_of<'a>(flow: &'a InfoFlow, recipient: &'a RecipientFacts, terms: &'a Terms) -> Facts<'a> {
    let (s, r) = (&flow.sender, &recipient.party);
    Facts {
        strings: [
            &flow.tool,
            &flow.subject,
            &terms.subject_role,
            &terms.purpose,
            &terms.collected_for,
            &s.id,
            &terms.sender_role,
            &s.organisation,
            &s.jurisdiction,
            &r.id,
            &terms.recipient_role,
            &r.organisation,
            &r.jurisdiction,
        ],
        bools: [
            recipient.consent,
            recipient.explicit_consent,
            recipient.authorization,
            recipient.to_subject,
            s.listed,
            s.in_eea,
            s.adequacy,
            s.baa,
            s.safeguards,
            r.listed,
            r.in_eea,
            r.adequacy,
            r.baa,
            r.safeguards,
        ],
        sets: [&terms.info_types, &terms.conditions],
    }
}

fn sorted_reasons(r: &cedar_policy::Response) -> Vec<String> {
    let mut v: Vec<String> = r
        .diagnostics()
        .reason()
        .map(|id: &PolicyId| id.to_string())
        .collect();
    v.sort();
    v
}

/// The id, description and re-identified copy of a parsed policy.
fn annotated(p: &Policy, prefix: &str) -> Result<(String, PolicyInfo, Policy), NormError> {
    let fail = |reason: &str| NormError::Policy {
        policy: p
            .annotation("id")
            .map_or_else(|| p.id().to_string(), str::to_string),
        reason: reason.into(),
    };
    let id = p
        .annotation("id")
        .ok_or_else(|| fail("no @id"))?
        .to_string();
    if !id.starts_with(prefix) || id.chars().any(char::is_whitespace) {
        return Err(fail(&format!(
            "@id must start with `{prefix}` and have no spaces"
        )));
    }
    let kind = p.annotation("kind").unwrap_or_default().to_string();
    if kind != "scope" && kind != "norm" {
        return Err(fail("@kind must be `scope` or `norm`"));
    }
    let provision = p.annotation("provision").unwrap_or_default().trim();
    if provision.is_empty() {
        return Err(fail("no @provision"));
    }
    let effect = match p.effect() {
        cedar_policy::Effect::Permit => "permit",
        cedar_policy::Effect::Forbid => "forbid",
    };
    let info = PolicyInfo {
        kind,
        provision: provision.to_string(),
        summary: p.annotation("summary").unwrap_or_default().to_string(),
        effect,
    };
    Ok((id.clone(), info, p.new_id(PolicyId::new(&id))))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn files() -> BTreeMap<String, String> {
        EMBEDDED
            .iter()
            .map(|(n, t)| ((*n).to_string(), (*t).to_string()))
            .collect()
    }

    #[test]
    fn the_embedded_set_loads_and_every_policy_has_examples() {
        let n = Norms::embedded().unwrap();
        assert_eq!(n.regulations().collect::<Vec<_>>(), ["GDPR", "HIPAA"]);
        let (_, policies, examples) = n.describe("hipaa").unwrap();
        assert!(policies >= 10 && examples >= 2 * policies);
        assert_eq!(
            n.provision("hipaa-164.508-a3-marketing"),
            Some("45 CFR 164.508(a)(3)")
        );
        assert_eq!(
            n.provision("gdpr-6-1-no-lawful-basis"),
            Some("GDPR art. 6(1)")
        );
    }

    #[test]
    fn a_policy_whose_example_fails_is_refused() {
        // Weaken the marketing prohibition: its must-match example no longer matches.
        let mut f = files();
        let h = f.get_mut("hipaa.cedar").unwrap();
        *h = h.replace(
            r#"context.purpose == "marketing" && (!context.authorization"#,
            r#"context.purpose == "marketing" && context.consent && (!context.authorization"#,
        );
        let e = Norms::from_files(f).unwrap_err().to_string();
        assert!(
            e.contains("hipaa-164.508-a3-marketing") && e.contains("expected a match"),
            "{e}"
        );
    }

    #[test]
    fn a_policy_that_does_not_fit_the_schema_is_refused() {
        let mut f = files();
        let h = f.get_mut("gdpr.cedar").unwrap();
        *h = h.replace("context.consent &&", "context.consented &&");
        let e = Norms::from_files(f).unwrap_err().to_string();
        assert!(e.contains("schema validation"), "{e}");
    }

    #[test]
    fn a_policy_without_examples_or_annotations_is_refused() {
        let mut f = files();
        f.get_mut("gdpr.cedar").unwrap().push_str(
            "\n@id(\"gdpr-extra\")\n@kind(\"norm\")\n@provision(\"GDPR art. 5\")\npermit (principal, action, resource) when { context.purpose == \"archiving\" };\n",
        );
        let e = Norms::from_files(f).unwrap_err().to_string();
        assert!(e.contains("gdpr-extra") && e.contains("example"), "{e}");
        let mut f = files();
        f.get_mut("gdpr.cedar")
            .unwrap()
            .push_str("\npermit (principal, action, resource);\n");
        let e = Norms::from_files(f).unwrap_err().to_string();
        assert!(e.contains("no @id"), "{e}");
    }

    #[test]
    fn changing_any_file_changes_the_hash() {
        let a = Norms::embedded().unwrap().hash();
        let mut f = files();
        f.get_mut("gdpr.toml").unwrap().push_str("\n# reviewed\n");
        assert_ne!(Norms::from_files(f).unwrap().hash(), a);
    }
}
