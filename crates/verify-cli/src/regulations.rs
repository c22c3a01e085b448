//! `regulations show`: the regulation policy set a verifier recomputes verdicts with,
//! as a reviewer reads it; `regulations decide`: flows in the public format decided
//! from outside a run; and loading a set (`--policy-set`).

use std::path::PathBuf;

use anyhow::Result;
use knox_regulation::Norms;

use crate::error::{Kind, KindExt as _, fail};

/// `knox-verify regulations` subcommands (`knox regulations` adds `analyze`).
#[derive(Debug, clap::Subcommand)]
pub enum RegulationsCommand {
    /// Load a policy set — every Cedar policy validated against the Knox schema, every
    /// policy's must-match and must-not-match examples run, the set refused if one
    /// fails — and list its regulations, policies, the provisions they cite, and its hash
    /// (the hash an APM names and `knox verify` compares).
    Show(ShowArgs),
    /// Decide flows given from outside a run: one flow φ as JSON, or JSON Lines of
    /// flows, in the public format of `docs/regulation.md` ("Deciding a flow from
    /// outside"). Every role, purpose, information type and condition is normalised
    /// through the set's vocabulary; an unknown term is named and decided
    /// `not_applicable`. Prints one verdict per flow with its deciding policies and
    /// provisions; `--explain` adds the policies' summaries, the facts the flow left
    /// unstated and the single facts that would make a non-compliant flow compliant.
    Decide(DecideArgs),
}

impl RegulationsCommand {
    /// Whether JSON output was asked for (then a failure is a JSON object).
    pub fn json(&self) -> bool {
        match self {
            Self::Show(a) => a.json,
            Self::Decide(a) => a.json,
        }
    }
}

/// Runs a `knox-verify regulations` subcommand.
pub fn run(c: &RegulationsCommand) -> Result<i32> {
    match c {
        RegulationsCommand::Show(a) => show(a),
        RegulationsCommand::Decide(a) => decide(a),
    }
}

/// Arguments of `regulations decide`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   every flow was decided, none non-compliant\n  1   a flow is non-compliant"
))]
pub struct DecideArgs {
    /// The flow file (one JSON flow, or JSON Lines), or `-` for standard input.
    #[arg(value_parser = crate::files::path_or_stdin, value_name = "FLOW.json|-")]
    pub file: PathBuf,
    /// The policy set directory (default: the embedded one).
    #[arg(value_parser = crate::files::path, long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// Explain each decision: deciding policies with provision and summary, facts
    /// left unstated, facts that would make a non-compliant flow compliant.
    #[arg(long)]
    pub explain: bool,
    /// Print one JSON object per flow (JSON Lines), in input order.
    #[arg(long)]
    pub json: bool,
}

/// Runs `regulations decide`.
pub fn decide(args: &DecideArgs) -> Result<i32> {
    let bytes = crate::files::read_input_or_stdin(&args.file, crate::files::EVIDENCE)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(
            Kind::DataErr,
            format!("`{}` is not UTF-8 text", args.file.display()),
        )
    })?;
    let flows = knox_regulation::phi::parse_flows(&text).map_err(|e| {
        crate::files::bad_input(&args.file, "a flow (JSON) or flows (JSON Lines)", e)
    })?;
    let norms = load(args.policy_set.as_deref())?;
    let mut any_non_compliant = false;
    for (i, phi) in flows.iter().enumerate() {
        let d = norms.decide_phi(phi, args.explain).map_err(|e| {
            crate::files::bad_input(&args.file, "flows the policy set can decide", e)
        })?;
        any_non_compliant |= d.verdict == "non_compliant";
        print_decision(&d, i, args.json, None)?;
    }
    Ok(i32::from(any_non_compliant))
}

/// Prints one flow's decision `d` (the `index`-th, from 0) as `knox regulations decide`
/// does: one JSON object per line with `json` (with `extra` merged in under its keys),
/// else a readable block.
pub fn print_decision(
    d: &knox_regulation::FlowDecision,
    index: usize,
    json: bool,
    extra: Option<(&str, serde_json::Value)>,
) -> Result<()> {
    if json {
        let mut v = serde_json::to_value(d)?;
        if let (Some((k, x)), Some(o)) = (extra, v.as_object_mut()) {
            o.insert(k.to_string(), x);
        }
        crate::outln!("{}", serde_json::to_string(&v)?);
        return Ok(());
    }
    let name =
        d.id.clone()
            .unwrap_or_else(|| format!("flow {}", index + 1));
    crate::outln!("{name}: {}", d.verdict);
    for r in &d.decisions {
        let cites: Vec<String> = r
            .policies
            .iter()
            .zip(&r.provisions)
            .map(|(p, c)| format!("{p} ({c})"))
            .collect();
        crate::outln!(
            "  {:<6} {:<15} {}",
            r.regulation,
            r.verdict,
            cites.join(", ")
        );
    }
    for w in &d.warnings {
        crate::outln!("  warning: {w}");
    }
    if let Some(e) = &d.explanation {
        for c in &e.cited {
            crate::outln!(
                "  because {} {} {}: {}",
                c.regulation,
                c.effect,
                c.policy,
                c.summary
            );
        }
        if !e.missing.is_empty() {
            crate::outln!("  not stated: {}", e.missing.join(", "));
        }
        if !e.would_permit.is_empty() {
            crate::outln!("  would be compliant with: {}", e.would_permit.join(", "));
        }
        for o in &e.obligations {
            crate::outln!(
                "  obligation {} {} ({}{}): {}",
                o.regulation,
                o.name,
                o.provision,
                if o.required { ", required" } else { "" },
                o.stated
            );
        }
    }
    Ok(())
}

/// Arguments of `knox regulations show`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!("  0   the set loaded: every policy validated, every example passed (65 otherwise)"))]
pub struct ShowArgs {
    /// The policy set directory (default: the set embedded in this build, the
    /// repository's `regulations/`).
    #[arg(value_parser = crate::files::path, long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Loads the set `dir` names, or the embedded one.
pub fn load(dir: Option<&std::path::Path>) -> Result<Norms> {
    match dir {
        Some(d) => {
            if !d.is_dir() {
                return Err(fail(
                    Kind::NoInput,
                    format!(
                        "regulation policy set `{}` is not a directory: name the directory holding `knox.cedarschema`",
                        d.display()
                    ),
                ));
            }
            Norms::load_dir(d)
                .map_err(|e| crate::files::bad_input(d, "a usable regulation policy set", e))
        }
        None => Norms::embedded().kind_context(Kind::Software, || {
            "the embedded regulation policy set".into()
        }),
    }
}

/// Runs `regulations show`.
pub fn show(args: &ShowArgs) -> Result<i32> {
    let norms = load(args.policy_set.as_deref())?;
    let mut regs = Vec::new();
    for name in norms.regulations() {
        let Some((policies, (default_id, default_provision))) = norms.listing(name) else {
            continue;
        };
        let (title, _, examples) = norms.describe(name).unwrap_or_default();
        regs.push(serde_json::json!({
            "regulation": name,
            "title": title,
            "examples": examples,
            "default": {"policy": default_id, "provision": default_provision},
            "policies": policies.iter().map(|(id, p)| serde_json::json!({
                "id": id, "kind": p.kind, "effect": p.effect,
                "provision": p.provision, "summary": p.summary,
            })).collect::<Vec<_>>(),
            "obligations": norms.obligations(name).unwrap_or_default(),
        }));
    }
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "hash": norms.hash(),
                "files": norms.files(),
                "regulations": regs,
            }))?
        );
        return Ok(0);
    }
    crate::outln!("policy set {}", norms.hash());
    for (file, sha) in norms.files() {
        crate::outln!("  {file:<20} sha256:{sha}");
    }
    for r in &regs {
        let text = |v: &serde_json::Value, p: &str| {
            v.pointer(p)
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .unwrap_or_default()
        };
        crate::outln!(
            "\n{} — {} ({} examples passed)",
            text(r, "/regulation"),
            text(r, "/title"),
            text(r, "/examples")
        );
        for p in r
            .pointer("/policies")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            crate::outln!(
                "  {:<6} {:<7} {:<40} {}",
                text(p, "/kind"),
                text(p, "/effect"),
                text(p, "/id"),
                text(p, "/provision")
            );
        }
        crate::outln!(
            "  default        {:<40} {} (in scope, nothing permits)",
            text(r, "/default/policy"),
            text(r, "/default/provision")
        );
        for o in r
            .pointer("/obligations")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
        {
            crate::outln!(
                "  obligation {:<8} {:<40} {}",
                if o.pointer("/required") == Some(&serde_json::Value::Bool(true)) {
                    "required"
                } else {
                    "optional"
                },
                text(o, "/id"),
                text(o, "/provision")
            );
        }
    }
    Ok(0)
}
