//! Signed contracts: a DSSE envelope around an in-toto statement whose predicate is
//! the contract, signed by the authority's Ed25519 key (like every Knox attestation).
//! Verifying needs the authority's public key from outside the envelope: the envelope
//! names its key, it does not make it trusted.

use knox_attest::PartyKey;
use knox_attest::dsse::EnvelopeError;
use knox_types::bundle::PublicKey;
use knox_types::digest::Digest;
use knox_types::dsse::{Envelope, Statement, Subject};

use crate::format::{Contract, ContractError};

/// Predicate type of a signed contract.
pub const CONTRACT_PREDICATE: &str = "urn:knox:predicate:capability-contract:v1";
/// The digest algorithm name of the contract hash in the statement's subject.
pub const SUBJECT_ALG: &str = "knoxContract";

/// A contract whose signature, structure and hash were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The contract.
    pub contract: Contract,
    /// `H("knox/contract", canonical(contract))`.
    pub hash: Digest,
    /// The authority key that signed it.
    pub authority: PublicKey,
    /// The envelope as the authority signed it (what a Knox bundle embeds).
    pub envelope: Envelope,
}

/// Why a signed contract is refused.
#[derive(Debug, thiserror::Error)]
pub enum SignedError {
    /// Not a DSSE envelope (strict JSON).
    #[error("not a signed contract envelope: {0}")]
    Envelope(String),
    /// The signature, payload type or predicate is wrong (a tampered contract).
    #[error("signature: {0}")]
    Signature(#[from] EnvelopeError),
    /// The predicate is not a contract of this format.
    #[error("the signed predicate is not a contract: {0}")]
    Shape(String),
    /// The predicate is a contract, but not in the form the authority would have
    /// written (a field the format does not define, or non-canonical values).
    #[error("the signed contract is not canonical")]
    NotCanonical,
    /// Structurally invalid.
    #[error(transparent)]
    Invalid(#[from] ContractError),
    /// The subject's digest is not the contract's hash.
    #[error("the statement's subject does not name this contract's hash")]
    Subject,
    /// Canonical serialization failed.
    #[error("canonical form: {0}")]
    Canon(String),
}

/// Signs a (valid) contract with the authority key.
pub fn sign(key: &PartyKey, contract: &Contract) -> Result<Envelope, SignedError> {
    contract.validate()?;
    let st = Statement::new(
        vec![Subject::one(
            &contract.id,
            SUBJECT_ALG,
            contract.hash().to_hex(),
        )],
        CONTRACT_PREDICATE,
        contract,
    )
    .map_err(|e| SignedError::Canon(e.to_string()))?;
    knox_attest::dsse::sign(key, &st).map_err(|e| SignedError::Canon(e.to_string()))
}

/// Reads an envelope strictly (a repeated key is refused).
pub fn read_envelope(bytes: &[u8]) -> Result<Envelope, SignedError> {
    knox_types::json::from_slice(bytes).map_err(|e| SignedError::Envelope(e.to_string()))
}

/// Verifies an envelope under `authority`: signature, canonical payload, predicate
/// type, contract shape and validity, subject.
pub fn verify(env: &Envelope, authority: &PublicKey) -> Result<Verified, SignedError> {
    let st = knox_attest::dsse::verify(env, authority, CONTRACT_PREDICATE)?;
    let contract: Contract = serde_json::from_value(st.predicate.clone())
        .map_err(|e| SignedError::Shape(e.to_string()))?;
    let again = knox_types::canon::to_canonical(&contract)
        .map_err(|e| SignedError::Canon(e.to_string()))?;
    if again != knox_types::canon::canonical(&st.predicate) {
        return Err(SignedError::NotCanonical);
    }
    contract.validate()?;
    let hash = contract.hash();
    let named = st
        .subject
        .iter()
        .any(|s| s.digest.get(SUBJECT_ALG).and_then(|v| v.as_str()) == Some(&hash.to_hex()));
    if !named {
        return Err(SignedError::Subject);
    }
    Ok(Verified {
        contract,
        hash,
        authority: authority.clone(),
        envelope: env.clone(),
    })
}

/// [`read_envelope`] then [`verify`].
pub fn verify_bytes(bytes: &[u8], authority: &PublicKey) -> Result<Verified, SignedError> {
    verify(&read_envelope(bytes)?, authority)
}
