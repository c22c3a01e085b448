//! The regulation vocabulary (`regulations/vocabulary.toml`): the roles, purposes,
//! information types and conditions a flow may name, with their synonyms — and the one
//! place every string of a flow is normalised before the norms see it.
//!
//! Normalisation: lower case, trimmed, every run of characters other than letters and
//! digits turned into one underscore; then the key is looked up as a term or a synonym
//! (a plural `…s` falls back to its singular). What is neither is *unknown*: the
//! decision API reports it by name and decides `not_applicable` — it is never mapped to
//! a default.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;

/// The vocabulary file every policy set holds.
pub const VOCABULARY_FILE: &str = "vocabulary.toml";

/// The kinds of terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TermKind {
    /// A party's role (sender, recipient, subject).
    Role,
    /// A flow's purpose.
    Purpose,
    /// An information type.
    InfoType,
    /// A fact of the transmission principle (`court_order`, `deidentified`, …).
    Condition,
}

impl TermKind {
    /// Every kind.
    pub const ALL: [Self; 4] = [Self::Role, Self::Purpose, Self::InfoType, Self::Condition];

    /// The name used in messages and in the vocabulary file's table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Role => "role",
            Self::Purpose => "purpose",
            Self::InfoType => "information type",
            Self::Condition => "condition",
        }
    }
}

/// A term a flow named that the vocabulary does not define.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct UnknownTerm {
    /// What kind of term was expected.
    pub kind: &'static str,
    /// Where in the flow (`sender.role`, `purpose`, …).
    pub field: String,
    /// The term as given.
    pub term: String,
}

impl std::fmt::Display for UnknownTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown {} `{}` in {} (not in the vocabulary)",
            self.kind, self.term, self.field
        )
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    roles: BTreeMap<String, Vec<String>>,
    purposes: BTreeMap<String, Vec<String>>,
    info_types: BTreeMap<String, Vec<String>>,
    conditions: BTreeMap<String, Vec<String>>,
}

/// The loaded vocabulary.
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    terms: HashMap<TermKind, BTreeMap<String, Vec<String>>>,
    /// Per kind, every key (term or synonym) with the term it names.
    lookup: HashMap<TermKind, HashMap<String, String>>,
}

/// Whether `s` is its own [`key`] (ASCII lower-case letters, digits and single inner
/// underscores): such a string is looked up as it is, without a copy.
fn is_key(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The normalisation key of `s`: lower case, every run of other characters than
/// letters and digits one underscore, no leading or trailing underscore.
pub fn key(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut sep = false;
    for c in s.chars() {
        if c.is_alphanumeric() {
            if sep && !out.is_empty() {
                out.push('_');
            }
            sep = false;
            out.extend(c.to_lowercase());
        } else if c != '\'' && c != '\u{2019}' {
            sep = true;
        }
    }
    out
}

impl Vocabulary {
    /// Parses the vocabulary file: every term and synonym must be a normalised key,
    /// and no key may name two terms of one kind.
    pub fn parse(text: &str) -> Result<Self, String> {
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut v = Self::default();
        for (kind, table) in [
            (TermKind::Role, f.roles),
            (TermKind::Purpose, f.purposes),
            (TermKind::InfoType, f.info_types),
            (TermKind::Condition, f.conditions),
        ] {
            for (term, synonyms) in &table {
                for s in std::iter::once(term).chain(synonyms) {
                    if key(s) != *s || s.is_empty() {
                        return Err(format!(
                            "{} `{s}` is not normalised (write `{}`)",
                            kind.as_str(),
                            key(s)
                        ));
                    }
                    if let Some(other) = v
                        .lookup
                        .entry(kind)
                        .or_default()
                        .insert(s.clone(), term.clone())
                        && other != *term
                    {
                        return Err(format!(
                            "{} `{s}` names both `{other}` and `{term}`",
                            kind.as_str()
                        ));
                    }
                }
            }
            // A term is itself, even where another term lists it as a synonym.
            let keys = v.lookup.entry(kind).or_default();
            for term in table.keys() {
                keys.insert(term.clone(), term.clone());
            }
            v.terms.insert(kind, table);
        }
        Ok(v)
    }

    /// The term `raw` names, if the vocabulary defines it.
    pub fn term(&self, kind: TermKind, raw: &str) -> Option<&str> {
        let keys = self.lookup.get(&kind)?;
        let owned;
        let k = if is_key(raw) {
            raw
        } else {
            owned = key(raw);
            owned.as_str()
        };
        keys.get(k)
            .or_else(|| k.strip_suffix('s').and_then(|singular| keys.get(singular)))
            .map(String::as_str)
    }

    /// Normalises `raw` as a term of `kind` found at `field`, recording it in `unknown`
    /// when the vocabulary does not define it (the key is returned then).
    pub fn normalise(
        &self,
        kind: TermKind,
        field: &str,
        raw: &str,
        unknown: &mut Vec<UnknownTerm>,
    ) -> String {
        match self.term(kind, raw) {
            Some(t) => t.to_string(),
            None => {
                unknown.push(UnknownTerm {
                    kind: kind.as_str(),
                    field: field.to_string(),
                    term: raw.to_string(),
                });
                key(raw)
            }
        }
    }

    /// The terms of `kind` and their synonyms.
    pub fn terms(&self, kind: TermKind) -> impl Iterator<Item = (&str, &[String])> {
        self.terms
            .get(&kind)
            .into_iter()
            .flat_map(|t| t.iter().map(|(k, v)| (k.as_str(), v.as_slice())))
    }

    /// Every key (term or synonym) of `kind` with the term it names.
    pub fn keys(&self, kind: TermKind) -> impl Iterator<Item = (&str, &str)> {
        self.lookup
            .get(&kind)
            .into_iter()
            .flat_map(|keys| keys.iter().map(|(s, t)| (s.as_str(), t.as_str())))
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn vocab() -> Vocabulary {
        Vocabulary::parse(include_str!("../../../regulations/vocabulary.toml")).unwrap()
    }

    #[test]
    fn keys_fold_case_spacing_and_punctuation() {
        assert_eq!(
            key("  Law-Enforcement  Official "),
            "law_enforcement_official"
        );
        assert_eq!(key("Workers' Compensation"), "workers_compensation");
        assert_eq!(
            key("Protected Health Information (PHI)"),
            "protected_health_information_phi"
        );
        assert_eq!(key("Treatment"), "treatment");
    }

    #[test]
    fn a_string_read_as_its_own_key_is_one() {
        for s in [
            "treatment",
            "court_order",
            "notified_within_72h",
            "a",
            "",
            "_x",
            "x_",
            "a__b",
            "Treatment",
            "law enforcement",
            "café",
            "x-y",
            "ⅰ",
        ] {
            if is_key(s) {
                assert_eq!(key(s), s, "{s:?}");
            }
            if s.is_ascii() {
                assert_eq!(is_key(s), !s.is_empty() && key(s) == s, "{s:?}");
            }
        }
        // Every key of the vocabulary is looked up without a copy, and finds itself.
        let v = vocab();
        for kind in TermKind::ALL {
            for (k, t) in v.keys(kind) {
                assert!(is_key(k), "{k}");
                assert_eq!(v.term(kind, k), Some(t));
            }
        }
    }

    #[test]
    fn synonyms_plurals_and_case_name_one_term() {
        let v = vocab();
        assert_eq!(
            v.term(TermKind::Role, "Doctor"),
            Some("health_care_provider")
        );
        assert_eq!(
            v.term(TermKind::Role, "Police Officers"),
            Some("law_enforcement")
        );
        assert_eq!(v.term(TermKind::Purpose, "Treatment"), Some("treatment"));
        assert_eq!(
            v.term(TermKind::InfoType, "IP address"),
            Some("online_identifier")
        );
        assert_eq!(
            v.term(TermKind::Condition, "court order"),
            Some("court_order")
        );
        // A role is not a purpose.
        assert_eq!(v.term(TermKind::Purpose, "doctor"), None);
        let mut unknown = Vec::new();
        let t = v.normalise(TermKind::Role, "recipient.role", "Astrologer", &mut unknown);
        assert_eq!(t, "astrologer");
        assert_eq!(unknown.len(), 1);
        assert!(
            unknown[0].to_string().contains("`Astrologer`"),
            "{}",
            unknown[0]
        );
    }

    #[test]
    fn a_key_naming_two_terms_or_an_unnormalised_key_is_refused() {
        let two = "[roles]\na = [\"x\"]\nb = [\"x\"]\n[purposes]\n[info_types]\n[conditions]\n";
        assert!(Vocabulary::parse(two).unwrap_err().contains("names both"));
        let bad = "[roles]\na = [\"Big X\"]\n[purposes]\n[info_types]\n[conditions]\n";
        assert!(
            Vocabulary::parse(bad)
                .unwrap_err()
                .contains("not normalised")
        );
    }
}
