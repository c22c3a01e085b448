//! NVIDIA reference integrity manifests: SWID XML signed with enveloped XMLDSig (ECDSA P-384, C14N 1.1), verified offline to a pinned RIM root.

use std::time::SystemTime;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use roxmltree::{Document, Node, ParsingOptions};
use sha2::{Digest, Sha384};

use super::c14n::Subset;
use super::reference::ReferenceMeasurements;
use crate::time::unix_secs;
use crate::x509::{Cert, ChainError, fingerprint, verify_chain, verify_raw_p384};

/// SHA-256 fingerprint of the NVIDIA CoRIM signing Root CA (`CN=NVIDIA CoRIM
/// signing Root CA, O=NVIDIA, C=US`, valid 2023-03-16 to 2053-03-08), as in
/// nvtrust's `verifier_RIM_root.pem` and at the end of every genuine RIM chain
/// in the shared vectors.
pub const NVIDIA_RIM_ROOT_SHA256: [u8; 32] = fingerprint(
    b"12:97:7B:51:15:AC:B0:38:11:79:27:9F:FF:EB:5A:8C:4D:26:49:71:EB:B3:22:98:02:3A:46:5F:A4:1D:F5:D1",
);

/// Largest RIM accepted (genuine ones are ~20 KiB).
pub const MAX_RIM_BYTES: usize = 512 * 1024;
/// Most XML nodes accepted in a RIM.
const MAX_NODES: u32 = 20_000;

const DSIG: &str = "http://www.w3.org/2000/09/xmldsig#";
const C14N11: &str = "http://www.w3.org/2006/12/xml-c14n11";
const ENVELOPED: &str = "http://www.w3.org/2000/09/xmldsig#enveloped-signature";
const ECDSA_SHA384: &str = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384";
const SHA384_DIGEST: &str = "http://www.w3.org/2001/04/xmldsig-more#sha384";
const SHA384_HASH_NS: &str = "http://www.w3.org/2001/04/xmlenc#sha384";

/// Why a RIM was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RimError {
    /// Over [`MAX_RIM_BYTES`].
    #[error("rim is {got} bytes, over the limit of {limit}")]
    TooLarge {
        /// Size.
        got: usize,
        /// Limit.
        limit: usize,
    },
    /// Not well-formed XML (DTDs are refused).
    #[error("rim is not well-formed xml: {0}")]
    Xml(String),
    /// A required element or attribute is absent or duplicated.
    #[error("rim lacks a single `{0}`")]
    Structure(&'static str),
    /// A signature or digest algorithm other than the ones NVIDIA uses.
    #[error("rim uses unsupported algorithm `{0}`")]
    Unsupported(String),
    /// Base64 that does not decode.
    #[error("rim `{0}` is not valid base64")]
    Base64(&'static str),
    /// The signing chain does not verify to the pinned RIM root.
    #[error("rim signing chain refused: {0}")]
    Chain(#[from] ChainError),
    /// The document digest differs from the signed one: content was changed.
    #[error("rim content digest does not match the signed digest")]
    DigestMismatch,
    /// The signature over `SignedInfo` does not verify.
    #[error("rim signature does not verify with the signing certificate's key")]
    BadSignature,
    /// A measurement entry is malformed.
    #[error("rim measurement entry is malformed: {0}")]
    Measurement(String),
}

/// A RIM whose signature and chain verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedRim {
    /// SWID `tagId`.
    pub tag_id: String,
    /// SWID `name` (product, e.g. `GH100`).
    pub name: String,
    /// `Meta/@colloquialVersion`: driver version for a driver RIM.
    pub version: Option<String>,
    /// Subject of the signing certificate.
    pub signer: String,
    /// The active reference measurements, by SPDM block index (RIM index + 1).
    pub measurements: ReferenceMeasurements,
}

fn dsig<'a, 'i>(node: Node<'a, 'i>, name: &'static str) -> Result<Node<'a, 'i>, RimError> {
    let mut found = node.children().filter(|c| {
        c.is_element() && c.tag_name().namespace() == Some(DSIG) && c.tag_name().name() == name
    });
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one),
        _ => Err(RimError::Structure(name)),
    }
}

fn algorithm<'a>(node: Node<'a, '_>, expected: &str) -> Result<(), RimError> {
    let got = node.attribute("Algorithm").unwrap_or_default();
    if got == expected {
        Ok(())
    } else {
        Err(RimError::Unsupported(got.to_owned()))
    }
}

fn base64_text(node: Node<'_, '_>, what: &'static str) -> Result<Vec<u8>, RimError> {
    let text: String = node
        .text()
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    STANDARD.decode(text).map_err(|_| RimError::Base64(what))
}

/// Checks `SignedInfo` names exactly the algorithms NVIDIA uses and returns
/// the signed digest of the whole document.
fn signed_digest(signed_info: Node<'_, '_>) -> Result<Vec<u8>, RimError> {
    algorithm(dsig(signed_info, "CanonicalizationMethod")?, C14N11)?;
    algorithm(dsig(signed_info, "SignatureMethod")?, ECDSA_SHA384)?;
    let reference = dsig(signed_info, "Reference")?;
    if reference.attribute("URI") != Some("") {
        return Err(RimError::Unsupported(format!(
            "reference uri {:?}",
            reference.attribute("URI")
        )));
    }
    let transforms: Vec<_> = dsig(reference, "Transforms")?
        .children()
        .filter(Node::is_element)
        .map(|t| t.attribute("Algorithm").unwrap_or_default().to_owned())
        .collect();
    if transforms != [ENVELOPED, C14N11] {
        return Err(RimError::Unsupported(transforms.join(", ")));
    }
    algorithm(dsig(reference, "DigestMethod")?, SHA384_DIGEST)?;
    base64_text(dsig(reference, "DigestValue")?, "DigestValue")
}

fn measurements(root: Node<'_, '_>, source: &str) -> Result<ReferenceMeasurements, RimError> {
    let mut refs = ReferenceMeasurements::new(source);
    let bad = |m: String| RimError::Measurement(m);
    let resources = root
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == "Resource")
        .filter(|n| n.attribute("type") == Some("Measurement"));
    for r in resources {
        let index: u8 = r
            .attribute("index")
            .and_then(|i| i.parse().ok())
            .ok_or_else(|| bad("index".into()))?;
        if r.attribute("active")
            .is_none_or(|a| !a.eq_ignore_ascii_case("true"))
        {
            continue;
        }
        let count: usize = r
            .attribute("alternatives")
            .and_then(|a| a.parse().ok())
            .filter(|n| (1..=16).contains(n))
            .ok_or_else(|| bad(format!("alternatives of {index}")))?;
        let alternatives = (0..count)
            .map(|k| {
                let name = format!("Hash{k}");
                let value = r
                    .attribute((SHA384_HASH_NS, name.as_str()))
                    .ok_or_else(|| bad(format!("{name} of {index}")))?;
                hex::decode(value)
                    .ok()
                    .filter(|v| v.len() == 48)
                    .ok_or_else(|| bad(format!("{name} of {index} is not sha-384 hex")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let block = index
            .checked_add(1)
            .ok_or_else(|| bad(format!("index {index}")))?;
        refs.insert(block, alternatives);
    }
    Ok(refs)
}

/// Verifies RIMs against a pinned root.
#[derive(Clone, Debug)]
pub struct RimVerifier {
    root_sha256: [u8; 32],
}

impl Default for RimVerifier {
    fn default() -> Self {
        Self::nvidia()
    }
}

impl RimVerifier {
    /// Verifier trusting the NVIDIA CoRIM signing Root CA.
    #[must_use]
    pub fn nvidia() -> Self {
        Self {
            root_sha256: NVIDIA_RIM_ROOT_SHA256,
        }
    }

    /// Verifier trusting another root (tests). Never for evidence a regulator relies on.
    #[must_use]
    pub fn dangerous_with_root(root_sha256: [u8; 32]) -> Self {
        Self { root_sha256 }
    }

    /// Verifies a RIM at `at`: the `X509Data` chain to the pinned root, the
    /// SHA-384 digest of the canonical document without its signature, the
    /// ECDSA signature over canonical `SignedInfo`; then reads its active
    /// measurements.
    ///
    /// # Errors
    /// [`RimError`] naming the first check that failed.
    pub fn verify(&self, xml: &[u8], at: SystemTime) -> Result<VerifiedRim, RimError> {
        if xml.len() > MAX_RIM_BYTES {
            return Err(RimError::TooLarge {
                got: xml.len(),
                limit: MAX_RIM_BYTES,
            });
        }
        let text = std::str::from_utf8(xml).map_err(|e| RimError::Xml(e.to_string()))?;
        let options = ParsingOptions {
            allow_dtd: false,
            nodes_limit: MAX_NODES,
        };
        let doc = Document::parse_with_options(text, options)
            .map_err(|e| RimError::Xml(e.to_string()))?;
        let root = doc.root_element();
        let signature = dsig(root, "Signature")?;
        let signed_info = dsig(signature, "SignedInfo")?;
        let digest = signed_digest(signed_info)?;
        let certs = dsig(dsig(signature, "KeyInfo")?, "X509Data")?
            .children()
            .filter(|c| c.is_element() && c.tag_name().name() == "X509Certificate")
            .map(|c| base64_text(c, "X509Certificate").and_then(|der| Ok(Cert::from_der(der)?)))
            .collect::<Result<Vec<_>, _>>()?;
        verify_chain(&certs, &self.root_sha256, unix_secs(at))?;
        let leaf = certs.first().ok_or(ChainError::TooShort { got: 0 })?;
        let document = Subset {
            apex: root,
            exclude: Some(signature),
            source: text,
        }
        .canonicalize();
        if Sha384::digest(document.as_bytes()).to_vec() != digest {
            return Err(RimError::DigestMismatch);
        }
        let signed = Subset {
            apex: signed_info,
            exclude: None,
            source: text,
        }
        .canonicalize();
        let signature_value = base64_text(dsig(signature, "SignatureValue")?, "SignatureValue")?;
        if !verify_raw_p384(&leaf.p384_key(0)?, signed.as_bytes(), &signature_value) {
            return Err(RimError::BadSignature);
        }
        let tag_id = root.attribute("tagId").unwrap_or_default().to_owned();
        let meta = root
            .children()
            .find(|c| c.is_element() && c.tag_name().name() == "Meta");
        Ok(VerifiedRim {
            measurements: measurements(root, &format!("rim {tag_id}"))?,
            name: root.attribute("name").unwrap_or_default().to_owned(),
            version: meta
                .and_then(|m| m.attribute("colloquialVersion"))
                .map(str::to_owned),
            signer: leaf.subject(),
            tag_id,
        })
    }
}

/// Verifies a RIM against the NVIDIA RIM root. See [`RimVerifier::verify`].
///
/// # Errors
/// [`RimError`] naming the first check that failed.
pub fn verify(xml: &[u8], at: SystemTime) -> Result<VerifiedRim, RimError> {
    RimVerifier::nvidia().verify(xml, at)
}
