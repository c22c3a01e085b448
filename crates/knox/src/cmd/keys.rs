//! `knox keygen` and regulator key files — the command shared with `knox-verify`
//! (`knox_verify_cli::keys`; the key file format is `knox_attest::keyfile`).

pub use knox_verify_cli::keys::*;
