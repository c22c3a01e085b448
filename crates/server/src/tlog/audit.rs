//! The auditor's side of the log (`knox log`): keep a checkpoint, and later check that
//! the log's newest checkpoint extends it — from the log's C2SP checkpoint and tiles
//! alone, so the same check watches any tlog-tiles log, not only one Knox serves.
//!
//! The tiles come from the server being audited and are not trusted: every proof built
//! from them is verified against the two signed roots, so a log that serves tiles of
//! another history than it signed fails the check as a fork would.

use std::collections::HashMap;

use knox_types::digest::Digest;
use knox_types::merkle;

use super::note::{Checkpoint, Note, NoteError, NoteKey};
use super::tiles::{self, TileId, TileKind, TreeHashes};

/// The most bytes read for one checkpoint or tile.
const MAX_BODY: u64 = 1 << 20;

/// What an audit found.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log URL is not one.
    #[error("the log URL must be http(s)://HOST[:PORT][/PATH], got `{0}`")]
    Url(String),
    /// The log could not be reached, or answered with an error.
    #[error("`{url}`: {why}")]
    Fetch {
        /// What was fetched.
        url: String,
        /// Why it failed.
        why: String,
    },
    /// A checkpoint's note, signature or text is wrong.
    #[error("checkpoint: {0}")]
    Note(#[from] NoteError),
    /// A tile or entry bundle is not one.
    #[error("the log served a malformed tile `{0}`")]
    Tile(String),
    /// Fewer pinned witnesses cosigned the checkpoint than the quorum asks.
    #[error(
        "the checkpoint of size {size} is cosigned by {got} of the pinned witnesses, {want} \
         needed{missing}"
    )]
    Quorum {
        /// The checkpoint's size.
        size: u64,
        /// Valid cosignatures by pinned witnesses.
        got: usize,
        /// The quorum.
        want: usize,
        /// The witnesses that did not cosign, listed.
        missing: String,
    },
    /// The kept checkpoint names another log.
    #[error("the kept checkpoint is of the log `{kept}`, the log's is `{served}`")]
    OtherLog {
        /// The kept checkpoint's origin.
        kept: String,
        /// The served one's.
        served: String,
    },
    /// The log shows fewer entries than a checkpoint it signed before.
    #[error("the log rolled back: its checkpoint has {to} entries, after it signed one of {from}")]
    RolledBack {
        /// The kept size.
        from: u64,
        /// The served size.
        to: u64,
    },
    /// Two signed checkpoints of one size with different roots.
    #[error("the log forked: two signed checkpoints of size {0} with different roots")]
    Fork(u64),
    /// The newer checkpoint does not extend the kept one.
    #[error(
        "the checkpoint of size {to} does not extend the kept one of size {from}: the log \
         forked, or removed or reordered entries"
    )]
    Inconsistent {
        /// The kept size.
        from: u64,
        /// The served size.
        to: u64,
    },
    /// An entry is not at its index in the signed tree.
    #[error("entry {index} of the log is not {digest}, or not in the signed tree")]
    NotIncluded {
        /// The index.
        index: u64,
        /// The expected entry.
        digest: Digest,
    },
}

impl AuditError {
    /// Whether the error shows the log misbehaving (as opposed to not being reached or
    /// not being asked correctly).
    pub fn is_misbehaviour(&self) -> bool {
        !matches!(
            self,
            Self::Url(_) | Self::Fetch { .. } | Self::Quorum { .. }
        )
    }
}

/// A checkpoint as the log served it, its signatures checked.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// The signed note, as served (what `knox log head` keeps).
    pub note: Note,
    /// The pinned witnesses that cosigned it, with their times.
    pub cosigned: Vec<(String, u64)>,
}

/// An auditor of one log: its URL prefix, its pinned key and witnesses.
#[derive(Debug)]
pub struct Auditor {
    prefix: String,
    log: NoteKey,
    witnesses: Vec<NoteKey>,
    quorum: usize,
    agent: ureq::Agent,
    cache: HashMap<TileId, Vec<Digest>>,
}

impl Auditor {
    /// An auditor of the log at `prefix` (`http://127.0.0.1:8787/tlog`), signed by
    /// `log`; `quorum` of `witnesses` must cosign every checkpoint accepted.
    pub fn new(
        prefix: &str,
        log: NoteKey,
        witnesses: Vec<NoteKey>,
        quorum: usize,
    ) -> Result<Self, AuditError> {
        let prefix = prefix.trim_end_matches('/');
        let host = prefix
            .strip_prefix("http://")
            .or_else(|| prefix.strip_prefix("https://"))
            .ok_or_else(|| AuditError::Url(prefix.to_owned()))?;
        if host.is_empty() || host.starts_with('/') {
            return Err(AuditError::Url(prefix.to_owned()));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            log,
            witnesses,
            quorum,
            agent: crate::client::agent(),
            cache: HashMap::new(),
        })
    }

    fn fetch(&self, path: &str) -> Result<Vec<u8>, AuditError> {
        let url = format!("{}/{path}", self.prefix);
        let fail = |why: String| AuditError::Fetch {
            url: url.clone(),
            why,
        };
        let mut resp = self
            .agent
            .get(&url)
            .call()
            .map_err(|e| fail(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| fail(e.to_string()))?;
        if status != 200 {
            let text: String = String::from_utf8_lossy(&body).chars().take(300).collect();
            return Err(fail(format!("HTTP {status}: {text}")));
        }
        Ok(body)
    }

    /// Checks a note as a checkpoint of this log: the log's signature, and the quorum of
    /// pinned witnesses.
    pub fn open(&self, note: Note) -> Result<Observed, AuditError> {
        let checkpoint = Checkpoint::open(&note, &self.log)?;
        let mut cosigned = Vec::new();
        let mut missing = Vec::new();
        for w in &self.witnesses {
            match note.verify(w) {
                Ok(time) => cosigned.push((w.name().to_owned(), time.unwrap_or_default())),
                Err(NoteError::Unsigned(_)) => missing.push(w.name().to_owned()),
                Err(e) => return Err(e.into()),
            }
        }
        if cosigned.len() < self.quorum {
            return Err(AuditError::Quorum {
                size: checkpoint.size,
                got: cosigned.len(),
                want: self.quorum,
                missing: if missing.is_empty() {
                    String::new()
                } else {
                    format!(" (not cosigned by {})", missing.join(", "))
                },
            });
        }
        Ok(Observed {
            checkpoint,
            note,
            cosigned,
        })
    }

    /// Reads a kept checkpoint: the log's signature is checked again (witnesses are not:
    /// it was accepted with them when it was kept).
    pub fn kept(&self, note: &Note) -> Result<Checkpoint, NoteError> {
        Checkpoint::open(note, &self.log)
    }

    /// The log's newest checkpoint, its signatures checked.
    pub fn checkpoint(&self) -> Result<Observed, AuditError> {
        let bytes = self.fetch("checkpoint")?;
        self.open(Note::parse(&bytes)?)
    }

    /// Checks that `new` extends `kept`: same log, not smaller, the same root at the
    /// same size, and a consistency proof (built from the log's tiles) that verifies.
    pub fn check_extends(&mut self, kept: &Checkpoint, new: &Checkpoint) -> Result<(), AuditError> {
        if kept.origin != new.origin {
            return Err(AuditError::OtherLog {
                kept: kept.origin.clone(),
                served: new.origin.clone(),
            });
        }
        if new.size < kept.size {
            return Err(AuditError::RolledBack {
                from: kept.size,
                to: new.size,
            });
        }
        if new.size == kept.size {
            return if new.root == kept.root {
                Ok(())
            } else {
                Err(AuditError::Fork(new.size))
            };
        }
        if kept.size == 0 {
            return Ok(());
        }
        let proof = tiles::consistency(&mut self.hashes(new.size), kept.size, new.size)?;
        if super::verify_consistency(kept.size, new.size, &kept.root, &new.root, &proof) {
            Ok(())
        } else {
            Err(AuditError::Inconsistent {
                from: kept.size,
                to: new.size,
            })
        }
    }

    /// Checks that entry `index` of the tree `cp` signs is `digest`: the entry bundle
    /// holds it, and its inclusion proof (from the tiles) leads to the signed root.
    pub fn check_entry(
        &mut self,
        cp: &Checkpoint,
        index: u64,
        digest: &Digest,
    ) -> Result<(), AuditError> {
        let missing = || AuditError::NotIncluded {
            index,
            digest: *digest,
        };
        if index >= cp.size {
            return Err(missing());
        }
        let mut id = TileId::holding(0, index, cp.size);
        id.kind = TileKind::Entries;
        let bundle = self.fetch(&format!("tile/{}", id.path()))?;
        let entries =
            tiles::read_bundle(&bundle, id.width).ok_or_else(|| AuditError::Tile(id.path()))?;
        let at = usize::try_from(index % tiles::WIDTH).unwrap_or(usize::MAX);
        if entries.get(at) != Some(digest) {
            return Err(missing());
        }
        let proof = tiles::inclusion(&mut self.hashes(cp.size), index, cp.size)?;
        if merkle::verify_inclusion(&super::leaf(digest), index, cp.size, &proof, &cp.root) {
            Ok(())
        } else {
            Err(missing())
        }
    }

    fn hashes(&mut self, size: u64) -> FetchedTiles<'_> {
        FetchedTiles {
            auditor: self,
            size,
        }
    }

    fn tile(&mut self, id: TileId) -> Result<&[Digest], AuditError> {
        if !self.cache.contains_key(&id) {
            let bytes = self.fetch(&format!("tile/{}", id.path()))?;
            let hashes =
                tiles::read_hashes(&bytes, id.width).ok_or_else(|| AuditError::Tile(id.path()))?;
            self.cache.insert(id, hashes);
        }
        Ok(self.cache.get(&id).map_or(&[][..], Vec::as_slice))
    }
}

/// The tree of `size` leaves as the log's tiles give it.
struct FetchedTiles<'a> {
    auditor: &'a mut Auditor,
    size: u64,
}

impl TreeHashes for FetchedTiles<'_> {
    type Error = AuditError;

    fn subtree(&mut self, level: u32, i: u64) -> Result<Digest, AuditError> {
        // Tree level 8·L + r: 2^r consecutive hashes of one level-L tile.
        let (tile_level, r) = ((level / 8) as u8, level % 8);
        let first = i << r;
        let id = TileId::holding(tile_level, first, self.size);
        let off = usize::try_from(first % tiles::WIDTH).unwrap_or(usize::MAX);
        let hashes = self.auditor.tile(id)?;
        hashes
            .get(off..off.saturating_add(1 << r))
            .map(merkle::root)
            .ok_or_else(|| AuditError::Tile(id.path()))
    }
}
