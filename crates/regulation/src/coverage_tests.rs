//! The coverage table of `docs/regulation.md` §9 stays complete and true: every HIPAA
//! Privacy Rule section and GDPR article of the training material's clause sets
//! (`data/privacy/privaci-bench-kbs/regulation_ids.txt`) has exactly one row; every row
//! says how it is encoded with one of five words; every policy it names is in the
//! embedded set and every obligation in the regulation's manifest; and every policy of
//! the embedded set and every obligation of a manifest is named by some row.

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;
use std::path::PathBuf;

use crate::Norms;

const SECTION: &str = "## 9. Coverage of the HIPAA Privacy Rule and the GDPR";
const HEADER: [&str; 5] = ["provision", "title", "encoded as", "by", "why"];
const ENCODED_AS: [&str; 5] = ["norm", "scope", "obligation", "definitions", "not encoded"];
/// A provision cell for a row beyond the clause sets (listed so that a policy has a row).
const EXTRA: &str = "not in the clause set";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What a row's provision cell names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// A HIPAA section, `164.502`.
    Hipaa(String),
    /// A GDPR article number.
    Article(u32),
    /// A range of GDPR recitals, inclusive.
    Recitals(u32, u32),
}

impl Key {
    fn regulation(&self) -> &'static str {
        match self {
            Key::Hipaa(_) => "hipaa",
            Key::Article(_) | Key::Recitals(..) => "gdpr",
        }
    }
}

#[derive(Debug)]
struct Row {
    line: usize,
    key: Key,
    provision: String,
    title: String,
    encoded_as: String,
    by: String,
    why: String,
}

/// The section of a HIPAA id or provision cell: its leading `164.502`.
fn hipaa_section(s: &str) -> Option<String> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let section = s.get(..end)?;
    let (part, sub) = section.split_once('.')?;
    let digits = |x: &str| !x.is_empty() && x.chars().all(|c| c.is_ascii_digit());
    (digits(part) && digits(sub)).then(|| section.to_string())
}

/// The leading number of `s`.
fn leading_number(s: &str) -> Option<u32> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s.get(..end)?.parse().ok()
}

fn key_of(provision: &str) -> Option<Key> {
    if let Some(rest) = provision.strip_prefix("Art. ") {
        return leading_number(rest).map(Key::Article);
    }
    if let Some(rest) = provision.strip_prefix("Recitals ") {
        let (a, b) = rest.split_once(['–', '-'])?;
        return Some(Key::Recitals(
            a.trim().parse().ok()?,
            b.trim().parse().ok()?,
        ));
    }
    hipaa_section(provision).map(Key::Hipaa)
}

/// The rows of §9's tables (header and separator rows left out), or the problems found.
fn rows(doc: &str, problems: &mut Vec<String>) -> Vec<Row> {
    let mut out = Vec::new();
    let mut inside = false;
    let mut tables = 0;
    for (i, line) in doc.lines().enumerate() {
        let n = i + 1;
        if line.starts_with("## ") {
            inside = line.trim_end() == SECTION;
            continue;
        }
        if !inside || !line.starts_with('|') {
            continue;
        }
        let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        if cells == HEADER {
            tables += 1;
            continue;
        }
        if cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-' || ch == ':'))
        {
            continue;
        }
        let [provision, title, encoded_as, by, why] = cells.as_slice() else {
            problems.push(format!(
                "docs/regulation.md:{n}: a row needs 5 cells, has {}",
                cells.len()
            ));
            continue;
        };
        let Some(key) = key_of(provision) else {
            problems.push(format!(
                "docs/regulation.md:{n}: provision `{provision}` is neither a HIPAA section \
                 (`164.502`), a GDPR article (`Art. 6`) nor a range of recitals (`Recitals 1–173`)"
            ));
            continue;
        };
        out.push(Row {
            line: n,
            key,
            provision: (*provision).to_string(),
            title: (*title).to_string(),
            encoded_as: (*encoded_as).to_string(),
            by: (*by).to_string(),
            why: (*why).to_string(),
        });
    }
    if tables != 2 {
        problems.push(format!(
            "docs/regulation.md: `{SECTION}` should hold two tables with the header \
             `| provision | title | encoded as | by | why |`, found {tables}"
        ));
    }
    out
}

/// The backticked names of a "by" cell (`—` is none), or why the cell is malformed.
fn names(by: &str) -> Result<Vec<String>, String> {
    if by == "—" {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = by.split('`').collect();
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 {
            if part.is_empty() {
                return Err("an empty name".into());
            }
            out.push((*part).to_string());
        } else if !part.chars().all(|c| c == ',' || c == ' ') {
            return Err(format!("`{part}` outside backticks"));
        }
    }
    if parts.len().is_multiple_of(2) || out.is_empty() {
        return Err("unbalanced backticks or no name".into());
    }
    Ok(out)
}

/// Every `[[obligation]]` `name` of `regulations/<reg>.toml`.
fn obligations(reg: &str) -> Result<BTreeSet<String>, Box<dyn Error>> {
    let path = root().join(format!("regulations/{reg}.toml"));
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(&path)?)?;
    let mut out = BTreeSet::new();
    if let Some(list) = manifest.get("obligation") {
        for o in list
            .as_array()
            .ok_or_else(|| format!("{}: `obligation` is not an array", path.display()))?
        {
            let name = o
                .get("name")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| format!("{}: an obligation without a `name`", path.display()))?;
            out.insert(name.to_string());
        }
    }
    Ok(out)
}

/// What the clause sets hold: HIPAA sections, GDPR articles and GDPR recitals.
type Ids = (BTreeSet<String>, BTreeSet<u32>, BTreeSet<u32>);

fn clause_ids(text: &str) -> Result<Ids, String> {
    let (mut hipaa, mut articles, mut recitals) = Ids::default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let parsed = if let Some(id) = line.strip_prefix("HIPAA ") {
            // `164.502(c)` and `164.504(a)Planadministrationfunctions` alike
            hipaa_section(id).map(|s| hipaa.insert(s))
        } else if let Some(id) = line.strip_prefix("GDPR Article ") {
            leading_number(id).map(|n| articles.insert(n))
        } else if let Some(id) = line.strip_prefix("GDPR Recital ") {
            leading_number(id).map(|n| recitals.insert(n))
        } else {
            None
        };
        if parsed.is_none() {
            return Err(format!("regulation_ids.txt: cannot read `{line}`"));
        }
    }
    Ok((hipaa, articles, recitals))
}

#[test]
fn coverage_table_is_complete_and_true() -> Result<(), Box<dyn Error>> {
    let root = root();
    let ids_text =
        std::fs::read_to_string(root.join("data/privacy/privaci-bench-kbs/regulation_ids.txt"))?;
    let (hipaa, articles, recitals) = clause_ids(&ids_text)?;
    assert!(
        !hipaa.is_empty() && !articles.is_empty() && !recitals.is_empty(),
        "regulation_ids.txt holds HIPAA sections, GDPR articles and recitals"
    );
    let doc = std::fs::read_to_string(root.join("docs/regulation.md"))?;
    let norms = Norms::embedded()?;
    let mut manifests = BTreeMap::new();
    for reg in ["hipaa", "gdpr"] {
        manifests.insert(reg, obligations(reg)?);
    }

    let mut problems = Vec::new();
    let rows = rows(&doc, &mut problems);
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut seen: BTreeMap<Key, usize> = BTreeMap::new();

    for row in &rows {
        let at = format!("docs/regulation.md:{} ({})", row.line, row.provision);
        if let Some(first) = seen.insert(row.key.clone(), row.line) {
            problems.push(format!("{at}: a second row (the first is on line {first})"));
        }
        let in_sets = match &row.key {
            Key::Hipaa(s) => hipaa.contains(s),
            Key::Article(n) => articles.contains(n),
            Key::Recitals(a, b) => recitals.iter().any(|r| (a..=b).contains(&r)),
        };
        if !in_sets && !row.provision.contains(EXTRA) {
            problems.push(format!(
                "{at}: not in the clause sets; a row beyond them says `{EXTRA}` in its provision"
            ));
        }
        if row.title.is_empty() || row.why.is_empty() {
            problems.push(format!("{at}: title and why must be filled"));
        }
        if !ENCODED_AS.contains(&row.encoded_as.as_str()) {
            problems.push(format!(
                "{at}: encoded as `{}`, not one of {ENCODED_AS:?}",
                row.encoded_as
            ));
            continue;
        }
        let listed = match names(&row.by) {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!(
                    "{at}: by `{}`: {e} (backticked names separated by commas, or `—`)",
                    row.by
                ));
                continue;
            }
        };
        let reg = row.key.regulation();
        let obligations = manifests.get(reg).cloned().unwrap_or_default();
        let (mut policies, mut obliged) = (Vec::new(), Vec::new());
        for name in &listed {
            named.insert(name.clone());
            if let Some(info) = norms.policy(name) {
                if !name.starts_with(&format!("{reg}-")) {
                    problems.push(format!("{at}: `{name}` is not a {reg} policy"));
                }
                policies.push((name, info.kind.clone()));
            } else if obligations.contains(name) {
                obliged.push(name);
            } else {
                problems.push(format!(
                    "{at}: `{name}` is neither a policy of the embedded set nor an obligation \
                     of regulations/{reg}.toml"
                ));
            }
        }
        match row.encoded_as.as_str() {
            kind @ ("norm" | "scope") => {
                if listed.is_empty() {
                    problems.push(format!("{at}: a {kind} row names at least one policy"));
                }
                for (name, k) in &policies {
                    if k != kind {
                        problems.push(format!("{at}: `{name}` is a {k} policy, the row {kind}"));
                    }
                }
                for name in &obliged {
                    problems.push(format!(
                        "{at}: `{name}` is an obligation, the row {kind}: make it an \
                         obligation row or name policies only"
                    ));
                }
            }
            "obligation" => {
                if obliged.is_empty() {
                    problems.push(format!(
                        "{at}: an obligation row names at least one obligation"
                    ));
                }
            }
            _ => {
                if !listed.is_empty() {
                    problems.push(format!(
                        "{at}: a `{}` row names nothing in by (`—`)",
                        row.encoded_as
                    ));
                }
            }
        }
    }

    for s in &hipaa {
        if !seen.contains_key(&Key::Hipaa(s.clone())) {
            problems.push(format!("HIPAA {s}: no row"));
        }
    }
    for n in &articles {
        if !seen.contains_key(&Key::Article(*n)) {
            problems.push(format!("GDPR art. {n}: no row"));
        }
    }
    for r in &recitals {
        let covering = seen
            .keys()
            .filter(|k| matches!(k, Key::Recitals(a, b) if (a..=b).contains(&r)))
            .count();
        if covering != 1 {
            problems.push(format!("GDPR recital {r}: {covering} rows cover it, not 1"));
        }
    }
    for reg in norms.regulations() {
        let (listing, _) = norms
            .listing(reg)
            .ok_or_else(|| format!("no listing for {reg}"))?;
        for (id, _) in listing {
            if !named.contains(id) {
                problems.push(format!("policy `{id}` ({reg}): named by no row"));
            }
        }
    }
    for (reg, obligations) in &manifests {
        for o in obligations {
            if !named.contains(o) {
                problems.push(format!(
                    "obligation `{o}` (regulations/{reg}.toml): named by no row"
                ));
            }
        }
    }

    assert!(
        problems.is_empty(),
        "the coverage table (docs/regulation.md §9):\n  {}",
        problems.join("\n  ")
    );
    Ok(())
}

#[test]
fn keys_parse() {
    assert_eq!(key_of("164.502"), Some(Key::Hipaa("164.502".into())));
    assert_eq!(
        key_of("164.500 (with 160.102, 160.103; not in the clause set)"),
        Some(Key::Hipaa("164.500".into()))
    );
    assert_eq!(key_of("Art. 6"), Some(Key::Article(6)));
    assert_eq!(key_of("Recitals 1–173"), Some(Key::Recitals(1, 173)));
    assert_eq!(key_of("Article 6"), None);
    assert_eq!(
        names("`a`, `b-c`"),
        Ok(vec!["a".to_string(), "b-c".to_string()])
    );
    assert_eq!(names("—"), Ok(Vec::new()));
    assert!(names("a, `b`").is_err());
    assert!(names("`a").is_err());
    let (h, a, r) =
        clause_ids("HIPAA 164.504(a)Planadministrationfunctions\nHIPAA 164.502(c)\nGDPR Article 6(1)\nGDPR Recital 12\n")
            .unwrap_or_default();
    assert_eq!(
        h,
        BTreeSet::from(["164.502".to_string(), "164.504".to_string()])
    );
    assert_eq!(a, BTreeSet::from([6]));
    assert_eq!(r, BTreeSet::from([12]));
}
