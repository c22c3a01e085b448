//! `knox bench`: the paper's overhead breakdown, measured on this machine, per workload.

use std::time::Duration;

use anyhow::Result;
use std::sync::Arc;

use knox_dataset::Dataset;
use knox_harness::{PAPER_WORKLOADS, Workload};
use knox_monitor::run::Runtime;
use knox_policy::ToolkitManifest;
use knox_verify::Outcome;

use super::session::{self, ExecutorKind, Suite, SuiteRun};

/// Arguments of `knox bench`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!("  0   measured (a bundle that does not verify complete is an internal error, 70)"))]
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
    /// Print one JSON object per workload (an array, times in ms and µs as the columns
    /// say) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Sums over a workload's bundles.
#[derive(Default)]
struct Acc {
    bundles: u32,
    actions: u64,
    nodes: u64,
    /// Inside the monitor, minus measurement.
    aeg: Duration,
    /// Node measurements, chain, structure root.
    measure: Duration,
    /// Planning and guard derivation.
    apm: Duration,
    /// The summary signature.
    sign: Duration,
    /// Verifier: measurements and chain only.
    integrity: Duration,
    /// Verifier: everything.
    verify: Duration,
    /// Verifier: the two signature checks alone.
    signatures: Duration,
    /// Bytes stored: each bundle's file as `knox run` writes it.
    stored: u64,
    /// The same, gzipped (level 6).
    gzipped: u64,
    /// Bytes stored as `knox run --evidence compact` writes them (`knox-compact/v2`).
    compact: u64,
    /// Bytes stored as `knox run --evidence store` writes them: every bundle's file and
    /// each shared part once.
    store: u64,
    /// The shared parts counted so far.
    parts: std::collections::HashSet<knox_types::digest::Digest>,
}

impl Acc {
    fn per_bundle_ms(&self, d: Duration) -> f64 {
        d.as_secs_f64() * 1e3 / f64::from(self.bundles.max(1))
    }

    fn rate(&self, d: Duration) -> f64 {
        self.nodes as f64 / d.as_secs_f64().max(1e-9) / 1e6
    }

    fn per_action(&self, bytes: u64) -> f64 {
        bytes as f64 / self.actions.max(1) as f64
    }
}

/// The length of `bytes` gzipped at the default level (6).
fn gzipped_len(bytes: &[u8]) -> std::io::Result<u64> {
    use std::io::Write as _;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(bytes)?;
    Ok(gz.finish()?.len() as u64)
}

/// Runs the benchmark and prints one row per workload with the paper's figures beside.
pub fn run(args: &BenchArgs) -> Result<i32> {
    let manifest = session::embedded_manifest()?;
    let data = session::embedded_data()?;
    let rt = Arc::new(session::runtime_over(
        &knox_attest::simulated::Simulated,
        b"knox-bench",
        manifest.clone(),
    )?);
    let workloads: Vec<Workload> = match args.workload {
        Some(w) => vec![w],
        None => PAPER_WORKLOADS
            .iter()
            .filter_map(|w| w.parse().ok())
            .collect(),
    };
    if args.json {
        let mut rows = Vec::new();
        for w in workloads {
            let a = measure(&rt, &data, &manifest, w, args)?;
            rows.push(serde_json::json!({
                "workload": w.spec(),
                "executor": args.executor.name(),
                "bundles": a.bundles,
                "actions_per_bundle": a.actions as f64 / f64::from(a.bundles.max(1)),
                "aeg_guards_ms": a.per_bundle_ms(a.aeg),
                "measurement_ms": a.per_bundle_ms(a.measure),
                "monitor_us_per_action": (a.aeg + a.measure).as_secs_f64() * 1e6 / a.actions.max(1) as f64,
                "apm_ms": a.per_bundle_ms(a.apm),
                "sign_us": a.per_bundle_ms(a.sign) * 1e3,
                "integrity_mnodes_per_s": a.rate(a.integrity),
                "full_verify_mnodes_per_s": a.rate(a.verify),
                "verify_signatures_us": a.per_bundle_ms(a.signatures) * 1e3,
                "signatures_bound_mnodes_per_s": a.rate(a.signatures),
                "stored_bytes_per_action": a.per_action(a.stored),
                "gzip_bytes_per_action": a.per_action(a.gzipped),
                "compact_bytes_per_action": a.per_action(a.compact),
                "store_bytes_per_action": a.per_action(a.store),
                "platform": rt.platform.mode,
                "platform_ms_at_startup": rt.platform_time.as_secs_f64() * 1e3,
            }));
        }
        knox_command::outln!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(0);
    }
    knox_command::outln!(
        "Knox overhead per bundle: {} executor, {} bundles per workload, one process.",
        args.executor.name(),
        args.bundles
    );
    knox_command::outln!(
        "Hardware evidence: one {} report at start-up ({:.3} ms) binds the signing key, so 0 per bundle;",
        rt.platform.mode,
        rt.platform_time.as_secs_f64() * 1e3
    );
    knox_command::outln!("the paper's TDX quote costs 3.2–4.7 ms per bundle.\n");
    knox_command::outln!(
        "| workload | actions/bundle | AEG+guards ms | measurement ms | monitor µs/action | APM ms | sign µs | integrity Mnodes/s | full verify Mnodes/s | verify sigs µs | sigs bound Mnodes/s | stored B/action | gzip B/action | compact B/action | store B/action | paper AEG ms | paper meas. ms | paper sign ms |"
    );
    knox_command::outln!(
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for w in workloads {
        let a = measure(&rt, &data, &manifest, w, args)?;
        let per_action = (a.aeg + a.measure).as_secs_f64() * 1e6 / a.actions.max(1) as f64;
        knox_command::outln!(
            "| {w} | {:.1} | {:.3} | {:.3} | {:.1} | {:.3} | {:.1} | {:.2} | {:.2} | {:.1} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | 13–31 | 3.0–6.3 | ~0.1 |",
            a.actions as f64 / f64::from(a.bundles.max(1)),
            a.per_bundle_ms(a.aeg),
            a.per_bundle_ms(a.measure),
            per_action,
            a.per_bundle_ms(a.apm),
            a.per_bundle_ms(a.sign) * 1e3,
            a.rate(a.integrity),
            a.rate(a.verify),
            a.per_bundle_ms(a.signatures) * 1e3,
            a.rate(a.signatures),
            a.per_action(a.stored),
            a.per_action(a.gzipped),
            a.per_action(a.compact),
            a.per_action(a.store),
        );
    }
    knox_command::outln!(
        "\nAEG+guards: time inside the monitor (node construction, guard checks) minus measurement."
    );
    knox_command::outln!(
        "measurement: every node's m_i, the hash chain and the Merkle structure root."
    );
    knox_command::outln!(
        "monitor µs/action: both, per proposal. APM: planning and guard derivation. sign: the summary's Ed25519 signature."
    );
    knox_command::outln!(
        "integrity: the verifier recomputing measurements and chain; full verify: every step, the policy replay included."
    );
    knox_command::outln!(
        "verify sigs: the bundle's two DSSE signature checks (summary, APM attestation; strict Ed25519) alone, per bundle;\nsigs bound: the nodes per second they alone allow, which no full verify of these bundles on this core can pass."
    );
    knox_command::outln!(
        "stored: the bundle files `knox run` writes (JSON without whitespace), per proposal; gzip: the same files gzipped (level 6);\ncompact: the files `knox run --evidence compact` writes (knox-compact/v2, docs/evidence-format.md §9);\nstore: what `knox run --evidence store` writes (§9.5): each bundle's file, and each part the bundles share once."
    );
    knox_command::outln!("Paper figures: its trajectory guard, per bundle, Python implementation.");
    Ok(0)
}

/// How long the two signature checks every full verify makes of `b` take alone: the
/// DSSE envelopes of the summary and of the APM attestation, each decoded and checked
/// with strict Ed25519 (a bundle that reaches here verified complete, so both pass).
fn signature_checks(b: &knox_types::bundle::Bundle) -> Duration {
    use knox_types::dsse::{APM_PREDICATE, SUMMARY_PREDICATE};
    let t = std::time::Instant::now();
    let _ = std::hint::black_box((
        knox_attest::dsse::verify(&b.envelope, &b.key, SUMMARY_PREDICATE).is_ok(),
        knox_attest::dsse::verify(&b.apm_attestation.envelope, &b.key, APM_PREDICATE).is_ok(),
    ));
    t.elapsed()
}

fn measure(
    rt: &Arc<Runtime>,
    data: &Dataset,
    manifest: &ToolkitManifest,
    w: Workload,
    args: &BenchArgs,
) -> Result<Acc> {
    let mut acc = Acc::default();
    let run = SuiteRun::new(
        Suite::Injecagent,
        data,
        w,
        args.bundles * w.0.tasks as usize,
    );
    let sess = session::build(
        run.session(args.executor)?
            .platform(knox_attest::simulated::Simulated)
            .runtime(Arc::clone(rt)),
    )?;
    session::run_suite(&sess, &run, |o| {
        let (c, report) =
            crate::overhead::measure(manifest, o, knox_verify::Options::DANGEROUS_SIMULATED)?;
        if report.outcome != Outcome::Complete {
            return Err(knox_command::error::fail(
                knox_command::error::Kind::Software,
                format!(
                    "bundle {} did not verify: {:?}",
                    o.bundle.run_id, report.outcome
                ),
            ));
        }
        let stored = knox_engine::bundle_bytes(&o.bundle)?;
        acc.stored += stored.len() as u64;
        acc.gzipped += gzipped_len(&stored)?;
        acc.compact +=
            knox_engine::encoded_bundle(&o.bundle, knox_engine::Encoding::Compact)?.len() as u64;
        let (file, parts) = knox_engine::stored_bundle(&o.bundle, knox_engine::Encoding::Store)?;
        acc.store += file.len() as u64;
        for part in parts {
            if acc.parts.insert(part.digest) {
                acc.store += part.bytes.len() as u64;
            }
        }
        acc.bundles += 1;
        acc.actions += c.actions;
        acc.nodes += c.nodes;
        acc.aeg += c.aeg;
        acc.measure += c.measure;
        acc.apm += c.apm;
        acc.sign += c.sign;
        acc.integrity += c.integrity;
        acc.verify += c.verify;
        acc.signatures += signature_checks(&o.bundle);
        Ok(())
    })?;
    Ok(acc)
}
