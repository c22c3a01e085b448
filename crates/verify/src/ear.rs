//! The verifier's result in the shape of an EAT Attestation Result (EAR, IETF RATS):
//! one appraisal per aspect — hardware, key binding, chain, policy — each with an
//! `ear.status` of affirming, warning, contraindicated or none. Unsigned: the signed
//! artefact a regulator hands on is its receipt.

use serde_json::{Value, json};

use crate::report::{Outcome, Report};

/// EAR profile identifier.
pub const EAR_PROFILE: &str = "tag:github.com,2023:veraison/ear";

fn status(report: &Report, steps: &[&str]) -> &'static str {
    let mut worst = "none";
    for st in report.steps.iter().filter(|s| steps.contains(&s.name)) {
        let s = match st.result {
            "pass" => "affirming",
            "refused" => "warning",
            "fail" => "contraindicated",
            _ => "none",
        };
        let rank = |x: &str| match x {
            "contraindicated" => 3,
            "warning" => 2,
            "affirming" => 1,
            _ => 0,
        };
        if rank(s) > rank(worst) {
            worst = s;
        }
    }
    worst
}

/// The report as an EAR claims set issued at `iat` (Unix seconds).
pub fn ear(report: &Report, iat: u64, policy_id: Option<&str>) -> Value {
    let mut hardware = status(report, &["evidence"]);
    if hardware == "affirming" && !report.hardware_backed {
        hardware = "warning";
    }
    let overall = match report.outcome {
        Outcome::Complete if report.hardware_backed => "affirming",
        Outcome::Complete | Outcome::Prefix | Outcome::Refused { .. } => "warning",
        Outcome::Tampered { .. } => "contraindicated",
    };
    let submod = |s: &str, extra: Value| {
        let mut v = json!({"ear.status": s});
        if let (Some(obj), Value::Object(e)) = (v.as_object_mut(), extra) {
            obj.extend(e);
        }
        v
    };
    json!({
        "eat_profile": EAR_PROFILE,
        "iat": iat,
        "ear.verifier-id": {"developer": "knox", "build": format!("knox-verify {}", env!("CARGO_PKG_VERSION"))},
        "ear.status": overall,
        "ear.appraisal-policy-id": policy_id.unwrap_or("knox:no-policy"),
        "submods": {
            "hardware": submod(hardware, json!({"knox.platform": report.platform, "knox.hardware-backed": report.hardware_backed})),
            "key_binding": submod(status(report, &["evidence", "apm", "signature"]), json!({})),
            "chain": submod(status(report, &["chain", "topology"]), json!({"knox.nodes": report.nodes})),
            "policy": submod(status(report, &["apm", "inference", "policy"]), json!({
                "knox.blocked": report.blocked.len(),
                "knox.interrupts": report.interrupts.len(),
                "knox.flagged-for-review": report.flagged_for_review,
            })),
        },
        "knox.outcome": report.outcome,
        "knox.run-id": report.run_id,
    })
}
