//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

/// A bundle or journal, as `knox verify` reads it (under the shipped manifest).
pub fn evidence(data: &[u8]) {
    if let Some(m) = knox_policy::fuzz::manifest() {
        let opts = crate::Options::DANGEROUS_SIMULATED;
        let _ = crate::evidence::verify_bytes(data, m, opts);
    }
}

/// A bundle of a store and its shared part (§9.5), as `knox verify` reads a store's file
/// with `parts/` beside it: the input is the part's length (4 bytes, big-endian), the
/// part's file, then the bundle's file; the part is offered for any digest the bundle
/// names.
pub fn store(data: &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
    let (part, bundle) = rest.split_at(len.min(rest.len()));
    if let Some(m) = knox_policy::fuzz::manifest() {
        let opts = crate::Options::DANGEROUS_SIMULATED;
        let parts = |_: &knox_types::digest::Digest| Some(part.to_vec());
        let _ = crate::evidence::verify_evidence_in(bundle, &parts, m, opts);
    }
}
