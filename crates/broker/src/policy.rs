//! From the APM's `Auth` to the kernel policy of one run's tool workers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use knox_sandbox::{Access as KAccess, Limits as KLimits, PathRule, SandboxPolicy};
use knox_types::apm::{Access, Authorization, Endpoint, PathGrant};

/// System calls every confined program needs to start: `execve` of its own binary (the
/// supervisor lets it through only under an execute grant).
pub const LAUNCH: [&str; 1] = ["execve"];

/// An APM access right as the kernel sandbox names it (one mapping for the broker's
/// workers and the MCP host's servers).
pub fn access(a: Access) -> KAccess {
    match a {
        Access::Read => KAccess::Read,
        Access::Write => KAccess::Write,
        Access::Create => KAccess::Create,
        Access::Remove => KAccess::Remove,
        Access::Replace => KAccess::Replace,
        Access::Execute => KAccess::Execute,
    }
}

/// The kernel policy for a worker serving `auth`, running `worker` in `workspace`.
pub fn from_auth(auth: &Authorization, workspace: &Path, worker: &Path) -> SandboxPolicy {
    confine(
        &auth.paths,
        &auth.endpoints,
        auth.syscalls.clone(),
        &auth.limits,
        worker,
        workspace,
    )
}

/// The kernel policy of one confined program — a broker's worker or an MCP server —
/// running `program` in `workspace`: the `paths` as granted plus read and execute on
/// `program` itself, TCP connect to the `endpoints`' ports, the `syscalls` plus
/// [`LAUNCH`], the `limits`. Nothing else: the one translation of granted needs into
/// the kernel's terms.
pub fn confine<'a>(
    paths: &[PathGrant],
    endpoints: impl IntoIterator<Item = &'a Endpoint>,
    mut syscalls: BTreeSet<String>,
    limits: &knox_types::apm::Limits,
    program: &Path,
    workspace: &Path,
) -> SandboxPolicy {
    let mut rules: Vec<PathRule> = paths
        .iter()
        .map(|g| PathRule {
            path: PathBuf::from(&g.path),
            access: g.access.iter().copied().map(access).collect(),
        })
        .collect();
    rules.push(PathRule {
        path: program.to_path_buf(),
        access: [KAccess::Read, KAccess::Execute].into_iter().collect(),
    });
    syscalls.extend(LAUNCH.iter().map(|s| (*s).to_owned()));
    SandboxPolicy {
        paths: rules,
        tcp_connect_ports: endpoints.into_iter().map(|e| e.port).collect(),
        tcp_bind_ports: BTreeSet::new(),
        syscalls,
        limits: kernel_limits(limits),
        workspace: workspace.to_path_buf(),
        min_landlock_abi: None,
        degraded: BTreeSet::new(),
    }
}

/// The kernel limits of an authorization's (or a server's) declared limits.
pub fn kernel_limits(l: &knox_types::apm::Limits) -> KLimits {
    KLimits {
        max_processes: l.max_processes,
        max_file_bytes: l.max_file_bytes,
        max_memory_bytes: l.max_memory_bytes,
        cpu_seconds: u64::from(l.cpu_seconds),
        max_open_files: u64::from(l.max_open_files),
        max_address_space_bytes: None,
    }
}
