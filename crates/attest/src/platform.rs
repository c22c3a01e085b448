//! The platform-evidence trait that hardware backends implement, and appraisal of
//! the evidence a bundle carries.

use knox_types::bundle::{PlatformEvidence, PlatformMode, PublicKey};

use crate::binding;

/// Why platform evidence could not be produced or was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlatformError {
    /// The backend's interface is not present on this machine.
    #[error("{backend}: not available on this machine: {why}")]
    Unavailable {
        /// Backend.
        backend: &'static str,
        /// What is missing.
        why: String,
    },
    /// The backend failed.
    #[error("{backend}: {why}")]
    Failed {
        /// Backend.
        backend: &'static str,
        /// What went wrong.
        why: String,
    },
    /// `report_data` does not commit to the bundle's key and nonce.
    #[error("key binding mismatch: report_data does not commit to the bundle's signing key")]
    BindingMismatch,
    /// Evidence of a mode this verifier does not know.
    #[error("unknown platform evidence mode `{0}`")]
    UnknownMode(String),
    /// Simulated evidence without the explicit, insecure permission to accept it.
    #[error(
        "simulated platform evidence is not hardware-backed; refused (accept only with --allow-simulated, insecure)"
    )]
    SimulatedRefused,
    /// The evidence is malformed.
    #[error("malformed platform evidence: {0}")]
    Malformed(String),
    /// Hardware evidence that does not verify against the vendor's root (forged or
    /// corrupted).
    #[error("hardware evidence does not verify: {0}")]
    HardwareInvalid(String),
    /// Genuine hardware evidence the regulator's policy does not accept.
    #[error("rejected by the regulator policy: {0}")]
    PolicyRejected(String),
    /// Hardware evidence, but no regulator policy to appraise it against.
    #[error("hardware evidence needs a regulator policy (--policy) to be accepted")]
    NoPolicy,
}

impl PlatformError {
    /// Whether the evidence is refused by the appraiser's own settings (simulated
    /// evidence not allowed, a mode it does not know, no policy, or a policy that
    /// rejects genuine evidence) rather than shown false: a refusal, not tampering.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Self::SimulatedRefused
                | Self::UnknownMode(_)
                | Self::NoPolicy
                | Self::PolicyRejected(_)
        )
    }
}

/// What is being bound: the in-TEE public key and the epoch nonce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBinding {
    /// The in-TEE public key.
    pub public_key: [u8; 32],
    /// Epoch/campaign nonce (may be empty).
    pub nonce: Vec<u8>,
    /// For a refresh report at the end of a run: the chain head it binds.
    pub chain_head: Option<[u8; 32]>,
}

/// A source of platform evidence.
pub trait PlatformBackend: Send + Sync {
    /// The mode written into bundles.
    fn mode(&self) -> PlatformMode;
    /// Produces evidence whose report_data commits to `binding`.
    fn collect(&self, binding: &KeyBinding) -> Result<PlatformEvidence, PlatformError>;
}

/// A backend behind a box collects as the one it holds (a front end that chooses the
/// platform at run time hands a session a `Box<dyn PlatformBackend>`).
impl<B: PlatformBackend + ?Sized> PlatformBackend for Box<B> {
    fn mode(&self) -> PlatformMode {
        (**self).mode()
    }

    fn collect(&self, binding: &KeyBinding) -> Result<PlatformEvidence, PlatformError> {
        (**self).collect(binding)
    }
}

/// What the verifier is willing to accept.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppraisalOptions<'a> {
    /// Accept simulated evidence. Insecure: simulated evidence has no root of trust.
    pub dangerous_allow_simulated: bool,
    /// The regulator's policy for hardware evidence.
    pub policy: Option<&'a knox_hw::policy::RegulatorPolicy>,
    /// For a refresh report: the chain head it must bind.
    pub chain_head: Option<[u8; 32]>,
}

/// The result of appraising platform evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Appraisal {
    /// The evidence mode.
    pub mode: PlatformMode,
    /// Whether hardware vouches for the key.
    pub hardware_backed: bool,
    /// What the appraisal established, for reports.
    pub detail: String,
}

/// Checks that `evidence` binds `key` and is acceptable under `opts`.
pub fn appraise(
    evidence: &PlatformEvidence,
    key: &PublicKey,
    opts: AppraisalOptions<'_>,
) -> Result<Appraisal, PlatformError> {
    let pk: [u8; 32] = key
        .public_key
        .0
        .as_slice()
        .try_into()
        .map_err(|_| PlatformError::Malformed("public key is not 32 bytes".into()))?;
    if evidence.nonce.0.len() > binding::MAX_NONCE {
        return Err(PlatformError::Malformed(format!(
            "nonce longer than {} bytes",
            binding::MAX_NONCE
        )));
    }
    match &evidence.mode {
        PlatformMode::Simulated => {
            crate::simulated::check(evidence, &pk, opts.chain_head.as_ref())?;
            if !opts.dangerous_allow_simulated {
                return Err(PlatformError::SimulatedRefused);
            }
            Ok(Appraisal {
                mode: evidence.mode.clone(),
                hardware_backed: false,
                detail: crate::simulated::NOTE.into(),
            })
        }
        PlatformMode::Tdx => {
            let a =
                crate::hardware::appraise(evidence, &pk, opts.policy, opts.chain_head.as_ref())?;
            Ok(Appraisal {
                mode: evidence.mode.clone(),
                hardware_backed: true,
                detail: a.describe(),
            })
        }
        PlatformMode::Other(other) => Err(PlatformError::UnknownMode(other.clone())),
    }
}
