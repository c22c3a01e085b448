//! `knox contract new|sign|check|show`, `knox approve` and `knox demo contracts`:
//! signed capability contracts (`knox-contract`).

use std::path::{Path, PathBuf};

use anyhow::Result;
use knox_contract::format::Contract;
use knox_contract::signed::{self, Verified};
use knox_contract::{State, approval, decide};
use knox_types::bundle::PublicKey;
use serde_json::{Value, json};

use knox_command::error::{Kind, fail};
use knox_command::files::{CONFIG, KEY, SMALL, bad_input, read_input, write_file};

/// `knox contract …`.
#[derive(Debug, clap::Subcommand)]
pub enum ContractCommand {
    /// Write a starting contract (unsigned JSON) to edit, with `wc` pinned by its digest.
    #[command(after_help = knox_command::exit_codes!("  0   written"))]
    New(NewArgs),
    /// Validate a contract and sign it with an authority key (a DSSE envelope).
    #[command(after_help = knox_command::exit_codes!("  0   signed\n  65  the contract is invalid"))]
    Sign(SignArgs),
    /// Verify a signed contract under the authority's public key; with `--action`,
    /// decide that action under it.
    #[command(after_help = knox_command::exit_codes!("  0   valid (and the action allowed)\n  1   the action is denied or pending\n  65  the contract does not verify"))]
    Check(CheckArgs),
    /// Print a signed contract's capabilities, budget and approvers.
    #[command(after_help = knox_command::exit_codes!("  0   printed\n  65  the contract does not verify"))]
    Show(CheckArgs),
}

/// Arguments of `knox contract new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The contract file to write.
    #[arg(long, value_parser = knox_command::files::path)]
    pub out: PathBuf,
    /// Days it stays valid from now.
    #[arg(long, default_value_t = 30)]
    pub valid_days: u64,
}

/// Arguments of `knox contract sign`.
#[derive(Debug, clap::Args)]
pub struct SignArgs {
    /// The contract (JSON).
    #[arg(value_parser = knox_command::files::path)]
    pub contract: PathBuf,
    /// The authority's private key (`knox keygen`).
    #[arg(long, value_parser = knox_command::files::path)]
    pub key: PathBuf,
    /// The signed contract to write.
    #[arg(long, value_parser = knox_command::files::path)]
    pub out: PathBuf,
}

/// Arguments of `knox contract check` and `show`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The signed contract.
    #[arg(value_parser = knox_command::files::path)]
    pub contract: PathBuf,
    /// The authority's public key (`knox keygen`'s `.pub`).
    #[arg(long, value_parser = knox_command::files::path)]
    pub authority: PathBuf,
    /// An action (`{"tool", "params"}`) to decide under the contract.
    #[arg(long, value_parser = knox_command::files::path)]
    pub action: Option<PathBuf>,
    /// An approval token for the action (`knox approve`).
    #[arg(long, value_parser = knox_command::files::path)]
    pub approval: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `knox approve`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!("  0   the token is written"))]
pub struct ApproveArgs {
    /// The pending action (`{"tool", "params"}`) to approve.
    #[arg(value_parser = knox_command::files::path)]
    pub pending: PathBuf,
    /// The signed contract it runs under.
    #[arg(long, value_parser = knox_command::files::path)]
    pub contract: PathBuf,
    /// The authority's public key.
    #[arg(long, value_parser = knox_command::files::path)]
    pub authority: PathBuf,
    /// The approver's private key (`knox keygen`).
    #[arg(long, value_parser = knox_command::files::path)]
    pub key: PathBuf,
    /// The approver's name in the contract.
    #[arg(long)]
    pub name: String,
    /// Seconds the token is valid (capped by the contract).
    #[arg(long, default_value_t = 60)]
    pub ttl: u64,
    /// The token file to write.
    #[arg(long, value_parser = knox_command::files::path)]
    pub out: PathBuf,
}

/// Arguments of `knox demo contracts`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!("  0   every hostile action escaped without Knox and was blocked with it, every legitimate one ran\n  1   some row did not"))]
pub struct DemoContractsArgs {
    /// Working folder (default: a fresh one under the temporary directory).
    #[arg(long, value_parser = knox_command::files::path)]
    pub out: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Internal: the without-Knox half, inside its throwaway namespaces.
    #[arg(long, hide = true, value_parser = knox_command::files::path)]
    pub inside_namespace: Option<PathBuf>,
}

/// Never replaces an existing file (a contract or a token is evidence of a decision).
fn refuse_existing(p: &Path) -> Result<()> {
    if p.symlink_metadata().is_ok() {
        return Err(fail(
            Kind::CantCreate,
            format!("`{}` exists: refusing to overwrite it", p.display()),
        ));
    }
    Ok(())
}

fn authority(p: &Path) -> Result<PublicKey> {
    let bytes = read_input(p, KEY)?;
    knox_types::json::from_slice(&bytes)
        .map_err(|e| bad_input(p, "a public key written by `knox keygen`", e))
}

fn verified(contract: &Path, auth: &Path) -> Result<Verified> {
    let key = authority(auth)?;
    let bytes = read_input(contract, CONFIG)?;
    signed::verify_bytes(&bytes, &key).map_err(|e| bad_input(contract, "a signed contract", e))
}

/// What `knox run --contract` runs with: the contract, verified under the authority
/// the user named and valid now; the broker's host for its tools; where approval
/// tokens come from.
#[derive(Debug)]
pub struct RunContract {
    /// The signed contract, verified.
    pub verified: Verified,
    /// Its four tools, executed by the broker's `ContractExecutor`.
    pub host: knox_broker::contract::ContractHost,
    /// `--approvals DIR` (pending requests written to `<out>/pending/`).
    pub approvals: Option<knox_engine::contract::ApprovalDir>,
}

/// The flags that bound `knox run` or `knox gateway mcp` by a signed capability
/// contract.
#[derive(Debug, Clone, clap::Args)]
pub struct ContractFlags {
    /// Bound every run (every gateway session) by a signed capability contract (`knox
    /// contract sign`, `docs/contracts.md`) instead of a toolkit manifest: the tools
    /// are the contract's four (`ContractReadFile`, `ContractWriteFile`, `ContractExec`,
    /// `ContractHttp`), each proposal must pass the contract (capability, path, argv,
    /// endpoint, budget, action cap, approval) and the plan, and allowed ones are
    /// executed for real by the broker's contract executor (files beneath the
    /// capability root, pinned binaries in the kernel sandbox, HTTP to the contract's
    /// endpoints). The APM names the contract's hash; each bundle embeds the signed
    /// contract. A gateway session opened without a prompt has no plan: the contract
    /// alone bounds it.
    #[arg(value_parser = knox_command::files::path, long, value_name = "C.signed.json", requires = "contract_authority")]
    pub contract: Option<PathBuf>,
    /// With `--contract`: the authority's public key (`knox keygen`'s `.pub`) the
    /// contract must be signed by; a contract it did not sign is refused (65).
    #[arg(value_parser = knox_command::files::path, long, value_name = "AUTH.pub", requires = "contract")]
    pub contract_authority: Option<PathBuf>,
    /// With `--contract`: approval tokens for high-impact actions, `DIR/<H(action)
    /// hex>.json` (`knox approve`). A high-impact action without one is pending: its
    /// request is written to `<out>/pending/<H(action) hex>.json` and DIR polled for
    /// `--approval-timeout-ms`; no token in time leaves it recorded as pending (blocked).
    #[arg(value_parser = knox_command::files::path, long, value_name = "DIR", requires = "contract")]
    pub approvals: Option<PathBuf>,
    /// With `--approvals`: how long a pending action waits for its token (0: not at all).
    #[arg(long, value_name = "MS", default_value_t = 0, requires = "approvals")]
    pub approval_timeout_ms: u64,
}

impl ContractFlags {
    /// Without `--contract`, `None`. Otherwise verifies the contract under the
    /// authority (65 when it is malformed, signed by another key, or not valid now)
    /// and starts the host of its tools (69 when the kernel sandbox is unavailable):
    /// pending requests go to `out/pending/`, executables' scratch directories to
    /// `out/contract-scratch/`.
    pub fn for_run(
        &self,
        out: &Path,
        degraded: &[knox_sandbox::Degraded],
    ) -> Result<Option<RunContract>> {
        let (Some(contract), Some(authority)) = (&self.contract, &self.contract_authority) else {
            return Ok(None);
        };
        for_run(&RunContractArgs {
            contract,
            authority,
            approvals: self.approvals.as_deref(),
            approval_timeout_ms: self.approval_timeout_ms,
            out,
            degraded,
        })
        .map(Some)
    }
}

/// How a contract run is set up (from [`ContractFlags`]).
#[derive(Debug, Clone, Copy)]
struct RunContractArgs<'a> {
    contract: &'a Path,
    authority: &'a Path,
    approvals: Option<&'a Path>,
    approval_timeout_ms: u64,
    out: &'a Path,
    degraded: &'a [knox_sandbox::Degraded],
}

fn for_run(a: &RunContractArgs<'_>) -> Result<RunContract> {
    let key = authority(a.authority)?;
    let bytes = read_input(a.contract, CONFIG)?;
    let verified = signed::verify_bytes(&bytes, &key).map_err(|e| {
        bad_input(
            a.contract,
            &format!(
                "a capability contract signed by the authority `{}` (key id {})",
                a.authority.display(),
                knox_attest::key::key_id(&key.public_key.0)
            ),
            e,
        )
    })?;
    let now = knox_attest::grant::now_ms();
    let c = &verified.contract;
    if now < c.valid_from_ms || now > c.valid_until_ms {
        return Err(fail(
            Kind::DataErr,
            format!(
                "`{}`: capability contract `{}` is not valid now (valid from {} to {} Unix ms, now {now}): sign a new one",
                a.contract.display(),
                c.id,
                c.valid_from_ms,
                c.valid_until_ms
            ),
        ));
    }
    let host = knox_broker::contract::ContractHost::new(
        verified.clone(),
        a.out.join("contract-scratch"),
        knox_sandbox::SandboxConfig::default(),
    )
    .map_err(|e| {
        fail(
            Kind::Unavailable,
            format!("starting the kernel sandbox for the contract's executables (needs Landlock, Linux 5.13+, and seccomp user notification): {e}"),
        )
    })?
    .accept_degraded(a.degraded.iter().copied());
    let approvals = a.approvals.map(|dir| knox_engine::contract::ApprovalDir {
        dir: dir.to_path_buf(),
        pending: Some(a.out.join("pending")),
        timeout: std::time::Duration::from_millis(a.approval_timeout_ms),
    });
    Ok(RunContract {
        verified,
        host,
        approvals,
    })
}

/// Runs `knox contract …`.
pub fn run(c: &ContractCommand) -> Result<i32> {
    match c {
        ContractCommand::New(a) => {
            refuse_existing(&a.out)?;
            let now = knox_attest::grant::now_ms();
            let pin = knox_broker::pinned::hash_path(Path::new("/usr/bin/wc"))
                .map(|d| d.to_hex())
                .unwrap_or_else(|_| "0".repeat(64));
            let contract = knox_contract::example::template(
                now,
                now.saturating_add(a.valid_days.saturating_mul(86_400_000)),
                &pin,
            );
            write_file(&a.out, serde_json::to_vec_pretty(&contract)?)?;
            knox_command::outln!(
                "contract template written to {} (edit, then `knox contract sign`)",
                a.out.display()
            );
            Ok(0)
        }
        ContractCommand::Sign(a) => {
            let bytes = read_input(&a.contract, CONFIG)?;
            let contract: Contract = knox_types::json::from_slice(&bytes)
                .map_err(|e| bad_input(&a.contract, "a contract", e))?;
            contract
                .validate()
                .map_err(|e| bad_input(&a.contract, "a valid contract", e))?;
            let key = knox_verify_cli::keys::load(&a.key)?;
            let env =
                signed::sign(&key, &contract).map_err(|e| fail(Kind::Software, e.to_string()))?;
            write_file(&a.out, serde_json::to_vec_pretty(&env)?)?;
            knox_command::outln!("contract {} signed: {}", contract.hash(), a.out.display());
            Ok(0)
        }
        ContractCommand::Check(a) => {
            let v = verified(&a.contract, &a.authority)?;
            let Some(action) = &a.action else {
                if a.json {
                    knox_command::outln!("{}", json!({"contract": v.hash, "valid": true}));
                } else {
                    knox_command::outln!("contract {} verifies under the authority key", v.hash);
                }
                return Ok(0);
            };
            let act: Value = knox_types::json::from_slice(&read_input(action, SMALL)?)
                .map_err(|e| bad_input(action, "JSON", e))?;
            let tok: Option<Value> = match &a.approval {
                Some(p) => Some(
                    knox_types::json::from_slice(&read_input(p, SMALL)?)
                        .map_err(|e| bad_input(p, "JSON", e))?,
                ),
                None => None,
            };
            let d = decide(
                &v.contract,
                &v.hash,
                &act,
                tok.as_ref(),
                &State::default(),
                knox_attest::grant::now_ms(),
            );
            knox_command::outln!("{}", serde_json::to_string_pretty(&d)?);
            Ok(if d.is_allow() { 0 } else { 1 })
        }
        ContractCommand::Show(a) => {
            let v = verified(&a.contract, &a.authority)?;
            if a.json {
                knox_command::outln!(
                    "{}",
                    serde_json::to_string_pretty(&json!({"hash": v.hash, "contract": v.contract}))?
                );
                return Ok(0);
            }
            show(&v);
            Ok(0)
        }
    }
}

fn show(v: &Verified) {
    let c = &v.contract;
    knox_command::outln!("contract {} ({}), hash {}", c.id, c.format, v.hash);
    knox_command::outln!(
        "  valid {} .. {} ms; budget {} cents; {} actions",
        c.valid_from_ms,
        c.valid_until_ms,
        c.budget_cents,
        c.max_actions
    );
    for (id, d) in &c.directories {
        knox_command::outln!(
            "  dir  {id:<16} {:?} {} ({} c, {:?})",
            d.access,
            d.root,
            d.cost_cents,
            d.impact
        );
    }
    for (id, e) in &c.executables {
        knox_command::outln!(
            "  exe  {id:<16} {}/{} sha256 {} ({} templates, {} c, {:?})",
            e.root,
            e.path,
            e.sha256,
            e.argv.len(),
            e.cost_cents,
            e.impact
        );
    }
    for (id, e) in &c.endpoints {
        knox_command::outln!(
            "  net  {id:<16} {}://{}:{}{} {:?} ({} c, {:?})",
            e.scheme.as_str(),
            e.host,
            e.port,
            e.path_prefix,
            e.methods,
            e.cost_cents,
            e.impact
        );
    }
    for (name, k) in &c.approvers {
        knox_command::outln!("  approver {name}: {k}");
    }
    knox_command::outln!("  approval required for: {:?}", c.approval_required);
}

/// Runs `knox approve`.
pub fn approve(a: &ApproveArgs) -> Result<i32> {
    refuse_existing(&a.out)?;
    let v = verified(&a.contract, &a.authority)?;
    let act: knox_types::Action = knox_types::json::from_slice(&read_input(&a.pending, SMALL)?)
        .map_err(|e| bad_input(&a.pending, "an action", e))?;
    let key = knox_verify_cli::keys::load(&a.key)?;
    if v.contract.approver(&a.name).map(|k| k.public_key.0) != Some(key.public_bytes().to_vec()) {
        return Err(fail(
            Kind::DataErr,
            format!(
                "`{}` is not an approver of this contract with this key",
                a.name
            ),
        ));
    }
    let ttl = a
        .ttl
        .saturating_mul(1000)
        .min(v.contract.max_approval_ttl_ms);
    let tok = approval::sign(
        &key,
        &a.name,
        v.hash,
        act.hash(),
        knox_attest::grant::now_ms(),
        ttl,
    )
    .map_err(|e| fail(Kind::Software, e.to_string()))?;
    write_file(&a.out, serde_json::to_vec_pretty(&tok)?)?;
    knox_command::outln!(
        "approval of {} written to {} (valid {} s, single use)",
        act.hash(),
        a.out.display(),
        ttl / 1000
    );
    Ok(0)
}

/// Runs `knox demo contracts`.
pub fn demo(a: &DemoContractsArgs) -> Result<i32> {
    if let Some(root) = &a.inside_namespace {
        let rows = crate::contract_demo::inside_namespace(root)?;
        knox_command::outln!("{}", serde_json::to_string(&rows)?);
        return Ok(0);
    }
    let out = a.out.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("knox-demo-contracts-{}", std::process::id()))
    });
    let exe = std::env::current_exe().map_err(|e| fail(Kind::Software, e.to_string()))?;
    let report = crate::contract_demo::run_demo(&exe, &out)?;
    if a.json {
        knox_command::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        knox_command::outln!(
            "Knox demo — signed capability contracts (EBP-CA scenarios), in {}\n",
            out.display()
        );
        knox_command::out!("{}", crate::contract_demo::table(&report));
        if let Some(why) = &report.without_unavailable {
            knox_command::outln!("\nwithout Knox: not run ({why})");
        }
        for (i, j) in report.journals.iter().enumerate() {
            if j.status != "complete" {
                knox_command::outln!("journal {i}: {}", j.status);
            }
        }
        knox_command::outln!(
            "\nthe with-Knox half as Knox runs (knox_engine::Session bounded by the contract, the broker's contract executor as tool host), one bundle each in {}:\n",
            out.join("with-knox-runs/bundles").display()
        );
        knox_command::out!("{}", crate::contract_demo::bundle_table(&report));
        knox_command::outln!(
            "\n{} session journals verified ({} complete): every decision recomputed from the signed contract",
            report.journals.len(),
            report
                .journals
                .iter()
                .filter(|j| j.status == "complete")
                .count()
        );
        knox_command::outln!("{}", if report.passed() { "PASS" } else { "FAIL" });
    }
    Ok(if report.passed() { 0 } else { 1 })
}
