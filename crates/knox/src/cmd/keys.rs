//! `knox keygen` and regulator key files.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Kind, fail};
use knox_attest::TeeKey;
use knox_monitor::files::{WriteOptions, write_atomic_with};
use serde_json::json;

/// Arguments of `knox keygen`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!("  0   the key pair is written (73 when PREFIX.key or PREFIX.pub exists)"))]
pub struct KeygenArgs {
    /// Writes `PREFIX.key` (private, mode 0600) and `PREFIX.pub`; the whole PREFIX is
    /// kept (`--out reg.2025` writes `reg.2025.key`, `reg.2025.pub`).
    #[arg(value_parser = crate::cmd::path, long, value_name = "PREFIX")]
    pub out: PathBuf,
}

/// `prefix` with `.suffix` appended to its last component (never replacing an
/// extension the prefix already has).
fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(".");
    s.push(suffix);
    PathBuf::from(s)
}

/// Creates a regulator key pair; refuses to overwrite either half.
pub fn keygen(args: &KeygenArgs) -> Result<i32> {
    let private = with_suffix(&args.out, "key");
    let public = with_suffix(&args.out, "pub");
    for p in [&private, &public] {
        if p.symlink_metadata().is_ok() {
            return Err(fail(
                Kind::CantCreate,
                format!(
                    "`{}` exists: refusing to overwrite a key (choose another --out prefix)",
                    p.display()
                ),
            ));
        }
    }
    let key = TeeKey::generate()?;
    let body = json!({"format": "knox-key/v1", "alg": "ed25519", "seed": hex::encode(key.seed())});
    let create = |p: &Path, bytes: &[u8], mode: u32| {
        let opts = WriteOptions {
            mode,
            create_new: true,
        };
        write_atomic_with(p, bytes, opts).map_err(|e| {
            fail(
                Kind::CantCreate,
                format!("cannot create `{}`: {e}", p.display()),
            )
        })
    };
    create(
        &private,
        serde_json::to_string_pretty(&body)?.as_bytes(),
        0o600,
    )?;
    let pubkey = serde_json::to_string_pretty(&key.public_key())?;
    if let Err(e) = create(&public, pubkey.as_bytes(), 0o644) {
        // Never half a pair: the private key just written goes too.
        let _ = std::fs::remove_file(&private);
        return Err(e);
    }
    crate::outln!(
        "key {}\n  private: {}\n  public:  {}",
        key.key_id(),
        private.display(),
        public.display()
    );
    Ok(0)
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
    let text = super::read_text(path, super::KEY)?;
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
