//! `knox verify`: offline verification of a bundle or journal.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use knox_hw::policy::RegulatorPolicy;
use knox_verify::{Options, Report};

/// Arguments of `knox verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit codes: 0 complete, 1 tampered, 2 prefix (unfinished run, e.g. a journal), \
3 refused (evidence not accepted: simulated without --allow-simulated, hardware the policy does not accept, \
a regulation policy set other than the verifier's, or an unknown toolkit manifest), 4 the file could not be read as evidence, 64 usage error."
)]
pub struct VerifyArgs {
    /// Evidence bundle (`.json`) or run journal (`.journal.jsonl`).
    pub bundle: PathBuf,
    /// Print the report as JSON.
    #[arg(long, conflicts_with = "ear")]
    pub json: bool,
    /// Print the result as an EAT Attestation Result (IETF RATS EAR) claims set.
    #[arg(long)]
    pub ear: bool,
    /// INSECURE, not recommended: accept simulated platform evidence, which no hardware
    /// vouches for. Only for development machines without a TEE.
    #[arg(long)]
    pub allow_simulated: bool,
    /// The regulator's policy (TOML): accepted TCB statuses, platform flags, reference
    /// measurements, GPU driver/VBIOS versions, model weights hashes.
    #[arg(long, value_name = "TOML")]
    pub policy: Option<PathBuf>,
    /// Toolkit needs file the APM was derived from (default: the embedded one).
    #[arg(long, value_name = "TOML")]
    pub needs: Option<PathBuf>,
    /// The regulator's regulation policy set: a directory with `knox.cedarschema` and,
    /// per regulation, a manifest and Cedar file (default: the set embedded in this
    /// build, the repository's `regulations/`). Regulation verdicts are recomputed with
    /// it; a bundle whose APM names another set is refused.
    #[arg(long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// The regulator's private key (`knox keygen`), to sign a receipt with.
    #[arg(long, value_name = "KEY", requires = "receipt")]
    pub key: Option<PathBuf>,
    /// Write a signed verification receipt here.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub receipt: Option<PathBuf>,
}

/// Verifies and prints; returns the process exit code.
pub fn run(args: &VerifyArgs) -> Result<i32> {
    let bytes = super::read_input(&args.bundle)
        .with_context(|| format!("reading `{}`", args.bundle.display()))?;
    let manifest = match &args.needs {
        Some(p) => {
            let needs =
                std::fs::read_to_string(p).with_context(|| format!("reading `{}`", p.display()))?;
            knox_policy::ToolkitManifest::from_sources(knox_dataset::embedded::TOOLS_JSON, &needs)?
        }
        None => crate::session::embedded_manifest()?,
    };
    let policy_bytes = args
        .policy
        .as_ref()
        .map(std::fs::read)
        .transpose()
        .context("reading --policy")?;
    let policy = policy_bytes
        .as_deref()
        .map(RegulatorPolicy::from_toml)
        .transpose()
        .context("--policy")?;
    let norms = args
        .policy_set
        .as_deref()
        .map(knox_regulation::Norms::load_dir)
        .transpose()
        .context("--policy-set")?;
    let opts = Options {
        dangerous_allow_simulated: args.allow_simulated,
        policy: policy.as_ref(),
        norms: norms.as_ref(),
    };
    let report = match verify_bytes(&bytes, &manifest, opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: `{}`: {e}", args.bundle.display());
            return Ok(4);
        }
    };
    let now = knox_attest::hardware::now_unix();
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.ear {
        let policy_id = policy_bytes
            .as_deref()
            .map(|b| format!("sha256:{}", knox_types::Digest::sha256(b)));
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&knox_verify::ear::ear(
                &report,
                now,
                policy_id.as_deref()
            ))?
        );
    } else {
        crate::out!("{report}");
    }
    if let (Some(key), Some(out)) = (&args.key, &args.receipt) {
        let key = super::keys::load(key)?;
        let receipt =
            knox_verify::receipt::issue(&key, &bytes, &report, policy_bytes.as_deref(), now)?;
        std::fs::write(out, serde_json::to_vec_pretty(&receipt)?)
            .with_context(|| format!("writing `{}`", out.display()))?;
        eprintln!(
            "receipt by key {} written to {}",
            key.key_id(),
            out.display()
        );
    }
    Ok(report.outcome.exit_code())
}

/// Verifies a bundle or a journal from its bytes.
pub fn verify_bytes(
    bytes: &[u8],
    manifest: &knox_policy::ToolkitManifest,
    opts: Options<'_>,
) -> Result<Report, knox_verify::ReadError> {
    if knox_verify::journal::is_journal(bytes) {
        return knox_verify::journal::verify_journal(bytes, manifest, opts);
    }
    let bundle = knox_verify::parse_bundle(bytes)?;
    Ok(knox_verify::verify_bundle(&bundle, manifest, opts))
}
