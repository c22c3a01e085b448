//! Signed requests. Every API request carries the caller's Ed25519 public key, the time,
//! a fresh nonce and a signature over the method, path and query, time, nonce and the
//! SHA-256 of the body. The server accepts it when the key is a registered principal,
//! the time is within [`MAX_SKEW_SECS`] of its clock, the signature verifies and the
//! nonce was never seen from that key (a replay is refused, across replicas: the nonce
//! table is in the shared store). Browsers get a short-lived session token issued
//! against such a signed request.

use knox_attest::PartyKey;
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::digest::Digest;

/// Header: the caller's public key, 64 hex digits.
pub const KEY_HEADER: &str = "x-knox-key";
/// Header: Unix seconds when the request was signed.
pub const TIME_HEADER: &str = "x-knox-time";
/// Header: a fresh random nonce, 32 hex digits.
pub const NONCE_HEADER: &str = "x-knox-nonce";
/// Header: the Ed25519 signature, 128 hex digits.
pub const SIGNATURE_HEADER: &str = "x-knox-signature";
/// Signature context of a request.
pub const REQUEST_CONTEXT: &[u8] = b"knox-server/request/v1\n";
/// How far a request's time may be from the server's clock, either way.
pub const MAX_SKEW_SECS: u64 = 300;
/// Lifetime of a browser session token.
pub const SESSION_SECS: u64 = 900;
/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "knox_session";

/// The bytes a request signature covers.
pub fn message(method: &str, path_and_query: &str, time: u64, nonce: &str, body: &[u8]) -> Vec<u8> {
    format!(
        "{method}\n{path_and_query}\n{time}\n{nonce}\n{}",
        Digest::sha256(body).to_hex()
    )
    .into_bytes()
}

/// The four headers of a request signed by `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// [`KEY_HEADER`].
    pub key: String,
    /// [`TIME_HEADER`].
    pub time: String,
    /// [`NONCE_HEADER`].
    pub nonce: String,
    /// [`SIGNATURE_HEADER`].
    pub signature: String,
}

impl Signed {
    /// Signs a request now with a fresh random nonce; an error only when the system
    /// has no randomness to give.
    pub fn new(
        key: &PartyKey,
        method: &str,
        path_and_query: &str,
        body: &[u8],
    ) -> Result<Self, getrandom::Error> {
        let mut nonce = [0u8; 16];
        getrandom::fill(&mut nonce)?;
        Ok(Self::with(
            key,
            method,
            path_and_query,
            body,
            now(),
            &hex::encode(nonce),
        ))
    }

    /// Signs a request with the time and nonce given (tests replay and skew with it).
    pub fn with(
        key: &PartyKey,
        method: &str,
        path_and_query: &str,
        body: &[u8],
        time: u64,
        nonce: &str,
    ) -> Self {
        let sig = key.sign(
            REQUEST_CONTEXT,
            &message(method, path_and_query, time, nonce, body),
        );
        Self {
            key: hex::encode(key.public_bytes()),
            time: time.to_string(),
            nonce: nonce.to_owned(),
            signature: hex::encode(sig.0),
        }
    }

    /// The headers, as name/value pairs.
    pub fn headers(&self) -> [(&'static str, &str); 4] {
        [
            (KEY_HEADER, &self.key),
            (TIME_HEADER, &self.time),
            (NONCE_HEADER, &self.nonce),
            (SIGNATURE_HEADER, &self.signature),
        ]
    }
}

/// Why a request's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A header is missing.
    #[error("missing header {0}")]
    Missing(&'static str),
    /// A header is not of its form.
    #[error("malformed header {0}")]
    Malformed(&'static str),
    /// The request's time is too far from the server's.
    #[error("request time outside the accepted window")]
    Stale,
    /// The signature does not verify.
    #[error("signature does not verify")]
    BadSignature,
    /// The key is not a registered principal.
    #[error("unknown key")]
    UnknownKey,
    /// The nonce was already used by this key.
    #[error("replayed request (nonce already used)")]
    Replay,
    /// No session, or an expired or unknown one.
    #[error("no valid session")]
    NoSession,
}

/// A request's signature headers, parsed strictly.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The caller's public key.
    pub public: [u8; 32],
    /// The signed time.
    pub time: u64,
    /// The nonce, lowercase hex.
    pub nonce: String,
    /// The signature.
    pub signature: [u8; 64],
}

fn fixed_hex<const N: usize>(s: &str, name: &'static str) -> Result<[u8; N], AuthError> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(AuthError::Malformed(name));
    }
    let v = hex::decode(s).map_err(|_| AuthError::Malformed(name))?;
    v.try_into().map_err(|_| AuthError::Malformed(name))
}

impl Claimed {
    /// Parses the four headers (`get` returns a header's value).
    pub fn parse<'a>(get: impl Fn(&'static str) -> Option<&'a str>) -> Result<Self, AuthError> {
        let need = |n: &'static str| get(n).ok_or(AuthError::Missing(n));
        let public = fixed_hex::<32>(need(KEY_HEADER)?, KEY_HEADER)?;
        let t = need(TIME_HEADER)?;
        if t.is_empty() || t.len() > 20 || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(AuthError::Malformed(TIME_HEADER));
        }
        let time = t
            .parse::<u64>()
            .map_err(|_| AuthError::Malformed(TIME_HEADER))?;
        let nonce = need(NONCE_HEADER)?;
        fixed_hex::<16>(nonce, NONCE_HEADER)?;
        let signature = fixed_hex::<64>(need(SIGNATURE_HEADER)?, SIGNATURE_HEADER)?;
        Ok(Self {
            public,
            time,
            nonce: nonce.to_owned(),
            signature,
        })
    }

    /// `H("knox/key", public)`, hex: the principal's id.
    pub fn key_id(&self) -> String {
        knox_attest::key::key_id(&self.public).to_hex()
    }

    /// Checks the time window and the signature (the nonce and the key's registration
    /// are the store's to check).
    pub fn verify(
        &self,
        method: &str,
        path_and_query: &str,
        body: &[u8],
        now: u64,
    ) -> Result<(), AuthError> {
        if self.time.abs_diff(now) > MAX_SKEW_SECS {
            return Err(AuthError::Stale);
        }
        let key = PublicKey {
            alg: knox_attest::key::ALG.into(),
            public_key: HexBytes(self.public.to_vec()),
        };
        knox_attest::key::verify_signature(
            &key,
            REQUEST_CONTEXT,
            &message(method, path_and_query, self.time, &self.nonce, body),
            &HexBytes(self.signature.to_vec()),
        )
        .map_err(|_| AuthError::BadSignature)
    }
}

/// Unix seconds now.
pub fn now() -> u64 {
    knox_attest::hardware::now_unix()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn parse(s: &Signed) -> Result<Claimed, AuthError> {
        Claimed::parse(|n| {
            s.headers()
                .into_iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v)
        })
    }

    #[test]
    fn a_signed_request_verifies_and_any_change_is_refused() {
        let key = PartyKey::from_seed([9; 32]);
        let s = Signed::with(&key, "POST", "/api/runs", b"body", 1000, &"ab".repeat(16));
        let c = parse(&s).unwrap();
        assert_eq!(c.key_id(), key.key_id().to_hex());
        assert_eq!(c.verify("POST", "/api/runs", b"body", 1000), Ok(()));
        assert_eq!(
            c.verify("POST", "/api/runs", b"bodY", 1000),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            c.verify("GET", "/api/runs", b"body", 1000),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            c.verify("POST", "/api/runs?x=1", b"body", 1000),
            Err(AuthError::BadSignature)
        );
        assert_eq!(
            c.verify("POST", "/api/runs", b"body", 1301),
            Err(AuthError::Stale)
        );
        let mut other = s.clone();
        other.key = hex::encode(PartyKey::from_seed([8; 32]).public_bytes());
        assert_eq!(
            parse(&other)
                .unwrap()
                .verify("POST", "/api/runs", b"body", 1000),
            Err(AuthError::BadSignature)
        );
        let mut bad = s.clone();
        bad.nonce = "../../etc/passwd".into();
        assert!(matches!(
            parse(&bad),
            Err(AuthError::Malformed(NONCE_HEADER))
        ));
        let mut bad = s.clone();
        bad.time = "1' OR '1'='1".into();
        assert!(matches!(
            parse(&bad),
            Err(AuthError::Malformed(TIME_HEADER))
        ));
        let mut bad = s;
        bad.signature = bad.signature.to_uppercase();
        assert!(matches!(
            parse(&bad),
            Err(AuthError::Malformed(SIGNATURE_HEADER))
        ));
        assert!(matches!(
            Claimed::parse(|_| None),
            Err(AuthError::Missing(KEY_HEADER))
        ));
    }
}
