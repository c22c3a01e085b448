//! Per-call cost of a confined tool: a reused worker against a fresh spawn per call.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use knox_sandbox::{Access, Family, Sandbox, SandboxConfig, SandboxPolicy};

const PROBE: &str = env!("CARGO_BIN_EXE_knox-probe");

fn per_call(c: &mut Criterion) {
    let Ok(workspace) = tempfile::tempdir() else {
        return;
    };
    let policy = SandboxPolicy::for_families(&[Family::Offline], workspace.path())
        .map(|p| p.grant(PROBE, &[Access::Read, Access::Execute]));
    let (Ok(sandbox), Ok(policy)) = (Sandbox::new(SandboxConfig::default()), policy) else {
        eprintln!("sandbox unavailable on this kernel: nothing measured");
        return;
    };
    let Ok(prepared) = sandbox.prepare(&policy) else {
        return;
    };
    let mut group = c.benchmark_group("tool_call");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    // One call = run the probe's `true` case confined and get its answer back.
    group.bench_function("spawn_per_call", |b| {
        b.iter(|| {
            sandbox
                .spawn_prepared(&prepared, &[PROBE, "true"], &[], b"")
                .and_then(|child| child.wait())
        })
    });
    let Ok(mut worker) = sandbox.spawn_worker(&prepared, &[PROBE, "worker"], &[]) else {
        return;
    };
    let request = br#"["true"]"#;
    group.bench_function("worker_reuse", |b| {
        b.iter(|| worker.call(request, Duration::from_secs(10)))
    });
    let denied = br#"["bpf"]"#;
    group.bench_function("worker_reuse_with_a_denial", |b| {
        b.iter(|| worker.call(denied, Duration::from_secs(10)))
    });
    group.finish();
    let _ = worker.shutdown();
}

criterion_group!(benches, per_call);
criterion_main!(benches);
