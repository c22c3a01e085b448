//! Key files of the keys parties keep ([`PartyKey`]: `knox keygen`, `knox serve`'s log
//! key, contract authorities): PKCS#8 (RFC 5958, RFC 8410 for Ed25519) in PEM, the form
//! OpenSSL and every other toolkit read:
//!
//! ```text
//! -----BEGIN PRIVATE KEY-----
//! MC4CAQAwBQYDK2VwBCIEI…
//! -----END PRIVATE KEY-----
//! ```
//!
//! Files of the earlier JSON form `{"format": "knox-key/v1", "alg": "ed25519", "seed":
//! HEX}` are still read. The in-TEE key ([`crate::TeeKey`]) has no file form.

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey as _, EncodePrivateKey as _, spki::der::pem::LineEnding,
};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::key::PartyKey;

/// Format identifier of the earlier JSON key files (read, no longer written).
pub const KEY_FORMAT: &str = "knox-key/v1";
/// The one signature algorithm of key files.
pub const KEY_ALG: &str = "ed25519";

/// Why a key file was not read.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// A PEM file that is not an Ed25519 PKCS#8 private key.
    #[error("not an Ed25519 PKCS#8 private key: {0}")]
    Pkcs8(String),
    /// Neither PEM nor JSON of the earlier key file's shape.
    #[error("neither a PEM private key nor a {KEY_FORMAT} key file: {0}")]
    Json(#[from] serde_json::Error),
    /// An earlier key file of another format or algorithm.
    #[error("not a {KEY_FORMAT} {KEY_ALG} key")]
    Format,
    /// The seed is not hex.
    #[error("its seed is not hex: {0}")]
    Hex(#[from] hex::FromHexError),
    /// The seed is not 32 bytes.
    #[error("its seed is not 32 bytes")]
    SeedLength,
}

/// Why a key could not be encoded.
#[derive(Debug, thiserror::Error)]
#[error("cannot encode the key as PKCS#8: {0}")]
pub struct EncodeError(String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyKeyFile {
    format: String,
    alg: String,
    seed: String,
}

/// The key file of `key`: PKCS#8 PEM. It holds the private key: write it mode 0600.
pub fn encode(key: &PartyKey) -> Result<Zeroizing<String>, EncodeError> {
    key.signing()
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| EncodeError(e.to_string()))
}

/// Reads a key file: PKCS#8 PEM, or the earlier `knox-key/v1` JSON.
pub fn decode(bytes: &[u8]) -> Result<PartyKey, KeyFileError> {
    let text = std::str::from_utf8(bytes).ok().map(str::trim_start);
    if let Some(pem) = text.filter(|t| t.starts_with("-----BEGIN")) {
        return SigningKey::from_pkcs8_pem(pem)
            .map(PartyKey::from_signing)
            .map_err(|e| KeyFileError::Pkcs8(e.to_string()));
    }
    let k: LegacyKeyFile = serde_json::from_slice(bytes)?;
    if k.format != KEY_FORMAT || k.alg != KEY_ALG {
        return Err(KeyFileError::Format);
    }
    let text = Zeroizing::new(k.seed);
    let seed = Zeroizing::new(hex::decode(text.as_str())?);
    let seed: [u8; 32] = seed
        .as_slice()
        .try_into()
        .map_err(|_| KeyFileError::SeedLength)?;
    Ok(PartyKey::from_seed(seed))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_as_pkcs8_pem() {
        let key = PartyKey::from_seed([7; 32]);
        let pem = encode(&key).unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{}", *pem);
        assert_eq!(decode(pem.as_bytes()).unwrap().key_id(), key.key_id());
        // RFC 8410 section 10.3's example key, as OpenSSL writes it.
        let rfc = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n";
        assert_eq!(
            hex::encode(decode(rfc.as_bytes()).unwrap().public_bytes()),
            "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1"
        );
        // Another algorithm's key (an X25519 key of RFC 8410) is refused.
        let x25519 = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VuBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n";
        assert!(matches!(
            decode(x25519.as_bytes()),
            Err(KeyFileError::Pkcs8(_))
        ));
        let cut = &pem[..pem.len() / 2];
        assert!(matches!(
            decode(cut.as_bytes()),
            Err(KeyFileError::Pkcs8(_))
        ));
    }

    #[test]
    fn an_earlier_json_key_file_is_read_and_others_are_refused() {
        let key = PartyKey::from_seed([7; 32]);
        let text = format!(
            r#"{{"format": "knox-key/v1", "alg": "ed25519", "seed": "{}"}}"#,
            "07".repeat(32)
        );
        assert_eq!(decode(text.as_bytes()).unwrap().key_id(), key.key_id());
        let other = text.replace("ed25519", "rsa");
        assert!(matches!(
            decode(other.as_bytes()),
            Err(KeyFileError::Format)
        ));
        let short = text.replace(&"07".repeat(32), "0707");
        assert!(matches!(
            decode(short.as_bytes()),
            Err(KeyFileError::SeedLength)
        ));
        let odd = text.replace(&"07".repeat(32), "zz");
        assert!(matches!(decode(odd.as_bytes()), Err(KeyFileError::Hex(_))));
        assert!(matches!(decode(b"{}"), Err(KeyFileError::Json(_))));
        assert!(decode(b"\xff").is_err());
    }
}
