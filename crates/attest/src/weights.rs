//! Model weights hashes for proof of inference: SHA-256 of the weights file (GGUF,
//! safetensors, …), streamed so multi-gigabyte files need no memory, and cached by
//! (path, size, modification time) so a file is read once per process.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use knox_types::digest::Digest;
use sha2::{Digest as _, Sha256};

type CacheKey = (PathBuf, u64, Option<SystemTime>);

fn cache() -> &'static Mutex<HashMap<CacheKey, Digest>> {
    static CACHE: OnceLock<Mutex<HashMap<CacheKey, Digest>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// SHA-256 of the file at `path`, streamed in 1 MiB blocks; cached while the file's
/// size and modification time are unchanged.
pub fn hash_file(path: &Path) -> io::Result<Digest> {
    let meta = std::fs::metadata(path)?;
    let key = (path.canonicalize()?, meta.len(), meta.modified().ok());
    if let Some(d) = cache()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&key)
    {
        return Ok(*d);
    }
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(buf.get(..n).unwrap_or_default());
    }
    let d = Digest(hasher.finalize().into());
    cache()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, d);
    Ok(d)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn streams_to_the_plain_sha256_and_notices_changes() {
        let dir = std::env::temp_dir().join(format!("knox-weights-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("model.gguf");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&f, &data).unwrap();
        assert_eq!(hash_file(&f).unwrap(), Digest::sha256(&data));
        assert_eq!(hash_file(&f).unwrap(), Digest::sha256(&data));
        std::fs::write(&f, b"other weights").unwrap();
        assert_eq!(hash_file(&f).unwrap(), Digest::sha256(b"other weights"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
