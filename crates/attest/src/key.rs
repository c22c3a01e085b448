//! Keys: the in-TEE Ed25519 key ([`TeeKey`]: generated at start-up, never leaves the
//! process) and the keys parties keep ([`PartyKey`]), both signing through [`Signer`].

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

/// What signs: a key that can sign a domain-separated message and name its public half.
///
/// Both kinds of key implement it: the in-TEE key ([`TeeKey`], whose private half never
/// leaves the process) and the keys parties keep on disk ([`PartyKey`]: regulators,
/// contract authorities, approvers, the transparency log). Code that signs evidence
/// takes a [`TeeKey`]; code that may be handed either takes `&dyn Signer`.
pub trait Signer {
    /// The raw public key.
    fn public_bytes(&self) -> [u8; 32];

    /// Signs `context ‖ message`; the context is a domain-separation prefix.
    fn sign(&self, context: &[u8], message: &[u8]) -> HexBytes;

    /// The public key as bundles carry it.
    fn public_key(&self) -> PublicKey {
        PublicKey {
            alg: ALG.into(),
            public_key: HexBytes(self.public_bytes().to_vec()),
        }
    }

    /// `H("knox/key", public key)`.
    fn key_id(&self) -> Digest {
        key_id(&self.public_bytes())
    }
}

fn sign_with(signing: &SigningKey, context: &[u8], message: &[u8]) -> HexBytes {
    let mut m = Vec::with_capacity(context.len() + message.len());
    m.extend_from_slice(context);
    m.extend_from_slice(message);
    HexBytes(signing.sign(&m).to_bytes().to_vec())
}

fn fresh_seed() -> Result<SigningKey, KeyGenError> {
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut_slice()).map_err(|e| KeyGenError(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// What both kinds of key share, written once: a fresh key from the operating system's
/// random source, the public half, signing (inherent, and through [`Signer`]) and a
/// `Debug` that shows the key id only.
macro_rules! ed25519_key {
    ($ty:ident) => {
        impl $ty {
            /// A fresh key from the operating system's random source.
            pub fn generate() -> Result<Self, KeyGenError> {
                Ok(Self {
                    signing: fresh_seed()?,
                })
            }

            /// The raw public key.
            pub fn public_bytes(&self) -> [u8; 32] {
                self.signing.verifying_key().to_bytes()
            }

            /// The public key as bundles carry it.
            pub fn public_key(&self) -> PublicKey {
                Signer::public_key(self)
            }

            /// `H("knox/key", public key)`.
            pub fn key_id(&self) -> Digest {
                Signer::key_id(self)
            }

            /// Signs `context ‖ message`; the context is a domain-separation prefix.
            pub fn sign(&self, context: &[u8], message: &[u8]) -> HexBytes {
                sign_with(&self.signing, context, message)
            }
        }

        impl Signer for $ty {
            fn public_bytes(&self) -> [u8; 32] {
                Self::public_bytes(self)
            }

            fn sign(&self, context: &[u8], message: &[u8]) -> HexBytes {
                Self::sign(self, context, message)
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($ty), "({})"), self.key_id())
            }
        }
    };
}

/// The in-TEE Ed25519 key: made inside the process from the operating system's random
/// source, and never out of it.
///
/// There is no way to read its private half, to make one from known bytes, or to copy
/// it: it is not `Clone`, has no `seed()` and no `from_seed()`, and its bytes are
/// zeroised when it is dropped (`ed25519-dalek`'s `zeroize`). Whoever shares it (a run
/// and its journal) shares it by reference or `Arc`. These do not compile:
///
/// ```compile_fail,E0599
/// let key = knox_attest::TeeKey::generate().unwrap();
/// let _seed: [u8; 32] = key.seed();
/// ```
///
/// ```compile_fail,E0599
/// let _key = knox_attest::TeeKey::from_seed([7; 32]);
/// ```
///
/// ```compile_fail,E0599
/// let key = knox_attest::TeeKey::generate().unwrap();
/// let _copy = key.clone();
/// ```
///
/// while its public half is there for anyone:
///
/// ```
/// use knox_attest::key::Signer as _;
/// let key = knox_attest::TeeKey::generate().unwrap();
/// let _public: [u8; 32] = key.public_bytes();
/// ```
pub struct TeeKey {
    signing: SigningKey,
}

ed25519_key!(TeeKey);

/// An Ed25519 key a party keeps: a regulator's, a contract authority's, an approver's,
/// the transparency log's. Unlike [`TeeKey`] it can be stored
/// ([`crate::keyfile`]: PKCS#8 PEM, mode 0600) and made again from its seed; it is not
/// `Clone` either, and is zeroised when dropped.
pub struct PartyKey {
    signing: SigningKey,
}

impl PartyKey {
    /// The key of a 32-byte seed (RFC 8032's private key).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self {
            signing: SigningKey::from_bytes(&seed),
        }
    }

    /// The 32-byte seed, for storing the key or handing a copy to a client. (The in-TEE
    /// key has no such method.)
    pub fn seed(&self) -> [u8; 32] {
        self.signing.to_bytes()
    }

    /// The dalek key, for [`crate::keyfile`] to encode.
    pub(crate) fn signing(&self) -> &SigningKey {
        &self.signing
    }

    /// The key of a dalek key, for [`crate::keyfile`] to decode.
    pub(crate) fn from_signing(signing: SigningKey) -> Self {
        Self { signing }
    }
}

ed25519_key!(PartyKey);

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
        let k = PartyKey::from_seed(seed);
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
