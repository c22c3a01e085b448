//! Which kernel layer enforces each protection, for the Landlock ABI in use.
//!
//! Landlock grew by ABI: file-system rights (1; `Refer` from 2, `Truncate` from
//! 3, `IoctlDev` from 5), TCP `bind`/`connect` (4), scoping of abstract UNIX
//! sockets and signals (6), audit of denials (7). The sandbox works on every ABI
//! ≥ 1: what Landlock lacks is enforced by the seccomp filter or by the
//! supervisor, and what nothing can enforce makes [`plan`] refuse, naming the
//! missing kernel feature — unless the policy opts into that [`Degraded`] mode.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ruleset::ResolvedPaths;

/// Oldest Landlock ABI the sandbox can work with (Linux 5.13).
pub const MIN_ABI: u8 = 1;
/// Newest Landlock ABI the sandbox knows.
pub const MAX_KNOWN_ABI: u8 = 7;
/// Environment variable capping the Landlock ABI the sandbox uses (for tests
/// of older kernels' behaviour on a newer one): read by `SandboxConfig::default`.
pub const ABI_CAP_ENV: &str = "KNOX_LANDLOCK_ABI_MAX";

/// A protection the sandbox gives a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protection {
    /// Read, write, create, remove, execute only beneath the grants.
    FileAccess,
    /// Renames and links across directories only between grants (`Refer`).
    FileReparent,
    /// Truncation only of files granted write (`Truncate`).
    FileTruncate,
    /// No `ioctl` on devices opened in the sandbox (`IoctlDev`).
    DeviceIoctl,
    /// TCP `connect` only to the listed ports.
    TcpConnect,
    /// TCP `bind` only to the listed ports.
    TcpBind,
    /// No connection to abstract UNIX sockets created outside the sandbox.
    AbstractUnixSockets,
    /// No signal to processes outside the sandbox.
    Signals,
    /// Landlock's denials written to the kernel audit log.
    DenialAudit,
}

/// What enforces a protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Landlock rules.
    Landlock,
    /// Landlock, more strictly than asked: ABI 1 denies every cross-directory
    /// rename and link.
    LandlockDenyAll,
    /// The seccomp filter, more strictly than asked (the calls that could break
    /// the protection are denied and recorded).
    SeccompDeny,
    /// The supervisor: it checks the call and makes it itself on the tool's
    /// behalf (a duplicate of the tool's socket), so nothing can change between
    /// check and use.
    SupervisorPerforms,
    /// The supervisor, more strictly than asked: only the tool's own process is
    /// reachable (signals), or nothing (abstract UNIX `connect`).
    SupervisorDeny,
    /// Not reachable with this policy (no device beyond the runtime ones, whose
    /// privileged ioctls need capabilities the tool does not have).
    NotReachable,
    /// Not enforced: the policy accepted this degraded mode.
    Degraded,
    /// Not available (audit before ABI 7): nothing is weakened.
    Unavailable,
}

/// A protection a policy accepts to lose on kernels that cannot enforce it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Degraded {
    /// Before ABI 5, allow `ioctl` on devices the policy grants.
    DeviceIoctl,
}

/// The layers of one prepared policy — part of the evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layers {
    /// Landlock ABI of the running kernel.
    pub landlock_abi_kernel: u8,
    /// Cap on the ABI the sandbox uses, if one was set.
    pub landlock_abi_cap: Option<u8>,
    /// Landlock ABI in use: the kernel's, capped.
    pub landlock_abi: u8,
    /// What enforces each protection.
    pub enforced_by: BTreeMap<Protection, Layer>,
}

impl Layers {
    /// Truncation is checked by the filter (ABI < 3).
    pub(crate) fn truncate_by_seccomp(&self) -> bool {
        self.landlock_abi < 3
    }

    /// TCP `connect`/`bind` are made by the supervisor (ABI < 4).
    pub(crate) fn tcp_by_supervisor(&self) -> bool {
        self.landlock_abi < 4
    }

    /// Signals and abstract UNIX sockets are confined by the filter and the
    /// supervisor (ABI < 6).
    pub(crate) fn scope_by_supervisor(&self) -> bool {
        self.landlock_abi < 6
    }
}

/// Why a policy cannot be enforced on this kernel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    /// No Landlock at all.
    #[error(
        "Landlock is not available (kernel without CONFIG_SECURITY_LANDLOCK, or `landlock` \
         missing from the `lsm=` boot parameter): Linux 5.13 or newer with Landlock is required"
    )]
    NoLandlock,
    /// The policy requires a newer ABI.
    #[error("the policy requires Landlock ABI {required}; this kernel gives {got}{capped}")]
    BelowPolicyMinimum {
        /// The policy's minimum.
        required: u8,
        /// The ABI in use.
        got: u8,
        /// ", capped by …" when a cap lowered it.
        capped: String,
    },
    /// A protection needs a kernel feature this kernel lacks.
    #[error(
        "{protection:?} cannot be enforced: it needs {feature} (Landlock ABI {abi}); this kernel \
         gives ABI {got}{capped}. Accept the degraded mode `{mode}` in the policy to run without it"
    )]
    Unenforceable {
        /// The protection.
        protection: Protection,
        /// The missing kernel feature.
        feature: &'static str,
        /// The ABI that has it.
        abi: u8,
        /// The ABI in use.
        got: u8,
        /// ", capped by …" when a cap lowered it.
        capped: String,
        /// The degraded mode that accepts it.
        mode: &'static str,
    },
}

/// The Landlock ABI to use: the kernel's, capped.
pub fn abi_in_use(kernel: Option<i32>, cap: Option<u8>) -> Result<(u8, u8), LayerError> {
    let kernel = kernel
        .and_then(|k| u8::try_from(k).ok())
        .filter(|k| *k >= MIN_ABI)
        .ok_or(LayerError::NoLandlock)?;
    let abi = cap.map_or(kernel, |c| kernel.min(c)).min(MAX_KNOWN_ABI);
    if abi < MIN_ABI {
        return Err(LayerError::NoLandlock);
    }
    Ok((kernel, abi))
}

/// Decides the layer of every protection for ABI `abi`, or refuses.
pub fn plan(
    kernel: u8,
    cap: Option<u8>,
    abi: u8,
    min_abi: Option<u8>,
    degraded: &BTreeSet<Degraded>,
    paths: &ResolvedPaths,
    audit: bool,
) -> Result<Layers, LayerError> {
    let capped = match cap {
        Some(c) if c < kernel => format!(
            " (capped at {c} by {ABI_CAP_ENV} or the configuration; the kernel has {kernel})"
        ),
        _ => String::new(),
    };
    if let Some(required) = min_abi.filter(|m| abi < *m) {
        return Err(LayerError::BelowPolicyMinimum {
            required,
            got: abi,
            capped,
        });
    }
    let by = |min: u8, fallback: Layer| {
        if abi >= min {
            Layer::Landlock
        } else {
            fallback
        }
    };
    let mut enforced_by = BTreeMap::new();
    enforced_by.insert(Protection::FileAccess, Layer::Landlock);
    enforced_by.insert(Protection::FileReparent, by(2, Layer::LandlockDenyAll));
    enforced_by.insert(Protection::FileTruncate, by(3, Layer::SeccompDeny));
    enforced_by.insert(Protection::TcpConnect, by(4, Layer::SupervisorPerforms));
    enforced_by.insert(Protection::TcpBind, by(4, Layer::SupervisorPerforms));
    enforced_by.insert(
        Protection::AbstractUnixSockets,
        by(6, Layer::SupervisorDeny),
    );
    enforced_by.insert(Protection::Signals, by(6, Layer::SupervisorDeny));
    let audit_layer = if !audit {
        Layer::Unavailable
    } else {
        by(7, Layer::Unavailable)
    };
    enforced_by.insert(Protection::DenialAudit, audit_layer);
    let ioctl = if abi >= 5 {
        Layer::Landlock
    } else if !grants_devices(paths) {
        Layer::NotReachable
    } else if degraded.contains(&Degraded::DeviceIoctl) {
        Layer::Degraded
    } else {
        return Err(LayerError::Unenforceable {
            protection: Protection::DeviceIoctl,
            feature: "LANDLOCK_ACCESS_FS_IOCTL_DEV (Linux 6.10)",
            abi: 5,
            got: abi,
            capped,
            mode: "device-ioctl",
        });
    };
    enforced_by.insert(Protection::DeviceIoctl, ioctl);
    Ok(Layers {
        landlock_abi_kernel: kernel,
        landlock_abi_cap: cap,
        landlock_abi: abi,
        enforced_by,
    })
}

/// Whether a grant of the policy (not the sandbox's implicit runtime devices)
/// reaches a device: a device file, `/dev` or anything beneath it, or a directory
/// above `/dev`.
fn grants_devices(paths: &ResolvedPaths) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    let dev = std::path::Path::new("/dev");
    paths.rules.iter().filter(|r| !r.implicit).any(|r| {
        let device = std::fs::metadata(&r.path)
            .map(|m| m.file_type().is_char_device() || m.file_type().is_block_device())
            .unwrap_or(false);
        device || r.path.starts_with(dev) || (r.is_dir && dev.starts_with(&r.path))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Access;
    use crate::ruleset::ResolvedRule;

    fn paths(granted: &[&str]) -> ResolvedPaths {
        ResolvedPaths {
            rules: granted
                .iter()
                .map(|p| ResolvedRule {
                    path: p.into(),
                    access: [Access::Read].into(),
                    is_dir: std::path::Path::new(p).is_dir(),
                    implicit: false,
                })
                .collect(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn the_cap_lowers_the_abi_and_no_landlock_refuses() {
        assert_eq!(abi_in_use(Some(7), Some(2)), Ok((7, 2)));
        assert_eq!(abi_in_use(Some(4), Some(6)), Ok((4, 4)));
        assert_eq!(abi_in_use(Some(9), None), Ok((9, 7)));
        assert_eq!(abi_in_use(None, None), Err(LayerError::NoLandlock));
        assert_eq!(abi_in_use(Some(6), Some(0)), Err(LayerError::NoLandlock));
    }

    #[test]
    fn each_abi_picks_its_layers() -> Result<(), LayerError> {
        let none = BTreeSet::new();
        let p = paths(&["/usr/bin"]);
        let l1 = plan(7, Some(1), 1, None, &none, &p, true)?;
        assert_eq!(
            l1.enforced_by.get(&Protection::FileReparent),
            Some(&Layer::LandlockDenyAll)
        );
        assert_eq!(
            l1.enforced_by.get(&Protection::FileTruncate),
            Some(&Layer::SeccompDeny)
        );
        assert_eq!(
            l1.enforced_by.get(&Protection::TcpConnect),
            Some(&Layer::SupervisorPerforms)
        );
        assert_eq!(
            l1.enforced_by.get(&Protection::Signals),
            Some(&Layer::SupervisorDeny)
        );
        assert_eq!(
            l1.enforced_by.get(&Protection::DeviceIoctl),
            Some(&Layer::NotReachable)
        );
        assert_eq!(
            l1.enforced_by.get(&Protection::DenialAudit),
            Some(&Layer::Unavailable)
        );
        let l7 = plan(7, None, 7, None, &none, &p, true)?;
        assert!(l7.enforced_by.values().all(|l| *l == Layer::Landlock));
        Ok(())
    }

    #[test]
    fn device_grants_refuse_before_abi_5_unless_degraded() -> Result<(), LayerError> {
        let p = paths(&["/dev"]);
        let err = plan(7, Some(4), 4, None, &BTreeSet::new(), &p, true);
        assert!(
            matches!(
                &err,
                Err(LayerError::Unenforceable {
                    protection: Protection::DeviceIoctl,
                    ..
                })
            ),
            "{err:?}"
        );
        let text = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.contains("IOCTL_DEV") && text.contains("device-ioctl"),
            "{text}"
        );
        let ok = plan(
            7,
            Some(4),
            4,
            None,
            &[Degraded::DeviceIoctl].into(),
            &p,
            true,
        )?;
        assert_eq!(
            ok.enforced_by.get(&Protection::DeviceIoctl),
            Some(&Layer::Degraded)
        );
        assert!(plan(7, None, 5, None, &BTreeSet::new(), &p, true).is_ok());
        // "/" is above /dev.
        assert!(plan(7, Some(3), 3, None, &BTreeSet::new(), &paths(&["/"]), true).is_err());
        Ok(())
    }

    #[test]
    fn a_policy_minimum_refuses_older_abis() {
        let p = paths(&[]);
        let err = plan(7, Some(3), 3, Some(6), &BTreeSet::new(), &p, true);
        assert!(matches!(
            err,
            Err(LayerError::BelowPolicyMinimum {
                required: 6,
                got: 3,
                ..
            })
        ));
        assert!(plan(7, None, 7, Some(6), &BTreeSet::new(), &p, true).is_ok());
    }
}
