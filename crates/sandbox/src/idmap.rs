//! Granted paths the tools' identity could not change, made usable by idmapped mounts.
//!
//! When Knox runs as root, tools run as an unprivileged identity ([`RunAs`]). A
//! directory the policy grants changes in, but whose mode bits refuse that identity
//! (a root-owned `0755` project directory, a user's home), would fail every write
//! with `EACCES` although Landlock allows it. Rather than change the files' owner,
//! the child attaches, in a mount namespace of its own, an *idmapped* bind mount of
//! the path over itself (Linux ≥ 5.12; ext4, xfs, btrfs, tmpfs ≥ 6.3 and others):
//! through it the path's owner and group are seen as the tools' uid and gid, so the
//! kernel's permission checks pass where the owner's would, and what the tool
//! creates is stored as owned by the path's owner and group. Nothing on disk
//! changes owner; the host's mount table does not change (the namespace's mounts
//! are private); other owners' files keep their protection (unmapped ids are seen
//! as the overflow id). Landlock's rules follow inodes, so they hold through the
//! new mount as before, and the filter refuses set-id mode bits
//! ([`crate::filter::rules`]): a file the tool creates there cannot carry the
//! owner's identity out of the sandbox.
//!
//! Where the kernel or the file system cannot make an idmapped mount, the child
//! starts without it and the evidence carries a note saying why the path stays
//! unusable and how to give the identity access.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::identity::{RUN_AS_ENV, RunAs};
use crate::policy::Access;
use crate::ruleset::ResolvedRule;
use crate::sys;

/// Most owners whose user namespace is kept for later spawns (each an open
/// descriptor); past it a namespace is made for the spawn and dropped.
const KEPT_NAMESPACES: usize = 64;

/// The user namespaces idmapped mounts are made with, one per owner and group.
#[derive(Debug, Default)]
pub(crate) struct Idmaps {
    namespaces: Mutex<BTreeMap<(u32, u32), Arc<OwnedFd>>>,
}

/// A detached, idmapped copy of a granted path's mounts, and the path the child
/// attaches it over.
#[derive(Debug)]
pub(crate) struct Mount {
    pub(crate) tree: OwnedFd,
    pub(crate) target: CString,
}

/// Whether a grant allows changing what lies beneath its path.
fn changes(rule: &ResolvedRule) -> bool {
    rule.access.iter().any(|a| {
        matches!(
            a,
            Access::Write | Access::Create | Access::Remove | Access::Replace
        )
    })
}

impl Idmaps {
    /// The idmapped mounts `rules` need for `identity`: one for each policy grant
    /// that allows changes on a path `identity` cannot change by its mode bits,
    /// outer paths first. Each mount made, and each that could not be, adds a note.
    /// A path holding `workspace` is not mounted: through the mount the workspace,
    /// owned by `identity`, would be seen as unmapped and refuse the tool.
    pub(crate) fn mounts(
        &self,
        identity: RunAs,
        rules: &[ResolvedRule],
        workspace: &Path,
        notes: &mut Vec<String>,
    ) -> Vec<Mount> {
        let mut wanted: Vec<&ResolvedRule> =
            rules.iter().filter(|r| !r.implicit && changes(r)).collect();
        wanted.sort_by_key(|r| (r.path.components().count(), r.path.clone()));
        wanted.dedup_by(|a, b| a.path == b.path);
        let mut mounts = Vec::new();
        for rule in wanted {
            let Some(why) = identity.cannot_change(&rule.path) else {
                continue;
            };
            if workspace.starts_with(&rule.path) {
                let e = std::io::Error::other("it holds the tools' workspace");
                notes.push(unusable(identity, &rule.path, &why, &e));
                continue;
            }
            match self.mount(identity, &rule.path) {
                Ok((mount, owner)) => {
                    notes.push(format!(
                        "`{}` (owner {}:{}) is mounted idmapped for the tools: its owner and group are seen as {}:{}, so the tools change it as the grant allows, and what they create there is owned by {}:{} on disk",
                        rule.path.display(),
                        owner.0,
                        owner.1,
                        identity.uid,
                        identity.gid,
                        owner.0,
                        owner.1,
                    ));
                    mounts.push(mount);
                }
                Err(e) => notes.push(unusable(identity, &rule.path, &why, &e)),
            }
        }
        mounts
    }

    fn mount(&self, identity: RunAs, path: &Path) -> std::io::Result<(Mount, (u32, u32))> {
        let meta = std::fs::metadata(path)?;
        let owner = (meta.uid(), meta.gid());
        let namespace = self.namespace(identity, owner)?;
        let target = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let tree = sys::idmapped_tree(&target, &namespace)?;
        Ok((Mount { tree, target }, owner))
    }

    /// The user namespace mapping `owner` to `identity` (uid and gid alike).
    fn namespace(&self, identity: RunAs, owner: (u32, u32)) -> std::io::Result<Arc<OwnedFd>> {
        let mut kept = self
            .namespaces
            .lock()
            .map_err(|_| std::io::Error::other("idmap namespaces poisoned"))?;
        if let Some(ns) = kept.get(&owner) {
            return Ok(Arc::clone(ns));
        }
        let uid_map = format!("{} {} 1\n", owner.0, identity.uid);
        let gid_map = format!("{} {} 1\n", owner.1, identity.gid);
        let ns = Arc::new(sys::user_namespace(uid_map.as_bytes(), gid_map.as_bytes())?);
        if kept.len() < KEPT_NAMESPACES {
            kept.insert(owner, Arc::clone(&ns));
        }
        Ok(ns)
    }
}

/// The note for a path the tools' identity cannot change and no idmapped mount
/// could be made for: its writes fail with `EACCES`, and how to fix that without
/// changing the files' owner.
fn unusable(identity: RunAs, path: &Path, why: &str, error: &std::io::Error) -> String {
    let uid = identity.uid;
    let path = path.display();
    format!(
        "{why}, though a grant allows changes there, and no idmapped mount could be made ({error}): the tools' writes there fail with EACCES. Give uid {uid} access without changing the files' owner (`setfacl -m u:{uid}:rwx {path}`, and `setfacl -d -m u:{uid}:rwx {path}` for what the tools create), run Knox as the path's owner, or name another identity with {RUN_AS_ENV}=UID:GID"
    )
}
