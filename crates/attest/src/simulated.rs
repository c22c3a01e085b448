//! The `simulated` backend: a development stand-in with no root of trust.
//!
//! It computes the same `report_data` a hardware report would carry and says, in its
//! own media type and in its evidence, that nothing vouches for it. It never imitates
//! a vendor structure.

use knox_types::bundle::{PlatformEvidence, PlatformMode};
use knox_types::bytes::HexBytes;
use serde_json::json;

use crate::binding;
use crate::platform::{KeyBinding, PlatformBackend, PlatformError};

/// Mode name.
pub const MODE: &str = "simulated";

/// Media type of simulated evidence.
pub const MEDIA_TYPE: &str = "application/vnd.knox.simulated-evidence.v1+json";

/// The note every simulated evidence and report carries.
pub const NOTE: &str = "not hardware-backed: simulated platform evidence, no root of trust";

/// The simulated backend.
#[derive(Clone, Copy, Debug, Default)]
pub struct Simulated;

impl PlatformBackend for Simulated {
    fn mode(&self) -> knox_types::bundle::PlatformMode {
        PlatformMode::Simulated
    }

    fn collect(&self, b: &KeyBinding) -> Result<PlatformEvidence, PlatformError> {
        if b.nonce.len() > binding::MAX_NONCE {
            return Err(PlatformError::Failed {
                backend: MODE,
                why: "nonce too long".into(),
            });
        }
        Ok(PlatformEvidence {
            mode: PlatformMode::Simulated,
            media_type: MEDIA_TYPE.into(),
            report_data: HexBytes(
                binding::refresh_report_data(&b.public_key, &b.nonce, None, b.chain_head.as_ref())
                    .to_vec(),
            ),
            nonce: HexBytes(b.nonce.clone()),
            evidence: evidence(),
        })
    }
}

/// The evidence of every simulated report: fixed, so that every byte of it is bound
/// (a verifier recomputes it; there is nothing else a simulated backend could say).
pub fn evidence() -> serde_json::Value {
    json!({"note": NOTE, "layout": "knox/report-data/v1"})
}

/// Checks simulated evidence's shape and key binding (not its trustworthiness: it has
/// none).
pub fn check(
    e: &PlatformEvidence,
    public_key: &[u8; 32],
    chain_head: Option<&[u8; 32]>,
) -> Result<(), PlatformError> {
    if e.media_type != MEDIA_TYPE {
        return Err(PlatformError::Malformed(format!(
            "media type `{}` is not `{MEDIA_TYPE}`",
            e.media_type
        )));
    }
    if e.evidence != evidence() {
        return Err(PlatformError::Malformed(format!(
            "simulated evidence must be exactly {}: its content is not bound by anything else",
            evidence()
        )));
    }
    let expected = binding::refresh_report_data(public_key, &e.nonce.0, None, chain_head);
    if e.report_data.0 != expected {
        return Err(PlatformError::BindingMismatch);
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use crate::TeeKey;
    use crate::platform::{AppraisalOptions, appraise};

    #[test]
    fn refused_unless_dangerously_allowed_and_binding_checked() {
        let k = TeeKey::generate().unwrap();
        let ev = Simulated
            .collect(&KeyBinding {
                public_key: k.public_bytes(),
                nonce: b"epoch-1".to_vec(),
                chain_head: None,
            })
            .unwrap();
        assert_eq!(
            appraise(&ev, &k.public_key(), AppraisalOptions::default()),
            Err(PlatformError::SimulatedRefused)
        );
        let ok = appraise(
            &ev,
            &k.public_key(),
            AppraisalOptions {
                dangerous_allow_simulated: true,
                policy: None,
                chain_head: None,
            },
        )
        .unwrap();
        assert!(!ok.hardware_backed);
        let other = TeeKey::generate().unwrap();
        assert_eq!(
            appraise(
                &ev,
                &other.public_key(),
                AppraisalOptions {
                    dangerous_allow_simulated: true,
                    policy: None,
                    chain_head: None,
                }
            ),
            Err(PlatformError::BindingMismatch)
        );
        let mut swapped_nonce = ev.clone();
        swapped_nonce.nonce = HexBytes(b"epoch-2".to_vec());
        assert_eq!(
            appraise(
                &swapped_nonce,
                &k.public_key(),
                AppraisalOptions {
                    dangerous_allow_simulated: true,
                    policy: None,
                    chain_head: None,
                }
            ),
            Err(PlatformError::BindingMismatch)
        );
    }

    #[test]
    fn an_unknown_mode_is_refused_naming_it() {
        let k = TeeKey::generate().unwrap();
        let mut ev = Simulated
            .collect(&KeyBinding {
                public_key: k.public_bytes(),
                nonce: Vec::new(),
                chain_head: None,
            })
            .unwrap();
        assert_eq!(ev.mode.as_str(), MODE);
        assert_eq!(PlatformMode::from(crate::hardware::MODE), PlatformMode::Tdx);
        ev.mode = PlatformMode::from("sev-snp");
        let allow = AppraisalOptions {
            dangerous_allow_simulated: true,
            policy: None,
            chain_head: None,
        };
        let e = appraise(&ev, &k.public_key(), allow).unwrap_err();
        assert_eq!(e, PlatformError::UnknownMode("sev-snp".into()));
        assert!(e.to_string().contains("`sev-snp`"));
    }

    #[test]
    fn simulated_evidence_content_is_bound() {
        let k = TeeKey::generate().unwrap();
        let mut ev = Simulated
            .collect(&KeyBinding {
                public_key: k.public_bytes(),
                nonce: b"epoch-1".to_vec(),
                chain_head: None,
            })
            .unwrap();
        ev.evidence = json!({"note": "hardware-backed: Intel TDX"});
        assert!(matches!(
            check(&ev, &k.public_bytes(), None),
            Err(PlatformError::Malformed(_))
        ));
    }
}
