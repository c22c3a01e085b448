//! Tools never run as root: a root caller's tools run under the unprivileged
//! `run_as` ids with no groups and no capabilities; a SIGKILLed owner's cgroup
//! pools are reclaimed by the next sandbox.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use knox_sandbox::{Access, Family, RunAs, Sandbox, SandboxConfig, SandboxPolicy};

use super::support::{Fixture, TestResult, probe};

/// This process's effective uid (the owner of its `/proc/self`).
fn euid() -> std::io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

#[test]
fn a_root_callers_tool_runs_as_run_as_with_no_group_and_no_capability() -> TestResult {
    crate::require_kernel!();
    let fx = Fixture::new()?;
    let ids = RunAs::KNOX;
    let sandbox = Sandbox::new(SandboxConfig {
        run_as: Some(ids),
        ..SandboxConfig::default()
    })?;
    let policy = SandboxPolicy::for_families(&[Family::Offline], &fx.workspace)?
        .grant("/usr/bin/cat", &[Access::Read, Access::Execute])
        .grant("/proc", &[Access::Read]);
    let out = sandbox
        .spawn(&policy, &["/usr/bin/cat", "/proc/self/status"], &[], b"")?
        .wait()?;
    assert!(out.success(), "{out:?}");
    let status = String::from_utf8(out.stdout)?;
    let me = euid()?;
    let (uid, gid) = if me == 0 {
        assert_eq!(sandbox.tool_identity(), Some(ids));
        assert_eq!(out.enforcement.run_as, Some(ids));
        (ids.uid, ids.gid)
    } else {
        // Not root: the tool runs as the caller (in its user namespace).
        assert_eq!(sandbox.tool_identity(), None);
        (me, std::fs::metadata("/proc/self")?.gid())
    };
    let four = |id: u32| [id; 4].map(|i| i.to_string()).join("\t");
    assert_eq!(
        status_field(&status, "Uid"),
        Some(four(uid).as_str()),
        "{status}"
    );
    assert_eq!(
        status_field(&status, "Gid"),
        Some(four(gid).as_str()),
        "{status}"
    );
    assert_ne!(uid, 0);
    assert_eq!(status_field(&status, "Groups"), Some(""), "{status}");
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(
            status_field(&status, caps),
            Some("0000000000000000"),
            "{caps}: {status}"
        );
    }
    assert_eq!(status_field(&status, "NoNewPrivs"), Some("1"), "{status}");
    Ok(())
}

#[test]
fn run_as_executes_a_program_below_directories_its_uid_cannot_search() -> TestResult {
    crate::require_kernel!();
    if euid()? != 0 {
        return Ok(());
    }
    // The fixture's root is a 0700 temporary directory of root's: the workspace
    // inside it is entered before the identity changes; the probe copy there is
    // executed through a descriptor opened as root.
    let fx = Fixture::new()?;
    let hidden = fx.outside.join("knox-probe");
    std::fs::copy(probe(), &hidden)?;
    let sandbox = Sandbox::new(SandboxConfig {
        run_as: Some(RunAs::KNOX),
        ..SandboxConfig::default()
    })?;
    let policy = SandboxPolicy::for_families(&[], &fx.workspace)?
        .grant(&hidden, &[Access::Read, Access::Execute]);
    let out = sandbox
        .spawn(&policy, &[hidden.as_os_str(), "true".as_ref()], &[], b"")?
        .wait()?;
    assert!(out.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ok\":true"));
    Ok(())
}

/// A granted directory whose mode bits refuse the tools' uid (root's, 0755) is
/// mounted idmapped for the tool: its writes there succeed, what it creates is
/// owned by the directory's owner on disk, another owner's file stays protected, no
/// set-id bit can be set, and the host's mount table does not change.
#[test]
fn run_as_changes_a_granted_root_directory_through_an_idmapped_mount() -> TestResult {
    use std::os::unix::fs::PermissionsExt as _;
    crate::require_kernel!();
    if euid()? != 0 {
        return Ok(());
    }
    let fx = Fixture::new()?;
    // Searchable by every uid, as a project directory is; the fixture's root is not.
    let top = tempfile::Builder::new().prefix("knox-idmap-").tempdir()?;
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755))?;
    let granted = top.path().join("project");
    std::fs::create_dir(&granted)?;
    std::fs::set_permissions(&granted, std::fs::Permissions::from_mode(0o755))?;
    std::fs::write(granted.join("mine.txt"), "root's\n")?;
    std::fs::write(granted.join("theirs.txt"), "70000's\n")?;
    std::os::unix::fs::chown(granted.join("theirs.txt"), Some(70_000), Some(70_000))?;
    let granted = std::fs::canonicalize(&granted)?;
    let sandbox = Sandbox::new(SandboxConfig {
        run_as: Some(RunAs::KNOX),
        ..SandboxConfig::default()
    })?;
    let policy = SandboxPolicy::for_families(&[Family::Terminal], &fx.workspace)?
        .grant("/usr/bin", &[Access::Read, Access::Execute])
        .grant(
            &granted,
            &[Access::Read, Access::Write, Access::Create, Access::Remove],
        );
    let script = "cd \"$1\" || exit 9
echo made > new.txt && echo made
echo more >> mine.txt && echo appended
echo more >> theirs.txt 2>/dev/null || echo theirs-refused
chmod 4755 new.txt 2>/dev/null || echo setuid-refused
chmod 2755 new.txt 2>/dev/null || echo setgid-refused
stat -c '%u:%g' new.txt";
    let granted_arg = granted.to_string_lossy().into_owned();
    let out = sandbox
        .spawn(
            &policy,
            &["/usr/bin/sh", "-c", script, "sh", granted_arg.as_str()],
            &[],
            b"",
        )?
        .wait()?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.success(), "{out:?}");
    for line in [
        "made",
        "appended",
        "theirs-refused",
        "setuid-refused",
        "setgid-refused",
        "65520:65520",
    ] {
        assert!(said.lines().any(|l| l == line), "{line}: {said}");
    }
    let new = std::fs::metadata(granted.join("new.txt"))?;
    assert_eq!(
        (new.uid(), new.gid()),
        (0, 0),
        "stored as the directory's owner"
    );
    assert_eq!(new.mode() & 0o6000, 0, "no set-id bit: {:o}", new.mode());
    assert_eq!(
        std::fs::read_to_string(granted.join("mine.txt"))?,
        "root's\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(granted.join("theirs.txt"))?,
        "70000's\n"
    );
    let chmods = out
        .denied
        .iter()
        .filter(|d| d.name.starts_with("fchmodat"))
        .count();
    assert!(
        chmods >= 2,
        "the set-id chmods are recorded: {:?}",
        out.denied
    );
    assert!(
        out.enforcement
            .notes
            .iter()
            .any(|n| n.contains("mounted idmapped") && n.contains(&granted_arg)),
        "{:?}",
        out.enforcement.notes
    );
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    assert!(
        !mounts.contains(&granted_arg),
        "the host's mounts are unchanged"
    );

    // A granted directory holding the workspace is not mounted idmapped (the
    // workspace, the tools' own, would be seen as unmapped): the tool still writes
    // its workspace, and the note says why the directory stays unusable.
    // The workspace is the tools' own, as Knox's hosts make it.
    std::os::unix::fs::chown(&fx.workspace, Some(65_520), Some(65_520))?;
    let above = std::fs::canonicalize(fx.workspace.parent().ok_or("no parent")?)?;
    let policy = SandboxPolicy::for_families(&[Family::Terminal], &fx.workspace)?
        .grant("/usr/bin", &[Access::Read, Access::Execute])
        .grant(&above, &[Access::Read, Access::Write, Access::Create]);
    let out = sandbox
        .spawn(
            &policy,
            &["/usr/bin/sh", "-c", "echo kept > kept.txt && echo wrote"],
            &[],
            b"",
        )?
        .wait()?;
    assert!(out.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("wrote"));
    assert!(
        out.enforcement
            .notes
            .iter()
            .any(|n| n.contains("holds the tools' workspace") && n.contains("setfacl")),
        "{:?}",
        out.enforcement.notes
    );
    Ok(())
}

#[test]
fn run_as_refuses_root_ids() {
    let made = Sandbox::new(SandboxConfig {
        run_as: Some(RunAs { uid: 0, gid: 5 }),
        ..SandboxConfig::default()
    });
    if euid().is_ok_and(|u| u == 0) {
        assert!(matches!(made, Err(knox_sandbox::SandboxError::RunAs(_))));
    }
}

const CHILD_ENV: &str = "KNOX_TEST_RECLAIM_CHILD";

/// Not a test on its own: the child process of the tests below (which set
/// [`CHILD_ENV`] to a workspace). Makes a pool, starts a confined `sleep` in it from
/// a thread that then ends, prints the pool's directories and the tool's pid, then
/// waits to be SIGKILLed.
#[test]
fn reclaim_child_process() -> TestResult {
    let Some(workspace) = std::env::var_os(CHILD_ENV) else {
        return Ok(());
    };
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let policy = SandboxPolicy::for_families(&[Family::Offline], PathBuf::from(workspace))?
        .grant("/usr/bin/sleep", &[Access::Read, Access::Execute]);
    // The tool's parent-death signal must follow the process, not this thread.
    let tool = std::thread::scope(|s| {
        s.spawn(|| sandbox.spawn(&policy, &["/usr/bin/sleep", "600"], &[], b""))
            .join()
    })
    .map_err(|_| "the spawning thread panicked")??;
    let line = serde_json::json!({"dirs": sandbox.cgroup_pool_dirs(), "tool": tool.pid()});
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    // Until the parent kills this process (or closes the pipe).
    let _ = std::io::stdin().read(&mut [0_u8; 1]);
    drop(tool);
    Ok(())
}

/// Kills the test's own leftovers if an assertion failed before the reclaim.
struct Leftovers {
    tool: u32,
    dirs: Vec<PathBuf>,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", &self.tool.to_string()])
            .stderr(Stdio::null())
            .status();
        // Until the killed tool has left its cgroup (bounded: cleanup only).
        for _ in 0..200 {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.tool));
            let gone = stat.map_or(true, |s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            });
            if gone {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for dir in &self.dirs {
            if let Ok(slots) = std::fs::read_dir(dir) {
                for slot in slots.flatten() {
                    let _ = std::fs::remove_dir(slot.path());
                }
            }
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn cgroup_procs(dir: &std::path::Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for slot in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(slot.path().join("cgroup.procs")).unwrap_or_default();
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    pids
}

/// Whether `pid` still runs (not gone, not a zombie).
fn running(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
}

/// Starts the owner: this test binary, running [`reclaim_child_process`] in a child
/// process, which starts a confined tool and reports it. Returns the owner and what it
/// reported (removed when the test ends, however it ends).
fn owner(fx: &Fixture) -> Result<(std::process::Child, Leftovers), Box<dyn std::error::Error>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "suite::identity::reclaim_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &fx.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let report = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        // The harness prints the test's name first, on the same line.
        .find_map(|l| {
            let (_, json) = l.split_once('{')?;
            serde_json::from_str::<serde_json::Value>(&format!("{{{json}")).ok()
        })
        .ok_or("the child printed no report")?;
    let dirs: Vec<PathBuf> = serde_json::from_value(report.get("dirs").cloned().ok_or("no dirs")?)?;
    let tool = report.get("tool").and_then(serde_json::Value::as_u64);
    let tool = u32::try_from(tool.ok_or("no tool pid")?)?;
    Ok((child, Leftovers { tool, dirs }))
}

/// A confined tool is killed with its SIGKILLed owner — by the kernel, with no later
/// sandbox — and not when the owner's thread that started it ends.
#[test]
fn a_confined_tool_dies_with_its_sigkilled_owner_not_with_the_thread_that_started_it() -> TestResult
{
    crate::require_kernel!();
    let fx = Fixture::new()?;
    let (mut child, left) = owner(&fx)?;
    let tool = left.tool;
    // The thread that started it has ended; the tool runs on.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        running(tool),
        "the tool died with the thread that started it"
    );
    child.kill()?;
    child.wait()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while running(tool) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !running(tool),
        "the tool {tool} outlived its SIGKILLed owner"
    );
    Ok(())
}

#[test]
fn a_sigkilled_owners_cgroups_are_reclaimed_by_the_next_sandbox() -> TestResult {
    crate::require_kernel!();
    if Sandbox::new(SandboxConfig::default())?
        .cgroup_pool_dirs()
        .is_empty()
    {
        eprintln!("skipping: no cgroups here");
        return Ok(());
    }
    let fx = Fixture::new()?;
    let (mut child, left) = owner(&fx)?;
    let (tool, dirs) = (left.tool, left.dirs.clone());
    assert!(!dirs.is_empty());
    assert!(dirs.iter().all(|d| d.exists()), "{dirs:?}");
    let pids_dir = dirs.first().ok_or("no pool directory")?;
    assert!(cgroup_procs(pids_dir).contains(&tool), "{dirs:?}");
    // SIGKILL: the owner cannot remove its pool (its tool is killed with it; what
    // a tool forked would live on in the pool).
    child.kill()?;
    child.wait()?;
    let next = Sandbox::new(SandboxConfig::default())?;
    // (Another test's sandbox may have reclaimed them first: either way, gone.)
    for dir in &dirs {
        assert!(
            !dir.exists(),
            "{} leaked; reclaimed: {:?}",
            dir.display(),
            next.reclaimed_cgroups()
        );
    }
    assert!(!running(tool), "the leaked tool {tool} still runs");
    Ok(())
}
