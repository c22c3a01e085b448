//! SPDM 1.1 GET_MEASUREMENTS request and MEASUREMENTS response as NVIDIA Hopper GPUs return them, parsed without trusting any length.

/// SPDM version byte for 1.1, the version Hopper speaks.
pub(super) const SPDM_1_1: u8 = 0x11;
const GET_MEASUREMENTS: u8 = 0xE0;
const MEASUREMENTS: u8 = 0x60;
/// Length of the GET_MEASUREMENTS request with a signature requested.
pub const REQUEST_LEN: usize = 37;
/// Raw ECDSA P-384 signature length (`r || s`).
pub const SIGNATURE_LEN: usize = 96;
/// SPDM nonce length.
pub const NONCE_LEN: usize = 32;

/// NVIDIA opaque-data field: driver version (NUL-terminated text).
pub const OPAQUE_DRIVER_VERSION: u16 = 3;
/// NVIDIA opaque-data field: VBIOS version (8 bytes).
pub const OPAQUE_VBIOS_VERSION: u16 = 6;
/// NVIDIA opaque-data field: FWID, SHA-384 of the attestation firmware.
pub const OPAQUE_FWID: u16 = 20;

/// Why evidence bytes are not a well-formed SPDM exchange.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpdmError {
    /// The input ended inside `what`.
    #[error("evidence ends inside {what}")]
    Truncated {
        /// The field being read.
        what: &'static str,
    },
    /// A fixed byte has another value.
    #[error("{field} is {got:#04x}, expected {expected:#04x}")]
    Unexpected {
        /// The field.
        field: &'static str,
        /// Value required.
        expected: u8,
        /// Value found.
        got: u8,
    },
    /// The request did not ask for a signature.
    #[error("request does not ask for a signed response")]
    UnsignedRequest,
    /// The declared block count differs from the blocks present.
    #[error("response declares {declared} measurement blocks, the record holds {found}")]
    BlockCount {
        /// Count in the header.
        declared: u8,
        /// Count parsed.
        found: usize,
    },
    /// A measurement block is not a DMTF-format block of consistent size.
    #[error("measurement block {index} is malformed: {reason}")]
    BadBlock {
        /// Its index.
        index: u8,
        /// What is wrong.
        reason: &'static str,
    },
    /// Two blocks share an index.
    #[error("measurement index {index} appears twice")]
    DuplicateIndex {
        /// The index.
        index: u8,
    },
    /// Opaque data is not a sequence of type-length-value fields.
    #[error("opaque data is malformed")]
    BadOpaque,
    /// Non-zero bytes follow the signature.
    #[error("{extra} bytes after the signature are not zero padding")]
    TrailingBytes {
        /// How many.
        extra: usize,
    },
}

/// One DMTF measurement block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MeasurementBlock {
    /// Index, from 1.
    pub index: u8,
    /// DMTF value type (bit 7: raw bit stream rather than digest).
    pub value_type: u8,
    /// The measurement (a SHA-384 digest on Hopper).
    pub value: Vec<u8>,
}

/// One field of NVIDIA's opaque data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpaqueField {
    /// Field type (NVIDIA `OPAQUE_FIELD_ID_*`).
    pub kind: u16,
    /// Raw value.
    pub value: Vec<u8>,
}

/// A parsed request/response pair. Nothing in it is authenticated yet.
#[derive(Clone, Debug)]
pub(crate) struct Exchange<'a> {
    pub(crate) request_nonce: [u8; NONCE_LEN],
    pub(crate) response_nonce: [u8; NONCE_LEN],
    pub(crate) blocks: Vec<MeasurementBlock>,
    pub(crate) opaque: Vec<OpaqueField>,
    /// Request followed by the response up to (not including) the signature.
    pub(crate) signed: &'a [u8],
    pub(crate) signature: &'a [u8],
    pub(crate) padding: usize,
}

/// A cursor that never reads past its input.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SpdmError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(SpdmError::Truncated { what })?;
        let out = self
            .buf
            .get(self.pos..end)
            .ok_or(SpdmError::Truncated { what })?;
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, SpdmError> {
        self.take(1, what)?
            .first()
            .copied()
            .ok_or(SpdmError::Truncated { what })
    }

    fn le(&mut self, n: usize, what: &'static str) -> Result<usize, SpdmError> {
        let bytes = self.take(n, what)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b)))
    }

    fn expect(&mut self, field: &'static str, expected: u8) -> Result<(), SpdmError> {
        let got = self.u8(field)?;
        if got == expected {
            Ok(())
        } else {
            Err(SpdmError::Unexpected {
                field,
                expected,
                got,
            })
        }
    }

    fn nonce(&mut self, what: &'static str) -> Result<[u8; NONCE_LEN], SpdmError> {
        self.take(NONCE_LEN, what)?
            .try_into()
            .map_err(|_| SpdmError::Truncated { what })
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }
}

fn parse_block(c: &mut Cursor<'_>) -> Result<MeasurementBlock, SpdmError> {
    let index = c.u8("measurement block index")?;
    let bad = |reason| SpdmError::BadBlock { index, reason };
    let spec = c.u8("measurement specification")?;
    if spec & 1 == 0 {
        return Err(bad("not a dmtf measurement"));
    }
    let size = c.le(2, "measurement size")?;
    let mut body = Cursor {
        buf: c.take(size, "measurement")?,
        pos: 0,
    };
    let value_type = body.u8("dmtf value type").map_err(|_| bad("empty"))?;
    let value_size = body
        .le(2, "dmtf value size")
        .map_err(|_| bad("short header"))?;
    if value_size.checked_add(3) != Some(size) {
        return Err(bad("dmtf value size disagrees with block size"));
    }
    Ok(MeasurementBlock {
        index,
        value_type,
        value: body.rest().to_vec(),
    })
}

fn parse_opaque(bytes: &[u8]) -> Result<Vec<OpaqueField>, SpdmError> {
    let mut c = Cursor { buf: bytes, pos: 0 };
    let mut fields = Vec::new();
    while c.pos < bytes.len() {
        let kind = u16::try_from(c.le(2, "opaque type").map_err(|_| SpdmError::BadOpaque)?)
            .map_err(|_| SpdmError::BadOpaque)?;
        let len = c.le(2, "opaque length").map_err(|_| SpdmError::BadOpaque)?;
        let value = c
            .take(len, "opaque value")
            .map_err(|_| SpdmError::BadOpaque)?;
        fields.push(OpaqueField {
            kind,
            value: value.to_vec(),
        });
    }
    Ok(fields)
}

/// Parses request || response || signature, as NVML returns it.
pub(crate) fn parse(evidence: &[u8]) -> Result<Exchange<'_>, SpdmError> {
    let mut c = Cursor {
        buf: evidence,
        pos: 0,
    };
    c.expect("request spdm version", SPDM_1_1)?;
    c.expect("request code", GET_MEASUREMENTS)?;
    if c.u8("request attributes")? & 1 == 0 {
        return Err(SpdmError::UnsignedRequest);
    }
    c.u8("request measurement operation")?;
    let request_nonce = c.nonce("request nonce")?;
    c.u8("request slot")?;
    c.expect("response spdm version", SPDM_1_1)?;
    c.expect("response code", MEASUREMENTS)?;
    c.take(2, "response parameters")?;
    let declared = c.u8("number of blocks")?;
    let record_len = c.le(3, "measurement record length")?;
    let mut record = Cursor {
        buf: c.take(record_len, "measurement record")?,
        pos: 0,
    };
    let mut blocks: Vec<MeasurementBlock> = Vec::new();
    while record.pos < record.buf.len() {
        let block = parse_block(&mut record)?;
        if blocks.iter().any(|b| b.index == block.index) {
            return Err(SpdmError::DuplicateIndex { index: block.index });
        }
        blocks.push(block);
    }
    if blocks.len() != usize::from(declared) {
        return Err(SpdmError::BlockCount {
            declared,
            found: blocks.len(),
        });
    }
    let response_nonce = c.nonce("response nonce")?;
    let opaque_len = c.le(2, "opaque length")?;
    let opaque = parse_opaque(c.take(opaque_len, "opaque data")?)?;
    let signed_len = c.pos;
    let signature = c.take(SIGNATURE_LEN, "signature")?;
    let tail = c.rest();
    // NVML hands out a fixed-size buffer; some recorded evidence keeps a zero
    // byte of it after the signature. Zeros are tolerated, nothing else.
    if tail.iter().any(|b| *b != 0) {
        return Err(SpdmError::TrailingBytes { extra: tail.len() });
    }
    Ok(Exchange {
        request_nonce,
        response_nonce,
        blocks,
        opaque,
        signed: evidence.get(..signed_len).unwrap_or_default(),
        signature,
        padding: tail.len(),
    })
}

/// Formats NVIDIA's 8-byte VBIOS version field as `96.00.9f.00.01`.
pub(crate) fn vbios_version(raw: &[u8]) -> Option<String> {
    let [a, b, c, d, e, ..] = raw else {
        return None;
    };
    // The first four bytes are a little-endian u32 printed as four hex pairs,
    // then the low byte of the next word.
    Some(format!("{d:02x}.{c:02x}.{b:02x}.{a:02x}.{e:02x}"))
}

/// The driver version text, up to its NUL.
pub(crate) fn driver_version(raw: &[u8]) -> Option<String> {
    let text = raw.split(|b| *b == 0).next()?;
    std::str::from_utf8(text).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_vbios_like_nvidia() {
        let raw = hex::decode("009f009601000000").unwrap_or_default();
        assert_eq!(vbios_version(&raw).as_deref(), Some("96.00.9f.00.01"));
        assert_eq!(vbios_version(&[1, 2]), None);
    }

    #[test]
    fn reads_driver_version_up_to_nul() {
        assert_eq!(driver_version(b"550.90.07\0").as_deref(), Some("550.90.07"));
    }

    #[test]
    fn short_inputs_are_truncated_not_panics() {
        for len in 0..40 {
            let mut input = vec![0u8; len];
            if let Some(b) = input.first_mut() {
                *b = SPDM_1_1;
            }
            if let Some(b) = input.get_mut(1) {
                *b = GET_MEASUREMENTS;
            }
            if let Some(b) = input.get_mut(2) {
                *b = 1;
            }
            assert!(parse(&input).is_err());
        }
    }
}
