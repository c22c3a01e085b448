//! Intel TDX (and SGX) quotes: collection through configfs-tsm and offline verification with dcap-qvl.

mod collateral;
#[cfg(feature = "collect")]
pub mod collect;
mod report;

use std::time::SystemTime;

use dcap_qvl::quote::Quote;
use dcap_qvl::verify::QuoteVerifier;
use dcap_qvl::{PckCertFlag, QuoteClaims, QuotePolicy};
use sha2::{Digest, Sha384};

pub use collateral::{Collateral, CollateralError, MAX_COLLATERAL_BYTES, ValidityWindow};
#[cfg(feature = "collect")]
pub use collect::{CollectError, ConfigfsTsm, collect};
pub use report::{Measurement48, Report, SgxReport, TdReport, Tee};

use crate::time::unix_secs;

/// Largest quote accepted, checked before parsing. Genuine TDX quotes with their
/// PCK chain are about 5 KiB.
pub const MAX_QUOTE_BYTES: usize = 64 * 1024;

/// SHA-384 of the raw public key of Intel's SGX Root CA (the certificate with
/// SHA-256 fingerprint `44:A0:19:6B:…:74:D3`, shipped by dcap-qvl as
/// `TrustedRootCA.der` and by Intel at `certificates.trustedservices.intel.com`).
/// Checked against every verification result, so a dcap-qvl build with another
/// root fails closed.
pub const INTEL_SGX_ROOT_KEY_ID: [u8; 48] = hex_literal(
    b"46e403bd34f05a3f2817ab9badcaacc7ffc98e0f261008cd30dae936cace18d5dcf58eef31463613de1570d516200993",
);

const fn hex_nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0xff,
    }
}

/// Decodes a 96-character lowercase hex constant at compile time; a bad
/// character fails the build.
#[expect(
    clippy::indexing_slicing,
    reason = "only evaluated in constants: a bad index fails the build, never a run"
)]
const fn hex_literal(hex: &[u8; 96]) -> [u8; 48] {
    let mut out = [0u8; 48];
    let mut i = 0;
    while i < 48 {
        let (hi, lo) = (hex_nibble(hex[2 * i]), hex_nibble(hex[2 * i + 1]));
        assert!(hi < 16 && lo < 16, "bad hex constant");
        out[i] = (hi << 4) | lo;
        i += 1;
    }
    out
}

/// Why a quote was not verified.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TdxError {
    /// The quote is over [`MAX_QUOTE_BYTES`].
    #[error("quote is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size of the input.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The bytes are not a DCAP quote.
    #[error("quote is malformed: {reason}")]
    Malformed {
        /// What the parser said.
        reason: String,
    },
    /// The quote has non-zero bytes after its end.
    #[error("quote has {extra} bytes after its end that are not zero padding")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
    /// The verification time lies outside the window in which the TCB info
    /// and QE identity are current.
    #[error("collateral is not current at `{at_unix}`: valid from `{}` to `{}`", .window.not_before_unix, .window.not_after_unix)]
    CollateralNotCurrent {
        /// Verification time, unix seconds.
        at_unix: u64,
        /// The signed window.
        window: ValidityWindow,
    },
    /// dcap-qvl rejected the quote (signature, certificate chain, CRL, TCB match).
    #[error("quote rejected ({kind:?}): {reason}")]
    Rejected {
        /// Coarse class of the reason.
        kind: Rejection,
        /// dcap-qvl's full error chain.
        reason: String,
    },
    /// The chain verified to a root other than the one pinned.
    #[error("quote chains to an unexpected root key `{}`", hex::encode(.got))]
    UnexpectedRoot {
        /// SHA-384 of the root's public key.
        got: Vec<u8>,
    },
}

/// Coarse class of a dcap-qvl rejection, read from its message (dcap-qvl
/// reports errors as text; its version is pinned, so the mapping is tested).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// The platform's TCB is below every level in the TCB info.
    NoMatchingTcbLevel,
    /// The TCB status or a certificate is revoked.
    Revoked,
    /// Collateral or a certificate has expired at the verification time.
    Expired,
    /// A certificate chain or CRL does not verify to the trusted root.
    CertificateChain,
    /// A signature over the quote, QE report or collateral does not verify.
    Signature,
    /// The quote or collateral could not be decoded.
    Malformed,
    /// Anything else (debug TD, unsupported version, QE identity mismatch).
    Other,
}

impl Rejection {
    fn classify(message: &str) -> Self {
        let m = message.to_ascii_lowercase();
        let has = |needle: &str| m.contains(needle);
        if has("no matching tcb level") {
            Self::NoMatchingTcbLevel
        } else if has("revoked") {
            Self::Revoked
        } else if has("expired") {
            Self::Expired
        } else if has("crl") || has("cert") || has("root ca") || has("issuer") {
            Self::CertificateChain
        } else if has("signature") {
            Self::Signature
        } else if has("decode") || has("parse") || has("invalid") {
            Self::Malformed
        } else {
            Self::Other
        }
    }
}

/// Intel's TCB status for the platform and QE, after merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum TcbStatus {
    /// Current.
    UpToDate,
    /// Software hardening (mitigations in the TEE software) is needed.
    SWHardeningNeeded,
    /// Platform configuration is needed.
    ConfigurationNeeded,
    /// Both of the above.
    ConfigurationAndSWHardeningNeeded,
    /// The TCB is out of date.
    OutOfDate,
    /// Out of date and configuration needed.
    OutOfDateConfigurationNeeded,
    /// TDX 1.5: the TD should be relaunched.
    TDRelaunchAdvised,
    /// TDX 1.5: relaunch advised and configuration needed.
    TDRelaunchAdvisedConfigurationNeeded,
    /// Revoked (never returned in a verified result).
    Revoked,
}

impl TcbStatus {
    /// Intel's spelling, as in TCB info JSON.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UpToDate => "UpToDate",
            Self::SWHardeningNeeded => "SWHardeningNeeded",
            Self::ConfigurationNeeded => "ConfigurationNeeded",
            Self::ConfigurationAndSWHardeningNeeded => "ConfigurationAndSWHardeningNeeded",
            Self::OutOfDate => "OutOfDate",
            Self::OutOfDateConfigurationNeeded => "OutOfDateConfigurationNeeded",
            Self::TDRelaunchAdvised => "TDRelaunchAdvised",
            Self::TDRelaunchAdvisedConfigurationNeeded => "TDRelaunchAdvisedConfigurationNeeded",
            Self::Revoked => "Revoked",
        }
    }
}

impl std::fmt::Display for TcbStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<dcap_qvl::TcbStatus> for TcbStatus {
    fn from(s: dcap_qvl::TcbStatus) -> Self {
        use dcap_qvl::TcbStatus as D;
        match s {
            D::UpToDate => Self::UpToDate,
            D::SWHardeningNeeded => Self::SWHardeningNeeded,
            D::ConfigurationNeeded => Self::ConfigurationNeeded,
            D::ConfigurationAndSWHardeningNeeded => Self::ConfigurationAndSWHardeningNeeded,
            D::OutOfDate => Self::OutOfDate,
            D::OutOfDateConfigurationNeeded => Self::OutOfDateConfigurationNeeded,
            D::TDRelaunchAdvised => Self::TDRelaunchAdvised,
            D::TDRelaunchAdvisedConfigurationNeeded => Self::TDRelaunchAdvisedConfigurationNeeded,
            D::Revoked => Self::Revoked,
        }
    }
}

/// A flag from the PCK certificate's SGX extensions. `None`: the certificate
/// does not carry it (Processor CA certificates).
pub type PckFlag = Option<bool>;

fn flag(f: PckCertFlag) -> PckFlag {
    match f {
        PckCertFlag::True => Some(true),
        PckCertFlag::False => Some(false),
        PckCertFlag::Undefined => None,
    }
}

/// Platform properties stated in the PCK certificate. On cloud hosts all three
/// are usually set; a regulator's policy must allow them explicitly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlatformFlags {
    /// The platform can add or replace CPU packages (multi-package platform).
    pub dynamic_platform: PckFlag,
    /// Platform keys are cached by Intel (registration backup).
    pub cached_keys: PckFlag,
    /// Simultaneous multithreading is enabled.
    pub smt_enabled: PckFlag,
}

/// Time facts about the collateral, computed by dcap-qvl over the TCB info,
/// QE identity, both CRLs and every certificate used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollateralTimes {
    /// Verification time, unix seconds.
    pub at_unix: u64,
    /// Earliest issue date of any piece.
    pub earliest_issue_unix: u64,
    /// Latest issue date of any piece.
    pub latest_issue_unix: u64,
    /// Earliest expiration (CRL or JSON `nextUpdate`, or certificate `notAfter`).
    pub earliest_expiration_unix: u64,
}

impl CollateralTimes {
    /// Whether the verification time lies inside the window in which every piece
    /// of collateral is issued and not yet expired.
    #[must_use]
    pub fn at_within_window(&self) -> bool {
        (self.latest_issue_unix..=self.earliest_expiration_unix).contains(&self.at_unix)
    }
}

/// What a verified quote says. Holds facts only; acceptance is
/// [`crate::policy::RegulatorPolicy::appraise_tdx`]'s job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdxVerified {
    /// TDX or SGX.
    pub tee: Tee,
    /// Quote format version (3 for SGX, 4 or 5 for TDX).
    pub quote_version: u16,
    /// Merged platform and QE TCB status.
    pub tcb_status: TcbStatus,
    /// Intel security advisories that apply to this TCB level.
    pub advisory_ids: Vec<String>,
    /// Family-model-stepping-platform-custom SKU of the platform.
    pub fmspc: [u8; 6],
    /// Flags from the PCK certificate.
    pub platform: PlatformFlags,
    /// Collateral time window and the verification time.
    pub collateral: CollateralTimes,
    /// SHA-384 of the root CA's public key the chain ends at.
    pub root_key_id: [u8; 48],
    /// The report body.
    pub report: Report,
}

/// A quote parsed without any verification, for inspection and for tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnverifiedQuote {
    /// Quote format version.
    pub version: u16,
    /// The report body.
    pub report: Report,
    /// Length of the prefix the attestation key signs (header and body).
    pub signed_len: usize,
    /// Zero bytes after the quote's end (fixed-size buffers), ignored.
    pub padding: usize,
}

fn parse_quote(quote: &[u8]) -> Result<(Quote, usize), TdxError> {
    if quote.len() > MAX_QUOTE_BYTES {
        return Err(TdxError::TooLarge {
            got: quote.len(),
            limit: MAX_QUOTE_BYTES,
        });
    }
    let parsed = Quote::parse(quote).map_err(|e| TdxError::Malformed {
        reason: format!("{e:#}"),
    })?;
    let used = scale::Encode::encoded_size(&parsed);
    let tail = quote.get(used..).ok_or_else(|| TdxError::Malformed {
        reason: "quote re-encodes longer than its input".into(),
    })?;
    // Quote generation services hand out fixed-size buffers: genuine quotes
    // often end in zero padding (70 bytes for a 5006-byte v4 quote). Zeros are
    // tolerated, anything else after the quote is refused.
    if tail.iter().any(|b| *b != 0) {
        return Err(TdxError::TrailingBytes { extra: tail.len() });
    }
    Ok((parsed, tail.len()))
}

/// Parses a quote without checking anything it claims.
///
/// # Errors
/// [`TdxError::TooLarge`], [`TdxError::Malformed`] or [`TdxError::TrailingBytes`].
pub fn parse_unverified(quote: &[u8]) -> Result<UnverifiedQuote, TdxError> {
    let (parsed, padding) = parse_quote(quote)?;
    Ok(UnverifiedQuote {
        padding,
        version: parsed.header.version,
        report: Report::from(&parsed.report),
        signed_len: parsed.signed_length(),
    })
}

/// Verifies quotes against a pinned Intel root, offline.
#[derive(Clone, Debug)]
pub struct TdxVerifier {
    root_ca_der: Option<Vec<u8>>,
    expected_root_key_id: [u8; 48],
}

impl Default for TdxVerifier {
    fn default() -> Self {
        Self::intel()
    }
}

impl TdxVerifier {
    /// Verifier trusting Intel's production SGX Root CA only.
    #[must_use]
    pub fn intel() -> Self {
        Self {
            root_ca_der: None,
            expected_root_key_id: INTEL_SGX_ROOT_KEY_ID,
        }
    }

    /// Verifier trusting another root, for test PKIs such as Intel's QVL sample
    /// data. Never use this for evidence a regulator relies on.
    ///
    /// # Errors
    /// [`TdxError::Malformed`] when `root_ca_der` is not a certificate.
    pub fn dangerous_with_root(root_ca_der: Vec<u8>) -> Result<Self, TdxError> {
        let cert: x509_cert::Certificate =
            der::Decode::from_der(&root_ca_der).map_err(|e| TdxError::Malformed {
                reason: format!("root certificate: {e}"),
            })?;
        let key = cert
            .tbs_certificate
            .subject_public_key_info
            .subject_public_key
            .raw_bytes();
        Ok(Self {
            root_ca_der: Some(root_ca_der),
            expected_root_key_id: Sha384::digest(key).into(),
        })
    }

    fn dcap(&self) -> QuoteVerifier {
        match &self.root_ca_der {
            Some(der) => QuoteVerifier::new(der.clone()),
            None => QuoteVerifier::new_prod(),
        }
    }

    /// Verifies `quote` with `collateral` as of `at`: PCK chain and CRLs to the
    /// pinned root, TCB info and QE identity signatures, QE report, quote
    /// signature, TCB level match. Debug TDs and enclaves are refused. Platform
    /// flags, TCB status and advisories are reported, not judged.
    ///
    /// # Errors
    /// [`TdxError`] naming the first check that failed.
    pub fn verify(
        &self,
        quote: &[u8],
        collateral: &Collateral,
        at: SystemTime,
    ) -> Result<TdxVerified, TdxError> {
        parse_quote(quote)?;
        let at_unix = unix_secs(at);
        let window = collateral.signed_window();
        if !window.contains(at_unix) {
            return Err(TdxError::CollateralNotCurrent { at_unix, window });
        }
        let claims = self
            .dcap()
            .verify_with_policy(
                quote,
                collateral.as_dcap(),
                at_unix,
                &QuotePolicy::claims_only(at_unix),
            )
            .map_err(|e| {
                let reason = format!("{e:#}");
                TdxError::Rejected {
                    kind: Rejection::classify(&reason),
                    reason,
                }
            })?;
        self.to_verified(&claims, at_unix)
    }

    fn to_verified(&self, claims: &QuoteClaims, at_unix: u64) -> Result<TdxVerified, TdxError> {
        let root_key_id: [u8; 48] = claims
            .platform
            .root_key_id
            .as_slice()
            .try_into()
            .ok()
            .filter(|id| *id == self.expected_root_key_id)
            .ok_or_else(|| TdxError::UnexpectedRoot {
                got: claims.platform.root_key_id.clone(),
            })?;
        let report = Report::from(&claims.report);
        let pck = &claims.platform.pck;
        Ok(TdxVerified {
            tee: report.tee(),
            quote_version: claims.header.version,
            tcb_status: claims.tcb.status.into(),
            advisory_ids: claims.tcb.advisory_ids.clone(),
            fmspc: pck.fmspc,
            platform: PlatformFlags {
                dynamic_platform: flag(pck.dynamic_platform),
                cached_keys: flag(pck.cached_keys),
                smt_enabled: flag(pck.smt_enabled),
            },
            collateral: CollateralTimes {
                at_unix,
                earliest_issue_unix: claims.earliest_issue_date,
                latest_issue_unix: claims.latest_issue_date,
                earliest_expiration_unix: claims.earliest_expiration_date,
            },
            root_key_id,
            report,
        })
    }
}

/// Verifies a quote against Intel's production root. See [`TdxVerifier::verify`].
///
/// # Errors
/// [`TdxError`] naming the first check that failed.
pub fn verify(
    quote: &[u8],
    collateral: &Collateral,
    at: SystemTime,
) -> Result<TdxVerified, TdxError> {
    TdxVerifier::intel().verify(quote, collateral, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_dcap_messages() {
        assert_eq!(
            Rejection::classify("No matching TCB level found"),
            Rejection::NoMatchingTcbLevel
        );
        assert_eq!(Rejection::classify("TCBInfo expired"), Rejection::Expired);
        assert_eq!(
            Rejection::classify("Failed to verify CRL signature"),
            Rejection::CertificateChain
        );
        assert_eq!(
            Rejection::classify("ISV enclave report signature is invalid"),
            Rejection::Signature
        );
    }

    #[test]
    fn oversized_quote_is_refused_before_parsing() {
        let big = vec![0u8; MAX_QUOTE_BYTES + 1];
        assert!(matches!(
            parse_unverified(&big),
            Err(TdxError::TooLarge { .. })
        ));
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            parse_unverified(&[1, 2, 3]),
            Err(TdxError::Malformed { .. })
        ));
    }
}
