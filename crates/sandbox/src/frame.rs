//! Length-prefixed frames between the broker and a confined worker, both directions.
//!
//! A frame is a 4-byte big-endian length `n` followed by exactly `n` bytes of
//! payload; `n` is at most [`MAX_FRAME_BYTES`] (16 MiB). A length above the cap
//! is rejected from the header alone, before anything is allocated: the worker
//! is untrusted and a length is the first thing it controls. The payload is
//! opaque here (the broker and its worker binary agree on its meaning).
//!
//! The worker side reads a request with [`read_frame`] (`None` once the broker
//! closed standard input: time to exit) and answers with [`write_frame`], which
//! flushes. Writing anything else on standard output breaks the framing, and the
//! broker kills a worker that does (see [`crate::Worker::call`]).
//!
//! ```
//! use knox_sandbox::frame::{read_frame, write_frame};
//!
//! let mut wire = Vec::new();
//! write_frame(&mut wire, b"hello")?;
//! assert_eq!(wire, b"\0\0\0\x05hello");
//! let mut reader = wire.as_slice();
//! assert_eq!(read_frame(&mut reader)?.as_deref(), Some(&b"hello"[..]));
//! assert_eq!(read_frame(&mut reader)?, None);
//! # Ok::<(), knox_sandbox::frame::FrameError>(())
//! ```

use std::io::{self, Read, Write};

/// Largest payload of one frame, in bytes (16 MiB).
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// Bytes of the length prefix.
pub const HEADER_BYTES: usize = 4;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix (or a payload to send) is above [`MAX_FRAME_BYTES`].
    #[error("frame of {got} bytes, limit is {limit}")]
    TooLarge {
        /// The announced or given length.
        got: u64,
        /// The limit.
        limit: usize,
    },
    /// The stream ended inside a frame.
    #[error("stream ended after {got} of {expected} bytes of a frame")]
    Truncated {
        /// Bytes the frame needed (header included).
        expected: usize,
        /// Bytes that arrived.
        got: usize,
    },
    /// Reading or writing failed.
    #[error("frame i/o: {0}")]
    Io(#[from] io::Error),
}

/// The payload length a header announces, checked against [`MAX_FRAME_BYTES`].
pub fn decode_header(header: [u8; HEADER_BYTES]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    usize::try_from(len)
        .ok()
        .filter(|n| *n <= MAX_FRAME_BYTES)
        .ok_or(FrameError::TooLarge {
            got: u64::from(len),
            limit: MAX_FRAME_BYTES,
        })
}

/// The header for a payload of `len` bytes.
pub fn encode_header(len: usize) -> Result<[u8; HEADER_BYTES], FrameError> {
    u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_FRAME_BYTES)
        .map(u32::to_be_bytes)
        .ok_or(FrameError::TooLarge {
            got: len as u64,
            limit: MAX_FRAME_BYTES,
        })
}

/// Header and payload as one buffer (one `write` where the pipe allows it).
pub fn encode(payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let header = encode_header(payload.len())?;
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&header);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Writes one frame and flushes.
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> Result<(), FrameError> {
    w.write_all(&encode(payload)?)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; `Ok(None)` if the stream ends cleanly before a header.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>, FrameError> {
    let mut header = [0_u8; HEADER_BYTES];
    let got = read_full(r, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_BYTES {
        return Err(FrameError::Truncated {
            expected: HEADER_BYTES,
            got,
        });
    }
    let len = decode_header(header)?;
    let mut payload = vec![0_u8; len];
    let got = read_full(r, &mut payload)?;
    if got < len {
        return Err(FrameError::Truncated {
            expected: HEADER_BYTES + len,
            got: HEADER_BYTES + got,
        });
    }
    Ok(Some(payload))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut at = 0;
    while let Some(rest) = buf.get_mut(at..).filter(|b| !b.is_empty()) {
        match r.read(rest) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at)
}

/// Incremental reader of one frame from a non-blocking stream: it asks for
/// exactly the bytes the frame still needs, so that nothing of a later frame
/// (or unsolicited output) is consumed.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    header: [u8; HEADER_BYTES],
    header_got: usize,
    payload: Vec<u8>,
    len: Option<usize>,
}

impl Decoder {
    /// The buffer the next read should fill (never empty until the frame is complete).
    pub(crate) fn want(&mut self) -> &mut [u8] {
        match self.len {
            None => self.header.get_mut(self.header_got..).unwrap_or_default(),
            Some(len) => {
                let have = self.payload.len();
                let chunk = (len - have).min(64 * 1024);
                self.payload.resize(have + chunk, 0);
                self.payload.get_mut(have..).unwrap_or_default()
            }
        }
    }

    /// Records that `n` bytes of [`Decoder::want`] were filled; `Ok(Some(payload))`
    /// once the frame is complete.
    pub(crate) fn filled(&mut self, n: usize, asked: usize) -> Result<Option<Vec<u8>>, FrameError> {
        match self.len {
            None => {
                self.header_got += n;
                if self.header_got < HEADER_BYTES {
                    return Ok(None);
                }
                let len = decode_header(self.header)?;
                self.len = Some(len);
                self.payload = Vec::with_capacity(len.min(64 * 1024));
                if len == 0 {
                    return Ok(Some(Vec::new()));
                }
                Ok(None)
            }
            Some(len) => {
                // `want` grew the buffer by `asked`; keep only what arrived.
                let keep = self.payload.len() - asked + n;
                self.payload.truncate(keep);
                if self.payload.len() == len {
                    return Ok(Some(std::mem::take(&mut self.payload)));
                }
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_including_empty_frames() -> Result<(), FrameError> {
        let mut wire = Vec::new();
        for payload in [&b""[..], b"a", &[7_u8; 70_000]] {
            write_frame(&mut wire, payload)?;
        }
        let mut r = wire.as_slice();
        assert_eq!(read_frame(&mut r)?.as_deref(), Some(&b""[..]));
        assert_eq!(read_frame(&mut r)?.as_deref(), Some(&b"a"[..]));
        assert_eq!(read_frame(&mut r)?.map(|p| p.len()), Some(70_000));
        assert!(read_frame(&mut r)?.is_none());
        Ok(())
    }

    #[test]
    fn oversized_length_is_rejected_from_the_header() {
        let wire = [0xff_u8, 0xff, 0xff, 0xff, 1, 2, 3];
        let got = read_frame(&mut wire.as_slice());
        assert!(
            matches!(
                got,
                Err(FrameError::TooLarge {
                    got: 0xffff_ffff,
                    ..
                })
            ),
            "{got:?}"
        );
        assert!(encode(&vec![0; MAX_FRAME_BYTES + 1]).is_err());
        assert!(encode_header(MAX_FRAME_BYTES).is_ok());
    }

    #[test]
    fn truncated_frames_are_errors() {
        let short_header = [0_u8, 0];
        assert!(matches!(
            read_frame(&mut short_header.as_slice()),
            Err(FrameError::Truncated {
                expected: 4,
                got: 2
            })
        ));
        let short_payload = [0_u8, 0, 0, 5, b'a', b'b'];
        assert!(matches!(
            read_frame(&mut short_payload.as_slice()),
            Err(FrameError::Truncated {
                expected: 9,
                got: 6
            })
        ));
    }

    #[test]
    fn decoder_takes_exactly_one_frame_byte_by_byte() -> Result<(), FrameError> {
        let mut wire = encode(b"xyz")?;
        wire.extend_from_slice(b"trailing");
        let mut d = Decoder::default();
        let mut src = wire.iter();
        loop {
            let want = d.want();
            let asked = want.len();
            assert!(asked > 0);
            let (slot, byte) = (want.first_mut(), src.next());
            if let (Some(slot), Some(byte)) = (slot, byte) {
                *slot = *byte;
            }
            if let Some(frame) = d.filled(1, asked)? {
                assert_eq!(frame, b"xyz");
                break;
            }
        }
        assert_eq!(
            src.as_slice(),
            b"trailing",
            "nothing past the frame is consumed"
        );
        Ok(())
    }
}
