//! `knox eval`: the paper's evaluation on the public InjecAgent data — the flow pool,
//! the 13 workloads, effectiveness per guard × workload × executor, the overhead
//! breakdown beside the paper's figures, utility — written as `report.md`, CSV, JSON
//! and SVG plots, with every evidence bundle kept and verified.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::generate::PoolContext;
use crate::pool::{FLOWS_PER_TOOLKIT, Guard, POOL_FORMAT, Pool, PoolStatus};
use crate::report::{self, Corpus, Meta};
use crate::run::{ExecutorSpec, Options};
use anyhow::Result;
use knox_harness::Harness;
use knox_harness::{PAPER_WORKLOADS, Workload};
use knox_verify::Outcome;

use super::session;
use knox_command::error::{Kind, KindExt as _};

/// Flows of each pool `--quick` runs: two bundles of the largest workload.
pub const QUICK_FLOWS: usize = 12;

/// Arguments of `knox eval`.
#[derive(Debug, clap::Args)]
#[command(after_help = knox_command::exit_codes!(
    "  0   every bundle verified complete and every guard scored every flow right\
   \n  1   the evaluation finished, but a bundle did not verify or a guard scored a flow wrong"
))]
pub struct EvalArgs {
    /// Output directory: report.md, *.csv, results.json, *.svg, pool.json,
    /// verdicts.jsonl and every evidence bundle (bundles/).
    #[arg(value_parser = knox_command::files::path, long)]
    pub out: PathBuf,
    /// Write into a non-empty `--out` (files of the same name are replaced; the folder
    /// is still locked against a concurrent run).
    #[arg(long)]
    pub force: bool,
    /// Every guard and workload on a small subset (the first 12 flows of each pool), no
    /// corpus: well under a minute, for CI.
    #[arg(long)]
    pub quick: bool,
    /// Only this guard (repeatable): regulation, trajectory, syscall, stop; or
    /// `regulation-cases`: the regulation norms on the vendored labelled cases
    /// (GoldCoin HIPAA, train and validation; `docs/regulation.md`) mapped from their
    /// structured fields — strict and lenient accuracy, balanced accuracy, violations
    /// caught, permits allowed, unknown terms, written as `regulation-cases.*`; with
    /// `--judge`, also the validation cases' facts read from their prose by the judge
    /// (`regulation-text.*`).
    #[arg(long = "guard", value_name = "G", value_parser = parse_guard)]
    pub guards: Vec<GuardArg>,
    /// Only this workload (repeatable; default: the paper's 13).
    #[arg(long = "workload", value_name = "W", value_parser = clap::value_parser!(Workload))]
    pub workloads: Vec<Workload>,
    /// An executor, one column each (repeatable): `benign`, `injected`, `local:NAME`,
    /// `openai:URL#MODEL`. Default: benign and injected.
    #[arg(long = "executor", value_name = "E")]
    pub executors: Vec<String>,
    /// At most this many flows of each pool (default: all; 12 with --quick).
    #[arg(long)]
    pub flows: Option<usize>,
    /// Seed of the pool and of the paraphrases.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Evaluate this pool (a pool.json written by an earlier run) instead of
    /// generating one.
    #[arg(value_parser = knox_command::files::path, long, value_name = "POOL.json")]
    pub pool: Option<PathBuf>,
    /// Timeout of the stop flows, in ms (the deadline the `timeout` flows pass).
    #[arg(long, default_value_t = 50)]
    pub stop_timeout_ms: u64,
    /// Skip the unmediated system-call corpus (needs root and `knox-probe`).
    #[arg(long)]
    pub no_corpus: bool,
    /// Skip the utility measurement.
    #[arg(long)]
    pub no_utility: bool,
    /// Skip the benign-variation suite (both trajectory modes; `variations.csv`).
    #[arg(long)]
    pub no_variations: bool,
    /// Print `results.json` (every cell's rates, overheads, verification) on stdout
    /// instead of the summary; the files are written all the same.
    #[arg(long)]
    pub json: bool,
    /// Model cache directory, for `local:` executors (default: `$KNOX_MODEL_DIR`, else
    /// `$XDG_CACHE_HOME/knox/models`, else `~/.cache/knox/models`).
    #[arg(value_parser = knox_command::files::path, long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// A judge (`local:NAME`, `local:PATH.gguf`, `openai:URL#MODEL`). With
    /// `--guard regulation-cases`: the judge fills each validation case's flow from its
    /// prose. With the pool's regulation guard: the regulation
    /// flows are run once more with every information-type label withheld from the
    /// manifest, so the judge alone says what each disclosure carries and the norms
    /// decide on that — one more column per executor, `<executor> + judge <SPEC>`.
    #[arg(long, value_name = "SPEC", value_parser = knox_models::cli::judge_spec)]
    pub judge: Option<knox_models::ModelSpec>,
    /// Platform evidence backend (one report per bundle is the HW column).
    #[command(flatten)]
    pub platform: session::PlatformArgs,
    /// Run the adaptive attack suite instead: a scripted malicious model that reads the
    /// APM, served as an OpenAI-compatible endpoint on loopback and called through the
    /// OpenAI client; writes adaptive.md/.csv/.json/.svg (exit 1 when an attack
    /// succeeded, an honest run was blocked, or the evidence misses an attempt).
    /// With `--quick`, a bounded subset (every class, fewer variants).
    #[arg(long)]
    pub adaptive: bool,
}

/// The OpenAI-compatible client of `knox-models`, pointed at the adaptive suite's
/// endpoint: the executor side of the suite talks to it like to any remote model.
#[derive(Debug)]
pub struct OpenAiClient {
    /// The endpoint's base URL (`http://127.0.0.1:PORT/v1`).
    pub url: String,
}

impl crate::adaptive::Client for OpenAiClient {
    fn endpoint(&self) -> String {
        self.url.clone()
    }

    fn complete(
        &self,
        model: &str,
        turns: &[crate::adaptive::Turn],
    ) -> std::result::Result<Option<(String, String)>, String> {
        use crate::adaptive::Turn;
        use knox_models::chat::{Chat, Format, Message, Reply, Role, ToolCall};
        let endpoint =
            knox_models::openai::Endpoint::parse(&format!("openai:{}#{model}", self.url))
                .map_err(|e| e.to_string())?;
        let messages: Vec<Message> = turns
            .iter()
            .map(|t| match t {
                Turn::System(s) => Message::new(Role::System, s.clone()),
                Turn::User(s) => Message::new(Role::User, s.clone()),
                Turn::Call {
                    id,
                    name,
                    arguments,
                } => Message::call(ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    arguments: arguments.clone(),
                }),
                Turn::Result { id, name, content } => Message::result(
                    &ToolCall {
                        id: id.clone(),
                        name: name.clone(),
                        arguments: String::new(),
                    },
                    content.clone(),
                ),
            })
            .collect();
        match endpoint.complete(&messages, &Format::Text) {
            Ok(Reply::Call(c)) => Ok(Some((c.name, c.arguments))),
            Ok(_) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// `knox eval --adaptive`.
fn adaptive(args: &EvalArgs, rt: &knox_harness::Harness) -> Result<i32> {
    let norms = knox_regulation::Norms::embedded().kind(Kind::Software)?;
    let server = crate::adaptive::Server::start()?;
    let client = OpenAiClient { url: server.url() };
    let mut attacks = crate::adaptive::attacks();
    if args.quick {
        attacks = crate::adaptive::bounded(attacks);
    }
    let report = crate::adaptive::run(rt, &rt.manifest, &norms, &client, &attacks)?;
    report.write(&args.out)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.csv());
        println!(
            "attacks succeeded: {}; benign runs falsely blocked: {}; set-up steps blocked: {}; report: {}",
            report.succeeded,
            report.falsely_blocked,
            report.setup_failed,
            args.out.join("adaptive.md").display()
        );
    }
    let shown = report.attempts.iter().all(|a| a.evidence_shows);
    Ok(i32::from(
        report.succeeded > 0 || report.falsely_blocked > 0 || report.setup_failed > 0 || !shown,
    ))
}

/// A `--guard` value: a guard of the flow pool, or the labelled regulation cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardArg {
    /// A guard of the pool.
    Pool(Guard),
    /// `regulation-cases`.
    RegulationCases,
}

fn parse_guard(s: &str) -> Result<GuardArg, String> {
    if s.trim() == "regulation-cases" {
        return Ok(GuardArg::RegulationCases);
    }
    s.parse::<Guard>()
        .map(GuardArg::Pool)
        .map_err(|e| format!("{e} (or `regulation-cases`)"))
}

/// `--guard regulation-cases`: the embedded norms on the vendored labelled cases;
/// writes `regulation-cases.md`, `.json` and `.jsonl` (one line per case) in `out`.
fn regulation_cases(out: &Path, json: bool) -> Result<()> {
    use crate::guards::regulation_cases as rc;
    let norms = knox_regulation::Norms::embedded().kind_context(Kind::Software, || {
        "the embedded regulation policy set".into()
    })?;
    let (scores, outcomes) = rc::run(&norms).kind(Kind::DataErr)?;
    let md = rc::report(&scores);
    let results = serde_json::json!({ "policy_set": norms.hash(), "splits": scores });
    write_results(out, "regulation-cases", &md, &results, &outcomes, json)
}

/// Writes `<stem>.md`, `<stem>.json` (`results`) and `<stem>.jsonl` (one line per
/// outcome) in `out`, and prints the results (JSON with `json`, else the Markdown).
fn write_results<T: serde::Serialize>(
    out: &Path,
    stem: &str,
    md: &str,
    results: &serde_json::Value,
    outcomes: &[T],
    json: bool,
) -> Result<()> {
    let write = |name: String, text: &str| {
        let p = out.join(name);
        std::fs::write(&p, text)
            .kind_context(Kind::CantCreate, || format!("writing `{}`", p.display()))
    };
    write(format!("{stem}.md"), md)?;
    write(
        format!("{stem}.json"),
        &serde_json::to_string_pretty(results)?,
    )?;
    let mut lines = String::new();
    for o in outcomes {
        lines.push_str(&serde_json::to_string(o)?);
        lines.push('\n');
    }
    write(format!("{stem}.jsonl"), &lines)?;
    if json {
        knox_command::outln!("{}", serde_json::to_string_pretty(results)?);
    } else {
        knox_command::outln!("{md}");
    }
    Ok(())
}

/// `--guard regulation-cases --judge SPEC`: facts from text on the validation split —
/// the judge fills each case's flow from its prose account, the norms decide; writes
/// `regulation-text.md`, `.json` and `.jsonl` in `out`.
fn regulation_text(
    out: &Path,
    json: bool,
    spec: &knox_models::ModelSpec,
    cache_dir: Option<&Path>,
) -> Result<()> {
    use crate::guards::regulation_text as rt;
    let norms = knox_regulation::Norms::embedded().kind_context(Kind::Software, || {
        "the embedded regulation policy set".into()
    })?;
    let cache_dir = knox_models::cli::absolute_cache_dir(cache_dir)?;
    let mut locals = Vec::new();
    let judge = knox_models::cli::open_judge(spec, cache_dir.as_deref(), &mut locals)?;
    let accounts = rt::validation().kind(Kind::DataErr)?;
    let bar = super::progress_bar(accounts.len() as u64, "reading the validation cases");
    let (score, outcomes) = rt::evaluate(&norms, &judge, "validation", &accounts, |_| bar.inc(1))
        .kind(Kind::DataErr)?;
    bar.finish_and_clear();
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    let md = format!(
        "{}\nFacts read from each case's prose by the judge `{spec}` (prompt {}), decided by \
         the norms; {failed} of {} cases the judge did not answer (undecided).\n",
        crate::guards::regulation_cases::report_of(std::slice::from_ref(&score), "facts from text"),
        knox_regulation::extract::prompt_version(),
        outcomes.len()
    );
    let results = serde_json::json!({
        "policy_set": norms.hash(),
        "judge": spec.to_string(),
        "prompt_version": knox_regulation::extract::prompt_version(),
        "unanswered": failed,
        "splits": [score],
    });
    write_results(out, "regulation-text", &md, &results, &outcomes, json)
}

/// An executor named on the command line, loaded.
struct Loaded {
    name: String,
    model: Option<knox_models::ChatExecutor>,
}

/// The executors `specs` name — the one place `knox eval` parses executor specs (the
/// same grammar as `knox run --executor`): `benign` and `injected` are the
/// deterministic ones; `local:…` and `openai:…` are models on a chat backend. A local
/// model named twice (or also as the judge, through `locals`) is loaded once.
fn load_executors(
    specs: &[String],
    cache_dir: Option<&Path>,
    manifest: &knox_policy::ToolkitManifest,
    locals: &mut Vec<(knox_models::LocalSource, Arc<knox_models::LocalModel>)>,
) -> Result<Vec<Loaded>> {
    let manifest = Arc::new(manifest.clone());
    use knox_models::{ChatExecutor, ModelSpec, SpecRole};
    let specs: Vec<String> = if specs.is_empty() {
        vec!["benign".into(), "injected".into()]
    } else {
        specs.to_vec()
    };
    specs
        .into_iter()
        .map(|name| {
            let spec = ModelSpec::parse_for(&name, SpecRole::Executor)
                .map_err(|e| knox_command::files::usage(format!("--executor `{name}`: {e:#}")))?;
            let chat = knox_models::cli::open(&spec, cache_dir, locals).kind(Kind::Unavailable)?;
            Ok(Loaded {
                model: chat.map(|c| ChatExecutor::new(c, Arc::clone(&manifest))),
                name,
            })
        })
        .collect()
}

fn executor_specs(loaded: &[Loaded]) -> Result<Vec<ExecutorSpec<'_>>> {
    loaded
        .iter()
        .map(|l| {
            Ok(match (l.name.as_str(), &l.model) {
                ("benign", None) => ExecutorSpec::Benign,
                ("injected", None) => ExecutorSpec::Injected,
                (_, Some(m)) => ExecutorSpec::Model {
                    name: l.name.clone(),
                    factory: m,
                },
                (other, None) => {
                    return Err(knox_command::files::usage(format!(
                        "--executor `{other}` is not supported by knox eval"
                    )));
                }
            })
        })
        .collect()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    format!("{cpu}, {cores} cores")
}

/// Runs the unmediated system-call corpus ([`crate::corpus`], as `knox corpus
/// syscalls` does, on its own simulated runtime) and writes its bundle under `dir`; a
/// corpus that cannot run (no root, no probe, no kernel sandbox) is skipped, with why.
fn corpus(dir: &Path) -> Corpus {
    let run = || -> Result<Corpus> {
        let probe = super::corpus::locate_probe(None)?;
        let run = super::corpus::experiment(&probe, None)?;
        knox_command::files::create_dir(dir)?;
        knox_command::files::write_file(
            &dir.join(crate::corpus::BUNDLE_FILE),
            serde_json::to_vec(&run.bundle)?,
        )?;
        Ok(Corpus::Ran {
            verified: run.summary.evidence.verified.name().to_string(),
            summary: run.summary,
        })
    };
    run().unwrap_or_else(|e| Corpus::Skipped {
        reason: format!("the corpus could not run: {e:#}"),
    })
}

/// Runs the evaluation; exit 0 when every bundle verified `complete` and no guard
/// scored a flow wrong.
pub fn run(args: &EvalArgs) -> Result<i32> {
    let _out = knox_command::files::out_dir(&args.out, args.force)?;
    if args.guards.contains(&GuardArg::RegulationCases) {
        regulation_cases(&args.out, args.json)?;
        if let Some(spec) = &args.judge {
            regulation_text(&args.out, args.json, spec, args.cache_dir.as_deref())?;
        }
    }
    let pool_guards: Vec<Guard> = args
        .guards
        .iter()
        .filter_map(|g| match g {
            GuardArg::Pool(g) => Some(*g),
            GuardArg::RegulationCases => None,
        })
        .collect();
    if !args.guards.is_empty() && pool_guards.is_empty() {
        return Ok(0);
    }
    let pool_out = args.out.join("pool.json");
    if let Some(p) = &args.pool {
        knox_command::files::refuse_overwrite("--out", &pool_out, &[p])?;
        // Any file under --out may be rewritten by this evaluation.
        if let (Ok(pool), Ok(out)) = (p.canonicalize(), args.out.canonicalize())
            && pool.starts_with(&out)
        {
            return Err(knox_command::files::usage(format!(
                "--pool `{}` is inside --out `{}`, which this evaluation rewrites: copy the pool elsewhere first",
                p.display(),
                args.out.display()
            )));
        }
    }
    let backend = session::backend(&args.platform)?;
    let rt = session::runtime_with(backend.as_ref(), b"knox-eval")?;
    if args.adaptive {
        return adaptive(args, &rt);
    }
    let pool = match &args.pool {
        Some(p) => {
            Pool::parse(p, &knox_command::files::read_input(p, super::POOL)?).map_err(|e| {
                knox_command::files::bad_input(p, "a flow pool (`pool.json` of knox eval)", e)
            })?
        }
        None => generate(&rt, args.seed)?,
    };
    pool.write(&pool_out)?;
    let limit = args.flows.or(args.quick.then_some(QUICK_FLOWS));
    let workloads: Vec<Workload> = if args.workloads.is_empty() {
        PAPER_WORKLOADS
            .iter()
            .filter_map(|w| w.parse().ok())
            .collect()
    } else {
        args.workloads.clone()
    };
    let guards = if pool_guards.is_empty() {
        Guard::ALL.to_vec()
    } else {
        pool_guards
    };
    if args.judge.is_some() && !guards.contains(&Guard::Regulation) {
        return Err(knox_command::files::usage(
            "--judge evaluates the regulation guard: add `--guard regulation` (or \
             `--guard regulation-cases` for facts read from the cases' text)",
        ));
    }
    let mut locals = Vec::new();
    let loaded = load_executors(
        &args.executors,
        args.cache_dir.as_deref(),
        &rt.manifest,
        &mut locals,
    )?;
    let executors = executor_specs(&loaded)?;
    let judge = args
        .judge
        .as_ref()
        .map(|spec| knox_models::cli::open_judge(spec, args.cache_dir.as_deref(), &mut locals))
        .transpose()
        .kind(Kind::Unavailable)?;
    let judge_name = args.judge.as_ref().map(ToString::to_string);
    let names: Vec<String> = executors.iter().map(ExecutorSpec::name).collect();
    let overhead_executor = names
        .iter()
        .find(|n| *n != "benign")
        .or(names.first())
        .cloned()
        .unwrap_or_default();
    let progress = super::Bar::new();
    let simulated = backend.mode() == knox_types::bundle::PlatformMode::Simulated;
    let opts = Options {
        guards: guards.clone(),
        workloads: workloads.clone(),
        executors,
        limit,
        utility: !args.no_utility,
        out: args.out.clone(),
        backend: backend.as_ref(),
        verify: if simulated {
            knox_verify::Options::DANGEROUS_SIMULATED
        } else {
            knox_verify::Options::default()
        },
        stop_timeout: Duration::from_millis(args.stop_timeout_ms),
        seed: args.seed,
        progress: &progress,
        judge: match (&judge, &judge_name) {
            (Some(j), Some(name)) => Some(crate::run::EvalJudge {
                name: name.as_str(),
                judge: j,
            }),
            _ => None,
        },
    };
    let results = crate::run::run(&rt, &pool, &crate::guards::all(), &opts)?;
    let corpus = if args.quick || args.no_corpus || !guards.contains(&Guard::Syscall) {
        Corpus::Skipped {
            reason: if args.quick {
                "--quick".into()
            } else {
                "not requested".into()
            },
        }
    } else {
        knox_command::outln!("running the unmediated system-call corpus …");
        corpus(&args.out.join("bundles").join("corpus"))
    };
    let mut columns = names.clone();
    if let Some(j) = &judge_name {
        columns.extend(names.iter().map(|e| crate::run::judge_column(e, j)));
    }
    let meta = Meta {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        quick: args.quick,
        limit,
        workloads: workloads.iter().map(Workload::spec).collect(),
        executors: columns,
        overhead_executor,
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
        machine: machine(),
        stop_timeout_ms: args.stop_timeout_ms,
    };
    let written = report::write(&args.out, &meta, &pool, &results, &corpus)?;
    let variations_ok = if args.no_variations {
        true
    } else {
        variations(&rt, &pool, &workloads, limit, &opts, &progress)?
    };
    if args.json {
        let path = args.out.join("results.json");
        let text = knox_command::files::read_text(&path, knox_command::files::EVIDENCE)?;
        knox_command::outln!("{text}");
    } else {
        summary(
            &args.out,
            &results,
            &pool,
            &loaded,
            judge.as_ref(),
            &written,
        );
    }
    // A judge's cells measure the judge; every other cell must be right.
    let wrong = results.cells.iter().filter(|c| !c.judged).any(|c| {
        c.rates.blocked_scored != c.rates.blocked_correct
            || c.rates.allowed_scored != c.rates.allowed_correct
    });
    let corpus_ok = match &corpus {
        Corpus::Ran { verified, .. } => verified == Outcome::Complete.name(),
        Corpus::Skipped { .. } => true,
    };
    let complete = results.verification.not_complete.is_empty() && corpus_ok;
    Ok(if complete && !wrong && variations_ok {
        0
    } else {
        1
    })
}

/// Runs the benign-variation suite, writes `variations.csv`/`.json` and appends its
/// section to `report.md`: whether it met its targets.
fn variations(
    rt: &knox_harness::Harness,
    pool: &Pool,
    workloads: &[Workload],
    limit: Option<usize>,
    opts: &Options<'_>,
    progress: &dyn crate::Progress,
) -> Result<bool> {
    let v = crate::variation::run(
        rt,
        pool,
        &crate::variation::Options {
            workloads,
            limit,
            verify: opts.verify,
            read_repeats: knox_types::apm::TrajectoryMode::DEFAULT_READ_REPEATS,
            progress,
        },
    )?;
    crate::variation::write(&opts.out, &v)?;
    let path = opts.out.join("report.md");
    let mut md = std::fs::read_to_string(&path).unwrap_or_default();
    md.push('\n');
    md.push_str(&crate::variation::markdown(&v, &rt.manifest));
    knox_files::write_atomic(&path, md.as_bytes())?;
    Ok(v.meets_targets())
}

fn generate(rt: &Harness, seed: u64) -> Result<Pool> {
    let cx = PoolContext {
        data: &rt.data,
        manifest: &rt.manifest,
        seed,
        per_toolkit: FLOWS_PER_TOOLKIT,
    };
    let mut guards = std::collections::BTreeMap::new();
    for g in crate::guards::all() {
        guards.insert(g.guard(), g.pool(&cx)?);
    }
    Ok(Pool {
        format: POOL_FORMAT.into(),
        seed,
        per_toolkit: FLOWS_PER_TOOLKIT,
        toolkits: rt.manifest.toolkits().len(),
        source: "data/injecagent (InjecAgent public data: 38 toolkits, 330 tools, 17 user cases, 62 attacker cases), data/syscall_attacks.json, data/utility_tasks.json".into(),
        guards,
        utility: crate::utility::pool(&cx)?,
    })
}

fn summary(
    out: &Path,
    r: &crate::run::Results,
    pool: &Pool,
    loaded: &[Loaded],
    judge: Option<&knox_models::ChatJudge>,
    written: &report::Written,
) {
    for g in Guard::ALL {
        if pool
            .guards
            .get(&g)
            .is_some_and(|p| p.status == PoolStatus::Pending)
        {
            knox_command::outln!("{:<10} pending", g.as_str());
            continue;
        }
        let cells: Vec<_> = r.cells.iter().filter(|c| c.guard == g).cloned().collect();
        for (e, (rates, _)) in crate::run::by(&cells, |c| c.executor.clone()) {
            let p = |v: Option<f64>| v.map_or_else(|| "—".into(), |x| format!("{x:.1} %"));
            knox_command::outln!(
                "{:<10} {e:<12} blocked {} (n={}), allowed {} (n={})",
                g.as_str(),
                p(rates.blocked_pct()),
                rates.blocked_scored,
                p(rates.allowed_pct()),
                rates.allowed_scored
            );
        }
    }
    for l in loaded {
        if let Some(m) = &l.model {
            let t = m.latency().totals();
            knox_command::outln!(
                "executor {}: {} model steps, mean {:.2} s, max {:.2} s",
                l.name,
                t.calls,
                t.mean().as_secs_f64(),
                t.max.as_secs_f64()
            );
        }
    }
    if let Some(j) = judge {
        let t = j.latency().totals();
        knox_command::outln!(
            "judge: {} questions, mean {:.2} s, max {:.2} s",
            t.calls,
            t.mean().as_secs_f64(),
            t.max.as_secs_f64()
        );
    }
    let v = &r.verification;
    knox_command::outln!(
        "{} bundles, {} verified complete (platform `{}`{}); {:.1} s",
        v.bundles,
        v.complete,
        v.platform,
        if v.platform == "simulated" {
            ", not hardware-backed"
        } else {
            ""
        },
        r.wall_s
    );
    for bad in &v.not_complete {
        knox_command::outln!("  NOT complete: {bad}");
    }
    knox_command::outln!(
        "wrote {} files; report: {}",
        written.files.len() + 2,
        out.join("report.md").display()
    );
}
