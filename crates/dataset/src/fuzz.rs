//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

/// A Python literal from the dataset.
pub fn pylit(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::pylit::parse(s);
    }
}
