//! Paths to the vendored attestation vectors (`data/attestation`) and small loaders.

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `data/attestation` (vendored at the repository root) seen from this crate.
pub(super) fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/attestation")
}

pub(super) fn read(rel: &str) -> Vec<u8> {
    let path = vectors().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// A file holding hex text (whitespace ignored).
pub(super) fn read_hex(rel: &str) -> Vec<u8> {
    let text = String::from_utf8(read(rel)).unwrap();
    let clean: String = text.split_whitespace().collect();
    let clean = clean.trim_start_matches("0x");
    hex::decode(clean).unwrap()
}

pub(super) fn at(unix: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

/// RFC 3339 `YYYY-MM-DDTHH:MM:SSZ` to a time, for readable tests.
pub(super) fn utc(s: &str) -> SystemTime {
    let (date, time) = s.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|x| x.parse().unwrap()).collect();
    let t: Vec<i64> = time.split(':').map(|x| x.parse().unwrap()).collect();
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    at(u64::try_from(days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]).unwrap())
}
