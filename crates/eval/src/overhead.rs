//! The paper's overhead breakdown of one bundle (§V "Efficiency"), measured here:
//!
//! - AEG: time inside the monitor (node construction, guard checks), minus measurement;
//! - measurement: every node's `m_i`, the hash chain and the Merkle structure root,
//!   recomputed over the finished graph;
//! - HW: producing the platform evidence that binds the bundle's chain head to the
//!   signing key (one report per bundle, as the paper's quote per bundle);
//! - sign: the in-TEE Ed25519 signature over the summary;
//! - APM: planning, guard derivation and the APM's hash;
//! - baseline: the executor's own time (the LLM's, when the executor is a model).
//!
//! The verifier's cost (integrity only, and in full) is measured on the way.

use std::hint::black_box;
use std::time::{Duration, Instant};

use knox_attest::PlatformBackend;
use knox_attest::platform::KeyBinding;
use knox_monitor::run::{RunOutcome, Runtime};
use knox_policy::ToolkitManifest;
use knox_types::aeg::{chain_start, chain_step, leaf_record};
use knox_types::bundle::Bundle;
use knox_types::merkle;
use serde::Serialize;

use crate::EvalError;

/// Where one bundle's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BundleCost {
    /// Proposals.
    pub actions: u64,
    /// Nodes.
    pub nodes: u64,
    /// Inside the monitor, minus measurement.
    pub aeg: Duration,
    /// Measurements, chain and structure root.
    pub measure: Duration,
    /// Platform evidence for the bundle.
    pub hw: Duration,
    /// The summary's signature.
    pub sign: Duration,
    /// Planning and APM derivation.
    pub apm: Duration,
    /// Verifier: measurements and chain only.
    pub integrity: Duration,
    /// Verifier: every step.
    pub verify: Duration,
    /// Time inside the executor under test.
    pub executor: Duration,
}

/// Binds the bundle's chain head to the key with fresh evidence from `backend` (the
/// bundle's `refresh` report, which the re-signed summary names) and returns how long
/// producing it took.
pub fn attest(
    rt: &Runtime,
    backend: &dyn PlatformBackend,
    bundle: &mut Bundle,
) -> Result<Duration, EvalError> {
    let t = Instant::now();
    let evidence = backend.collect(&KeyBinding {
        public_key: rt.public_bytes(),
        nonce: rt.platform.nonce.0.clone(),
        chain_head: Some(bundle.summary.chain_head.0),
    })?;
    let took = t.elapsed();
    // The summary is signed again, naming the report, so every byte of it is bound.
    knox_monitor::run::bind_refresh(rt, bundle, evidence)?;
    Ok(took)
}

/// Measures `o`'s breakdown and verifies its bundle; the verifier's report comes back
/// with the cost.
pub fn measure(
    manifest: &ToolkitManifest,
    o: &RunOutcome,
    opts: knox_verify::Options<'_>,
) -> Result<(BundleCost, knox_verify::Report), EvalError> {
    let b = &o.bundle;
    let t = Instant::now();
    let mut c = chain_start();
    let mut leaves = Vec::with_capacity(b.nodes.len());
    for n in &b.nodes {
        let m = n.compute_measurement();
        c = chain_step(&c, n.seq, &m);
        leaves.push(merkle::leaf_hash(&leaf_record(n.seq, n.parent, n.kind, &m)));
    }
    black_box((c, merkle::root(&leaves)));
    let measure = t.elapsed();
    let statement = b.summary.to_statement()?;
    // Signing is timed with a key of the same kind: the run's own signs nothing outside
    // its monitor.
    let key = knox_attest::TeeKey::generate().map_err(knox_monitor::run::RunError::from)?;
    let t = Instant::now();
    black_box(knox_attest::dsse::sign(&key, &statement)?);
    let sign = t.elapsed();
    let t = Instant::now();
    let _ = black_box(knox_verify::replay::chain(&b.nodes).map(|x| x.0));
    let integrity = t.elapsed();
    let t = Instant::now();
    let report = knox_verify::verify_bundle(b, manifest, opts);
    let verify = t.elapsed();
    Ok((
        BundleCost {
            actions: o.stats.proposals,
            nodes: b.nodes.len() as u64,
            aeg: o.stats.monitor_time.saturating_sub(measure),
            measure,
            hw: Duration::ZERO,
            sign,
            apm: o.timings.apm,
            integrity,
            verify,
            executor: Duration::ZERO,
        },
        report,
    ))
}

/// Sums over the bundles of one cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostSum {
    /// Bundles.
    pub bundles: u64,
    /// Sum of their costs.
    pub total: BundleCost,
}

impl CostSum {
    /// Adds one bundle.
    pub fn add(&mut self, c: &BundleCost) {
        self.bundles += 1;
        sum_into(&mut self.total, c);
    }

    /// Adds another sum.
    pub fn merge(&mut self, o: &Self) {
        self.bundles += o.bundles;
        sum_into(&mut self.total, &o.total);
    }

    /// Per-bundle means, in milliseconds.
    pub fn means(&self) -> CostMeans {
        let n = self.bundles.max(1) as f64;
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n;
        let t = &self.total;
        CostMeans {
            bundles: self.bundles,
            actions: t.actions as f64 / n,
            nodes: t.nodes as f64 / n,
            aeg_ms: ms(t.aeg),
            measure_ms: ms(t.measure),
            hw_ms: ms(t.hw),
            sign_ms: ms(t.sign),
            total_ms: ms(t.aeg + t.measure + t.hw + t.sign),
            apm_ms: ms(t.apm),
            executor_ms: ms(t.executor),
            integrity_mnodes_s: rate(t.nodes, t.integrity),
            verify_mnodes_s: rate(t.nodes, t.verify),
        }
    }
}

fn sum_into(t: &mut BundleCost, c: &BundleCost) {
    t.actions += c.actions;
    t.nodes += c.nodes;
    t.aeg += c.aeg;
    t.measure += c.measure;
    t.hw += c.hw;
    t.sign += c.sign;
    t.apm += c.apm;
    t.integrity += c.integrity;
    t.verify += c.verify;
    t.executor += c.executor;
}

fn rate(nodes: u64, d: Duration) -> f64 {
    nodes as f64 / d.as_secs_f64().max(1e-9) / 1e6
}

/// Per-bundle means of one cell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CostMeans {
    /// Bundles measured.
    pub bundles: u64,
    /// Proposals per bundle.
    pub actions: f64,
    /// Nodes per bundle.
    pub nodes: f64,
    /// AEG + guard checks, ms.
    pub aeg_ms: f64,
    /// Measurement, ms.
    pub measure_ms: f64,
    /// Hardware evidence, ms.
    pub hw_ms: f64,
    /// Signature, ms.
    pub sign_ms: f64,
    /// AEG + measurement + HW + sign, ms.
    pub total_ms: f64,
    /// APM derivation, ms.
    pub apm_ms: f64,
    /// Inside the executor, ms (the LLM's time for a model executor).
    pub executor_ms: f64,
    /// Verifier, measurements and chain, million nodes per second.
    pub integrity_mnodes_s: f64,
    /// Verifier, every step, million nodes per second.
    pub verify_mnodes_s: f64,
}
