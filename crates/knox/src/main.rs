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
    /// Run InjecAgent flows bundled for a workload; write one evidence bundle per bundle.
    Run(cmd::run::RunArgs),
    /// Verify an evidence bundle or run journal offline.
    Verify(cmd::verify::VerifyArgs),
    /// Measure the monitor's overhead per workload beside the paper's figures.
    Bench(cmd::bench::BenchArgs),
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
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(4)
        }
    }
}
