//! Small, strict time helpers: RFC 3339 UTC timestamps as used by Intel collateral, and `SystemTime` to unix seconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the unix epoch; times before the epoch count as 0.
pub fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z` into unix seconds (fraction dropped).
/// Anything else, including offsets other than `Z`, is refused.
pub fn parse_rfc3339_utc(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let time = time.split_once('.').map_or(
        time,
        |(whole, frac)| {
            if digits(frac).is_some() { whole } else { "" }
        },
    );
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (digits(d.next()?)?, digits(d.next()?)?, digits(d.next()?)?);
    let mut t = time.splitn(3, ':');
    let (hour, minute, second) = (digits(t.next()?)?, digits(t.next()?)?, digits(t.next()?)?);
    let valid = (1..=12).contains(&month)
        && (1..=31).contains(&day)
        && hour < 24
        && minute < 60
        && second < 61;
    if !valid || date.len() != 10 || time.len() != 8 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_intel_timestamps() {
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_utc("2025-06-19T10:16:03Z"),
            Some(1_750_328_163)
        );
        assert_eq!(
            parse_rfc3339_utc("2025-06-19T10:16:03.123Z"),
            Some(1_750_328_163)
        );
        assert_eq!(parse_rfc3339_utc("2000-02-29T23:59:59Z"), Some(951_868_799));
    }

    #[test]
    fn refuses_other_forms() {
        for bad in [
            "",
            "2025-06-19 10:16:03Z",
            "2025-06-19T10:16:03+01:00",
            "2025-13-19T10:16:03Z",
            "2025-06-19T10:16Z",
            "2025-6-19T10:16:03Z",
            "+025-06-19T10:16:03Z",
            "2025-06-19T10:16:03.xZ",
        ] {
            assert_eq!(parse_rfc3339_utc(bad), None, "{bad}");
        }
    }
}
