//! `knox keygen` and regulator key files.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use knox_attest::TeeKey;
use serde_json::json;

/// Arguments of `knox keygen`.
#[derive(Debug, clap::Args)]
pub struct KeygenArgs {
    /// Writes `PREFIX.key` (private, mode 0600) and `PREFIX.pub`.
    #[arg(long, value_name = "PREFIX")]
    pub out: PathBuf,
}

/// Creates a regulator key pair.
pub fn keygen(args: &KeygenArgs) -> Result<i32> {
    let key = TeeKey::generate()?;
    let private = args.out.with_extension("key");
    let public = args.out.with_extension("pub");
    if private.exists() {
        bail!(
            "`{}` exists: refusing to overwrite a key",
            private.display()
        );
    }
    let body = json!({"format": "knox-key/v1", "alg": "ed25519", "seed": hex::encode(key.seed())});
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_private()
        .open(&private)
        .with_context(|| format!("creating `{}`", private.display()))?;
    f.write_all(serde_json::to_string_pretty(&body)?.as_bytes())?;
    std::fs::write(&public, serde_json::to_string_pretty(&key.public_key())?)?;
    crate::outln!(
        "key {}\n  private: {}\n  public:  {}",
        key.key_id(),
        private.display(),
        public.display()
    );
    Ok(0)
}

trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for std::fs::OpenOptions {
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt as _;
        self.mode(0o600)
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    format: String,
    alg: String,
    seed: String,
}

/// Reads a private key file written by `knox keygen`.
pub fn load(path: &Path) -> Result<TeeKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading `{}`", path.display()))?;
    let k: KeyFile = serde_json::from_str(&text)
        .with_context(|| format!("`{}` is not a key file", path.display()))?;
    if k.format != "knox-key/v1" || k.alg != "ed25519" {
        bail!("`{}` is not a knox-key/v1 ed25519 key", path.display());
    }
    let seed = hex::decode(&k.seed).context("seed is not hex")?;
    let seed: [u8; 32] = seed
        .try_into()
        .map_err(|_| anyhow::anyhow!("seed must be 32 bytes"))?;
    Ok(TeeKey::from_seed(seed))
}
