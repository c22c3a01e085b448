//! `knox eval --quick` (8 flows per pool: every stop cause, every workload). The
//! regulation, trajectory, system-call and stop guards score 100 % / 100 %, the report,
//! CSV, JSON and SVG outputs are written, and every evidence bundle the run kept
//! verifies `complete`.

use std::path::Path;

use knox_verify::Outcome;
use serde_json::Value;

use super::support::{ALLOW, knox, manifest, read_json, succeeds};

fn bundles(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            bundles(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

#[test]
fn quick_eval_scores_every_guard_perfectly_writes_its_outputs_and_every_bundle_verifies() {
    let dir = tempfile::tempdir().unwrap();
    // A generous stop timeout: the negative stop flows must finish before it even on a
    // loaded machine (nothing here asserts on time).
    succeeds(
        knox()
            .args([
                "eval",
                "--quick",
                "--flows",
                "8",
                "--stop-timeout-ms",
                "250",
                "--out",
            ])
            .arg(dir.path()),
    );
    for f in [
        "report.md",
        "results.json",
        "pool.json",
        "verdicts.jsonl",
        "table3.csv",
        "effectiveness.csv",
        "overhead.csv",
        "utility.csv",
        "corpus.csv",
        "effectiveness.svg",
        "overhead-trajectory.svg",
        "overhead-syscall.svg",
        "overhead-stop.svg",
        "overhead-regulation.svg",
        "utility.svg",
    ] {
        let p = dir.path().join(f);
        assert!(p.metadata().is_ok_and(|m| m.len() > 0), "{f} missing");
    }
    let svg = std::fs::read_to_string(dir.path().join("overhead-trajectory.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("<rect"));

    let results = read_json(&dir.path().join("results.json"));
    let cells = results["cells"].as_array().unwrap();
    for guard in ["regulation", "trajectory", "syscall", "stop"] {
        let mine: Vec<&Value> = cells.iter().filter(|c| c["guard"] == guard).collect();
        // 13 workloads × 2 executors.
        assert_eq!(mine.len(), 26, "{guard}");
        let (mut blocked, mut allowed) = (0, 0);
        for c in mine {
            let r = &c["rates"];
            let what = format!("{guard} {} {}", c["executor"], c["workload"]);
            assert_eq!(r["blocked_correct"], r["blocked_scored"], "{what}: {r}");
            assert_eq!(r["allowed_correct"], r["allowed_scored"], "{what}: {r}");
            assert!(r["allowed_scored"].as_u64().unwrap() > 0, "{what}");
            blocked += r["blocked_scored"].as_u64().unwrap();
            allowed += r["allowed_scored"].as_u64().unwrap();
            if c["executor"] == "injected" || guard == "stop" || guard == "regulation" {
                assert!(
                    r["blocked_scored"].as_u64().unwrap() > 0,
                    "{what}: nothing scored"
                );
            }
        }
        assert!(blocked > 0 && allowed > 0, "{guard}");
    }
    // Utility: exact matching blocks every paraphrased free-text call, constraints none;
    // injected calls stay blocked in both.
    for u in results["utility_by_executor"].as_array().unwrap() {
        let r = &u["rates"];
        assert!(r["free_text_calls"].as_u64().unwrap() > 0, "{u}");
        let expected = if u["matching"] == "exact" {
            r["free_text_calls"].clone()
        } else {
            Value::from(0)
        };
        assert_eq!(r["false_blocked"], expected, "{u}");
        assert_eq!(r["deviations_blocked"], r["deviations"], "{u}");
    }

    // Every bundle kept, each verifying complete; as many as the run counted.
    let v = &results["verification"];
    assert_eq!(v["complete"], v["bundles"]);
    assert!(v["not_complete"].as_array().unwrap().is_empty());
    let mut files = Vec::new();
    bundles(&dir.path().join("bundles"), &mut files);
    assert_eq!(files.len() as u64, v["bundles"].as_u64().unwrap());
    for f in &files {
        let b = knox_verify::parse_bundle(&std::fs::read(f).unwrap()).unwrap();
        let report = knox_verify::verify_bundle(&b, manifest(), ALLOW);
        assert_eq!(report.outcome, Outcome::Complete, "{}", f.display());
    }
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("Table III") && report.contains("paper"));
    assert!(report.contains("## Benign variations") && report.contains("Targets met"));

    // Benign variations: the exact mode blocks every one, the tolerant mode none (≤ 2 %);
    // both block every repeated write, write before its read and injected call, without
    // blocking a later planned call; every variant's bundle verifies complete.
    let csv = std::fs::read_to_string(dir.path().join("variations.csv")).unwrap();
    assert!(csv.starts_with("workload,executor,mode,kind,"));
    let v = read_json(&dir.path().join("variations.json"));
    let cells = v["cells"].as_array().unwrap();
    let sum = |mode: &str, benign: bool, field: &str| -> u64 {
        cells
            .iter()
            .filter(|c| c["mode"] == mode && c["benign"] == benign)
            .map(|c| c[field].as_u64().unwrap())
            .sum()
    };
    let kinds = |mode: &str| -> std::collections::BTreeSet<String> {
        cells
            .iter()
            .filter(|c| c["mode"] == mode && c["variants"].as_u64().unwrap() > 0)
            .map(|c| c["kind"].as_str().unwrap().to_string())
            .collect()
    };
    for k in [
        "repeat_read",
        "swap_reads",
        "repeat_effect",
        "effect_before_read",
        "injected",
    ] {
        assert!(kinds("tolerant").contains(k), "no {k} variant");
    }
    let benign = sum("tolerant", true, "variants");
    assert!(benign > 0);
    assert!(sum("tolerant", true, "blocked") * 50 <= benign, "{csv}");
    assert_eq!(
        sum("exact", true, "blocked"),
        sum("exact", true, "variants")
    );
    for mode in ["exact", "tolerant"] {
        assert_eq!(
            sum(mode, false, "blocked"),
            sum(mode, false, "variants"),
            "{mode}"
        );
        assert_eq!(sum(mode, false, "later_blocked"), 0, "{mode}");
        assert!(sum(mode, false, "later_planned") > 0, "{mode}");
    }
    for c in cells {
        assert_eq!(c["complete"], c["bundles"], "{c}");
    }
}

#[test]
fn pool_is_deterministic_and_balanced() {
    let dir = tempfile::tempdir().unwrap();
    let run = |sub: &str| {
        succeeds(
            knox()
                .args([
                    "eval",
                    "--quick",
                    "--guard",
                    "trajectory",
                    "--workload",
                    "st-sa",
                    "--flows",
                    "2",
                    "--no-utility",
                    "--no-variations",
                    "--out",
                ])
                .arg(dir.path().join(sub)),
        );
        std::fs::read(dir.path().join(sub).join("pool.json")).unwrap()
    };
    let (a, b) = (run("a"), run("b"));
    assert_eq!(a, b, "same seed, same pool");
    let pool: Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(pool["toolkits"], 38);
    for g in ["trajectory", "syscall", "stop"] {
        let flows = pool["guards"][g]["flows"].as_array().unwrap();
        assert_eq!(flows.len(), 380, "{g}");
        let block = flows.iter().filter(|f| f["label"] == "block").count();
        assert_eq!(block, 190, "{g}");
    }
    let flows = pool["guards"]["regulation"]["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 150);
    assert_eq!(flows.iter().filter(|f| f["label"] == "block").count(), 75);
}

#[test]
fn eval_with_a_judge_adds_label_blind_regulation_columns_decided_on_its_answers() {
    // A judge that calls every disclosure health data, in its own opinion compliant.
    let (url, seen) = super::models::serve_judge(&["health"], "compliant");
    let dir = tempfile::tempdir().unwrap();
    // The judge's own cells may score flows wrong: they measure the judge, and do not
    // fail the run; the labelled cells must be right.
    succeeds(
        knox()
            .args([
                "eval",
                "--guard",
                "regulation",
                "--workload",
                "st-sa",
                "--executor",
                "benign",
                "--flows",
                "6",
                "--no-corpus",
                "--no-utility",
                "--no-variations",
                "--judge",
            ])
            .arg(format!("openai:{url}#judge-model"))
            .arg("--out")
            .arg(dir.path()),
    );
    let column = format!("benign + judge openai:{url}#judge-model");
    let results = read_json(&dir.path().join("results.json"));
    let cells = results["cells"].as_array().unwrap();
    let plain = cells.iter().find(|c| c["executor"] == "benign").unwrap();
    let judged = cells.iter().find(|c| c["executor"] == column).unwrap();
    assert_eq!(plain["judged"], false);
    assert_eq!(judged["judged"], true);
    assert_eq!(judged["flows"], plain["flows"]);
    let r = &plain["rates"];
    assert_eq!(r["blocked_correct"], r["blocked_scored"]);
    assert_eq!(r["allowed_correct"], r["allowed_scored"]);
    let asked = seen.lock().unwrap().len() as u64;
    assert!(asked > 0, "the judge was never asked");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        report.contains(&column) && report.contains("every information-type label withheld"),
        "{report}"
    );

    // The judge's bundles name the label-blind manifest; under it they verify, every
    // regulation decision taken on the judge's classification alone.
    let blind = manifest().without_info_types().unwrap();
    let mut files = Vec::new();
    bundles(&dir.path().join("bundles").join("regulation"), &mut files);
    let (mut judged_bundles, mut judged_checks) = (0, 0u64);
    for f in &files {
        let b = knox_verify::parse_bundle(&std::fs::read(f).unwrap()).unwrap();
        if b.apm.inputs.manifest != blind.hash() {
            assert_eq!(
                knox_verify::verify_bundle(&b, manifest(), ALLOW).outcome,
                Outcome::Complete
            );
            continue;
        }
        judged_bundles += 1;
        assert_eq!(
            knox_verify::verify_bundle(&b, &blind, ALLOW).outcome,
            Outcome::Complete,
            "{}",
            f.display()
        );
        assert!(
            b.models
                .iter()
                .any(|m| m.role == knox_types::bundle::ModelRole::Judge)
        );
        for n in &b.nodes {
            let d = &n.payload.to_value()["detail"];
            if n.kind == knox_types::aeg::NodeKind::Check
                && n.payload.to_value()["guard"] == "regulation"
                && d["judge"].is_object()
            {
                judged_checks += 1;
                assert_eq!(d["flow"]["sources"], serde_json::json!(["judge"]));
                assert_eq!(d["flow"]["info_types"], serde_json::json!(["health"]));
            }
        }
    }
    assert!(judged_bundles > 0);
    assert_eq!(judged_checks, asked, "every question answered is on record");

    // A regulator verifies them with the manifest the run wrote, or without it: the
    // label-blind manifest of a shipped manifest is one this build knows by its hash
    // (knox_policy::shipped). The file is exactly the manifest the APMs name.
    let judged_bundle = files
        .iter()
        .find(|f| f.to_string_lossy().contains("judge"))
        .unwrap();
    let verify = |manifest: Option<&Path>| {
        let mut c = knox();
        c.arg("verify").arg(judged_bundle).arg("--allow-simulated");
        if let Some(m) = manifest {
            c.arg("--manifest").arg(m);
        }
        c.output().unwrap().status.code()
    };
    let written = dir.path().join(knox_eval::run::UNLABELLED_MANIFEST);
    let m = knox_policy::ToolkitManifest::from_toolkit_text(
        &std::fs::read_to_string(&written).unwrap(),
    )
    .unwrap();
    let bundle: Value = serde_json::from_slice(&std::fs::read(judged_bundle).unwrap()).unwrap();
    assert_eq!(
        bundle["apm"]["inputs"]["manifest"].as_str(),
        Some(m.hash().to_string().as_str()),
        "the file written is the manifest the judge's APMs name"
    );
    assert_eq!(verify(Some(&written)), Some(0), "complete");
    assert_eq!(verify(None), Some(0), "complete: a known manifest");
}

#[test]
fn eval_regulation_cases_reports_the_labelled_cases_without_running_a_pool() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let o = knox()
        .args(["eval", "--guard", "regulation-cases", "--json", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let splits = v["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2);
    assert_eq!(splits[0]["split"], "validation");
    assert_eq!(splits[0]["compliance_cases"], 20);
    assert_eq!(splits[0]["applicability_cases"], 40);
    assert_eq!(splits[1]["applicability_cases"], 618);
    // Every case is listed with its mapped flow and decision; no pool was generated.
    let lines = std::fs::read_to_string(out.join("regulation-cases.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 658);
    assert!(out.join("regulation-cases.md").is_file());
    assert!(!out.join("pool.json").exists());
}
