//! `knox keygen` and regulator key files.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Kind, fail};
use knox_attest::TeeKey;
use serde_json::json;

/// Arguments of `knox keygen`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!("  0   the key pair is written (73 when PREFIX.key exists)"))]
pub struct KeygenArgs {
    /// Writes `PREFIX.key` (private, mode 0600) and `PREFIX.pub`.
    #[arg(value_parser = crate::cmd::path, long, value_name = "PREFIX")]
    pub out: PathBuf,
}

/// Creates a regulator key pair.
pub fn keygen(args: &KeygenArgs) -> Result<i32> {
    let key = TeeKey::generate()?;
    let private = args.out.with_extension("key");
    let public = args.out.with_extension("pub");
    if private.exists() {
        return Err(fail(
            Kind::CantCreate,
            format!(
                "`{}` exists: refusing to overwrite a key (choose another --out prefix)",
                private.display()
            ),
        ));
    }
    let body = json!({"format": "knox-key/v1", "alg": "ed25519", "seed": hex::encode(key.seed())});
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode_private()
        .open(&private)
        .map_err(|e| {
            fail(
                Kind::CantCreate,
                format!("cannot create `{}`: {e}", private.display()),
            )
        })?;
    f.write_all(serde_json::to_string_pretty(&body)?.as_bytes())
        .map_err(|e| {
            fail(
                Kind::CantCreate,
                format!("cannot write `{}`: {e}", private.display()),
            )
        })?;
    super::write_file(&public, serde_json::to_string_pretty(&key.public_key())?)?;
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
    let text = super::read_text(path)?;
    let what = "a private key written by `knox keygen`";
    let k: KeyFile = serde_json::from_str(&text).map_err(|e| super::bad_input(path, what, e))?;
    if k.format != "knox-key/v1" || k.alg != "ed25519" {
        return Err(super::bad_input(
            path,
            what,
            "not a knox-key/v1 ed25519 key",
        ));
    }
    let seed = hex::decode(&k.seed).map_err(|e| super::bad_input(path, what, e))?;
    let seed: [u8; 32] = seed
        .try_into()
        .map_err(|_| super::bad_input(path, what, "its seed is not 32 bytes"))?;
    Ok(TeeKey::from_seed(seed))
}
