//! The transparency log: an append-only RFC 9162 Merkle tree over the SHA-256 digests
//! of every stored submission, with signed tree heads, inclusion proofs (reusing
//! [`knox_types::merkle`]) and consistency proofs (RFC 9162 §2.1.4), and the checks an
//! auditor (a provider holding its receipts, a regulator holding old heads) runs to
//! detect a withheld run, a reordered log or a fork.
//!
//! The same log is served in the formats the transparency-log ecosystem shares, so
//! that monitors and witnesses that never heard of Knox can watch it: checkpoints as
//! C2SP signed notes ([`note`]), the tree and its entries as C2SP tiles ([`tiles`]),
//! witness cosignatures per C2SP `tlog-cosignature`; [`audit`] is the auditor's side
//! (`knox log`), which reads only those formats.

use knox_attest::PartyKey;
use knox_types::bundle::PublicKey;
use knox_types::bytes::HexBytes;
use knox_types::digest::Digest;
use knox_types::merkle;
use serde::{Deserialize, Serialize};

pub mod audit;
pub mod note;
pub mod tiles;

/// Signature context of a signed tree head.
pub const STH_CONTEXT: &[u8] = b"knox-server/tree-head/v1\n";

/// The origin of a log whose operator named none: `knox.invalid/` and the first 16 hex
/// digits of the log key's id, so that logs with different keys have different names.
pub fn default_origin(key: &PublicKey) -> String {
    let id = knox_attest::key::key_id(&key.public_key.0).to_hex();
    format!("knox.invalid/{}", id.get(..16).unwrap_or(&id))
}

/// The leaf hash of a submission: `SHA-256(0x00 ‖ digest)`.
pub fn leaf(submission: &Digest) -> Digest {
    merkle::leaf_hash(&submission.0)
}

/// Consistency proof between the tree of the first `m` leaves and the tree of all
/// `leaves` (RFC 9162 §2.1.4.1); `None` unless `0 < m ≤ leaves.len()`.
pub fn consistency_proof(leaves: &[Digest], m: usize) -> Option<Vec<Digest>> {
    if m == 0 || m > leaves.len() {
        return None;
    }
    let Ok(proof) = tiles::consistency(&mut { leaves }, m as u64, leaves.len() as u64);
    Some(proof)
}

/// Verifies a consistency proof (RFC 9162 §2.1.4.2): the tree of size `first` with
/// root `first_root` is a prefix of the tree of size `second` with root `second_root`.
pub fn verify_consistency(
    first: u64,
    second: u64,
    first_root: &Digest,
    second_root: &Digest,
    proof: &[Digest],
) -> bool {
    if first > second {
        return false;
    }
    if first == second {
        return proof.is_empty() && first_root == second_root;
    }
    if first == 0 {
        return proof.is_empty();
    }
    let mut path: Vec<Digest> = Vec::with_capacity(proof.len() + 1);
    if first.is_power_of_two() {
        path.push(*first_root);
    }
    path.extend_from_slice(proof);
    let (mut fn_, mut sn) = (first - 1, second - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let Some((head, rest)) = path.split_first() else {
        return false;
    };
    let (mut fr, mut sr) = (*head, *head);
    for c in rest {
        if sn == 0 {
            return false;
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = merkle::node_hash(c, &fr);
            sr = merkle::node_hash(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = merkle::node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    fr == *first_root && sr == *second_root && sn == 0
}

/// A signed tree head: the log's size and root at a time, signed by the log's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TreeHead {
    /// Number of leaves.
    pub tree_size: u64,
    /// RFC 9162 root of those leaves, hex.
    #[schema(value_type = String)]
    pub root: Digest,
    /// Unix seconds when it was signed.
    pub timestamp: u64,
    /// The log's public key.
    #[schema(value_type = crate::api::PublicKeyDoc)]
    pub key: PublicKey,
    /// Ed25519 signature over [`TreeHead::message`] with [`STH_CONTEXT`], hex.
    #[schema(value_type = String)]
    pub signature: HexBytes,
}

impl TreeHead {
    /// The signed bytes: size, root and time, fixed width.
    pub fn message(tree_size: u64, root: &Digest, timestamp: u64) -> Vec<u8> {
        let mut m = Vec::with_capacity(48);
        m.extend_from_slice(&tree_size.to_be_bytes());
        m.extend_from_slice(&root.0);
        m.extend_from_slice(&timestamp.to_be_bytes());
        m
    }

    /// Signs a head.
    pub fn sign(key: &PartyKey, tree_size: u64, root: Digest, timestamp: u64) -> Self {
        let signature = key.sign(STH_CONTEXT, &Self::message(tree_size, &root, timestamp));
        Self {
            tree_size,
            root,
            timestamp,
            key: key.public_key(),
            signature,
        }
    }

    /// Checks the signature, and that the head is signed by `log_key` (the key the
    /// auditor pinned).
    pub fn check(&self, log_key: &PublicKey) -> Result<(), LogError> {
        if self.key != *log_key {
            return Err(LogError::OtherLog);
        }
        let m = Self::message(self.tree_size, &self.root, self.timestamp);
        knox_attest::key::verify_signature(&self.key, STH_CONTEXT, &m, &self.signature)
            .map_err(|_| LogError::BadSignature)
    }
}

/// What `submit` returns: where the submission sits in the log, and the proof.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Inclusion {
    /// SHA-256 of the submitted bytes, hex.
    #[schema(value_type = String)]
    pub digest: Digest,
    /// Leaf index.
    pub index: u64,
    /// Audit path to [`Inclusion::head`]'s root, hex hashes.
    #[schema(value_type = Vec<String>)]
    pub path: Vec<Digest>,
    /// The signed tree head the path leads to.
    pub head: TreeHead,
}

/// A consistency proof between two heads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Consistency {
    /// The older head.
    pub from: TreeHead,
    /// The newer head.
    pub to: TreeHead,
    /// RFC 9162 consistency path, hex hashes.
    #[schema(value_type = Vec<String>)]
    pub path: Vec<Digest>,
}

/// What an auditor found wrong with the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The head is signed by another key than the pinned log key.
    #[error("the tree head is signed by another key than this log's")]
    OtherLog,
    /// The head's signature does not verify.
    #[error("the tree head's signature does not verify")]
    BadSignature,
    /// The submission is not in the tree the head signs (withheld or moved).
    #[error("submission {0} is not at its index in the signed tree: withheld or reordered")]
    NotIncluded(Digest),
    /// Two signed heads of one size with different roots: the log forked.
    #[error("two signed tree heads of size {0} with different roots: the log forked")]
    Fork(u64),
    /// The newer head does not extend the older one.
    #[error(
        "the tree of size {to} does not extend the tree of size {from}: entries were removed, \
         reordered or the log forked"
    )]
    Inconsistent {
        /// Older size.
        from: u64,
        /// Newer size.
        to: u64,
    },
}

/// Checks a submission's inclusion proof against its signed head.
pub fn check_inclusion(inc: &Inclusion, log_key: &PublicKey) -> Result<(), LogError> {
    inc.head.check(log_key)?;
    if merkle::verify_inclusion(
        &leaf(&inc.digest),
        inc.index,
        inc.head.tree_size,
        &inc.path,
        &inc.head.root,
    ) {
        Ok(())
    } else {
        Err(LogError::NotIncluded(inc.digest))
    }
}

/// Checks that `c.to` extends `c.from` (both signed by `log_key`); two heads of one
/// size with different roots are a fork.
pub fn check_consistency(c: &Consistency, log_key: &PublicKey) -> Result<(), LogError> {
    c.from.check(log_key)?;
    c.to.check(log_key)?;
    if c.from.tree_size == c.to.tree_size && c.from.root != c.to.root {
        return Err(LogError::Fork(c.from.tree_size));
    }
    if verify_consistency(
        c.from.tree_size,
        c.to.tree_size,
        &c.from.root,
        &c.to.root,
        &c.path,
    ) {
        Ok(())
    } else {
        Err(LogError::Inconsistent {
            from: c.from.tree_size,
            to: c.to.tree_size,
        })
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Digest> {
        (0..n)
            .map(|i| leaf(&Digest::sha256(&(i as u64).to_be_bytes())))
            .collect()
    }

    #[test]
    fn every_prefix_is_consistent_and_nothing_else_is() {
        let all = leaves(33);
        for n in 1..=all.len() {
            let tree = &all[..n];
            let r2 = merkle::root(tree);
            for m in 1..=n {
                let r1 = merkle::root(&all[..m]);
                let p = consistency_proof(tree, m).unwrap();
                assert!(
                    verify_consistency(m as u64, n as u64, &r1, &r2, &p),
                    "{m}/{n}"
                );
                if m < n {
                    // A wrong old root or a truncated proof fail (the size is bound by the
                    // head's signature, not by the path).
                    let bad = merkle::root(&all[1..=m]);
                    assert!(!verify_consistency(m as u64, n as u64, &bad, &r2, &p));
                    if !p.is_empty() {
                        assert!(!verify_consistency(
                            m as u64,
                            n as u64,
                            &r1,
                            &r2,
                            &p[..p.len() - 1]
                        ));
                    }
                }
            }
        }
        assert!(consistency_proof(&all, 0).is_none());
        assert!(consistency_proof(&all[..3], 4).is_none());
    }

    #[test]
    fn a_reordered_log_is_not_consistent_with_its_past() {
        let all = leaves(8);
        let mut reordered = all.clone();
        reordered.swap(1, 2);
        let p = consistency_proof(&reordered, 3).unwrap();
        // The honest head of size 3 cannot be extended by the reordered tree.
        assert!(!verify_consistency(
            3,
            8,
            &merkle::root(&all[..3]),
            &merkle::root(&reordered),
            &p
        ));
    }

    #[test]
    fn heads_are_signed_and_forks_detected() {
        let key = PartyKey::from_seed([3; 32]);
        let other = PartyKey::from_seed([4; 32]);
        let all = leaves(5);
        let h3 = TreeHead::sign(&key, 3, merkle::root(&all[..3]), 10);
        let h5 = TreeHead::sign(&key, 5, merkle::root(&all), 11);
        let ok = Consistency {
            from: h3.clone(),
            to: h5.clone(),
            path: consistency_proof(&all, 3).unwrap(),
        };
        assert_eq!(check_consistency(&ok, &key.public_key()), Ok(()));
        assert_eq!(
            check_consistency(&ok, &other.public_key()),
            Err(LogError::OtherLog)
        );
        let mut forged = h5.clone();
        forged.tree_size = 4;
        assert_eq!(forged.check(&key.public_key()), Err(LogError::BadSignature));
        let mut fork = all.clone();
        fork[2] = leaf(&Digest::sha256(b"other"));
        let f3 = TreeHead::sign(&key, 3, merkle::root(&fork[..3]), 12);
        let c = Consistency {
            from: h3.clone(),
            to: f3,
            path: vec![],
        };
        assert_eq!(
            check_consistency(&c, &key.public_key()),
            Err(LogError::Fork(3))
        );
        let inc = Inclusion {
            digest: Digest::sha256(&2u64.to_be_bytes()),
            index: 2,
            path: merkle::inclusion_proof(&all, 2).unwrap(),
            head: h5,
        };
        assert_eq!(check_inclusion(&inc, &key.public_key()), Ok(()));
        let moved = Inclusion { index: 1, ..inc };
        assert!(matches!(
            check_inclusion(&moved, &key.public_key()),
            Err(LogError::NotIncluded(_))
        ));
    }
}
