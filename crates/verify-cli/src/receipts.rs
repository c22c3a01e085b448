//! `knox receipts`: checks regulators' receipts against a bundle.

use std::path::PathBuf;

use anyhow::Result;
use serde_json::json;

/// Arguments of `knox receipts`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   every receipt checks out against the bundle\
   \n  1   a receipt does not (it is shown as INVALID, with why)"
))]
pub struct ReceiptsArgs {
    /// The bundle the receipts are about.
    #[arg(value_parser = crate::files::path)]
    pub bundle: PathBuf,
    /// Receipt files (`knox verify --key … --receipt …`).
    #[arg(value_parser = crate::files::path, required = true)]
    pub receipts: Vec<PathBuf>,
    /// Print JSON: the bundle's digest and one object per receipt.
    #[arg(long)]
    pub json: bool,
}

/// Shows who accepted what; exit 0 when every receipt checks out, 1 otherwise.
pub fn run(args: &ReceiptsArgs) -> Result<i32> {
    let bundle = crate::files::read_input(&args.bundle, crate::files::EVIDENCE)?;
    let digest = knox_types::Digest::sha256(&bundle);
    let mut rows = Vec::new();
    let mut bad = 0;
    for path in &args.receipts {
        let bytes = crate::files::read_input(path, crate::files::SMALL)?;
        let file = path.display().to_string();
        rows.push(match knox_verify::receipt::check(&bytes, &bundle) {
            Ok(c) => {
                let p = &c.predicate;
                json!({"receipt": file, "valid": true, "regulator": c.regulator.to_string(),
                    "result": p.result, "reason": p.reason, "hardware_backed": p.hardware_backed,
                    "policy_sha256": p.policy_sha256.map(|d| d.to_hex()), "verified_at": p.verified_at})
            }
            Err(e) => {
                bad += 1;
                json!({"receipt": file, "valid": false, "invalid": e.to_string()})
            }
        });
    }
    let code = if bad == 0 { 0 } else { 1 };
    if args.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "bundle": args.bundle.display().to_string(),
                "sha256": digest.to_hex(),
                "receipts": rows,
            }))?
        );
        return Ok(code);
    }
    crate::outln!("bundle {} (sha256 {digest})", args.bundle.display());
    crate::outln!(
        "| receipt | regulator key | result | hardware-backed | policy sha256 | verified at |"
    );
    crate::outln!("|---|---|---|---|---|---|");
    let s = |r: &serde_json::Value, k: &str| {
        r.get(k)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
            .unwrap_or_default()
    };
    for r in &rows {
        if let Some(e) = r.get("invalid").and_then(|v| v.as_str()) {
            crate::outln!("| {} | INVALID: {e} | | | | |", s(r, "receipt"));
            continue;
        }
        let policy = r
            .get("policy_sha256")
            .and_then(|v| v.as_str())
            .map_or_else(|| "none".to_string(), |h| h.chars().take(16).collect());
        let result = match r.get("reason").and_then(|v| v.as_str()) {
            Some(why) => format!("{} ({why})", s(r, "result")),
            None => s(r, "result"),
        };
        crate::outln!(
            "| {} | {} | {result} | {} | {policy} | {} |",
            s(r, "receipt"),
            s(r, "regulator"),
            s(r, "hardware_backed"),
            s(r, "verified_at")
        );
    }
    Ok(code)
}
