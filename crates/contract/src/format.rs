//! The contract document (`knox-contract/v1`) and its structural validation.
//!
//! Every field is required and unknown fields are refused, so the canonical form of a
//! parsed contract is exactly the canonical form of the JSON that was signed: nothing
//! is filled in by a default that the authority did not sign.

use std::collections::{BTreeMap, BTreeSet};

use knox_types::digest::Digest;
use serde::{Deserialize, Serialize};

/// The format identifier of this version.
pub const FORMAT: &str = "knox-contract/v1";
/// Domain-separation tag of the contract hash `H("knox/contract", canonical(contract))`.
pub const CONTRACT_TAG: &str = "knox/contract";
/// Largest integer a contract may hold: canonical JSON is exact up to 2^53.
pub const MAX_SAFE: u64 = 1 << 53;
/// Most capabilities of each kind.
pub const MAX_CAPS: usize = 256;
/// Most argv templates per executable, and most arguments per template.
pub const MAX_ARGV: usize = 64;
/// Longest string a contract field may hold.
pub const MAX_STRING: usize = 4096;

/// A capability contract: what a session may do, signed by an authority.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Always [`FORMAT`].
    pub format: String,
    /// A name for the contract (what it is for).
    pub id: String,
    /// Unix milliseconds from which it is valid.
    pub valid_from_ms: u64,
    /// Unix milliseconds after which it is no longer valid.
    pub valid_until_ms: u64,
    /// Session budget in cents: reserved plus spent never exceeds it.
    pub budget_cents: u64,
    /// Most actions a session may be authorized.
    pub max_actions: u64,
    /// Directory capabilities by id.
    pub directories: BTreeMap<String, DirectoryCap>,
    /// Executable capabilities by id.
    pub executables: BTreeMap<String, ExecutableCap>,
    /// Network endpoint capabilities by id.
    pub endpoints: BTreeMap<String, EndpointCap>,
    /// Who may approve: name → Ed25519 public key (64 hex digits).
    pub approvers: BTreeMap<String, String>,
    /// Impact levels whose actions need a human approval.
    pub approval_required: BTreeSet<Impact>,
    /// Longest lifetime an approval token may declare (`expires - issued`).
    pub max_approval_ttl_ms: u64,
}

/// How much harm an operation can do; the authority sets it per capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Impact {
    /// Reads, local scratch writes.
    Low,
    /// Ordinary changes.
    Medium,
    /// Changes others see (deploys, payments).
    High,
    /// Irreversible.
    Critical,
}

/// Read or read-write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirAccess {
    /// Read files beneath the root.
    Read,
    /// Read and write (create, truncate) files beneath the root.
    Write,
}

/// A directory the session may use through relative paths.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectoryCap {
    /// Absolute path of the root; files are resolved beneath it, never above.
    pub root: String,
    /// What may be done there.
    pub access: DirAccess,
    /// Cost of one action through this capability.
    pub cost_cents: u64,
    /// Impact of one action through this capability.
    pub impact: Impact,
}

/// An executable the session may run, pinned by digest, with exact argv templates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutableCap {
    /// Absolute directory the binary is resolved beneath.
    pub root: String,
    /// The binary's path relative to `root` (no `..`, no symbolic link on the way).
    pub path: String,
    /// SHA-256 of the binary's bytes (64 lowercase hex digits).
    pub sha256: String,
    /// Allowed argument lists (after `argv[0]`): one must match exactly.
    pub argv: Vec<Vec<ArgPattern>>,
    /// A directory capability with write access used as the working directory (and
    /// the only place the process may write); `None`: a fresh empty one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Cost of one run.
    pub cost_cents: u64,
    /// Impact of one run.
    pub impact: Impact,
}

/// One position of an argv template: a literal or a typed hole.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ArgPattern {
    /// Exactly this string.
    Lit(String),
    /// Any string of this type.
    Hole(Hole),
}

/// The types a hole accepts. None of them can start with `-`, so no hole can smuggle
/// an option in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hole {
    /// A decimal integer, `0`–`999999999999999999`.
    Int,
    /// 1–64 characters of `[A-Za-z0-9_.]`, not starting with `.`.
    Word,
    /// A relative path of `[A-Za-z0-9_.-/]`, no `..` component, not absolute, not
    /// starting with `-` (the kernel sandbox decides what it reaches).
    Relpath,
}

/// `http` or `https`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Plain HTTP (loopback services).
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// Its name in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

/// A network endpoint the session may call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointCap {
    /// The scheme.
    pub scheme: Scheme,
    /// Host name (lowercase) or IP address, exactly.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// The request path must be this prefix (whole segments) or below it.
    pub path_prefix: String,
    /// Allowed methods (`GET`, `POST`, …).
    pub methods: BTreeSet<String>,
    /// Cost of one request.
    pub cost_cents: u64,
    /// Impact of one request.
    pub impact: Impact,
    /// The capabilities whose data this endpoint is cleared to receive (issue 36,
    /// item 1): ids of this contract's directories, executables or other endpoints. In
    /// a session nobody gave a prompt — the contract alone bounds it — every parameter
    /// of a request is composed by the agent, so it carries every output the agent read
    /// before it (a file's text, a program's output, another endpoint's answer), in
    /// whatever form; the request runs only when the endpoint is cleared for the
    /// capability each came through. An endpoint is always cleared for its own
    /// answers. Empty (the default, and left out when written): cleared for nothing
    /// else, so a session that read a file sends no request until the authority says
    /// where that data may go.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub receives: BTreeSet<String>,
}

/// Why a contract is structurally invalid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContractError {
    /// Not a contract of this format.
    #[error("format `{0}` is not `{FORMAT}`")]
    Format(String),
    /// A field's value is out of its domain.
    #[error("{field}: {reason}")]
    Field {
        /// JSON-pointer-like location.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> ContractError {
    ContractError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Capability ids: 1–64 of `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An absolute path with no `.`/`..`/empty components and no NUL.
pub fn valid_root(p: &str) -> bool {
    p.starts_with('/')
        && p.len() <= MAX_STRING
        && !p.contains('\0')
        && (p == "/" || p.trim_start_matches('/').split('/').all(component_ok))
}

fn component_ok(c: &str) -> bool {
    !c.is_empty() && c != "." && c != ".."
}

/// A relative path: non-empty, not absolute, every component non-empty and neither
/// `.` nor `..`, no NUL. Lexical only: the broker resolves it beneath the root with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.
pub fn valid_relative(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_STRING
        && !p.starts_with('/')
        && !p.contains('\0')
        && p.split('/').all(component_ok)
}

fn check_number(field: &str, n: u64) -> Result<(), ContractError> {
    if n > MAX_SAFE {
        return Err(bad(field, "exceeds 2^53"));
    }
    Ok(())
}

fn check_string(field: &str, s: &str) -> Result<(), ContractError> {
    if s.len() > MAX_STRING || s.contains('\0') {
        return Err(bad(field, "longer than 4096 bytes or holds NUL"));
    }
    Ok(())
}

/// Host names: lowercase letters, digits, `.`, `-`, or an IPv4 address; 1–253 bytes.
pub fn valid_host(h: &str) -> bool {
    (1..=253).contains(&h.len())
        && h.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && !h.starts_with('.')
        && !h.ends_with('.')
}

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

impl Contract {
    /// `H("knox/contract", canonical(self))`.
    pub fn hash(&self) -> Digest {
        // The contract has only strings, integers, maps and sequences: serialization
        // cannot fail; an impossible failure hashes the empty document.
        let bytes = knox_types::canon::to_canonical(self).unwrap_or_default();
        Digest::tagged(CONTRACT_TAG, &[&bytes])
    }

    /// Structural validation: every rule the decision function relies on.
    pub fn validate(&self) -> Result<(), ContractError> {
        if self.format != FORMAT {
            return Err(ContractError::Format(
                self.format.chars().take(64).collect(),
            ));
        }
        if self.id.is_empty() || self.id.len() > 128 || self.id.contains('\0') {
            return Err(bad("/id", "must be 1–128 bytes without NUL"));
        }
        for (f, n) in [
            ("/valid_from_ms", self.valid_from_ms),
            ("/valid_until_ms", self.valid_until_ms),
            ("/budget_cents", self.budget_cents),
            ("/max_actions", self.max_actions),
            ("/max_approval_ttl_ms", self.max_approval_ttl_ms),
        ] {
            check_number(f, n)?;
        }
        if self.valid_from_ms >= self.valid_until_ms {
            return Err(bad("/valid_until_ms", "must be after valid_from_ms"));
        }
        let total = self.directories.len() + self.executables.len() + self.endpoints.len();
        if total > 3 * MAX_CAPS
            || [
                self.directories.len(),
                self.executables.len(),
                self.endpoints.len(),
            ]
            .iter()
            .any(|n| *n > MAX_CAPS)
        {
            return Err(bad("/", "too many capabilities"));
        }
        for (id, d) in &self.directories {
            let f = format!("/directories/{id}");
            if !valid_id(id) {
                return Err(bad(f, "capability ids are 1–64 of [A-Za-z0-9_-]"));
            }
            if !valid_root(&d.root) {
                return Err(bad(
                    format!("{f}/root"),
                    "must be an absolute, normalized path",
                ));
            }
            check_number(&format!("{f}/cost_cents"), d.cost_cents)?;
        }
        for (id, e) in &self.executables {
            self.validate_executable(id, e)?;
        }
        for (id, e) in &self.endpoints {
            let f = format!("/endpoints/{id}");
            if !valid_id(id) {
                return Err(bad(f, "capability ids are 1–64 of [A-Za-z0-9_-]"));
            }
            if !valid_host(&e.host) {
                return Err(bad(
                    format!("{f}/host"),
                    "must be a lowercase host name or IPv4 address",
                ));
            }
            if e.port == 0 {
                return Err(bad(format!("{f}/port"), "must not be 0"));
            }
            check_string(&format!("{f}/path_prefix"), &e.path_prefix)?;
            if !e.path_prefix.starts_with('/') || crate::url::ambiguous_path(&e.path_prefix) {
                return Err(bad(
                    format!("{f}/path_prefix"),
                    "must start with `/` and hold no dot segments or escapes",
                ));
            }
            if e.methods.is_empty() || e.methods.iter().any(|m| !METHODS.contains(&m.as_str())) {
                return Err(bad(
                    format!("{f}/methods"),
                    "one or more of GET HEAD POST PUT PATCH DELETE OPTIONS",
                ));
            }
            check_number(&format!("{f}/cost_cents"), e.cost_cents)?;
            if let Some(r) = e.receives.iter().find(|r| !self.names(r)) {
                return Err(bad(
                    format!("{f}/receives"),
                    format!(
                        "`{}` is no directory, executable or endpoint of this contract",
                        r.chars().take(64).collect::<String>()
                    ),
                ));
            }
        }
        for (name, key) in &self.approvers {
            let f = format!("/approvers/{name}");
            if !valid_id(name) {
                return Err(bad(f, "approver names are 1–64 of [A-Za-z0-9_-]"));
            }
            if approver_key(key).is_none() {
                return Err(bad(
                    f,
                    "must be a 32-byte Ed25519 public key in lowercase hex",
                ));
            }
        }
        if !self.approval_required.is_empty() && self.approvers.is_empty() {
            return Err(bad(
                "/approvers",
                "approval is required for some impact levels but nobody may approve",
            ));
        }
        Ok(())
    }

    /// Whether `id` names one of the contract's capabilities.
    pub fn names(&self, id: &str) -> bool {
        self.directories.contains_key(id)
            || self.executables.contains_key(id)
            || self.endpoints.contains_key(id)
    }

    fn validate_executable(&self, id: &str, e: &ExecutableCap) -> Result<(), ContractError> {
        let f = format!("/executables/{id}");
        if !valid_id(id) {
            return Err(bad(f, "capability ids are 1–64 of [A-Za-z0-9_-]"));
        }
        if !valid_root(&e.root) {
            return Err(bad(
                format!("{f}/root"),
                "must be an absolute, normalized path",
            ));
        }
        if !valid_relative(&e.path) {
            return Err(bad(
                format!("{f}/path"),
                "must be a relative path without `.`/`..` components",
            ));
        }
        if Digest::from_hex(&e.sha256).is_err() {
            return Err(bad(
                format!("{f}/sha256"),
                "must be 64 lowercase hex digits",
            ));
        }
        if e.argv.is_empty() || e.argv.len() > MAX_ARGV {
            return Err(bad(format!("{f}/argv"), "1–64 templates"));
        }
        for (i, t) in e.argv.iter().enumerate() {
            if t.len() > MAX_ARGV {
                return Err(bad(format!("{f}/argv/{i}"), "at most 64 arguments"));
            }
            for (j, a) in t.iter().enumerate() {
                if let ArgPattern::Lit(s) = a {
                    check_string(&format!("{f}/argv/{i}/{j}"), s)?;
                }
            }
        }
        if let Some(w) = &e.workdir {
            match self.directories.get(w) {
                Some(d) if d.access == DirAccess::Write => {}
                _ => {
                    return Err(bad(
                        format!("{f}/workdir"),
                        "must name a directory capability with write access",
                    ));
                }
            }
        }
        check_number(&format!("{f}/cost_cents"), e.cost_cents)
    }

    /// The public key of approver `name`, when listed.
    pub fn approver(&self, name: &str) -> Option<knox_types::bundle::PublicKey> {
        self.approvers.get(name).and_then(|k| approver_key(k))
    }
}

/// A 64-hex-digit Ed25519 public key as Knox's `PublicKey`.
pub fn approver_key(hex_key: &str) -> Option<knox_types::bundle::PublicKey> {
    let d = Digest::from_hex(hex_key).ok()?;
    Some(knox_types::bundle::PublicKey {
        alg: knox_attest::key::ALG.into(),
        public_key: knox_types::bytes::HexBytes(d.0.to_vec()),
    })
}

/// Whether `arg` is a value of `hole`.
pub fn hole_matches(hole: Hole, arg: &str) -> bool {
    match hole {
        Hole::Int => (1..=18).contains(&arg.len()) && arg.bytes().all(|b| b.is_ascii_digit()),
        Hole::Word => {
            (1..=64).contains(&arg.len())
                && !arg.starts_with('.')
                && arg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        }
        Hole::Relpath => {
            valid_relative(arg)
                && !arg.starts_with('-')
                && arg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
        }
    }
}

/// Whether `args` (after `argv[0]`) match `template` exactly, position by position.
pub fn argv_matches(template: &[ArgPattern], args: &[String]) -> bool {
    template.len() == args.len()
        && template.iter().zip(args).all(|(p, a)| match p {
            ArgPattern::Lit(l) => l == a,
            ArgPattern::Hole(h) => hole_matches(*h, a),
        })
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn lexical_path_rules() {
        assert!(valid_relative("a/b.txt"));
        assert!(!valid_relative("../etc/passwd"));
        assert!(!valid_relative("a/../../b"));
        assert!(!valid_relative("/etc/passwd"));
        assert!(!valid_relative("a//b"));
        assert!(!valid_relative("./a"));
        assert!(!valid_relative(""));
        assert!(!valid_relative("a\0b"));
        assert!(valid_root("/srv/data"));
        assert!(!valid_root("/srv/../etc"));
        assert!(!valid_root("srv"));
    }

    #[test]
    fn holes_are_typed_and_never_options() {
        assert!(hole_matches(Hole::Int, "42"));
        assert!(!hole_matches(Hole::Int, "-1"));
        assert!(!hole_matches(Hole::Int, "4 2"));
        assert!(hole_matches(Hole::Word, "report_1.txt"));
        assert!(!hole_matches(Hole::Word, "--exec"));
        assert!(!hole_matches(Hole::Word, ".hidden"));
        assert!(hole_matches(Hole::Relpath, "notes/a.txt"));
        assert!(!hole_matches(Hole::Relpath, "-rf"));
        assert!(!hole_matches(Hole::Relpath, "../x"));
        assert!(!hole_matches(Hole::Relpath, "/etc/shadow"));
        assert!(!hole_matches(Hole::Relpath, "a;b"));
        let t = vec![
            ArgPattern::Lit("-l".into()),
            ArgPattern::Hole(Hole::Relpath),
        ];
        assert!(argv_matches(&t, &["-l".into(), "a.txt".into()]));
        assert!(!argv_matches(&t, &["-c".into(), "a.txt".into()]));
        assert!(!argv_matches(&t, &["-l".into()]));
        assert!(!argv_matches(&t, &["-l".into(), "a".into(), "b".into()]));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, r#"[{"lit":"-l"},{"hole":"relpath"}]"#);
    }
}
