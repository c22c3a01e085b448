//! The models a run uses, opened from their specs: a local model named for several
//! roles (planner, executor, judge) is loaded once and serves them all; a local model's
//! loading and its replies can show on a terminal spinner.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use knox_policy::ToolkitManifest;

use crate::{
    Chat, ChatExecutor, ChatJudge, ChatPlanner, Format, LocalModel, LocalOptions, LocalSource,
    Message, ModelError, ModelSpec, Reply, pull,
};

/// The local models a run has loaded, by their source, shared between roles.
pub type Locals = Vec<(LocalSource, Arc<LocalModel>)>;

/// Why a model could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No model cache: none given and none in the environment.
    #[error(transparent)]
    NoCache(pull::PullError),
    /// A catalogue model that was not pulled into the cache.
    #[error("model `{name}` is not in the cache `{dir}`")]
    NotPulled {
        /// Catalogue name.
        name: String,
        /// The cache searched.
        dir: String,
    },
    /// The model did not load.
    #[error("cannot load `{spec}`: {source}")]
    Load {
        /// The model's spec.
        spec: String,
        /// Why.
        #[source]
        source: ModelError,
    },
    /// A role that needs a model (the judge) was given a deterministic stand-in.
    #[error("the judge `{0}` is not a model")]
    NotAModel(String),
}

/// Opens the chat model `spec` names (`None` for the deterministic stand-ins); a local
/// model already in `locals` is shared.
pub fn open(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
) -> Result<Option<Arc<dyn Chat>>, OpenError> {
    open_shown(spec, cache_dir, locals, None)
}

/// The judge `spec` names, its model shared through `locals`.
pub fn open_judge(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
) -> Result<ChatJudge, OpenError> {
    open_judge_shown(spec, cache_dir, locals, None)
}

fn open_judge_shown(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
    shown: Option<&Arc<Spinner>>,
) -> Result<ChatJudge, OpenError> {
    let chat = open_shown(spec, cache_dir, locals, shown)?
        .ok_or_else(|| OpenError::NotAModel(spec.to_string()))?;
    Ok(ChatJudge::new(chat))
}

/// [`open`]; with `shown`, a local model's loading and each of its replies show on
/// that spinner.
fn open_shown(
    spec: &ModelSpec,
    cache_dir: Option<&Path>,
    locals: &mut Locals,
    shown: Option<&Arc<Spinner>>,
) -> Result<Option<Arc<dyn Chat>>, OpenError> {
    let ModelSpec::Local(src) = spec else {
        return Ok(match spec {
            ModelSpec::OpenAi(e) => Some(Arc::new(e.clone())),
            _ => None,
        });
    };
    let model = match locals.iter().find(|(s, _)| s == src) {
        Some((_, m)) => m.clone(),
        None => {
            let cache: PathBuf = pull::cache_dir(cache_dir).map_err(OpenError::NoCache)?;
            if let Some(spinner) = shown {
                spinner.start(format!("loading {} (hashing the weights)", src.spec()));
            }
            let loaded = src.load(&cache, LocalOptions::from_env());
            if let Some(spinner) = shown {
                spinner.stop();
            }
            let m = Arc::new(loaded.map_err(|e| match e {
                ModelError::NotPulled { name, dir } => OpenError::NotPulled { name, dir },
                source => OpenError::Load {
                    spec: src.spec(),
                    source,
                },
            })?);
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

/// The models a run uses, loaded once: a local model named for several roles (planner,
/// executor, judge) is loaded once and serves them all.
#[derive(Debug)]
pub struct Models {
    planner_spec: ModelSpec,
    executor_spec: ModelSpec,
    judge_spec: Option<ModelSpec>,
    planner: Option<Arc<ChatPlanner>>,
    executor: Option<Arc<ChatExecutor>>,
    judge: Option<ChatJudge>,
    locals: Locals,
}

impl Models {
    /// Loads what `planner`, `executor` and `judge` name; tools are described by
    /// `manifest`. A local model's loading and its replies show a spinner on standard
    /// error when it is a terminal.
    pub fn load(
        planner: &ModelSpec,
        executor: &ModelSpec,
        judge: Option<&ModelSpec>,
        cache_dir: Option<&Path>,
        manifest: &ToolkitManifest,
    ) -> Result<Self, OpenError> {
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
            planner: planner_chat.map(|c| Arc::new(ChatPlanner::new(c))),
            executor: executor_chat
                .map(|c| Arc::new(ChatExecutor::new(c, Arc::new(manifest.clone())))),
            judge: judge_model,
            locals,
        })
    }

    /// The judge, when one was named (clones share the model and its latency).
    pub fn judge(&self) -> Option<std::sync::Arc<dyn knox_regulation::Judge>> {
        self.judge
            .clone()
            .map(|j| std::sync::Arc::new(j) as std::sync::Arc<dyn knox_regulation::Judge>)
    }

    /// The model planner, when a model plans (else the dataset's plans serve).
    pub fn planner(&self) -> Option<Arc<dyn knox_agent::Planner>> {
        self.planner
            .clone()
            .map(|p| p as Arc<dyn knox_agent::Planner>)
    }

    /// The model executor, when a model executes.
    pub fn executor(&self) -> Option<Arc<dyn knox_agent::ExecutorFactory>> {
        self.executor
            .clone()
            .map(|e| e as Arc<dyn knox_agent::ExecutorFactory>)
    }

    /// What the executor was named as (a model, or a deterministic stand-in).
    pub fn executor_spec(&self) -> &ModelSpec {
        &self.executor_spec
    }

    /// The executor's name: `benign`, `injected`, `local:smollm2`, ….
    pub fn executor_name(&self) -> String {
        self.executor_spec.to_string()
    }

    /// The planner's name.
    pub fn planner_name(&self) -> String {
        self.planner_spec.to_string()
    }

    /// Latency per plan and per step, and each local model's token rates.
    pub fn report(&self) -> Vec<String> {
        let mut lines = Vec::new();
        let per = |t: crate::latency::Totals| {
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

    fn info(&self, role: knox_types::bundle::ModelRole) -> knox_types::bundle::ModelInfo {
        self.model.info(role)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::panic, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_open_as_no_model_and_a_judge_must_be_a_model() {
        let mut locals = Locals::new();
        assert!(
            open(&ModelSpec::Benign, None, &mut locals)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            open_judge(&ModelSpec::Injected, None, &mut locals),
            Err(OpenError::NotAModel(s)) if s == "injected"
        ));
        assert!(locals.is_empty());
    }

    #[test]
    fn a_catalogue_model_not_pulled_is_named_with_its_cache() {
        let dir = tempfile::tempdir().unwrap();
        let spec = ModelSpec::parse_for("local:smollm2", crate::SpecRole::Planner).unwrap();
        let mut locals = Locals::new();
        match open(&spec, Some(dir.path()), &mut locals) {
            Err(OpenError::NotPulled { name, dir: d }) => {
                assert_eq!(name, "smollm2");
                assert_eq!(d, dir.path().display().to_string());
            }
            // A build without the `local` feature cannot load any model at all.
            Err(OpenError::Load { spec, .. }) => assert_eq!(spec, "local:smollm2"),
            other => panic!("expected a model not pulled, got {other:?}"),
        }
    }
}
