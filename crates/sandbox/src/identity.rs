//! The unprivileged identity root callers run tools under.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A uid and gid a tool runs as (with no supplementary groups), when the caller
/// is root. See the README's *Tools never run as root* for the default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAs {
    /// Real, effective and saved user id.
    pub uid: u32,
    /// Real, effective and saved group id.
    pub gid: u32,
}

/// Environment variable overriding [`RunAs::KNOX`]: `UID:GID` (numbers).
pub const RUN_AS_ENV: &str = "KNOX_RUN_AS";

impl RunAs {
    /// Knox's default: uid and gid 65520, the first id of the block systemd
    /// documents as unassigned between its dynamic service users (61184–65519)
    /// and `nobody` (65534), which Debian reserves (65000–65533) and never
    /// allocates: no package account, no login, no passwd entry. It fits 16 bits,
    /// so it is mapped in containers whose user namespace maps only 65,536 ids.
    pub const KNOX: RunAs = RunAs {
        uid: 65_520,
        gid: 65_520,
    };

    /// Parses `UID:GID` (decimal numbers, neither 0).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (uid, gid) = text
            .trim()
            .split_once(':')
            .ok_or_else(|| format!("`{text}` is not UID:GID"))?;
        let number = |s: &str| {
            s.parse::<u32>()
                .map_err(|e| format!("`{s}` in `{text}` is not a number: {e}"))
        };
        let ids = Self {
            uid: number(uid)?,
            gid: number(gid)?,
        };
        ids.validate()?;
        Ok(ids)
    }

    /// Neither id may be 0 (root) nor 4294967295 (`-1`, "unchanged" to the kernel).
    pub fn validate(&self) -> Result<(), String> {
        for (name, id) in [("uid", self.uid), ("gid", self.gid)] {
            if id == 0 || id == u32::MAX {
                return Err(format!("{name} {id} cannot run tools"));
            }
        }
        Ok(())
    }

    /// The default, or [`RUN_AS_ENV`] when it is set.
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(RUN_AS_ENV) {
            Ok(text) => Self::parse(&text).map_err(|e| format!("{RUN_AS_ENV}: {e}")),
            Err(std::env::VarError::NotPresent) => Ok(Self::KNOX),
            Err(e) => Err(format!("{RUN_AS_ENV}: {e}")),
        }
    }

    /// For the default id: an error naming the account when `/etc/passwd` or
    /// `/etc/group` gives the uid or gid a name (someone else already uses it,
    /// so tools would share its files). Only the local files are read.
    pub fn check_unassigned(&self) -> Result<(), String> {
        let named = |file: &str, id: u32| -> Option<String> {
            let text = std::fs::read_to_string(Path::new(file)).ok()?;
            text.lines().find_map(|line| {
                let mut fields = line.split(':');
                let name = fields.next()?;
                let number = fields.nth(1)?;
                (number.parse::<u32>().ok()? == id).then(|| name.to_owned())
            })
        };
        for (file, what, id) in [
            ("/etc/passwd", "uid", self.uid),
            ("/etc/group", "gid", self.gid),
        ] {
            if let Some(name) = named(file, id) {
                return Err(format!(
                    "{what} {id} belongs to `{name}` in {file}; set {RUN_AS_ENV}=UID:GID to ids no account uses"
                ));
            }
        }
        Ok(())
    }

    /// Why this identity cannot change what lies beneath `path` (create, write, rename
    /// or remove entries of a directory; write a file), as the kernel's mode bits decide
    /// before Landlock — owner, group (the identity has no other group), others — or
    /// `None` when it can, when `path` does not exist (the sandbox skips a missing
    /// grant), or when the path carries an access ACL (the kernel evaluates it itself).
    pub fn cannot_change(&self, path: &Path) -> Option<String> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        if crate::sys::has_access_acl(path) {
            return None;
        }
        let mode = meta.mode();
        let bits = if meta.uid() == self.uid {
            (mode >> 6) & 7
        } else if meta.gid() == self.gid {
            (mode >> 3) & 7
        } else {
            mode & 7
        };
        let need = if meta.is_dir() { 0o3 } else { 0o2 };
        (bits & need != need).then(|| {
            format!(
                "uid {} cannot change `{}` (owner {}:{}, mode {:04o})",
                self.uid,
                path.display(),
                meta.uid(),
                meta.gid(),
                mode & 0o7777
            )
        })
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn run_as_parses_and_refuses_root() {
        assert_eq!(
            RunAs::parse("70000:70001"),
            Ok(RunAs {
                uid: 70_000,
                gid: 70_001
            })
        );
        for bad in ["0:5", "5:0", "5", "a:b", "4294967295:5", ""] {
            assert!(RunAs::parse(bad).is_err(), "{bad}");
        }
        assert!(RunAs::KNOX.validate().is_ok());
    }

    #[test]
    fn mode_bits_decide_who_may_change_a_directory() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let d = tempfile::tempdir().unwrap();
        let meta = std::fs::metadata(d.path()).unwrap();
        let owner = RunAs {
            uid: meta.uid().max(1),
            gid: 70_001,
        };
        let stranger = RunAs {
            uid: 70_000,
            gid: 70_001,
        };
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let why = stranger.cannot_change(d.path()).unwrap();
        assert!(
            why.contains("uid 70000") && why.contains("mode 0755"),
            "{why}"
        );
        if meta.uid() != 0 {
            assert_eq!(owner.cannot_change(d.path()), None);
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(stranger.cannot_change(d.path()), None);
        assert_eq!(stranger.cannot_change(&d.path().join("missing")), None);
    }
}
