//! `knox gateway openai`.

use anyhow::Result;

/// Arguments of `knox gateway openai`.
#[derive(Debug, clap::Args)]
pub struct OpenaiGatewayArgs {}

/// Runs the OpenAI-compatible proxy.
pub fn run(_args: &OpenaiGatewayArgs) -> Result<i32> {
    anyhow::bail!("knox gateway openai: not built yet")
}
