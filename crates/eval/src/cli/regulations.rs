//! `knox regulations`: the regulation policy set, as a reviewer reads it.

use std::path::PathBuf;

use anyhow::Result;

use knox_command::error::{Kind, fail};

/// Loads the set `--policy-set` names, or the embedded one (shared with `knox-verify`).
pub use knox_verify_cli::regulations::load;

/// `knox regulations` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum RegulationsCommand {
    /// Load a policy set — every Cedar policy validated against the Knox schema, every
    /// policy's must-match and must-not-match examples run, the set refused if one
    /// fails — and list its regulations, policies, the provisions they cite, and its hash
    /// (the hash an APM names and `knox verify` compares).
    Show(knox_verify_cli::regulations::ShowArgs),
    /// Decide flows given from outside a run (one JSON flow φ, or JSON Lines) in the
    /// public format of `docs/regulation.md`; `--explain` for the deciding policies,
    /// the facts left unstated, the obligations and what would make a flow compliant.
    /// With `--from-text CASE.txt --judge SPEC`, a judge fills the flow's fields from a
    /// prose account and the norms decide it.
    Decide(Box<DecideArgs>),
    /// Before a run: does any disclosure the plan (an APM, or a bundle's APM) permits
    /// exceed the regulation baseline for some content the plan lets reach it? Decides
    /// every combination of the information types earlier planned calls return; prints
    /// a counterexample flow per disclosure that can be non-compliant. Exit 0 when none,
    /// 1 when a counterexample exists.
    Analyze(AnalyzeArgs),
}

/// Arguments of `knox regulations decide`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!(
    "  0   no flow is non-compliant\n  1   a flow is non-compliant\n  65  an unreadable flow or account\n  69  the judge could not be opened or did not answer"
))]
pub struct DecideArgs {
    /// The flow file (one JSON flow, or JSON Lines), or `-` for standard input.
    #[arg(
        value_parser = knox_command::files::path_or_stdin,
        value_name = "FLOW.json|-",
        required_unless_present = "from_text",
        conflicts_with = "from_text"
    )]
    pub file: Option<PathBuf>,
    /// Decide the one disclosure a prose account describes (a text file, or `-`):
    /// `--judge` fills the public flow format's fields from the text alone (the prompt
    /// `regulations/extract-prompt.md`, k-shot from GoldCoin's training split), the
    /// norms decide. The output records the text's SHA-256, the judge model, the
    /// prompt's version and digest, and the flow the judge filled in (`from_text`).
    #[arg(long, value_name = "CASE.txt|-", value_parser = knox_command::files::path_or_stdin, requires = "judge")]
    pub from_text: Option<PathBuf>,
    /// The judge for `--from-text`: `local:NAME`, `local:PATH.gguf` (a build with
    /// `--features knox/local`) or `openai:URL#MODEL` (any OpenAI-compatible server).
    #[arg(long, value_name = "SPEC", requires = "from_text", value_parser = knox_models::cli::judge_spec)]
    pub judge: Option<knox_models::ModelSpec>,
    /// With `--from-text`: the regulations to decide under, comma-separated (default:
    /// every one of the set).
    #[arg(long, value_delimiter = ',', requires = "from_text")]
    pub regulations: Vec<String>,
    /// With `--from-text`: the jurisdiction of a party the judge places nowhere (ISO
    /// 3166-1 alpha-2).
    #[arg(long, default_value = "unknown", requires = "from_text")]
    pub jurisdiction: String,
    /// The policy set directory (default: the embedded one).
    #[arg(value_parser = knox_command::files::path, long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// Explain each decision: deciding policies with provision and summary, facts
    /// left unstated, obligations, facts that would make a non-compliant flow compliant.
    #[arg(long)]
    pub explain: bool,
    /// Print one JSON object per flow (JSON Lines), in input order.
    #[arg(long)]
    pub json: bool,
    /// The model cache (for a `local:` judge).
    #[command(flatten)]
    pub cache: knox_models::cli::CacheArgs,
}

fn decide(a: &DecideArgs) -> Result<i32> {
    let (Some(path), Some(spec)) = (&a.from_text, &a.judge) else {
        let file = a.file.clone().ok_or_else(|| {
            knox_command::files::usage("a flow file, or --from-text with --judge")
        })?;
        return knox_verify_cli::regulations::decide(&knox_verify_cli::regulations::DecideArgs {
            file,
            policy_set: a.policy_set.clone(),
            explain: a.explain,
            json: a.json,
        });
    };
    let bytes = knox_command::files::read_input_or_stdin(path, knox_command::files::EVIDENCE)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        fail(
            Kind::DataErr,
            format!("`{}` is not UTF-8 text", path.display()),
        )
    })?;
    if text.trim().is_empty() || text.len() > knox_regulation::extract::MAX_TEXT {
        return Err(fail(
            Kind::DataErr,
            format!(
                "`{}`: an account must be non-empty text of at most {} bytes",
                path.display(),
                knox_regulation::extract::MAX_TEXT
            ),
        ));
    }
    let norms = load(a.policy_set.as_deref())?;
    let cache_dir = knox_models::cli::absolute_cache_dir(a.cache.cache_dir.as_deref())?;
    let mut locals = Vec::new();
    let judge = knox_models::cli::open_judge(spec, cache_dir.as_deref(), &mut locals)?;
    let (phi, record) =
        knox_regulation::extract::read(&judge, &text, &a.regulations, &a.jurisdiction)
            .map_err(|e| fail(Kind::Unavailable, e))?;
    let d = norms.decide_phi(&phi, a.explain).map_err(|e| {
        knox_command::files::bad_input(path, "an account the policy set can decide", e)
    })?;
    knox_verify_cli::regulations::print_decision(
        &d,
        0,
        a.json,
        Some(("from_text", serde_json::to_value(&record)?)),
    )?;
    if !a.json {
        knox_command::outln!(
            "  read from text (sha256 {}) by {} ({}): {}",
            record.text_sha256,
            record.model,
            record.prompt_version,
            serde_json::to_string(&record.phi)?
        );
    }
    Ok(i32::from(d.verdict == "non_compliant"))
}

/// Arguments of `knox regulations analyze`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!(
    "  0   no disclosure the plan permits can exceed the baseline\n  1   a counterexample exists (printed)"
))]
pub struct AnalyzeArgs {
    /// An evidence bundle or an APM (JSON).
    #[arg(value_parser = knox_command::files::path)]
    pub file: PathBuf,
    /// The policy set directory (default: the embedded one); it must be the set the
    /// APM names.
    #[arg(value_parser = knox_command::files::path, long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `knox regulations` subcommand.
pub fn run(c: &RegulationsCommand) -> Result<i32> {
    match c {
        RegulationsCommand::Show(a) => knox_verify_cli::regulations::show(a),
        RegulationsCommand::Decide(a) => decide(a),
        RegulationsCommand::Analyze(a) => analyze(a),
    }
}

fn analyze(args: &AnalyzeArgs) -> Result<i32> {
    let bytes = knox_command::files::read_input(&args.file, knox_command::files::EVIDENCE)?;
    let json: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| knox_command::files::bad_input(&args.file, "JSON (a bundle or an APM)", e))?;
    let apm = knox_regulation::analysis::apm_of(&json).ok_or_else(|| {
        knox_command::files::bad_input(
            &args.file,
            "a bundle or an APM",
            "it has neither an `apm` nor the fields of one",
        )
    })?;
    let norms = load(args.policy_set.as_deref())?;
    let spec = &apm.guards.regulation;
    if spec.regulations.is_empty() {
        return Err(fail(
            Kind::DataErr,
            format!(
                "the APM of `{}` puts no regulation in force: nothing to analyze (run with --regulations)",
                args.file.display()
            ),
        ));
    }
    let regulator = knox_regulation::Regulator::new(spec, Some(&norms)).map_err(|e| {
        knox_command::files::bad_input(&args.file, "an APM this policy set decides", e)
    })?;
    let manifest = super::session::embedded_manifest()?;
    let findings = knox_regulation::analysis::analyze(&apm, &manifest, &regulator);
    let bad = findings
        .iter()
        .filter(|f| f.counterexample.is_some())
        .count();
    if args.json {
        knox_command::outln!("{}", serde_json::to_string_pretty(&findings)?);
    } else {
        knox_command::outln!(
            "{} disclosure(s) in the plan under {}; {} can exceed the baseline",
            findings.len(),
            spec.regulations.join(", "),
            bad
        );
        for f in &findings {
            let head = format!("  {} #{} {}", f.agent, f.position, f.tool);
            match &f.counterexample {
                None => knox_command::outln!(
                    "{head}: within the baseline ({} case(s){})",
                    f.cases,
                    if f.exhaustive {
                        ", exhaustive"
                    } else {
                        ", not exhaustive"
                    }
                ),
                Some(c) => {
                    let to: Vec<String> = c
                        .flow
                        .recipients
                        .iter()
                        .map(|r| format!("{} ({})", r.party.id, r.party.role))
                        .collect();
                    knox_command::outln!(
                        "{head}: COUNTEREXAMPLE — content carrying {} of subject {} to {} for {}: non-compliant: {}",
                        c.flow
                            .info_types
                            .iter()
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("+"),
                        c.flow.subject,
                        to.join(", "),
                        c.flow.purpose,
                        c.note
                    );
                }
            }
        }
    }
    Ok(i32::from(bad > 0))
}

/// Regulation options of `knox run`, `knox demo` and the gateways.
#[derive(Debug, Clone, clap::Args)]
pub struct RegulationArgs {
    /// Regulations in force, comma-separated (`GDPR,HIPAA`): every disclosure is decided
    /// by the policy set's norms, non-compliant ones blocked, and the decision recorded.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub regulations: Vec<String>,
    /// The run's regulation context (TOML): recipient directory, consent records, and
    /// per task the sender and declared purpose (see `regulations/examples/clinic.toml`).
    /// Without it every recipient is unknown and every purpose unspecified.
    #[arg(value_parser = knox_command::files::path, long, value_name = "TOML", requires = "regulations")]
    pub regulation_context: Option<PathBuf>,
    /// The regulation policy set directory (default: the embedded one).
    #[arg(value_parser = knox_command::files::path, long, value_name = "DIR", requires = "regulations")]
    pub policy_set: Option<PathBuf>,
    /// A judge for disclosures no data label reaches: `local:NAME`, `local:PATH.gguf` or
    /// `openai:URL#MODEL`. It classifies the content (information types, purpose) with
    /// the versioned prompt `regulations/judge-prompt.md`; the norms decide, and its own
    /// verdict is recorded as a second opinion only.
    #[arg(long, value_name = "SPEC", requires = "regulations", value_parser = knox_models::cli::judge_spec)]
    pub judge: Option<knox_models::ModelSpec>,
}

impl RegulationArgs {
    /// The setup these options ask for (`None` when no regulation is in force).
    pub fn setup(&self) -> Result<Option<knox_engine::RegulationSetup>> {
        if self.regulations.is_empty() {
            return Ok(None);
        }
        let norms = load(self.policy_set.as_deref())?;
        let mut setup = knox_engine::RegulationSetup::new(
            &self.regulations,
            norms,
            knox_types::regulation::RegulationContext::default(),
        )
        .map_err(|e| knox_command::files::usage(e.to_string()))?;
        setup.regulations.context = Some(match &self.regulation_context {
            Some(p) => {
                let text = knox_command::files::read_text(p, knox_command::files::CONFIG)?;
                knox_regulation::flow::context_from_toml(&text).map_err(|e| {
                    knox_command::files::bad_input(
                        p,
                        "a regulation context (see regulations/examples/clinic.toml)",
                        e,
                    )
                })?
            }
            None => knox_types::regulation::RegulationContext::default(),
        });
        Ok(Some(setup))
    }

    /// [`setup`](Self::setup) with its `--judge` opened (a local model shared through
    /// `locals`), for a front door that loads no other models through
    /// [`knox_models::cli::load`].
    pub fn setup_judged(
        &self,
        cache_dir: Option<&std::path::Path>,
        locals: &mut knox_models::registry::Locals,
    ) -> Result<Option<knox_engine::RegulationSetup>> {
        let Some(mut setup) = self.setup()? else {
            return Ok(None);
        };
        if let Some(spec) = &self.judge {
            let judge = knox_models::cli::open_judge(spec, cache_dir, locals)?;
            setup.judge = Some(std::sync::Arc::new(judge));
        }
        Ok(Some(setup))
    }
}
