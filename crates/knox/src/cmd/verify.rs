//! `knox verify`: offline verification of a bundle or journal.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use knox_verify::{Options, Report};

/// Arguments of `knox verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 complete, 1 tampered, 2 prefix (unfinished run, e.g. a journal), \
3 refused (evidence not accepted: simulated without --allow-simulated, or an unknown toolkit manifest), \
4 the file could not be read as evidence, 64 usage error."
)]
pub struct VerifyArgs {
    /// Evidence bundle (`.json`) or run journal (`.journal.jsonl`).
    pub bundle: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// INSECURE, not recommended: accept simulated platform evidence, which no hardware
    /// vouches for. Only for development machines without a TEE.
    #[arg(long)]
    pub allow_simulated: bool,
    /// Toolkit needs file the APM was derived from (default: the embedded one).
    #[arg(long, value_name = "TOML")]
    pub needs: Option<PathBuf>,
}

/// Verifies and prints; returns the process exit code.
pub fn run(args: &VerifyArgs) -> Result<i32> {
    let bytes = std::fs::read(&args.bundle)
        .with_context(|| format!("reading `{}`", args.bundle.display()))?;
    let manifest = match &args.needs {
        Some(p) => {
            let needs =
                std::fs::read_to_string(p).with_context(|| format!("reading `{}`", p.display()))?;
            knox_policy::ToolkitManifest::from_sources(knox_dataset::embedded::TOOLS_JSON, &needs)?
        }
        None => crate::session::embedded_manifest()?,
    };
    let opts = Options {
        dangerous_allow_simulated: args.allow_simulated,
    };
    let report = match verify_bytes(&bytes, &manifest, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: `{}`: {e}", args.bundle.display());
            return Ok(4);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(report.outcome.exit_code())
}

/// Verifies a bundle or a journal from its bytes.
pub fn verify_bytes(
    bytes: &[u8],
    manifest: &knox_policy::ToolkitManifest,
    opts: Options,
) -> Result<Report, knox_verify::ReadError> {
    if knox_verify::journal::is_journal(bytes) {
        return knox_verify::journal::verify_journal(bytes, manifest, opts);
    }
    let bundle = knox_verify::parse_bundle(bytes)?;
    Ok(knox_verify::verify_bundle(&bundle, manifest, opts))
}
