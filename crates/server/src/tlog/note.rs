//! C2SP signed notes (<https://c2sp.org/signed-note>) and checkpoints
//! (<https://c2sp.org/tlog-checkpoint>), with the two signature types this log meets:
//! the log's own Ed25519 signature (type `0x01`) and a witness's timestamped Ed25519
//! cosignature (type `0x04`, <https://c2sp.org/tlog-cosignature>).
//!
//! ```text
//! knox.example/log            origin: the log's name, and the name of its key
//! 42                          tree size
//! 3q2+7w…=                    base64 RFC 6962 root
//!
//! — knox.example/log Az3grl…  base64(key ID ‖ Ed25519 signature of the three lines)
//! — witness.example/w1 jWbP…  base64(key ID ‖ time ‖ signature of a cosignature/v1 message)
//! ```

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use knox_attest::PartyKey;
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::digest::Digest;

/// Signature type of a plain Ed25519 note signature (the log's).
pub const ED25519: u8 = 0x01;
/// Signature type of a timestamped Ed25519 witness cosignature.
pub const COSIGNATURE_V1: u8 = 0x04;
/// The most signature lines read from one note (the format asks for at least 16).
pub const MAX_SIGNATURES: usize = 64;
/// The largest note read, in bytes.
pub const MAX_NOTE: usize = 64 * 1024;
/// The longest key name or origin accepted.
pub const MAX_NAME: usize = 255;

/// What is wrong with a note, a key or a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The bytes are not a signed note.
    #[error("not a signed note: {0}")]
    Malformed(&'static str),
    /// A key name or origin is not acceptable.
    #[error(
        "`{0}` is not a key name: 1–255 characters, no spaces, no `+`, and not a Knox \
         signature context (`knox/…`, `knox-server/…`)"
    )]
    Name(String),
    /// A verifier key does not parse.
    #[error("not a verifier key (NAME+ID+BASE64): {0}")]
    Vkey(String),
    /// The note text is not a checkpoint.
    #[error("not a checkpoint: {0}")]
    Checkpoint(&'static str),
    /// A signature line of a known key does not verify.
    #[error("the signature of `{0}` on the note does not verify")]
    BadSignature(String),
    /// No signature line of the key.
    #[error("the note carries no signature of `{0}`")]
    Unsigned(String),
}

fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    Digest::sha256(&parts.concat()).0
}

/// Whether `name` may name a key or a log: non-empty, at most [`MAX_NAME`] bytes, no
/// Unicode space, no `+`, no control character. Names that begin like a Knox signature
/// context are refused too, so that a note the log key signs (its text begins with the
/// origin) can never read as another message the same key signs.
pub fn valid_name(name: &str) -> bool {
    is_key_name(name) && !name.starts_with("knox/") && !name.starts_with("knox-server/")
}

/// The format's own rule for a key name: non-empty, no Unicode space, no `+` (and here
/// at most [`MAX_NAME`] bytes, no control character).
fn is_key_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && !name
            .chars()
            .any(|c| c.is_whitespace() || c == '+' || c.is_control())
}

/// A key that signs notes: its name, its signature type and its Ed25519 public key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteKey {
    name: String,
    kind: u8,
    public: [u8; 32],
}

impl NoteKey {
    /// A key of type [`ED25519`] or [`COSIGNATURE_V1`].
    pub fn new(name: &str, kind: u8, public: [u8; 32]) -> Result<Self, NoteError> {
        if !valid_name(name) {
            return Err(NoteError::Name(name.to_owned()));
        }
        if kind != ED25519 && kind != COSIGNATURE_V1 {
            return Err(NoteError::Vkey(format!(
                "signature type {kind:#04x} (this log reads 0x01 and 0x04)"
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            kind,
            public,
        })
    }

    /// A log key: a Knox public key under the log's origin.
    pub fn log(origin: &str, key: &PublicKey) -> Result<Self, NoteError> {
        let public: [u8; 32] = key
            .public_key
            .0
            .as_slice()
            .try_into()
            .map_err(|_| NoteError::Vkey("the public key is not 32 bytes".into()))?;
        if key.alg != "ed25519" {
            return Err(NoteError::Vkey(format!("a `{}` key", key.alg)));
        }
        Self::new(origin, ED25519, public)
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The signature type.
    pub fn kind(&self) -> u8 {
        self.kind
    }

    /// The key ID: the first four bytes of `SHA-256(name ‖ 0x0A ‖ type ‖ key)`.
    pub fn id(&self) -> u32 {
        let h = sha256(&[self.name.as_bytes(), b"\n", &[self.kind], &self.public]);
        u32::from_be_bytes([h[0], h[1], h[2], h[3]])
    }

    /// Parses a verifier key, `NAME+ID+BASE64(type ‖ key)` (the ID 8 hex digits).
    pub fn parse(vkey: &str) -> Result<Self, NoteError> {
        let bad = |why: &str| NoteError::Vkey(format!("{why} in `{vkey}`"));
        let vkey = vkey.trim();
        let mut parts = vkey.splitn(3, '+');
        let (Some(name), Some(id), Some(data)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad("not three `+`-separated parts"));
        };
        if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("the ID is not 8 hex digits"));
        }
        let id = u32::from_str_radix(id, 16).map_err(|_| bad("the ID is not hex"))?;
        let data = B64.decode(data).map_err(|_| bad("the key is not base64"))?;
        let (kind, public) = data.split_first().ok_or_else(|| bad("no key"))?;
        let public: [u8; 32] = public
            .try_into()
            .map_err(|_| bad("the key is not 32 bytes"))?;
        let key = Self::new(name, *kind, public)?;
        if key.id() != id {
            return Err(bad("the ID is not the key's"));
        }
        Ok(key)
    }

    /// The verifier key text, `NAME+ID+BASE64(type ‖ key)`.
    pub fn vkey(&self) -> String {
        let mut data = vec![self.kind];
        data.extend_from_slice(&self.public);
        format!("{}+{:08x}+{}", self.name, self.id(), B64.encode(data))
    }

    fn public_key(&self) -> PublicKey {
        PublicKey {
            alg: "ed25519".into(),
            public_key: HexBytes(self.public.to_vec()),
        }
    }

    /// The message a cosignature of `text` at `time` signs.
    fn cosigned(time: u64, text: &str) -> Vec<u8> {
        format!("cosignature/v1\ntime {time}\n{text}").into_bytes()
    }

    /// Checks `line` against this key: `Ok(None)` for a valid Ed25519 signature,
    /// `Ok(Some(time))` for a valid cosignature made at `time`.
    fn check(&self, text: &str, line: &SignatureLine) -> Result<Option<u64>, NoteError> {
        let bad = || NoteError::BadSignature(self.name.clone());
        let (time, message, sig) = match self.kind {
            COSIGNATURE_V1 => {
                let (time, sig) = line.bytes.split_first_chunk::<8>().ok_or_else(bad)?;
                let time = u64::from_be_bytes(*time);
                if time > i64::MAX as u64 {
                    return Err(bad());
                }
                (Some(time), Self::cosigned(time, text), sig)
            }
            _ => (None, text.as_bytes().to_vec(), line.bytes.as_slice()),
        };
        knox_attest::key::verify_signature(
            &self.public_key(),
            b"",
            &message,
            &HexBytes(sig.to_vec()),
        )
        .map_err(|_| bad())?;
        Ok(time)
    }
}

impl std::fmt::Display for NoteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.vkey())
    }
}

/// One signature line: `— NAME BASE64(ID ‖ SIGNATURE)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignatureLine {
    /// The key's name.
    pub name: String,
    /// The key ID.
    pub id: u32,
    /// What follows the key ID: the signature (for a cosignature, time then signature).
    pub bytes: Vec<u8>,
}

impl SignatureLine {
    fn parse(line: &str) -> Result<Self, NoteError> {
        let rest = line
            .strip_prefix("— ")
            .ok_or(NoteError::Malformed("a signature line does not begin `— `"))?;
        let (name, sig) = rest
            .split_once(' ')
            .ok_or(NoteError::Malformed("a signature line has no signature"))?;
        if !is_key_name(name) {
            return Err(NoteError::Name(name.to_owned()));
        }
        let raw = B64
            .decode(sig)
            .map_err(|_| NoteError::Malformed("a signature is not base64"))?;
        let (id, bytes) = raw.split_first_chunk::<4>().ok_or(NoteError::Malformed(
            "a signature is shorter than its key ID",
        ))?;
        if bytes.is_empty() {
            return Err(NoteError::Malformed("a signature line holds only a key ID"));
        }
        Ok(Self {
            name: name.to_owned(),
            id: u32::from_be_bytes(*id),
            bytes: bytes.to_vec(),
        })
    }

    /// Whether this line is by `key` (name and key ID both match).
    pub fn is_by(&self, key: &NoteKey) -> bool {
        self.name == key.name && self.id == key.id()
    }
}

impl std::fmt::Display for SignatureLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut raw = self.id.to_be_bytes().to_vec();
        raw.extend_from_slice(&self.bytes);
        writeln!(f, "— {} {}", self.name, B64.encode(raw))
    }
}

/// A signed note: its text (ending in a newline) and its signature lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The text, final newline included.
    pub text: String,
    /// The signature lines, in order.
    pub signatures: Vec<SignatureLine>,
}

impl Note {
    /// Parses a signed note: UTF-8 without control characters but newlines, the text
    /// separated from one or more signature lines by the note's last blank line.
    pub fn parse(bytes: &[u8]) -> Result<Self, NoteError> {
        if bytes.len() > MAX_NOTE {
            return Err(NoteError::Malformed("larger than 64 KiB"));
        }
        let s = std::str::from_utf8(bytes).map_err(|_| NoteError::Malformed("not UTF-8"))?;
        if s.bytes().any(|b| b < 0x20 && b != b'\n') {
            return Err(NoteError::Malformed("a control character"));
        }
        if !s.ends_with('\n') {
            return Err(NoteError::Malformed("no final newline"));
        }
        let split = s
            .rfind("\n\n")
            .ok_or(NoteError::Malformed("no blank line before the signatures"))?;
        let (text, sigs) = s.split_at(split + 1);
        let sigs = sigs.get(1..).unwrap_or_default();
        let signatures = sigs
            .lines()
            .map(SignatureLine::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if signatures.is_empty() {
            return Err(NoteError::Malformed("no signature line"));
        }
        if signatures.len() > MAX_SIGNATURES {
            return Err(NoteError::Malformed("more than 64 signature lines"));
        }
        Ok(Self {
            text: text.to_owned(),
            signatures,
        })
    }

    /// The note as served: text, blank line, signature lines.
    pub fn to_text(&self) -> String {
        let mut out = self.text.clone();
        out.push('\n');
        for s in &self.signatures {
            out.push_str(&s.to_string());
        }
        out
    }

    /// Checks the note's signatures by `key`: every line by it must verify, and there
    /// must be one. Returns the cosignature's time for a [`COSIGNATURE_V1`] key (the
    /// latest, if it cosigned more than once).
    pub fn verify(&self, key: &NoteKey) -> Result<Option<u64>, NoteError> {
        let mut found = None;
        for line in self.signatures.iter().filter(|l| l.is_by(key)) {
            let time = key.check(&self.text, line)?;
            found = Some(found.flatten().max(time));
        }
        found.ok_or_else(|| NoteError::Unsigned(key.name.clone()))
    }

    /// The log's Ed25519 signature line on `text`, by `key` named `name`.
    pub fn sign(text: &str, name: &str, key: &PartyKey) -> Result<SignatureLine, NoteError> {
        let id = NoteKey::log(name, &key.public_key())?.id();
        Ok(SignatureLine {
            name: name.to_owned(),
            id,
            bytes: key.sign(b"", text.as_bytes()).0,
        })
    }

    /// A witness's cosignature line on `text` at `time`, by `key` named `name`.
    pub fn cosign(
        text: &str,
        name: &str,
        key: &PartyKey,
        time: u64,
    ) -> Result<SignatureLine, NoteError> {
        let id = NoteKey::new(name, COSIGNATURE_V1, key.public_bytes())?.id();
        let mut bytes = time.to_be_bytes().to_vec();
        bytes.extend_from_slice(&key.sign(b"", &NoteKey::cosigned(time, text)).0);
        Ok(SignatureLine {
            name: name.to_owned(),
            id,
            bytes,
        })
    }
}

/// A checkpoint: the note text a log signs for one tree size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name.
    pub origin: String,
    /// Number of entries.
    pub size: u64,
    /// RFC 6962 root of those entries.
    pub root: Digest,
}

impl Checkpoint {
    /// The note text: origin, size, base64 root, each on its line.
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.root.0)
        )
    }

    /// Parses a checkpoint's note text. Extension lines are read past (no statement is
    /// made about them) but must be non-empty.
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let body = text
            .strip_suffix('\n')
            .ok_or(NoteError::Checkpoint("no final newline"))?;
        let mut lines = body.split('\n');
        let origin = lines.next().unwrap_or_default();
        if origin.is_empty() {
            return Err(NoteError::Checkpoint("no origin line"));
        }
        let size = lines.next().ok_or(NoteError::Checkpoint("no size line"))?;
        if size.is_empty()
            || !size.bytes().all(|b| b.is_ascii_digit())
            || (size.len() > 1 && size.starts_with('0'))
        {
            return Err(NoteError::Checkpoint(
                "the size is not a decimal without leading zeroes",
            ));
        }
        let size = size
            .parse()
            .map_err(|_| NoteError::Checkpoint("the size does not fit 64 bits"))?;
        let root = lines
            .next()
            .and_then(|r| B64.decode(r).ok())
            .and_then(|r| <[u8; 32]>::try_from(r).ok())
            .ok_or(NoteError::Checkpoint("the root is not 32 bytes of base64"))?;
        if lines.any(str::is_empty) {
            return Err(NoteError::Checkpoint("an empty extension line"));
        }
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root: Digest(root),
        })
    }

    /// The checkpoint signed by the log's `key` (named by the origin).
    pub fn sign(&self, key: &PartyKey) -> Result<Note, NoteError> {
        let text = self.text();
        let line = Note::sign(&text, &self.origin, key)?;
        Ok(Note {
            text,
            signatures: vec![line],
        })
    }

    /// Reads a note as a checkpoint of the log `log` (its key named by the origin):
    /// the log's signature must verify.
    pub fn open(note: &Note, log: &NoteKey) -> Result<Self, NoteError> {
        let cp = Self::parse(&note.text)?;
        if cp.origin != log.name() {
            return Err(NoteError::Checkpoint(
                "the origin is not the name of the pinned log key",
            ));
        }
        note.verify(log)?;
        Ok(cp)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn log() -> (PartyKey, NoteKey) {
        let key = PartyKey::from_seed([7; 32]);
        let vkey = NoteKey::log("knox.example/log", &key.public_key()).unwrap();
        (key, vkey)
    }

    #[test]
    fn a_checkpoint_round_trips_and_its_signature_binds_every_line() {
        let (key, vkey) = log();
        let cp = Checkpoint {
            origin: "knox.example/log".into(),
            size: 42,
            root: Digest::sha256(b"root"),
        };
        let note = cp.sign(&key).unwrap();
        let text = note.to_text();
        let parsed = Note::parse(text.as_bytes()).unwrap();
        assert_eq!(Checkpoint::open(&parsed, &vkey).unwrap(), cp);
        assert_eq!(NoteKey::parse(&vkey.vkey()).unwrap(), vkey);
        // Another size under the same signature, another key, another origin: refused.
        let forged = text.replacen("\n42\n", "\n43\n", 1);
        assert_eq!(
            Checkpoint::open(&Note::parse(forged.as_bytes()).unwrap(), &vkey),
            Err(NoteError::BadSignature("knox.example/log".into()))
        );
        let other = NoteKey::log(
            "knox.example/log",
            &PartyKey::from_seed([8; 32]).public_key(),
        )
        .unwrap();
        assert_eq!(
            Checkpoint::open(&parsed, &other),
            Err(NoteError::Unsigned("knox.example/log".into()))
        );
        let renamed = NoteKey::log("other.example/log", &key.public_key()).unwrap();
        assert!(Checkpoint::open(&parsed, &renamed).is_err());
    }

    /// The example of Go's `golang.org/x/mod/sumdb/note` documentation (BSD-3-Clause),
    /// an implementation this one shares nothing with.
    #[test]
    fn the_go_note_example_verifies() {
        let vkey =
            NoteKey::parse("PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
                .unwrap();
        let text = "If you think cryptography is the answer to your problem,\n\
                    then you don't know what your problem is.\n\n\
                    — PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
        let note = Note::parse(text.as_bytes()).unwrap();
        assert_eq!(note.verify(&vkey), Ok(None));
        assert_eq!(note.to_text(), text);
        let altered = text.replacen("answer", "Answer", 1);
        assert!(
            Note::parse(altered.as_bytes())
                .unwrap()
                .verify(&vkey)
                .is_err()
        );
    }

    #[test]
    fn a_cosignature_carries_its_time_and_is_checked_against_the_witness_key() {
        let (key, _) = log();
        let cp = Checkpoint {
            origin: "knox.example/log".into(),
            size: 3,
            root: Digest::sha256(b"r"),
        };
        let mut note = cp.sign(&key).unwrap();
        let witness = PartyKey::from_seed([9; 32]);
        let wkey =
            NoteKey::new("witness.example/w1", COSIGNATURE_V1, witness.public_bytes()).unwrap();
        note.signatures
            .push(Note::cosign(&note.text, "witness.example/w1", &witness, 1_700_000_000).unwrap());
        let parsed = Note::parse(note.to_text().as_bytes()).unwrap();
        assert_eq!(parsed.verify(&wkey), Ok(Some(1_700_000_000)));
        // The same key as a plain Ed25519 key has another ID: its line is not found.
        let plain = NoteKey::new("witness.example/w1", ED25519, witness.public_bytes()).unwrap();
        assert!(matches!(parsed.verify(&plain), Err(NoteError::Unsigned(_))));
        // A cosignature moved to another time does not verify.
        let mut moved = parsed.clone();
        if let Some(l) = moved.signatures.last_mut()
            && let Some(t) = l.bytes.get_mut(7)
        {
            *t ^= 1;
        }
        assert!(matches!(
            moved.verify(&wkey),
            Err(NoteError::BadSignature(_))
        ));
    }

    #[test]
    fn malformed_notes_keys_and_checkpoints_are_refused_not_panicked_on() {
        for bad in [
            &b""[..],
            b"text\n",
            b"text\n\n",
            b"text\n\n\xe2\x80\x94 name AAAA\n",
            b"text\n\n- name AAAAAAAA\n",
            b"te\x01xt\n\n\xe2\x80\x94 name AAAAAAAA\n",
            b"text\n\n\xe2\x80\x94 name AAAAAAAA",
            b"\xff\n\n\xe2\x80\x94 name AAAAAAAA\n",
        ] {
            assert!(Note::parse(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "o\n",
            "o\n01\nAA==\n",
            "o\n1\nAA==\n",
            "o\n-1\n",
            "o\n99999999999999999999999\n",
            "\n1\n",
        ] {
            assert!(Checkpoint::parse(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "",
            "a+b",
            "a+0000000g+AQ==",
            "a+00000000+AQ==",
            "knox/x+00000000+AQ==",
        ] {
            assert!(NoteKey::parse(bad).is_err(), "{bad:?}");
        }
        assert!(!valid_name("knox-server/tree-head/v1"));
        assert!(!valid_name("a b"));
        assert!(valid_name("knox.example/log"));
    }
}
