//! `knox demo`: a benign and an injected run, verified, with one tampered copy.

use std::path::PathBuf;

use anyhow::Result;
use knox_harness::Workload;
use knox_types::aeg::NodeKind;
use serde_json::json;

use knox_models::ModelSpec;

use crate::error::{Kind, KindExt as _};
use crate::session::{self, ExecutorKind, Suite, SuiteRun};

/// Arguments of `knox demo`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   the demo ran (what it shows — blocks, verdicts, the tampered copy — is printed, not returned)"
))]
pub struct DemoArgs {
    /// Where to write the demo's bundles (default: `$XDG_DATA_HOME/knox/demo`, else
    /// `~/.local/share/knox/demo`, else a fresh folder under the temporary directory;
    /// the folder used is printed).
    #[arg(long, value_parser = crate::cmd::path)]
    pub out: Option<PathBuf>,
    /// Write into a non-empty `--out` that holds no evidence (bundles, journals and key
    /// announcements are never replaced; the folder is still locked against a
    /// concurrent demo). The default folder is the demo's own and always reused: the
    /// previous demo's files there are removed first.
    #[arg(long)]
    pub force: bool,
    /// Planner and executor (`--planner`, `--executor`, `--cache-dir`); without
    /// `--executor`, the benign and then the injected deterministic executor.
    #[command(flatten)]
    pub models: crate::cmd::model::ModelArgs,
    /// Regulations in force (`--regulations`, `--regulation-context`, `--policy-set`)
    /// and the judge (`--judge`) for disclosures no data label reaches.
    #[command(flatten)]
    pub regulation: super::regulations::RegulationArgs,
    /// Print what the demo did as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Stream both runs live to a `knox serve` store, `http://HOST:PORT`: first the
    /// demo's key announcement, then every node as it is committed (each run's journal,
    /// written beside its bundle and followed), then the sealed bundle; the store's UI
    /// shows them in progress, then complete. Journals and announcements an earlier
    /// demo left in the folder are removed first (they would be streamed again).
    /// Signed with `--stream-key`.
    #[arg(long, value_name = "URL", requires = "stream_key")]
    pub stream_to: Option<String>,
    /// The provider's private key the stream is signed with (`knox keygen`).
    #[arg(value_parser = crate::cmd::path, long, value_name = "KEY", requires = "stream_to")]
    pub stream_key: Option<PathBuf>,
    /// Another demo instead of the default one.
    #[command(subcommand)]
    pub what: Option<DemoCommand>,
}

/// The other demos.
#[derive(Debug, clap::Subcommand)]
pub enum DemoCommand {
    /// Signed capability contracts: the EBP-CA scenarios without Knox (in throwaway
    /// namespaces) and under Knox, as a table.
    Contracts(super::contract::DemoContractsArgs),
}

/// The demo's folder when `--out` is not given: `$XDG_DATA_HOME/knox/demo` (an absolute
/// `XDG_DATA_HOME` only, as the XDG spec says), else `$HOME/.local/share/knox/demo`,
/// else a fresh folder under the temporary directory. Never the current directory.
pub fn default_out() -> PathBuf {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(d) = absolute("XDG_DATA_HOME") {
        return d.join("knox").join("demo");
    }
    if let Some(h) = absolute("HOME") {
        return h.join(".local").join("share").join("knox").join("demo");
    }
    std::env::temp_dir().join(format!("knox-demo-{}", std::process::id()))
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<i32> {
    if let Some(DemoCommand::Contracts(a)) = &args.what {
        return super::contract::demo(a);
    }
    // The default folder is the demo's own: each demo removes the last one's files
    // there (evidence is never replaced, so they go first). A folder given with --out is
    // the user's: never emptied.
    let out = args.out.clone().unwrap_or_else(default_out);
    let _out = if args.out.is_none() {
        let held = super::evidence_dir(&out)?;
        remove_previous(&out)?;
        held
    } else {
        super::out_dir(&out, args.force)?
    };
    let mut stream = match (&args.stream_to, &args.stream_key) {
        (Some(url), Some(key)) => Some(super::serve::Stream::start(url, key, &out)?),
        _ => None,
    };
    let text = !args.json;
    // Text lines, printed unless --json.
    macro_rules! say {
        ($($t:tt)*) => {
            if text {
                crate::outln!($($t)*);
            }
        };
    }
    let manifest = session::embedded_manifest()?;
    let data = session::embedded_data()?;
    // One key for the whole demo: its runs are numbered links of that key's one chain.
    let rt = std::sync::Arc::new(session::runtime_over(
        &knox_attest::simulated::Simulated,
        b"knox-demo",
        manifest.clone(),
    )?);
    if let Some(s) = stream.as_mut() {
        // Before any run: a process whose runs are all withheld still shows.
        s.announce(&session::announcement(&rt)?, &out)?;
    }
    let opts = knox_verify::Options::DANGEROUS_SIMULATED;
    say!(
        "Knox demo — InjecAgent tasks under the reference monitor (2 tasks, 2 concurrent sub-agents)"
    );
    say!(
        "platform evidence: {} (not hardware-backed; verified below with --allow-simulated)",
        rt.platform.mode
    );
    say!("bundles in {}\n", out.display());
    let workload: Workload = "mt-ma:2:2".parse()?;
    let executors = match &args.models.executor {
        Some(e) => vec![e.clone()],
        None => vec![ModelSpec::Benign, ModelSpec::Injected],
    };
    let first = executors.first().cloned().unwrap_or(ModelSpec::Benign);
    let cache_dir = super::absolute_cache_dir(args.models.cache.cache_dir.as_deref())?;
    let models = crate::cmd::model::load(
        &args.models.planner,
        &first,
        args.regulation.judge.as_ref(),
        cache_dir.as_deref(),
        &rt.manifest,
    )
    .kind(Kind::Unavailable)?;
    let mut regulation = args.regulation.setup()?;
    if let Some(r) = regulation.as_mut() {
        r.judge = models.judge();
        say!(
            "regulations in force: {} (policy set {}){}\n",
            r.regulations.names.join(", "),
            r.norms.hash(),
            args.regulation
                .judge
                .as_ref()
                .map(|j| format!("; judge {j}"))
                .unwrap_or_default()
        );
    }
    let mut injected_path = None;
    let mut runs = Vec::new();
    for (i, spec) in executors.iter().enumerate() {
        // A stop signal (SIGUSR1, SIGTERM, SIGINT) interrupts the run it arrives in, with
        // evidence, and starts no other.
        if i > 0 && crate::signals::received().is_some() {
            say!(
                "stopped by {}: no further run started",
                crate::signals::received().unwrap_or("a signal")
            );
            break;
        }
        let kind = match spec {
            ModelSpec::Injected => ExecutorKind::Injected,
            _ => ExecutorKind::Benign,
        };
        let suite = SuiteRun::new(Suite::Injecagent, &data, workload, 2);
        let mut builder = suite
            .session(kind)?
            .platform(knox_attest::simulated::Simulated)
            .runtime(std::sync::Arc::clone(&rt))
            .stop(knox_types::apm::StopPolicy {
                external: true,
                ..knox_types::apm::StopPolicy::default()
            })
            .signal(knox_monitor::guard::stop::StopSignal::from_flag(
                crate::signals::stop_flag(),
            ));
        builder = crate::session::apply_models(&models, builder);
        if let Some(r) = &regulation {
            builder = builder.regulations(r.clone());
        }
        if stream.is_some() {
            builder = builder.journal_dir(&out);
        }
        let sess = session::build(builder)?;
        // A model's bundle is named `model.json`: a spec may hold `/` or `:`.
        let label = if spec.is_model() {
            "model"
        } else {
            kind.name()
        };
        session::run_suite(&sess, &suite, |o| {
            let b = &o.bundle;
            let path = out.join(format!("{label}.json"));
            let bytes = serde_json::to_vec_pretty(b)?;
            if let Some(s) = stream.as_mut() {
                s.seal(&bytes);
            }
            super::write_new(&path, bytes)?;
            say!(
                "== planner {}, executor {spec}: {} nodes, {} proposals",
                args.models.planner,
                b.nodes.len(),
                o.stats.proposals
            );
            let mut proofs = Vec::new();
            for n in b
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::ProofOfInference)
            {
                let p = n
                    .payload
                    .get::<knox_types::payload::ProofOfInferencePayload>()
                    .ok();
                let role = p.map_or("-", |p| p.role.as_str());
                let model = p.map_or("-", |p| p.model.as_str());
                let weights = p
                    .and_then(|p| p.weights_hash)
                    .map_or_else(|| "-".to_string(), |h| h.to_hex());
                say!(
                    "   proof of inference: {:<8} {} (weights sha256 {})",
                    role,
                    model,
                    weights
                );
                proofs.push(json!({"role": role, "model": model, "weights_sha256": weights}));
            }
            if let Some(failure) = &b.apm.planning {
                say!(
                    "   PLANNING FAILED (attested interrupt, nothing ran): {}",
                    failure.reason
                );
            }
            let mut calls = Vec::new();
            for n in b.nodes.iter().filter(|n| n.kind == NodeKind::ToolCall) {
                let tool = n
                    .payload
                    .tool_call()
                    .and_then(|c| c.actual.as_ref())
                    .map_or("<malformed>", |a| a.tool.as_str());
                // Every guard that failed, not only the first.
                let failed: Vec<&str> = b
                    .nodes
                    .iter()
                    .filter(|c| c.kind == NodeKind::Check && c.parent == Some(n.seq) && !c.allowed)
                    .filter_map(|c| c.payload.check().map(|c| c.guard.as_str()))
                    .collect();
                match &n.block_reason {
                    None => say!("   allowed  {:<8} {tool}", n.agent),
                    Some(r) => {
                        say!("   BLOCKED  {:<8} {tool}: {r}", n.agent);
                        say!("            failed guards: {}", failed.join(", "));
                    }
                }
                let regulation = regulation_lines(b, n.seq);
                for line in &regulation {
                    say!("            {line}");
                }
                calls.push(json!({"node": n.seq, "agent": n.agent, "tool": tool,
                    "allowed": n.block_reason.is_none(), "reason": n.block_reason,
                    "failed_guards": failed, "regulation": regulation}));
            }
            let report = knox_verify::verify_bundle(b, &manifest, opts);
            say!("   verify {}: {}\n", path.display(), report.outcome.name());
            runs.push(json!({
                "planner": args.models.planner.to_string(), "executor": spec.to_string(),
                "bundle": path.display().to_string(), "nodes": b.nodes.len(),
                "proposals": o.stats.proposals, "proofs_of_inference": proofs,
                "planning_failed": b.apm.planning.as_ref().map(|f| f.reason.clone()),
                "calls": calls, "verified": report.outcome.name(),
            }));
            if kind == ExecutorKind::Injected || spec.is_model() {
                injected_path = Some(path);
            }
            Ok(())
        })?;
    }
    if let Some(s) = stream.take() {
        s.finish();
    }
    let model_lines = models.report();
    for line in &model_lines {
        say!("{line}");
    }
    // Tamper with one byte of one node and verify again.
    let mut tampered_json = serde_json::Value::Null;
    if let Some(path) = injected_path {
        let bytes = super::read_input(&path, super::EVIDENCE)?;
        let mut bundle: knox_types::bundle::Bundle = serde_json::from_slice(&bytes)
            .map_err(|e| super::bad_input(&path, "an evidence bundle", e))?;
        let victim = bundle
            .nodes
            .iter()
            .position(|n| n.kind == NodeKind::Blocked)
            .unwrap_or(1);
        if let Some(n) = bundle.nodes.get_mut(victim) {
            n.allowed = !n.allowed;
        }
        let tampered = out.join("injected-tampered.json");
        super::write_file(&tampered, serde_json::to_vec_pretty(&bundle)?)?;
        // The report's counts come from the copy as read: the verifier vouches for none
        // of them once the chain is broken.
        let evidence = super::verify::of_bundle(&bundle, &manifest, opts);
        say!(
            "== flipped the `allowed` flag of node {victim} in a copy: {}",
            tampered.display()
        );
        if text {
            crate::out!(
                "{}",
                super::verify::render(&evidence.report, evidence.as_read.as_ref())
            );
        }
        say!(
            "\nVerify yourself: knox verify {} --allow-simulated",
            path.display()
        );
        tampered_json = json!({
            "bundle": tampered.display().to_string(),
            "flipped_node": victim,
            "report": super::verify::report_json(&tampered.display().to_string(), &evidence),
        });
    }
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "out": out.display().to_string(),
                "platform": rt.platform.mode,
                "runs": runs,
                "models": model_lines,
                "tampered_copy": tampered_json,
            }))?
        );
    }
    Ok(0)
}

/// Removes what an earlier demo left in its own default folder `out`: its bundles
/// (`benign.json`, `injected.json`, `model.json`), journals (`*.journal.jsonl`) and key
/// announcements.
fn remove_previous(out: &std::path::Path) -> Result<()> {
    let entries = std::fs::read_dir(out)
        .kind_context(Kind::IoErr, || format!("reading {}", out.display()))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".journal.jsonl")
            || name.ends_with(".announcement.json")
            || ["benign.json", "injected.json", "model.json"].contains(&name.as_ref())
        {
            std::fs::remove_file(e.path()).kind_context(Kind::CantCreate, || {
                format!("removing the earlier demo's {}", e.path().display())
            })?;
        }
    }
    Ok(())
}

/// What the regulation check of call `seq` decided, and what a judge said, if asked.
fn regulation_lines(b: &knox_types::bundle::Bundle, seq: u64) -> Vec<String> {
    use knox_types::payload::{CheckDetail, CheckPayload};
    let mut lines = Vec::new();
    for c in b
        .nodes
        .iter()
        .filter(|c| c.kind == NodeKind::Check && c.parent == Some(seq))
    {
        let Ok(CheckPayload {
            detail:
                CheckDetail::Regulation {
                    verdict,
                    policies,
                    judge,
                    note,
                    ..
                },
            ..
        }) = c.payload.get::<CheckPayload>()
        else {
            continue;
        };
        lines.push(format!(
            "regulation: {verdict}{}{}",
            if policies.is_empty() {
                String::new()
            } else {
                format!(" ({})", policies.join(", "))
            },
            note.as_ref().map(|n| format!(": {n}")).unwrap_or_default()
        ));
        if let Some(j) = judge {
            let types: Vec<&str> = j.info_types.iter().map(String::as_str).collect();
            lines.push(format!(
                "judge {}: information types [{}], purpose {}, its verdict {} ({})",
                j.model,
                types.join(", "),
                j.purpose.as_deref().unwrap_or("-"),
                j.verdict.as_deref().unwrap_or("-"),
                match j.agrees {
                    Some(true) => "agrees",
                    Some(false) => "disagrees: recorded, not obeyed",
                    None => "no comparison",
                }
            ));
        }
    }
    lines
}
