//! From a stdio server's needs to the kernel policy its process runs under.

use std::collections::BTreeSet;
use std::path::Path;

use knox_broker::policy::confine;
use knox_sandbox::{Profile, SandboxPolicy};

use crate::McpError;
use crate::config::{Needs, default_limits};

/// The kernel policy of a server running `program` in `workspace` under `needs`:
/// the runtime baseline, the needs' families and system calls, the needs' paths
/// plus read and execute on the program, TCP connect to the needs' endpoint ports,
/// the needs' limits (`knox_broker::policy::confine`, the broker's translation).
/// Nothing else.
pub fn policy(needs: &Needs, program: &Path, workspace: &Path) -> Result<SandboxPolicy, McpError> {
    let sandbox = |e: knox_sandbox::ProfileError| McpError::Sandbox(e.to_string());
    let mut syscalls: BTreeSet<String> = Profile::runtime().map_err(sandbox)?.syscalls().clone();
    for family in &needs.profile {
        syscalls.extend(
            Profile::family(*family)
                .map_err(sandbox)?
                .syscalls()
                .iter()
                .cloned(),
        );
    }
    syscalls.extend(needs.syscalls.iter().cloned());
    let limits = needs.limits.unwrap_or_else(default_limits);
    let policy = confine(
        &needs.paths,
        &needs.endpoints,
        syscalls,
        &limits,
        program,
        workspace,
    );
    policy
        .validate()
        .map_err(|e| McpError::Sandbox(e.to_string()))?;
    Ok(policy)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use knox_sandbox::Access as KAccess;
    use knox_types::apm::PathGrant;

    #[test]
    fn a_policy_holds_the_needs_and_nothing_more() {
        let needs = Needs {
            profile: [knox_sandbox::Family::Offline].into_iter().collect(),
            syscalls: ["epoll_create1".to_owned()].into_iter().collect(),
            paths: vec![PathGrant {
                path: "/srv/data".into(),
                access: [knox_types::apm::Access::Read].into_iter().collect(),
            }],
            endpoints: vec![],
            limits: None,
        };
        let p = policy(&needs, Path::new("/usr/bin/node"), Path::new("/tmp")).unwrap();
        assert!(p.syscalls.contains("epoll_create1") && p.syscalls.contains("getdents64"));
        assert!(!p.syscalls.contains("socket"), "offline: no sockets");
        assert!(!p.syscalls.contains("ptrace"));
        assert!(p.tcp_connect_ports.is_empty() && p.tcp_bind_ports.is_empty());
        assert_eq!(p.paths.len(), 2);
        assert!(
            p.paths
                .iter()
                .any(|r| r.path == Path::new("/usr/bin/node")
                    && r.access.contains(&KAccess::Execute))
        );
        assert!(p.paths.iter().any(|r| r.path == Path::new("/srv/data")
            && r.access == [KAccess::Read].into_iter().collect()));
    }
}
