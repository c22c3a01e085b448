//! `knox-verify`: the offline verifier a regulator runs. The same commands, options,
//! output and exit codes as `knox verify`, `knox receipts`, `knox prove`, `knox quote
//! verify`, `knox gpu verify`, `knox regulations show` and `knox keygen` (one
//! implementation, in this crate's library), in a binary that links no model, network,
//! sandbox or async code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use knox_verify_cli::{cli, hardware, keys, prove, receipts, regulations, verify};

/// Knox's offline verifier: checks evidence bundles and run journals, verification
/// receipts, inclusion proofs and hardware evidence, with no network and no access to
/// the prover.
#[derive(Debug, Parser)]
#[command(name = "knox-verify", version = knox_verify_cli::VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Verify an evidence bundle or run journal offline.
    Verify(verify::VerifyArgs),
    /// Check regulators' verification receipts against a bundle and show who accepted what.
    Receipts(receipts::ReceiptsArgs),
    /// Inclusion proofs: show one node of a bundle against its signed structure root.
    #[command(subcommand)]
    Prove(prove::ProveCommand),
    /// Intel TDX/SGX quotes.
    #[command(subcommand)]
    Quote(hardware::QuoteCommand),
    /// NVIDIA GPU attestation evidence.
    #[command(subcommand)]
    Gpu(hardware::GpuCommand),
    /// The GDPR/HIPAA regulation policy set (Cedar) verdicts are recomputed with.
    #[command(subcommand)]
    Regulations(regulations::RegulationsCommand),
    /// Create a regulator key pair (for signing verification receipts).
    Keygen(keys::KeygenArgs),
}

fn main() -> ExitCode {
    let cli: Cli = match cli::parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (result, json) = match &cli.command {
        Command::Verify(a) => (verify::run(a), a.json()),
        Command::Receipts(a) => (receipts::run(a), a.json),
        Command::Prove(c) => (prove::run(c), c.json()),
        Command::Quote(c) => (hardware::quote(c), c.json()),
        Command::Gpu(c) => (hardware::gpu(c), c.json()),
        Command::Regulations(c) => (regulations::run(c), c.json()),
        Command::Keygen(a) => (keys::keygen(a), false),
    };
    cli::finish(result, json)
}
