//! Certificate chains ending at a root pinned by SHA-256 fingerprint, ECDSA P-384 / SHA-384 only (NVIDIA device and RIM PKIs).

use const_oid::ObjectIdentifier;
use const_oid::db::rfc5280::ID_KP_OCSP_SIGNING;
use const_oid::db::rfc5912::{ECDSA_WITH_SHA_384, ID_EC_PUBLIC_KEY, SECP_384_R_1};
use der::{Decode, Encode, Reader, SliceReader};
use p384::ecdsa::signature::Verifier;
use p384::ecdsa::{DerSignature, Signature, VerifyingKey};
use sha2::{Digest, Sha256};
use x509_cert::Certificate;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage};

/// Most certificates accepted in one chain.
pub const MAX_CHAIN_CERTS: usize = 8;

/// Why a certificate chain was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The chain input is not PEM or DER certificates.
    #[error("certificate chain does not parse: {reason}")]
    Malformed {
        /// What the parser said.
        reason: String,
    },
    /// Fewer certificates than a leaf and a root.
    #[error("certificate chain has {got} certificates, at least 2 are needed")]
    TooShort {
        /// Count found.
        got: usize,
    },
    /// More certificates than [`MAX_CHAIN_CERTS`].
    #[error("certificate chain has {got} certificates, over the limit of {limit}")]
    TooLong {
        /// Count found.
        got: usize,
        /// The limit.
        limit: usize,
    },
    /// The last certificate is not the pinned root.
    #[error("chain ends at `{subject}` (sha-256 `{sha256}`), not at the pinned root")]
    UntrustedRoot {
        /// Subject of the last certificate.
        subject: String,
        /// Its SHA-256 fingerprint, hex.
        sha256: String,
    },
    /// Certificate `index` names an issuer other than the next certificate.
    #[error("certificate {index} (`{subject}`) is not issued by the next certificate in the chain")]
    IssuerMismatch {
        /// Position, leaf = 0.
        index: usize,
        /// Its subject.
        subject: String,
    },
    /// Certificate `index`'s signature does not verify with its issuer's key.
    #[error("certificate {index} (`{subject}`) has a bad signature")]
    BadSignature {
        /// Position, leaf = 0.
        index: usize,
        /// Its subject.
        subject: String,
    },
    /// An issuing certificate is not a CA allowed to sign certificates.
    #[error("certificate {index} (`{subject}`) is not a certificate authority but issues one")]
    NotCa {
        /// Position, leaf = 0.
        index: usize,
        /// Its subject.
        subject: String,
    },
    /// The leaf is a CA certificate (a chain missing its leaf).
    #[error("leaf certificate `{subject}` is a certificate authority, not an end entity")]
    LeafIsCa {
        /// Its subject.
        subject: String,
    },
    /// A certificate is not valid at the verification time.
    #[error("certificate {index} (`{subject}`) is not valid at `{at_unix}`")]
    NotValidAt {
        /// Position, leaf = 0.
        index: usize,
        /// Its subject.
        subject: String,
        /// Verification time, unix seconds.
        at_unix: u64,
    },
    /// Something other than ECDSA P-384 with SHA-384.
    #[error("certificate {index} uses unsupported algorithm or key `{what}`")]
    Unsupported {
        /// Position, leaf = 0.
        index: usize,
        /// The algorithm or key parameter.
        what: String,
    },
}

/// One certificate with its original DER bytes.
#[derive(Clone, Debug)]
pub(crate) struct Cert {
    pub(crate) der: Vec<u8>,
    pub(crate) cert: Certificate,
}

impl Cert {
    pub(crate) fn from_der(der: Vec<u8>) -> Result<Self, ChainError> {
        let cert = Certificate::from_der(&der).map_err(|e| ChainError::Malformed {
            reason: e.to_string(),
        })?;
        Ok(Self { der, cert })
    }

    pub(crate) fn subject(&self) -> String {
        self.cert.tbs_certificate.subject.to_string()
    }

    pub(crate) fn sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.der).into()
    }

    /// The DER bytes of `tbsCertificate` exactly as signed.
    fn tbs_bytes(&self) -> Result<&[u8], der::Error> {
        first_in_sequence(&self.der)
    }

    pub(crate) fn p384_key(&self, index: usize) -> Result<VerifyingKey, ChainError> {
        p384_key(&self.cert.tbs_certificate.subject_public_key_info, index)
    }

    fn is_ca(&self) -> bool {
        let tbs = &self.cert.tbs_certificate;
        let ca = matches!(tbs.get::<BasicConstraints>(), Ok(Some((_, bc))) if bc.ca);
        let may_sign = match tbs.get::<KeyUsage>() {
            Ok(Some((_, ku))) => ku.key_cert_sign(),
            Ok(None) => true,
            Err(_) => false,
        };
        ca && may_sign
    }

    pub(crate) fn has_eku(&self, oid: ObjectIdentifier) -> bool {
        matches!(self.cert.tbs_certificate.get::<ExtendedKeyUsage>(), Ok(Some((_, eku))) if eku.0.contains(&oid))
    }

    pub(crate) fn is_ocsp_signer(&self) -> bool {
        self.has_eku(ID_KP_OCSP_SIGNING)
    }

    fn valid_at(&self, at_unix: u64) -> bool {
        let v = &self.cert.tbs_certificate.validity;
        let from = v.not_before.to_unix_duration().as_secs();
        let to = v.not_after.to_unix_duration().as_secs();
        (from..=to).contains(&at_unix)
    }

    /// Whether `issuer` issued and signed this certificate.
    pub(crate) fn signed_by(&self, issuer: &Self, index: usize) -> Result<bool, ChainError> {
        if self.cert.tbs_certificate.issuer != issuer.cert.tbs_certificate.subject {
            return Ok(false);
        }
        if self.cert.signature_algorithm.oid != ECDSA_WITH_SHA_384 {
            return Err(ChainError::Unsupported {
                index,
                what: self.cert.signature_algorithm.oid.to_string(),
            });
        }
        let key = issuer.p384_key(index.saturating_add(1))?;
        let tbs = self.tbs_bytes().map_err(|e| ChainError::Malformed {
            reason: e.to_string(),
        })?;
        let sig = self.cert.signature.as_bytes().unwrap_or_default();
        Ok(verify_der_p384(&key, tbs, sig))
    }
}

/// The first element (with its tag and length) of the DER SEQUENCE `der`: the
/// signed part of a certificate or a basic OCSP response, byte for byte.
pub(crate) fn first_in_sequence(der: &[u8]) -> Result<&[u8], der::Error> {
    let mut reader = SliceReader::new(der)?;
    let header = der::Header::decode(&mut reader)?;
    header.tag.assert_eq(der::Tag::Sequence)?;
    reader.tlv_bytes()
}

/// Verifies an ECDSA-with-SHA-384 DER signature by a P-384 key.
pub(crate) fn verify_der_p384(key: &VerifyingKey, message: &[u8], der_sig: &[u8]) -> bool {
    DerSignature::from_bytes(der_sig).is_ok_and(|sig| key.verify(message, &sig).is_ok())
}

/// A P-384 verifying key from a subject public key info.
pub(crate) fn p384_key(
    spki: &spki::SubjectPublicKeyInfoOwned,
    index: usize,
) -> Result<VerifyingKey, ChainError> {
    let unsupported = |what: String| ChainError::Unsupported { index, what };
    if spki.algorithm.oid != ID_EC_PUBLIC_KEY {
        return Err(unsupported(spki.algorithm.oid.to_string()));
    }
    let curve = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
    if curve != Some(SECP_384_R_1) {
        return Err(unsupported(format!("curve {curve:?}")));
    }
    VerifyingKey::from_sec1_bytes(spki.subject_public_key.raw_bytes())
        .map_err(|_| unsupported("invalid p-384 point".into()))
}

/// Verifies a raw `r || s` P-384 signature over `message` (hashed with SHA-384).
pub(crate) fn verify_raw_p384(key: &VerifyingKey, message: &[u8], raw_sig: &[u8]) -> bool {
    Signature::from_slice(raw_sig).is_ok_and(|sig| key.verify(message, &sig).is_ok())
}

/// Parses PEM certificates (leaf first), at most [`MAX_CHAIN_CERTS`].
pub(crate) fn parse_pem_chain(pem: &[u8]) -> Result<Vec<Cert>, ChainError> {
    // `load_pem_chain` (x509-cert 0.2.5) computes `len - 1` of the input with its trailing
    // line breaks stripped: nothing left overflows (a panic where overflow is checked).
    if pem.iter().all(|b| matches!(b, b'\r' | b'\n')) {
        return Err(ChainError::Malformed {
            reason: "no certificate: the chain is empty".into(),
        });
    }
    let certs = Certificate::load_pem_chain(pem).map_err(|e| ChainError::Malformed {
        reason: e.to_string(),
    })?;
    if certs.len() > MAX_CHAIN_CERTS {
        return Err(ChainError::TooLong {
            got: certs.len(),
            limit: MAX_CHAIN_CERTS,
        });
    }
    certs
        .into_iter()
        .map(|cert| {
            let der = cert.to_der().map_err(|e| ChainError::Malformed {
                reason: e.to_string(),
            })?;
            Ok(Cert { der, cert })
        })
        .collect()
}

/// Verifies `chain` (leaf first, root last) at `at_unix`: the root's SHA-256 is
/// `root_sha256` and it signs itself, every certificate is issued and signed by
/// the next, issuers are CAs, the leaf is not, all are valid at `at_unix`.
pub(crate) fn verify_chain(
    chain: &[Cert],
    root_sha256: &[u8; 32],
    at_unix: u64,
) -> Result<(), ChainError> {
    let (leaf, root) = match chain {
        [leaf, .., root] => (leaf, root),
        _ => return Err(ChainError::TooShort { got: chain.len() }),
    };
    if chain.len() > MAX_CHAIN_CERTS {
        return Err(ChainError::TooLong {
            got: chain.len(),
            limit: MAX_CHAIN_CERTS,
        });
    }
    if root.sha256() != *root_sha256 {
        return Err(ChainError::UntrustedRoot {
            subject: root.subject(),
            sha256: hex::encode(root.sha256()),
        });
    }
    let last = chain.len().saturating_sub(1);
    if !root.signed_by(root, last)? {
        return Err(ChainError::BadSignature {
            index: last,
            subject: root.subject(),
        });
    }
    for (index, pair) in chain.windows(2).enumerate() {
        let [cert, issuer] = pair else { continue };
        if cert.cert.tbs_certificate.issuer != issuer.cert.tbs_certificate.subject {
            return Err(ChainError::IssuerMismatch {
                index,
                subject: cert.subject(),
            });
        }
        if !cert.signed_by(issuer, index)? {
            return Err(ChainError::BadSignature {
                index,
                subject: cert.subject(),
            });
        }
        if !issuer.is_ca() {
            return Err(ChainError::NotCa {
                index: index.saturating_add(1),
                subject: issuer.subject(),
            });
        }
    }
    if leaf.is_ca() {
        return Err(ChainError::LeafIsCa {
            subject: leaf.subject(),
        });
    }
    for (index, cert) in chain.iter().enumerate() {
        if !cert.valid_at(at_unix) {
            return Err(ChainError::NotValidAt {
                index,
                subject: cert.subject(),
                at_unix,
            });
        }
    }
    Ok(())
}

/// SHA-256 from a colon-separated or plain hex fingerprint, at compile time.
#[expect(
    clippy::indexing_slicing,
    reason = "only evaluated in constants: a bad index fails the build, never a run"
)]
pub(crate) const fn fingerprint(hex: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let (mut i, mut n) = (0, 0);
    while i < hex.len() {
        let c = hex[i];
        i += 1;
        if c == b':' {
            continue;
        }
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => 0xff,
        };
        assert!(v < 16 && n < 64, "bad fingerprint");
        out[n / 2] |= if n % 2 == 0 { v << 4 } else { v };
        n += 1;
    }
    assert!(n == 64, "fingerprint too short");
    out
}
