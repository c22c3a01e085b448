//! A starting contract (`knox contract new`), also used by tests.

use std::collections::{BTreeMap, BTreeSet};

use crate::format::{
    ArgPattern, Contract, DirAccess, DirectoryCap, EndpointCap, ExecutableCap, FORMAT, Hole,
    Impact, Scheme,
};

/// A contract valid for `[from_ms, until_ms]`: a writable `workspace` directory, a
/// read-only `docs` directory, `wc` pinned by `wc_sha256` with argv `-l <relpath>`, an
/// `example-api` HTTPS endpoint, budget 100 cents, 20 actions; high impact needs an
/// approval (no approver is listed: add one before signing, or empty
/// `approval_required`).
pub fn template(from_ms: u64, until_ms: u64, wc_sha256: &str) -> Contract {
    let mut directories = BTreeMap::new();
    directories.insert(
        "workspace".to_owned(),
        DirectoryCap {
            root: "/srv/agent/workspace".into(),
            access: DirAccess::Write,
            cost_cents: 1,
            impact: Impact::Low,
        },
    );
    directories.insert(
        "docs".to_owned(),
        DirectoryCap {
            root: "/srv/agent/docs".into(),
            access: DirAccess::Read,
            cost_cents: 0,
            impact: Impact::Low,
        },
    );
    let mut executables = BTreeMap::new();
    executables.insert("wc".to_owned(), wc_lines("/usr/bin", wc_sha256));
    let mut endpoints = BTreeMap::new();
    endpoints.insert(
        "example-api".to_owned(),
        EndpointCap {
            scheme: Scheme::Https,
            host: "api.example.com".into(),
            port: 443,
            path_prefix: "/v1".into(),
            methods: ["GET".to_owned()].into_iter().collect(),
            cost_cents: 5,
            impact: Impact::Low,
            receives: BTreeSet::new(),
        },
    );
    Contract {
        format: FORMAT.into(),
        id: "example".into(),
        valid_from_ms: from_ms,
        valid_until_ms: until_ms,
        budget_cents: 100,
        max_actions: 20,
        directories,
        executables,
        endpoints,
        approvers: BTreeMap::new(),
        approval_required: BTreeSet::new(),
        max_approval_ttl_ms: 300_000,
    }
}

/// `wc -l <relpath>` as a capability: the `wc` beneath `root` pinned by `wc_sha256`,
/// run in the `workspace` directory capability, 2 cents, low impact.
pub fn wc_lines(root: &str, wc_sha256: &str) -> ExecutableCap {
    ExecutableCap {
        root: root.into(),
        path: "wc".into(),
        sha256: wc_sha256.into(),
        argv: vec![vec![
            ArgPattern::Lit("-l".into()),
            ArgPattern::Hole(Hole::Relpath),
        ]],
        workdir: Some("workspace".into()),
        cost_cents: 2,
        impact: Impact::Low,
    }
}
