//! The compact encoding of a bundle, `knox-compact/v2`, which also reads `/v1` files
//! (`docs/evidence-format.md` §9).
//!
//! A container, not a new evidence format: a compact file holds exactly one bundle of
//! the JSON format (§2), with what a reader can derive left out, and expands back to
//! it member for member. What is measured, chained and signed is the bundle's, so a
//! compact file verifies by expanding it and verifying the bundle it holds; nothing a
//! verifier trusts is re-derived from the container's own claims.
//!
//! Two layers, each a pure function of the one below:
//!
//! 1. **Items**: the bundle as a CBOR tree (RFC 8949). JSON values map one to one
//!    (objects to maps with text keys in ascending byte order of their names, strings
//!    of lowercase hex digits to byte strings), every DSSE envelope carries its
//!    statement as a value and its signatures as bytes, the summaries in clear that
//!    repeat a signed statement are left out, and each node is an array
//!    `[kind code, payload, extras?]` whose `extras` map holds only the members that
//!    differ from what the nodes before it imply ([`Defaults`]).
//! 2. **Strings**: after a preset of the format's words (`compact-texts.txt`), every
//!    text of 3 bytes or more and byte string of 16 or more is numbered where it is
//!    first written, in the order the tree is written; a later occurrence is a
//!    reference to that number where that is shorter (a map key as an unsigned
//!    integer, any other string as tag 25).
//!
//! Reading is strict: a file is accepted only when it is the one encoding this module
//! writes for what it holds (checked by writing it again), so no two files hold the
//! same bundle.

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use ciborium::value::Value as Item;
use serde_json::{Map, Number, Value};

use crate::action::hash_call;
use crate::aeg::NodeKind;
use crate::bundle::MAX_BUNDLE_BYTES;
use crate::canon;
use crate::digest::{Digest, tag};
use crate::dsse::{b64, unb64};

/// The container's format name, the first item of every compact file.
pub const COMPACT_FORMAT: &str = "knox-compact/v2";
/// The first version, still read (a file of it expands as it was written): no digest
/// recomputed, no shared part (§9.6).
pub const COMPACT_FORMAT_V1: &str = "knox-compact/v1";

/// The container's versions a reader reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// CBOR's self-describing tag (RFC 8949 §3.4.6): the file's first three bytes.
const SELF_DESCRIBE: u64 = 55_799;
/// The tag of a reference to an earlier string in a value position.
const STRING_REF: u64 = 25;
/// Texts shorter than this (in UTF-8 bytes) are never numbered.
const MIN_SHARED_TEXT: usize = 3;
/// Byte strings shorter than this are never numbered.
const MIN_SHARED_BYTES: usize = 16;
/// The texts numbered before the file's first (§9.2): the format's member names and
/// fixed words, then the x86-64 system call names by number. Frozen: the same for
/// versions 1 and 2.
const PRESET: &str = include_str!("compact-texts.txt");
/// Strings of lowercase hex digits at least this long are written as bytes.
const MIN_HEX: usize = 16;
/// The DSSE payload type Knox's statements carry, left out when it is that.
const IN_TOTO: &str = "application/vnd.in-toto+json";
/// Where a bundle's DSSE envelopes are.
const ENVELOPES: [&[&str]; 3] = [
    &["envelope"],
    &["apm_attestation", "envelope"],
    &["contract", "envelope"],
];

/// Where a bundle of a store may refer to a part the store holds once (§9.5): the
/// APM's guards, the same in every run of a toolkit under the same regulations.
const SHARED: [&[&str]; 1] = [&["apm", "guards"]];
/// The tag of a reference to a shared part (on its 32-byte digest): unregistered,
/// private to this format.
const PART_REF: u64 = 1_802_399_608;
/// A part file's format name, its first item.
pub const PART_FORMAT: &str = "knox-compact-part/v1";
/// The domain tag of a part's digest.
const PART_DIGEST: &str = "knox/part";
/// The folder, beside a store's bundles, that holds its parts.
pub const PARTS_DIR: &str = "parts";

/// The first bytes of every compact file: tag 55799 in its three-byte form.
pub const MAGIC: [u8; 3] = [0xd9, 0xd9, 0xf7];

/// Why a compact file cannot be read, or a bundle cannot be compacted.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// Not CBOR, or not the shape of §9.
    #[error("not a compact bundle: {0}")]
    Shape(String),
    /// Expanding would exceed the bundle limit.
    #[error("the compact bundle expands beyond the {MAX_BUNDLE_BYTES}-byte limit")]
    TooLarge,
    /// CBOR that holds a bundle, but not in the one encoding of it.
    #[error("not the deterministic encoding of the bundle it holds (first difference at byte {0})")]
    NotDeterministic(usize),
    /// A bundle the compact encoding cannot hold exactly (not as Knox writes them).
    #[error("cannot compact this bundle without changing it: {0}")]
    Lossy(String),
    /// A bundle of a store that refers to a shared part the reader was not given.
    #[error(
        "the bundle refers to the shared part {0}, which its store does not hold (`parts/{0}.cbor` beside the bundle)"
    )]
    MissingPart(String),
    /// A shared part's file that is not the part its name says.
    #[error("the shared part {0}: {1}")]
    BadPart(String, String),
}

fn shape<T>(why: impl Into<String>) -> Result<T, CompactError> {
    Err(CompactError::Shape(why.into()))
}

/// Whether `bytes` start as a compact file does.
pub fn is_compact(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The compact encoding of a bundle given as its JSON value (as `knox run` writes it).
/// An error when the bundle is not one the encoding holds exactly: every bundle Knox
/// writes is (checked here by expanding the result again).
pub fn compact(bundle: &Value) -> Result<Vec<u8>, CompactError> {
    Ok(compact_checked(bundle, false)?.0)
}

/// The compact encoding of a bundle in a store (§9.5): the file, which refers to its
/// shared parts by digest, and those parts, each to be stored once as
/// `parts/<digest>.cbor` beside the bundles ([`part_file_name`]).
pub fn compact_in_store(bundle: &Value) -> Result<(Vec<u8>, Vec<Part>), CompactError> {
    compact_checked(bundle, true)
}

fn compact_checked(bundle: &Value, share: bool) -> Result<(Vec<u8>, Vec<Part>), CompactError> {
    let (bytes, parts) = encode(bundle, share, Version::V2)?;
    let lookup = |d: &Digest| {
        parts
            .iter()
            .find(|p| p.digest == *d)
            .map(|p| p.bytes.clone())
    };
    let (back, ..) = decode(&bytes, &lookup)
        .map_err(|e| CompactError::Lossy(format!("the compact form does not read back: {e}")))?;
    if &back != bundle {
        return Err(CompactError::Lossy(first_change(
            bundle,
            &back,
            String::new(),
        )));
    }
    Ok((bytes, parts))
}

/// A part of bundles a store holds once (§9.5): the bytes of its file and the digest
/// that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// `H("knox/part", canonical JSON of the value)`.
    pub digest: Digest,
    /// The part's file (`knox-compact-part/v1`).
    pub bytes: Vec<u8>,
}

/// Where a store keeps a part, relative to the folder of the bundles that refer to it
/// (reading it is the caller's: this crate does no I/O).
pub fn part_file_name(digest: &Digest) -> String {
    format!("{PARTS_DIR}/{}.cbor", digest.to_hex())
}

/// No parts: a file that refers to one cannot be read.
pub fn no_parts(_: &Digest) -> Option<Vec<u8>> {
    None
}

/// The bundle a compact file holds, as a JSON value; the file must be the encoding
/// [`compact`] writes for it. A file of a store (one that refers to shared parts)
/// cannot be read this way: [`expand_in`].
pub fn expand(bytes: &[u8]) -> Result<Value, CompactError> {
    expand_in(bytes, &no_parts)
}

/// [`expand`], the shared parts the file refers to read from `parts` (by digest; each
/// is checked to be the part of that digest, in its one encoding).
pub fn expand_in(
    bytes: &[u8],
    parts: &dyn Fn(&Digest) -> Option<Vec<u8>>,
) -> Result<Value, CompactError> {
    let (bundle, shared, version) = decode(bytes, parts)?;
    let (again, _) =
        encode(&bundle, shared, version).map_err(|e| CompactError::Shape(e.to_string()))?;
    if again != bytes {
        let at = again
            .iter()
            .zip(bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(again.len().min(bytes.len()));
        return Err(CompactError::NotDeterministic(at));
    }
    Ok(bundle)
}

/// [`expand`], written as the bundle's JSON file (canonical JSON throughout, so every
/// part the format hashes as written is in its canonical form).
pub fn expand_to_json(bytes: &[u8]) -> Result<Vec<u8>, CompactError> {
    expand_to_json_in(bytes, &no_parts)
}

/// [`expand_in`], written as the bundle's JSON file.
pub fn expand_to_json_in(
    bytes: &[u8],
    parts: &dyn Fn(&Digest) -> Option<Vec<u8>>,
) -> Result<Vec<u8>, CompactError> {
    let json = canon::canonical(&expand_in(bytes, parts)?);
    if json.len() > MAX_BUNDLE_BYTES {
        return Err(CompactError::TooLarge);
    }
    Ok(json)
}

/// Where the first difference between `a` and `b` lies, as a JSON pointer.
fn first_change(a: &Value, b: &Value, at: String) -> String {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) if w == v => {}
                    Some(w) => return first_change(v, w, format!("{at}/{k}")),
                    None => return format!("`{at}/{k}` would be lost"),
                }
            }
            match y.keys().find(|k| !x.contains_key(*k)) {
                Some(k) => format!("`{at}/{k}` would be added"),
                None => format!("`{at}` would change"),
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            match x.iter().zip(y).enumerate().find(|(_, (v, w))| v != w) {
                Some((i, (v, w))) => first_change(v, w, format!("{at}/{i}")),
                None => format!("`{at}` would change"),
            }
        }
        _ => format!("`{at}` would change"),
    }
}

// ---- encoding --------------------------------------------------------------------

/// The file for `bundle` and, when `share`, the parts it refers to instead of holding.
fn encode(
    bundle: &Value,
    share: bool,
    version: Version,
) -> Result<(Vec<u8>, Vec<Part>), CompactError> {
    let Value::Object(top) = bundle else {
        return Err(CompactError::Lossy("a bundle is a JSON object".into()));
    };
    let Some(Value::Array(nodes)) = top.get("nodes") else {
        return Err(CompactError::Lossy("a bundle's `nodes` is an array".into()));
    };
    // Every member but the nodes (read in place, not copied).
    let mut top: Map<String, Value> = top
        .iter()
        .filter(|(k, _)| *k != "nodes")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // The summaries in clear, where they repeat what the envelopes sign.
    if let Some(predicate) = statement_predicate(top.get("envelope"))
        && top.get("summary") == Some(&predicate)
    {
        top.remove("summary");
    }
    if let Some(Value::Object(att)) = top.get_mut("apm_attestation")
        && let Some(predicate) = statement_predicate(att.get("envelope"))
        && att.get("statement") == Some(&predicate)
    {
        att.remove("statement");
    }
    // The digests a reader recomputes, written as null where they stand (§9.1).
    let derived = match version {
        Version::V1 => Derived::default(),
        Version::V2 => Derived::before_nodes(&top).with_nodes(nodes),
    };
    if let Some(apm) = top.get_mut("apm") {
        derived.mark(apm, &APM_DIGESTS);
    }
    // Members written as items of their own, put back in place after the rest.
    let mut placed = Vec::new();
    for path in ENVELOPES {
        if let Some(env) = take_at(&mut top, path) {
            placed.push((path, pack_envelope(&env, &derived)?));
        }
    }
    let mut parts = Vec::new();
    for path in SHARED.iter().filter(|_| share && version == Version::V2) {
        if let Some(value) = take_at(&mut top, path) {
            let part = encode_part(&value)?;
            let reference = Item::Tag(PART_REF, Box::new(Item::Bytes(part.digest.0.to_vec())));
            placed.push((path, reference));
            parts.push(part);
        }
    }
    let mut bundle_item = object_item(&top);
    for (path, item) in placed {
        put_at(&mut bundle_item, path, item);
    }
    let mut defaults = Defaults::default();
    let mut records = Vec::with_capacity(nodes.len());
    for (i, node) in nodes.iter().enumerate() {
        records.push(node_record(node, i, &mut defaults, &derived)?);
    }
    let format = match version {
        Version::V1 => COMPACT_FORMAT_V1,
        Version::V2 => COMPACT_FORMAT,
    };
    let tree = Item::Array(vec![
        Item::Text(format.into()),
        bundle_item,
        Item::Array(records),
    ]);
    Ok((written(tree)?, parts))
}

/// `tree`, its strings shared (§9.2), as the bytes of a file under tag 55799.
fn written(mut tree: Item) -> Result<Vec<u8>, CompactError> {
    Strings::default().share(&mut tree, false);
    let mut out = Vec::new();
    ciborium::into_writer(&Item::Tag(SELF_DESCRIBE, Box::new(tree)), &mut out)
        .map_err(|e| CompactError::Lossy(e.to_string()))?;
    Ok(out)
}

/// A shared part's file (§9.5): `[format, value]`, its strings numbered on their own.
fn encode_part(value: &Value) -> Result<Part, CompactError> {
    let tree = Item::Array(vec![Item::Text(PART_FORMAT.into()), value_item(value)]);
    Ok(Part {
        digest: Digest::tagged(PART_DIGEST, &[&canon::canonical(value)]),
        bytes: written(tree)?,
    })
}

/// The value a part's file holds, checked to be the part `digest` names, in its one
/// encoding; every string it brings back counts against `budget`.
fn read_part(bytes: &[u8], digest: &Digest, budget: &mut usize) -> Result<Value, CompactError> {
    let bad = |why: String| CompactError::BadPart(digest.to_hex(), why);
    *budget = budget
        .checked_sub(bytes.len())
        .ok_or(CompactError::TooLarge)?;
    let tree = tagged_tree(bytes, budget).map_err(|e| bad(e.to_string()))?;
    let Ok([format, value]) = <[Item; 2]>::try_from(match tree {
        Item::Array(parts) => parts,
        _ => Vec::new(),
    }) else {
        return Err(bad("not an array [format, value]".into()));
    };
    if format != Item::Text(PART_FORMAT.into()) {
        return Err(bad(format!("the first item is not `{PART_FORMAT}`")));
    }
    let value = json_value(value, 1).map_err(|e| bad(e.to_string()))?;
    let again = encode_part(&value)?;
    if again.digest != *digest {
        return Err(bad(format!(
            "it holds the part {}, not this one",
            again.digest
        )));
    }
    if again.bytes != bytes {
        return Err(bad("not the one encoding of the part it holds".into()));
    }
    Ok(value)
}

/// The predicate of the statement a DSSE envelope (JSON) signs, when it reads as one.
fn statement_predicate(env: Option<&Value>) -> Option<Value> {
    let payload = env?.get("payload")?.as_str()?;
    let statement: Value = serde_json::from_slice(&unb64(payload)?).ok()?;
    statement.get("predicate").cloned()
}

fn take_at(top: &mut Map<String, Value>, path: &[&str]) -> Option<Value> {
    match path {
        [last] => top.remove(*last),
        [first, rest @ ..] => match top.get_mut(*first) {
            Some(Value::Object(inner)) => take_at(inner, rest),
            _ => None,
        },
        [] => None,
    }
}

fn put_at(item: &mut Item, path: &[&str], value: Item) {
    let Item::Map(entries) = item else { return };
    match path {
        [last] => {
            entries.push((Item::Text((*last).into()), value));
            sort_entries(entries);
        }
        [first, rest @ ..] => {
            if let Some((_, inner)) = entries
                .iter_mut()
                .find(|(k, _)| matches!(k, Item::Text(t) if t == first))
            {
                put_at(inner, rest, value);
            }
        }
        [] => {}
    }
}

/// A DSSE envelope: its statement as a value, its signatures' bytes.
fn pack_envelope(env: &Value, derived: &Derived) -> Result<Item, CompactError> {
    let lossy = |why: &str| Err(CompactError::Lossy(format!("a DSSE envelope: {why}")));
    let Value::Object(env) = env else {
        return lossy("not an object");
    };
    let mut out = env.clone();
    let Some(Value::String(payload)) = out.remove("payload") else {
        return lossy("no payload");
    };
    let Some(bytes) = unb64(&payload).filter(|b| b64(b) == payload) else {
        return lossy("the payload is not base64 as written by Knox");
    };
    let mut statement: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return lossy("the payload is not JSON"),
    };
    if canon::canonical(&statement) != bytes {
        return lossy("the payload is not canonical JSON");
    }
    derived.mark(&mut statement, &STATEMENT_DIGESTS);
    if let Some(signatures) = out.get_mut("signatures") {
        derived.mark(signatures, &SIGNATURE_DIGESTS);
    }
    if out.get("payloadType").and_then(Value::as_str) == Some(IN_TOTO) {
        out.remove("payloadType");
    }
    let signatures = out.remove("signatures");
    let mut item = object_item(&out);
    let Item::Map(entries) = &mut item else {
        return lossy("not an object");
    };
    entries.push((Item::Text("payload".into()), value_item(&statement)));
    if let Some(signatures) = signatures {
        let Value::Array(signatures) = signatures else {
            return lossy("`signatures` is not an array");
        };
        let mut items = Vec::with_capacity(signatures.len());
        for s in signatures {
            let Value::Object(mut s) = s else {
                return lossy("a signature is not an object");
            };
            let Some(Value::String(sig)) = s.remove("sig") else {
                return lossy("a signature has no `sig`");
            };
            let Some(raw) = unb64(&sig).filter(|b| b64(b) == sig) else {
                return lossy("a `sig` is not base64 as written by Knox");
            };
            let mut one = object_item(&s);
            if let Item::Map(e) = &mut one {
                e.push((Item::Text("sig".into()), Item::Bytes(raw)));
                sort_entries(e);
            }
            items.push(one);
        }
        entries.push((Item::Text("signatures".into()), Item::Array(items)));
    }
    sort_entries(entries);
    Ok(item)
}

fn node_record(
    node: &Value,
    i: usize,
    defaults: &mut Defaults,
    derived: &Derived,
) -> Result<Item, CompactError> {
    let lossy = |why: String| Err(CompactError::Lossy(format!("node {i}: {why}")));
    let Value::Object(node) = node else {
        return lossy("not an object".into());
    };
    let kind = match node
        .get("kind")
        .and_then(Value::as_str)
        .and_then(kind_named)
    {
        Some(k) => k,
        None => return lossy("no known `kind`".into()),
    };
    let Some(payload) = node.get("payload") else {
        return lossy("no `payload`".into());
    };
    let mut extras = Map::new();
    defaults.resolve(kind, payload, |name, implied| {
        let own = node.get(name).cloned();
        if own.is_some() && own != implied {
            extras.insert(name.to_string(), own.clone().unwrap_or(Value::Null));
        }
        own
    });
    for (name, value) in node {
        if !matches!(name.as_str(), "kind" | "payload") && !IMPLIED.contains(&name.as_str()) {
            extras.insert(name.clone(), value.clone());
        }
    }
    let mut payload = pack_payload(kind, payload);
    if kind == NodeKind::Root {
        derived.mark(&mut payload, &ROOT_DIGESTS);
    }
    let mut record = vec![Item::Integer(kind.code().into()), value_item(&payload)];
    if !extras.is_empty() {
        record.push(object_item(&extras));
    }
    Ok(Item::Array(record))
}

/// A JSON value as an item.
fn value_item(v: &Value) -> Item {
    match v {
        Value::Null => Item::Null,
        Value::Bool(b) => Item::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Item::Integer(u.into())
            } else if let Some(i) = n.as_i64() {
                Item::Integer(i.into())
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                // A number canonical JSON writes as an integer, read as a float.
                match integral(f).and_then(|i| ciborium::value::Integer::try_from(i).ok()) {
                    Some(i) => Item::Integer(i),
                    None => Item::Float(f),
                }
            }
        }
        Value::String(s) if is_hex(s) => Item::Bytes(hex::decode(s).unwrap_or_default()),
        Value::String(s) => Item::Text(s.clone()),
        Value::Array(a) => Item::Array(a.iter().map(value_item).collect()),
        Value::Object(o) => object_item(o),
    }
}

fn object_item(o: &Map<String, Value>) -> Item {
    let mut entries: Vec<(Item, Item)> = o
        .iter()
        .map(|(k, v)| (Item::Text(k.clone()), value_item(v)))
        .collect();
    sort_entries(&mut entries);
    Item::Map(entries)
}

/// Map entries in ascending byte order of their (text) keys.
fn sort_entries(entries: &mut [(Item, Item)]) {
    entries.sort_by(|(a, _), (b, _)| match (a, b) {
        (Item::Text(a), Item::Text(b)) => a.as_bytes().cmp(b.as_bytes()),
        _ => std::cmp::Ordering::Equal,
    });
}

/// `f` as a 64-bit integer, when it is one (canonical JSON writes it without fraction
/// or exponent; the compact form then as an integer, never as a float).
fn integral(f: f64) -> Option<i128> {
    const LOW: f64 = -9_223_372_036_854_775_808.0; // −2⁶³
    const HIGH: f64 = 18_446_744_073_709_551_616.0; // 2⁶⁴
    // In range and whole: the cast is exact.
    (f.fract() == 0.0 && (LOW..HIGH).contains(&f)).then_some(f as i128)
}

fn is_hex(s: &str) -> bool {
    s.len() >= MIN_HEX
        && s.len().is_multiple_of(2)
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn kind_named(name: &str) -> Option<NodeKind> {
    NodeKind::ALL.into_iter().find(|k| k.as_str() == name)
}

// ---- digests a reader recomputes ----------------------------------------------------

/// The digests a reader recomputes from the bundle it expands (§9.1), by what they are of.
#[derive(Clone, Copy)]
enum Of {
    /// `H("knox/prompt", canonical(prompt))`.
    Prompt,
    /// `H("knox/apm", canonical(apm))`.
    Apm,
    /// `H("knox/platform", canonical(platform))`.
    Platform,
    /// `H("knox/key-chain-start", H_platform)`: a key's first run's predecessor.
    KeyChainStart,
    /// `H("knox/key", public key)`: the bundle key's id.
    Key,
    /// The nodes' hash chain.
    ChainHead,
    /// The nodes' structure root.
    StructureRoot,
}

/// Where a statement (of any envelope) may hold a recomputed digest; `*` is every item
/// of an array.
const STATEMENT_DIGESTS: [(&[&str], Of); 9] = [
    (&["predicate", "apm_hash"], Of::Apm),
    (&["predicate", "chain_head"], Of::ChainHead),
    (&["predicate", "inputs", "prompt"], Of::Prompt),
    (&["predicate", "key_chain", "prev"], Of::KeyChainStart),
    (&["predicate", "platform"], Of::Platform),
    (&["predicate", "structure_root"], Of::StructureRoot),
    (&["subject", "*", "digest", "knoxApm"], Of::Apm),
    (&["subject", "*", "digest", "knoxChainHead"], Of::ChainHead),
    (
        &["subject", "*", "digest", "knoxStructureRoot"],
        Of::StructureRoot,
    ),
];
/// Where an envelope's `signatures` may hold one.
const SIGNATURE_DIGESTS: [(&[&str], Of); 1] = [(&["*", "keyid"], Of::Key)];
/// Where a `root` node's payload may hold one.
const ROOT_DIGESTS: [(&[&str], Of); 1] = [(&["apm_hash"], Of::Apm)];
/// Where the bundle's APM may hold one.
const APM_DIGESTS: [(&[&str], Of); 1] = [(&["inputs", "prompt"], Of::Prompt)];

/// The recomputed digests of one bundle, in lowercase hex; `None` where the bundle does
/// not have what one is computed from.
#[derive(Default)]
struct Derived {
    prompt: Option<String>,
    apm: Option<String>,
    platform: Option<String>,
    key_chain_start: Option<String>,
    key: Option<String>,
    chain_head: Option<String>,
    structure_root: Option<String>,
}

impl Derived {
    /// The digests of the bundle `top` (its members but `nodes`), the nodes' not yet
    /// ([`Derived::with_nodes`]). The APM's is computed as `top` holds it: a reader
    /// puts the APM's prompt digest back first.
    fn before_nodes(top: &Map<String, Value>) -> Self {
        let platform = top
            .get("platform")
            .map(|v| Digest::tagged(tag::PLATFORM, &[&canon::canonical(v)]));
        let key = top
            .get("key")
            .and_then(|k| k.get("public_key"))
            .and_then(Value::as_str)
            .and_then(|h| hex::decode(h).ok())
            .map(|pk| Digest::tagged(tag::KEY, &[&pk]));
        Self {
            prompt: prompt_digest(top),
            apm: digest_of(top, tag::APM, "apm"),
            key_chain_start: platform
                .map(|p| Digest::tagged(tag::KEY_CHAIN_START, &[&p.0]).to_hex()),
            platform: platform.map(|d| d.to_hex()),
            key: key.map(|d| d.to_hex()),
            chain_head: None,
            structure_root: None,
        }
    }

    /// With the chain head and structure root of `nodes`.
    fn with_nodes(self, nodes: &[Value]) -> Self {
        let (chain_head, structure_root) = match chain_and_root(nodes) {
            Some((c, r)) => (Some(c.to_hex()), Some(r.to_hex())),
            None => (None, None),
        };
        Self {
            chain_head,
            structure_root,
            ..self
        }
    }

    fn get(&self, of: Of) -> Option<&str> {
        match of {
            Of::Prompt => self.prompt.as_deref(),
            Of::Apm => self.apm.as_deref(),
            Of::Platform => self.platform.as_deref(),
            Of::KeyChainStart => self.key_chain_start.as_deref(),
            Of::Key => self.key.as_deref(),
            Of::ChainHead => self.chain_head.as_deref(),
            Of::StructureRoot => self.structure_root.as_deref(),
        }
    }

    /// Writing: each digest at `places` in `v` that equals its recomputation becomes null.
    fn mark(&self, v: &mut Value, places: &[(&[&str], Of)]) {
        for (path, of) in places {
            if let Some(want) = self.get(*of) {
                at_each(v, path, &mut |x| {
                    if x.as_str() == Some(want) {
                        *x = Value::Null;
                    }
                });
            }
        }
    }

    /// Reading: each null at `places` in `v` becomes its recomputation (where there is
    /// one).
    fn fill(&self, v: &mut Value, places: &[(&[&str], Of)]) {
        for (path, of) in places {
            if let Some(want) = self.get(*of) {
                at_each(v, path, &mut |x| {
                    if x.is_null() {
                        *x = Value::String(want.to_owned());
                    }
                });
            }
        }
    }
}

/// `H("knox/prompt", canonical(prompt))` of the bundle's prompt, when it has one.
fn prompt_digest(top: &Map<String, Value>) -> Option<String> {
    digest_of(top, tag::PROMPT, "prompt")
}

/// `H(tag, canonical(member))` of a member of the bundle, when it has it.
fn digest_of(top: &Map<String, Value>, tag: &str, member: &str) -> Option<String> {
    top.get(member)
        .map(|v| Digest::tagged(tag, &[&canon::canonical(v)]).to_hex())
}

/// Calls `f` on every value at `path` in `v` (`*` an array's every item).
fn at_each(v: &mut Value, path: &[&str], f: &mut dyn FnMut(&mut Value)) {
    match path.split_first() {
        None => f(v),
        Some((&"*", rest)) => {
            if let Value::Array(a) = v {
                a.iter_mut().for_each(|x| at_each(x, rest, f));
            }
        }
        Some((k, rest)) => {
            if let Some(x) = v.as_object_mut().and_then(|o| o.get_mut(*k)) {
                at_each(x, rest, f);
            }
        }
    }
}

/// The hash chain's head and the structure root of `nodes` as they stand (§4), when
/// every node has a `seq`, `parent`, known `kind` and hex `measurement`.
fn chain_and_root(nodes: &[Value]) -> Option<(Digest, Digest)> {
    let mut chain = crate::aeg::chain_start();
    let mut leaves = Vec::with_capacity(nodes.len());
    for n in nodes {
        let seq = n.get("seq")?.as_u64()?;
        let parent = match n.get("parent")? {
            Value::Null => None,
            p => Some(p.as_u64()?),
        };
        let kind = kind_named(n.get("kind")?.as_str()?)?;
        let m = Digest::from_hex(n.get("measurement")?.as_str()?).ok()?;
        chain = crate::aeg::chain_step(&chain, seq, &m);
        leaves.push(crate::merkle::leaf_hash(&crate::aeg::leaf_record(
            seq, parent, kind, &m,
        )));
    }
    Some((chain, crate::merkle::root(&leaves)))
}

// ---- decoding --------------------------------------------------------------------

/// How deep a compact file may nest (a bundle's JSON nests at most 127 deep).
const MAX_DEPTH: usize = 128;

/// The CBOR of a compact file (a bundle's or a part's): one item under tag 55799, its
/// string references resolved against `budget`.
fn tagged_tree(bytes: &[u8], budget: &mut usize) -> Result<Item, CompactError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(CompactError::TooLarge);
    }
    if !is_compact(bytes) {
        return shape("it does not begin with CBOR tag 55799 (d9 d9 f7)");
    }
    let item: Item = ciborium::from_reader(bytes).map_err(|e| {
        CompactError::Shape(match e {
            ciborium::de::Error::Io(_) => "the CBOR ends in the middle of an item".into(),
            ciborium::de::Error::Syntax(at) => format!("CBOR syntax error at byte {at}"),
            ciborium::de::Error::Semantic(Some(at), why) => format!("{why} (at byte {at})"),
            ciborium::de::Error::Semantic(None, why) => why,
            ciborium::de::Error::RecursionLimitExceeded => "it nests too deep".into(),
        })
    })?;
    let Item::Tag(SELF_DESCRIBE, tree) = item else {
        return shape("the file is not one item under tag 55799");
    };
    let mut tree = *tree;
    Strings::default().resolve(&mut tree, false, 0, budget)?;
    Ok(tree)
}

/// The bundle a file holds, whether it refers to shared parts (read from `parts`), and
/// the container's version.
fn decode(
    bytes: &[u8],
    parts: &dyn Fn(&Digest) -> Option<Vec<u8>>,
) -> Result<(Value, bool, Version), CompactError> {
    let mut budget = MAX_BUNDLE_BYTES;
    let tree = tagged_tree(bytes, &mut budget)?;
    let Item::Array(parts_of_file) = tree else {
        return shape("the tagged item is not an array");
    };
    let [format, mut bundle, Item::Array(records)] = <[Item; 3]>::try_from(parts_of_file)
        .map_err(|_| CompactError::Shape("the tagged array does not have 3 items".into()))?
    else {
        return shape("the third item (the nodes) is not an array");
    };
    let version = match format {
        Item::Text(f) if f == COMPACT_FORMAT => Version::V2,
        Item::Text(f) if f == COMPACT_FORMAT_V1 => Version::V1,
        _ => {
            return shape(format!(
                "the first item is neither `{COMPACT_FORMAT}` nor `{COMPACT_FORMAT_V1}`"
            ));
        }
    };
    // References to shared parts, where a store's bundle may hold one (§9.5; not in
    // version 1, where a reference is an item JSON has no counterpart for).
    let mut references = Vec::new();
    for path in SHARED.iter().filter(|_| version == Version::V2) {
        if let Some(at) = item_at(&mut bundle, path)
            && let Item::Tag(PART_REF, inner) = at
        {
            let Item::Bytes(d) = &**inner else {
                return shape("a shared part's reference does not hold a byte string");
            };
            let Ok(d) = <[u8; 32]>::try_from(d.as_slice()) else {
                return shape("a shared part's reference is not a 32-byte digest");
            };
            *at = Item::Null;
            references.push((path, Digest(d)));
        }
    }
    let Value::Object(mut top) = json_value(bundle, 0)? else {
        return shape("the second item (the bundle) is not a map");
    };
    for (path, digest) in &references {
        let bytes = parts(digest).ok_or_else(|| CompactError::MissingPart(digest.to_hex()))?;
        put_json(&mut top, path, read_part(&bytes, digest, &mut budget)?);
    }
    // The digests the file leaves to be recomputed: the prompt's first (the APM holds
    // it), then the APM's (the root node holds it), the rest after the nodes.
    let v2 = version == Version::V2;
    let prompt = Derived {
        prompt: prompt_digest(&top).filter(|_| v2),
        ..Derived::default()
    };
    if let Some(apm) = top.get_mut("apm") {
        prompt.fill(apm, &APM_DIGESTS);
    }
    let early = if v2 {
        Derived::before_nodes(&top)
    } else {
        Derived::default()
    };
    let mut defaults = Defaults::default();
    let mut nodes = Vec::with_capacity(records.len().min(1 << 16));
    for (i, record) in records.into_iter().enumerate() {
        let node = node_value(record, &mut defaults, &early).map_err(|e| match e {
            CompactError::Shape(why) => CompactError::Shape(format!("node {i}: {why}")),
            e => e,
        })?;
        let grown = node
            .get("agent")
            .and_then(Value::as_str)
            .map_or(0, str::len)
            + node
                .get("block_reason")
                .and_then(Value::as_str)
                .map_or(0, str::len)
            + 256;
        budget = budget.checked_sub(grown).ok_or(CompactError::TooLarge)?;
        nodes.push(node);
    }
    let derived = if v2 { early.with_nodes(&nodes) } else { early };
    for path in ENVELOPES {
        if let Some(mut env) = take_at(&mut top, path) {
            if let Some(statement) = env.get_mut("payload") {
                derived.fill(statement, &STATEMENT_DIGESTS);
            }
            if let Some(signatures) = env.get_mut("signatures") {
                derived.fill(signatures, &SIGNATURE_DIGESTS);
            }
            put_json(&mut top, path, unpack_envelope(env)?);
        }
    }
    if !top.contains_key("summary")
        && let Some(predicate) = statement_predicate(top.get("envelope"))
    {
        top.insert("summary".into(), predicate);
    }
    if let Some(Value::Object(att)) = top.get_mut("apm_attestation")
        && !att.contains_key("statement")
        && let Some(predicate) = statement_predicate(att.get("envelope"))
    {
        att.insert("statement".into(), predicate);
    }
    top.insert("nodes".into(), Value::Array(nodes));
    Ok((Value::Object(top), !references.is_empty(), version))
}

/// The item at `path` in a map of maps (text keys, strings resolved).
fn item_at<'a>(item: &'a mut Item, path: &[&str]) -> Option<&'a mut Item> {
    let Some((first, rest)) = path.split_first() else {
        return Some(item);
    };
    let Item::Map(entries) = item else {
        return None;
    };
    let (_, inner) = entries
        .iter_mut()
        .find(|(k, _)| matches!(k, Item::Text(t) if t == first))?;
    item_at(inner, rest)
}

fn put_json(top: &mut Map<String, Value>, path: &[&str], value: Value) {
    match path {
        [last] => {
            top.insert((*last).to_string(), value);
        }
        [first, rest @ ..] => {
            if let Some(Value::Object(inner)) = top.get_mut(*first) {
                put_json(inner, rest, value);
            }
        }
        [] => {}
    }
}

/// The inverse of [`pack_envelope`], on its generic JSON reading (bytes as hex).
fn unpack_envelope(env: Value) -> Result<Value, CompactError> {
    let Value::Object(mut env) = env else {
        return shape("a DSSE envelope is not a map");
    };
    let Some(statement) = env.remove("payload") else {
        return shape("a DSSE envelope has no payload");
    };
    env.insert(
        "payload".into(),
        Value::String(b64(&canon::canonical(&statement))),
    );
    env.entry("payloadType")
        .or_insert_with(|| Value::String(IN_TOTO.into()));
    if let Some(Value::Array(signatures)) = env.get_mut("signatures") {
        for s in signatures {
            let sig = s.get_mut("sig");
            match sig.map(|v| (v.as_str().and_then(|h| hex::decode(h).ok()), v)) {
                Some((Some(raw), v)) => *v = Value::String(b64(&raw)),
                _ => return shape("a DSSE signature has no `sig` bytes"),
            }
        }
    }
    Ok(Value::Object(env))
}

fn node_value(
    record: Item,
    defaults: &mut Defaults,
    derived: &Derived,
) -> Result<Value, CompactError> {
    let Item::Array(parts) = record else {
        return shape("not an array");
    };
    if !(2..=3).contains(&parts.len()) {
        return shape("not an array of 2 or 3 items");
    }
    let mut parts = parts.into_iter();
    let code = match parts.next() {
        Some(Item::Integer(c)) => u8::try_from(c).ok(),
        _ => None,
    };
    let Some(kind) = code.and_then(|c| NodeKind::ALL.into_iter().find(|k| k.code() == c)) else {
        return shape("no known kind code");
    };
    let mut payload = json_value(parts.next().unwrap_or(Item::Null), 1)?;
    if kind == NodeKind::Root {
        derived.fill(&mut payload, &ROOT_DIGESTS);
    }
    unpack_payload(kind, &mut payload);
    let extras = match parts.next().map(|e| json_value(e, 1)).transpose()? {
        None => Map::new(),
        Some(Value::Object(e)) => e,
        Some(_) => return shape("its third item (the members it states) is not a map"),
    };
    let mut node = defaults.resolve(kind, &payload, |name, implied| {
        extras.get(name).cloned().or(implied)
    });
    for (name, value) in extras {
        node.entry(name).or_insert(value);
    }
    node.insert("kind".into(), Value::String(kind.as_str().into()));
    node.insert("payload".into(), payload);
    Ok(Value::Object(node))
}

/// An item (strings resolved) as the JSON value it encodes.
fn json_value(item: Item, depth: usize) -> Result<Value, CompactError> {
    if depth > MAX_DEPTH {
        return shape(format!("it nests deeper than {MAX_DEPTH}"));
    }
    Ok(match item {
        Item::Null => Value::Null,
        Item::Bool(b) => Value::Bool(b),
        Item::Integer(i) => {
            let i = i128::from(i);
            if let Ok(u) = u64::try_from(i) {
                Value::from(u)
            } else if let Ok(s) = i64::try_from(i) {
                Value::from(s)
            } else {
                return shape("an integer beyond 64 bits");
            }
        }
        Item::Float(f) if integral(f).is_some() => {
            return shape("a whole number written as a float");
        }
        Item::Float(f) => match Number::from_f64(f) {
            Some(n) => Value::Number(n),
            None => return shape("a float that is not finite"),
        },
        Item::Text(t) => Value::String(t),
        Item::Bytes(b) => Value::String(hex::encode(b)),
        Item::Array(a) => Value::Array(
            a.into_iter()
                .map(|v| json_value(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Item::Map(entries) => {
            let mut o = Map::new();
            for (k, v) in entries {
                let Item::Text(k) = k else {
                    return shape("a map key is not text");
                };
                if o.insert(k, json_value(v, depth + 1)?).is_some() {
                    return shape("a map repeats a key");
                }
            }
            Value::Object(o)
        }
        _ => return shape("an item JSON has no counterpart for (a tag or simple value)"),
    })
}

// ---- strings written once -----------------------------------------------------------

/// The preset's texts (§9.2), by number and by text.
struct Preset {
    list: Vec<&'static str>,
    number: HashMap<&'static str, u64>,
}

fn preset() -> &'static Preset {
    static P: OnceLock<Preset> = OnceLock::new();
    P.get_or_init(|| {
        let list: Vec<&'static str> = PRESET.lines().collect();
        let number = list
            .iter()
            .enumerate()
            .map(|(n, t)| (*t, n as u64))
            .collect();
        Preset { list, number }
    })
}

/// The strings numbered so far (§9.2): the preset's texts, then every text and byte
/// string long enough, in the order written (numbered from the preset's length on).
#[derive(Default)]
struct Strings {
    texts: HashMap<String, u64>,
    bytes: HashMap<Vec<u8>, u64>,
    /// The strings numbered after the preset's, in order.
    list: Vec<Item>,
}

/// Bytes a CBOR head takes for the argument `n`.
fn head_len(n: u64) -> usize {
    match n {
        0..=23 => 1,
        24..=0xff => 2,
        0x100..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// Where an item stands in the numbering of strings.
enum Numbering {
    /// Numbered already, with this number.
    Numbered(u64),
    /// A string long enough, not numbered yet: it is numbered where it is written.
    New,
    /// Never numbered (not a string, or too short).
    Never,
}

impl Strings {
    /// Where `item` stands in the numbering so far.
    fn numbering(&self, item: &Item) -> Numbering {
        let found = match item {
            Item::Text(t) if t.len() >= MIN_SHARED_TEXT => preset()
                .number
                .get(t.as_str())
                .or_else(|| self.texts.get(t.as_str())),
            Item::Bytes(b) if b.len() >= MIN_SHARED_BYTES => self.bytes.get(b.as_slice()),
            _ => return Numbering::Never,
        };
        found.map_or(Numbering::New, |n| Numbering::Numbered(*n))
    }

    /// Numbers `item` (a string not numbered yet).
    fn number(&mut self, item: &Item) {
        let n = (preset().list.len() + self.list.len()) as u64;
        match item {
            Item::Text(t) => self.texts.insert(t.clone(), n),
            Item::Bytes(b) => self.bytes.insert(b.clone(), n),
            _ => return,
        };
        self.list.push(item.clone());
    }

    /// Replaces every string numbered before by a reference to it (in a key, `key`,
    /// an unsigned integer; elsewhere tag 25 on one) where the reference is shorter
    /// than the string written out; numbers the strings met for the first time.
    fn share(&mut self, item: &mut Item, key: bool) {
        match item {
            Item::Text(_) | Item::Bytes(_) => match self.numbering(item) {
                Numbering::Numbered(n) => {
                    let len = match item {
                        Item::Text(t) => t.len(),
                        Item::Bytes(b) => b.len(),
                        _ => 0,
                    };
                    let written = head_len(len as u64) + len;
                    if key && head_len(n) < written {
                        *item = Item::Integer(n.into());
                    } else if !key && 2 + head_len(n) < written {
                        *item = Item::Tag(STRING_REF, Box::new(Item::Integer(n.into())));
                    }
                }
                Numbering::Never => {}
                Numbering::New => self.number(item),
            },
            Item::Array(a) => a.iter_mut().for_each(|v| self.share(v, false)),
            Item::Map(entries) => {
                for (k, v) in entries {
                    self.share(k, true);
                    self.share(v, false);
                }
            }
            Item::Tag(_, inner) => self.share(inner, false),
            _ => {}
        }
    }

    /// The inverse of [`Strings::share`]; each string a reference brings back counts
    /// against `budget`.
    fn resolve(
        &mut self,
        item: &mut Item,
        key: bool,
        depth: usize,
        budget: &mut usize,
    ) -> Result<(), CompactError> {
        if depth > MAX_DEPTH {
            return shape(format!("it nests deeper than {MAX_DEPTH}"));
        }
        let reference = match item {
            Item::Text(_) | Item::Bytes(_) => {
                if matches!(self.numbering(item), Numbering::New) {
                    self.number(item);
                }
                None
            }
            Item::Integer(n) if key => Some(*n),
            Item::Tag(STRING_REF, inner) => match **inner {
                Item::Integer(n) => Some(n),
                _ => return shape("tag 25 does not hold an unsigned integer"),
            },
            Item::Array(a) => {
                for v in a {
                    self.resolve(v, false, depth + 1, budget)?;
                }
                None
            }
            Item::Map(entries) => {
                for (k, v) in entries {
                    self.resolve(k, true, depth + 1, budget)?;
                    self.resolve(v, false, depth + 1, budget)?;
                }
                None
            }
            Item::Tag(PART_REF, inner) => {
                self.resolve(inner, false, depth + 1, budget)?;
                None
            }
            Item::Tag(_, _) => return shape("a tag other than 25 or a shared part's"),
            _ => None,
        };
        if let Some(n) = reference {
            let string = usize::try_from(n).ok().and_then(|n| {
                let preset = &preset().list;
                match n.checked_sub(preset.len()) {
                    None => preset.get(n).map(|t| Item::Text((*t).into())),
                    Some(i) => self.list.get(i).cloned(),
                }
            });
            let string = string
                .ok_or_else(|| CompactError::Shape("a reference to no earlier string".into()))?;
            let len = match &string {
                Item::Text(t) => t.len(),
                Item::Bytes(b) => b.len(),
                _ => 0,
            };
            *budget = budget.checked_sub(len).ok_or(CompactError::TooLarge)?;
            *item = string;
        }
        Ok(())
    }
}

// ---- payloads: what a payload repeats of itself -------------------------------------

/// A payload with what it repeats of itself left out: a `tool_call`'s action hashes
/// (when they are the hashes of what it carries), a `check` detail's `guard` (when it
/// is the check's).
fn pack_payload(kind: NodeKind, payload: &Value) -> Value {
    let mut p = payload.clone();
    match kind {
        NodeKind::ToolCall => {
            if let Some(h) = call_hash(p.get("actual"), false)
                && p.get("actual_hash").and_then(Value::as_str) == Some(h.as_str())
                && let Some(o) = p.as_object_mut()
            {
                o.remove("actual_hash");
            }
            let actual = p.get("actual").cloned();
            if let Some(expected) = p.get_mut("expected")
                && let Some(h) = call_hash(Some(expected), true)
                && expected.get("hash").and_then(Value::as_str) == Some(h.as_str())
                && let Some(o) = expected.as_object_mut()
            {
                o.remove("hash");
                // The expected call is the proposed one: `tool` and `params` once.
                if call_hash(actual.as_ref(), false).is_some()
                    && let Some(actual) = &actual
                    && o.get("tool") == actual.get("tool")
                    && o.get("params") == actual.get("params")
                {
                    o.remove("tool");
                    o.remove("params");
                }
            }
        }
        NodeKind::Check => {
            let guard = p.get("guard").cloned();
            if let Some(detail) = p.get_mut("detail").and_then(Value::as_object_mut)
                && guard.is_some()
                && detail.get("guard") == guard.as_ref()
            {
                detail.remove("guard");
            }
        }
        _ => {}
    }
    p
}

/// The inverse of [`pack_payload`].
fn unpack_payload(kind: NodeKind, payload: &mut Value) {
    match kind {
        NodeKind::ToolCall => {
            if payload.get("actual_hash").is_none()
                && let Some(h) = call_hash(payload.get("actual"), false)
                && let Some(o) = payload.as_object_mut()
            {
                o.insert("actual_hash".into(), Value::String(h));
            }
            let actual = payload.get("actual").cloned();
            if let Some(expected) = payload.get_mut("expected").and_then(Value::as_object_mut)
                && !expected.contains_key("hash")
            {
                if !expected.contains_key("tool")
                    && !expected.contains_key("params")
                    && call_hash(actual.as_ref(), false).is_some()
                    && let Some(actual) = &actual
                {
                    for name in ["params", "tool"] {
                        if let Some(v) = actual.get(name) {
                            expected.insert(name.into(), v.clone());
                        }
                    }
                }
                let full = Value::Object(expected.clone());
                if let Some(h) = call_hash(Some(&full), true) {
                    expected.insert("hash".into(), Value::String(h));
                }
            }
        }
        NodeKind::Check => {
            let guard = payload.get("guard").cloned();
            if let Some(detail) = payload.get_mut("detail").and_then(Value::as_object_mut)
                && let Some(guard @ Value::String(_)) = guard
                && !detail.contains_key("guard")
            {
                detail.insert("guard".into(), guard);
            }
        }
        _ => {}
    }
}

/// The hash of a call `{"tool", "params"}` (§1): `knox/action`, or for an expected
/// call with `constraints` (`expected` true), `knox/expected` over the three.
fn call_hash(call: Option<&Value>, expected: bool) -> Option<String> {
    let call = call?.as_object()?;
    let tool = call.get("tool")?.as_str()?;
    let params = call.get("params")?.as_object()?;
    let digest = match call.get("constraints").filter(|_| expected) {
        None => hash_call(tool, params),
        Some(c) => {
            let body = serde_json::json!({"tool": tool, "params": params, "constraints": c});
            Digest::tagged(tag::EXPECTED, &[&canon::canonical(&body)])
        }
    };
    Some(digest.to_hex())
}

// ---- what the nodes before a node imply ------------------------------------------

/// The node members a compact file may leave out, in the order they are resolved:
/// each one's implied value may depend on those before it.
const IMPLIED: [&str; 6] = [
    "seq",
    "agent",
    "parent",
    "block_reason",
    "allowed",
    "measurement",
];

/// A node already resolved, as far as later nodes' implied members need it.
struct Seen {
    agent: Option<String>,
    kind: NodeKind,
    parent: Option<u64>,
    block_reason: Value,
}

/// What the nodes written so far imply of the next one (§9.3): its `seq`, `agent`,
/// `parent`, `block_reason`, `allowed` and `measurement`, each of which a compact file
/// writes only when the node's own differs.
#[derive(Default)]
struct Defaults {
    nodes: Vec<Seen>,
    /// The last `tool_call`: its seq and agent.
    last_call: Option<(u64, Option<String>)>,
    /// The first failed check since the last `tool_call`.
    first_failed: Option<u64>,
    /// Per agent, its last `tool_output`, `blocked`, `interrupt` or `agent_branch`.
    cursor: HashMap<String, u64>,
    /// Allowed calls without an output or `unanswered` node yet.
    awaiting: BTreeSet<u64>,
}

impl Defaults {
    /// Resolves the implied members of the next node, of `kind` with `payload`, in
    /// [`IMPLIED`] order: `pick(name, implied)` gives the node's own value of the
    /// member (`None`: it has none), knowing what the nodes before imply. Returns the
    /// node's members and takes the node into account.
    fn resolve(
        &mut self,
        kind: NodeKind,
        payload: &Value,
        mut pick: impl FnMut(&str, Option<Value>) -> Option<Value>,
    ) -> Map<String, Value> {
        let mut m = Map::new();
        let mut set = |m: &mut Map<String, Value>, name: &str, implied: Option<Value>| {
            let v = pick(name, implied);
            if let Some(v) = &v {
                m.insert(name.to_string(), v.clone());
            }
            v
        };
        let seq = self.nodes.len() as u64;
        set(&mut m, "seq", Some(seq.into()));
        let calls_agent = self.last_call.as_ref().and_then(|(_, a)| a.clone());
        let (agent, parent) = if kind == NodeKind::ToolCall {
            let agent = set(&mut m, "agent", calls_agent.map(Value::String));
            let implied = agent
                .as_ref()
                .and_then(Value::as_str)
                .map(|a| Value::from(self.cursor.get(a).copied().unwrap_or(0)));
            let parent = set(&mut m, "parent", implied);
            (agent, parent)
        } else {
            let last_call = self.last_call.as_ref().map(|(s, _)| *s);
            let implied = match kind {
                NodeKind::Root => None,
                NodeKind::Check => last_call,
                NodeKind::Blocked | NodeKind::Interrupt => self.first_failed.or(last_call),
                NodeKind::ToolOutput | NodeKind::Unanswered => self.awaiting.first().copied(),
                _ => Some(0),
            };
            let implied = match (kind, implied) {
                (NodeKind::Root, _) => Some(Value::Null),
                (_, p) => p.map(Value::from),
            };
            let parent = set(&mut m, "parent", implied);
            let implied = match &parent {
                Some(Value::Null) => Some(Value::String("monitor".into())),
                Some(p) => p
                    .as_u64()
                    .and_then(|p| self.nodes.get(p as usize))
                    .and_then(|n| n.agent.clone())
                    .map(Value::String),
                None => None,
            };
            (set(&mut m, "agent", implied), parent)
        };
        let parent = parent.as_ref().and_then(Value::as_u64);
        let implied = match kind {
            NodeKind::Blocked | NodeKind::Interrupt => self.call_reason(parent),
            _ => Value::Null,
        };
        let reason = set(&mut m, "block_reason", Some(implied));
        let implied = match kind {
            NodeKind::Check => payload
                .get("passed")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            NodeKind::ToolCall => reason.as_ref().is_some_and(Value::is_null),
            NodeKind::Blocked | NodeKind::Interrupt => false,
            _ => true,
        };
        let allowed = set(&mut m, "allowed", Some(implied.into()));
        let implied = measurement(kind, payload, &m).map(|d| Value::String(d.to_hex()));
        set(&mut m, "measurement", implied);
        self.commit(
            kind,
            payload,
            Seen {
                agent: agent.and_then(|a| a.as_str().map(String::from)),
                kind,
                parent,
                block_reason: reason.unwrap_or(Value::Null),
            },
            allowed == Some(Value::Bool(true)),
        );
        m
    }

    /// The block reason of the `tool_call` at `parent`, or just above it when `parent`
    /// is one of its checks (a blocked node hangs under the call's first failed check).
    fn call_reason(&self, parent: Option<u64>) -> Value {
        let node = |p: Option<u64>| p.and_then(|p| self.nodes.get(p as usize));
        let call = match node(parent) {
            Some(n) if n.kind == NodeKind::Check => node(n.parent),
            n => n,
        };
        match call {
            Some(n) if n.kind == NodeKind::ToolCall => n.block_reason.clone(),
            _ => Value::Null,
        }
    }

    fn commit(&mut self, kind: NodeKind, payload: &Value, seen: Seen, allowed: bool) {
        let seq = self.nodes.len() as u64;
        match kind {
            NodeKind::ToolCall => {
                self.last_call = Some((seq, seen.agent.clone()));
                self.first_failed = None;
                if allowed {
                    self.awaiting.insert(seq);
                }
            }
            NodeKind::Check => {
                let passed = payload.get("passed").and_then(Value::as_bool);
                if passed == Some(false) && self.first_failed.is_none() {
                    self.first_failed = Some(seq);
                }
            }
            NodeKind::ToolOutput | NodeKind::Unanswered => {
                if let Some(p) = seen.parent {
                    self.awaiting.remove(&p);
                }
            }
            _ => {}
        }
        if matches!(
            kind,
            NodeKind::ToolOutput | NodeKind::Blocked | NodeKind::Interrupt | NodeKind::AgentBranch
        ) && let Some(agent) = &seen.agent
        {
            self.cursor.insert(agent.clone(), seq);
        }
        self.nodes.push(seen);
    }
}

/// `m_i` (§4) of a node whose members are `m` (with its `kind` and `payload`), when
/// it has every measured member.
fn measurement(kind: NodeKind, payload: &Value, m: &Map<String, Value>) -> Option<Digest> {
    // Canonical JSON of the measured body, its members in order, written in place.
    let mut body = Vec::with_capacity(256);
    let member = |name: &str, value: &Value, body: &mut Vec<u8>| {
        body.push(if body.is_empty() { b'{' } else { b',' });
        canon::write_string(name, body);
        body.push(b':');
        canon::write_value(value, body);
    };
    for name in ["agent", "allowed", "block_reason"] {
        member(name, m.get(name)?, &mut body);
    }
    member("kind", &Value::String(kind.as_str().into()), &mut body);
    member("parent", m.get("parent")?, &mut body);
    member("payload", payload, &mut body);
    member("seq", m.get("seq")?, &mut body);
    body.push(b'}');
    Some(Digest::tagged(tag::NODE, &[&body]))
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "tests"
)]
mod tests {
    use super::*;

    /// Bundles the verifier's tests keep (every topology, versions 1 to 5).
    fn fixtures() -> Vec<(&'static str, Value)> {
        [
            (
                "st-sa",
                &include_bytes!("../../verify/tests/fixtures/topologies/st-sa.json")[..],
            ),
            (
                "mt-ma-4-2",
                include_bytes!("../../verify/tests/fixtures/topologies/mt-ma-4-2.json"),
            ),
            (
                "mt-sa-int-3",
                include_bytes!("../../verify/tests/fixtures/topologies/mt-sa-int-3.json"),
            ),
            (
                "v1",
                include_bytes!("../../verify/tests/fixtures/evidence-v1/bundle.json"),
            ),
            (
                "run-3",
                include_bytes!("../../verify/tests/fixtures/chain/run-3.json"),
            ),
        ]
        .into_iter()
        .map(|(name, bytes)| (name, serde_json::from_slice(bytes).unwrap()))
        .collect()
    }

    /// Parts as a store holds them, by digest.
    fn store(parts: &[Part]) -> impl Fn(&Digest) -> Option<Vec<u8>> + '_ {
        |d| {
            parts
                .iter()
                .find(|p| p.digest == *d)
                .map(|p| p.bytes.clone())
        }
    }

    #[test]
    fn a_bundle_of_a_store_holds_its_guards_by_digest_and_expands_with_them_only() {
        for (name, bundle) in fixtures() {
            let alone = compact(&bundle).unwrap();
            let (c, parts) = compact_in_store(&bundle).unwrap();
            // One part, the APM's guards, named by the digest of their canonical JSON.
            let [part] = &parts[..] else {
                panic!("{name}: {} parts", parts.len())
            };
            let guards = &bundle["apm"]["guards"];
            assert_eq!(
                part.digest,
                Digest::tagged("knox/part", &[&canon::canonical(guards)]),
                "{name}"
            );
            assert!(
                c.len() + 300 < alone.len(),
                "{name}: {} of {}",
                c.len(),
                alone.len()
            );
            assert_eq!(expand_in(&c, &store(&parts)).unwrap(), bundle, "{name}");
            assert_eq!(
                expand_to_json_in(&c, &store(&parts)).unwrap(),
                canon::canonical(&bundle),
                "{name}"
            );
            // Without its store, the file names the part it needs.
            let missing = expand(&c).unwrap_err();
            assert!(
                matches!(&missing, CompactError::MissingPart(d) if *d == part.digest.to_hex()),
                "{name}: {missing}"
            );
            // A self-contained file needs no store, and a store's file is another file.
            assert_eq!(expand_in(&alone, &store(&parts)).unwrap(), bundle, "{name}");
            assert_ne!(alone, c, "{name}");
        }
    }

    #[test]
    fn a_version_1_file_still_expands_as_it_was_written() {
        // Written by `knox run --evidence compact` before version 2 (stop 54).
        let v1 = include_bytes!("../../verify/tests/fixtures/compact-v1/st-sa.cbor");
        let bundle = expand(v1).unwrap();
        assert_eq!(bundle["format"], "knox-evidence/v5");
        // Its digests are written out, and reading fills in none.
        let head = bundle["summary"]["chain_head"].as_str().unwrap();
        let head = hex::decode(head).unwrap();
        assert!(v1.windows(32).any(|w| w == head.as_slice()));
        // The same bundle written now: version 2, smaller, the same expansion.
        let v2 = compact(&bundle).unwrap();
        assert!(v2.len() < v1.len(), "{} of {}", v2.len(), v1.len());
        assert_eq!(expand(&v2).unwrap(), bundle);
        // A version 1 file holds no part: a reference in one is not read.
        let mut tree = tagged_tree(v1, &mut MAX_BUNDLE_BYTES.clone()).unwrap();
        let Item::Array(items) = &mut tree else {
            panic!("not an array")
        };
        let guards = item_at(&mut items[1], &["apm", "guards"]).unwrap();
        *guards = Item::Tag(PART_REF, Box::new(Item::Bytes(vec![7; 32])));
        let bytes = written(tree).unwrap();
        let parts = |_: &Digest| Some(v2.clone());
        assert!(matches!(
            expand_in(&bytes, &parts),
            Err(CompactError::Shape(_))
        ));
    }

    #[test]
    fn the_digests_a_reader_recomputes_are_not_in_the_file() {
        for (name, bundle) in fixtures().into_iter().filter(|(n, _)| *n != "v1") {
            let c = compact(&bundle).unwrap();
            let summary = &bundle["summary"];
            let key = hex::decode(bundle["key"]["public_key"].as_str().unwrap()).unwrap();
            let digests = [
                (
                    "chain head",
                    summary["chain_head"].as_str().unwrap().to_owned(),
                ),
                (
                    "structure root",
                    summary["structure_root"].as_str().unwrap().to_owned(),
                ),
                ("APM hash", summary["apm_hash"].as_str().unwrap().to_owned()),
                ("key id", Digest::tagged(tag::KEY, &[&key]).to_hex()),
                (
                    "platform",
                    Digest::tagged(tag::PLATFORM, &[&canon::canonical(&bundle["platform"])])
                        .to_hex(),
                ),
            ];
            for (what, hex) in digests {
                let bytes = hex::decode(&hex).unwrap();
                assert!(
                    !c.windows(32).any(|w| w == bytes.as_slice()),
                    "{name}: the {what} is written in the file"
                );
            }
        }
    }

    #[test]
    fn a_part_is_read_only_under_its_own_name_and_in_its_one_encoding() {
        let (_, bundle) = &fixtures()[0];
        let (c, parts) = compact_in_store(bundle).unwrap();
        let name = parts[0].digest;
        // Another toolkit's guards under this part's name: refused, not expanded.
        let mut other = bundle.clone();
        other["apm"]["guards"]["closed"] = Value::Bool(true);
        let (_, others) = compact_in_store(&other).unwrap();
        assert_ne!(others[0].digest, name);
        let swapped = |d: &Digest| (*d == name).then(|| others[0].bytes.clone());
        let e = expand_in(&c, &swapped).unwrap_err();
        assert!(
            matches!(&e, CompactError::BadPart(d, why) if *d == name.to_hex() && why.contains("not this one")),
            "{e}"
        );
        // The part's own bytes with one appended: not its one encoding.
        let mut longer = parts[0].bytes.clone();
        longer.push(0);
        let e = expand_in(&c, &|_| Some(longer.clone())).unwrap_err();
        assert!(matches!(&e, CompactError::BadPart(..)), "{e}");
        // A part that is not a part file at all, or a bundle file in its place.
        for junk in [b"{}".to_vec(), c.clone()] {
            let e = expand_in(&c, &|_| Some(junk.clone())).unwrap_err();
            assert!(matches!(&e, CompactError::BadPart(..)), "{e}");
        }
        // A reference anywhere but where a store's bundle may hold one is not read.
        let mut tree: Item = ciborium::from_reader(&parts[0].bytes[..]).unwrap();
        if let Item::Tag(_, inner) = &mut tree
            && let Item::Array(items) = &mut **inner
        {
            items[1] = Item::Tag(PART_REF, Box::new(Item::Bytes(name.0.to_vec())));
        }
        let mut bytes = Vec::new();
        ciborium::into_writer(&tree, &mut bytes).unwrap();
        let e = expand_in(&c, &|_| Some(bytes.clone())).unwrap_err();
        assert!(matches!(&e, CompactError::BadPart(..)), "{e}");
    }

    #[test]
    fn every_bundle_expands_back_to_itself_in_a_fraction_of_the_bytes() {
        for (name, bundle) in fixtures() {
            let c = compact(&bundle).unwrap();
            assert!(is_compact(&c), "{name}");
            assert_eq!(expand(&c).unwrap(), bundle, "{name}");
            let json = serde_json::to_vec(&bundle).unwrap();
            assert!(
                c.len() * 2 < json.len(),
                "{name}: {} of {}",
                c.len(),
                json.len()
            );
            // Every measurement, seq, allowed flag and blocked node's reason is implied.
            let Item::Tag(_, tree) = ciborium::from_reader::<Item, _>(&c[..]).unwrap() else {
                panic!("{name}: not tagged");
            };
            let mut tree = *tree;
            let mut budget = MAX_BUNDLE_BYTES;
            Strings::default()
                .resolve(&mut tree, false, 0, &mut budget)
                .unwrap();
            let Item::Array(parts) = tree else {
                panic!("{name}: not an array")
            };
            let Item::Array(records) = &parts[2] else {
                panic!("{name}: no nodes")
            };
            for record in records {
                let Item::Array(record) = record else {
                    panic!("{name}: a record is not an array")
                };
                if let Some(Item::Map(extras)) = record.get(2) {
                    for (k, _) in extras {
                        let Item::Text(k) = k else { panic!() };
                        assert!(
                            matches!(k.as_str(), "agent" | "block_reason" | "parent"),
                            "{name}: a record states `{k}`"
                        );
                    }
                }
            }
            // What is written expands to canonical JSON of the same value.
            let written = expand_to_json(&c).unwrap();
            assert_eq!(serde_json::from_slice::<Value>(&written).unwrap(), bundle);
        }
    }

    #[test]
    fn what_a_node_implies_is_left_out_and_what_it_does_not_is_kept() {
        let (_, mut bundle) = fixtures().remove(0);
        let plain = compact(&bundle).unwrap();
        // A node whose parent is not the implied one (a forged graph) still compacts,
        // now stating its parent, and expands to exactly what it was.
        let nodes = bundle["nodes"].as_array_mut().unwrap();
        let last = nodes.len() - 1;
        nodes[last]["parent"] = Value::from(1u64);
        nodes[last]["measurement"] = Value::String("ab".repeat(32));
        let forged = compact(&bundle).unwrap();
        assert!(forged.len() > plain.len());
        assert_eq!(expand(&forged).unwrap(), bundle);
        // A node without a member the format requires cannot be compacted (it would
        // come back with the implied one).
        bundle["nodes"][last]
            .as_object_mut()
            .unwrap()
            .remove("block_reason");
        let err = compact(&bundle).unwrap_err();
        assert!(matches!(err, CompactError::Lossy(_)), "{err}");
    }

    #[test]
    fn only_the_one_encoding_is_read() {
        let (_, bundle) = fixtures().remove(1);
        let c = compact(&bundle).unwrap();
        // A byte after the item.
        let trailing = [c.as_slice(), &[0xf6]].concat();
        assert!(matches!(
            expand(&trailing),
            Err(CompactError::NotDeterministic(_))
        ));
        // The top array's length (3) in a longer form than needed: `98 03`, not `83`.
        assert_eq!(c[3], 0x83);
        let longer = [&c[..3], &[0x98, 0x03], &c[4..]].concat();
        assert!(matches!(
            expand(&longer),
            Err(CompactError::NotDeterministic(3))
        ));
        let mut cut = c.clone();
        cut.truncate(c.len() - 1);
        assert!(matches!(expand(&cut), Err(CompactError::Shape(_))));
        assert!(matches!(expand(b"{}"), Err(CompactError::Shape(_))));
        assert!(matches!(expand(&MAGIC), Err(CompactError::Shape(_))));
    }

    /// CBOR for a hand-made tree under the self-describing tag.
    fn file(tree: Item) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::into_writer(&Item::Tag(SELF_DESCRIBE, Box::new(tree)), &mut out).unwrap();
        out
    }

    #[test]
    fn hostile_files_are_refused_without_panicking_or_growing() {
        let t = |s: &str| Item::Text(s.into());
        let r = |n: u64| Item::Tag(STRING_REF, Box::new(Item::Integer(n.into())));
        // The preset's texts come first (the format name of version 2 is not one of
        // them: it is numbered first after them).
        let base = PRESET.lines().count() as u64;
        // A 1 MiB text (the third numbered after the preset's: the format name, the
        // key, then it) referred to 300 times: 300 MiB expanded.
        let big = "x".repeat(1 << 20);
        let mut refs = vec![t(&big)];
        refs.extend((0..300).map(|_| r(base + 2)));
        let bomb = file(Item::Array(vec![
            t(COMPACT_FORMAT),
            Item::Map(vec![(t("bomb"), Item::Array(refs))]),
            Item::Array(vec![]),
        ]));
        assert!(matches!(expand(&bomb), Err(CompactError::TooLarge)));
        // A reference to a text not yet written.
        let dangling = file(Item::Array(vec![
            t(COMPACT_FORMAT),
            r(7),
            Item::Array(vec![]),
        ]));
        assert!(matches!(expand(&dangling), Err(CompactError::Shape(_))));
        // Deep nesting, a huge declared length, a map with the same key twice.
        let mut deep = Item::Null;
        for _ in 0..200 {
            deep = Item::Array(vec![deep]);
        }
        let deep = file(Item::Array(vec![
            t(COMPACT_FORMAT),
            deep,
            Item::Array(vec![]),
        ]));
        assert!(expand(&deep).is_err());
        let huge = [
            &MAGIC[..],
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ]
        .concat();
        assert!(matches!(expand(&huge), Err(CompactError::Shape(_))));
        let twice = file(Item::Array(vec![
            t(COMPACT_FORMAT),
            Item::Map(vec![(t("ab"), Item::Null), (t("ab"), Item::Null)]),
            Item::Array(vec![]),
        ]));
        assert!(matches!(expand(&twice), Err(CompactError::Shape(_))));
        // A whole number written as a float (its one encoding is the integer).
        let whole = file(Item::Array(vec![
            t(COMPACT_FORMAT),
            Item::Map(vec![(t("n"), Item::Float(2.0))]),
            Item::Array(vec![]),
        ]));
        assert!(matches!(expand(&whole), Err(CompactError::Shape(_))));
        // Nodes of every kind code and none, with nothing implied that can be.
        for code in 0..13u64 {
            let node = Item::Array(vec![Item::Integer(code.into()), Item::Null]);
            let f = file(Item::Array(vec![
                t(COMPACT_FORMAT),
                Item::Map(vec![]),
                Item::Array(vec![node.clone(), node]),
            ]));
            let _ = expand(&f);
        }
    }
}
