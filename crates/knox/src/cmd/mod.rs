//! The `knox` subcommands.

pub mod bench;
pub mod corpus;
pub mod demo;
pub mod eval;
pub mod hardware;
pub mod keys;
pub mod model;
pub mod prove;
pub mod receipts;
pub mod regulations;
pub mod run;
pub mod verify;

/// Largest input file any command reads (evidence bundles are capped lower by the
/// verifier itself).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads a file of at most [`MAX_INPUT_BYTES`], without first allocating for a larger
/// one.
pub fn read_input(path: &std::path::Path) -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let file =
        std::fs::File::open(path).with_context(|| format!("reading `{}`", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading `{}`", path.display()))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        anyhow::bail!(
            "`{}` is larger than {MAX_INPUT_BYTES} bytes",
            path.display()
        );
    }
    Ok(bytes)
}
