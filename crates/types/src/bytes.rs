//! Byte strings carried as lowercase hex in JSON (signatures, keys, raw evidence).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes, hex-encoded in JSON.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct HexBytes(pub Vec<u8>);

impl fmt::Debug for HexBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HexBytes({})", hex::encode(&self.0))
    }
}

impl Serialize for HexBytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for HexBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        if s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(serde::de::Error::custom("hex must be lowercase"));
        }
        hex::decode(s.as_ref())
            .map(HexBytes)
            .map_err(serde::de::Error::custom)
    }
}
