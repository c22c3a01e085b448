//! TDX quote generation through the Linux configfs-tsm report interface (`/sys/kernel/config/tsm/report`), our own small client.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::MAX_QUOTE_BYTES;

/// Where the kernel mounts the report interface.
pub const DEFAULT_TSM_ROOT: &str = "/sys/kernel/config/tsm/report";
/// The provider a TDX guest reports.
pub const TDX_PROVIDER: &str = "tdx_guest";
/// How many times a quote is requested again when another writer raced us.
pub const MAX_ATTEMPTS: u32 = 3;

/// Why no quote was collected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// The configfs-tsm report directory does not exist.
    #[error("configfs-tsm report interface not found at `{}`: not a confidential guest, kernel older than 6.7, or configfs not mounted", .root.display())]
    Unavailable {
        /// The root looked at.
        root: PathBuf,
    },
    /// The report provider is not TDX.
    #[error("configfs-tsm provider is `{got}`, expected `tdx_guest`")]
    WrongProvider {
        /// The provider found.
        got: String,
    },
    /// `generation` moved between our write and our read every time.
    #[error("another writer changed the report request {attempts} times in a row")]
    Raced {
        /// Attempts made.
        attempts: u32,
    },
    /// An attribute holds something unexpected.
    #[error("configfs-tsm attribute `{attribute}` is invalid: {reason}")]
    BadAttribute {
        /// The attribute.
        attribute: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A filesystem operation failed.
    #[error("configfs-tsm `{}`: {source}", .path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One report entry (a directory under the root); what [`request`] needs.
trait Entry {
    fn read(&self, attribute: &'static str) -> Result<Vec<u8>, CollectError>;
    fn write(&self, attribute: &'static str, value: &[u8]) -> Result<(), CollectError>;
}

/// A report entry on the real (or a fake) filesystem; removed on drop.
struct DirEntry {
    path: PathBuf,
}

impl Entry for DirEntry {
    fn read(&self, attribute: &'static str) -> Result<Vec<u8>, CollectError> {
        let path = self.path.join(attribute);
        std::fs::read(&path).map_err(|source| CollectError::Io { path, source })
    }

    fn write(&self, attribute: &'static str, value: &[u8]) -> Result<(), CollectError> {
        let path = self.path.join(attribute);
        std::fs::write(&path, value).map_err(|source| CollectError::Io { path, source })
    }
}

impl Drop for DirEntry {
    fn drop(&mut self) {
        // configfs entries are removed with rmdir (their attributes go with
        // them). On a plain directory, leftover files make rmdir fail; that is
        // only ever a fake tree, so the error is not reported.
        let _ignored = std::fs::remove_dir(&self.path);
    }
}

fn generation(entry: &impl Entry) -> Result<u64, CollectError> {
    let raw = entry.read("generation")?;
    let text = String::from_utf8_lossy(&raw);
    text.trim().parse().map_err(|_| CollectError::BadAttribute {
        attribute: "generation",
        reason: format!("`{}` is not a number", text.trim()),
    })
}

/// The request protocol, independent of where the entry lives: check the
/// provider; write `inblob`, read `outblob`, and accept the quote only if
/// `generation` went up by exactly our write and did not move while we read.
fn request(
    entry: &impl Entry,
    report_data: &[u8; 64],
    attempts: u32,
) -> Result<Vec<u8>, CollectError> {
    let provider = entry.read("provider")?;
    let provider = String::from_utf8_lossy(&provider).trim().to_owned();
    if provider != TDX_PROVIDER {
        return Err(CollectError::WrongProvider { got: provider });
    }
    for _ in 0..attempts {
        let before = generation(entry)?;
        entry.write("inblob", report_data)?;
        let written = generation(entry)?;
        let quote = entry.read("outblob")?;
        let after = generation(entry)?;
        if written == before.saturating_add(1) && after == written {
            if quote.is_empty() || quote.len() > MAX_QUOTE_BYTES {
                return Err(CollectError::BadAttribute {
                    attribute: "outblob",
                    reason: format!("{} bytes", quote.len()),
                });
            }
            return Ok(quote);
        }
    }
    Err(CollectError::Raced { attempts })
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Client for the configfs-tsm report interface.
#[derive(Clone, Debug)]
pub struct ConfigfsTsm {
    root: PathBuf,
}

impl Default for ConfigfsTsm {
    fn default() -> Self {
        Self::new(DEFAULT_TSM_ROOT)
    }
}

impl ConfigfsTsm {
    /// A client for the interface rooted at `root` (the kernel's is
    /// [`DEFAULT_TSM_ROOT`]; tests pass a temporary directory).
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root this client uses.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Asks the TDX module for a quote over `report_data`, in a fresh entry
    /// that is removed afterwards.
    ///
    /// # Errors
    /// [`CollectError`]: interface absent, not TDX, raced, or I/O.
    pub fn quote(&self, report_data: &[u8; 64]) -> Result<Vec<u8>, CollectError> {
        if !self.root.is_dir() {
            return Err(CollectError::Unavailable {
                root: self.root.clone(),
            });
        }
        let name = format!(
            "knox-{}-{}",
            std::process::id(),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let path = self.root.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(CollectError::Unavailable {
                    root: self.root.clone(),
                });
            }
            Err(source) => return Err(CollectError::Io { path, source }),
        }
        let entry = DirEntry { path };
        request(&entry, report_data, MAX_ATTEMPTS)
    }
}

/// Collects a TDX quote over `report_data` from the kernel's interface.
///
/// # Errors
/// [`CollectError`]: interface absent, not TDX, raced, or I/O.
pub fn collect(report_data: &[u8; 64]) -> Result<Vec<u8>, CollectError> {
    ConfigfsTsm::default().quote(report_data)
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests fail loudly")]

    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;

    /// In-memory configfs entry: `generation` counts writes to `inblob`, and a
    /// scripted number of extra writes by "another process" land between our
    /// write and our read.
    struct Fake {
        attrs: RefCell<BTreeMap<&'static str, Vec<u8>>>,
        generation: RefCell<u64>,
        races_left: RefCell<u32>,
    }

    impl Fake {
        fn new(provider: &str, races: u32) -> Self {
            let attrs = BTreeMap::from([("provider", format!("{provider}\n").into_bytes())]);
            Self {
                attrs: RefCell::new(attrs),
                generation: RefCell::new(7),
                races_left: RefCell::new(races),
            }
        }
    }

    impl Entry for Fake {
        fn read(&self, attribute: &'static str) -> Result<Vec<u8>, CollectError> {
            match attribute {
                "generation" => Ok(format!("{}\n", self.generation.borrow()).into_bytes()),
                "outblob" => {
                    let mut races = self.races_left.borrow_mut();
                    if *races > 0 {
                        *races -= 1;
                        *self.generation.borrow_mut() += 1;
                    }
                    let inblob = self
                        .attrs
                        .borrow()
                        .get("inblob")
                        .cloned()
                        .unwrap_or_default();
                    Ok([b"QUOTE:".as_slice(), &inblob].concat())
                }
                other => Ok(self.attrs.borrow().get(other).cloned().unwrap_or_default()),
            }
        }

        fn write(&self, attribute: &'static str, value: &[u8]) -> Result<(), CollectError> {
            self.attrs.borrow_mut().insert(attribute, value.to_vec());
            if attribute == "inblob" {
                *self.generation.borrow_mut() += 1;
            }
            Ok(())
        }
    }

    #[test]
    fn quote_carries_the_report_data() {
        let quote = request(&Fake::new("tdx_guest", 0), &[9; 64], 3).unwrap();
        assert_eq!(quote, [b"QUOTE:".as_slice(), &[9; 64]].concat());
    }

    #[test]
    fn a_race_is_retried() {
        assert!(request(&Fake::new("tdx_guest", 2), &[1; 64], 3).is_ok());
    }

    #[test]
    fn endless_races_give_up() {
        let err = request(&Fake::new("tdx_guest", 10), &[1; 64], 3).unwrap_err();
        assert!(matches!(err, CollectError::Raced { attempts: 3 }));
    }

    #[test]
    fn other_providers_are_refused() {
        let err = request(&Fake::new("sev_guest", 0), &[1; 64], 3).unwrap_err();
        assert!(matches!(err, CollectError::WrongProvider { got } if got == "sev_guest"));
    }
}
