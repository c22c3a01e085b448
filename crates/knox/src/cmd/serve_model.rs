//! `knox serve-model`: a model backend served as an OpenAI-compatible endpoint.

use anyhow::Result;

/// Arguments of `knox serve-model`.
#[derive(Debug, clap::Args)]
pub struct ServeModelArgs {}

/// Serves the model.
pub fn run(_args: &ServeModelArgs) -> Result<i32> {
    anyhow::bail!("knox serve-model: not built yet")
}
