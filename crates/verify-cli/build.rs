//! Names the commit `knox --version` and `knox-verify --version` report (the
//! `KNOX_COMMIT` in `knox_verify_cli::VERSION`): `git rev-parse --short HEAD` of this
//! repository when it is a git checkout, else `unknown` (a tarball build). Git is asked
//! about this repository only: a tree unpacked inside another repository does not take
//! that repository's commit.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}

fn commit(root: &Path) -> Option<String> {
    let top = git(root, &["rev-parse", "--show-toplevel"])?;
    if std::fs::canonicalize(&top).ok()? != std::fs::canonicalize(root).ok()? {
        return None;
    }
    let hash = git(root, &["rev-parse", "--short", "HEAD"])?;
    // Rebuild when HEAD moves: HEAD itself, the branch it names, the packed refs.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for w in watch {
        if let Some(p) = git(root, &["rev-parse", "--git-path", &w]) {
            let p = root.join(p);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    Some(hash)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
    // This crate is `crates/verify-cli` of the repository.
    let root = manifest
        .as_deref()
        .and_then(Path::parent)
        .and_then(Path::parent);
    let commit = root
        .and_then(commit)
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=KNOX_COMMIT={commit}");
}
