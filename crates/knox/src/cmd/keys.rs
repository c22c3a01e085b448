//! `knox keygen` and regulator key files — the command shared with `knox-verify`
//! (`knox_verifier::keys`; the key file format is `knox_attest::keyfile`).

pub use knox_verifier::keys::*;
