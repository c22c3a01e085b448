//! The regulation vocabulary (`regulations/vocabulary.toml`): the roles, purposes,
//! information types and conditions a flow may name, with their synonyms — and the one
//! place every string of a flow is normalised before the norms see it.
//!
//! Normalisation, in order (the first that finds something decides):
//!
//! 1. **the key**: lower case, trimmed, every run of characters other than letters and
//!    digits one underscore (apostrophes dropped), looked up as a term or a synonym (a
//!    plural `…s` falls back to its singular). A string that already is a key is looked
//!    up as it is, without a copy;
//! 2. **stated absence**: a string that is, or whose first part is, `None`, `N/A`,
//!    `Not specified`, `Unknown`, … is *not stated*: the `unknown` role, the
//!    `unspecified` purpose, no information type, no condition ([`states_nothing`]);
//! 3. **the phrase**: every word lemmatised ([`lemma`]: a plural to its singular,
//!    `-ies` → `-y`, `-sses`/`-xes`/`-ches`/`-shes`/`-zes` lose `-es`, another `-s`
//!    after a letter other than `s`, `u` or `i` is dropped; a few irregular plurals; a
//!    possessive is its noun) and stop words (articles, prepositions, conjunctions,
//!    possessive determiners, relative pronouns, forms of *to be*) dropped, the whole
//!    phrase is looked up among the vocabulary's keys read the same way ("Secretary of
//!    HHS" is `secretary_of_hhs`);
//! 4. **runs of the phrase** (the same words; every key of 1 to as many words as the
//!    longest key, the longest run at each place, leftmost first —
//!    [`Vocabulary::runs`]), read by kind:
//!    - a **role** is the run holding the *head* of the phrase: the last word of its
//!      first part, which ends at a comma, a parenthesis, a slash, and where a
//!      post-modifier or a conjunct opens (a preposition, a relative pronoun, `not`,
//!      `and`, `or`, a participle such as *seeking*) — "Caseworker at the unemployment
//!      agency" is a caseworker, "Family Physician" a physician, "Escaped convict who
//!      testified against X" a convict, and "Hospital parking attendant" an attendant,
//!      never the hospital: a modifier does not name the party. When the head is no
//!      known word the role is unknown, whatever the modifiers name (unless a
//!      parenthesis or a conjunct follows and names one: "DEP (employer)"). One
//!      exception: a head that names its party only generically ([`DEFERRING`]:
//!      someone acting for another — `agent`: representative, official, staff,
//!      department —, an authority, a thing) stands for the role named before it in
//!      its part ("Red Cross representative" is the Red Cross);
//!    - a **purpose** is the most specific run: the longest, the leftmost of equally
//!      long ones, a generic one ([`GENERIC_PURPOSES`]) only when no other is named
//!      ("To provide evidence in a legal case" is `legal_case`'s term);
//!    - an **information type** is every run: "Name, address and medical history"
//!      names three types;
//!    - a **condition** is only ever the whole phrase (a run inside "no court order"
//!      must not read as one).
//!
//!    A run after an excluding word of its part ("excluding", "except", "without",
//!    "not", "no") is not read as named.
//!
//! What none of these finds is *unknown*: the decision API reports it by name and
//! decides `not_applicable` — it is never mapped to a default.

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
    /// Per kind, every key read as a phrase ([`Phrase::key`]) with the term it names.
    phrases: HashMap<TermKind, HashMap<String, String>>,
    /// Per kind, the most words a key has, read as a phrase.
    max_words: HashMap<TermKind, usize>,
}

/// The role of someone acting for another ("representative", "agent", "official",
/// "staff", …): as a phrase's head, it stands for the party named before it.
pub const AGENT: &str = "agent";
/// Roles a phrase's head names only generically: a role named before the head in the
/// same part says which ("Red Cross *representative*", "law enforcement
/// *authority*", "patient's dental *record*" — a thing is no party, whose it is is).
pub const DEFERRING: &[&str] = &[AGENT, "public_authority", "non_person"];
/// Purposes a phrase names only generically (a request, a communication, a review, a
/// verification, protection):
/// any other purpose the phrase names is read instead ("Request for restitution").
pub const GENERIC_PURPOSES: &[&str] = &[
    "information_request",
    "information_sharing",
    "review",
    "verification",
    "security",
];
/// The role of a party that is not stated.
pub const NOT_STATED_ROLE: &str = "unknown";
/// The purpose of a flow whose purpose is not stated.
pub const NOT_STATED_PURPOSE: &str = "unspecified";

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

/// Words dropped before a phrase is looked up: articles, prepositions, conjunctions,
/// possessive determiners, relative pronouns and forms of *to be*.
const STOP_WORDS: &str = "\
    a an the of for to in on at by with from into onto about against under over via \
    per upon within through during regarding concerning toward towards between \
    among after before as and or nor his her hers their its our my your this that \
    these those who whom whose which where is are was were be been being";

/// Words that open a post-modifier or a second conjunct: the head of a role phrase
/// comes before them ("caseworker *at* the agency", "convict *who* testified",
/// "doctor *not* associated with the clinic", "patient *and* crime victim").
const OPENERS: &str = "\
    of for to in on at by with from into onto about against under over via per upon \
    within through during regarding concerning toward towards between among after \
    before who whom whose which where that not and or";

/// Adjectives that, right before a preposition, belong to the post-modifier
/// ("agency *responsible* for …"), as a participle does ("patients *treated* for …").
const PREDICATIVE: &[&str] = &["responsible", "eligible", "liable", "subject", "known"];

/// Words after which the rest of a part is excluded, not named: "medical records
/// (*excluding* genetic information)" carries no genetic information, "*no* court
/// order" is none.
const EXCLUDING: &[&str] = &["excluding", "except", "without", "not", "no", "never"];

/// Participles that never modify a noun before them: after the first word they open a
/// post-modifier ("individual *receiving* public assistance").
const OPENING_VERBS: &str = "seeking receiving representing requesting claiming alleging asking \
    wanting needing";

/// Whether `w` is one of the words of `list` (separated by white space).
fn listed(list: &str, w: &str) -> bool {
    list.split_ascii_whitespace().any(|x| x == w)
}

/// Whether `w`, right before a preposition and not the first word, opens the
/// post-modifier: a participle (`-ed`, `-ing`) or a predicative adjective.
fn predicative(w: &str) -> bool {
    (w.len() >= 5 && (w.ends_with("ed") || w.ends_with("ing"))) || PREDICATIVE.contains(&w)
}

/// First parts of a string that state that nothing is given (as keys).
const NOT_STATED: &str = "\
    none n_a na nil null nothing nobody no_one unknown unspecified not_specified \
    not_stated not_applicable not_provided not_given not_known not_mentioned \
    not_available not_identified no_information none_specified none_stated \
    none_given none_provided none_listed not_disclosed undisclosed not_relevant \
    not_listed";

/// Plurals not formed with `-s`.
const IRREGULAR: &[(&str, &str)] = &[
    ("children", "child"),
    ("women", "woman"),
    ("men", "man"),
    ("people", "person"),
    ("wives", "wife"),
    ("lives", "life"),
    ("thieves", "thief"),
    ("policemen", "policeman"),
    ("businessmen", "businessman"),
    ("firemen", "fireman"),
    ("chairmen", "chairman"),
    ("spokesmen", "spokesman"),
];

/// The lemma of one lower-case word: its singular (a possessive has lost its
/// apostrophe already, so `patient's` and `patients'` are `patients`, then `patient`).
pub fn lemma(word: &str) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    if let Some((_, l)) = IRREGULAR.iter().find(|(p, _)| *p == word) {
        return Cow::Borrowed(l);
    }
    let n = word.len();
    if n > 4
        && let Some(stem) = word.strip_suffix("ies")
    {
        return Cow::Owned(format!("{stem}y"));
    }
    if n > 4
        && ["sses", "xes", "ches", "shes", "zes"]
            .iter()
            .any(|s| word.ends_with(s))
    {
        return Cow::Borrowed(word.get(..n - 2).unwrap_or(word));
    }
    if n > 3
        && word.ends_with('s')
        && !["ss", "us", "is"].iter().any(|s| word.ends_with(s))
        && word
            .as_bytes()
            .get(n - 2)
            .is_some_and(u8::is_ascii_alphabetic)
    {
        return Cow::Borrowed(word.get(..n - 1).unwrap_or(word));
    }
    Cow::Borrowed(word)
}

/// One word of a [`Phrase`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Word {
    /// The word as a key (lower case).
    raw: String,
    /// Its lemma.
    lemma: String,
    /// A stop word (dropped for lookup).
    stop: bool,
    /// The part of the phrase it is in: a comma, a semicolon, a colon, a parenthesis or
    /// a post-modifier word starts the next.
    part: usize,
    /// Inside parentheses or brackets.
    paren: bool,
    /// Its part was opened by a conjunction (`and`, `or`, `/`, `&`).
    conj: bool,
    /// It follows an excluding word in its part ([`EXCLUDING`]).
    negated: bool,
}

/// A string read as words, for lookup: [`Phrase::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phrase {
    words: Vec<Word>,
    /// The content words (not stop words), as indices into `words`.
    content: Vec<usize>,
}

impl Phrase {
    /// Reads `s` as words: letters and digits, lower case; apostrophes joined; every
    /// other character separates. A new *part* starts after `, ; : ( ) [ ] / &` and at
    /// a word that opens a post-modifier or a conjunct (a preposition, a relative
    /// pronoun, `not`, `and`, `or`, a participle such as `seeking`), taking with it a
    /// participle or predicative adjective right before a preposition ("agency |
    /// responsible for …", "patients | treated for …").
    pub fn new(s: &str) -> Self {
        let mut words: Vec<Word> = Vec::new();
        let mut cur = String::new();
        // What opened the next part, once a word has been read: a conjunction or other.
        let mut cut: Option<bool> = None;
        let mut depth = 0usize;
        for c in s.chars().chain(std::iter::once(' ')) {
            if c.is_alphanumeric() {
                cur.extend(c.to_lowercase());
                continue;
            }
            if c == '\'' || c == '\u{2019}' {
                continue;
            }
            if !cur.is_empty() {
                let raw = std::mem::take(&mut cur);
                Self::push(&mut words, raw, cut.take(), depth > 0);
            }
            match c {
                '/' | '&' => cut = Some(true),
                ',' | ';' | ':' | ')' | ']' => cut = cut.or(Some(false)),
                '(' | '[' => {
                    cut = cut.or(Some(false));
                    depth += 1;
                }
                _ => {}
            }
            if matches!(c, ')' | ']') {
                depth = depth.saturating_sub(1);
            }
        }
        let content = (0..words.len())
            .filter(|&i| words.get(i).is_some_and(|w| !w.stop))
            .collect();
        Self { words, content }
    }

    /// Adds one word; `cut` says that a new part starts at it (opened by a conjunction
    /// or not).
    fn push(words: &mut Vec<Word>, raw: String, cut: Option<bool>, paren: bool) {
        let Some(prev) = words.last() else {
            words.push(Word {
                lemma: lemma(&raw).into_owned(),
                stop: listed(STOP_WORDS, &raw),
                raw,
                part: 0,
                paren,
                conj: false,
                negated: false,
            });
            return;
        };
        let (prev_part, prev_conj) = (prev.part, prev.conj);
        let after_excluding = prev.negated || EXCLUDING.contains(&prev.raw.as_str());
        let conjunction = raw == "and" || raw == "or";
        let opener = listed(OPENERS, &raw) || listed(OPENING_VERBS, &raw);
        let (part, conj) = match cut {
            Some(c) => (prev_part + 1, c || conjunction),
            None if opener => (prev_part + 1, conjunction),
            None => (prev_part, prev_conj),
        };
        let preposition = opener && listed(STOP_WORDS, &raw) && !conjunction;
        if preposition && part > prev_part && words.len() >= 2 {
            // "… responsible for", "… treated for": the participle or adjective goes with
            // the preposition, unless it is all its part has, or follows `not`.
            let n = words.len();
            let movable = words
                .get(n - 2)
                .is_some_and(|w| w.part == prev_part && !w.stop && w.raw != "not");
            if movable
                && let Some(last) = words.last_mut()
                && !last.stop
                && predicative(&last.raw)
            {
                last.part = part;
            }
        }
        words.push(Word {
            lemma: lemma(&raw).into_owned(),
            stop: listed(STOP_WORDS, &raw),
            raw,
            part,
            paren,
            conj,
            negated: part == prev_part && after_excluding,
        });
    }

    /// The content words' lemmas joined by `_`: the key a phrase is looked up by
    /// (`"Requests for the Medical Records"` → `request_medical_record`).
    pub fn key(&self) -> String {
        self.join(0, self.content.len())
    }

    /// Content words `from..to` (lemmas) joined by `_`.
    fn join(&self, from: usize, to: usize) -> String {
        let mut out = String::new();
        for w in self.content.get(from..to).unwrap_or_default() {
            if let Some(w) = self.words.get(*w) {
                if !out.is_empty() {
                    out.push('_');
                }
                out.push_str(&w.lemma);
            }
        }
        out
    }

    /// The part content word `i` is in.
    fn part(&self, i: usize) -> Option<usize> {
        self.content
            .get(i)
            .and_then(|w| self.words.get(*w))
            .map(|w| w.part)
    }

    /// Whether content word `i`'s part was opened by a conjunction.
    fn conjunct(&self, i: usize) -> bool {
        self.content
            .get(i)
            .and_then(|w| self.words.get(*w))
            .is_some_and(|w| w.conj)
    }

    /// Whether content word `i` follows an excluding word in its part.
    fn negated(&self, i: usize) -> bool {
        self.content
            .get(i)
            .and_then(|w| self.words.get(*w))
            .is_some_and(|w| w.negated)
    }

    /// Whether content word `i` is inside parentheses.
    fn parenthesised(&self, i: usize) -> bool {
        self.content
            .get(i)
            .and_then(|w| self.words.get(*w))
            .is_some_and(|w| w.paren)
    }

    /// Whether the phrase states that nothing is given: it, or its first part (every
    /// word, stop words too), is `none`, `n/a`, `not specified`, `unknown`, ….
    pub fn states_nothing(&self) -> bool {
        let Some(first) = self.words.first().map(|w| w.part) else {
            return true;
        };
        let head: Vec<&str> = self
            .words
            .iter()
            .take_while(|w| w.part == first)
            .map(|w| w.raw.as_str())
            .collect();
        let all: Vec<&str> = self.words.iter().map(|w| w.raw.as_str()).collect();
        listed(NOT_STATED, &head.join("_")) || listed(NOT_STATED, &all.join("_"))
    }
}

/// Whether `s` states that nothing is given ("None", "N/A", "Not specified",
/// "None (revoked)", an empty string): see [`Phrase::states_nothing`].
pub fn states_nothing(s: &str) -> bool {
    Phrase::new(s).states_nothing()
}

/// A run of a phrase's content words that is a key of the vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run<'v> {
    /// The first content word of the run.
    pub start: usize,
    /// How many content words it spans.
    pub words: usize,
    /// The term it names.
    pub term: &'v str,
    /// The part of the phrase it starts in (a post-modifier, a comma or a parenthesis
    /// starts a new part).
    pub part: usize,
    /// It follows an excluding word ("excluding", "no", "not", …) in its part: the
    /// phrase says it is *not* there.
    pub negated: bool,
}

/// How a string reads as a term of one kind: [`Vocabulary::read`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading<'v> {
    /// One term.
    Term(&'v str),
    /// Several terms (information types), in order.
    Terms(Vec<&'v str>),
    /// The string states that nothing is given ("None", "N/A", "Not specified").
    NotStated,
    /// Nothing the vocabulary defines.
    Unknown,
}

impl<'v> Reading<'v> {
    /// The terms read (none when not stated or unknown).
    pub fn terms(&self) -> Vec<&'v str> {
        match self {
            Self::Term(t) => vec![*t],
            Self::Terms(t) => t.clone(),
            Self::NotStated | Self::Unknown => vec![],
        }
    }
}

impl Vocabulary {
    /// Parses the vocabulary file: every term and synonym must be a normalised key,
    /// and no key may name two terms of one kind, even read as a phrase.
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
            // Every key read as a phrase; two keys that read alike must name one term.
            let mut phrases: HashMap<String, String> = HashMap::new();
            let mut by: HashMap<String, String> = HashMap::new();
            let mut max = 0;
            let mut sorted: Vec<(&String, &String)> = keys.iter().collect();
            sorted.sort();
            for (k, term) in sorted {
                let p = Phrase::new(k);
                let pk = p.key();
                if pk.is_empty() {
                    continue;
                }
                max = max.max(p.content.len());
                if let Some(other) = phrases.insert(pk.clone(), term.clone())
                    && other != *term
                {
                    let first = by.get(&pk).cloned().unwrap_or_default();
                    return Err(format!(
                        "{} `{first}` (`{other}`) and `{k}` (`{term}`) read alike (`{pk}`)",
                        kind.as_str()
                    ));
                }
                by.insert(pk, k.clone());
            }
            v.phrases.insert(kind, phrases);
            v.max_words.insert(kind, max);
            v.terms.insert(kind, table);
        }
        Ok(v)
    }

    /// The term `k` (a key) names as it is, or as a plural `…s` of a key.
    fn exact(&self, kind: TermKind, k: &str) -> Option<&str> {
        let keys = self.lookup.get(&kind)?;
        keys.get(k)
            .or_else(|| k.strip_suffix('s').and_then(|singular| keys.get(singular)))
            .map(String::as_str)
    }

    /// The term a phrase key names.
    fn phrase_term(&self, kind: TermKind, k: &str) -> Option<&str> {
        self.phrases.get(&kind)?.get(k).map(String::as_str)
    }

    /// The runs of `text` that are keys of `kind`, leftmost first, the longest at each
    /// place (read as a [`Phrase`]). The mapping of labelled cases and the decision API
    /// both read phrases through this.
    pub fn runs(&self, kind: TermKind, text: &str) -> Vec<Run<'_>> {
        self.runs_of(kind, &Phrase::new(text))
    }

    fn runs_of(&self, kind: TermKind, p: &Phrase) -> Vec<Run<'_>> {
        let max = self.max_words.get(&kind).copied().unwrap_or(0);
        let n = p.content.len();
        let mut out = Vec::new();
        let mut i = 0;
        while i < n {
            let mut step = 1;
            for len in (1..=max.min(n - i)).rev() {
                if let Some(term) = self.phrase_term(kind, &p.join(i, i + len)) {
                    out.push(Run {
                        start: i,
                        words: len,
                        term,
                        part: p.part(i).unwrap_or(0),
                        negated: p.negated(i),
                    });
                    step = len;
                    break;
                }
            }
            i += step;
        }
        out
    }

    /// The role a phrase's head names: the run holding the last content word of the
    /// phrase's first part; a [`DEFERRING`] head (a representative, an authority)
    /// stands for the nearest other role named before it in that part ("Red Cross
    /// representative", "law enforcement authority"). A head that is in no run is
    /// unknown — unless the next part is a parenthesis or a conjunct whose head names a
    /// role ("DEP (employer)", "federal and state law enforcement officers").
    fn head_of(&self, p: &Phrase) -> Option<&str> {
        let runs = self.runs_of(TermKind::Role, p);
        let first = p.part(0)?;
        self.head_in(p, &runs, first).or_else(|| {
            let next = (0..p.content.len()).find(|&i| p.part(i) > Some(first))?;
            (p.parenthesised(next) || p.conjunct(next))
                .then(|| self.head_in(p, &runs, p.part(next)?))
                .flatten()
        })
    }

    /// The head of part `part` of `p` (see [`Vocabulary::head_of`]).
    fn head_in<'v>(&'v self, p: &Phrase, runs: &[Run<'v>], part: usize) -> Option<&'v str> {
        let last = (0..p.content.len()).rfind(|&i| p.part(i) == Some(part))?;
        let at = runs
            .iter()
            .position(|r| r.start <= last && last < r.start + r.words)?;
        let head = runs.get(at)?;
        if !DEFERRING.contains(&head.term) {
            return Some(head.term);
        }
        let before = runs
            .get(..at)
            .unwrap_or_default()
            .iter()
            .rev()
            .find(|r| r.part == part && !DEFERRING.contains(&r.term));
        Some(before.map_or(head.term, |r| r.term))
    }

    /// How `raw` reads as a term of `kind`: the key, stated absence, the whole phrase,
    /// then its runs by kind (the module documentation). A key of the vocabulary is
    /// found without a copy.
    pub fn read(&self, kind: TermKind, raw: &str) -> Reading<'_> {
        if is_key(raw)
            && let Some(t) = self.exact(kind, raw)
        {
            return Reading::Term(t);
        }
        if !is_key(raw)
            && let Some(t) = self.exact(kind, &key(raw))
        {
            return Reading::Term(t);
        }
        let p = Phrase::new(raw);
        if p.states_nothing() {
            return Reading::NotStated;
        }
        let pk = p.key();
        if let Some(t) = self.phrase_term(kind, &pk) {
            return Reading::Term(t);
        }
        match kind {
            TermKind::Role => self.head_of(&p).map_or(Reading::Unknown, Reading::Term),
            TermKind::Purpose => {
                // Any specific purpose before a generic one; then the longest run, the
                // leftmost of equally long ones.
                let mut best: Option<Run<'_>> = None;
                for r in self.runs_of(kind, &p).into_iter().filter(|r| !r.negated) {
                    let generic = GENERIC_PURPOSES.contains(&r.term);
                    if best.is_none_or(|b| {
                        let best_generic = GENERIC_PURPOSES.contains(&b.term);
                        (best_generic && !generic) || (best_generic == generic && r.words > b.words)
                    }) {
                        best = Some(r);
                    }
                }
                best.map_or(Reading::Unknown, |r| Reading::Term(r.term))
            }
            TermKind::InfoType => {
                let mut terms: Vec<&str> = Vec::new();
                for r in self.runs_of(kind, &p).into_iter().filter(|r| !r.negated) {
                    if !terms.contains(&r.term) {
                        terms.push(r.term);
                    }
                }
                match terms.as_slice() {
                    [] => Reading::Unknown,
                    [one] => Reading::Term(one),
                    _ => Reading::Terms(terms),
                }
            }
            TermKind::Condition => Reading::Unknown,
        }
    }

    /// The term `raw` names, if the vocabulary defines it ([`Vocabulary::read`]): a
    /// role or purpose not stated is `unknown` / `unspecified`; of several information
    /// types, the first.
    pub fn term(&self, kind: TermKind, raw: &str) -> Option<&str> {
        match self.read(kind, raw) {
            Reading::Term(t) => Some(t),
            Reading::Terms(t) => t.first().copied(),
            Reading::NotStated => match kind {
                TermKind::Role => Some(NOT_STATED_ROLE),
                TermKind::Purpose => Some(NOT_STATED_PURPOSE),
                TermKind::InfoType | TermKind::Condition => None,
            },
            Reading::Unknown => None,
        }
    }

    /// The distinct terms of `kind` in `text`'s runs, in order, but those the text
    /// excludes (every one, as an information type is read; the mapping of labelled
    /// cases reads conditions in free-text fields so).
    pub fn every(&self, kind: TermKind, text: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.runs(kind, text).into_iter().filter(|r| !r.negated) {
            if !out.contains(&r.term) {
                out.push(r.term);
            }
        }
        out
    }

    fn unknown(kind: TermKind, field: &str, raw: &str, unknown: &mut Vec<UnknownTerm>) {
        unknown.push(UnknownTerm {
            kind: kind.as_str(),
            field: field.to_string(),
            term: raw.to_string(),
        });
    }

    /// Normalises `raw` as one term of `kind` found at `field` (a role or a purpose),
    /// recording it in `unknown` when the vocabulary does not define it (the key is
    /// returned then). Not stated is `unknown` / `unspecified`.
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
                Self::unknown(kind, field, raw, unknown);
                key(raw)
            }
        }
    }

    /// Normalises `raw` as terms of `kind` found at `field` (information types or
    /// conditions) into `out`: every term it names, none when it states absence; an
    /// unknown string is recorded in `unknown` (and its key added).
    pub fn normalise_into(
        &self,
        kind: TermKind,
        field: &str,
        raw: &str,
        out: &mut impl Extend<String>,
        unknown: &mut Vec<UnknownTerm>,
    ) {
        match self.read(kind, raw) {
            Reading::Term(t) => out.extend(std::iter::once(t.to_string())),
            Reading::Terms(ts) => out.extend(ts.into_iter().map(str::to_string)),
            Reading::NotStated => {}
            Reading::Unknown => {
                Self::unknown(kind, field, raw, unknown);
                out.extend(std::iter::once(key(raw)));
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
    use std::collections::BTreeSet;

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

    #[test]
    fn lemmas_fold_plurals_and_possessives() {
        for (w, want) in [
            ("agencies", "agency"),
            ("parties", "party"),
            ("addresses", "address"),
            ("businesses", "business"),
            ("boxes", "box"),
            ("searches", "search"),
            ("officers", "officer"),
            ("nurses", "nurse"),
            ("patients", "patient"),
            ("status", "status"),
            ("diagnosis", "diagnosis"),
            ("class", "class"),
            ("children", "child"),
            ("people", "person"),
            ("lies", "lie"),
            ("bus", "bus"),
        ] {
            assert_eq!(lemma(w), want, "{w}");
        }
        // A possessive loses its apostrophe first: "patient's" and "patients'" are one.
        assert_eq!(Phrase::new("the Patient's Mothers").key(), "patient_mother");
        assert_eq!(Phrase::new("Patients' mother").key(), "patient_mother");
        // Stop words go: articles, prepositions, conjunctions, determiners.
        assert_eq!(
            Phrase::new("Requests for the Medical Records of his Patients").key(),
            "request_medical_record_patient"
        );
    }

    #[test]
    fn a_phrase_is_read_by_its_words_when_it_is_no_key() {
        let v = vocab();
        let role = |s| v.term(TermKind::Role, s);
        // Stop words and lemmas: a key written differently.
        assert_eq!(role("The Secretary of HHS"), Some("hhs_secretary"));
        assert_eq!(role("Law-enforcement agencies"), Some("law_enforcement"));
        // The head of the phrase, before its first post-modifier.
        assert_eq!(
            role("Caseworker at the unemployment agency"),
            Some("social_worker")
        );
        assert_eq!(role("Family Physician"), Some("health_care_provider"));
        assert_eq!(
            role("Escaped convict who testified against Oguaju"),
            Some("offender")
        );
        assert_eq!(role("Patient's Sister"), Some("family_member"));
        assert_eq!(
            role("Doctor not associated with the clinic"),
            Some("health_care_provider")
        );
        assert_eq!(
            role("Government agency responsible for maintaining records"),
            Some("government_authority")
        );
        assert_eq!(role("Patients treated for diabetes"), Some("patient"));
        // The first conjunct, then a parenthesis or a conjunct when it names none.
        assert_eq!(role("Patient/Victim of a Crime"), Some("patient"));
        assert_eq!(
            role("DEP (employer), Plaintiff (employee)"),
            Some("employer")
        );
        assert_eq!(
            role("Federal and state law enforcement officers"),
            Some("law_enforcement")
        );
        // Someone acting for another stands for the party named before them.
        assert_eq!(
            role("Red Cross Representative"),
            Some("disaster_relief_organization")
        );
        assert_eq!(role("FBI agent"), Some("law_enforcement"));
        assert_eq!(role("Spokesperson"), Some(AGENT));
        // A purpose: the most specific run, a generic one only when alone.
        let purpose = |s| v.term(TermKind::Purpose, s);
        assert_eq!(
            purpose("To provide evidence in a legal case"),
            Some("judicial_proceeding")
        );
        assert_eq!(
            purpose("Request for restitution"),
            Some("judicial_proceeding")
        );
        assert_eq!(
            purpose("Request for Information under the Freedom of Information Act"),
            Some("public_records_request")
        );
        assert_eq!(
            purpose("Request for information"),
            Some("information_request")
        );
        assert_eq!(purpose("Collecting a debt"), Some("debt_collection"));
    }

    #[test]
    fn a_string_naming_several_information_types_reads_as_every_one() {
        let v = vocab();
        assert_eq!(
            v.read(TermKind::InfoType, "Name, home address and medical history"),
            Reading::Terms(vec!["identity", "address", "health"])
        );
        assert_eq!(
            v.read(
                TermKind::InfoType,
                "Private information (possession of firearms)"
            ),
            Reading::Terms(vec!["private_information", "criminal"])
        );
        // What the phrase excludes is not carried.
        assert_eq!(
            v.read(
                TermKind::InfoType,
                "Medical Records (excluding genetic information)"
            ),
            Reading::Term("health")
        );
        // The decision API reads them so: a flow naming them is decided on them.
        let mut out = BTreeSet::new();
        let mut unknown = Vec::new();
        v.normalise_into(
            TermKind::InfoType,
            "info_types",
            "Tax return information and bank statements",
            &mut out,
            &mut unknown,
        );
        assert!(unknown.is_empty());
        assert_eq!(out.into_iter().collect::<Vec<_>>(), ["financial"]);
    }

    #[test]
    fn a_stated_absence_is_not_an_unknown_term() {
        let v = vocab();
        for s in [
            "None",
            "N/A",
            "Not specified",
            "None (revoked)",
            "unknown",
            "",
        ] {
            assert_eq!(v.read(TermKind::InfoType, s), Reading::NotStated, "{s}");
            assert_eq!(v.term(TermKind::Role, s), Some(NOT_STATED_ROLE), "{s}");
            assert_eq!(
                v.term(TermKind::Purpose, s),
                Some(NOT_STATED_PURPOSE),
                "{s}"
            );
            let mut out = Vec::new();
            let mut unknown = Vec::new();
            v.normalise_into(TermKind::Condition, "conditions", s, &mut out, &mut unknown);
            assert!(out.is_empty() && unknown.is_empty(), "{s}");
        }
        // "None" of something is a statement, not absence.
        assert_ne!(v.read(TermKind::Role, "Nonprofit"), Reading::NotStated);
    }

    #[test]
    fn the_head_decides_not_a_modifier_naming_a_holder() {
        let v = vocab();
        // The attendant is an employee (no holder), whatever employs them.
        assert_eq!(
            v.term(TermKind::Role, "parking attendant"),
            Some("employee")
        );
        assert_eq!(
            v.term(TermKind::Role, "Hospital parking attendant"),
            Some("employee")
        );
        assert_eq!(
            v.term(TermKind::Role, "Clinic receptionist"),
            Some("employee")
        );
        // A head that is no known word is unknown, even after a holder.
        assert_eq!(
            v.read(TermKind::Role, "Hospital astrologer"),
            Reading::Unknown
        );
        assert_eq!(
            v.read(TermKind::Role, "Astrologer of the hospital"),
            Reading::Unknown
        );
        // Nor does a head after a holder borrow it: a provider of television is none.
        assert_eq!(
            v.term(TermKind::Role, "Satellite television provider"),
            Some("service_provider")
        );
        // The same through the decision API: an unknown head is reported by name.
        let n = crate::Norms::embedded().unwrap();
        let flow = |recipient: &str| {
            crate::phi::parse_flows(
                &serde_json::json!({
                    "sender": {"role": "Family Physician", "jurisdiction": "us"},
                    "recipient": {"role": recipient, "jurisdiction": "us"},
                    "subject_role": "Patient",
                    "info_types": ["Medical history and home address"],
                    "purpose": "To provide treatment to the patient",
                    "regulations": ["HIPAA"]
                })
                .to_string(),
            )
            .unwrap()
            .remove(0)
        };
        let d = n.decide_phi(&flow("Hospital astrologer"), false).unwrap();
        assert_eq!(d.verdict, "not_applicable");
        // (The flow's labels are lower case, spaces as underscores.)
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("`hospital_astrologer`")),
            "{:?}",
            d.warnings
        );
        let d = n.decide_phi(&flow("Specialist physician at City Hospital"), false);
        assert_eq!(d.unwrap().verdict, "compliant");
    }

    #[test]
    fn keys_that_read_alike_must_name_one_term() {
        let two = "[roles]\na = [\"parties\"]\nb = [\"the_party\"]\n[purposes]\n[info_types]\n[conditions]\n";
        let e = Vocabulary::parse(two).unwrap_err();
        assert!(e.contains("read alike"), "{e}");
    }
}
