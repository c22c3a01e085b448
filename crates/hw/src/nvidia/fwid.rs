//! The SHA-384 FWID in the TCG DICE extension (2.23.133.5.4.1) of an NVIDIA attestation leaf certificate.

use const_oid::ObjectIdentifier;
use const_oid::db::rfc5912::ID_SHA_384;
use der::asn1::{AnyRef, OctetStringRef};
use der::{Decode, Reader, SliceReader, Tag, Tagged};

use crate::x509::Cert;

/// TCG DICE extension OID carrying the FWID.
pub const TCG_DICE_FWID_EXTENSION: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("2.23.133.5.4.1");

/// Deepest nesting walked inside the extension.
const MAX_DEPTH: usize = 6;

/// Collects every `SEQUENCE { sha384 OID, OCTET STRING }` (an FWID) found by
/// walking constructed values. Hopper leaves use the composite-device-id form
/// `SEQUENCE { version, SubjectPublicKeyInfo, FWID }`; the DICE TcbInfo form puts
/// FWIDs under `[6]`. Walking both keeps the reader independent of which.
fn walk(bytes: &[u8], depth: usize, found: &mut Vec<Vec<u8>>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(mut reader) = SliceReader::new(bytes) else {
        return;
    };
    let mut children = Vec::new();
    while !reader.is_finished() {
        match AnyRef::decode(&mut reader) {
            Ok(any) => children.push(any),
            Err(_) => return,
        }
    }
    if let [first, second] = children.as_slice()
        && first.tag() == Tag::ObjectIdentifier
        && second.tag() == Tag::OctetString
        && let (Ok(oid), Ok(digest)) = (
            first.decode_as::<ObjectIdentifier>(),
            second.decode_as::<OctetStringRef<'_>>(),
        )
        && oid == ID_SHA_384
    {
        found.push(digest.as_bytes().to_vec());
        return;
    }
    for child in children {
        if child.tag().is_constructed() {
            walk(child.value(), depth.saturating_add(1), found);
        }
    }
}

/// The leaf's FWID, when its DICE extension carries exactly one distinct SHA-384 FWID.
pub(crate) fn leaf_fwid(leaf: &Cert) -> Option<[u8; 48]> {
    let extensions = leaf.cert.tbs_certificate.extensions.as_ref()?;
    let ext = extensions
        .iter()
        .find(|e| e.extn_id == TCG_DICE_FWID_EXTENSION)?;
    let mut found = Vec::new();
    // The extension value is one DER value; wrap the walk at its top level.
    let Ok(top) = AnyRef::from_der(ext.extn_value.as_bytes()) else {
        return None;
    };
    if top.tag().is_constructed() {
        walk(top.value(), 0, &mut found);
    }
    found.dedup();
    match found.as_slice() {
        [one] => one.as_slice().try_into().ok(),
        _ => None,
    }
}
