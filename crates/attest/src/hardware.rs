//! The `tdx` platform mode: an Intel TDX quote whose report_data is the key binding,
//! optionally with NVIDIA GPU evidence requested with the key-derived nonce; verified
//! offline against Intel's and NVIDIA's pinned roots and the regulator's policy.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use knox_hw::nvidia::{self, GpuVerified};
use knox_hw::policy::RegulatorPolicy;
use knox_hw::tdx::{self, Collateral, TdxVerified};
use knox_types::bundle::PlatformEvidence;
use knox_types::bytes::HexBytes;
use knox_types::canon;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::binding;
use crate::platform::PlatformError;

/// Mode name.
pub const MODE: &str = "tdx";

/// Media type of `tdx` evidence.
pub const MEDIA_TYPE: &str = "application/vnd.knox.tdx-evidence.v1+json";

/// The `evidence` object of a `tdx` platform evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TdxEvidence {
    /// The raw quote.
    pub quote: HexBytes,
    /// Intel collateral (PCK CRL chain, TCB info, QE identity) in dcap-qvl's JSON form,
    /// stapled at attestation time so that verifying needs no network.
    pub collateral: serde_json::Value,
    /// When the quote was produced (Unix seconds): the verification time.
    pub attested_at: u64,
    /// GPU evidence bound by report_data, in device order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuEntry>,
}

/// One GPU's evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEntry {
    /// SPDM GET_MEASUREMENTS request ‖ response ‖ signature.
    pub evidence: HexBytes,
    /// PEM certificate chain, leaf first.
    pub certs: String,
    /// DER OCSP responses stapled at attestation time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ocsp: Vec<HexBytes>,
}

/// SHA-256 of the canonical JSON of the GPU entries, the digest report_data binds;
/// `None` when there are none.
pub fn gpu_digest(gpus: &[GpuEntry]) -> Result<Option<[u8; 32]>, PlatformError> {
    if gpus.is_empty() {
        return Ok(None);
    }
    let bytes = canon::to_canonical(gpus).map_err(|e| PlatformError::Malformed(e.to_string()))?;
    Ok(Some(Sha256::digest(&bytes).into()))
}

/// What a hardware appraisal established.
#[derive(Clone, Debug)]
pub struct HardwareAppraisal {
    /// The verified quote.
    pub tdx: TdxVerified,
    /// The verified GPUs.
    pub gpus: Vec<GpuVerified>,
}

impl HardwareAppraisal {
    /// One line for reports.
    pub fn describe(&self) -> String {
        let mr_td = self
            .tdx
            .report
            .as_td()
            .map(|td| hex::encode(td.mr_td))
            .unwrap_or_default();
        let window = if self.tdx.collateral.at_within_window() {
            "inside"
        } else {
            "OUTSIDE"
        };
        format!(
            "{:?} quote v{}, TCB {}, MRTD {}…, attestation time {window} the collateral window, {} GPU(s) verified",
            self.tdx.tee,
            self.tdx.quote_version,
            self.tdx.tcb_status.as_str(),
            mr_td.get(..16).unwrap_or_default(),
            self.gpus.len()
        )
    }
}

/// Verifies `tdx` evidence: quote and collateral against Intel's root at the
/// attestation time, report_data against the key binding, each GPU against NVIDIA's
/// root with the key-derived nonce, then the regulator's policy.
pub fn appraise(
    e: &PlatformEvidence,
    public_key: &[u8; 32],
    policy: Option<&RegulatorPolicy>,
    chain_head: Option<&[u8; 32]>,
) -> Result<HardwareAppraisal, PlatformError> {
    if e.media_type != MEDIA_TYPE {
        return Err(PlatformError::Malformed(format!(
            "media type `{}` is not `{MEDIA_TYPE}`",
            e.media_type
        )));
    }
    let ev = TdxEvidence::deserialize(&e.evidence)
        .map_err(|err| PlatformError::Malformed(err.to_string()))?;
    let collateral_bytes = serde_json::to_vec(&ev.collateral)
        .map_err(|err| PlatformError::Malformed(err.to_string()))?;
    let collateral = Collateral::from_json(&collateral_bytes)
        .map_err(|err| PlatformError::Malformed(format!("collateral: {err}")))?;
    let at = UNIX_EPOCH + Duration::from_secs(ev.attested_at);
    let verified = tdx::verify(&ev.quote.0, &collateral, at).map_err(classify)?;
    let expected = binding::refresh_report_data(
        public_key,
        &e.nonce.0,
        gpu_digest(&ev.gpus)?.as_ref(),
        chain_head,
    );
    if verified.report.report_data()[..] != expected[..] || e.report_data.0 != expected {
        return Err(PlatformError::BindingMismatch);
    }
    let nonce = binding::gpu_nonce(public_key, &e.nonce.0);
    let mut gpus = Vec::with_capacity(ev.gpus.len());
    for (i, g) in ev.gpus.iter().enumerate() {
        let verifier = nvidia::GpuVerifier::nvidia()
            .at(at)
            .stapled_ocsp(g.ocsp.iter().map(|o| o.0.clone()).collect());
        let v = verifier
            .verify(&g.evidence.0, g.certs.as_bytes(), Some(nonce))
            .map_err(|err| PlatformError::HardwareInvalid(format!("gpu {i}: {err}")))?;
        gpus.push(v);
    }
    let Some(policy) = policy else {
        return Err(PlatformError::NoPolicy);
    };
    policy
        .appraise_tdx(&verified)
        .map_err(|v| PlatformError::PolicyRejected(v.to_string()))?;
    for g in &gpus {
        policy
            .appraise_gpu(g)
            .map_err(|v| PlatformError::PolicyRejected(v.to_string()))?;
    }
    Ok(HardwareAppraisal {
        tdx: verified,
        gpus,
    })
}

/// Genuine evidence the platform's state makes unacceptable (an outdated or revoked
/// TCB, collateral not current at the attestation time) is refused; evidence that does
/// not verify (signatures, chains, encoding) is invalid.
fn classify(err: tdx::TdxError) -> PlatformError {
    use tdx::{Rejection, TdxError};
    match &err {
        TdxError::CollateralNotCurrent { .. }
        | TdxError::Rejected {
            kind: Rejection::NoMatchingTcbLevel | Rejection::Revoked | Rejection::Expired,
            ..
        } => PlatformError::PolicyRejected(format!("tdx quote: {err}")),
        _ => PlatformError::HardwareInvalid(format!("tdx quote: {err}")),
    }
}

/// The time now as Unix seconds.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Collection on a TDX guest (with NVIDIA GPUs in confidential-computing mode when
/// asked): a [`crate::PlatformBackend`] for real hardware.
#[cfg(feature = "collect")]
pub mod collect {
    use std::path::PathBuf;

    use knox_types::bundle::{PlatformEvidence, PlatformMode};
    use knox_types::bytes::HexBytes;

    use super::{GpuEntry, MEDIA_TYPE, TdxEvidence, gpu_digest, now_unix};
    use crate::binding;
    use crate::platform::{KeyBinding, PlatformBackend, PlatformError};

    /// The TDX backend.
    #[derive(Clone, Debug)]
    pub struct TdxBackend {
        /// configfs-tsm report directory (`/sys/kernel/config/tsm/report` normally).
        pub configfs: PathBuf,
        /// Intel collateral for this platform, fetched beforehand from a PCCS or Intel
        /// PCS (dcap-qvl JSON form): it is stapled into every bundle.
        pub collateral: serde_json::Value,
        /// Also collect NVIDIA GPU evidence through NVML.
        pub gpus: bool,
    }

    impl PlatformBackend for TdxBackend {
        fn mode(&self) -> PlatformMode {
            PlatformMode::Tdx
        }

        fn collect(&self, b: &KeyBinding) -> Result<PlatformEvidence, PlatformError> {
            let mut gpus = Vec::new();
            if self.gpus {
                let nonce = binding::gpu_nonce(&b.public_key, &b.nonce);
                let evidence =
                    knox_hw::nvidia::collect(&nonce).map_err(|e| PlatformError::Unavailable {
                        backend: "nvidia",
                        why: e.to_string(),
                    })?;
                for g in evidence {
                    let certs =
                        String::from_utf8(g.cert_chain_pem).map_err(|_| PlatformError::Failed {
                            backend: "nvidia",
                            why: "certificate chain is not PEM text".into(),
                        })?;
                    gpus.push(GpuEntry {
                        evidence: HexBytes(g.evidence),
                        certs,
                        ocsp: Vec::new(),
                    });
                }
            }
            let report_data =
                binding::report_data(&b.public_key, &b.nonce, gpu_digest(&gpus)?.as_ref());
            let quote = knox_hw::tdx::ConfigfsTsm::new(self.configfs.clone())
                .quote(&report_data)
                .map_err(|e| PlatformError::Unavailable {
                    backend: "tdx",
                    why: e.to_string(),
                })?;
            let evidence = TdxEvidence {
                quote: HexBytes(quote),
                collateral: self.collateral.clone(),
                attested_at: now_unix(),
                gpus,
            };
            Ok(PlatformEvidence {
                mode: PlatformMode::Tdx,
                media_type: MEDIA_TYPE.into(),
                report_data: HexBytes(report_data.to_vec()),
                nonce: HexBytes(b.nonce.clone()),
                evidence: serde_json::to_value(evidence)
                    .map_err(|e| PlatformError::Malformed(e.to_string()))?,
            })
        }
    }
}
