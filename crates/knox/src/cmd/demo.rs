//! `knox demo`: a benign and an injected run, verified, with one tampered copy.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use knox_monitor::workload::Workload;
use knox_types::aeg::NodeKind;

use knox_models::ModelSpec;

use crate::cmd::model::Models;
use crate::session::{self, ExecutorKind, WorkloadRun};

/// Arguments of `knox demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Where to write the demo's bundles.
    #[arg(long, default_value = "knox-demo")]
    pub out: PathBuf,
    /// Planner and executor (`--planner`, `--executor`, `--cache-dir`); without
    /// `--executor`, the benign and then the injected deterministic executor.
    #[command(flatten)]
    pub models: crate::cmd::model::ModelArgs,
    /// Regulations in force (`--regulations`, `--regulation-context`, `--policy-set`)
    /// and the judge (`--judge`) for disclosures no data label reaches.
    #[command(flatten)]
    pub regulation: super::regulations::RegulationArgs,
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<i32> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating `{}`", args.out.display()))?;
    let rt = session::embedded_runtime(b"knox-demo")?;
    let manifest = session::embedded_manifest()?;
    let opts = knox_verify::Options::DANGEROUS_SIMULATED;
    crate::outln!(
        "Knox demo — InjecAgent tasks under the reference monitor (2 tasks, 2 concurrent sub-agents)"
    );
    crate::outln!(
        "platform evidence: {} (not hardware-backed; verified below with --allow-simulated)\n",
        rt.platform.mode
    );
    let workload: Workload = "mt-ma:2:2".parse()?;
    let executors = match &args.models.executor {
        Some(e) => vec![e.clone()],
        None => vec![ModelSpec::Benign, ModelSpec::Injected],
    };
    let first = executors.first().cloned().unwrap_or(ModelSpec::Benign);
    let models = Models::load(
        &args.models.planner,
        &first,
        args.regulation.judge.as_ref(),
        args.models.cache.cache_dir.as_deref(),
        &rt.manifest,
    )?;
    let mut regulation = args.regulation.setup()?;
    if let Some(r) = regulation.as_mut() {
        r.judge = models.judge();
        crate::outln!(
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
    for spec in &executors {
        let kind = match spec {
            ModelSpec::Injected => ExecutorKind::Injected,
            _ => ExecutorKind::Benign,
        };
        let w = WorkloadRun {
            executor: kind,
            ..models.apply(WorkloadRun::new(workload, kind, 2))
        };
        // A model's bundle is named `model.json`: a spec may hold `/` or `:`.
        let label = if spec.is_model() {
            "model"
        } else {
            session::executor_name(kind)
        };
        session::run_workload_regulated(&rt, &w, regulation.as_ref(), |o| {
            let b = &o.bundle;
            let path = args.out.join(format!("{label}.json"));
            std::fs::write(&path, serde_json::to_vec_pretty(b)?)?;
            crate::outln!(
                "== planner {}, executor {spec}: {} nodes, {} proposals",
                args.models.planner,
                b.nodes.len(),
                o.stats.proposals
            );
            for n in b
                .nodes
                .iter()
                .filter(|n| n.kind == NodeKind::ProofOfInference)
            {
                let field = |k: &str| n.payload.get(k).and_then(|v| v.as_str()).unwrap_or("-");
                crate::outln!(
                    "   proof of inference: {:<8} {} (weights sha256 {})",
                    field("role"),
                    field("model"),
                    field("weights_hash")
                );
            }
            if let Some(failure) = &b.apm.planning {
                crate::outln!(
                    "   PLANNING FAILED (attested interrupt, nothing ran): {}",
                    failure.reason
                );
            }
            for n in b.nodes.iter().filter(|n| n.kind == NodeKind::ToolCall) {
                let tool = n
                    .payload
                    .pointer("/actual/tool")
                    .and_then(|t| t.as_str())
                    .unwrap_or("<malformed>");
                match &n.block_reason {
                    None => crate::outln!("   allowed  {:<8} {tool}", n.agent),
                    Some(r) => {
                        // Every guard that failed, not only the first.
                        let failed: Vec<&str> = b
                            .nodes
                            .iter()
                            .filter(|c| {
                                c.kind == NodeKind::Check && c.parent == Some(n.seq) && !c.allowed
                            })
                            .filter_map(|c| c.payload.get("guard").and_then(|g| g.as_str()))
                            .collect();
                        crate::outln!("   BLOCKED  {:<8} {tool}: {r}", n.agent);
                        crate::outln!("            failed guards: {}", failed.join(", "));
                    }
                }
                for line in regulation_lines(b, n.seq) {
                    crate::outln!("            {line}");
                }
            }
            let report = knox_verify::verify_bundle(b, &manifest, opts);
            crate::outln!("   verify {}: {}\n", path.display(), report.outcome.name());
            if kind == ExecutorKind::Injected || spec.is_model() {
                injected_path = Some(path);
            }
            Ok(())
        })?;
    }
    for line in models.report() {
        crate::outln!("{line}");
    }
    // Tamper with one byte of one node and verify again.
    if let Some(path) = injected_path {
        let text = std::fs::read_to_string(&path)?;
        let mut bundle: knox_types::bundle::Bundle = serde_json::from_str(&text)?;
        let victim = bundle
            .nodes
            .iter()
            .position(|n| n.kind == NodeKind::Blocked)
            .unwrap_or(1);
        if let Some(n) = bundle.nodes.get_mut(victim) {
            n.allowed = !n.allowed;
        }
        let tampered = args.out.join("injected-tampered.json");
        std::fs::write(&tampered, serde_json::to_vec_pretty(&bundle)?)?;
        let report = knox_verify::verify_bundle(&bundle, &manifest, opts);
        crate::outln!(
            "== flipped the `allowed` flag of node {victim} in a copy: {}",
            tampered.display()
        );
        crate::out!("{report}");
        crate::outln!(
            "\nVerify yourself: knox verify {} --allow-simulated",
            path.display()
        );
    }
    Ok(0)
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
        }) = serde_json::from_value::<CheckPayload>(c.payload.clone())
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
            note.map(|n| format!(": {n}")).unwrap_or_default()
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
