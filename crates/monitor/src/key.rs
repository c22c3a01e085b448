//! The key a monitor signs with, handed around as a handle nothing outside this crate can
//! sign with.
//!
//! A run's in-TEE key ([`knox_attest::TeeKey`]) lives in its [`crate::run::Runtime`];
//! this crate signs with it only the artefacts a monitor makes (the APM's attestation,
//! node attestations, grants, journal checkpoints, the summary). Code that starts a
//! monitor passes a [`MonitorKey`]: it names the key (its public half is readable) but
//! has no method that signs or yields the key, so the runtime's key cannot be turned
//! into a signature over anything of the caller's choosing:
//!
//! ```compile_fail,E0616
//! # fn forge(rt: &knox_monitor::run::Runtime, s: &knox_types::dsse::Statement) {
//! let _ = knox_attest::dsse::sign(&rt.key, s); // private field
//! # }
//! ```
//!
//! ```compile_fail,E0277
//! # fn forge(rt: &knox_monitor::run::Runtime, s: &knox_types::dsse::Statement) {
//! let _ = knox_attest::dsse::sign(&rt.monitor_key(), s); // not a `Signer`
//! # }
//! ```
//!
//! Nor does any other type that holds it hand it out — a monitor, a journal:
//!
//! ```compile_fail,E0616
//! # fn forge(m: &knox_monitor::Monitor<'_>) {
//! let _ = m.key; // private field
//! # }
//! ```
//!
//! ```compile_fail,E0616
//! # fn forge(j: &knox_monitor::aeg::Journal) {
//! let _ = &j.signer; // private field
//! # }
//! ```
//!
//! ```
//! # fn public(rt: &knox_monitor::run::Runtime) -> knox_types::bundle::PublicKey {
//! rt.monitor_key().public_key()
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use knox_attest::TeeKey;
use knox_types::bundle::PublicKey;
use knox_types::digest::Digest;

/// A monitor's signing key, opaque outside this crate.
#[derive(Clone, Copy)]
pub struct MonitorKey<'a>(&'a Arc<TeeKey>);

impl fmt::Debug for MonitorKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MonitorKey({})", self.key_id())
    }
}

impl<'a> MonitorKey<'a> {
    /// A handle on a key of the caller's own (a run's key is
    /// [`crate::run::Runtime::monitor_key`]).
    pub fn new(key: &'a Arc<TeeKey>) -> Self {
        Self(key)
    }

    /// The key's public half, as bundles carry it.
    pub fn public_key(self) -> PublicKey {
        self.0.public_key()
    }

    /// `H("knox/key", public key)`.
    pub fn key_id(self) -> Digest {
        self.0.key_id()
    }

    /// The key, for this crate's signing.
    pub(crate) fn tee(self) -> &'a TeeKey {
        self.0
    }

    /// The key shared, for a journal that signs checkpoints as the run goes.
    pub(crate) fn shared(self) -> Arc<TeeKey> {
        Arc::clone(self.0)
    }
}
