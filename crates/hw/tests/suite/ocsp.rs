//! Stapled OCSP handling, on a small synthetic PKI (no OCSP response ships with the genuine vectors): good, on hold, revoked, unknown, stale, untrusted.

use std::str::FromStr;
use std::time::{Duration, SystemTime};

use const_oid::AssociatedOid;
use const_oid::db::rfc5280::ID_KP_OCSP_SIGNING;
use der::asn1::Any;
use der::{Decode, Encode, EncodePem};
use knox_hw::nvidia::{GpuError, GpuVerified, GpuVerifier, OcspError, RevocationStatus};
use knox_hw::policy::RegulatorPolicy;
use p384::ecdsa::signature::Signer;
use p384::ecdsa::{DerSignature, Signature, SigningKey};
use sha2::{Digest, Sha256};
use x509_cert::builder::{Builder, CertificateBuilder, Profile};
use x509_cert::certificate::Certificate;
use x509_cert::ext::pkix::{CrlReason, ExtendedKeyUsage};
use x509_cert::ext::{AsExtension, Extension};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::Validity;
use x509_ocsp::builder::OcspResponseBuilder;
use x509_ocsp::{
    CertId, CertStatus, OcspGeneralizedTime, ResponderId, RevokedInfo, SingleResponse,
};

use super::support::read_hex;

/// The FWID of the genuine nvtrust report, certified by the synthetic leaf.
const FWID: &str = "f5c384aebb579217a2c66b17ed0f28e6a9b8d639041acd7b4721cec004f7275494ba94bb5cdfdb3055ee051762b1f75d";

struct DiceFwid(Any);

impl AssociatedOid for DiceFwid {
    const OID: const_oid::ObjectIdentifier =
        const_oid::ObjectIdentifier::new_unwrap("2.23.133.5.4.1");
}

impl AsExtension for DiceFwid {
    fn critical(&self, _: &Name, _: &[Extension]) -> bool {
        false
    }
}

impl Encode for DiceFwid {
    fn encoded_len(&self) -> der::Result<der::Length> {
        self.0.encoded_len()
    }

    fn encode(&self, writer: &mut impl der::Writer) -> der::Result<()> {
        self.0.encode(writer)
    }
}

fn dice_fwid() -> DiceFwid {
    // SEQUENCE { INTEGER 1, SEQUENCE { id-sha384, OCTET STRING fwid } }
    let mut fwid = vec![
        0x30, 0x3d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02, 0x04, 0x30,
    ];
    fwid.extend(hex::decode(FWID).unwrap());
    let mut outer = vec![0x30, 0x42, 0x02, 0x01, 0x01];
    outer.extend(fwid);
    DiceFwid(Any::from_der(&outer).unwrap())
}

fn key(seed: u8) -> SigningKey {
    SigningKey::from_slice(&[seed; 48]).unwrap()
}

fn spki(k: &SigningKey) -> SubjectPublicKeyInfoOwned {
    SubjectPublicKeyInfoOwned::from_key(*k.verifying_key()).unwrap()
}

fn cert(
    profile: Profile,
    serial: u32,
    subject: &str,
    subject_key: &SigningKey,
    issuer_key: &SigningKey,
    ext: Option<&DiceFwid>,
    eku: bool,
) -> Certificate {
    let validity = Validity::from_now(Duration::from_secs(3650 * 86_400)).unwrap();
    let mut builder = CertificateBuilder::new(
        profile,
        SerialNumber::from(serial),
        validity,
        Name::from_str(subject).unwrap(),
        spki(subject_key),
        issuer_key,
    )
    .unwrap();
    if let Some(ext) = ext {
        builder.add_extension(ext).unwrap();
    }
    if eku {
        builder
            .add_extension(&ExtendedKeyUsage(vec![ID_KP_OCSP_SIGNING]))
            .unwrap();
    }
    builder.build::<DerSignature>().unwrap()
}

struct Pki {
    root_key: SigningKey,
    root: Certificate,
    leaf: Certificate,
    evidence: Vec<u8>,
    chain_pem: Vec<u8>,
}

fn pki() -> Pki {
    let root_key = key(1);
    let leaf_key = key(2);
    let root = cert(
        Profile::Root,
        1,
        "CN=Knox Test Device Root",
        &root_key,
        &root_key,
        None,
        false,
    );
    let leaf_profile = Profile::Leaf {
        issuer: root.tbs_certificate.subject.clone(),
        enable_key_agreement: false,
        enable_key_encipherment: false,
    };
    let leaf = cert(
        leaf_profile,
        2,
        "CN=Knox Test GPU",
        &leaf_key,
        &root_key,
        Some(&dice_fwid()),
        false,
    );
    // The genuine report, re-signed by the synthetic attestation key.
    let mut evidence = read_hex("nvidia-gpu/nvtrust/hopperAttestationReport.txt");
    let signed_len = evidence.len() - 96;
    let signature: Signature = leaf_key.sign(&evidence[..signed_len]);
    evidence.truncate(signed_len);
    evidence.extend_from_slice(&signature.to_bytes());
    let pem = |c: &Certificate| c.to_pem(der::pem::LineEnding::LF).unwrap();
    let chain_pem = format!("{}{}", pem(&leaf), pem(&root)).into_bytes();
    Pki {
        root_key,
        root,
        leaf,
        evidence,
        chain_pem,
    }
}

fn at(offset_secs: i64) -> OcspGeneralizedTime {
    let now = SystemTime::now();
    let t = if offset_secs >= 0 {
        now + Duration::from_secs(offset_secs.unsigned_abs())
    } else {
        now - Duration::from_secs(offset_secs.unsigned_abs())
    };
    OcspGeneralizedTime::try_from(t).unwrap()
}

fn response(
    pki: &Pki,
    status: CertStatus,
    signer: &SigningKey,
    certs: Option<Vec<Certificate>>,
    window: (i64, i64),
) -> Vec<u8> {
    let id =
        CertId::from_issuer::<Sha256>(&pki.root, pki.leaf.tbs_certificate.serial_number.clone())
            .unwrap();
    let single = SingleResponse::new(id, status, at(window.0)).with_next_update(at(window.1));
    let mut signer = signer.clone();
    OcspResponseBuilder::new(ResponderId::ByName(
        pki.root.tbs_certificate.subject.clone(),
    ))
    .with_single_response(single)
    .sign::<_, DerSignature>(&mut signer, certs, at(-60))
    .unwrap()
    .to_der()
    .unwrap()
}

fn verify(pki: &Pki, stapled: Vec<Vec<u8>>) -> Result<GpuVerified, GpuError> {
    let pin: [u8; 32] = Sha256::digest(pki.root.to_der().unwrap()).into();
    GpuVerifier::dangerous_with_root(pin)
        .stapled_ocsp(stapled)
        .verify(&pki.evidence, &pki.chain_pem, None)
}

fn revoked(reason: CrlReason) -> CertStatus {
    CertStatus::revoked(RevokedInfo {
        revocation_time: at(-3600),
        revocation_reason: Some(reason),
    })
}

const CURRENT: (i64, i64) = (-3600, 86_400);

#[test]
fn without_responses_revocation_is_not_checked() {
    let p = pki();
    let v = verify(&p, vec![]).unwrap();
    assert_eq!(v.revocation.len(), 1);
    assert_eq!(v.revocation[0].status, RevocationStatus::NotChecked);
}

#[test]
fn good_response_from_the_issuer_is_accepted() {
    let p = pki();
    let v = verify(
        &p,
        vec![response(&p, CertStatus::good(), &p.root_key, None, CURRENT)],
    )
    .unwrap();
    assert_eq!(v.revocation[0].status, RevocationStatus::Good);
}

#[test]
fn certificate_on_hold_is_reported_and_the_policy_decides() {
    let p = pki();
    let v = verify(
        &p,
        vec![response(
            &p,
            revoked(CrlReason::CertificateHold),
            &p.root_key,
            None,
            CURRENT,
        )],
    )
    .unwrap();
    assert!(matches!(
        v.revocation[0].status,
        RevocationStatus::OnHold { .. }
    ));
    let example = include_str!("../../policies/example.toml");
    let policy = RegulatorPolicy::from_toml(example.as_bytes()).unwrap();
    assert_eq!(
        policy.appraise_gpu(&v).unwrap_err().field(),
        "gpu.revocation"
    );
    let lenient = example.replacen(
        "allow_certificate_hold = false",
        "allow_certificate_hold = true",
        1,
    );
    RegulatorPolicy::from_toml(lenient.as_bytes())
        .unwrap()
        .appraise_gpu(&v)
        .unwrap();
}

#[test]
fn revoked_certificate_is_an_error() {
    let p = pki();
    let err = verify(
        &p,
        vec![response(
            &p,
            revoked(CrlReason::KeyCompromise),
            &p.root_key,
            None,
            CURRENT,
        )],
    )
    .unwrap_err();
    assert!(matches!(err, GpuError::Revoked { .. }), "{err}");
}

#[test]
fn unknown_status_is_reported() {
    let p = pki();
    let v = verify(
        &p,
        vec![response(
            &p,
            CertStatus::unknown(),
            &p.root_key,
            None,
            CURRENT,
        )],
    )
    .unwrap();
    assert_eq!(v.revocation[0].status, RevocationStatus::Unknown);
}

#[test]
fn stale_response_is_refused() {
    let p = pki();
    let err = verify(
        &p,
        vec![response(
            &p,
            CertStatus::good(),
            &p.root_key,
            None,
            (-7200, -3600),
        )],
    )
    .unwrap_err();
    assert!(
        matches!(err, GpuError::Ocsp(OcspError::Stale { .. })),
        "{err}"
    );
}

#[test]
fn delegated_responder_needs_the_ocsp_signing_usage() {
    let p = pki();
    let responder_key = key(3);
    let issuer = Profile::Leaf {
        issuer: p.root.tbs_certificate.subject.clone(),
        enable_key_agreement: false,
        enable_key_encipherment: false,
    };
    let with_eku = cert(
        issuer.clone(),
        3,
        "CN=Knox Test OCSP",
        &responder_key,
        &p.root_key,
        None,
        true,
    );
    let v = verify(
        &p,
        vec![response(
            &p,
            CertStatus::good(),
            &responder_key,
            Some(vec![with_eku]),
            CURRENT,
        )],
    )
    .unwrap();
    assert_eq!(v.revocation[0].status, RevocationStatus::Good);
    let without = cert(
        issuer,
        4,
        "CN=Knox Test OCSP",
        &responder_key,
        &p.root_key,
        None,
        false,
    );
    let err = verify(
        &p,
        vec![response(
            &p,
            CertStatus::good(),
            &responder_key,
            Some(vec![without]),
            CURRENT,
        )],
    )
    .unwrap_err();
    assert!(
        matches!(err, GpuError::Ocsp(OcspError::Untrusted { .. })),
        "{err}"
    );
}

#[test]
fn responder_outside_the_pinned_pki_is_refused() {
    let p = pki();
    let stranger = key(9);
    let own = cert(
        Profile::Root,
        9,
        "CN=Knox Test Device Root",
        &stranger,
        &stranger,
        None,
        true,
    );
    let err = verify(
        &p,
        vec![response(
            &p,
            revoked(CrlReason::KeyCompromise),
            &stranger,
            Some(vec![own]),
            CURRENT,
        )],
    )
    .unwrap_err();
    assert!(
        matches!(err, GpuError::Ocsp(OcspError::Untrusted { .. })),
        "{err}"
    );
    let err = verify(&p, vec![b"not ocsp".to_vec()]).unwrap_err();
    assert!(
        matches!(err, GpuError::Ocsp(OcspError::Malformed { .. })),
        "{err}"
    );
}
