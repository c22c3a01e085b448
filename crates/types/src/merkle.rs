//! RFC 9162 Merkle tree hash, inclusion proofs and their verification.
//!
//! Leaves are hashed as `SHA-256(0x00 ‖ data)` and interior nodes as
//! `SHA-256(0x01 ‖ left ‖ right)`; the tree over `n` leaves splits at the largest
//! power of two below `n` (RFC 9162 §2.1.1). The AEG structure root `s` is this tree
//! over the nodes' leaf records in commit order.

use sha2::{Digest as _, Sha256};

use crate::digest::Digest;

/// `SHA-256(0x00 ‖ data)`.
pub fn leaf_hash(data: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    Digest(h.finalize().into())
}

/// `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Digest, right: &Digest) -> Digest {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left.0);
    h.update(right.0);
    Digest(h.finalize().into())
}

/// Merkle tree hash over already-hashed leaves; the empty tree is `SHA-256("")`.
pub fn root(leaves: &[Digest]) -> Digest {
    match leaves {
        [] => Digest::sha256(b""),
        [one] => *one,
        _ => {
            let k = split(leaves.len());
            let (l, r) = leaves.split_at(k);
            node_hash(&root(l), &root(r))
        }
    }
}

/// The largest power of two strictly less than `n` (for `n ≥ 2`).
fn split(n: usize) -> usize {
    let mut k = 1;
    while k << 1 < n {
        k <<= 1;
    }
    k
}

/// Inclusion proof (audit path) for leaf `index` among `leaves`, RFC 9162 §2.1.3.1;
/// `None` when the index is out of range.
pub fn inclusion_proof(leaves: &[Digest], index: usize) -> Option<Vec<Digest>> {
    if index >= leaves.len() {
        return None;
    }
    let mut path = Vec::new();
    let mut slice = leaves;
    let mut m = index;
    let mut stack = Vec::new();
    while slice.len() > 1 {
        let k = split(slice.len());
        let (l, r) = slice.split_at(k);
        if m < k {
            stack.push(root(r));
            slice = l;
        } else {
            stack.push(root(l));
            slice = r;
            m -= k;
        }
    }
    while let Some(h) = stack.pop() {
        path.push(h);
    }
    Some(path)
}

/// Verifies an inclusion proof, RFC 9162 §2.1.3.2.
pub fn verify_inclusion(
    leaf: &Digest,
    index: u64,
    tree_size: u64,
    proof: &[Digest],
    root: &Digest,
) -> bool {
    if index >= tree_size {
        return false;
    }
    let (mut fn_, mut sn) = (index, tree_size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    sn == 0 && r == *root
}

/// The tree hash of a growing list of leaves, kept as the roots of its perfect
/// subtrees (one per set bit of the count, largest first): pushing a leaf costs one
/// node hash amortised and [`Frontier::root`] at most `log2 n`, so a journal writer can
/// state the structure root of its prefix at every checkpoint without rehashing it.
/// The root equals [`root`] over the same leaves (RFC 9162 splits at the largest power
/// of two below `n`, which is exactly the first perfect subtree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    /// `(size, root)` of each perfect subtree, sizes strictly decreasing.
    peaks: Vec<(u64, Digest)>,
    len: u64,
}

impl Frontier {
    /// Appends one already-hashed leaf.
    pub fn push(&mut self, leaf: Digest) {
        let (mut size, mut hash) = (1u64, leaf);
        while let Some(&(s, left)) = self.peaks.last() {
            if s != size {
                break;
            }
            self.peaks.pop();
            hash = node_hash(&left, &hash);
            size = size.saturating_mul(2);
        }
        self.peaks.push((size, hash));
        self.len += 1;
    }

    /// Leaves pushed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no leaf was pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tree hash of the leaves so far (`SHA-256("")` for none).
    pub fn root(&self) -> Digest {
        let mut peaks = self.peaks.iter().rev();
        match peaks.next() {
            None => Digest::sha256(b""),
            Some(&(_, last)) => peaks.fold(last, |right, (_, left)| node_hash(left, &right)),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn leaves(n: usize) -> Vec<Digest> {
        (0..n).map(|i| leaf_hash(&[i as u8])).collect()
    }

    #[test]
    fn frontier_root_is_the_tree_hash_of_every_prefix() {
        let all = leaves(200);
        let mut f = Frontier::default();
        assert_eq!(f.root(), root(&[]));
        for (i, l) in all.iter().enumerate() {
            f.push(*l);
            assert_eq!(f.len(), i as u64 + 1);
            assert_eq!(f.root(), root(&all[..=i]), "{} leaves", i + 1);
        }
    }

    #[test]
    fn matches_independent_implementation() {
        // Roots computed by an independent Python implementation of RFC 9162 MTH
        // (tests/data/merkle_vectors.txt documents the script) over leaves [0], [0,1], ...
        let vectors = include_str!("../tests/data/merkle_vectors.txt");
        let mut checked = 0;
        for line in vectors
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (n, hex) = line.split_once(' ').unwrap();
            let n: usize = n.parse().unwrap();
            assert_eq!(root(&leaves(n)).to_hex(), hex, "tree of {n} leaves");
            checked += 1;
        }
        assert!(checked >= 10);
    }

    proptest! {
        #[test]
        fn every_inclusion_proof_verifies(n in 1usize..70, seed in any::<usize>()) {
            let ls = leaves(n);
            let i = seed % n;
            let r = root(&ls);
            let proof = inclusion_proof(&ls, i).unwrap();
            prop_assert!(verify_inclusion(&ls[i], i as u64, n as u64, &proof, &r));
            // The same proof fails for another leaf, index or size.
            let other = leaf_hash(b"other");
            prop_assert!(!verify_inclusion(&other, i as u64, n as u64, &proof, &r));
            if n > 1 {
                let j = (i + 1) % n;
                prop_assert!(ls[i] == ls[j] || !verify_inclusion(&ls[i], j as u64, n as u64, &proof, &r));
            }
        }
    }
}
