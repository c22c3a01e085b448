//! `Auth` and the mediated system-call guard: a tool's declared needs must lie within
//! the authorization the APM carries.

use std::collections::BTreeSet;

use knox_types::apm::{Access, Authorization, PathGrant, ToolNeeds};

use crate::manifest::{ToolkitManifest, merge_paths};

/// `Auth` for a trajectory using `toolkits`: the union of those toolkits' needs and the
/// runtime baseline. Unknown toolkit names are ignored (the planner validates tools).
pub fn authorization<'a>(
    manifest: &ToolkitManifest,
    toolkits: impl IntoIterator<Item = &'a str>,
) -> Authorization {
    let needs = manifest.needs();
    let mut auth = Authorization {
        toolkits: BTreeSet::new(),
        syscalls: needs.runtime.syscalls.clone(),
        paths: needs.runtime.paths.clone(),
        endpoints: BTreeSet::new(),
        limits: needs.runtime.limits,
    };
    for name in toolkits {
        let Some(kit) = needs.toolkits.get(name) else {
            continue;
        };
        auth.toolkits.insert(name.to_string());
        auth.syscalls.extend(kit.syscalls.iter().cloned());
        auth.paths.extend(kit.paths.iter().cloned());
        auth.endpoints.extend(kit.endpoints.iter().cloned());
        if let Some(l) = kit.limits {
            auth.limits = auth.limits.max(&l);
        }
    }
    auth.paths = merge_paths(&auth.paths);
    auth
}

/// The needs not covered by `auth`, each named (`syscall:execve`, `path:/usr/bin:execute`,
/// `endpoint:host:443`, `limit:max_processes`, `toolkit:Terminal`); empty when
/// `needs ⊆ Auth`.
pub fn missing(needs: &ToolNeeds, auth: &Authorization) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if !auth.toolkits.contains(&needs.toolkit) {
        out.insert(format!("toolkit:{}", needs.toolkit));
    }
    for s in needs.syscalls.difference(&auth.syscalls) {
        out.insert(format!("syscall:{s}"));
    }
    for grant in &needs.paths {
        for a in &grant.access {
            if !covers(&auth.paths, &grant.path, *a) {
                out.insert(format!("path:{}:{}", grant.path, access_name(*a)));
            }
        }
    }
    for e in needs.endpoints.difference(&auth.endpoints) {
        out.insert(format!("endpoint:{}:{}", e.host, e.port));
    }
    let (n, a) = (&needs.limits, &auth.limits);
    for (name, over) in [
        ("max_processes", n.max_processes > a.max_processes),
        ("max_file_bytes", n.max_file_bytes > a.max_file_bytes),
        ("max_memory_bytes", n.max_memory_bytes > a.max_memory_bytes),
        ("cpu_seconds", n.cpu_seconds > a.cpu_seconds),
        ("max_open_files", n.max_open_files > a.max_open_files),
    ] {
        if over {
            out.insert(format!("limit:{name}"));
        }
    }
    out
}

/// Whether some grant on `path` or one of its ancestors gives `access`.
pub fn covers(grants: &[PathGrant], path: &str, access: Access) -> bool {
    grants
        .iter()
        .any(|g| g.access.contains(&access) && is_within(path, &g.path))
}

/// Whether `path` is `base` or lies beneath it (both normalized absolute paths).
pub fn is_within(path: &str, base: &str) -> bool {
    base == "/"
        || path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn access_name(a: Access) -> &'static str {
    match a {
        Access::Read => "read",
        Access::Write => "write",
        Access::Create => "create",
        Access::Remove => "remove",
        Access::Replace => "replace",
        Access::Execute => "execute",
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::manifest::tests::manifest;

    #[test]
    fn auth_is_union_of_used_toolkits_and_runtime() {
        let m = manifest();
        let auth = authorization(&m, ["Mail"]);
        assert!(auth.syscalls.contains("connect") && auth.syscalls.contains("read"));
        assert!(!auth.syscalls.contains("execve"));
        assert!(missing(&m.tool("MailSend").unwrap().needs, &auth).is_empty());
        let term = missing(&m.tool("TerminalExecute").unwrap().needs, &auth);
        assert!(
            term.contains("syscall:execve") && term.contains("path:/usr/bin:execute"),
            "{term:?}"
        );
        assert!(
            term.contains("toolkit:Terminal") && term.contains("limit:max_processes"),
            "{term:?}"
        );
        let both = authorization(&m, ["Mail", "Terminal"]);
        assert!(missing(&m.tool("TerminalExecute").unwrap().needs, &both).is_empty());
    }

    #[test]
    fn path_containment_is_by_component() {
        assert!(is_within("/usr/lib/x", "/usr/lib"));
        assert!(is_within("/usr/lib", "/usr/lib"));
        assert!(!is_within("/usr/lib64", "/usr/lib"));
        assert!(is_within("/etc", "/"));
    }
}
