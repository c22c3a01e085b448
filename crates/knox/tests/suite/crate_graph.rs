//! The crate graph drawn in `docs/architecture.md` is the graph cargo builds.
//!
//! The document's dependency table lists, for every workspace crate, the workspace
//! crates it depends on through normal dependencies (direct edges only). This test
//! reads the resolved graph of the locked workspace from `cargo metadata` and compares
//! it with the table, both ways: a crate missing from the table, a row naming a crate
//! that is not in the workspace, and an edge added or removed in a `Cargo.toml` without
//! the document following each fail, naming the row as it should read. The trust
//! diagram therefore cannot silently drift from the code.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The heading of the document's dependency table.
const TABLE_HEADER: &str = "| crate | depends on | notes |";

/// Workspace crate → the workspace crates it depends on directly (normal dependencies,
/// any target), from `cargo metadata`.
fn cargo_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
            "--locked",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let workspace: Vec<&Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
        .collect();
    let names: BTreeSet<String> = workspace
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    workspace
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| d["name"].as_str())
                .filter(|n| names.contains(*n))
                .map(str::to_string)
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// A crate's short name in the table: `knox-policy` is written `policy`; the `knox`
/// crate itself keeps its name.
fn short(name: &str) -> &str {
    name.strip_prefix("knox-").unwrap_or(name)
}

/// The table in `docs/architecture.md`: crate → the short names it lists.
fn documented(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut lines = text.lines().skip_while(|l| l.trim() != TABLE_HEADER);
    assert!(
        lines.next().is_some(),
        "docs/architecture.md has no `{TABLE_HEADER}` table"
    );
    let mut rows = BTreeMap::new();
    for line in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (Some(krate), Some(deps)) = (cells.get(1), cells.get(2)) else {
            panic!("malformed row: {line}");
        };
        let krate = krate.trim_matches('`').to_string();
        let deps = if *deps == "—" {
            BTreeSet::new()
        } else {
            deps.split(',').map(|d| d.trim().to_string()).collect()
        };
        assert!(
            rows.insert(krate.clone(), deps).is_none(),
            "`{krate}` has two rows"
        );
    }
    rows
}

fn row(krate: &str, deps: &BTreeSet<String>) -> String {
    let listed: Vec<&str> = deps.iter().map(|d| short(d)).collect();
    let listed = if listed.is_empty() {
        "—".to_string()
    } else {
        listed.join(", ")
    };
    format!("| `{krate}` | {listed} | … |")
}

#[test]
fn the_documented_crate_graph_is_the_built_one() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let table = documented(&std::fs::read_to_string(doc).unwrap());
    let graph = cargo_graph();
    let mut wrong = Vec::new();
    for (krate, deps) in &graph {
        let want: BTreeSet<String> = deps.iter().map(|d| short(d).to_string()).collect();
        match table.get(krate) {
            Some(listed) if *listed == want => {}
            Some(_) => wrong.push(format!("row differs; it should read {}", row(krate, deps))),
            None => wrong.push(format!("row missing: {}", row(krate, deps))),
        }
    }
    for krate in table.keys().filter(|k| !graph.contains_key(*k)) {
        wrong.push(format!("`{krate}` is not a workspace crate"));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's crate graph is not the one cargo builds:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_table_reader_sees_a_changed_edge() {
    let text = format!(
        "intro\n\n{TABLE_HEADER}\n|---|---|---|\n| `knox-types` | — | vocabulary |\n| `knox-policy` | types | predicates |\n\nafter\n"
    );
    let table = documented(&text);
    assert_eq!(table.len(), 2);
    assert!(table["knox-types"].is_empty());
    assert_eq!(table["knox-policy"], BTreeSet::from(["types".to_string()]));
    let edited = text.replace("| types |", "| types, attest |");
    assert_ne!(documented(&edited)["knox-policy"], table["knox-policy"]);
}
