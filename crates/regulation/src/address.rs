//! Canonical forms of the strings the norms compare, and the jurisdiction facts of a
//! country code. Everything Cedar sees goes through here first, so `Amy@Gmail.com `,
//! `mailto:amy@gmail.com` and `amy@gmail.com` are one recipient, and `+1 (234) 567-8900`
//! and `+12345678900` one phone number.

/// EU member states and the EEA states (ISO 3166-1 alpha-2, lower case). `el` is the
/// EU's own code for Greece.
const EEA: [&str; 31] = [
    "at", "be", "bg", "hr", "cy", "cz", "dk", "ee", "fi", "fr", "de", "gr", "el", "hu", "ie", "it",
    "lv", "lt", "lu", "mt", "nl", "pl", "pt", "ro", "sk", "si", "es", "se", "is", "li", "no",
];

/// Countries with an EU adequacy decision under GDPR art. 45 (the European Commission's
/// list; the United States only for organisations certified under the EU-US Data
/// Privacy Framework, which a directory entry states with `safeguards = true`).
const ADEQUACY: [&str; 14] = [
    "ad", "ar", "ca", "ch", "fo", "gb", "gg", "il", "im", "je", "jp", "kr", "nz", "uy",
];

/// A lower-case, trimmed country code.
pub fn jurisdiction(code: &str) -> String {
    let c = code.trim().to_ascii_lowercase();
    if c.is_empty() { "unknown".into() } else { c }
}

/// Whether `code` (canonical) is in the EU/EEA.
pub fn in_eea(code: &str) -> bool {
    EEA.contains(&code)
}

/// Whether `code` (canonical) has an adequacy decision.
pub fn adequacy(code: &str) -> bool {
    ADEQUACY.contains(&code)
}

/// A lower-case, trimmed label (role, purpose, information type), with inner runs of
/// spaces and dashes turned into one underscore.
pub fn label(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut sep = false;
    for c in s.trim().chars() {
        if c.is_whitespace() || c == '-' {
            sep = !out.is_empty();
        } else {
            if sep {
                out.push('_');
                sep = false;
            }
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The canonical form of an address: e-mail addresses lower-cased (`mailto:` dropped),
/// phone numbers reduced to `+` and digits (`tel:` dropped), URLs with lower-case
/// scheme and host and no default port or bare trailing slash, anything else trimmed
/// with inner whitespace collapsed. Invisible format characters (zero-width spaces,
/// direction marks) are removed everywhere.
pub fn canonical(raw: &str) -> String {
    let visible: String = raw
        .chars()
        .filter(|c| !is_invisible(*c) && !c.is_control())
        .collect();
    let s = visible.trim();
    let lower = s.to_lowercase();
    if let Some(rest) = strip_prefix_ci(s, "mailto:") {
        return rest.trim().to_lowercase();
    }
    if let Some(rest) = strip_prefix_ci(s, "tel:") {
        return phone(rest).unwrap_or_else(|| collapse(rest));
    }
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return url(s);
    }
    if s.contains('@') && !s.contains(char::is_whitespace) {
        return lower;
    }
    if let Some(p) = phone(s) {
        return p;
    }
    collapse(s)
}

/// The host of a canonical e-mail address or URL.
pub fn host(canonical: &str) -> Option<&str> {
    if let Some(rest) = canonical
        .strip_prefix("https://")
        .or_else(|| canonical.strip_prefix("http://"))
    {
        let end = rest.find(['/', '?', '#', ':']).unwrap_or(rest.len());
        let authority = rest.get(..end)?;
        return Some(authority.rsplit('@').next().unwrap_or(authority));
    }
    canonical.rsplit_once('@').map(|(_, d)| d)
}

/// Whether `host` is `domain` or one of its subdomains.
pub fn in_domain(host: &str, domain: &str) -> bool {
    let d = domain.trim().trim_start_matches('.').to_ascii_lowercase();
    !d.is_empty()
        && (host == d
            || host
                .strip_suffix(d.as_str())
                .is_some_and(|p| p.ends_with('.')))
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| s.get(prefix.len()..))
        .flatten()
}

fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
            | '\u{FEFF}'
    )
}

fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn phone(s: &str) -> Option<String> {
    let t = s.trim();
    if t.is_empty()
        || !t
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '+' | ' ' | '-' | '(' | ')' | '.'))
    {
        return None;
    }
    let digits: String = t.chars().filter(char::is_ascii_digit).collect();
    if digits.len() < 7 {
        return None;
    }
    Some(if t.starts_with('+') {
        format!("+{digits}")
    } else {
        digits
    })
}

fn url(s: &str) -> String {
    let (scheme, rest) = s.split_once("://").unwrap_or(("https", s));
    let scheme = scheme.to_ascii_lowercase();
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let mut authority = authority.to_lowercase();
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    if let Some(a) = authority.strip_suffix(default_port) {
        authority = a.to_string();
    }
    let tail = if tail == "/" { "" } else { tail };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equivalent_spellings_have_one_canonical_form() {
        for a in [
            " Amy.Watson@Gmail.com ",
            "mailto:amy.watson@gmail.com",
            "amy.watson@gmail\u{200B}.com",
        ] {
            assert_eq!(canonical(a), "amy.watson@gmail.com", "{a:?}");
        }
        assert_eq!(canonical("+1 (234) 567-8900"), "+12345678900");
        assert_eq!(canonical("tel:+1-234-567-8900"), "+12345678900");
        assert_eq!(
            canonical("HTTPS://Portal.Clinic.Example:443/"),
            "https://portal.clinic.example"
        );
        assert_eq!(
            canonical("https://x.example/Path?q=A"),
            "https://x.example/Path?q=A"
        );
        assert_eq!(canonical("  doc_4412  "), "doc_4412");
        assert_eq!(canonical("12"), "12");
    }

    #[test]
    fn hosts_and_domains() {
        assert_eq!(host("a@clinic.example"), Some("clinic.example"));
        assert_eq!(
            host("https://portal.clinic.example/x"),
            Some("portal.clinic.example")
        );
        assert!(in_domain("portal.clinic.example", "clinic.example"));
        assert!(in_domain("clinic.example", ".Clinic.Example"));
        assert!(!in_domain("evilclinic.example", "clinic.example"));
        assert!(!in_domain("clinic.example", ""));
    }

    #[test]
    fn labels_and_jurisdictions() {
        assert_eq!(label(" Health Care-Operations "), "health_care_operations");
        assert_eq!(jurisdiction(" DE "), "de");
        assert!(in_eea("de") && in_eea("no") && !in_eea("us") && !in_eea("gb"));
        assert!(adequacy("jp") && adequacy("gb") && !adequacy("us"));
        assert_eq!(jurisdiction(""), "unknown");
    }
}
