//! NVIDIA's serialized-evidence JSON (a list of `{arch, certificate, evidence, nonce}`, base64 and hex), size-capped.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;

/// Largest serialized-evidence file accepted (8 GPUs with chains are ~100 KiB).
pub const MAX_SERIALIZED_BYTES: usize = 1024 * 1024;

/// Why a serialized-evidence file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SerializedError {
    /// Over [`MAX_SERIALIZED_BYTES`].
    #[error("serialized evidence is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size of the input.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// Not the expected JSON.
    #[error("serialized evidence is not valid json: {0}")]
    Json(#[from] serde_json::Error),
    /// A field is not valid base64 or hex.
    #[error("entry {entry}: `{field}` is not valid {encoding}")]
    Encoding {
        /// Position in the list.
        entry: usize,
        /// The field.
        field: &'static str,
        /// `base64` or `hex`.
        encoding: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    arch: String,
    certificate: String,
    evidence: String,
    nonce: String,
    // Present in Protected-PCIe captures; informational, not trusted.
    #[serde(default)]
    driver_version: Option<String>,
    #[serde(default)]
    vbios_version: Option<String>,
    #[serde(default)]
    version: Option<String>,
}

/// One device's evidence as captured by NVIDIA's tools. Unverified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SerializedEvidence {
    /// Architecture label, e.g. `HOPPER` or `LS10` (NVSwitch).
    pub arch: String,
    /// PEM certificate chain, leaf first.
    pub certificate_chain_pem: Vec<u8>,
    /// SPDM request || response || signature.
    pub evidence: Vec<u8>,
    /// Nonce the capturing tool says it used.
    pub nonce: Vec<u8>,
}

/// Reads a serialized-evidence JSON file.
///
/// # Errors
/// [`SerializedError`] when the input is too large, not that JSON, or a field
/// does not decode.
pub fn parse_serialized(bytes: &[u8]) -> Result<Vec<SerializedEvidence>, SerializedError> {
    if bytes.len() > MAX_SERIALIZED_BYTES {
        return Err(SerializedError::TooLarge {
            got: bytes.len(),
            limit: MAX_SERIALIZED_BYTES,
        });
    }
    let raw: Vec<Raw> = serde_json::from_slice(bytes)?;
    raw.into_iter()
        .enumerate()
        .map(|(entry, r)| {
            let _informational = (r.driver_version, r.vbios_version, r.version);
            let b64 = |field, value: &str| {
                STANDARD
                    .decode(value)
                    .map_err(|_| SerializedError::Encoding {
                        entry,
                        field,
                        encoding: "base64",
                    })
            };
            Ok(SerializedEvidence {
                arch: r.arch,
                certificate_chain_pem: b64("certificate", &r.certificate)?,
                evidence: b64("evidence", &r.evidence)?,
                nonce: hex::decode(&r.nonce).map_err(|_| SerializedError::Encoding {
                    entry,
                    field: "nonce",
                    encoding: "hex",
                })?,
            })
        })
        .collect()
}
