//! Regulator key files (`knox keygen`): the private key a regulator signs verification
//! receipts with, as `{"format": "knox-key/v1", "alg": "ed25519", "seed": HEX}`.

use serde::{Deserialize, Serialize};

use crate::TeeKey;

/// Format identifier of private key files.
pub const KEY_FORMAT: &str = "knox-key/v1";
/// The one signature algorithm of key files.
pub const KEY_ALG: &str = "ed25519";

/// Why a key file was not read.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// Not JSON of the key file's shape.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Another format or algorithm.
    #[error("not a {KEY_FORMAT} {KEY_ALG} key")]
    Format,
    /// The seed is not hex.
    #[error("its seed is not hex: {0}")]
    Hex(#[from] hex::FromHexError),
    /// The seed is not 32 bytes.
    #[error("its seed is not 32 bytes")]
    SeedLength,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    format: String,
    alg: String,
    seed: String,
}

/// The key file of `key` (pretty JSON). It holds the private seed: write it mode 0600.
pub fn encode(key: &TeeKey) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&KeyFile {
        format: KEY_FORMAT.into(),
        alg: KEY_ALG.into(),
        seed: hex::encode(key.seed()),
    })
}

/// Reads a key file.
pub fn decode(bytes: &[u8]) -> Result<TeeKey, KeyFileError> {
    let k: KeyFile = serde_json::from_slice(bytes)?;
    if k.format != KEY_FORMAT || k.alg != KEY_ALG {
        return Err(KeyFileError::Format);
    }
    let seed: [u8; 32] = hex::decode(&k.seed)?
        .try_into()
        .map_err(|_| KeyFileError::SeedLength)?;
    Ok(TeeKey::from_seed(seed))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn a_key_round_trips_and_other_files_are_refused() {
        let key = TeeKey::from_seed([7; 32]);
        let text = encode(&key).unwrap();
        assert!(text.contains("\"knox-key/v1\""));
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
