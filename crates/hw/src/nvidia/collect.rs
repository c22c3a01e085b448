//! GPU evidence collection through NVML's confidential-computing API (libnvidia-ml.so.1 loaded at run time by `nvml-wrapper`).

use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

use super::{MAX_CHAIN_PEM_BYTES, MAX_EVIDENCE_BYTES, NONCE_LEN};

/// Why no GPU evidence was collected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// libnvidia-ml.so.1 could not be loaded or initialised.
    #[error("nvml is not available (no nvidia driver on this host?): {0}")]
    NvmlUnavailable(NvmlError),
    /// NVML sees no GPU.
    #[error("nvml reports no gpu")]
    NoGpu,
    /// The system or GPU is not in confidential-computing mode.
    #[error("gpu {index} is not in confidential-computing mode")]
    CcModeOff {
        /// NVML device index.
        index: u32,
    },
    /// An NVML call failed.
    #[error("nvml `{call}` failed on gpu {index}: {source}")]
    Nvml {
        /// The call.
        call: &'static str,
        /// NVML device index.
        index: u32,
        /// NVML's error.
        source: NvmlError,
    },
    /// NVML returned more bytes than any genuine evidence has.
    #[error("gpu {index} returned {got} bytes of {what}, over the limit of {limit}")]
    TooLarge {
        /// NVML device index.
        index: u32,
        /// Which output.
        what: &'static str,
        /// Its size.
        got: usize,
        /// The limit.
        limit: usize,
    },
}

/// Evidence from one GPU, as returned by NVML. Unverified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuEvidence {
    /// NVML device index.
    pub index: u32,
    /// SPDM request || response || signature.
    pub evidence: Vec<u8>,
    /// PEM attestation certificate chain, leaf first.
    pub cert_chain_pem: Vec<u8>,
    /// The nonce the evidence was requested with.
    pub nonce: [u8; NONCE_LEN],
}

fn call<T>(index: u32, call: &'static str, r: Result<T, NvmlError>) -> Result<T, CollectError> {
    r.map_err(|source| CollectError::Nvml {
        call,
        index,
        source,
    })
}

fn capped(
    index: u32,
    what: &'static str,
    bytes: Vec<u8>,
    limit: usize,
) -> Result<Vec<u8>, CollectError> {
    if bytes.len() > limit {
        return Err(CollectError::TooLarge {
            index,
            what,
            got: bytes.len(),
            limit,
        });
    }
    Ok(bytes)
}

/// Collects evidence over `nonce` from every GPU NVML sees. Every GPU must be
/// in confidential-computing mode.
///
/// # Errors
/// [`CollectError`]: no NVML, no GPU, CC mode off, or an NVML call failed.
pub fn collect(nonce: &[u8; NONCE_LEN]) -> Result<Vec<GpuEvidence>, CollectError> {
    let nvml = Nvml::init().map_err(CollectError::NvmlUnavailable)?;
    let count = nvml.device_count().map_err(CollectError::NvmlUnavailable)?;
    if count == 0 {
        return Err(CollectError::NoGpu);
    }
    (0..count)
        .map(|index| {
            let device = call(
                index,
                "nvmlDeviceGetHandleByIndex",
                nvml.device_by_index(index),
            )?;
            if !call(
                index,
                "nvmlSystemGetConfComputeSettings",
                device.is_cc_enabled(),
            )? {
                return Err(CollectError::CcModeOff { index });
            }
            let report = call(
                index,
                "nvmlDeviceGetConfComputeGpuAttestationReport",
                device.confidential_compute_gpu_attestation_report(*nonce),
            )?;
            let certs = call(
                index,
                "nvmlDeviceGetConfComputeGpuCertificate",
                device.confidential_compute_gpu_certificate(),
            )?;
            let mut chain = certs.attestation_cert_chain;
            // The chain arrives in a fixed buffer; drop its NUL padding.
            while chain.last() == Some(&0) {
                chain.pop();
            }
            Ok(GpuEvidence {
                index,
                evidence: capped(
                    index,
                    "evidence",
                    report.attestation_report,
                    MAX_EVIDENCE_BYTES,
                )?,
                cert_chain_pem: capped(index, "certificate chain", chain, MAX_CHAIN_PEM_BYTES)?,
                nonce: *nonce,
            })
        })
        .collect()
}
