//! `quote verify` and `gpu verify`: hardware evidence on its own, verified offline.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use knox_hw::nvidia;
use knox_hw::policy::RegulatorPolicy;
use knox_hw::tdx::{self, Collateral};
use serde_json::json;

/// `knox quote …`.
#[derive(Debug, clap::Subcommand)]
pub enum QuoteCommand {
    /// Verify an Intel TDX/SGX quote offline against Intel's root, with stapled collateral.
    Verify(QuoteArgs),
}

/// Arguments of `knox quote verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   verified (and accepted by --policy)\n  1   rejected\n  3   verified, refused by --policy"
))]
pub struct QuoteArgs {
    /// The quote, raw or hex.
    #[arg(value_parser = crate::files::path, long)]
    pub quote: PathBuf,
    /// Collateral in dcap-qvl's JSON form.
    #[arg(value_parser = crate::files::path, long)]
    pub collateral: PathBuf,
    /// Verification time, RFC 3339 UTC (default: now). Use the attestation time.
    #[arg(long)]
    pub at: Option<String>,
    /// Regulator policy (TOML) to appraise the verified quote against.
    #[arg(value_parser = crate::files::path, long)]
    pub policy: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `knox gpu …`.
#[derive(Debug, clap::Subcommand)]
pub enum GpuCommand {
    /// Verify NVIDIA GPU attestation evidence offline against NVIDIA's device identity root.
    Verify(GpuArgs),
}

/// Arguments of `knox gpu verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   every GPU verified (and accepted by --policy)\n  1   a GPU rejected\n  3   verified, refused by --policy"
))]
pub struct GpuArgs {
    /// SPDM evidence (raw or hex) — or, without `--certs`, NVIDIA's serialized evidence JSON.
    #[arg(value_parser = crate::files::path, long)]
    pub evidence: PathBuf,
    /// PEM certificate chain, leaf first.
    #[arg(value_parser = crate::files::path, long)]
    pub certs: Option<PathBuf>,
    /// The nonce the evidence must carry (64 hex digits).
    #[arg(long)]
    pub nonce: Option<String>,
    /// Regulator policy (TOML) to appraise the verified evidence against.
    #[arg(value_parser = crate::files::path, long)]
    pub policy: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl QuoteCommand {
    /// Whether JSON output was asked for (then a failure is a JSON object).
    pub fn json(&self) -> bool {
        let Self::Verify(a) = self;
        a.json
    }
}

impl GpuCommand {
    /// Whether JSON output was asked for (then a failure is a JSON object).
    pub fn json(&self) -> bool {
        let Self::Verify(a) = self;
        a.json
    }
}

/// One GPU's evidence, certificate chain and expected nonce.
type GpuInput = (Vec<u8>, Vec<u8>, Option<[u8; 32]>);

/// Reads a file that is either hex text or raw bytes.
fn raw_or_hex(path: &Path, cap: crate::files::Cap) -> Result<Vec<u8>> {
    let bytes = crate::files::read_input(path, cap)?;
    let text: String = String::from_utf8_lossy(&bytes).split_whitespace().collect();
    if !text.is_empty()
        && text.len().is_multiple_of(2)
        && text.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Ok(hex::decode(text)?);
    }
    Ok(bytes)
}

fn policy(path: Option<&PathBuf>) -> Result<Option<RegulatorPolicy>> {
    path.map(|p| {
        let bytes = crate::files::read_input(p, crate::files::CONFIG)?;
        RegulatorPolicy::from_toml(&bytes)
            .map_err(|e| crate::files::bad_input(p, "a regulator policy", e))
    })
    .transpose()
}

/// Runs `knox quote verify`: exit 0 verified (and accepted), 1 rejected, 3 refused by the policy.
pub fn quote(cmd: &QuoteCommand) -> Result<i32> {
    let QuoteCommand::Verify(a) = cmd;
    let quote = raw_or_hex(&a.quote, crate::files::SMALL)?;
    let collateral = Collateral::from_json(&crate::files::read_input(
        &a.collateral,
        crate::files::COLLATERAL,
    )?)
    .map_err(|e| crate::files::bad_input(&a.collateral, "Intel collateral (dcap-qvl JSON)", e))?;
    let at = match &a.at {
        Some(s) => {
            UNIX_EPOCH
                + Duration::from_secs(knox_hw::time::parse_rfc3339_utc(s).ok_or_else(|| {
                    crate::files::usage(format!(
                        "--at `{s}` is not RFC 3339 UTC (e.g. 2025-01-31T12:00:00Z)"
                    ))
                })?)
        }
        None => SystemTime::now(),
    };
    let policy = policy(a.policy.as_ref())?;
    let v = match tdx::verify(&quote, &collateral, at) {
        Ok(v) => v,
        Err(e) => {
            report(
                a.json,
                json!({"result": "rejected", "reason": e.to_string()}),
                &format!("REJECTED: {e}"),
            );
            return Ok(1);
        }
    };
    let td = v.report.as_td();
    let mut facts = json!({
        "tee": format!("{:?}", v.tee), "quote_version": v.quote_version, "tcb_status": v.tcb_status.as_str(),
        "advisory_ids": v.advisory_ids, "fmspc": hex::encode(v.fmspc),
        "platform": {"dynamic_platform": v.platform.dynamic_platform, "cached_keys": v.platform.cached_keys, "smt_enabled": v.platform.smt_enabled},
        "at_within_collateral_window": v.collateral.at_within_window(),
        "report_data": hex::encode(v.report.report_data()),
        "mr_td": td.map(|t| hex::encode(t.mr_td)),
        "rtmr": td.map(|t| t.rtmr.iter().map(hex::encode).collect::<Vec<_>>()),
    });
    let verdict = policy.as_ref().map(|p| p.appraise_tdx(&v));
    let (code, result) = match &verdict {
        None => (0, "verified".to_string()),
        Some(Ok(())) => (0, "verified, accepted by the policy".to_string()),
        Some(Err(e)) => (3, format!("verified, REFUSED by the policy: {e}")),
    };
    if let Some(obj) = facts.as_object_mut() {
        obj.insert("result".into(), json!(result));
    }
    let text = format!(
        "{result}\n  {:?} quote v{}, TCB {}, advisories {:?}\n  collateral window holds at the verification time: {}\n  report_data {}",
        v.tee,
        v.quote_version,
        v.tcb_status.as_str(),
        v.advisory_ids,
        v.collateral.at_within_window(),
        hex::encode(v.report.report_data())
    );
    report(a.json, facts, &text);
    Ok(code)
}

/// Runs `knox gpu verify`: exit 0 when every GPU verifies (and is accepted), 1 rejected, 3 refused.
pub fn gpu(cmd: &GpuCommand) -> Result<i32> {
    let GpuCommand::Verify(a) = cmd;
    let expected = a
        .nonce
        .as_ref()
        .map(|n| -> Result<[u8; 32]> {
            let b = hex::decode(n)
                .map_err(|e| crate::files::usage(format!("--nonce must be hex: {e}")))?;
            b.try_into()
                .map_err(|_| crate::files::usage("--nonce must be 32 bytes (64 hex digits)"))
        })
        .transpose()?;
    let items: Vec<GpuInput> = match &a.certs {
        Some(certs) => vec![(
            raw_or_hex(&a.evidence, crate::files::GPU_EVIDENCE)?,
            crate::files::read_input(certs, crate::files::SMALL)?,
            expected,
        )],
        None => {
            let parsed = nvidia::parse_serialized(&crate::files::read_input(
                &a.evidence,
                crate::files::GPU_EVIDENCE,
            )?)
            .map_err(|e| {
                crate::files::bad_input(
                    &a.evidence,
                    "serialized GPU evidence (or pass --certs for raw SPDM evidence)",
                    e,
                )
            })?;
            if parsed.is_empty() {
                return Err(crate::error::fail(
                    crate::error::Kind::DataErr,
                    format!("no GPU evidence in `{}`", a.evidence.display()),
                ));
            }
            parsed
                .into_iter()
                .map(|e| {
                    let n = expected.or_else(|| e.nonce.as_slice().try_into().ok());
                    (e.evidence, e.certificate_chain_pem, n)
                })
                .collect()
        }
    };
    let policy = policy(a.policy.as_ref())?;
    let mut code = 0;
    let mut out = Vec::new();
    for (i, (evidence, certs, nonce)) in items.iter().enumerate() {
        match nvidia::verify(evidence, certs, *nonce) {
            Ok(v) => {
                let verdict = policy.as_ref().map(|p| p.appraise_gpu(&v));
                let result = match &verdict {
                    None => "verified".to_string(),
                    Some(Ok(())) => "verified, accepted by the policy".to_string(),
                    Some(Err(e)) => {
                        code = code.max(3);
                        format!("verified, REFUSED by the policy: {e}")
                    }
                };
                let revoked: Vec<String> = v
                    .revocation
                    .iter()
                    .map(|r| format!("{:?}", r.status))
                    .collect();
                out.push(json!({"gpu": i, "result": result, "driver_version": v.driver_version, "vbios_version": v.vbios_version,
                    "fwid": hex::encode(v.fwid), "nonce_checked": v.nonce_checked, "measurements": v.measurements.len(), "revocation": revoked}));
            }
            Err(e) => {
                code = 1;
                out.push(json!({"gpu": i, "result": "rejected", "reason": e.to_string()}));
            }
        }
    }
    let field =
        |g: &serde_json::Value, k: &str| g.get(k).map(ToString::to_string).unwrap_or_default();
    let text = out
        .iter()
        .map(|g| match g.get("reason").and_then(|r| r.as_str()) {
            Some(r) => format!("gpu {}: rejected: {r}", field(g, "gpu")),
            None => format!(
                "gpu {}: {} (driver {}, vbios {}, nonce checked {}, revocation {})",
                field(g, "gpu"),
                g.get("result").and_then(|r| r.as_str()).unwrap_or_default(),
                field(g, "driver_version"),
                field(g, "vbios_version"),
                field(g, "nonce_checked"),
                field(g, "revocation")
            ),
        })
        .collect::<Vec<_>>()
        .join("\n");
    report(a.json, json!(out), &text);
    Ok(code)
}

fn report(as_json: bool, v: serde_json::Value, text: &str) {
    if as_json {
        crate::outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        crate::outln!("{text}");
    }
}
