//! Domain-separated SHA-256 digests, hex-encoded in JSON.
//!
//! `H(tag, parts) = SHA-256(tag ‖ 0x00 ‖ part_1 ‖ … ‖ part_n)`: the tag names the kind of
//! record being hashed and the zero byte ends it, so no two uses of the hash can collide
//! by construction. The tags Knox uses are the constants in [`tag`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

use crate::canon::{self, CanonError};

/// Domain-separation tags, one per kind of record.
pub mod tag {
    /// A node measurement `m_i`.
    pub const NODE: &str = "knox/node";
    /// A chain step `c_i = H(c_{i-1} ‖ seq_i ‖ m_i)`.
    pub const CHAIN: &str = "knox/chain";
    /// The empty chain value `c_0 = H(∅)`.
    pub const CHAIN_EMPTY: &str = "knox/chain-empty";
    /// A proposed action or an exact expected call.
    pub const ACTION: &str = "knox/action";
    /// An expected call that declares parameter constraints.
    pub const EXPECTED: &str = "knox/expected";
    /// The APM.
    pub const APM: &str = "knox/apm";
    /// The user prompt `p`.
    pub const PROMPT: &str = "knox/prompt";
    /// The toolkit manifest `C`.
    pub const MANIFEST: &str = "knox/manifest";
    /// The regulations `R`.
    pub const REGULATIONS: &str = "knox/regulations";
    /// The stop condition.
    pub const STOP: &str = "knox/stop";
    /// A regulation policy set (its files).
    pub const POLICY_SET: &str = "knox/policy-set";
    /// The prompt a regulation judge was given.
    pub const JUDGE_PROMPT: &str = "knox/judge-prompt";
    /// A tool output.
    pub const OUTPUT: &str = "knox/output";
    /// A raw, possibly malformed, proposal.
    pub const PROPOSAL: &str = "knox/proposal";
    /// A signing key (its hash is what hardware evidence binds).
    pub const KEY: &str = "knox/key";
    /// A tool's needs (system calls, paths, endpoints, limits, cost).
    pub const NEEDS: &str = "knox/needs";
    /// A whole bundle file, as a receipt names it.
    pub const BUNDLE: &str = "knox/bundle";
    /// The start-up platform evidence, as the APM attestation binds it.
    pub const PLATFORM: &str = "knox/platform";
    /// A refresh report, as the signed summary binds it.
    pub const REFRESH: &str = "knox/refresh";
    /// A sealed run as the next run of the same key's chain names it (its signed
    /// summary, the refresh report left out).
    pub const SEAL: &str = "knox/seal";
    /// The start of a key's chain of runs: its start-up platform evidence.
    pub const KEY_CHAIN_START: &str = "knox/key-chain-start";
}

/// A 32-byte SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// `H(tag ‖ 0x00 ‖ parts…)`.
    pub fn tagged(tag: &str, parts: &[&[u8]]) -> Self {
        let mut h = Sha256::new();
        h.update(tag.as_bytes());
        h.update([0u8]);
        for p in parts {
            h.update(p);
        }
        Self(h.finalize().into())
    }

    /// Domain-separated hash of the RFC 8785 canonical form of `value`.
    pub fn of_json<T: Serialize + ?Sized>(tag: &str, value: &T) -> Result<Self, CanonError> {
        Ok(Self::tagged(tag, &[&canon::to_canonical(value)?]))
    }

    /// Plain SHA-256 (no tag), for digests of files defined elsewhere (weights, quotes).
    pub fn sha256(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// Lowercase hex.
    pub fn to_hex(&self) -> String {
        let mut buf = [0u8; 64];
        self.write_hex(&mut buf).to_owned()
    }

    /// Lowercase hex written into `buf`, without allocating (digests are written into
    /// every node's canonical bytes).
    pub fn write_hex<'b>(&self, buf: &'b mut [u8; 64]) -> &'b str {
        // 32 bytes always fit 64 hex digits, and hex digits are ASCII.
        let _ = hex::encode_to_slice(self.0, buf);
        std::str::from_utf8(buf).unwrap_or_default()
    }

    /// Parses exactly 64 lowercase hex digits (the only form Knox writes).
    pub fn from_hex(s: &str) -> Result<Self, DigestParseError> {
        let mut out = [0u8; 32];
        if s.len() != 64 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(DigestParseError {
                got: s.chars().take(80).collect(),
            });
        }
        hex::decode_to_slice(s, &mut out).map_err(|_| DigestParseError {
            got: s.chars().take(80).collect(),
        })?;
        Ok(Self(out))
    }
}

/// A string that is not 64 hex digits where a digest was expected.
#[derive(Debug, thiserror::Error)]
#[error("expected a 64-digit hex sha-256 digest, got `{got}`")]
pub struct DigestParseError {
    got: String,
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.write_hex(&mut [0u8; 64]))
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn tagged_matches_independent_sha256() {
        // Independent value: python3 -c "import hashlib;print(hashlib.sha256(b'knox/node\x00abc').hexdigest())"
        let expected = "976c115d3453327c1839d0699cd1f5e3103bf811abca328d2a5c69240eb86718";
        assert_eq!(Digest::tagged("knox/node", &[b"abc"]).to_hex(), expected);
        assert_eq!(
            Digest::tagged("knox/node", &[b"a", b"bc"]).to_hex(),
            expected
        );
        assert_ne!(
            Digest::tagged("knox/node", &[b"abc"]),
            Digest::tagged("knox/nod", &[b"eabc"])
        );
    }

    #[test]
    fn hex_round_trip_and_errors() {
        let d = Digest::sha256(b"x");
        assert_eq!(Digest::from_hex(&d.to_hex()).unwrap(), d);
        assert!(Digest::from_hex("zz").is_err());
        assert!(Digest::from_hex(&"g".repeat(64)).is_err());
    }
}
