//! The toolkit manifests shipped with this build, and the ones frozen from earlier
//! builds so that their evidence keeps verifying when the shipped files change.
//!
//! A manifest is known by its hash. Evidence names the manifest its APM was derived
//! from; a verifier picks the manifest with that hash among the ones it trusts
//! ([`known`]) or, failing that, the one a bundle embeds when its hash matches.

use std::sync::OnceLock;

use knox_types::digest::Digest;

use crate::manifest::{ManifestError, ToolkitManifest};

/// The toolkit manifest shipped with this build, in the `knox-toolkit/1` format users
/// write theirs in (`data/manifests/injecagent.toolkit.json`): InjecAgent's 330 tools
/// in 38 toolkits (the terminal suite's `TerminalExecute` among them), with Knox's
/// reviewed needs, effects and annotations. Knox's own suites run from it.
pub const INJECAGENT_MANIFEST: &str =
    include_str!("../../../data/manifests/injecagent.toolkit.json");

/// The terminal suite's manifest (`data/manifests/terminal.toolkit.json`): the runtime
/// and the one server `Terminal` of [`INJECAGENT_MANIFEST`], unchanged, so that a
/// terminal run's APM names a manifest of the one tool it may call.
pub const TERMINAL_MANIFEST: &str = include_str!("../../../data/manifests/terminal.toolkit.json");

/// InjecAgent's `tools.json` (the tool schemas of the frozen legacy manifests, and of a
/// legacy needs file a verifier is handed with `--needs`).
pub const INJECAGENT_TOOLS_JSON: &str = include_str!("../../../data/injecagent/tools.json");

/// Knox's reviewed needs file as of commit a644880, frozen
/// (`data/manifests/toolkits-a644880.toml`, once `data/toolkits.toml`): with InjecAgent's
/// `tools.json`, the manifest every bundle and journal written from a644880 until the
/// suites ran from [`INJECAGENT_MANIFEST`] names. It is also the source the shipped
/// manifest was converted from (`knox toolkit convert`), and decides the same.
pub const LEGACY_NEEDS_A644880: &str =
    include_str!("../../../data/manifests/toolkits-a644880.toml");

/// The needs file as of commit 6c31851, frozen: the manifest every bundle and
/// journal written before it changed names (`data/manifests/toolkits-6c31851.toml`).
pub const LEGACY_NEEDS_6C31851: &str =
    include_str!("../../../data/manifests/toolkits-6c31851.toml");

/// The manifest shipped with this build ([`INJECAGENT_MANIFEST`]).
pub fn current() -> Result<ToolkitManifest, ManifestError> {
    ToolkitManifest::from_toolkit_text(INJECAGENT_MANIFEST)
}

/// The terminal suite's manifest ([`TERMINAL_MANIFEST`]).
pub fn terminal() -> Result<ToolkitManifest, ManifestError> {
    ToolkitManifest::from_toolkit_text(TERMINAL_MANIFEST)
}

/// The manifest of commit a644880 (InjecAgent's tools with [`LEGACY_NEEDS_A644880`]).
pub fn legacy_a644880() -> Result<ToolkitManifest, ManifestError> {
    ToolkitManifest::from_sources(INJECAGENT_TOOLS_JSON, LEGACY_NEEDS_A644880)
}

/// The manifest of commit 6c31851 (InjecAgent's tools with [`LEGACY_NEEDS_6C31851`]).
pub fn legacy_6c31851() -> Result<ToolkitManifest, ManifestError> {
    ToolkitManifest::from_sources(INJECAGENT_TOOLS_JSON, LEGACY_NEEDS_6C31851)
}

/// Every manifest this build knows, loaded once: the shipped one, the frozen ones, and
/// each of them without information types (the manifests `knox eval --judge` derives),
/// without duplicates (the shipped manifest may still equal a frozen one). A manifest
/// that does not load (a broken build) is left out; tests check that none is.
pub fn known() -> &'static [ToolkitManifest] {
    static KNOWN: OnceLock<Vec<ToolkitManifest>> = OnceLock::new();
    KNOWN.get_or_init(|| {
        let mut all: Vec<ToolkitManifest> = Vec::new();
        for m in [current(), terminal(), legacy_a644880(), legacy_6c31851()]
            .into_iter()
            .flatten()
        {
            let blind = m.without_info_types().ok();
            for m in std::iter::once(m).chain(blind) {
                if !all.iter().any(|k| k.hash() == m.hash()) {
                    all.push(m);
                }
            }
        }
        all
    })
}

/// The known manifest with hash `hash`.
pub fn find(hash: &Digest) -> Option<&'static ToolkitManifest> {
    known().iter().find(|m| &m.hash() == hash)
}

/// Whether every verifier of this build knows the manifest with hash `hash` (then a
/// bundle need not embed it).
pub fn is_known(hash: &Digest) -> bool {
    find(hash).is_some()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_manifest_loads_and_is_known() {
        let current = current().unwrap();
        let legacy = legacy_6c31851().unwrap();
        let a644880 = legacy_a644880().unwrap();
        assert!(is_known(&current.hash()));
        assert!(is_known(&terminal().unwrap().hash()));
        assert!(is_known(&a644880.hash()));
        assert!(is_known(&a644880.without_info_types().unwrap().hash()));
        // The shipped manifest is not a frozen one: its hash is new.
        assert_ne!(current.hash(), a644880.hash());
        // The hash evidence written from a644880 until the switch names (the key-chain
        // fixtures of knox-verify among it).
        assert_eq!(
            a644880.hash().to_string(),
            "dfd627447c836415615a72aea0a555e1452782830600007b299e4f2dbfc95300"
        );
        assert!(is_known(&legacy.hash()));
        assert!(is_known(&legacy.without_info_types().unwrap().hash()));
        assert!(is_known(&current.without_info_types().unwrap().hash()));
        // The frozen manifest's hash is the one evidence written at 6c31851 names.
        assert_eq!(
            legacy.hash().to_string(),
            "5fa5f6800fa5d7ba87105bc5d2e309e1ff0c5078686c19ddda039ecc269398c6"
        );
    }

    #[test]
    fn the_terminal_manifest_is_the_terminal_server_of_the_injecagent_one() {
        let all = current().unwrap();
        let t = terminal().unwrap();
        assert_eq!(t.needs().runtime, all.needs().runtime);
        let names: Vec<&str> = t.tools().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["TerminalExecute"]);
        let (a, b) = (
            t.tool("TerminalExecute").unwrap(),
            all.tool("TerminalExecute").unwrap(),
        );
        assert_eq!(a.toolkit, b.toolkit);
        assert_eq!(a.needs, b.needs);
        assert_eq!(a.needs_hash, b.needs_hash);
        assert_eq!(a.effect(), b.effect());
        assert_eq!(a.spec, b.spec);
        assert_eq!(a.annotations, b.annotations);
        assert_ne!(t.hash(), all.hash());
    }

    #[test]
    fn canonical_bytes_read_back_to_the_same_manifest() {
        let m = legacy_6c31851().unwrap();
        let back = ToolkitManifest::from_canonical(m.canonical_bytes()).unwrap();
        assert_eq!(back.hash(), m.hash());
        assert_eq!(back.tools().count(), m.tools().count());
        // Not canonical (a space added): refused, naming both hashes.
        let mut spaced = b" ".to_vec();
        spaced.extend_from_slice(m.canonical_bytes());
        let err = ToolkitManifest::from_canonical(&spaced)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&m.hash().to_string()), "{err}");
        // Not a manifest at all.
        assert!(ToolkitManifest::from_canonical(b"{\"tools\": 1}").is_err());
        assert!(ToolkitManifest::from_canonical(b"\xff").is_err());
    }
}
