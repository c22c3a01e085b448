//! Entry points shared by the fuzz targets in `fuzz/` and the corpus smoke test: each
//! feeds untrusted bytes to a parser and must never panic.

use std::sync::OnceLock;

use knox_policy::ToolkitManifest;

fn manifest() -> Option<&'static ToolkitManifest> {
    static M: OnceLock<Option<ToolkitManifest>> = OnceLock::new();
    M.get_or_init(|| crate::session::embedded_manifest().ok())
        .as_ref()
}

/// A raw executor proposal, as the monitor parses it.
pub fn proposal(data: &[u8]) {
    if let Some(m) = manifest() {
        let _ = knox_policy::proposal::parse(data, m);
    }
}

/// A bundle or journal, as `knox verify` reads it.
pub fn evidence(data: &[u8]) {
    if let Some(m) = manifest() {
        let opts = knox_verify::Options::DANGEROUS_SIMULATED;
        let _ = crate::cmd::verify::verify_bytes(data, m, opts);
    }
}

/// A Python literal from the dataset.
pub fn pylit(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = knox_dataset::pylit::parse(s);
    }
}
