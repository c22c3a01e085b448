//! `knox corpus syscalls`: the unmediated-attack corpus run three ways — unconfined
//! (what succeeds), monitor only, monitor + kernel — with every kernel denial recorded in
//! an evidence bundle that must verify.

use std::path::{Path, PathBuf};

use anyhow::Result;
use knox_attacks::{self as corpus, CaseResult, Fixture, Mode};
use knox_monitor::aeg::AegBuilder;
use knox_monitor::apm::{self, Regulations};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::monitor::{Monitor, MonitorConfig, Verdict};
use knox_monitor::planner::{Plan, Prompt};
use knox_monitor::tools::ToolResult;
use knox_sandbox::{Sandbox, SandboxConfig};
use knox_types::apm::{ExpectedCall, StopPolicy, Topology, TopologyKind};
use knox_types::bundle::ModelInfo;
use serde_json::json;

use crate::error::{Kind, KindExt as _, fail};
use crate::session;

/// `knox corpus …`.
#[derive(Debug, clap::Subcommand)]
pub enum CorpusCommand {
    /// Run every unmediated system-call attack unconfined, under the monitor only, and
    /// under the monitor with the kernel sandbox (as root: the unconfined baseline runs
    /// inside a harness of its own: cgroup caps, rlimits, private mount/UTS/IPC
    /// namespaces; every target is a file, port or process the fixture created).
    Syscalls(CorpusArgs),
}

/// Arguments of `knox corpus syscalls`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   the kernel layer prevented every attack and the evidence verified complete\
   \n  1   an attack succeeded under the kernel layer, or the evidence did not verify\
   \n  (69: the kernel sandbox or the probe is unavailable here)"
))]
pub struct CorpusArgs {
    /// Print JSON (per case and summary).
    #[arg(long)]
    pub json: bool,
    /// The probe binary (default: `knox-probe` beside this binary, built there with
    /// cargo first when this binary runs from a source tree's target directory).
    #[arg(value_parser = crate::cmd::path, long)]
    pub probe: Option<PathBuf>,
    /// Also write the evidence bundle of the monitor + kernel run here.
    #[arg(value_parser = crate::cmd::path, long)]
    pub out: Option<PathBuf>,
    /// Write into a non-empty `--out` (files of the same name are replaced; the folder
    /// is still locked against a concurrent run).
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Only cases whose id contains this.
    #[arg(long)]
    pub only: Option<String>,
}

fn kernel_events(r: &CaseResult) -> Vec<knox_types::payload::KernelEvent> {
    let mut ev: Vec<_> = r
        .denied
        .iter()
        .map(knox_broker::host::syscall_event)
        .collect();
    ev.extend(
        r.limit_hits
            .iter()
            .map(|h| knox_broker::host::limit_event(knox_broker::host::limit_name(h))),
    );
    if let Some(sig) = r.signal {
        ev.push(knox_broker::host::limit_event(format!(
            "killed by signal {sig}"
        )));
    }
    ev
}

/// Runs the corpus; exit 0 when the kernel layer prevented every attack and the
/// evidence verified, 1 otherwise.
pub fn run(cmd: &CorpusCommand) -> Result<i32> {
    let CorpusCommand::Syscalls(args) = cmd;
    let _out = args
        .out
        .as_deref()
        .map(|d| crate::cmd::out_dir(d, args.force))
        .transpose()?;
    let probe = locate_probe(args.probe.as_deref())?;
    let sandbox = Sandbox::new(SandboxConfig::default())
        .kind_context(Kind::Unavailable, || "starting the kernel sandbox".into())?;
    let fixture = Fixture::new(&probe)
        .kind_context(Kind::Unavailable, || "creating the corpus fixture".into())?;
    let cases: Vec<_> = corpus::cases()
        .into_iter()
        .filter(|c| args.only.as_ref().is_none_or(|o| c.id.contains(o.as_str())))
        .collect();
    // The monitor's view: each case is a planned TerminalExecute call running the probe.
    let rt = session::embedded_runtime(b"knox-corpus")?;
    let calls: Vec<ExpectedCall> = cases
        .iter()
        .map(|c| {
            let params = json!({"command": format!("knox-probe {}", c.id)})
                .as_object()
                .cloned()
                .unwrap_or_default();
            ExpectedCall::exact(0, "TerminalExecute", params)
        })
        .collect();
    let raw: Vec<Vec<u8>> = calls
        .iter()
        .map(|e| {
            serde_json::to_vec(&json!({"tool": e.tool, "params": e.params})).unwrap_or_default()
        })
        .collect();
    let prompt = Prompt {
        tasks: vec!["run the system-call corpus".into()],
    };
    let topo = Topology {
        kind: TopologyKind::StSa,
        tasks: 1,
        agents: 1,
    };
    let stop = StopPolicy::default();
    let apm = apm::from_plan(
        &prompt,
        &rt.manifest,
        &Regulations::default(),
        &stop,
        Plan { tasks: vec![calls] },
        topo,
    )?;
    let apm_hash = apm.hash()?;
    let att = apm::attest(&apm, apm_hash, &rt.key)?;
    let models = vec![ModelInfo {
        role: "executor".into(),
        name: "corpus".into(),
        weights_hash: None,
        declared: false,
    }];
    let monitor = Monitor::start(
        MonitorConfig {
            apm: &apm,
            apm_hash,
            run_id: "corpus-syscalls",
            manifest: &rt.manifest,
            key: &rt.key,
            models: &models,
            signal: StopSignal::new(),
            aeg: AegBuilder::default(),
            grants: false,
        },
        knox_regulation::Regulator::new(&apm.guards.regulation, None)?,
        None,
    );
    let mut rows = Vec::new();
    let (
        mut base_ok,
        mut monitor_prevented,
        mut kernel_prevented,
        mut recorded,
        mut kernel_events_total,
    ) = (0, 0, 0, 0, 0);
    let mut stand_ins = Vec::new();
    let progress = crate::cmd::progress_bar(
        cases.len() as u64,
        "corpus: each case unconfined, under the monitor, under monitor + kernel",
    );
    for (case, proposal) in cases.iter().zip(&raw) {
        progress.inc(1);
        let baseline = corpus::run_case(&fixture, &sandbox, case, Mode::DangerousUnconfined)?;
        let confined = corpus::run_case(&fixture, &sandbox, case, Mode::Confined)?;
        // Monitor only: the monitor sees a planned, authorized tool call and allows it;
        // what the tool then does unconfined is the baseline's outcome.
        let verdict = monitor.mediate("agent-0", proposal);
        let monitor_blocked = !matches!(verdict, Verdict::Allow(_));
        let events = kernel_events(&confined);
        kernel_events_total += events.len();
        if let Verdict::Allow(ticket) = verdict {
            let output = json!({"attack_succeeded": confined.attack_succeeded, "probe": confined.probe, "detail": confined.detail});
            monitor.record_result(
                ticket,
                ToolResult {
                    output,
                    kernel: events,
                    confinement: None,
                },
            );
        }
        let succeeded_unconfined = baseline.skipped.is_none() && baseline.attack_succeeded;
        if succeeded_unconfined {
            base_ok += 1;
            monitor_prevented += usize::from(monitor_blocked);
        }
        kernel_prevented += usize::from(!confined.attack_succeeded);
        recorded += usize::from(confined.recorded);
        if let Some(s) = &confined.stand_in {
            stand_ins.push(format!("{}: {s}", case.id));
        }
        rows.push(json!({
            "id": case.id, "category": case.category,
            "baseline": if let Some(s) = baseline.skipped { format!("skipped: {s}") } else if baseline.attack_succeeded { "succeeded".into() } else { "failed".into() },
            "monitor_only": if monitor_blocked { "prevented" } else if succeeded_unconfined { "succeeded" } else { "failed" },
            "monitor_kernel": if confined.attack_succeeded { "SUCCEEDED" } else { "prevented" },
            "recorded": if confined.recorded { "kernel event".to_string() } else { confined.stand_in.clone().map_or_else(|| "NOT RECORDED".into(), |s| format!("stand-in: {s}")) },
            "denied": confined.denied.iter().map(|d| d.name.clone()).collect::<Vec<_>>(),
        }));
    }
    progress.finish_and_clear();
    let aeg = monitor.finish();
    let bundle = knox_monitor::run::seal(
        &rt,
        "corpus-syscalls",
        Some(&prompt),
        apm.clone(),
        att,
        models.clone(),
        aeg,
    )?;
    let report = knox_verify::verify_bundle(
        &bundle,
        &rt.manifest,
        knox_verify::Options::DANGEROUS_SIMULATED,
    );
    if let Some(dir) = &args.out {
        crate::cmd::write_file(
            &dir.join("corpus-syscalls.json"),
            serde_json::to_vec(&bundle)?,
        )?;
    }
    let n = cases.len();
    let pct = |a: usize, b: usize| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    let kernel_nodes = bundle
        .nodes
        .iter()
        .filter(|x| x.kind == knox_types::aeg::NodeKind::Blocked)
        .count();
    let summary = json!({
        "cases": n,
        "succeed_unconfined": base_ok,
        "monitor_only": {"prevented_pct_of_successful_attacks": pct(monitor_prevented, base_ok)},
        "monitor_kernel": {"prevented": kernel_prevented, "prevented_pct": pct(kernel_prevented, n),
                           "recorded_by_kernel_event": recorded, "recorded_pct": pct(recorded, n), "stand_ins": stand_ins},
        "evidence": {"kernel_events": kernel_events_total, "blocked_nodes": kernel_nodes, "verified": report.outcome.name()},
    });
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"summary": summary, "cases": rows}))?
        );
    } else {
        crate::outln!(
            "| case | category | unconfined | monitor only | monitor + kernel | recorded |"
        );
        crate::outln!("|---|---|---|---|---|---|");
        for r in &rows {
            let s = |k: &str| {
                r.get(k)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            crate::outln!(
                "| {} | {} | {} | {} | {} | {} |",
                s("id"),
                s("category"),
                s("baseline"),
                s("monitor_only"),
                s("monitor_kernel"),
                s("recorded")
            );
        }
        crate::outln!("\n{n} cases; {base_ok} succeed unconfined (as root, inside the harness).");
        crate::outln!(
            "monitor only: {:.0} % of the successful attacks prevented (the monitor sees only the planned tool call).",
            pct(monitor_prevented, base_ok)
        );
        crate::outln!(
            "monitor + kernel: {kernel_prevented}/{n} prevented ({:.0} %); {recorded} ({:.0} %) recorded by a kernel event, {} by a named stand-in.",
            pct(kernel_prevented, n),
            pct(recorded, n),
            stand_ins.len()
        );
        crate::outln!(
            "evidence: {kernel_events_total} kernel events as {kernel_nodes} blocked nodes; the bundle verifies `{}`.",
            report.outcome.name()
        );
    }
    Ok(
        if kernel_prevented == n && report.outcome == knox_verify::Outcome::Complete {
            0
        } else {
            1
        },
    )
}

/// The probe's file name.
const PROBE: &str = "knox-probe";

/// The probe binary: `explicit` (`--probe`), else `knox-probe` beside this binary, else
/// — when this binary runs from a cargo target directory (`…/debug/knox`,
/// `…/release/knox`) of a source tree that is still there — built with cargo into that
/// same target directory, so it lands beside this binary; else a failure that says how
/// to get one.
pub fn locate_probe(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_file() {
            return Err(fail(
                Kind::NoInput,
                format!("--probe `{}` does not exist", p.display()),
            ));
        }
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe()
        .kind_context(Kind::Software, || "locating the knox binary".into())?;
    let beside = exe.with_file_name(PROBE);
    if beside.is_file() {
        return Ok(beside);
    }
    let how = format!(
        "build it from the Knox sources with `cargo build --release -p knox-attacks` and put `{PROBE}` beside `{}`, or pass --probe",
        exe.display()
    );
    let Some(build) = source_build(&exe) else {
        return Err(fail(
            Kind::Unavailable,
            format!("the probe `{}` is missing: {how}", beside.display()),
        ));
    };
    eprintln!(
        "building `{PROBE}` from the sources in {} (once) …",
        build.root.display()
    );
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(build.root.join("Cargo.toml"))
        .args([
            "-p",
            "knox-attacks",
            "--bin",
            PROBE,
            "--profile",
            &build.profile,
        ])
        .arg("--target-dir")
        .arg(&build.target_dir)
        .env_remove("CARGO_TARGET_DIR")
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| {
            fail(
                Kind::Unavailable,
                format!("the probe is missing and cargo cannot be run ({e}): {how}"),
            )
        })?;
    if !status.success() || !beside.is_file() {
        return Err(fail(
            Kind::Unavailable,
            format!("the probe is missing and building it with cargo failed ({status}): {how}"),
        ));
    }
    Ok(beside)
}

/// How to build the probe beside `exe`.
#[derive(Debug)]
struct SourceBuild {
    /// The workspace root this binary was built from.
    root: PathBuf,
    /// The target directory `exe` is in.
    target_dir: PathBuf,
    /// The cargo profile of `exe`'s directory.
    profile: String,
}

/// The source build `exe` came from: it sits in `<target>/debug` or `<target>/release`
/// and the workspace it was compiled from (this crate's manifest directory, two levels
/// down) still has the attack corpus's crate.
fn source_build(exe: &Path) -> Option<SourceBuild> {
    let dir = exe.parent()?;
    let profile = match dir.file_name()?.to_str()? {
        "debug" => "dev",
        "release" => "release",
        _ => return None,
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.parent()?;
    if !root
        .join("crates")
        .join("attacks")
        .join("Cargo.toml")
        .is_file()
    {
        return None;
    }
    Some(SourceBuild {
        root: root.to_path_buf(),
        target_dir: dir.parent()?.to_path_buf(),
        profile: profile.into(),
    })
}
