//! Which toolkit manifest a piece of evidence is checked against.
//!
//! Evidence names its manifest by hash (the APM's `inputs.manifest`). The verifier
//! picks, in order: a manifest it trusts with that hash ([`TrustedManifests`]: the ones
//! it was handed and every manifest this build ships or has frozen, see
//! [`knox_policy::shipped`]); else the manifest the bundle embeds, when — and only
//! when — the embedded bytes hash to the APM's manifest hash. Anything else is refused,
//! naming the hashes.

use knox_policy::ToolkitManifest;
use knox_types::bundle::Bundle;
use knox_types::digest::{Digest, tag};

/// A set of toolkit manifests a verifier trusts, looked up by hash.
pub trait TrustedManifests {
    /// The trusted manifest with hash `hash`.
    fn trusted(&self, hash: &Digest) -> Option<&ToolkitManifest>;

    /// Hashes of the manifests trusted beyond the ones this build knows, for messages.
    fn handed(&self) -> Vec<Digest>;
}

/// One manifest: that one, plus every manifest this build knows.
impl TrustedManifests for ToolkitManifest {
    fn trusted(&self, hash: &Digest) -> Option<&ToolkitManifest> {
        if &self.hash() == hash {
            return Some(self);
        }
        knox_policy::shipped::find(hash)
    }

    fn handed(&self) -> Vec<Digest> {
        vec![self.hash()]
    }
}

/// Manifests handed to the verifier (a regulator's reviewed files), plus every manifest
/// this build knows.
#[derive(Debug, Default)]
pub struct Manifests {
    handed: Vec<ToolkitManifest>,
}

impl Manifests {
    /// Only the manifests this build knows.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a manifest to trust (a repeat of a known hash is ignored).
    pub fn insert(&mut self, m: ToolkitManifest) {
        if !self.handed.iter().any(|h| h.hash() == m.hash()) {
            self.handed.push(m);
        }
    }

    /// This set with `m` added.
    pub fn with(mut self, m: ToolkitManifest) -> Self {
        self.insert(m);
        self
    }
}

impl TrustedManifests for Manifests {
    fn trusted(&self, hash: &Digest) -> Option<&ToolkitManifest> {
        self.handed
            .iter()
            .find(|m| &m.hash() == hash)
            .or_else(|| knox_policy::shipped::find(hash))
    }

    fn handed(&self) -> Vec<Digest> {
        self.handed.iter().map(ToolkitManifest::hash).collect()
    }
}

/// The manifest chosen for one piece of evidence.
#[derive(Debug)]
pub enum Chosen<'a> {
    /// One the verifier trusts.
    Trusted(&'a ToolkitManifest),
    /// The one the bundle embeds, whose hash is the APM's.
    Embedded(Box<ToolkitManifest>),
}

impl Chosen<'_> {
    /// The manifest.
    pub fn manifest(&self) -> &ToolkitManifest {
        match self {
            Self::Trusted(m) => m,
            Self::Embedded(m) => m,
        }
    }
}

/// Why `b`'s embedded toolkit manifest, when it has one, is bytes nothing signs: its
/// hash is not the manifest the attested APM names. Such a bundle is tampered, whether
/// or not the verifier trusts the named manifest itself (the embedded copy would be
/// ignored then, and every byte of evidence must be bound).
pub fn embedded_unbound(b: &Bundle) -> Option<String> {
    let text = b.manifest.as_ref()?;
    let embedded = Digest::tagged(tag::MANIFEST, &[text.as_bytes()]);
    let named = b.apm.inputs.manifest;
    (embedded != named).then(|| {
        format!(
            "the bundle embeds toolkit manifest {embedded}, but the attested APM was derived from {named}: the embedded manifest is bound by nothing"
        )
    })
}

/// Picks the manifest `b`'s APM names: a trusted one, else the embedded one when its
/// hash matches; the reason for refusing otherwise.
pub fn choose<'a, M: TrustedManifests + ?Sized>(
    b: &Bundle,
    set: &'a M,
) -> Result<Chosen<'a>, String> {
    let named = b.apm.inputs.manifest;
    if let Some(m) = set.trusted(&named) {
        return Ok(Chosen::Trusted(m));
    }
    let Some(text) = &b.manifest else {
        let handed: Vec<String> = set.handed().iter().map(Digest::to_string).collect();
        let handed = if handed.is_empty() {
            String::new()
        } else {
            format!(" (handed: {})", handed.join(", "))
        };
        return Err(format!(
            "the APM was derived from toolkit manifest {named}, which this verifier does not trust{handed} and the bundle does not embed; supply that manifest to verify"
        ));
    };
    let embedded = Digest::tagged(tag::MANIFEST, &[text.as_bytes()]);
    if embedded != named {
        return Err(format!(
            "the bundle embeds toolkit manifest {embedded}, but the APM was derived from {named}: the embedded manifest is not used"
        ));
    }
    ToolkitManifest::from_canonical(text.as_bytes())
        .map(|m| Chosen::Embedded(Box::new(m)))
        .map_err(|e| format!("the embedded toolkit manifest {named} does not load: {e}"))
}
