//! The corpus table: one row per attack, one file per group of categories.
//!
//! A row is built with [`case`] (confined under the offline policy, successful
//! if the probe reports `ok`, expected to succeed unconfined) and adjusted with
//! the builder methods below. Errno values are x86_64 Linux's.

mod files;
mod network;
mod process;
mod system;

use super::{Baseline, Cap, Case, CaseContext, CasePolicy, Expected, Layer, LimitOf, Success};

/// Every case of the corpus, in a fixed order.
pub fn cases() -> Vec<Case> {
    let mut all = network::cases();
    all.extend(files::cases());
    all.extend(process::cases());
    all.extend(system::cases());
    all
}

pub(super) const EPERM: i32 = 1;
pub(super) const ENOENT: i32 = 2;
pub(super) const ENOEXEC: i32 = 8;
pub(super) const EBADF: i32 = 9;
pub(super) const EACCES: i32 = 13;
pub(super) const EXDEV: i32 = 18;
pub(super) const EISDIR: i32 = 21;
pub(super) const EINVAL: i32 = 22;
pub(super) const EMFILE: i32 = 24;
pub(super) const EFBIG: i32 = 27;
pub(super) const ENOSYS: i32 = 38;
pub(super) const SIGSYS: i32 = 31;

type Args = fn(&CaseContext<'_>) -> Vec<String>;

/// A row with the defaults: offline policy, `ProbeOk`, succeeds unconfined.
pub(super) fn case(
    id: &'static str,
    category: &'static str,
    description: &'static str,
    probe: &'static str,
    args: Args,
    expected: Expected,
) -> Case {
    Case {
        id,
        category,
        description,
        expected,
        baseline: Baseline::Succeeds,
        success: Success::ProbeOk,
        policy: CasePolicy::Offline,
        probe,
        args,
    }
}

impl Case {
    /// Runs confined under `policy` instead of the offline one.
    pub(super) fn under(mut self, policy: CasePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// What counts as success.
    pub(super) fn succeeds_if(mut self, success: Success) -> Self {
        self.success = success;
        self
    }

    /// Fails even unconfined, by construction.
    pub(super) fn harmless(mut self, how: &'static str) -> Self {
        self.baseline = Baseline::FailsByConstruction(how);
        self
    }

    /// Not run unconfined.
    pub(super) fn unsafe_unconfined(mut self, why: &'static str) -> Self {
        self.baseline = Baseline::Skipped(why);
        self
    }
}

/// Strings from string literals.
pub(super) fn v<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Denied and recorded by the supervisor.
pub(super) fn denied(syscall: &'static str) -> Expected {
    Expected::Denied { syscall }
}

/// Refused by Landlock with `errno` (no kernel event; the errno stands in).
pub(super) fn landlock(errno: i32) -> Expected {
    Expected::Refused {
        errno,
        layer: Layer::Landlock,
    }
}

/// Refused by the kernel's credential checks before Landlock is asked.
pub(super) fn credentials(errno: i32) -> Expected {
    Expected::Refused {
        errno,
        layer: Layer::Credentials,
    }
}

/// Stopped by a recorded cap.
pub(super) fn capped(cap: Cap) -> Expected {
    Expected::Capped { cap }
}

/// Exceeding a cap is the attack's success.
pub(super) fn exceeds(key: &'static str, limit: LimitOf) -> Success {
    Success::Exceeds { key, limit }
}

/// Past the permission check, stopped only by the deliberately invalid argument.
pub(super) fn past_permission(errnos: &'static [i32]) -> Success {
    Success::PastPermissionCheck { errnos }
}
