#!/usr/bin/env python3
"""An independent reader of Knox's compact bundles (`knox-compact/v2`, and `/v1`), written from
docs/evidence-format.md (§1, §2, §4, §6 and §9) and nothing else of Knox: it expands a
compact file into the bundle it holds (a store's file with the shared parts in `parts/`
beside it, §9.5) and checks that bundle's integrity — every
measurement, the chain, the structure root, the signed summary and the APM's
attestation (Ed25519 over DSSE's PAE). It does not replay the guards (§5).

Usage: compact_verify.py FILE ...          one JSON line per file: {"file", "ok", "reason", "nodes"}
       compact_verify.py --expand FILE     the bundle it holds, as canonical JSON

Needs Python 3 and `cryptography` (Ed25519).
"""

import base64
import hashlib
import json
import math
import os
import struct
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

FORMATS = ("knox-compact/v1", "knox-compact/v2")  # §9.6: v1 recomputes no digest, holds no part
PART_FORMAT = "knox-compact-part/v1"
PART_REF = 1802399608
IN_TOTO = "application/vnd.in-toto+json"
KINDS = ["root", "agent_step", "agent_branch", "tool_call", "check", "tool_output",
         "blocked", "interrupt", "proof_of_inference", "heard", "unanswered"]


class Bad(Exception):
    pass


# ---- CBOR (RFC 8949), definite lengths only ------------------------------------------

class Tag:
    def __init__(self, tag, value):
        self.tag, self.value = tag, value


class CMap:
    """A CBOR map, its entries in the order written."""

    def __init__(self, entries):
        self.entries = entries


def cbor_decode(data):
    pos = 0

    def need(n):
        nonlocal pos
        if pos + n > len(data):
            raise Bad("truncated CBOR")
        b = data[pos:pos + n]
        pos += n
        return b

    def arg(info):
        if info < 24:
            return info
        if info in (24, 25, 26, 27):
            n = 1 << (info - 24)
            v = int.from_bytes(need(n), "big")
            if v < (24 if n == 1 else 1 << (4 * n)):  # preferred (shortest) form only
                raise Bad("an integer not in its shortest form")
            return v
        raise Bad("an indefinite length or reserved value")

    def item(depth):
        if depth > 128:
            raise Bad("nested too deep")
        ib = need(1)[0]
        major, info = ib >> 5, ib & 31
        if major == 7:
            if info == 20:
                return False
            if info == 21:
                return True
            if info == 22:
                return None
            if info in (25, 26, 27):
                raw = need(1 << (info - 24))
                f = struct.unpack({25: ">e", 26: ">f", 27: ">d"}[info], raw)[0]
                if info > 25 and shortest_float(f) < len(raw):
                    raise Bad("a float not in its shortest form")
                if math.isfinite(f) and f.is_integer() and -2**63 <= f < 2**64:
                    raise Bad("a whole number written as a float")
                return f
            raise Bad("an unexpected simple value")
        v = arg(info)
        if major == 0:
            return v
        if major == 1:
            return -1 - v
        if major == 2:
            return bytes(need(v))
        if major == 3:
            return need(v).decode("utf-8")
        if major == 4:
            return [item(depth + 1) for _ in range(v)]
        if major == 5:
            return CMap([(item(depth + 1), item(depth + 1)) for _ in range(v)])
        return Tag(v, item(depth + 1))

    out = item(0)
    if pos != len(data):
        raise Bad("bytes after the item")
    return out


def shortest_float(f):
    for fmt, n in ((">e", 2), (">f", 4)):
        try:
            if struct.unpack(fmt, struct.pack(fmt, f))[0] == f:
                return n
        except (OverflowError, struct.error):
            pass
    return 8


# ---- §9.2: strings written once -------------------------------------------------------

PRESET = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "..", "..", "..", "types", "src", "compact-texts.txt")


def resolve(tree):
    with open(PRESET, encoding="utf-8") as f:
        strings = f.read().split("\n")[:-1]
    numbered = set(strings)

    def number(x):
        long_enough = len(x.encode()) >= 3 if isinstance(x, str) else len(x) >= 16
        if long_enough and x not in numbered:
            numbered.add(x)
            strings.append(x)

    def ref(n):
        if not 0 <= n < len(strings):
            raise Bad("a reference to no earlier string")
        return strings[n]

    def walk(x, key):
        if isinstance(x, (str, bytes)):
            number(x)
            return x
        if key and isinstance(x, int) and not isinstance(x, bool):
            return ref(x)
        if isinstance(x, Tag) and x.tag == PART_REF:
            return Tag(PART_REF, walk(x.value, False))
        if isinstance(x, Tag):
            if x.tag != 25 or not isinstance(x.value, int) or isinstance(x.value, bool):
                raise Bad("a tag other than 25")
            return ref(x.value)
        if isinstance(x, list):
            return [walk(v, False) for v in x]
        if isinstance(x, CMap):
            out = []
            for k, v in x.entries:
                k = walk(k, True)
                out.append((k, walk(v, False)))
            return CMap(out)
        return x

    return walk(tree, False)


# ---- §9.1: items as JSON -------------------------------------------------------------

def to_json(x):
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, list):
        return [to_json(v) for v in x]
    if isinstance(x, CMap):
        out = {}
        prev = None
        for k, v in x.entries:
            if not isinstance(k, str):
                raise Bad("a map key is not text")
            if prev is not None and k.encode() <= prev.encode():
                raise Bad("map keys not in ascending order, or repeated")
            prev = k
            out[k] = to_json(v)
        return out
    if isinstance(x, Tag):
        raise Bad("an unexpected tag")
    return x


# ---- canonical JSON (RFC 8785) and hashing (§1) ---------------------------------------

def js_number(v):
    if isinstance(v, bool):
        raise Bad("not a number")
    if isinstance(v, int):
        return str(v)
    if not math.isfinite(v):
        raise Bad("not a finite number")
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    mant, _, exp = repr(abs(v)).partition("e")  # the shortest digits that read back
    ip, _, fp = mant.partition(".")
    lead = len(ip + fp) - len((ip + fp).lstrip("0"))
    digits = (ip + fp).strip("0")
    e = len(ip) - lead + int(exp or 0)  # value = 0.DIGITS * 10^e
    k, n = len(digits), e  # value = 0.digits * 10^n
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    exp_s = n - 1
    m = digits[0] + ("." + digits[1:] if k > 1 else "")
    return sign + m + "e" + ("+" if exp_s >= 0 else "-") + str(abs(exp_s))


def jcs(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, (int, float)):
        return js_number(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(jcs(x) for x in v) + "]"
    keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
    return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + jcs(v[k]) for k in keys) + "}"


def H(tag, data):
    return hashlib.sha256(tag.encode() + b"\x00" + data).digest()


def call_hash(call, expected):
    if not isinstance(call, dict) or not isinstance(call.get("tool"), str) \
            or not isinstance(call.get("params"), dict):
        return None
    if expected and "constraints" in call:
        body = {"tool": call["tool"], "params": call["params"], "constraints": call["constraints"]}
        return H("knox/expected", jcs(body).encode()).hex()
    return H("knox/action", jcs({"params": call["params"], "tool": call["tool"]}).encode()).hex()


# ---- §9.3: the nodes -----------------------------------------------------------------

def tagged(data):
    if not data.startswith(b"\xd9\xd9\xf7"):
        raise Bad("not a compact file")
    top = cbor_decode(data)
    if not isinstance(top, Tag) or top.tag != 55799:
        raise Bad("not under tag 55799")
    return resolve(top.value)


def read_part(folder, digest):
    """§9.5: the value of the shared part `digest` names, from `folder/parts/`."""
    name = os.path.join(folder, "parts", digest.hex() + ".cbor")
    try:
        with open(name, "rb") as f:
            tree = tagged(f.read())
    except OSError:
        raise Bad(f"the shared part {digest.hex()} is not in the store")
    if not isinstance(tree, list) or len(tree) != 2 or tree[0] != PART_FORMAT:
        raise Bad("a part file is not [format, value]")
    value = to_json(tree[1])
    if H("knox/part", jcs(value).encode()) != digest:
        raise Bad(f"the part file {digest.hex()} holds another part")
    return value


# Where digests a reader recomputes may stand (§9.1), and what each is of.
STATEMENT_DIGESTS = [
    (["predicate", "apm_hash"], "apm"), (["predicate", "chain_head"], "chain_head"),
    (["predicate", "inputs", "prompt"], "prompt"), (["predicate", "key_chain", "prev"], "key_chain_start"),
    (["predicate", "platform"], "platform"), (["predicate", "structure_root"], "structure_root"),
    (["subject", "*", "digest", "knoxApm"], "apm"),
    (["subject", "*", "digest", "knoxChainHead"], "chain_head"),
    (["subject", "*", "digest", "knoxStructureRoot"], "structure_root"),
]


def fill(v, path, value):
    """Each null at `path` in `v` (`*`: every item of an array) becomes `value`."""
    if value is None:
        return
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "*":
        items = list(enumerate(v)) if isinstance(v, list) else []
    else:
        items = [(head, v[head])] if isinstance(v, dict) and head in v else []
    for k, x in items:
        if not rest:
            if x is None:
                v[k] = value
        else:
            fill(x, rest, value)


def chain_and_root(nodes):
    chain = H("knox/chain-empty", b"")
    leaves = []
    codes = {k: i for i, k in enumerate(KINDS)}
    for i, n in enumerate(nodes):
        try:
            m = bytes.fromhex(n["measurement"])
            seq, parent = n["seq"], n["parent"]
            chain = H("knox/chain", chain + struct.pack(">Q", seq) + m)
            parent = 0xFFFF_FFFF_FFFF_FFFF if parent is None else parent
            leaves.append(hashlib.sha256(b"\x00" + struct.pack(">QQB", seq, parent, codes[n["kind"]]) + m).digest())
        except (KeyError, TypeError, ValueError, struct.error):
            return None, None
    return chain.hex(), merkle_of_leaf_hashes(leaves).hex()


def expand(data, folder="."):
    tree = tagged(data)
    if not isinstance(tree, list) or len(tree) != 3 or tree[0] not in FORMATS:
        raise Bad("not [format, bundle, nodes]")
    v2 = tree[0] == "knox-compact/v2"
    # §9.5: the APM's guards may be a reference to a part of the store (version 2).
    shared = None
    if v2 and isinstance(tree[1], CMap):
        for k, apm in tree[1].entries:
            if k == "apm" and isinstance(apm, CMap):
                for i, (g, v) in enumerate(apm.entries):
                    if g == "guards" and isinstance(v, Tag) and v.tag == PART_REF:
                        if not isinstance(v.value, bytes) or len(v.value) != 32:
                            raise Bad("a part reference is not a 32-byte digest")
                        shared = v.value
                        apm.entries[i] = (g, None)
    bundle = to_json(tree[1])
    if shared is not None:
        bundle["apm"]["guards"] = read_part(folder, shared)
    # §9.1: digests written as null, recomputed: the prompt's first (the APM holds it),
    # then the APM's (the root node holds it), the others after the nodes.
    digest_of = lambda tag, member: H(tag, jcs(bundle[member]).encode()).hex() if v2 and member in bundle else None
    fill(bundle, ["apm", "inputs", "prompt"], digest_of("knox/prompt", "prompt"))
    apm_digest = digest_of("knox/apm", "apm")
    nodes = []
    last_call = None  # (seq, agent)
    first_failed = None
    cursor = {}
    awaiting = set()
    for rec in tree[2]:
        if not isinstance(rec, list) or len(rec) not in (2, 3):
            raise Bad("a node record is not [kind, payload, extras?]")
        if not isinstance(rec[0], int) or not 0 <= rec[0] < len(KINDS):
            raise Bad("unknown kind code")
        kind = KINDS[rec[0]]
        payload = to_json(rec[1])
        if kind == "root":
            fill(payload, ["apm_hash"], apm_digest)
        extras = to_json(rec[2]) if len(rec) == 3 else {}
        if kind == "tool_call" and isinstance(payload, dict):
            if "actual_hash" not in payload and call_hash(payload.get("actual"), False):
                payload["actual_hash"] = call_hash(payload["actual"], False)
            e = payload.get("expected")
            if isinstance(e, dict) and "hash" not in e:
                if "tool" not in e and "params" not in e and call_hash(payload.get("actual"), False):
                    e["tool"], e["params"] = payload["actual"]["tool"], payload["actual"]["params"]
                if call_hash(e, True):
                    e["hash"] = call_hash(e, True)
        if kind == "check" and isinstance(payload, dict) and isinstance(payload.get("detail"), dict) \
                and isinstance(payload.get("guard"), str) and "guard" not in payload["detail"]:
            payload["detail"]["guard"] = payload["guard"]
        n = {"kind": kind, "payload": payload}

        def pick(name, implied):
            if name in extras:
                n[name] = extras[name]
            elif implied is not None:
                n[name] = implied

        seq = len(nodes)
        pick("seq", seq)
        if kind == "tool_call":
            pick("agent", last_call[1] if last_call else None)
            pick("parent", cursor.get(n.get("agent"), 0) if "agent" in n else None)
        else:
            implied = {"root": "null", "check": last_call and last_call[0],
                       "blocked": first_failed if first_failed is not None else (last_call and last_call[0]),
                       "tool_output": min(awaiting) if awaiting else None}.get(kind, 0)
            if kind == "interrupt":
                implied = first_failed if first_failed is not None else (last_call and last_call[0])
            if kind == "unanswered":
                implied = min(awaiting) if awaiting else None
            if kind == "root":
                n["parent"] = extras.get("parent", None)
            else:
                pick("parent", implied)
            p = n.get("parent", "absent")
            if p is None:
                pick("agent", "monitor")
            elif isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(nodes):
                pick("agent", nodes[p].get("agent"))
            else:
                pick("agent", None)
        reason = None
        if kind in ("blocked", "interrupt"):
            p = n.get("parent")
            at = nodes[p] if isinstance(p, int) and not isinstance(p, bool) and 0 <= p < len(nodes) else None
            if at is not None and at["kind"] == "check":
                q = at.get("parent")
                at = nodes[q] if isinstance(q, int) and not isinstance(q, bool) and 0 <= q < len(nodes) else None
            if at is not None and at["kind"] == "tool_call":
                reason = at.get("block_reason")
        if "block_reason" in extras:
            n["block_reason"] = extras["block_reason"]
        else:
            n["block_reason"] = reason
        if kind == "check":
            allowed = payload.get("passed") if isinstance(payload, dict) and isinstance(payload.get("passed"), bool) else True
        elif kind == "tool_call":
            allowed = n.get("block_reason", 0) is None
        else:
            allowed = kind not in ("blocked", "interrupt")
        n["allowed"] = extras.get("allowed", allowed)
        body = {k: n[k] for k in ("agent", "allowed", "block_reason", "kind", "parent", "payload", "seq") if k in n}
        if len(body) == 7:
            pick("measurement", H("knox/node", jcs(body).encode()).hex())
        else:
            pick("measurement", None)
        for k, v in extras.items():
            n.setdefault(k, v)
        # What later nodes' implied members follow.
        if kind == "tool_call":
            last_call = (seq, n.get("agent"))
            first_failed = None
            if n.get("allowed") is True:
                awaiting.add(seq)
        elif kind == "check":
            if isinstance(payload, dict) and payload.get("passed") is False and first_failed is None:
                first_failed = seq
        elif kind in ("tool_output", "unanswered"):
            awaiting.discard(n.get("parent"))
        if kind in ("tool_output", "blocked", "interrupt", "agent_branch") and isinstance(n.get("agent"), str):
            cursor[n["agent"]] = seq
        nodes.append(n)
    bundle["nodes"] = nodes
    platform = digest_of("knox/platform", "platform")
    chain_head, root = chain_and_root(nodes) if v2 else (None, None)
    key = None
    try:
        key = H("knox/key", bytes.fromhex(bundle["key"]["public_key"])).hex() if v2 else None
    except (KeyError, TypeError, ValueError):
        pass
    derived = {"prompt": digest_of("knox/prompt", "prompt"), "apm": apm_digest,
               "platform": platform, "chain_head": chain_head, "structure_root": root,
               "key_chain_start": H("knox/key-chain-start", bytes.fromhex(platform)).hex() if platform else None}
    for path in (["envelope"], ["apm_attestation", "envelope"], ["contract", "envelope"]):
        parent = bundle
        for p in path[:-1]:
            parent = parent.get(p) if isinstance(parent, dict) else None
        if not isinstance(parent, dict) or path[-1] not in parent:
            continue
        env = parent[path[-1]]
        for where, what in STATEMENT_DIGESTS:
            fill(env, ["payload"] + where, derived[what])
        fill(env, ["signatures", "*", "keyid"], key)
        env["payload"] = base64.b64encode(jcs(env["payload"]).encode()).decode()
        env.setdefault("payloadType", IN_TOTO)
        for s in env.get("signatures", []):
            s["sig"] = base64.b64encode(bytes.fromhex(s["sig"])).decode()
    if "summary" not in bundle:
        bundle["summary"] = predicate(bundle.get("envelope"))
    att = bundle.get("apm_attestation")
    if isinstance(att, dict) and "statement" not in att:
        att["statement"] = predicate(att.get("envelope"))
    return bundle


def predicate(env):
    try:
        return json.loads(base64.b64decode(env["payload"]))["predicate"]
    except (KeyError, TypeError, ValueError):
        raise Bad("an envelope without a statement")


# ---- integrity (§4, §6) --------------------------------------------------------------

def merkle(leaves):
    """RFC 9162's tree hash over leaf records."""
    return merkle_of_leaf_hashes([hashlib.sha256(b"\x00" + leaf).digest() for leaf in leaves])


def merkle_of_leaf_hashes(hashes):
    if not hashes:
        return hashlib.sha256(b"").digest()
    if len(hashes) == 1:
        return hashes[0]
    k = 1
    while k * 2 < len(hashes):
        k *= 2
    return hashlib.sha256(b"\x01" + merkle_of_leaf_hashes(hashes[:k]) + merkle_of_leaf_hashes(hashes[k:])).digest()


def check_envelope(env, pk):
    payload = base64.b64decode(env["payload"], validate=True)
    ptype = env["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype, len(payload), payload)
    sigs = env["signatures"]
    if len(sigs) != 1 or sigs[0]["keyid"] != H("knox/key", pk).hex():
        raise Bad("an envelope not signed once by the bundle's key")
    try:
        Ed25519PublicKey.from_public_bytes(pk).verify(base64.b64decode(sigs[0]["sig"]), pae)
    except InvalidSignature:
        raise Bad("an envelope's signature does not verify")
    statement = json.loads(payload)
    if jcs(statement).encode() != payload:
        raise Bad("a signed statement not in canonical JSON")
    return statement


def verify(bundle):
    nodes = bundle["nodes"]
    chain = H("knox/chain-empty", b"")
    leaves = []
    codes = {k: i for i, k in enumerate(KINDS)}
    for i, n in enumerate(nodes):
        if n.get("seq") != i:
            raise Bad(f"node {i}: sequence number {n.get('seq')}")
        body = {k: n[k] for k in ("agent", "allowed", "block_reason", "kind", "parent", "payload", "seq")}
        m = H("knox/node", jcs(body).encode())
        if m.hex() != n["measurement"]:
            raise Bad(f"node {i}: measurement does not match its content")
        chain = H("knox/chain", chain + struct.pack(">Q", i) + m)
        parent = 0xFFFF_FFFF_FFFF_FFFF if n["parent"] is None else n["parent"]
        leaves.append(struct.pack(">QQB", i, parent, codes[n["kind"]]) + m)
    pk = bytes.fromhex(bundle["key"]["public_key"])
    statement = check_envelope(bundle["envelope"], pk)
    summary = statement["predicate"]
    if summary != bundle["summary"]:
        raise Bad("the summary in clear is not the signed one")
    if summary["chain_head"] != chain.hex():
        raise Bad("the chain head is not the signed one")
    if summary["structure_root"] != merkle(leaves).hex():
        raise Bad("the structure root is not the signed one")
    if summary["counts"]["nodes"] != len(nodes):
        raise Bad("the node count is not the signed one")
    apm_hash = H("knox/apm", jcs(bundle["apm"]).encode()).hex()
    att = check_envelope(bundle["apm_attestation"]["envelope"], pk)["predicate"]
    if att != bundle["apm_attestation"]["statement"] or att["apm_hash"] != apm_hash \
            or summary["apm_hash"] != apm_hash:
        raise Bad("the APM is not the attested one")
    return len(nodes)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--expand"]:
        with open(args[1], "rb") as f:
            sys.stdout.write(jcs(expand(f.read(), os.path.dirname(args[1]) or ".")))
        return
    for path in args:
        out = {"file": path, "ok": False, "reason": None, "nodes": None}
        try:
            with open(path, "rb") as f:
                out["nodes"] = verify(expand(f.read(), os.path.dirname(path) or "."))
            out["ok"] = True
        except (Bad, KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
            out["reason"] = f"{type(e).__name__}: {e}"
        print(json.dumps(out))


if __name__ == "__main__":
    main()
