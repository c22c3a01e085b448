//! The corpus library's one libc call, with its safety argument (the probe has its
//! own, `src/bin/knox-probe/sys.rs`).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;
use std::ptr;

/// Whether `path` (not followed if a symlink) carries the `user.knox` extended
/// attribute — the one the corpus's `setxattr` case tries to set.
pub(crate) fn has_user_xattr(path: &Path) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: both strings are NUL-terminated and outlive the call; a NULL buffer
    // of size 0 asks for the value's size only.
    let n = unsafe { libc::lgetxattr(c.as_ptr(), c"user.knox".as_ptr(), ptr::null_mut(), 0) };
    n >= 0
}
