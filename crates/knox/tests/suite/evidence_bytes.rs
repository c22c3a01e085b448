//! Every byte `knox verify` reports is bound (issue 16, item 1): real bundles and
//! journals written by `knox run`, tampered as files, verified by `knox verify` from
//! those files. Each test is one defect the verifier used to accept as complete.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};

use super::support::{knox, succeeds, verify_file};

/// One `knox run` (two tasks, one agent, with its journal and a refresh report): the
/// bundle's and the journal's bytes as written.
fn written() -> &'static (Vec<u8>, Vec<u8>) {
    static W: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    W.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        succeeds(
            knox()
                .args([
                    "run",
                    "--workload",
                    "mt-sa-seq:2",
                    "--flows",
                    "2",
                    "--journal",
                    "--refresh",
                    "--out",
                ])
                .arg(dir.path()),
        );
        let find = |suffix: &str| -> PathBuf {
            std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    name.ends_with(suffix) && name != "summary.json"
                })
                .unwrap()
        };
        let bundle = std::fs::read(find("-0000.json")).unwrap();
        let journal = std::fs::read(find(".journal.jsonl")).unwrap();
        (bundle, journal)
    })
}

fn bundle() -> Vec<u8> {
    written().0.clone()
}

fn journal() -> Vec<u8> {
    written().1.clone()
}

/// `knox verify --allow-simulated` on `bytes` written to a file named `name`: the exit
/// code and everything it printed.
fn verify(name: &str, bytes: &[u8]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    verify_file(&path)
}

/// Tampered: exit 1, and the report says `what`.
fn assert_tampered(name: &str, bytes: &[u8], what: &[&str]) {
    let (code, text) = verify(name, bytes);
    assert_eq!(code, 1, "expected tampered:\n{text}");
    assert!(text.contains("TAMPERED"), "{text}");
    for w in what {
        assert!(text.contains(w), "the report should say `{w}`:\n{text}");
    }
}

/// Replaces the first `from` by `to`, which must be there.
fn replace_once(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(text.contains(from), "`{from}` not in the evidence");
    text.replacen(from, to, 1).into_bytes()
}

/// Edits the bundle as a JSON document and writes it back compactly.
fn edit_bundle(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&bundle()).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// Edits the journal's header line.
fn edit_header(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let j = journal();
    let cut = j.iter().position(|&b| b == b'\n').unwrap();
    let mut v: Value = serde_json::from_slice(&j[..cut]).unwrap();
    f(&mut v);
    let mut out = serde_json::to_vec(&v).unwrap();
    out.extend_from_slice(&j[cut..]);
    out
}

#[test]
fn honest_evidence_verifies_from_its_files() {
    let (code, text) = verify("b.json", &bundle());
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("COMPLETE"), "{text}");
    let (code, text) = verify("b.journal.jsonl", &journal());
    assert_eq!(code, 2, "{text}");
    // Read back and written again by serde_json, an honest bundle is unchanged: Knox
    // writes every hashed part in its canonical form.
    assert_eq!(edit_bundle(|_| {}), bundle());
}

/// Defect 1: the prompt in clear is the one the APM attests (or it is not there).
#[test]
fn a_prompt_other_than_the_attested_one_is_tampered() {
    let forged = json!({"tasks": ["Wire $5,000 to acct 998877"]});
    let b = edit_bundle(|v| v["prompt"] = forged.clone());
    assert_tampered("b.json", &b, &["prompt", "not the one the APM attests"]);
    let b = edit_bundle(|v| v["prompt"] = json!("Wire $5,000"));
    assert_tampered("b.json", &b, &["prompt"]);
    let b = edit_bundle(|v| {
        v["prompt"]["tasks"].as_array_mut().unwrap().pop();
    });
    assert_tampered("b.json", &b, &["prompt"]);
    let j = edit_header(|v| v["prompt"] = forged.clone());
    assert_tampered("b.journal.jsonl", &j, &["prompt"]);
    // Withholding the prompt is allowed: its hash stays in the APM.
    let b = edit_bundle(|v| {
        v.as_object_mut().unwrap().remove("prompt");
    });
    let (code, text) = verify("b.json", &b);
    assert_eq!(code, 0, "{text}");
}

/// Defect 2: a repeated key anywhere — a reader keeping the first value would see
/// other evidence than the verifier checked.
#[test]
fn a_duplicate_key_anywhere_is_tampered_naming_where() {
    let b = replace_once(
        &bundle(),
        "\"passed\":true",
        "\"passed\":false,\"passed\":true",
    );
    assert_tampered(
        "b.json",
        &b,
        &["duplicate key `passed`", "/payload", "line 1"],
    );
    let j = replace_once(
        &journal(),
        "\"passed\":true",
        "\"passed\":false,\"passed\":true",
    );
    assert_tampered("b.journal.jsonl", &j, &["duplicate key `passed`", "line "]);
    // Outside the payloads too: in the APM, in the platform evidence.
    let b = replace_once(
        &bundle(),
        "\"external\":",
        "\"external\":false,\"external\":",
    );
    assert_tampered(
        "b.json",
        &b,
        &["duplicate key `external`", "/apm/guards/stop"],
    );
    let b = replace_once(
        &bundle(),
        "\"evidence\":{",
        "\"evidence\":{\"note\":\"hardware-backed\",",
    );
    assert_tampered(
        "b.json",
        &b,
        &["duplicate key `note`", "/platform/evidence"],
    );
}

/// Defect 3: simulated platform evidence is bound byte for byte.
#[test]
fn forged_simulated_platform_evidence_is_tampered() {
    let fake = json!({"note": "hardware-backed: Intel TDX"});
    let b = edit_bundle(|v| v["platform"]["evidence"] = fake.clone());
    assert_tampered("b.json", &b, &["simulated evidence must be exactly"]);
    let b = edit_bundle(|v| v["refresh"]["evidence"] = fake.clone());
    assert_tampered(
        "b.json",
        &b,
        &["refresh", "not the one the signed summary binds"],
    );
    let j = edit_header(|v| v["platform"]["evidence"] = fake.clone());
    assert_tampered(
        "b.journal.jsonl",
        &j,
        &["simulated evidence must be exactly"],
    );
}

/// Every mode: the APM attestation signs the hash of the platform evidence, so no
/// byte of it can change (a TDX report's `attested_at`, which no hardware signs, is
/// bound this way); a version-2 bundle with hardware evidence its attestation does not
/// bind is tampered.
#[test]
fn the_apm_attestation_binds_the_platform_evidence() {
    let v: Value = serde_json::from_slice(&bundle()).unwrap();
    let statement = &v["apm_attestation"]["statement"];
    assert!(statement["platform"].is_string(), "{statement}");
    // Claimed hardware evidence (with whatever `attested_at`) in place of the signed
    // evidence: not the evidence the attestation binds.
    let tdx = json!({"quote": "00", "collateral": {}, "attested_at": 1_750_000_000u64});
    let b = edit_bundle(|v| {
        v["platform"]["mode"] = json!("tdx");
        v["platform"]["media_type"] = json!("application/vnd.knox.tdx-evidence.v1+json");
        v["platform"]["evidence"] = tdx.clone();
    });
    assert_tampered("b.json", &b, &["not the one the APM attestation binds"]);
    // The same in a journal's header.
    let j = edit_header(|v| {
        v["platform"]["mode"] = json!("tdx");
        v["platform"]["evidence"] = tdx.clone();
    });
    assert_tampered(
        "b.journal.jsonl",
        &j,
        &["not the one the APM attestation binds"],
    );
}

/// The refresh report made at the end of a run is named by the signed summary: no byte
/// of it can change, and it cannot be dropped.
#[test]
fn the_signed_summary_binds_the_refresh_report() {
    let v: Value = serde_json::from_slice(&bundle()).unwrap();
    assert!(v["summary"]["refresh"].is_string(), "{}", v["summary"]);
    let tdx = json!({"quote": "00", "collateral": {}, "attested_at": 1_750_000_000u64});
    let b = edit_bundle(|v| {
        v["refresh"]["mode"] = json!("tdx");
        v["refresh"]["evidence"] = tdx.clone();
    });
    assert_tampered("b.json", &b, &["not the one the signed summary binds"]);
    let b = edit_bundle(|v| {
        v.as_object_mut().unwrap().remove("refresh");
    });
    assert_tampered(
        "b.json",
        &b,
        &["names a refresh report the bundle does not carry"],
    );
}

/// The members of the set `"name":[…]` (the first one in the evidence), reordered by
/// `f`.
fn edit_set(bytes: &[u8], name: &str, f: impl FnOnce(&mut Vec<String>)) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let key = format!("\"{name}\":[");
    let start = text.find(&key).unwrap() + key.len();
    let end = start + text[start..].find(']').unwrap();
    let mut items: Vec<String> = text[start..end].split(',').map(str::to_string).collect();
    assert!(items.len() >= 2, "{name}: {items:?}");
    f(&mut items);
    format!("{}{}{}", &text[..start], items.join(","), &text[end..]).into_bytes()
}

/// Removes the member `member` (e.g. `"timeout_ms":null`) and one comma next to it.
fn remove_member(bytes: &[u8], member: &str) -> Vec<u8> {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let with_next = format!("{member},");
    let with_prev = format!(",{member}");
    let out = if text.contains(&with_next) {
        text.replacen(&with_next, "", 1)
    } else {
        assert!(text.contains(&with_prev), "`{member}` not in the evidence");
        text.replacen(&with_prev, "", 1)
    };
    out.into_bytes()
}

/// Defect 5: the APM is hashed as written, and must read as exactly what is written.
#[test]
fn an_apm_whose_bytes_differ_from_the_attested_ones_is_tampered() {
    let what = ["APM as written"];
    // A set-valued array reordered, or with a member repeated.
    let b = edit_set(&bundle(), "syscalls", |s| s.swap(0, 1));
    assert_tampered("b.json", &b, &what);
    let b = edit_set(&bundle(), "syscalls", |s| {
        let first = s[0].clone();
        s.insert(0, first);
    });
    assert_tampered("b.json", &b, &what);
    // A default left out.
    let b = remove_member(&bundle(), "\"timeout_ms\":null");
    assert_tampered("b.json", &b, &what);
    // The same in a journal's header.
    let j = edit_set(&journal(), "syscalls", |s| s.swap(0, 1));
    assert_tampered("b.journal.jsonl", &j, &what);
}

/// Defect 5, as written: the APM and every payload must already be canonical; the
/// verifier names the first byte that is not.
#[test]
fn a_part_not_canonical_as_written_is_tampered_naming_the_byte() {
    let b = replace_once(&bundle(), "\"apm\":{", "\"apm\":{ ");
    assert_tampered(
        "b.json",
        &b,
        &["`/apm` is not in its canonical form", "byte "],
    );
    let b = replace_once(&bundle(), "\"payload\":{", "\"payload\":{ ");
    assert_tampered(
        "b.json",
        &b,
        &["`/nodes/0/payload` is not in its canonical form", "node 0"],
    );
    let b = replace_once(&bundle(), "\"prompt\":{", "\"prompt\":{ ");
    assert_tampered("b.json", &b, &["`/prompt` is not in its canonical form"]);
    let j = replace_once(&journal(), "\"payload\":{", "\"payload\":{ ");
    assert_tampered(
        "b.journal.jsonl",
        &j,
        &["`/payload` is not in its canonical form"],
    );
}

/// A bundle and a journal written by Knox before version 2 (`knox-evidence/v1`,
/// `knox-journal/v1`: parts in struct order, not canonical as written).
fn v1(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/evidence-v1");
    std::fs::read(dir.join(name)).unwrap()
}

/// The previous format is still verified, with the same bindings.
#[test]
fn version_1_evidence_still_verifies_and_is_still_bound() {
    let b = v1("bundle.json");
    assert!(b.starts_with(b"{\"format\":\"knox-evidence/v1\""));
    let (code, text) = verify("b.json", &b);
    assert_eq!(code, 0, "{text}");
    let (code, text) = verify("b.journal.jsonl", &v1("journal.jsonl"));
    assert_eq!(code, 2, "{text}");
    let mut v: Value = serde_json::from_slice(&b).unwrap();
    v["prompt"] = json!({"tasks": ["Wire $5,000 to acct 998877"]});
    assert_tampered("b.json", &serde_json::to_vec(&v).unwrap(), &["prompt"]);
    let t = replace_once(&b, "\"passed\":true", "\"passed\":false,\"passed\":true");
    assert_tampered("b.json", &t, &["duplicate key `passed`"]);
    let t = edit_set(&b, "syscalls", |s| s.swap(0, 1));
    assert_tampered("b.json", &t, &["APM as written"]);
    let t = remove_member(&b, "\"timeout_ms\":null");
    assert_tampered("b.json", &t, &["APM as written"]);
    let t = replace_once(&b, "\"layout\":", "\"forged\":1,\"layout\":");
    assert_tampered("b.json", &t, &["simulated evidence must be exactly"]);
    // A current bundle cannot be passed off as an older format (which relaxes what is
    // checked, or replays under other rules): the format is signed.
    for older in [
        "knox-evidence/v1",
        "knox-evidence/v2",
        "knox-evidence/v3",
        "knox-evidence/v4",
    ] {
        let t = replace_once(&bundle(), knox_types::bundle::BUNDLE_FORMAT, older);
        assert_tampered("b.json", &t, &["another run or format"]);
    }
}

/// Kernel denials carry 64-bit system call arguments (`AT_FDCWD` is
/// `0xffffffffffffff9c`), which no canonical JSON number holds: written as hex strings,
/// a confined run's bundles verify from their files.
#[test]
fn a_confined_runs_kernel_denials_verify_from_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = knox()
        // The terminal tasks reach outside `Auth` on purpose (bash opening a socket,
        // `unshare`): their kernel denials carry 64-bit arguments.
        .args([
            "run",
            "--suite",
            "terminal",
            "--workload",
            "mt-sa-seq:4",
            "--tools",
            "confined",
        ])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    if super::support::sandbox_unavailable(&out) {
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut args = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".json") || name == "summary.json" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        args += text.matches("\"args\":[\"0x").count();
        let (code, report) = verify_file(&path);
        assert_eq!(code, 0, "{report}");
    }
    assert!(args > 0, "no kernel denial with arguments was recorded");
}
