//! `knox serve-model`: a model backend served as an OpenAI-compatible endpoint on
//! loopback — argument parsing around [`knox_gateway::openai::serve::ModelServer`]
//! (docs/gateway-openai.md says what it answers).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use anyhow::Result;
use knox_gateway::openai::serve::ModelServer;
use knox_models::{ModelSpec, SpecRole};
use knox_types::bundle::ModelRole;

use crate::error::{Kind, fail};

/// Arguments of `knox serve-model`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!("  0   stopped by SIGUSR1, SIGTERM or SIGINT"))]
pub struct ServeModelArgs {
    /// The model: `local:smollm2`, `local:gemma3-270m`, `local:PATH.gguf` (a build with
    /// `--features knox/local`), or `openai:URL#MODEL`.
    #[arg(value_name = "SPEC", value_parser = model_spec)]
    pub model: ModelSpec,
    /// Listen address (loopback only; port 0 picks one, printed on standard error).
    #[arg(long, default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,
    /// Largest request body, in bytes (413 above it).
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// The model cache.
    #[command(flatten)]
    pub cache: crate::cmd::model::CacheArgs,
}

fn model_spec(s: &str) -> std::result::Result<ModelSpec, String> {
    ModelSpec::parse_for(s, SpecRole::Executor).map_err(|e| e.to_string())
}

/// Serves the model until a stop signal.
pub fn run(args: &ServeModelArgs) -> Result<i32> {
    crate::signals::install()?;
    if !args.model.is_model() {
        return Err(super::usage(
            "serve-model serves a model: local:NAME, local:PATH.gguf or openai:URL#MODEL",
        ));
    }
    let cache_dir = super::absolute_cache_dir(args.cache.cache_dir.as_deref())?;
    let mut locals = Vec::new();
    let chat = super::model::open(&args.model, cache_dir.as_deref(), &mut locals)?
        .ok_or_else(|| super::usage("serve-model serves a model"))?;
    let name = chat.info(ModelRole::Executor).name;
    let server = ModelServer::new(chat, name.clone(), args.max_body);
    let flag = crate::signals::stop_flag();
    server
        .run_until(
            args.listen,
            move || flag.load(Ordering::Acquire),
            |addr| {
                eprintln!("knox serve-model: {name} on http://{addr}/v1");
            },
        )
        .map_err(|e| fail(Kind::Unavailable, format!("--listen {}: {e}", args.listen)))?;
    Ok(0)
}
