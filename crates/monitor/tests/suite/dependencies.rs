//! The trusted monitor carries no benchmark: neither the InjecAgent dataset nor the
//! harness or evaluation built on it is in its normal dependency graph. The graph is
//! read from `cargo metadata` (the resolved graph of the locked workspace, as JSON), so
//! the check does not depend on the layout of `cargo tree`'s output.

#![expect(clippy::expect_used, clippy::indexing_slicing, reason = "tests")]

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use serde_json::Value;

/// Crates that must never come back into the monitor's graph.
const BANNED: [&str; 3] = ["knox-dataset", "knox-harness", "knox-eval"];

/// The host's target triple, as cargo reports it.
fn host() -> String {
    let out = Command::new(env!("CARGO"))
        .arg("-vV")
        .output()
        .expect("cargo -vV runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("cargo -vV names the host")
        .to_string()
}

/// The resolved graph for the host (no other platform's crates need be downloaded).
fn metadata() -> Value {
    let host = host();
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata writes JSON")
}

/// The names of the packages `root` depends on through normal dependencies,
/// transitively (itself included).
fn normal_closure(meta: &Value, root: &str) -> BTreeSet<String> {
    let packages = meta["packages"].as_array().expect("packages");
    let name_of: HashMap<&str, &str> = packages
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p["name"].as_str()?)))
        .collect();
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve graph");
    let deps_of: HashMap<&str, Vec<&str>> = nodes
        .iter()
        .filter_map(|n| {
            let normal = n["deps"]
                .as_array()?
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k["kind"].is_null()))
                })
                .filter_map(|d| d["pkg"].as_str())
                .collect();
            Some((n["id"].as_str()?, normal))
        })
        .collect();
    let start = name_of
        .iter()
        .find(|(_, name)| **name == root)
        .map(|(id, _)| *id)
        .expect("root package in the workspace");
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        todo.extend(deps_of.get(id).into_iter().flatten().copied());
    }
    seen.iter()
        .filter_map(|id| name_of.get(id).map(|n| (*n).to_string()))
        .collect()
}

#[test]
fn the_monitor_depends_on_no_dataset_harness_or_evaluation() {
    let meta = metadata();
    let graph = normal_closure(&meta, "knox-monitor");
    // The walk follows real edges: the agent interfaces and the types are reached.
    for needed in ["knox-agent", "knox-types", "knox-policy", "serde_json"] {
        assert!(graph.contains(needed), "{needed} missing from {graph:?}");
    }
    let banned: Vec<&str> = BANNED.into_iter().filter(|b| graph.contains(*b)).collect();
    assert!(banned.is_empty(), "knox-monitor depends on {banned:?}");
    // And the check is not vacuous: the banned crates exist, and the harness's graph,
    // read the same way, does reach the dataset.
    let harness = normal_closure(&meta, "knox-harness");
    assert!(harness.contains("knox-dataset") && harness.contains("knox-monitor"));
}
