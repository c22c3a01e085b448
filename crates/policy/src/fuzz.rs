//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

use std::sync::OnceLock;

use crate::ToolkitManifest;

/// The shipped InjecAgent manifest (what the proposal parser checks against).
pub fn manifest() -> Option<&'static ToolkitManifest> {
    static M: OnceLock<Option<ToolkitManifest>> = OnceLock::new();
    M.get_or_init(|| crate::shipped::current().ok()).as_ref()
}

/// A raw executor proposal, as the monitor parses it.
pub fn proposal(data: &[u8]) {
    if let Some(m) = manifest() {
        let _ = crate::proposal::parse(data, m);
    }
}

/// A toolkit manifest (`knox-toolkit/1`, JSON or TOML) as `--manifest` reads it, and
/// the canonical form a bundle embeds.
pub fn toolkit_manifest(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = ToolkitManifest::from_toolkit_text(s);
    }
    let _ = ToolkitManifest::from_canonical(data);
}
