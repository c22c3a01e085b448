//! `knox regulations`: the regulation policy set, as a reviewer reads it.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use knox_regulation::Norms;

/// Arguments of `knox regulations`.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "Loads a regulation policy set — validating every Cedar policy against the \
Knox schema and running every policy's must-match and must-not-match examples, refusing the set \
if one fails — and lists its regulations, policies, the provisions they cite, and the set's hash \
(the hash an APM names and `knox verify` compares)."
)]
pub struct RegulationsArgs {
    /// The policy set directory (default: the set embedded in this build, the
    /// repository's `regulations/`).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Loads the set `dir` names, or the embedded one.
pub fn load(dir: Option<&std::path::Path>) -> Result<Norms> {
    match dir {
        Some(d) => {
            Norms::load_dir(d).with_context(|| format!("regulation policy set `{}`", d.display()))
        }
        None => Norms::embedded().context("the embedded regulation policy set"),
    }
}

/// Runs the command.
pub fn run(args: &RegulationsArgs) -> Result<i32> {
    let norms = load(args.dir.as_deref())?;
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
        crate::outln!(
            "\n{} — {} ({} examples passed)",
            r["regulation"].as_str().unwrap_or_default(),
            r["title"].as_str().unwrap_or_default(),
            r["examples"]
        );
        for p in r["policies"].as_array().into_iter().flatten() {
            crate::outln!(
                "  {:<6} {:<7} {:<40} {}",
                p["kind"].as_str().unwrap_or_default(),
                p["effect"].as_str().unwrap_or_default(),
                p["id"].as_str().unwrap_or_default(),
                p["provision"].as_str().unwrap_or_default()
            );
        }
        crate::outln!(
            "  default        {:<40} {} (in scope, nothing permits)",
            r["default"]["policy"].as_str().unwrap_or_default(),
            r["default"]["provision"].as_str().unwrap_or_default()
        );
    }
    Ok(0)
}
