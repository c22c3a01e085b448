//! Compiles a policy's syscall allowlist into a seccomp-BPF program whose default is user notification.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};

use crate::sys;

/// System calls that always reach the supervisor, even when the policy lists them,
/// so that their denials are recorded with decoded arguments. The supervisor lets
/// an authorized call continue (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`) — safe here only
/// because Landlock enforces the same rule in the kernel after the check (the
/// argument memory can change between the check and the call; Landlock's cannot).
pub const MEDIATED: [&str; 4] = ["execve", "execveat", "connect", "bind"];

/// System calls the child makes between installing the filter and `execve`:
/// reporting the listener fd, and reporting an `execve` failure before exiting.
/// Allowed whatever the policy says; every tool needs them anyway.
pub const SANDBOX_INTERNAL: [&str; 2] = ["write", "exit_group"];

/// `clone` flags that create namespaces; `clone` with any of them is denied.
const CLONE_NAMESPACE_FLAGS: u64 = 0x0002_0000 // CLONE_NEWNS
    | 0x0200_0000 // CLONE_NEWCGROUP
    | 0x0400_0000 // CLONE_NEWUTS
    | 0x0800_0000 // CLONE_NEWIPC
    | 0x1000_0000 // CLONE_NEWUSER
    | 0x2000_0000 // CLONE_NEWPID
    | 0x4000_0000; // CLONE_NEWNET

const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const SOCK_STREAM: u64 = 1;
const IPPROTO_TCP: u64 = 6;
const MSG_FASTOPEN: u64 = 0x2000_0000;
const SOCK_TYPE_MASK: u64 = 0xf;
const ENOSYS: i32 = 38;

/// Why a filter could not be built.
#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    /// libseccomp refused an operation.
    #[error("libseccomp: {0}")]
    Seccomp(#[from] libseccomp::error::SeccompError),
    /// A name is not an x86_64 system call.
    #[error("unknown system call `{0}`")]
    UnknownSyscall(String),
    /// Exporting the program failed.
    #[error("exporting the bpf program: {0}")]
    Export(#[from] std::io::Error),
}

/// The x86_64 number of a system call name, if libseccomp knows it.
pub fn syscall_number(name: &str) -> Option<i32> {
    ScmpSyscall::from_name_by_arch(name, ScmpArch::X8664)
        .ok()
        .map(i32::from)
}

/// The x86_64 name of a system call number, if libseccomp knows it.
pub fn syscall_name(nr: i32) -> Option<String> {
    ScmpSyscall::from(nr).get_name_by_arch(ScmpArch::X8664).ok()
}

/// Builds the BPF program for `allowed`:
///
/// - default action: user notification (the supervisor records and answers `EPERM`);
/// - architecture other than x86_64, and x32 numbers (bit `0x40000000`): kill the process;
/// - listed calls: allow, except [`MEDIATED`] ones (notified) and these argument-checked ones:
///   `clone` without namespace flags, `socket` for stream sockets only (`AF_UNIX`, TCP
///   over IPv4/IPv6, protocol 0 or TCP: no datagram can be sent to an address no rule
///   covers, no MPTCP or SCTP socket escapes Landlock's TCP rules), `sendto`,
///   `sendmsg` and `sendmmsg` without `MSG_FASTOPEN` (a connect no one checks),
///   `prlimit64` on the caller itself;
/// - `clone3`: `ENOSYS`, so the C library falls back to `clone`, whose flags a filter can read.
pub(crate) fn compile(allowed: &BTreeSet<String>) -> Result<sys::BpfProgram, FilterError> {
    export(&context(allowed)?)
}

fn context(allowed: &BTreeSet<String>) -> Result<ScmpFilterContext, FilterError> {
    let mut ctx = ScmpFilterContext::new(ScmpAction::Notify)?;
    ctx.set_act_badarch(ScmpAction::KillProcess)?;
    // The child sets no_new_privs itself; the exported program does not depend on it.
    ctx.set_ctl_nnp(false)?;
    // A binary tree of syscall numbers instead of a list: every system call the
    // tool makes runs this program.
    ctx.set_ctl_optimize(2)?;
    for name in allowed.iter().map(String::as_str).chain(SANDBOX_INTERNAL) {
        add_allow(&mut ctx, name)?;
    }
    ctx.add_rule(ScmpAction::Errno(ENOSYS), lookup("clone3")?)?;
    Ok(ctx)
}

fn lookup(name: &str) -> Result<ScmpSyscall, FilterError> {
    ScmpSyscall::from_name_by_arch(name, ScmpArch::X8664)
        .map_err(|_| FilterError::UnknownSyscall(name.to_owned()))
}

fn add_allow(ctx: &mut ScmpFilterContext, name: &str) -> Result<(), FilterError> {
    let call = lookup(name)?;
    match name {
        _ if MEDIATED.contains(&name) => {}
        "clone3" => {}
        "clone" => {
            let no_ns =
                ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(CLONE_NAMESPACE_FLAGS), 0);
            ctx.add_rule_conditional(ScmpAction::Allow, call, &[no_ns])?;
        }
        "socket" => {
            // The protocol is checked too: `IPPROTO_MPTCP` (and SCTP) stream sockets
            // are not TCP to Landlock, which then does not check their ports.
            let domain = |d| ScmpArgCompare::new(0, ScmpCompareOp::Equal, d);
            let stream =
                ScmpArgCompare::new(1, ScmpCompareOp::MaskedEqual(SOCK_TYPE_MASK), SOCK_STREAM);
            let protocol = |p| ScmpArgCompare::new(2, ScmpCompareOp::Equal, p);
            let allowed = [
                (AF_UNIX, 0),
                (AF_INET, 0),
                (AF_INET, IPPROTO_TCP),
                (AF_INET6, 0),
                (AF_INET6, IPPROTO_TCP),
            ];
            for (d, p) in allowed {
                ctx.add_rule_conditional(
                    ScmpAction::Allow,
                    call,
                    &[domain(d), stream, protocol(p)],
                )?;
            }
        }
        "sendto" | "sendmsg" | "sendmmsg" => {
            // TCP Fast Open connects inside `sendto`/`sendmsg`, where neither the
            // supervisor nor Landlock (ABI 7) checks the port: such a send is
            // notified (denied and recorded) instead.
            let flags_arg = if name == "sendmsg" { 2 } else { 3 };
            let no_fastopen =
                ScmpArgCompare::new(flags_arg, ScmpCompareOp::MaskedEqual(MSG_FASTOPEN), 0);
            ctx.add_rule_conditional(ScmpAction::Allow, call, &[no_fastopen])?;
        }
        "prlimit64" => {
            // Only its own limits: a tool running as uid 0 without capabilities
            // could otherwise lower the limits of any other uid-0 process.
            let own = ScmpArgCompare::new(0, ScmpCompareOp::Equal, 0);
            ctx.add_rule_conditional(ScmpAction::Allow, call, &[own])?;
        }
        _ => {
            ctx.add_rule(ScmpAction::Allow, call)?;
        }
    }
    Ok(())
}

fn export(ctx: &ScmpFilterContext) -> Result<sys::BpfProgram, FilterError> {
    // `seccomp_export_bpf_mem` needs libseccomp 2.6; Debian 12 ships 2.5.4.
    let mut file = sys::memfd(c"knox-bpf")?;
    ctx.export_bpf(&file)?;
    file.seek(SeekFrom::Start(0))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(sys::BpfProgram::from_bytes(&bytes)?)
}

/// The filter as libseccomp's pseudo-C, for review and for tests.
pub fn pseudo_c(allowed: &BTreeSet<String>) -> Result<String, FilterError> {
    let mut file = sys::memfd(c"knox-pfc")?;
    context(allowed)?.export_pfc(&file)?;
    file.seek(SeekFrom::Start(0))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers_agree() {
        assert_eq!(syscall_number("ptrace"), Some(101));
        assert_eq!(syscall_name(165).as_deref(), Some("mount"));
        assert_eq!(syscall_number("no_such_call"), None);
    }

    #[test]
    fn program_compiles_and_rejects_x32() -> Result<(), FilterError> {
        let allowed: BTreeSet<String> = ["read", "clone", "socket"].map(String::from).into();
        let program = compile(&allowed)?;
        assert!(program.len() > 4);
        // libseccomp adds `if (nr >= 0x40000000) goto bad_arch` to x86_64 filters
        // without the x32 ABI (its pseudo-C output does not show it).
        assert!(
            program.jge_constants().contains(&0x4000_0000),
            "x32 numbers must be rejected"
        );
        assert!(pseudo_c(&allowed)?.contains("action KILL_PROCESS"));
        Ok(())
    }
}
