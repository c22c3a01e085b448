//! Median wall time of N plain and N confined spawns of `/usr/bin/true`, interleaved (a profiling aid).

use std::process::Command;
use std::time::{Duration, Instant};

use knox_sandbox::{Access, CgroupMode, Family, Sandbox, SandboxConfig, SandboxPolicy};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir()?;
    let policy = SandboxPolicy::for_families(&[Family::Offline], dir.path())?
        .grant("/usr/bin/true", &[Access::Read, Access::Execute]);
    // `spawn_loop N dangerous-no-cgroups` measures what the cgroup layer costs.
    let cgroups = match std::env::args().nth(2).as_deref() {
        Some("dangerous-no-cgroups") => CgroupMode::DangerousDisabled,
        _ => CgroupMode::Auto,
    };
    let sandbox = Sandbox::new(SandboxConfig {
        cgroups,
        ..SandboxConfig::default()
    })?;
    let prepared = sandbox.prepare(&policy)?;
    let (mut plain, mut confined) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let t = Instant::now();
        Command::new("/usr/bin/true").status()?;
        plain.push(t.elapsed());
        let t = Instant::now();
        let outcome = sandbox
            .spawn_prepared(&prepared, &["/usr/bin/true"], &[], b"")?
            .wait()?;
        confined.push(t.elapsed());
        if !outcome.success() {
            return Err(format!("{outcome:?}").into());
        }
    }
    let (p, c) = (median(plain), median(confined));
    println!(
        "plain {p:?}  confined {c:?}  added {:?}",
        c.saturating_sub(p)
    );
    Ok(())
}
