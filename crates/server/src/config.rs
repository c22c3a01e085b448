//! Who may use the server: a TOML file of providers and regulators, each with its
//! Ed25519 public key (hex, or the `.pub` file `knox keygen` writes), and each
//! regulator's assigned providers.
//!
//! ```toml
//! [[provider]]
//! name = "acme"
//! key = "3b6a27bc…"          # 64 hex digits, or a path to acme.pub
//!
//! [[regulator]]
//! name = "cnil"
//! key = "regulators/cnil.pub"
//! providers = ["acme"]
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::store::{Role, Store, StoreError};

/// The access file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Access {
    /// Providers.
    #[serde(default)]
    pub provider: Vec<Entry>,
    /// Regulators.
    #[serde(default)]
    pub regulator: Vec<Entry>,
}

/// One principal.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Display name, unique.
    pub name: String,
    /// Public key: 64 hex digits or a `.pub` file (relative to the access file).
    pub key: String,
    /// A regulator's assigned providers, by name.
    #[serde(default)]
    pub providers: Vec<String>,
}

/// Why the access file was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML of the expected shape.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A key is neither hex nor a readable `.pub` file.
    #[error("`{name}`: key: {why}")]
    Key {
        /// Principal.
        name: String,
        /// Why.
        why: String,
    },
    /// A name is not acceptable.
    #[error("`{0}`: a name is 1–64 letters, digits, `-`, `_` or `.`")]
    Name(String),
    /// A regulator names a provider not in the file.
    #[error("regulator `{0}` is assigned unknown provider `{1}`")]
    UnknownProvider(String, String),
    /// A provider entry has assignments.
    #[error("provider `{0}`: only regulators have `providers`")]
    ProviderAssignments(String),
    /// The store refused.
    #[error("{0}")]
    Store(#[from] StoreError),
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A public key from hex or a `.pub` file.
pub fn public_key(value: &str, base: Option<&Path>) -> Result<[u8; 32], String> {
    let hex_text = if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        value.to_owned()
    } else {
        let p = base.map_or_else(|| Path::new(value).to_path_buf(), |b| b.join(value));
        // Knox's one capped reader (a public key file is small; a FIFO is refused).
        let bytes = knox_files::read_capped(&p, 64 * 1024).map_err(|e| e.to_string())?;
        let text =
            String::from_utf8(bytes).map_err(|_| format!("`{}`: not UTF-8 text", p.display()))?;
        let k: knox_types::bundle::PublicKey =
            serde_json::from_str(&text).map_err(|e| format!("`{}`: {e}", p.display()))?;
        if k.alg != knox_attest::key::ALG {
            return Err(format!("`{}`: not an ed25519 key", p.display()));
        }
        hex::encode(k.public_key.0)
    };
    hex::decode(hex_text.to_ascii_lowercase())
        .map_err(|e| e.to_string())?
        .try_into()
        .map_err(|_| "not 32 bytes".to_owned())
}

impl Access {
    /// Parses an access file.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Registers everyone and the assignments (idempotent; a changed key for a name is
    /// refused by the store).
    pub async fn apply(&self, store: &Store, base: Option<&Path>) -> Result<(), ConfigError> {
        let mut providers = std::collections::BTreeMap::new();
        for e in &self.provider {
            if !valid_name(&e.name) {
                return Err(ConfigError::Name(e.name.clone()));
            }
            if !e.providers.is_empty() {
                return Err(ConfigError::ProviderAssignments(e.name.clone()));
            }
            let k = public_key(&e.key, base).map_err(|why| ConfigError::Key {
                name: e.name.clone(),
                why,
            })?;
            let p = store.register(Role::Provider, &e.name, &k).await?;
            providers.insert(e.name.clone(), p);
        }
        for e in &self.regulator {
            if !valid_name(&e.name) {
                return Err(ConfigError::Name(e.name.clone()));
            }
            let k = public_key(&e.key, base).map_err(|why| ConfigError::Key {
                name: e.name.clone(),
                why,
            })?;
            let r = store.register(Role::Regulator, &e.name, &k).await?;
            for name in &e.providers {
                let p = providers
                    .get(name)
                    .ok_or_else(|| ConfigError::UnknownProvider(e.name.clone(), name.clone()))?;
                store.assign(&r, p).await?;
            }
        }
        Ok(())
    }
}
