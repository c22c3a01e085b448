//! C2SP tiles (<https://c2sp.org/tlog-tiles>): the log's Merkle tree served as tiles of
//! 256 consecutive hashes (`tile/<L>/<N>[.p/<W>]`) and its entries as bundles
//! (`tile/entries/<N>[.p/<W>]`), and proofs computed from any source of tree hashes —
//! the stored leaves on the server, fetched tiles at an auditor.
//!
//! An entry of this log is the 32-byte SHA-256 digest of one stored submission; its leaf
//! hash is `SHA-256(0x00 ‖ entry)` (RFC 6962), as [`super::leaf`] computes.

use knox_types::digest::Digest;
use knox_types::merkle;

/// Hashes in a full tile.
pub const WIDTH: u64 = 256;
/// Bytes of one hash in a tile.
pub const HASH: usize = 32;
/// The highest tile level the format names.
pub const MAX_LEVEL: u8 = 63;

/// Which tile: a level of the hash tree, or the entry bundles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileKind {
    /// Hashes at tree level `8 × L` (level 0: the leaf hashes).
    Hashes(u8),
    /// The entries themselves, as length-prefixed bundles.
    Entries,
}

/// One tile: its kind, its index within the level, and its width (256 when full).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TileId {
    /// Level or entry bundle.
    pub kind: TileKind,
    /// Index within the level.
    pub index: u64,
    /// Number of hashes (or entries), 1–256.
    pub width: u16,
}

/// A tile path that does not name a tile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a tile path: `{0}`")]
pub struct BadPath(pub String);

impl TileId {
    /// Parses the part of a tile URL after `tile/`: `0/x001/234`, `1/005.p/17`,
    /// `entries/000`. Only the canonical spelling is accepted.
    pub fn parse(path: &str) -> Result<Self, BadPath> {
        let bad = || BadPath(path.to_owned());
        let (head, rest) = path.split_once('/').ok_or_else(bad)?;
        let kind = if head == "entries" {
            TileKind::Entries
        } else {
            let level: u8 = head.parse().map_err(|_| bad())?;
            if level > MAX_LEVEL {
                return Err(bad());
            }
            TileKind::Hashes(level)
        };
        let (groups, width) = match rest.split_once(".p/") {
            Some((g, w)) => {
                let w: u16 = w.parse().map_err(|_| bad())?;
                if !(1..WIDTH as u16).contains(&w) {
                    return Err(bad());
                }
                (g, w)
            }
            None => (rest, WIDTH as u16),
        };
        let mut index: u64 = 0;
        for g in groups.split('/') {
            let digits = g.strip_prefix('x').unwrap_or(g);
            if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let d: u64 = digits.parse().map_err(|_| bad())?;
            index = index
                .checked_mul(1000)
                .and_then(|i| i.checked_add(d))
                .ok_or_else(bad)?;
        }
        let id = Self { kind, index, width };
        // One spelling per tile: `x000/005` or `5.p/0` are not this tile's path.
        if id.path() == path {
            Ok(id)
        } else {
            Err(bad())
        }
    }

    /// The tile's path after `tile/`.
    pub fn path(&self) -> String {
        let head = match self.kind {
            TileKind::Hashes(l) => l.to_string(),
            TileKind::Entries => "entries".to_owned(),
        };
        let mut groups = Vec::new();
        let mut n = self.index;
        loop {
            groups.push(n % 1000);
            n /= 1000;
            if n == 0 {
                break;
            }
        }
        let mut out = head;
        for (i, g) in groups.iter().enumerate().rev() {
            out.push('/');
            if i > 0 {
                out.push('x');
            }
            out.push_str(&format!("{g:03}"));
        }
        if u64::from(self.width) < WIDTH {
            out.push_str(&format!(".p/{}", self.width));
        }
        out
    }

    /// The tree level of the tile's hashes (0 for entries and level-0 tiles).
    fn tree_level(&self) -> u32 {
        match self.kind {
            TileKind::Hashes(l) => u32::from(l) * 8,
            TileKind::Entries => 0,
        }
    }

    /// The leaves `[start, end)` the tile's hashes span; `None` past 2^64.
    pub fn leaves(&self) -> Option<(u64, u64)> {
        let per_hash = 1u64.checked_shl(self.tree_level())?;
        let start = self.index.checked_mul(WIDTH)?.checked_mul(per_hash)?;
        let end = start.checked_add(u64::from(self.width).checked_mul(per_hash)?)?;
        Some((start, end))
    }

    /// The tile of `level` holding tree-level-`8 × level` hash `i`, as wide as a tree of
    /// `size` leaves makes it.
    pub fn holding(level: u8, i: u64, size: u64) -> Self {
        let index = i / WIDTH;
        let at_level = size.checked_shr(u32::from(level) * 8).unwrap_or(0);
        let width = at_level.saturating_sub(index * WIDTH).min(WIDTH);
        Self {
            kind: TileKind::Hashes(level),
            index,
            width: width as u16,
        }
    }
}

/// A tile's bytes from the leaf hashes it spans ([`TileId::leaves`]): each hash of a
/// level-`L` tile is the root of `256^L` consecutive leaves.
pub fn hash_tile(id: &TileId, leaves: &[Digest]) -> Vec<u8> {
    let per = 1usize << id.tree_level().min(63);
    let mut out = Vec::with_capacity(usize::from(id.width) * HASH);
    for chunk in leaves.chunks(per.max(1)) {
        out.extend_from_slice(&merkle::root(chunk).0);
    }
    out
}

/// An entry bundle: each entry as a big-endian `u16` length and its bytes.
pub fn entry_bundle(entries: &[Digest]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * (2 + HASH));
    for e in entries {
        out.extend_from_slice(&(HASH as u16).to_be_bytes());
        out.extend_from_slice(&e.0);
    }
    out
}

/// Reads an entry bundle of `width` 32-byte entries; `None` if it is not one.
pub fn read_bundle(bytes: &[u8], width: u16) -> Option<Vec<Digest>> {
    let mut out = Vec::with_capacity(usize::from(width));
    let mut rest = bytes;
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let len = usize::from(u16::from_be_bytes(*len));
        let (entry, tail) = tail.split_at_checked(len)?;
        out.push(Digest(entry.try_into().ok()?));
        rest = tail;
    }
    (rest.is_empty() && out.len() == usize::from(width)).then_some(out)
}

/// Reads a hash tile of `width` hashes; `None` if it is not one.
pub fn read_hashes(bytes: &[u8], width: u16) -> Option<Vec<Digest>> {
    if bytes.len() != usize::from(width) * HASH {
        return None;
    }
    bytes
        .chunks_exact(HASH)
        .map(|c| c.try_into().ok().map(Digest))
        .collect()
}

/// A source of the tree's hashes: the root of any aligned, complete subtree.
pub trait TreeHashes {
    /// Why a hash could not be had.
    type Error;

    /// The root of the perfect subtree at tree level `level` with index `i`: the
    /// leaves `[i·2^level, (i+1)·2^level)`, all within the tree.
    fn subtree(&mut self, level: u32, i: u64) -> Result<Digest, Self::Error>;

    /// The RFC 6962 root of the leaves `[lo, hi)`, `lo < hi`, from perfect subtrees.
    fn range_root(&mut self, lo: u64, hi: u64) -> Result<Digest, Self::Error> {
        let len = hi - lo;
        if len.is_power_of_two() && lo.is_multiple_of(len) {
            return self.subtree(len.trailing_zeros(), lo >> len.trailing_zeros());
        }
        let k = split(len);
        let left = self.range_root(lo, lo + k)?;
        let right = self.range_root(lo + k, hi)?;
        Ok(merkle::node_hash(&left, &right))
    }
}

/// The leaves themselves, as the server holds them.
impl TreeHashes for &[Digest] {
    type Error = std::convert::Infallible;

    fn subtree(&mut self, level: u32, i: u64) -> Result<Digest, Self::Error> {
        let lo = usize::try_from(i << level).unwrap_or(usize::MAX);
        let hi = lo.saturating_add(1 << level);
        Ok(merkle::root(self.get(lo..hi).unwrap_or_default()))
    }
}

/// The largest power of two strictly less than `n` (for `n ≥ 2`).
pub(crate) fn split(n: u64) -> u64 {
    1 << (u64::BITS - 1 - (n - 1).leading_zeros())
}

/// The RFC 9162 consistency proof from the tree of `m` leaves to the tree of `n`
/// (`0 < m ≤ n`), from `src`.
pub fn consistency<S: TreeHashes>(src: &mut S, m: u64, n: u64) -> Result<Vec<Digest>, S::Error> {
    let mut out = Vec::new();
    if 0 < m && m <= n {
        subproof(src, m, 0, n, true, &mut out)?;
    }
    Ok(out)
}

/// RFC 9162 §2.1.4.1 `SUBPROOF(m, D[lo:hi], b)`.
fn subproof<S: TreeHashes>(
    src: &mut S,
    m: u64,
    lo: u64,
    hi: u64,
    complete: bool,
    out: &mut Vec<Digest>,
) -> Result<(), S::Error> {
    let n = hi - lo;
    if m == n {
        if !complete {
            out.push(src.range_root(lo, hi)?);
        }
        return Ok(());
    }
    let k = split(n);
    if m <= k {
        subproof(src, m, lo, lo + k, complete, out)?;
        out.push(src.range_root(lo + k, hi)?);
    } else {
        subproof(src, m - k, lo + k, hi, false, out)?;
        out.push(src.range_root(lo, lo + k)?);
    }
    Ok(())
}

/// The RFC 9162 inclusion proof of leaf `index` in the tree of `n` leaves, from `src`.
pub fn inclusion<S: TreeHashes>(src: &mut S, index: u64, n: u64) -> Result<Vec<Digest>, S::Error> {
    let mut out = Vec::new();
    let (mut lo, mut hi) = (0, n);
    // The path is listed from the leaf up: collect top-down, then reverse.
    while hi - lo > 1 && index < hi && index >= lo {
        let k = split(hi - lo);
        if index < lo + k {
            out.push(src.range_root(lo + k, hi)?);
            hi = lo + k;
        } else {
            out.push(src.range_root(lo, lo + k)?);
            lo += k;
        }
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn leaves(n: u64) -> Vec<Digest> {
        (0..n)
            .map(|i| super::super::leaf(&Digest::sha256(&i.to_be_bytes())))
            .collect()
    }

    #[test]
    fn paths_have_one_spelling() {
        for (path, kind, index, width) in [
            ("0/000", TileKind::Hashes(0), 0, 256),
            ("0/x001/x234/067", TileKind::Hashes(0), 1_234_067, 256),
            ("1/005.p/17", TileKind::Hashes(1), 5, 17),
            ("entries/x001/000.p/1", TileKind::Entries, 1000, 1),
        ] {
            let id = TileId::parse(path).unwrap();
            assert_eq!(
                (id.kind, id.index, id.width),
                (kind, index, width),
                "{path}"
            );
            assert_eq!(id.path(), path);
        }
        for bad in [
            "0",
            "0/5",
            "0/x000/005",
            "00/000",
            "64/000",
            "0/000.p/0",
            "0/000.p/256",
            "0/000.p/07",
            "0/x001",
            "0/001/x002",
            "x/000",
            "0/000/",
            "0/000.p/",
            "0/x999/x999/x999/x999/x999/x999/x999/999",
        ] {
            assert!(TileId::parse(bad).is_err(), "{bad}");
        }
        // Levels whose span passes 2^64 name no leaves.
        assert_eq!(TileId::parse("7/001").unwrap().leaves(), None);
    }

    /// Proofs made from the leaves by ranges are the proofs made from the slices, and
    /// verify; so are the proofs made from tiles cut out of those leaves.
    #[test]
    fn proofs_from_ranges_and_from_tiles_verify() {
        struct Tiles<'a> {
            all: &'a [Digest],
            size: u64,
        }
        impl TreeHashes for Tiles<'_> {
            type Error = ();
            fn subtree(&mut self, level: u32, i: u64) -> Result<Digest, ()> {
                let tl = (level / 8) as u8;
                let r = level % 8;
                let first = i << r;
                let id = TileId::holding(tl, first, self.size);
                let (s, e) = id.leaves().ok_or(())?;
                let tile = hash_tile(&id, &self.all[s as usize..e as usize]);
                let hashes = read_hashes(&tile, id.width).ok_or(())?;
                let off = (first % WIDTH) as usize;
                Ok(merkle::root(hashes.get(off..off + (1 << r)).ok_or(())?))
            }
        }
        let all = leaves(600);
        for n in [1u64, 2, 3, 7, 8, 255, 256, 257, 511, 512, 513, 600] {
            let tree = &all[..n as usize];
            let root = merkle::root(tree);
            let mut tiles = Tiles { all: tree, size: n };
            assert_eq!(tiles.range_root(0, n).unwrap(), root, "{n}");
            for m in [1u64, 2, 3, 5, 128, 256, 300, 512, n] {
                if m > n {
                    continue;
                }
                let mut slice: &[Digest] = tree;
                let p = consistency(&mut slice, m, n).unwrap();
                assert_eq!(
                    p,
                    super::super::consistency_proof(tree, m as usize).unwrap()
                );
                assert_eq!(consistency(&mut tiles, m, n).unwrap(), p);
                let r1 = merkle::root(&tree[..m as usize]);
                assert!(super::super::verify_consistency(m, n, &r1, &root, &p));
                let i = m - 1;
                let q = inclusion(&mut tiles, i, n).unwrap();
                assert_eq!(q, merkle::inclusion_proof(tree, i as usize).unwrap());
                assert!(merkle::verify_inclusion(&tree[i as usize], i, n, &q, &root));
            }
        }
    }

    #[test]
    fn bundles_round_trip_and_malformed_ones_are_refused() {
        let e = vec![Digest::sha256(b"a"), Digest::sha256(b"b")];
        let b = entry_bundle(&e);
        assert_eq!(read_bundle(&b, 2), Some(e));
        assert_eq!(read_bundle(&b, 3), None);
        assert_eq!(read_bundle(&b[..b.len() - 1], 2), None);
        assert_eq!(read_hashes(&[0; 33], 1), None);
    }
}
