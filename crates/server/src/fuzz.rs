//! Entry points for the fuzz targets (`fuzz/`) and the corpus smoke test: each feeds
//! untrusted bytes to this crate's parsers and must never panic.

/// A server's access file (`access.toml`).
pub fn access(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::config::Access::parse(s);
    }
}

/// A live delivery to `knox serve` (`POST /api/live`: a journal fragment), parsed as the
/// server does before it stores anything.
pub fn live_delivery(data: &[u8]) {
    let _ = crate::live::Delivery::parse(data);
}
