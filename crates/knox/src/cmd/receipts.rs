//! `knox receipts`: checks regulators' receipts against a bundle.

use std::path::PathBuf;

use anyhow::{Context as _, Result};

/// Arguments of `knox receipts`.
#[derive(Debug, clap::Args)]
pub struct ReceiptsArgs {
    /// The bundle the receipts are about.
    pub bundle: PathBuf,
    /// Receipt files (`knox verify --key … --receipt …`).
    #[arg(required = true)]
    pub receipts: Vec<PathBuf>,
}

/// Shows who accepted what; exit 0 when every receipt checks out, 1 otherwise.
pub fn run(args: &ReceiptsArgs) -> Result<i32> {
    let bundle = super::read_input(&args.bundle)
        .with_context(|| format!("reading `{}`", args.bundle.display()))?;
    crate::outln!(
        "bundle {} (sha256 {})",
        args.bundle.display(),
        knox_types::Digest::sha256(&bundle)
    );
    crate::outln!(
        "| receipt | regulator key | result | hardware-backed | policy sha256 | verified at |"
    );
    crate::outln!("|---|---|---|---|---|---|");
    let mut bad = 0;
    for path in &args.receipts {
        let bytes =
            super::read_input(path).with_context(|| format!("reading `{}`", path.display()))?;
        match knox_verify::receipt::check(&bytes, &bundle) {
            Ok(c) => {
                let p = &c.predicate;
                let policy = p
                    .policy_sha256
                    .map_or_else(|| "none".to_string(), |d| d.to_hex()[..16].to_string());
                let result = match &p.reason {
                    Some(r) => format!("{} ({r})", p.result),
                    None => p.result.clone(),
                };
                crate::outln!(
                    "| {} | {} | {result} | {} | {policy} | {} |",
                    path.display(),
                    c.regulator,
                    p.hardware_backed,
                    p.verified_at
                );
            }
            Err(e) => {
                bad += 1;
                crate::outln!("| {} | INVALID: {e} | | | | |", path.display());
            }
        }
    }
    Ok(if bad == 0 { 0 } else { 1 })
}
