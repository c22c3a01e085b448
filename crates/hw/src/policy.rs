//! A regulator's appraisal policy for hardware evidence, loaded from TOML: which TCB, platform flags, measurements, GPU versions and model weights it accepts.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::nvidia::{GpuVerified, ReferenceCheck, RevocationStatus};
use crate::tdx::{Report, SgxReport, TdReport, TdxVerified, Tee};

/// Largest policy file accepted.
pub const MAX_POLICY_BYTES: usize = 256 * 1024;

/// Why a policy file could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// Over [`MAX_POLICY_BYTES`].
    #[error("policy is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size of the input.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// Not UTF-8.
    #[error("policy is not utf-8")]
    NotUtf8,
    /// Not valid TOML for this schema (unknown keys included).
    #[error("policy does not parse: {0}")]
    Toml(#[from] toml::de::Error),
    /// A reference value is not hex of the right length.
    #[error("policy value `{field}` entry `{value}` is not {bytes} bytes of hex")]
    BadHex {
        /// The field.
        field: String,
        /// The offending value.
        value: String,
        /// Expected length.
        bytes: usize,
    },
    /// A reference field the policy schema does not know.
    #[error("`tdx.reference.{field}` is not a report field")]
    UnknownReference {
        /// The unknown name.
        field: String,
    },
    /// A value outside the known set (a misspelt TEE or TCB status would
    /// otherwise silently never match).
    #[error("`{field}` value `{value}` is not one of the known values")]
    UnknownValue {
        /// The field.
        field: &'static str,
        /// The value.
        value: String,
    },
    /// An unsupported schema version.
    #[error("policy version {got} is not supported (expected 1)")]
    Version {
        /// The version found.
        got: u32,
    },
}

/// Evidence the policy does not accept, naming the field that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyViolation {
    /// The policy has no section for this kind of evidence.
    #[error("policy has no `[{section}]` section: `{section}` evidence is not accepted")]
    NoSection {
        /// `tdx`, `gpu` or `models`.
        section: &'static str,
    },
    /// A value is not among the accepted ones.
    #[error("`{field}` is `{got}`, which the policy does not accept")]
    NotAccepted {
        /// Dotted field name, e.g. `tdx.rtmr1`.
        field: String,
        /// The value found (hex for bytes).
        got: String,
    },
    /// A platform property is present but the policy does not allow it.
    #[error("`{field}` is set and the policy does not allow it")]
    NotAllowed {
        /// Dotted field name, e.g. `tdx.smt_enabled`.
        field: String,
    },
    /// A value the policy constrains is absent from the evidence.
    #[error("`{field}` is absent from the evidence")]
    Missing {
        /// Dotted field name.
        field: String,
    },
}

impl PolicyViolation {
    /// The dotted name of the field that failed.
    #[must_use]
    pub fn field(&self) -> &str {
        match self {
            Self::NoSection { section } => section,
            Self::NotAccepted { field, .. }
            | Self::NotAllowed { field }
            | Self::Missing { field } => field,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: u32,
    #[serde(default)]
    tdx: Option<RawTdx>,
    #[serde(default)]
    gpu: Option<RawGpu>,
    #[serde(default)]
    models: Option<RawModels>,
    #[serde(default)]
    sandbox: Option<RawSandbox>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    min_landlock_abi: u8,
    require_confined_tools: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTdx {
    accepted_tees: Vec<String>,
    accepted_tcb_statuses: Vec<String>,
    #[serde(default)]
    accepted_advisory_ids: Vec<String>,
    allow_dynamic_platform: bool,
    allow_cached_keys: bool,
    allow_smt: bool,
    require_collateral_window: bool,
    #[serde(default)]
    reference: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    accepted_driver_versions: Vec<String>,
    accepted_vbios_versions: Vec<String>,
    require_nonce: bool,
    require_reference_measurements: bool,
    allow_certificate_hold: bool,
    dangerous_accept_unchecked_revocation: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModels {
    accepted_weights_sha256: Vec<String>,
}

/// Report fields a policy can pin: name, size, and the TEE whose reports carry
/// it. A field is checked only against reports of its TEE; which TEEs are
/// accepted at all is `accepted_tees`.
const REFERENCE_FIELDS: &[(&str, usize, Tee)] = &[
    ("mr_td", 48, Tee::Tdx),
    ("rtmr0", 48, Tee::Tdx),
    ("rtmr1", 48, Tee::Tdx),
    ("rtmr2", 48, Tee::Tdx),
    ("rtmr3", 48, Tee::Tdx),
    ("mr_config_id", 48, Tee::Tdx),
    ("mr_owner", 48, Tee::Tdx),
    ("mr_owner_config", 48, Tee::Tdx),
    ("mr_seam", 48, Tee::Tdx),
    ("mr_signer_seam", 48, Tee::Tdx),
    ("td_attributes", 8, Tee::Tdx),
    ("xfam", 8, Tee::Tdx),
    ("mr_enclave", 32, Tee::Sgx),
    ("mr_signer", 32, Tee::Sgx),
];

/// TDX/SGX appraisal rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TdxRules {
    accepted_tees: Vec<String>,
    accepted_tcb_statuses: Vec<String>,
    accepted_advisory_ids: Vec<String>,
    allow_dynamic_platform: bool,
    allow_cached_keys: bool,
    allow_smt: bool,
    require_collateral_window: bool,
    reference: BTreeMap<String, Vec<Vec<u8>>>,
}

/// GPU appraisal rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GpuRules {
    accepted_driver_versions: Vec<String>,
    accepted_vbios_versions: Vec<String>,
    require_nonce: bool,
    require_reference_measurements: bool,
    allow_certificate_hold: bool,
    dangerous_accept_unchecked_revocation: bool,
}

/// A regulator's policy. Every section is optional; evidence of a kind whose
/// section is absent is refused. Inside a section every rule is explicit: the
/// schema has no defaults for acceptance decisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegulatorPolicy {
    tdx: Option<TdxRules>,
    gpu: Option<GpuRules>,
    accepted_weights_sha256: Option<Vec<[u8; 32]>>,
    sandbox: Option<SandboxRules>,
}

/// What a regulator requires of the kernel layer that confined the tools (the
/// `[sandbox]` section; without it, nothing is required of the tools' confinement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SandboxRules {
    /// The oldest Landlock ABI accepted for a confined tool call.
    pub min_landlock_abi: u8,
    /// Whether every tool output must have come from a confined tool.
    pub require_confined_tools: bool,
}

fn decode_hex(field: &str, value: &str, bytes: usize) -> Result<Vec<u8>, PolicyError> {
    let bad = || PolicyError::BadHex {
        field: field.to_owned(),
        value: value.to_owned(),
        bytes,
    };
    let decoded = hex::decode(value).map_err(|_| bad())?;
    if decoded.len() == bytes {
        Ok(decoded)
    } else {
        Err(bad())
    }
}

const TEES: &[&str] = &["tdx", "sgx"];
const TCB_STATUSES: &[&str] = &[
    "UpToDate",
    "SWHardeningNeeded",
    "ConfigurationNeeded",
    "ConfigurationAndSWHardeningNeeded",
    "OutOfDate",
    "OutOfDateConfigurationNeeded",
    "TDRelaunchAdvised",
    "TDRelaunchAdvisedConfigurationNeeded",
];

fn known(field: &'static str, values: &[String], allowed: &[&str]) -> Result<(), PolicyError> {
    match values.iter().find(|v| !allowed.contains(&v.as_str())) {
        Some(value) => Err(PolicyError::UnknownValue {
            field,
            value: value.clone(),
        }),
        None => Ok(()),
    }
}

fn tdx_rules(raw: RawTdx) -> Result<TdxRules, PolicyError> {
    known("tdx.accepted_tees", &raw.accepted_tees, TEES)?;
    // `Revoked` is deliberately absent: no policy can accept it.
    known(
        "tdx.accepted_tcb_statuses",
        &raw.accepted_tcb_statuses,
        TCB_STATUSES,
    )?;
    let mut reference = BTreeMap::new();
    for (field, values) in raw.reference {
        let Some((_, bytes, _)) = REFERENCE_FIELDS.iter().find(|(name, ..)| *name == field) else {
            return Err(PolicyError::UnknownReference { field });
        };
        let decoded = values
            .iter()
            .map(|v| decode_hex(&format!("tdx.reference.{field}"), v, *bytes))
            .collect::<Result<Vec<_>, _>>()?;
        reference.insert(field, decoded);
    }
    Ok(TdxRules {
        accepted_tees: raw.accepted_tees,
        accepted_tcb_statuses: raw.accepted_tcb_statuses,
        accepted_advisory_ids: raw.accepted_advisory_ids,
        allow_dynamic_platform: raw.allow_dynamic_platform,
        allow_cached_keys: raw.allow_cached_keys,
        allow_smt: raw.allow_smt,
        require_collateral_window: raw.require_collateral_window,
        reference,
    })
}

fn not_accepted(field: impl Into<String>, got: impl Into<String>) -> PolicyViolation {
    PolicyViolation::NotAccepted {
        field: field.into(),
        got: got.into(),
    }
}

/// Report fields by policy name.
fn report_field<'r>(report: &'r Report, name: &str) -> Option<&'r [u8]> {
    match report {
        Report::Td(td) => Some(match name {
            "mr_td" => &td.mr_td[..],
            "rtmr0" => td.rtmr.first()?,
            "rtmr1" => td.rtmr.get(1)?,
            "rtmr2" => td.rtmr.get(2)?,
            "rtmr3" => td.rtmr.get(3)?,
            "mr_config_id" => &td.mr_config_id[..],
            "mr_owner" => &td.mr_owner[..],
            "mr_owner_config" => &td.mr_owner_config[..],
            "mr_seam" => &td.mr_seam[..],
            "mr_signer_seam" => &td.mr_signer_seam[..],
            "td_attributes" => &td.td_attributes[..],
            "xfam" => &td.xfam[..],
            _ => return None,
        }),
        Report::Sgx(sgx) => Some(match name {
            "mr_enclave" => &sgx.mr_enclave[..],
            "mr_signer" => &sgx.mr_signer[..],
            _ => return None,
        }),
    }
}

impl RegulatorPolicy {
    /// Parses a policy from TOML text. Unknown keys are errors.
    ///
    /// # Errors
    /// [`PolicyError`] for oversized, non-UTF-8, malformed or invalid policies.
    pub fn from_toml(bytes: &[u8]) -> Result<Self, PolicyError> {
        if bytes.len() > MAX_POLICY_BYTES {
            return Err(PolicyError::TooLarge {
                got: bytes.len(),
                limit: MAX_POLICY_BYTES,
            });
        }
        let text = std::str::from_utf8(bytes).map_err(|_| PolicyError::NotUtf8)?;
        let raw: RawPolicy = toml::from_str(text)?;
        if raw.version != 1 {
            return Err(PolicyError::Version { got: raw.version });
        }
        let accepted_weights_sha256 = raw
            .models
            .map(|m| {
                m.accepted_weights_sha256
                    .iter()
                    .map(|h| {
                        let v = decode_hex(
                            "models.accepted_weights_sha256",
                            &h.to_ascii_lowercase(),
                            32,
                        )?;
                        let mut out = [0u8; 32];
                        out.copy_from_slice(&v);
                        Ok(out)
                    })
                    .collect::<Result<Vec<_>, PolicyError>>()
            })
            .transpose()?;
        Ok(Self {
            tdx: raw.tdx.map(tdx_rules).transpose()?,
            gpu: raw.gpu.map(|g| GpuRules {
                accepted_driver_versions: g.accepted_driver_versions,
                accepted_vbios_versions: g.accepted_vbios_versions,
                require_nonce: g.require_nonce,
                require_reference_measurements: g.require_reference_measurements,
                allow_certificate_hold: g.allow_certificate_hold,
                dangerous_accept_unchecked_revocation: g.dangerous_accept_unchecked_revocation,
            }),
            accepted_weights_sha256,
            sandbox: raw.sandbox.map(|r| SandboxRules {
                min_landlock_abi: r.min_landlock_abi,
                require_confined_tools: r.require_confined_tools,
            }),
        })
    }

    /// The `[sandbox]` section, if the policy has one.
    #[must_use]
    pub fn sandbox(&self) -> Option<SandboxRules> {
        self.sandbox
    }

    /// Appraises a verified quote; the first rule it breaks is returned.
    ///
    /// # Errors
    /// [`PolicyViolation`] naming the field.
    pub fn appraise_tdx(&self, v: &TdxVerified) -> Result<(), PolicyViolation> {
        let rules = self
            .tdx
            .as_ref()
            .ok_or(PolicyViolation::NoSection { section: "tdx" })?;
        let tee = v.tee.to_string();
        if !rules.accepted_tees.contains(&tee) {
            return Err(not_accepted("tdx.tee", tee));
        }
        let status = v.tcb_status.as_str();
        if !rules.accepted_tcb_statuses.iter().any(|s| s == status) {
            return Err(not_accepted("tdx.tcb_status", status));
        }
        if let Some(id) = v.advisory_ids.iter().find(|id| {
            !rules
                .accepted_advisory_ids
                .iter()
                .any(|a| a.eq_ignore_ascii_case(id))
        }) {
            return Err(not_accepted("tdx.advisory_ids", id.clone()));
        }
        let flags = [
            (
                "tdx.dynamic_platform",
                v.platform.dynamic_platform,
                rules.allow_dynamic_platform,
            ),
            (
                "tdx.cached_keys",
                v.platform.cached_keys,
                rules.allow_cached_keys,
            ),
            ("tdx.smt_enabled", v.platform.smt_enabled, rules.allow_smt),
        ];
        if let Some((field, _, _)) = flags
            .iter()
            .find(|(_, set, allowed)| *set == Some(true) && !allowed)
        {
            return Err(PolicyViolation::NotAllowed {
                field: (*field).to_owned(),
            });
        }
        if rules.require_collateral_window && !v.collateral.at_within_window() {
            return Err(not_accepted(
                "tdx.collateral_window",
                format!("verification time {} outside", v.collateral.at_unix),
            ));
        }
        let debug = v.report.as_td().is_some_and(TdReport::debug)
            || v.report.as_sgx().is_some_and(SgxReport::debug);
        if debug {
            return Err(PolicyViolation::NotAllowed {
                field: "tdx.debug".into(),
            });
        }
        for (name, accepted) in &rules.reference {
            let applies = REFERENCE_FIELDS
                .iter()
                .any(|(n, _, tee)| n == name && *tee == v.tee);
            if !applies {
                continue;
            }
            let field = format!("tdx.{name}");
            let got = report_field(&v.report, name).ok_or_else(|| PolicyViolation::Missing {
                field: field.clone(),
            })?;
            if !accepted.iter().any(|a| a.as_slice() == got) {
                return Err(not_accepted(field, hex::encode(got)));
            }
        }
        Ok(())
    }

    /// Appraises verified GPU evidence; the first rule it breaks is returned.
    ///
    /// # Errors
    /// [`PolicyViolation`] naming the field.
    pub fn appraise_gpu(&self, v: &GpuVerified) -> Result<(), PolicyViolation> {
        let rules = self
            .gpu
            .as_ref()
            .ok_or(PolicyViolation::NoSection { section: "gpu" })?;
        let driver = v
            .driver_version
            .as_deref()
            .ok_or_else(|| PolicyViolation::Missing {
                field: "gpu.driver_version".into(),
            })?;
        if !rules.accepted_driver_versions.iter().any(|d| d == driver) {
            return Err(not_accepted("gpu.driver_version", driver));
        }
        let vbios = v
            .vbios_version
            .as_deref()
            .ok_or_else(|| PolicyViolation::Missing {
                field: "gpu.vbios_version".into(),
            })?;
        if !rules
            .accepted_vbios_versions
            .iter()
            .any(|d| d.eq_ignore_ascii_case(vbios))
        {
            return Err(not_accepted("gpu.vbios_version", vbios));
        }
        if rules.require_nonce && !v.nonce_checked {
            return Err(PolicyViolation::Missing {
                field: "gpu.nonce_checked".into(),
            });
        }
        if rules.require_reference_measurements && v.reference == ReferenceCheck::NotSupplied {
            return Err(PolicyViolation::Missing {
                field: "gpu.reference_measurements".into(),
            });
        }
        for cert in &v.revocation {
            let allowed = match cert.status {
                RevocationStatus::Good => true,
                RevocationStatus::OnHold { .. } => rules.allow_certificate_hold,
                RevocationStatus::NotChecked | RevocationStatus::Unknown => {
                    rules.dangerous_accept_unchecked_revocation
                }
                RevocationStatus::Revoked { .. } => false,
            };
            if !allowed {
                return Err(not_accepted(
                    "gpu.revocation",
                    format!("{:?} for `{}`", cert.status, cert.subject),
                ));
            }
        }
        Ok(())
    }

    /// Checks a model's SHA-256 weights hash (hex) against the accepted list.
    ///
    /// # Errors
    /// [`PolicyViolation`] when the section is absent or the hash is not listed.
    pub fn check_weights_hash(&self, sha256_hex: &str) -> Result<(), PolicyViolation> {
        let accepted = self
            .accepted_weights_sha256
            .as_ref()
            .ok_or(PolicyViolation::NoSection { section: "models" })?;
        let got = hex::decode(sha256_hex.to_ascii_lowercase()).ok();
        if got.is_some_and(|g| accepted.iter().any(|a| a.as_slice() == g)) {
            Ok(())
        } else {
            Err(not_accepted("models.weights_sha256", sha256_hex))
        }
    }
}
