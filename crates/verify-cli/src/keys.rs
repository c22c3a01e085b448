//! `keygen`: a regulator key pair, for signing verification receipts (the key file
//! format is `knox_attest::keyfile`).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::{Kind, fail};
use crate::files::{WriteOptions, write_atomic_with};
use knox_attest::PartyKey;
use knox_attest::keyfile;

/// Arguments of `knox keygen`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!("  0   the key pair is written (73 when PREFIX.key or PREFIX.pub exists)"))]
pub struct KeygenArgs {
    /// Writes `PREFIX.key` (private, mode 0600) and `PREFIX.pub`; the whole PREFIX is
    /// kept (`--out reg.2025` writes `reg.2025.key`, `reg.2025.pub`).
    #[arg(value_parser = crate::files::path, long, value_name = "PREFIX")]
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
    let key = PartyKey::generate()?;
    let body = keyfile::encode(&key)?;
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
    create(&private, body.as_bytes(), 0o600)?;
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

/// Reads a private key file written by `knox keygen`.
pub fn load(path: &Path) -> Result<PartyKey> {
    let text = crate::files::read_text(path, crate::files::KEY)?;
    keyfile::decode(text.as_bytes())
        .map_err(|e| crate::files::bad_input(path, "a private key written by `knox keygen`", e))
}
