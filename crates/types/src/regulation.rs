//! The regulation guard's vocabulary: the run's regulation context (recipient
//! directory, consent records, per-task sender and purpose — carried by the APM, so the
//! hash the run is signed under binds them) and the contextual-integrity information
//! flow `φ = (sender, recipient, subject, information types, transmission principle)`
//! that a `check` node records for every disclosing action.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The facts a run configuration gives the regulation guard. Carried in the APM
/// (`guards.regulation.context`), so every verdict is recomputable from signed data.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegulationContext {
    /// Known parties: who an address belongs to.
    #[serde(default)]
    pub directory: Vec<DirectoryEntry>,
    /// Consent records and authorizations.
    #[serde(default)]
    pub consents: Vec<ConsentRecord>,
    /// Per task: on whose behalf the agent discloses and for what purpose.
    #[serde(default)]
    pub tasks: BTreeMap<u32, TaskContext>,
    /// Used for a task without its own entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_task: Option<TaskContext>,
    /// The controller's obligations beside single flows (`transparency`, `dpia`,
    /// `records_of_processing`, …): each `met`, `unmet` or `not_required`. A regulation
    /// whose required obligations are not stated decides no flow `compliant`
    /// (`docs/regulation.md`, "Obligations").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub obligations: BTreeMap<String, String>,
}

/// One party of the recipient directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryEntry {
    /// Addresses that reach this party (e-mail, phone number, user name, URL, id);
    /// canonicalized before comparison.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// E-mail or web domains that belong to it (`clinic.example` matches
    /// `a@clinic.example` and `https://portal.clinic.example/…`).
    #[serde(default)]
    pub domains: Vec<String>,
    /// Role: `self`, `patient`, `health_care_provider`, `covered_entity`,
    /// `business_associate`, `health_plan`, `insurer`, `employer`, `family_member`,
    /// `marketing_vendor`, `data_broker`, `public_authority`, `controller`, `processor`,
    /// `third_party`, …
    pub role: String,
    /// Organisation name.
    #[serde(default)]
    pub organisation: String,
    /// ISO 3166-1 alpha-2 country code of the party's establishment.
    pub jurisdiction: String,
    /// Business associate agreement in place (HIPAA 45 CFR 164.502(e), 164.504(e)).
    #[serde(default)]
    pub baa: bool,
    /// Appropriate safeguards for a transfer (GDPR art. 46: standard contractual
    /// clauses, binding corporate rules).
    #[serde(default)]
    pub safeguards: bool,
}

/// A consent, explicit consent or HIPAA authorization given for disclosures to one
/// party for some purposes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsentRecord {
    /// The recipient: one of its addresses, or its organisation name.
    pub recipient: String,
    /// Purposes covered (`*` covers all).
    pub purposes: Vec<String>,
    /// `consent` (GDPR art. 6(1)(a)), `explicit` (art. 9(2)(a); implies consent) or
    /// `authorization` (HIPAA 164.508).
    pub kind: String,
}

/// On whose behalf, and why, a task discloses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskContext {
    /// The sending party: an address listed in the directory.
    pub sender: String,
    /// The declared purpose (`treatment`, `payment`, `health_care_operations`,
    /// `marketing`, `sale`, `research`, `public_health`, `contract`,
    /// `legal_obligation`, `care_involvement`, `personal`, …).
    pub purpose: String,
}

/// A party as the norms see it: the directory entry an address resolved to, with the
/// jurisdiction facts derived from its country.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartyFacts {
    /// The canonical address (or `public`, or `implicit:<tool>`).
    pub id: String,
    /// Whether the directory lists it.
    pub listed: bool,
    /// Role (`unknown` when not listed).
    pub role: String,
    /// Organisation.
    pub organisation: String,
    /// Country code (`unknown` when not listed).
    pub jurisdiction: String,
    /// In the EU/EEA.
    pub in_eea: bool,
    /// Covered by an EU adequacy decision (GDPR art. 45).
    pub adequacy: bool,
    /// Business associate agreement in place.
    pub baa: bool,
    /// Art. 46 safeguards in place.
    pub safeguards: bool,
}

/// One recipient of a disclosure with the consent facts that hold for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipientFacts {
    /// The party.
    pub party: PartyFacts,
    /// A consent record covers it for the purpose.
    pub consent: bool,
    /// An explicit consent covers it.
    pub explicit_consent: bool,
    /// A HIPAA authorization covers it.
    pub authorization: bool,
    /// The recipient is the data subject (the user sending the user's own data to
    /// the user).
    pub to_subject: bool,
}

/// `φ`: one disclosing action as a contextual-integrity information flow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InfoFlow {
    /// The disclosing tool.
    pub tool: String,
    /// The sender.
    pub sender: PartyFacts,
    /// Every recipient.
    pub recipients: Vec<RecipientFacts>,
    /// Whose data: `user`, `third_party`, `mixed`, or `unknown` (no label reached the
    /// content).
    pub subject: String,
    /// Information types the disclosed content carries.
    pub info_types: BTreeSet<String>,
    /// The declared purpose (transmission principle).
    pub purpose: String,
    /// Where the labels came from: `tool_output` node sequence numbers, and
    /// `tool` when the tool's disclosure carries data by itself.
    pub sources: Vec<String>,
}

/// One regulation's decision for one recipient.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegulationDecision {
    /// `GDPR`, `HIPAA`.
    pub regulation: String,
    /// The recipient's id.
    pub recipient: String,
    /// `compliant`, `non_compliant` or `not_applicable`.
    pub verdict: String,
    /// Ids of the deciding policies (the scope policies for `not_applicable`: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// The provisions those policies cite.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provisions: Vec<String>,
    /// Why the norms could not decide, in words: a term of the flow the regulation
    /// vocabulary does not define (the verdict is then `not_applicable`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}
