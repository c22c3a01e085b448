//! Criterion benchmarks: offline verification of a genuine TDX quote and of genuine H100 evidence, from the vendored vectors (`data/attestation`).
#![expect(
    clippy::panic,
    reason = "a benchmark without its vectors has nothing to measure"
)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use knox_hw::nvidia::{self, rim};
use knox_hw::tdx::{self, Collateral};

fn vector(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/attestation")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn hex_vector(rel: &str) -> Vec<u8> {
    let text: String = String::from_utf8_lossy(&vector(rel))
        .split_whitespace()
        .collect();
    hex::decode(text.trim_start_matches("0x")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn bench_tdx(c: &mut Criterion) {
    let quote = vector("intel-tdx/dcap-qvl/tdx_quote");
    let collateral = Collateral::from_json(&vector("intel-tdx/dcap-qvl/tdx_quote_collateral.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    // 2025-06-19T11:32:27Z, inside the collateral window.
    let at = UNIX_EPOCH + Duration::from_secs(1_750_332_747);
    c.bench_function("tdx_verify_genuine_quote", |b| {
        b.iter(|| tdx::verify(black_box(&quote), &collateral, at).is_ok());
    });
}

fn bench_gpu(c: &mut Criterion) {
    let evidence = hex_vector("nvidia-gpu/nvtrust/hopperAttestationReport.txt");
    let chain = vector("nvidia-gpu/nvtrust/hopperCertChain.txt");
    c.bench_function("gpu_verify_genuine_h100_evidence", |b| {
        b.iter(|| nvidia::verify(black_box(&evidence), &chain, None).is_ok());
    });
    let driver_rim = vector("nvidia-gpu/attestation-sdk/NV_GPU_DRIVER_GH100_550.144.03.xml");
    let at = UNIX_EPOCH + Duration::from_secs(1_748_736_000);
    c.bench_function("rim_verify_genuine_driver_rim", |b| {
        b.iter(|| rim::verify(black_box(&driver_rim), at).is_ok());
    });
}

criterion_group!(benches, bench_tdx, bench_gpu);
criterion_main!(benches);
