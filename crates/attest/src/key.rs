//! The in-TEE Ed25519 key: generated at start-up, never leaves the process.

use std::fmt;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::digest::{Digest, tag};

/// The only signature algorithm Knox uses.
pub const ALG: &str = "ed25519";

/// Why a signature did not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SignatureError {
    /// The key is not an Ed25519 key of 32 bytes, or is a weak point.
    #[error("invalid {alg} public key of {len} bytes")]
    Key {
        /// Declared algorithm.
        alg: String,
        /// Key length.
        len: usize,
    },
    /// The signature is not 64 bytes.
    #[error("signature must be 64 bytes, got {0}")]
    Length(usize),
    /// The signature does not verify.
    #[error("signature does not verify")]
    Invalid,
}

/// Failure to obtain randomness for a key.
#[derive(Debug, thiserror::Error)]
#[error("cannot generate a signing key: {0}")]
pub struct KeyGenError(String);

/// An Ed25519 signing key.
pub struct TeeKey {
    signing: SigningKey,
}

impl fmt::Debug for TeeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TeeKey({})", self.key_id())
    }
}

impl TeeKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Result<Self, KeyGenError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyGenError(e.to_string()))?;
        Ok(Self::from_seed(seed))
    }

    /// A key from a 32-byte seed (for regulator keys stored on disk, and tests).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// The seed, for storing a regulator's key.
    pub fn seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The raw public key.
    pub fn public_bytes(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The public key as bundles carry it.
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            alg: ALG.into(),
            public_key: HexBytes(self.public_bytes().to_vec()),
        }
    }

    /// `H("knox/key", public key)`.
    pub fn key_id(&self) -> Digest {
        key_id(&self.public_bytes())
    }

    /// Signs `context ‖ message`; the context is a domain-separation prefix.
    pub fn sign(&self, context: &[u8], message: &[u8]) -> HexBytes {
        let mut m = Vec::with_capacity(context.len() + message.len());
        m.extend_from_slice(context);
        m.extend_from_slice(message);
        HexBytes(self.signing.sign(&m).to_bytes().to_vec())
    }
}

/// `H("knox/key", public key bytes)`.
pub fn key_id(public: &[u8]) -> Digest {
    Digest::tagged(tag::KEY, &[public])
}

/// Verifies an Ed25519 signature over `context ‖ message` (strict verification: no
/// small-order keys, canonical `S`).
pub fn verify_signature(
    key: &PublicKey,
    context: &[u8],
    message: &[u8],
    sig: &HexBytes,
) -> Result<(), SignatureError> {
    let bad_key = || SignatureError::Key {
        alg: key.alg.clone(),
        len: key.public_key.0.len(),
    };
    if key.alg != ALG {
        return Err(bad_key());
    }
    let bytes: [u8; 32] = key
        .public_key
        .0
        .as_slice()
        .try_into()
        .map_err(|_| bad_key())?;
    let vk = VerifyingKey::from_bytes(&bytes).map_err(|_| bad_key())?;
    let sig_bytes: [u8; 64] = sig
        .0
        .as_slice()
        .try_into()
        .map_err(|_| SignatureError::Length(sig.0.len()))?;
    let sig = ed25519_dalek::Signature::from_bytes(&sig_bytes);
    let mut m = Vec::with_capacity(context.len() + message.len());
    m.extend_from_slice(context);
    m.extend_from_slice(message);
    vk.verify_strict(&m, &sig)
        .map_err(|_| SignatureError::Invalid)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn rfc8032_test_vector_1() {
        // RFC 8032 section 7.1, TEST 1 (empty message).
        let seed: [u8; 32] =
            hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
                .unwrap()
                .try_into()
                .unwrap();
        let k = TeeKey::from_seed(seed);
        assert_eq!(
            hex::encode(k.public_bytes()),
            "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
        );
        let sig = k.sign(b"", b"");
        assert_eq!(
            hex::encode(&sig.0),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
        );
    }

    #[test]
    fn rejects_other_key_message_context_and_malformed() {
        let a = TeeKey::generate().unwrap();
        let b = TeeKey::generate().unwrap();
        let sig = a.sign(b"ctx\0", b"m");
        assert!(verify_signature(&a.public_key(), b"ctx\0", b"m", &sig).is_ok());
        assert_eq!(
            verify_signature(&b.public_key(), b"ctx\0", b"m", &sig),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            verify_signature(&a.public_key(), b"ctx2\0", b"m", &sig),
            Err(SignatureError::Invalid)
        );
        assert_eq!(
            verify_signature(&a.public_key(), b"ctx\0", b"m", &HexBytes(vec![0; 3])),
            Err(SignatureError::Length(3))
        );
        let mut pk = a.public_key();
        pk.alg = "rsa".into();
        assert!(matches!(
            verify_signature(&pk, b"ctx\0", b"m", &sig),
            Err(SignatureError::Key { .. })
        ));
    }
}
