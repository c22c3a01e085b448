//! Verifying a key announcement (`knox-key-announcement/v1`): an in-TEE key's first
//! summary, number 0 of its chain of runs, signed when the key is made (evidence
//! format §6a). It says nothing of any run; it proves the key exists — bound by its
//! platform evidence — so that a store that receives it and no run of the key shows a
//! whole process withheld.

use knox_types::bundle::{
    ANNOUNCEMENT_FORMAT, ANNOUNCEMENT_RUN_ID, Announcement, BUNDLE_FORMAT_V3, BUNDLE_FORMAT_V4,
    MAX_BUNDLE_BYTES,
};
use knox_types::dsse::SUMMARY_PREDICATE;

use crate::replay::Fail;
use crate::{Options, ReadError, Report, Steps};

/// Whether `bytes` are a key announcement (a JSON object whose `format` is
/// [`ANNOUNCEMENT_FORMAT`]).
pub fn is_announcement(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Format {
        format: Option<String>,
    }
    bytes.len() <= MAX_BUNDLE_BYTES
        && serde_json::from_slice::<Format>(bytes)
            .is_ok_and(|f| f.format.as_deref() == Some(ANNOUNCEMENT_FORMAT))
}

/// Verifies a key announcement: its platform evidence binds the key (and is acceptable
/// under `opts`), its summary is exactly the announcement's (no run, number 0, starting
/// at that evidence) and is signed by the key. **Complete** when all hold; its report
/// has no node and names the key's chain link 0 (`key_chain`).
pub fn verify_announcement(bytes: &[u8], opts: Options<'_>) -> Result<Report, ReadError> {
    if bytes.len() > MAX_BUNDLE_BYTES {
        return Err(ReadError::TooLarge(bytes.len()));
    }
    let a: Announcement = knox_types::json::from_slice(bytes).map_err(|e| match e {
        knox_types::json::StrictError::Json(e) => ReadError::Syntax(e),
        knox_types::json::StrictError::Shape(e) => ReadError::Json(e),
    })?;
    if a.format != ANNOUNCEMENT_FORMAT {
        return Err(ReadError::Format(a.format));
    }
    let mut s = Steps::default();
    let (platform, hardware_backed) = crate::evidence_of(&mut s, &a.platform, &a.key, opts);
    let expected =
        knox_types::Digest::of_json(knox_types::digest::tag::PLATFORM, &a.platform).map(|h| {
            let mut e = Announcement::summary_for(&h);
            // Announcements were first written with the format of their time's bundles.
            if [BUNDLE_FORMAT_V3, BUNDLE_FORMAT_V4].contains(&a.summary.format.as_str()) {
                e.format.clone_from(&a.summary.format);
            }
            e
        });
    match expected {
        Ok(e) if e == a.summary => s.pass(
            "announcement",
            "number 0 of the key's chain of runs, starting at its platform evidence; no run in it",
        ),
        Ok(_) => s.fail(
            "announcement",
            Fail::unplaced(format!(
                "the summary is not a key announcement's (run id `{ANNOUNCEMENT_RUN_ID}`, no node, no APM, number 0 starting at the key's platform evidence)"
            )),
        ),
        Err(e) => s.fail("announcement", Fail::unplaced(e.to_string())),
    }
    let signed = knox_attest::dsse::verify(&a.envelope, &a.key, SUMMARY_PREDICATE)
        .map_err(|e| e.to_string())
        .and_then(|st| match a.summary.to_statement() {
            Ok(clear) if clear == st => Ok(()),
            Ok(_) => Err("the summary in clear differs from the signed one".into()),
            Err(e) => Err(e.to_string()),
        });
    let link = match signed {
        Ok(()) => {
            s.pass(
                "signature",
                "summary signed by the announced key (DSSE, in-toto Statement v1)",
            );
            match (a.summary.key_chain, a.summary.seal_digest()) {
                (Some(c), Ok(seal)) => Some(crate::report::ChainLink {
                    key: knox_attest::key::key_id(&a.key.public_key.0).to_hex(),
                    seq: c.seq,
                    prev: c.prev,
                    seal,
                }),
                _ => None,
            }
        }
        Err(e) => {
            s.fail(
                "signature",
                Fail::unplaced(format!("summary envelope: {e}")),
            );
            None
        }
    };
    let outcome = s.outcome(true);
    let key_chain = matches!(outcome, crate::Outcome::Complete)
        .then_some(link)
        .flatten();
    let mut warnings = Vec::new();
    if !hardware_backed {
        warnings.push(knox_attest::simulated::NOTE.to_string());
    }
    Ok(Report {
        outcome,
        run_id: ANNOUNCEMENT_RUN_ID.into(),
        platform,
        hardware_backed,
        steps: s.steps,
        nodes: 0,
        tool_calls: 0,
        executed: 0,
        blocked: Vec::new(),
        interrupts: Vec::new(),
        flagged_for_review: 0,
        choice_bits: None,
        models: Vec::new(),
        authenticated: None,
        key_chain,
        approvals: Vec::new(),
        warnings,
    })
}
