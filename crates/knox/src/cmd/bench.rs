//! `knox bench`: the paper's overhead breakdown, measured on this machine, per workload.

use std::time::{Duration, Instant};

use anyhow::Result;
use knox_monitor::workload::{PAPER_WORKLOADS, Workload};
use knox_types::aeg::{chain_start, chain_step};
use knox_types::merkle;
use knox_verify::Options;

use crate::session::{self, ExecutorKind, WorkloadRun};

/// Arguments of `knox bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Bundles per workload.
    #[arg(long, default_value_t = 50)]
    pub bundles: usize,
    /// Only this workload (default: the paper's 13).
    #[arg(long, value_parser = clap::value_parser!(Workload))]
    pub workload: Option<Workload>,
    /// Executor.
    #[arg(long, value_enum, default_value_t = ExecutorKind::Injected)]
    pub executor: ExecutorKind,
}

#[derive(Default)]
struct Acc {
    bundles: u32,
    actions: u64,
    nodes: u64,
    aeg: Duration,
    measure: Duration,
    apm: Duration,
    sign: Duration,
    verify: Duration,
}

fn ms(d: Duration, n: u32) -> f64 {
    d.as_secs_f64() * 1e3 / f64::from(n.max(1))
}

/// Runs the benchmark and prints one row per workload with the paper's figures beside.
pub fn run(args: &BenchArgs) -> Result<i32> {
    let rt = session::embedded_runtime(b"knox-bench")?;
    let manifest = session::embedded_manifest()?;
    let workloads: Vec<Workload> = match args.workload {
        Some(w) => vec![w],
        None => PAPER_WORKLOADS
            .iter()
            .filter_map(|w| w.parse().ok())
            .collect(),
    };
    println!(
        "Knox overhead per bundle ({} executor, {} bundles per workload, release build, one process)",
        session::executor_name(args.executor),
        args.bundles
    );
    println!(
        "hardware evidence: {} report once at start-up, {:.3} ms, bound to the signing key (0 per bundle);",
        rt.platform.mode,
        rt.platform_time.as_secs_f64() * 1e3
    );
    println!("the paper's TDX quote costs 3.2–4.7 ms per bundle.\n");
    println!(
        "| workload | actions/bundle | AEG+guards ms | per action µs | measurement ms | APM ms | sign µs | verify Mnodes/s | paper AEG ms | paper meas. ms | paper sign ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for w in workloads {
        let acc = measure(&rt, &manifest, w, args)?;
        let n = acc.bundles;
        let per_action_us = acc.aeg.as_secs_f64() * 1e6 / acc.actions.max(1) as f64;
        let verify_rate = acc.nodes as f64 / acc.verify.as_secs_f64().max(1e-9) / 1e6;
        println!(
            "| {w} | {:.1} | {:.4} | {:.2} | {:.4} | {:.4} | {:.1} | {:.2} | 13–31 | 3.0–6.3 | ~0.1 |",
            acc.actions as f64 / f64::from(n.max(1)),
            ms(acc.aeg, n),
            per_action_us,
            ms(acc.measure, n),
            ms(acc.apm, n),
            ms(acc.sign, n) * 1e3,
            verify_rate,
        );
    }
    println!(
        "\nAEG+guards: time inside the monitor (node construction, guard checks, measurement), minus measurement;"
    );
    println!(
        "measurement: recomputing every node's m_i, the chain and the structure root; paper figures: trajectory guard, Python."
    );
    Ok(0)
}

fn measure(
    rt: &knox_monitor::run::Runtime,
    manifest: &knox_policy::ToolkitManifest,
    w: Workload,
    args: &BenchArgs,
) -> Result<Acc> {
    let mut acc = Acc::default();
    let run = WorkloadRun::new(w, args.executor, args.bundles * w.0.tasks as usize);
    session::run_workload(rt, &run, |o| {
        let b = &o.bundle;
        let t = Instant::now();
        let mut c = chain_start();
        let mut leaves = Vec::with_capacity(b.nodes.len());
        for n in &b.nodes {
            let m = n.compute_measurement();
            c = chain_step(&c, n.seq, &m);
            leaves.push(merkle::leaf_hash(&knox_types::aeg::leaf_record(
                n.seq, n.parent, n.kind, &m,
            )));
        }
        let root = merkle::root(&leaves);
        let measure = t.elapsed();
        std::hint::black_box((c, root));
        let t = Instant::now();
        let report = knox_verify::verify_bundle(
            b,
            manifest,
            Options {
                dangerous_allow_simulated: true,
            },
        );
        acc.verify += t.elapsed();
        anyhow::ensure!(
            report.outcome == knox_verify::Outcome::Complete,
            "bundle {} did not verify: {:?}",
            b.run_id,
            report.outcome
        );
        acc.bundles += 1;
        acc.actions += o.stats.proposals;
        acc.nodes += b.nodes.len() as u64;
        acc.aeg += o.stats.monitor_time.saturating_sub(measure);
        acc.measure += measure;
        acc.apm += o.timings.apm;
        acc.sign += o.timings.sign;
        Ok(())
    })?;
    Ok(acc)
}
