//! `knox corpus syscalls`: the unmediated-attack corpus run three ways — unconfined
//! (what succeeds), monitor only, monitor + kernel — with every kernel denial recorded in
//! an evidence bundle that must verify. The experiment is [`crate::corpus`]; this
//! is its arguments, the probe's location and the printing.

use std::path::{Path, PathBuf};

use crate::corpus::{BUNDLE_FILE, CorpusRun, CorpusRunError};
use anyhow::Result;
use serde_json::json;

use super::session;
use knox_command::error::{Kind, KindExt as _, fail};

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
#[command(after_help = knox_command::exit_codes!(
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
    #[arg(value_parser = knox_command::files::path, long)]
    pub probe: Option<PathBuf>,
    /// Also write the evidence bundle of the monitor + kernel run here.
    #[arg(value_parser = knox_command::files::path, long)]
    pub out: Option<PathBuf>,
    /// Write into a non-empty `--out` (files of the same name are replaced; the folder
    /// is still locked against a concurrent run).
    #[arg(long, requires = "out")]
    pub force: bool,
    /// Only cases whose id contains this.
    #[arg(long)]
    pub only: Option<String>,
}

/// Runs the experiment with `probe` on the embedded runtime (simulated platform
/// evidence): a sandbox or fixture that cannot start is "unavailable" (69).
pub fn experiment(probe: &Path, only: Option<&str>) -> Result<CorpusRun> {
    let rt = session::embedded_runtime(b"knox-corpus")?;
    let bar = super::Bar::new();
    crate::corpus::run(&rt, probe, only, &bar).map_err(|e| match e {
        CorpusRunError::Sandbox(_) | CorpusRunError::Fixture(_) => {
            fail(Kind::Unavailable, format!("{:#}", anyhow::Error::new(e)))
        }
        e => e.into(),
    })
}

/// Runs the corpus; exit 0 when the kernel layer prevented every attack and the
/// evidence verified, 1 otherwise.
pub fn run(cmd: &CorpusCommand) -> Result<i32> {
    let CorpusCommand::Syscalls(args) = cmd;
    let _out = args
        .out
        .as_deref()
        .map(|d| knox_command::files::out_dir(d, args.force))
        .transpose()?;
    let probe = locate_probe(args.probe.as_deref())?;
    let run = experiment(&probe, args.only.as_deref())?;
    if let Some(dir) = &args.out {
        knox_command::files::write_file(&dir.join(BUNDLE_FILE), serde_json::to_vec(&run.bundle)?)?;
    }
    let s = &run.summary;
    if args.json {
        knox_command::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"summary": s, "cases": run.cases}))?
        );
    } else {
        knox_command::outln!(
            "| case | category | unconfined | monitor only | monitor + kernel | recorded |"
        );
        knox_command::outln!("|---|---|---|---|---|---|");
        for r in &run.cases {
            knox_command::outln!(
                "| {} | {} | {} | {} | {} | {} |",
                r.id,
                r.category,
                r.unconfined,
                r.monitor_only,
                r.monitor_kernel,
                r.recorded
            );
        }
        let (n, k) = (s.cases, &s.monitor_kernel);
        knox_command::outln!(
            "\n{n} cases; {} succeed unconfined (as root, inside the harness).",
            s.succeed_unconfined
        );
        knox_command::outln!(
            "monitor only: {:.0} % of the successful attacks prevented (the monitor sees only the planned tool call).",
            s.monitor_only.prevented_pct_of_successful_attacks
        );
        knox_command::outln!(
            "monitor + kernel: {}/{n} prevented ({:.0} %); {} ({:.0} %) recorded by a kernel event, {} by a named stand-in.",
            k.prevented,
            k.prevented_pct,
            k.recorded_by_kernel_event,
            k.recorded_pct,
            k.stand_ins.len()
        );
        knox_command::outln!(
            "evidence: {} kernel events as {} blocked nodes; the bundle verifies `{}`.",
            s.evidence.kernel_events,
            s.evidence.blocked_nodes,
            s.evidence.verified.name()
        );
    }
    Ok(if run.passed() { 0 } else { 1 })
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
