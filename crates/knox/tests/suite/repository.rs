//! The repository stands alone: no file reaches above its root.
//!
//! A clone of the repository must build, test, bench and document itself with nothing
//! beside it. Every relative path written in a tracked text file is resolved against
//! the base it is read from — `include_str!`/`include_bytes!` against the source file's
//! folder, other Rust literals against the crate's folder (`CARGO_MANIFEST_DIR` and the
//! test's working directory), Markdown links against the document's folder, scripts
//! against their folder and against the repository root (CI scripts `cd` there) — and
//! any path that climbs above the repository root fails the test, naming the file and
//! line.

use std::path::{Path, PathBuf};

/// Folders never scanned: build outputs, VCS data.
const SKIPPED_DIRS: [&str; 3] = [".git", "target", "node_modules"];

/// Folders of inputs, not paths (fuzzing corpora hold traversal strings on purpose).
const SKIPPED_PATHS: [&str; 2] = ["fuzz/corpus", "fuzz/artifacts"];

/// Extensions of the files scanned (plus extension-less scripts such as `.ci/run`).
const TEXT_EXTENSIONS: [&str; 8] = ["rs", "toml", "md", "sh", "json", "yml", "yaml", "cedar"];

fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// How a file's relative paths are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rust,
    Markdown,
    Script,
    Other,
}

fn kind(path: &Path) -> Option<Kind> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("rs") => Some(Kind::Rust),
        Some("md") => Some(Kind::Markdown),
        Some("sh") => Some(Kind::Script),
        Some(ext) if TEXT_EXTENSIONS.contains(&ext) => Some(Kind::Other),
        Some(_) => None,
        None => {
            let text = std::fs::read(path).ok()?;
            text.starts_with(b"#!").then_some(Kind::Script)
        }
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let file_type = entry.file_type().unwrap();
        if file_type.is_dir() {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let skipped = SKIPPED_DIRS.contains(&name.as_ref())
                || name.starts_with("target-")
                || SKIPPED_PATHS.iter().any(|p| rel == Path::new(p));
            if !skipped {
                walk(root, &path, out);
            }
        } else if file_type.is_file() {
            out.push(path);
        }
    }
}

/// Depth (in folders below the repository root) of `rel`, a folder inside it.
fn depth(rel: &Path) -> i64 {
    rel.components().count() as i64
}

/// Whether `token`, read from a folder `base_depth` levels below the root, climbs above
/// the root.
fn escapes(base_depth: i64, token: &str) -> bool {
    let mut depth = base_depth;
    for part in token.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-' | '+' | '~')
}

/// Every path-like token holding a `..` component, with the character before it.
fn relative_tokens(line: &str) -> Vec<(usize, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_path_char(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_path_char(chars[i]) {
            i += 1;
        }
        let token: String = chars[start..i].iter().collect();
        let climbs = token == ".." || token.starts_with("../") || token.starts_with("/../");
        // Tokens after a shell or format expansion (`$(dirname "$0")/..`, `{dir}/..`)
        // are relative to something computed at run time: not a literal path.
        let expanded = start > 0 && matches!(chars[start - 1], ')' | '}' | '$');
        if climbs && !expanded {
            found.push((start, token));
        }
    }
    found
}

#[test]
fn no_file_reaches_above_the_repository_root() {
    let root = repository_root().canonicalize().unwrap();
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    assert!(
        files.len() > 100,
        "only {} files found under {}",
        files.len(),
        root.display()
    );
    let mut reaches = Vec::new();
    let mut scanned = 0;
    for file in &files {
        let Some(kind) = kind(file) else { continue };
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        scanned += 1;
        let rel = file.strip_prefix(&root).unwrap();
        let file_dir = depth(rel.parent().unwrap_or(Path::new("")));
        let crate_dir = file
            .ancestors()
            .skip(1)
            .find(|d| d.join("Cargo.toml").is_file())
            .map(|d| depth(d.strip_prefix(&root).unwrap()))
            .unwrap_or(0);
        let mut previous = "";
        for (n, line) in text.lines().enumerate() {
            for (col, token) in relative_tokens(line) {
                let before = &line[..line.char_indices().nth(col).map_or(line.len(), |(b, _)| b)];
                // rustfmt puts a long path on the line after `include_str!(`.
                let opened = |l: &str| l.trim_end().ends_with('(') && l.contains("include_");
                let alone = before.trim().trim_matches(['"', '#', 'r']).is_empty();
                let included = before.contains("include_") || (alone && opened(previous));
                let bases: Vec<i64> = match kind {
                    Kind::Rust if included || before.contains("#[path") => {
                        vec![file_dir]
                    }
                    Kind::Rust => vec![crate_dir, file_dir],
                    Kind::Markdown | Kind::Other => vec![file_dir],
                    Kind::Script => vec![file_dir, 0],
                };
                if bases.iter().any(|&b| escapes(b, &token)) {
                    reaches.push(format!("{}:{}: `{token}`", rel.display(), n + 1));
                }
            }
            previous = line;
        }
    }
    assert!(scanned > 100, "only {scanned} text files scanned");
    assert!(
        reaches.is_empty(),
        "files reach above the repository root (vendor what they need into the repository):\n{}",
        reaches.join("\n")
    );
}

#[test]
fn the_reach_check_sees_the_forms_it_must() {
    // The forms the standalone build was broken by, each read from where it was written
    // (spelt with `{up}` so that this file does not itself hold them).
    let up = "..";
    // crates/dataset/src, an include_str!:
    let dataset = format!("{up}/{up}/{up}/{up}/shared/data/injecagent/tools.json");
    assert!(escapes(3, &dataset));
    // a crate folder, concat! with CARGO_MANIFEST_DIR:
    assert!(escapes(
        2,
        &format!("/{up}/{up}/{up}/shared/data/attestation")
    ));
    // the README at the root:
    assert!(escapes(0, &format!("{up}/shared/DESIGN.md")));
    assert!(!escapes(
        3,
        &format!("{up}/{up}/{up}/data/injecagent/tools.json")
    ));
    assert!(!escapes(2, &format!("/{up}/{up}/data/attestation")));
    assert_eq!(
        relative_tokens(&format!(
            r#"include_str!("{up}/x"), cd "$(dirname "$0")/{up}""#
        )),
        vec![(14, format!("{up}/x"))]
    );
    assert_eq!(
        relative_tokens(&format!("see [design]({up}/shared/DESIGN.md)")),
        vec![(13, format!("{up}/shared/DESIGN.md"))]
    );
}
