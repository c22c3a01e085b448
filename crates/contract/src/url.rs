//! A deliberately small URL reader for endpoint matching: `scheme://host[:port]/path[?query]`.
//! Anything it does not understand exactly (user info, IPv6 literals, upper-case hosts,
//! dot segments, percent-encoded dots or slashes, backslashes) is refused rather than
//! guessed, so that the endpoint the contract matched is the endpoint connected to.

use crate::format::{Scheme, valid_host};

/// A URL split into what endpoint matching compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub scheme: Scheme,
    /// Host, lowercase.
    pub host: String,
    /// Port (the scheme's default when absent).
    pub port: u16,
    /// Path, starting with `/`.
    pub path: String,
    /// Query without `?`, if any.
    pub query: Option<String>,
}

/// Whether a path holds dot segments, escapes of `.` or `/`, or backslashes.
pub fn ambiguous_path(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.contains("%2e")
        || lower.contains("%2f")
        || lower.contains("%5c")
        || path.contains('\\')
        || path.split('/').any(|s| s == "." || s == "..")
}

/// Parses `url`, refusing anything ambiguous.
pub fn parse(url: &str) -> Result<Url, String> {
    if url.len() > 8192 || url.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err("URL too long or holds spaces, control or non-ASCII characters".into());
    }
    let (scheme, rest) = if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else {
        return Err("scheme must be http:// or https://".into());
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let (authority, path_query) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => match rest.find('?') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        },
    };
    if authority.contains('@') {
        return Err("user info in URLs is refused".into());
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => {
            let port: u16 = p.parse().map_err(|_| format!("bad port `{p}`"))?;
            (h, port)
        }
        None => (
            authority,
            match scheme {
                Scheme::Http => 80,
                Scheme::Https => 443,
            },
        ),
    };
    if !valid_host(host) || port == 0 {
        return Err(format!(
            "host `{host}` is not a lowercase host name or IPv4 address"
        ));
    }
    let (path, query) = match path_query.split_once('?') {
        Some((p, q)) => (p, Some(q.to_owned())),
        None => (path_query, None),
    };
    let path = if path.is_empty() { "/" } else { path };
    if ambiguous_path(path) {
        return Err("path holds dot segments or escaped dots/slashes".into());
    }
    Ok(Url {
        scheme,
        host: host.to_owned(),
        port,
        path: path.to_owned(),
        query,
    })
}

/// Whether `path` is `prefix` or below it, by whole segments.
pub fn under_prefix(path: &str, prefix: &str) -> bool {
    if prefix.ends_with('/') {
        return path.starts_with(prefix);
    }
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let u = parse("https://api.example.com/v1/items?x=1").unwrap();
        assert_eq!(u.port, 443);
        assert_eq!(u.path, "/v1/items");
        assert_eq!(u.query.as_deref(), Some("x=1"));
        assert_eq!(parse("http://127.0.0.1:8080").unwrap().path, "/");
        assert!(parse("https://user@api.example.com/").is_err());
        assert!(parse("https://API.example.com/").is_err());
        assert!(parse("https://api.example.com/v1/../admin").is_err());
        assert!(parse("https://api.example.com/v1/%2e%2e/admin").is_err());
        assert!(parse("ftp://x/").is_err());
        assert!(parse("https://a.com:99999/").is_err());
        assert!(parse("https://a.com /").is_err());
        assert!(under_prefix("/v1/items", "/v1"));
        assert!(!under_prefix("/v10/items", "/v1"));
        assert!(under_prefix("/v1", "/v1"));
    }
}
