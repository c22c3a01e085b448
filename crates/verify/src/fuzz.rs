//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

/// A bundle or journal, as `knox verify` reads it (under the shipped manifest).
pub fn evidence(data: &[u8]) {
    if let Some(m) = knox_policy::fuzz::manifest() {
        let opts = crate::Options::DANGEROUS_SIMULATED;
        let _ = crate::evidence::verify_bytes(data, m, opts);
    }
}
