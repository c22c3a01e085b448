//! Stapled OCSP responses for the certificates of a GPU chain: signature, responder path to the pinned root, freshness, status.

use const_oid::db::rfc5912::{ECDSA_WITH_SHA_384, ID_SHA_1, ID_SHA_256, ID_SHA_384, ID_SHA_512};
use const_oid::db::rfc6960::ID_PKIX_OCSP_BASIC;
use der::{Decode, Encode};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha384, Sha512};
use x509_cert::ext::pkix::CrlReason;
use x509_ocsp::{BasicOcspResponse, CertStatus, OcspResponse, OcspResponseStatus, SingleResponse};

use crate::x509::{Cert, MAX_CHAIN_CERTS, first_in_sequence, verify_der_p384};

/// Largest stapled response accepted.
pub const MAX_OCSP_RESPONSE_BYTES: usize = 16 * 1024;
/// Most stapled responses accepted for one chain.
pub const MAX_OCSP_RESPONSES: usize = 8;

/// Revocation status of one certificate of the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevocationStatus {
    /// No stapled response covers this certificate: revocation is unknown offline.
    NotChecked,
    /// The responder says the certificate is good.
    Good,
    /// Revoked with reason `certificateHold`: suspended, may be released.
    OnHold {
        /// When the hold started, unix seconds.
        since_unix: u64,
    },
    /// Revoked for good.
    Revoked {
        /// When, unix seconds.
        at_unix: u64,
        /// The CRL reason, when given.
        reason: Option<String>,
    },
    /// The responder does not know the certificate.
    Unknown,
}

/// Revocation status of one certificate, by subject.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertRevocation {
    /// The certificate's subject.
    pub subject: String,
    /// What the stapled responses say.
    pub status: RevocationStatus,
}

/// Why a stapled OCSP response was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OcspError {
    /// Too many responses or one too large.
    #[error("ocsp input over the limit: {what}")]
    TooLarge {
        /// Which limit.
        what: &'static str,
    },
    /// Not an OCSP response.
    #[error("ocsp response {index} is malformed: {reason}")]
    Malformed {
        /// Position among the stapled responses.
        index: usize,
        /// What the parser said.
        reason: String,
    },
    /// The responder reported an error instead of a status.
    #[error("ocsp response {index} is not successful: `{status:?}`")]
    NotSuccessful {
        /// Position.
        index: usize,
        /// The status.
        status: OcspResponseStatus,
    },
    /// The response signature does not verify, or the signer does not chain to the pinned root.
    #[error("ocsp response {index} is not signed by a responder of the pinned root: {reason}")]
    Untrusted {
        /// Position.
        index: usize,
        /// Which check failed.
        reason: &'static str,
    },
    /// The response is not current at the verification time.
    #[error("ocsp response {index} for `{subject}` is not current at `{at_unix}`")]
    Stale {
        /// Position.
        index: usize,
        /// Certificate it covers.
        subject: String,
        /// Verification time.
        at_unix: u64,
    },
}

fn gen_secs(t: &x509_ocsp::OcspGeneralizedTime) -> u64 {
    t.0.to_unix_duration().as_secs()
}

fn hash_with(alg: &const_oid::ObjectIdentifier, data: &[u8]) -> Option<Vec<u8>> {
    Some(match *alg {
        ID_SHA_1 => Sha1::digest(data).to_vec(),
        ID_SHA_256 => Sha256::digest(data).to_vec(),
        ID_SHA_384 => Sha384::digest(data).to_vec(),
        ID_SHA_512 => Sha512::digest(data).to_vec(),
        _ => return None,
    })
}

/// Whether `single` is about `cert`, issued by `issuer` (RFC 6960 CertID).
fn covers(single: &SingleResponse, cert: &Cert, issuer: &Cert) -> bool {
    let id = &single.cert_id;
    if id.serial_number != cert.cert.tbs_certificate.serial_number {
        return false;
    }
    let Ok(issuer_name) = issuer.cert.tbs_certificate.subject.to_der() else {
        return false;
    };
    let issuer_key = issuer
        .cert
        .tbs_certificate
        .subject_public_key_info
        .subject_public_key
        .raw_bytes();
    let alg = &id.hash_algorithm.oid;
    hash_with(alg, &issuer_name).is_some_and(|h| h == id.issuer_name_hash.as_bytes())
        && hash_with(alg, issuer_key).is_some_and(|h| h == id.issuer_key_hash.as_bytes())
}

/// Walks from `signer` to the pinned root through `candidates`, at most
/// [`MAX_CHAIN_CERTS`] steps; each step must verify.
fn chains_to_root(signer: &Cert, candidates: &[Cert], root_sha256: &[u8; 32], at: u64) -> bool {
    let mut current = signer.clone();
    for _ in 0..MAX_CHAIN_CERTS {
        let v = &current.cert.tbs_certificate.validity;
        let valid = (v.not_before.to_unix_duration().as_secs()
            ..=v.not_after.to_unix_duration().as_secs())
            .contains(&at);
        if !valid {
            return false;
        }
        if current.sha256() == *root_sha256 {
            return true;
        }
        let Some(issuer) = candidates
            .iter()
            .find(|c| matches!(current.signed_by(c, 0), Ok(true)))
        else {
            return false;
        };
        current = issuer.clone();
    }
    false
}

struct Checked {
    responses: Vec<SingleResponse>,
}

fn check_one(
    index: usize,
    der: &[u8],
    chain: &[Cert],
    root_sha256: &[u8; 32],
    at: u64,
) -> Result<Checked, OcspError> {
    let malformed = |reason: String| OcspError::Malformed { index, reason };
    let untrusted = |reason| OcspError::Untrusted { index, reason };
    if der.len() > MAX_OCSP_RESPONSE_BYTES {
        return Err(OcspError::TooLarge {
            what: "response size",
        });
    }
    let response = OcspResponse::from_der(der).map_err(|e| malformed(e.to_string()))?;
    if response.response_status != OcspResponseStatus::Successful {
        return Err(OcspError::NotSuccessful {
            index,
            status: response.response_status,
        });
    }
    let bytes = response
        .response_bytes
        .ok_or_else(|| malformed("no response bytes".into()))?;
    if bytes.response_type != ID_PKIX_OCSP_BASIC {
        return Err(malformed(format!("response type {}", bytes.response_type)));
    }
    let basic_der = bytes.response.as_bytes();
    let basic = BasicOcspResponse::from_der(basic_der).map_err(|e| malformed(e.to_string()))?;
    if basic.signature_algorithm.oid != ECDSA_WITH_SHA_384 {
        return Err(untrusted("signature algorithm is not ecdsa-with-sha384"));
    }
    let tbs = first_in_sequence(basic_der).map_err(|e| malformed(e.to_string()))?;
    let included: Vec<Cert> = basic
        .certs
        .iter()
        .flatten()
        .filter_map(|c| c.to_der().ok().and_then(|d| Cert::from_der(d).ok()))
        .collect();
    let signature = basic.signature.as_bytes().unwrap_or_default();
    // The signer is an included certificate or a CA of the chain itself.
    let signer = included
        .iter()
        .chain(chain.iter())
        .find(|c| {
            c.p384_key(0)
                .is_ok_and(|k| verify_der_p384(&k, tbs, signature))
        })
        .ok_or_else(|| untrusted("no certificate verifies the response signature"))?;
    let signer_in_chain = chain.iter().skip(1).any(|c| c.der == signer.der);
    if !signer_in_chain && !signer.is_ocsp_signer() {
        return Err(untrusted(
            "signer lacks the ocsp-signing extended key usage",
        ));
    }
    let candidates: Vec<Cert> = included.iter().chain(chain.iter()).cloned().collect();
    if !chains_to_root(signer, &candidates, root_sha256, at) {
        return Err(untrusted("signer does not chain to the pinned root"));
    }
    Ok(Checked {
        responses: basic.tbs_response_data.responses,
    })
}

fn status_of(single: &SingleResponse) -> RevocationStatus {
    match &single.cert_status {
        CertStatus::Good(_) => RevocationStatus::Good,
        CertStatus::Unknown(_) => RevocationStatus::Unknown,
        CertStatus::Revoked(info) => {
            let at_unix = gen_secs(&info.revocation_time);
            match info.revocation_reason {
                Some(CrlReason::CertificateHold) => RevocationStatus::OnHold {
                    since_unix: at_unix,
                },
                reason => RevocationStatus::Revoked {
                    at_unix,
                    reason: reason.map(|r| format!("{r:?}")),
                },
            }
        }
    }
}

/// Status of every certificate but the root, from the stapled responses.
pub(crate) fn check(
    chain: &[Cert],
    stapled: &[Vec<u8>],
    root_sha256: &[u8; 32],
    at: u64,
) -> Result<Vec<CertRevocation>, OcspError> {
    if stapled.len() > MAX_OCSP_RESPONSES {
        return Err(OcspError::TooLarge {
            what: "number of responses",
        });
    }
    let mut statuses: Vec<CertRevocation> = chain
        .iter()
        .take(chain.len().saturating_sub(1))
        .map(|c| CertRevocation {
            subject: c.subject(),
            status: RevocationStatus::NotChecked,
        })
        .collect();
    for (index, der) in stapled.iter().enumerate() {
        let checked = check_one(index, der, chain, root_sha256, at)?;
        for single in &checked.responses {
            for (pos, pair) in chain.windows(2).enumerate() {
                let [cert, issuer] = pair else { continue };
                if !covers(single, cert, issuer) {
                    continue;
                }
                let this = gen_secs(&single.this_update);
                let next = single.next_update.as_ref().map_or(u64::MAX, gen_secs);
                if !(this..=next).contains(&at) {
                    return Err(OcspError::Stale {
                        index,
                        subject: cert.subject(),
                        at_unix: at,
                    });
                }
                if let Some(entry) = statuses.get_mut(pos) {
                    entry.status = status_of(single);
                }
            }
        }
    }
    Ok(statuses)
}
