//! Spawn cost: plain `/usr/bin/true` against the same program under every layer.

use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use knox_sandbox::{Access, CgroupMode, Family, Sandbox, SandboxConfig, SandboxPolicy};

const TRUE: &str = "/usr/bin/true";

fn policy(workspace: &std::path::Path) -> Option<SandboxPolicy> {
    let policy = SandboxPolicy::for_families(&[Family::Offline], workspace).ok()?;
    Some(policy.grant(TRUE, &[Access::Read, Access::Execute]))
}

fn spawn(c: &mut Criterion) {
    let mut group = c.benchmark_group("spawn_true");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("plain", |b| {
        b.iter(|| Command::new(TRUE).status().map(|s| s.success()))
    });
    let Ok(workspace) = tempfile::tempdir() else {
        return;
    };
    let (Ok(sandbox), Some(policy)) = (
        Sandbox::new(SandboxConfig::default()),
        policy(workspace.path()),
    ) else {
        eprintln!("sandbox unavailable on this kernel: only the plain spawn was measured");
        return;
    };
    let Ok(prepared) = sandbox.prepare(&policy) else {
        return;
    };
    group.bench_function("confined_prepared", |b| {
        b.iter(|| {
            sandbox
                .spawn_prepared(&prepared, &[TRUE], &[], b"")
                .and_then(|c| c.wait())
        })
    });
    // The broker's setting: the tool runs as an unprivileged uid (root callers).
    let config = SandboxConfig {
        run_as: Some(knox_sandbox::RunAs::KNOX),
        ..SandboxConfig::default()
    };
    if let Ok(run_as) = Sandbox::new(config) {
        group.bench_function("confined_prepared_run_as", |b| {
            b.iter(|| {
                run_as
                    .spawn_prepared(&prepared, &[TRUE], &[], b"")
                    .and_then(|c| c.wait())
            })
        });
    }
    let config = SandboxConfig {
        cgroups: CgroupMode::DangerousDisabled,
        ..SandboxConfig::default()
    };
    if let Ok(no_cgroups) = Sandbox::new(config) {
        group.bench_function("confined_prepared_dangerous_no_cgroups", |b| {
            b.iter(|| {
                no_cgroups
                    .spawn_prepared(&prepared, &[TRUE], &[], b"")
                    .and_then(|c| c.wait())
            })
        });
    }
    group.bench_function("confined_with_prepare", |b| {
        b.iter(|| {
            sandbox
                .spawn(&policy, &[TRUE], &[], b"")
                .and_then(|c| c.wait())
        })
    });
    group.finish();
    // Compiling the BPF program of the largest profile (part of `prepare`).
    let mut filter = c.benchmark_group("filter");
    let terminal = SandboxPolicy::for_families(&[Family::Terminal], workspace.path())
        .map(|p| p.syscalls)
        .unwrap_or_default();
    if let Ok(program) =
        knox_sandbox::filter::program(&terminal, knox_sandbox::filter::Fallbacks::default())
    {
        eprintln!(
            "terminal profile: {} calls, {} instructions",
            terminal.len(),
            program.instructions().len()
        );
    }
    filter.bench_function("compile_terminal", |b| {
        b.iter(|| {
            knox_sandbox::filter::program(&terminal, knox_sandbox::filter::Fallbacks::default())
        })
    });
    filter.finish();
}

criterion_group!(benches, spawn);
criterion_main!(benches);
