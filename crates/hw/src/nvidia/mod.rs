//! NVIDIA GPU evidence (SPDM measurements signed by the GPU): collection through NVML and offline verification in pure Rust.

mod c14n;
#[cfg(feature = "collect")]
pub mod collect;
mod fwid;
mod ocsp;
mod reference;
pub mod rim;
mod serialized;
mod spdm;

use std::time::SystemTime;

#[cfg(feature = "collect")]
pub use collect::{CollectError, GpuEvidence, collect};
pub use fwid::TCG_DICE_FWID_EXTENSION;
pub use ocsp::{
    CertRevocation, MAX_OCSP_RESPONSE_BYTES, MAX_OCSP_RESPONSES, OcspError, RevocationStatus,
};
pub use reference::{ReferenceCheck, ReferenceError, ReferenceMeasurements};
pub use serialized::{MAX_SERIALIZED_BYTES, SerializedError, SerializedEvidence, parse_serialized};
pub use spdm::{
    MeasurementBlock, NONCE_LEN, OPAQUE_DRIVER_VERSION, OPAQUE_FWID, OPAQUE_VBIOS_VERSION,
    OpaqueField, REQUEST_LEN, SIGNATURE_LEN, SpdmError,
};

use crate::time::unix_secs;
use crate::x509::{Cert, fingerprint, parse_pem_chain, verify_chain, verify_raw_p384};
pub use crate::x509::{ChainError, MAX_CHAIN_CERTS};

/// SHA-256 fingerprint of the NVIDIA Device Identity CA, the self-signed root
/// of every Hopper attestation chain (`CN=NVIDIA Device Identity CA, O=NVIDIA`,
/// valid 2021-11-05 to 9999-12-31). Taken from the root of the genuine chains
/// in the shared vectors (`nvtrust/hopperCertChain.txt`, identical to
/// nvtrust's `verifier_device_root.pem`), matching the fingerprint NVIDIA's
/// attestation tools ship.
pub const NVIDIA_DEVICE_IDENTITY_ROOT_SHA256: [u8; 32] = fingerprint(
    b"10:2B:F6:59:D5:41:96:14:C9:D8:E6:AE:CE:BC:80:45:4E:B2:6B:1D:F6:A7:69:AC:72:0B:9A:69:0B:16:7B:48",
);

/// Largest evidence accepted (NVML's report buffer is 8 KiB).
pub const MAX_EVIDENCE_BYTES: usize = 16 * 1024;
/// Largest PEM chain accepted (NVML's chain buffer is 5 KiB).
pub const MAX_CHAIN_PEM_BYTES: usize = 32 * 1024;

/// Why GPU evidence was not verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuError {
    /// An input is over its limit.
    #[error("{what} is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Which input.
        what: &'static str,
        /// Its size.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The evidence is not a well-formed SPDM exchange.
    #[error("evidence is malformed: {0}")]
    Spdm(#[from] SpdmError),
    /// The certificate chain does not verify to the pinned root.
    #[error("certificate chain refused: {0}")]
    Chain(#[from] ChainError),
    /// The evidence signature does not verify with the leaf certificate's key.
    #[error("evidence signature does not verify with the attestation certificate's key")]
    BadSignature,
    /// The evidence or the leaf certificate carries no FWID.
    #[error("no fwid in the {0}")]
    FwidMissing(&'static str),
    /// The firmware id in the evidence differs from the one certified.
    #[error("evidence fwid `{report}` differs from certificate fwid `{certificate}`")]
    FwidMismatch {
        /// FWID in the opaque data, hex.
        report: String,
        /// FWID in the leaf certificate, hex.
        certificate: String,
    },
    /// The request nonce is not the one expected.
    #[error("nonce is `{got}`, expected `{expected}`")]
    NonceMismatch {
        /// Expected, hex.
        expected: String,
        /// In the signed request, hex.
        got: String,
    },
    /// A stapled OCSP response was refused.
    #[error("ocsp: {0}")]
    Ocsp(#[from] OcspError),
    /// A certificate of the chain is revoked (not merely on hold).
    #[error("certificate `{subject}` is revoked ({reason})")]
    Revoked {
        /// The certificate.
        subject: String,
        /// The CRL reason.
        reason: String,
    },
    /// The measurements do not match the reference measurements supplied.
    #[error("measurements: {0}")]
    Reference(#[from] ReferenceError),
}

/// What verified GPU evidence says. Facts only; acceptance is
/// [`crate::policy::RegulatorPolicy::appraise_gpu`]'s job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuVerified {
    /// Nonce in the signed request.
    pub nonce: [u8; NONCE_LEN],
    /// Whether the nonce was compared with an expected one (false: freshness unproven).
    pub nonce_checked: bool,
    /// Nonce the GPU added to its response.
    pub response_nonce: [u8; NONCE_LEN],
    /// Measurement blocks, in evidence order.
    pub measurements: Vec<MeasurementBlock>,
    /// NVIDIA opaque-data fields, in evidence order.
    pub opaque: Vec<OpaqueField>,
    /// Driver version from the opaque data.
    pub driver_version: Option<String>,
    /// VBIOS version from the opaque data, as `96.00.9f.00.01`.
    pub vbios_version: Option<String>,
    /// SHA-384 FWID, equal in evidence and leaf certificate.
    pub fwid: [u8; 48],
    /// Subjects of the chain, leaf first.
    pub chain_subjects: Vec<String>,
    /// Revocation status of every certificate but the root.
    pub revocation: Vec<CertRevocation>,
    /// Outcome of the reference-measurement comparison.
    pub reference: ReferenceCheck,
    /// Zero bytes after the signature, ignored.
    pub padding: usize,
}

impl GpuVerified {
    /// The value of an opaque-data field.
    #[must_use]
    pub fn opaque_field(&self, kind: u16) -> Option<&[u8]> {
        self.opaque
            .iter()
            .find(|f| f.kind == kind)
            .map(|f| f.value.as_slice())
    }
}

/// Verifies GPU evidence offline against a pinned root.
#[derive(Clone, Debug)]
pub struct GpuVerifier {
    root_sha256: [u8; 32],
    at: Option<SystemTime>,
    stapled_ocsp: Vec<Vec<u8>>,
    references: Vec<ReferenceMeasurements>,
}

impl Default for GpuVerifier {
    fn default() -> Self {
        Self::nvidia()
    }
}

impl GpuVerifier {
    /// Verifier trusting the NVIDIA Device Identity CA only.
    #[must_use]
    pub fn nvidia() -> Self {
        Self {
            root_sha256: NVIDIA_DEVICE_IDENTITY_ROOT_SHA256,
            at: None,
            stapled_ocsp: Vec::new(),
            references: Vec::new(),
        }
    }

    /// Verifier trusting another root (test PKIs). Never for evidence a
    /// regulator relies on.
    #[must_use]
    pub fn dangerous_with_root(root_sha256: [u8; 32]) -> Self {
        Self {
            root_sha256,
            ..Self::nvidia()
        }
    }

    /// Checks certificate validity at `at` instead of now.
    #[must_use]
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(at);
        self
    }

    /// OCSP responses captured with the evidence (DER), checked offline.
    #[must_use]
    pub fn stapled_ocsp(mut self, responses: Vec<Vec<u8>>) -> Self {
        self.stapled_ocsp = responses;
        self
    }

    /// Reference measurements the evidence must match (for example from a
    /// verified driver RIM and a verified VBIOS RIM).
    #[must_use]
    pub fn reference(mut self, reference: ReferenceMeasurements) -> Self {
        self.references.push(reference);
        self
    }

    /// Verifies `evidence` (SPDM GET_MEASUREMENTS request || MEASUREMENTS
    /// response, as NVML returns it) with `cert_chain_pem` (leaf first, root
    /// last): chain to the pinned root, signature over the transcript, FWID of
    /// the leaf equal to the FWID in the evidence, nonce, stapled OCSP
    /// responses, reference measurements.
    ///
    /// # Errors
    /// [`GpuError`] naming the first check that failed.
    pub fn verify(
        &self,
        evidence: &[u8],
        cert_chain_pem: &[u8],
        expected_nonce: Option<[u8; NONCE_LEN]>,
    ) -> Result<GpuVerified, GpuError> {
        cap("evidence", evidence.len(), MAX_EVIDENCE_BYTES)?;
        cap(
            "certificate chain",
            cert_chain_pem.len(),
            MAX_CHAIN_PEM_BYTES,
        )?;
        let exchange = spdm::parse(evidence)?;
        let chain = parse_pem_chain(cert_chain_pem)?;
        let at = unix_secs(self.at.unwrap_or_else(SystemTime::now));
        verify_chain(&chain, &self.root_sha256, at)?;
        let leaf = chain.first().ok_or(ChainError::TooShort { got: 0 })?;
        let key = leaf.p384_key(0)?;
        if !verify_raw_p384(&key, exchange.signed, exchange.signature) {
            return Err(GpuError::BadSignature);
        }
        let fwid = check_fwid(leaf, &exchange.opaque)?;
        if let Some(expected) = expected_nonce
            && expected != exchange.request_nonce
        {
            return Err(GpuError::NonceMismatch {
                expected: hex::encode(expected),
                got: hex::encode(exchange.request_nonce),
            });
        }
        let revocation = ocsp::check(&chain, &self.stapled_ocsp, &self.root_sha256, at)?;
        if let Some((subject, reason)) = revocation.iter().find_map(|r| match &r.status {
            RevocationStatus::Revoked { reason, .. } => Some((r.subject.clone(), reason.clone())),
            _ => None,
        }) {
            return Err(GpuError::Revoked {
                subject,
                reason: reason.unwrap_or_else(|| "no reason given".into()),
            });
        }
        let reference = reference::compare(&exchange.blocks, &self.references)?;
        let field = |kind| {
            exchange
                .opaque
                .iter()
                .find(|f| f.kind == kind)
                .map(|f| f.value.as_slice())
        };
        Ok(GpuVerified {
            nonce: exchange.request_nonce,
            nonce_checked: expected_nonce.is_some(),
            response_nonce: exchange.response_nonce,
            driver_version: field(OPAQUE_DRIVER_VERSION).and_then(spdm::driver_version),
            vbios_version: field(OPAQUE_VBIOS_VERSION).and_then(spdm::vbios_version),
            measurements: exchange.blocks,
            opaque: exchange.opaque,
            fwid,
            chain_subjects: chain.iter().map(Cert::subject).collect(),
            revocation,
            reference,
            padding: exchange.padding,
        })
    }
}

fn cap(what: &'static str, got: usize, limit: usize) -> Result<(), GpuError> {
    if got > limit {
        return Err(GpuError::TooLarge { what, got, limit });
    }
    Ok(())
}

fn check_fwid(leaf: &Cert, opaque: &[OpaqueField]) -> Result<[u8; 48], GpuError> {
    let in_report = opaque
        .iter()
        .find(|f| f.kind == OPAQUE_FWID)
        .ok_or(GpuError::FwidMissing("evidence"))?;
    let certified = fwid::leaf_fwid(leaf).ok_or(GpuError::FwidMissing("leaf certificate"))?;
    if in_report.value != certified {
        return Err(GpuError::FwidMismatch {
            report: hex::encode(&in_report.value),
            certificate: hex::encode(certified),
        });
    }
    Ok(certified)
}

/// Verifies evidence against the NVIDIA root, now. See [`GpuVerifier::verify`].
///
/// # Errors
/// [`GpuError`] naming the first check that failed.
pub fn verify(
    evidence: &[u8],
    cert_chain_pem: &[u8],
    expected_nonce: Option<[u8; NONCE_LEN]>,
) -> Result<GpuVerified, GpuError> {
    GpuVerifier::nvidia().verify(evidence, cert_chain_pem, expected_nonce)
}
