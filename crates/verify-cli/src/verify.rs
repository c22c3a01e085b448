//! `knox verify`: offline verification of bundles and journals.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::error::KindExt as _;
use knox_hw::policy::RegulatorPolicy;
use knox_types::digest::Digest;
pub use knox_verify::evidence::{
    AsRead, Evidence, of_bundle, verify_bytes, verify_evidence, verify_evidence_in,
};
use knox_verify::{Options, Outcome, Report};
use serde_json::json;

/// The toolkit manifest embedded in this build (`knox_policy::shipped::current`), the
/// one APMs are derived from by default. "internal" (70) if it does not load (a broken
/// build).
pub fn embedded_manifest() -> Result<knox_policy::ToolkitManifest> {
    knox_policy::shipped::current().kind_context(crate::error::Kind::Software, || {
        "loading the embedded toolkit manifest".into()
    })
}

/// Exit code of a file that could not be read as evidence.
pub const UNREADABLE: i32 = 4;

/// Exit code when the files, each verified, used one approval token in more than one
/// run: a token is accepted once across runs and processes.
pub const INCIDENT: i32 = 5;

/// Arguments of `knox verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::exit_codes!(
    "  0   complete\
   \n  1   tampered\
   \n  2   prefix (an unfinished run, e.g. a journal: its nodes 0..K are signed by its last\
   \n      checkpoint, the rest an unauthenticated tail; K is `authenticated` in --json)\
   \n  3   refused (evidence not accepted: simulated without --allow-simulated, hardware the\
   \n      policy does not accept, a regulation policy set other than the verifier's, or a\
   \n      toolkit manifest neither trusted (shipped, --needs, --manifest) nor embedded in the\
   \n      bundle with the APM's hash, or, with --contract-authority, no capability contract or\
   \n      one another authority signed)\
   \n  4   a FILE could not be read as evidence (missing, a directory, not a bundle)\
   \n  5   incident: several FILEs that verified used one approval token in more than one\
   \n      run (each is accepted once, across runs and processes); named on standard error\
   \n  With several FILEs, the worst of them, in the order tampered, incident, unreadable,\
   \n  refused, prefix, complete. --json prints one report object per FILE (an array for several),\
   \n  each with `file` and, when complete, the signed `structure_root` for `knox prove check`."
))]
pub struct VerifyArgs {
    /// Evidence bundles (`.json`, or compact `.cbor` from `knox run --evidence
    /// compact`) or run journals (`.journal.jsonl`); `-` reads standard input. One
    /// report per file.
    #[arg(required = true, value_name = "FILE", value_parser = crate::files::path_or_stdin)]
    pub bundles: Vec<PathBuf>,
    /// Print the report as JSON.
    #[arg(long, conflicts_with = "ear")]
    pub json: bool,
    /// Print the result as an EAT Attestation Result (IETF RATS EAR) claims set.
    #[arg(long)]
    pub ear: bool,
    /// INSECURE, not recommended: accept simulated platform evidence, which no hardware
    /// vouches for. Only for development machines without a TEE.
    #[arg(long)]
    pub allow_simulated: bool,
    /// The regulator's policy (TOML): accepted TCB statuses, platform flags, reference
    /// measurements, GPU driver/VBIOS versions, model weights hashes.
    #[arg(value_parser = crate::files::path, long, value_name = "TOML")]
    pub policy: Option<PathBuf>,
    /// A legacy toolkit needs file (the TOML form beside InjecAgent's `tools.json`, as
    /// `data/manifests/toolkits-*.toml`) to trust, instead of the manifest this build
    /// ships; the frozen ones are trusted anyway.
    #[arg(value_parser = crate::files::path, long, value_name = "TOML")]
    pub needs: Option<PathBuf>,
    /// A toolkit manifest (`knox-toolkit/1`, TOML or JSON) to trust, beside the ones
    /// this build ships; repeatable. A bundle naming none of them is checked against the
    /// manifest it embeds when that one's hash is the APM's.
    #[arg(value_parser = crate::files::path, long = "manifest", value_name = "FILE")]
    pub manifests: Vec<PathBuf>,
    /// The regulator's regulation policy set: a directory with `knox.cedarschema` and,
    /// per regulation, a manifest and Cedar file (default: the set embedded in this
    /// build, the repository's `regulations/`). Regulation verdicts are recomputed with
    /// it; a bundle whose APM names another set is refused.
    #[arg(value_parser = crate::files::path, long, value_name = "DIR")]
    pub policy_set: Option<PathBuf>,
    /// Require the runs to be bounded by a capability contract signed by this authority
    /// (`knox keygen`'s `.pub`): evidence without one, or with one another authority
    /// signed, is refused (3), naming both key ids. Without this option a bounded run's
    /// report names the authority's key id (the `contract` step; `contract_authority`
    /// in `--json`).
    #[arg(value_parser = crate::files::path, long, value_name = "AUTH.pub")]
    pub contract_authority: Option<PathBuf>,
    /// The regulator's private key (`knox keygen`), to sign a receipt with.
    #[arg(value_parser = crate::files::path, long, value_name = "KEY", requires = "receipt")]
    pub key: Option<PathBuf>,
    /// Write a signed verification receipt here (one FILE only).
    #[arg(value_parser = crate::files::path, long, value_name = "FILE", requires = "key")]
    pub receipt: Option<PathBuf>,
    /// Verify up to N FILEs at once, on N threads (0: one per core). Reports are printed
    /// in the order the FILEs are named, whatever order they finish in; at most 2 × N
    /// files are held in memory at a time.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub jobs: usize,
}

/// One file's verification.
enum Checked {
    /// Read and verified.
    Verified {
        bytes: Vec<u8>,
        evidence: Box<Evidence>,
    },
    /// Not readable as evidence.
    Unreadable(String),
}

/// How bad a file's result is, for the exit code of several.
fn severity(code: i32) -> u8 {
    match code {
        1 => 5,
        INCIDENT => 4,
        UNREADABLE => 3,
        3 => 2,
        2 => 1,
        _ => 0,
    }
}

impl VerifyArgs {
    /// Whether JSON output was asked for (then a failure is a JSON object).
    pub fn json(&self) -> bool {
        self.json || self.ear
    }
}

/// Verifies and prints; returns the process exit code.
pub fn run(args: &VerifyArgs) -> Result<i32> {
    if args.receipt.is_some() && args.bundles.len() != 1 {
        return Err(crate::files::usage(
            "--receipt signs a receipt for one FILE: verify the others separately",
        ));
    }
    if args.bundles.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        return Err(crate::files::usage(
            "`-` (standard input) can be named once",
        ));
    }
    if let Some(out) = &args.receipt {
        let mut inputs: Vec<&Path> = args.bundles.iter().map(PathBuf::as_path).collect();
        inputs.extend(args.key.as_deref());
        inputs.extend(args.policy.as_deref());
        inputs.extend(args.needs.as_deref());
        inputs.extend(args.manifests.iter().map(PathBuf::as_path));
        crate::files::refuse_overwrite("--receipt", out, &inputs)?;
    }
    // The key is read before any verification: a bad key file is one error, not a
    // report followed by an error.
    let key = args.key.as_deref().map(crate::keys::load).transpose()?;
    let required_authority = args
        .contract_authority
        .as_deref()
        .map(|p| {
            let bytes = crate::files::read_input(p, crate::files::KEY)?;
            knox_types::json::from_slice::<knox_types::bundle::PublicKey>(&bytes)
                .map_err(|e| crate::files::bad_input(p, "a public key written by `knox keygen`", e))
        })
        .transpose()?;
    let manifest = match &args.needs {
        Some(p) => {
            let needs = crate::files::read_text(p, crate::files::CONFIG)?;
            knox_policy::ToolkitManifest::from_sources(
                knox_policy::shipped::INJECAGENT_TOOLS_JSON,
                &needs,
            )
            .map_err(|e| crate::files::bad_input(p, "a toolkit needs file", e))?
        }
        None => embedded_manifest()?,
    };
    let mut trusted = knox_verify::manifests::Manifests::new().with(manifest);
    for p in &args.manifests {
        let text = crate::files::read_text(p, crate::files::MANIFEST)?;
        let m = knox_policy::ToolkitManifest::from_toolkit_text(&text)
            .map_err(|e| crate::files::bad_input(p, "a knox-toolkit/1 manifest", e))?;
        trusted.insert(m);
    }
    let policy_bytes = args
        .policy
        .as_deref()
        .map(|p| crate::files::read_input(p, crate::files::CONFIG))
        .transpose()?;
    let policy = match (&args.policy, policy_bytes.as_deref()) {
        (Some(p), Some(b)) => Some(
            RegulatorPolicy::from_toml(b)
                .map_err(|e| crate::files::bad_input(p, "a regulator policy", e))?,
        ),
        _ => None,
    };
    let norms = args
        .policy_set
        .as_deref()
        .map(|d| crate::regulations::load(Some(d)))
        .transpose()?;
    let opts = Options {
        dangerous_allow_simulated: args.allow_simulated,
        policy: policy.as_ref(),
        norms: norms.as_ref(),
    };
    let now = knox_attest::hardware::now_unix();
    let policy_id = policy_bytes
        .as_deref()
        .map(|b| format!("sha256:{}", Digest::sha256(b)));
    let several = args.bundles.len() > 1;
    let mut worst = 0;
    let mut objects = Vec::new();
    let mut signed: Option<(Vec<u8>, Report)> = None;
    // Each approval token's uses: (file, run) of every verified run that used it.
    let mut uses: std::collections::BTreeMap<String, Vec<(String, String)>> =
        std::collections::BTreeMap::new();
    let check = |file: &PathBuf| -> Checked {
        match crate::files::read_input_or_stdin(file, crate::files::EVIDENCE) {
            Err(e) => Checked::Unreadable(format!("{e:#}")),
            Ok(bytes) => match verify_evidence_in(&bytes, &parts_beside(file), &trusted, opts) {
                Ok(mut evidence) => {
                    if let Some(auth) = &required_authority {
                        require_authority(&mut evidence, &bytes, &parts_beside(file), auth);
                    }
                    Checked::Verified {
                        bytes,
                        evidence: Box::new(evidence),
                    }
                }
                Err(e) => Checked::Unreadable(format!("`{}`: {e}", display_name(file))),
            },
        }
    };
    let jobs = match args.jobs {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        n => n,
    };
    let mut print = |file: &PathBuf, checked: Checked| {
        let shown = display_name(file);
        let code = match &checked {
            Checked::Verified { evidence, .. } => evidence.report.outcome.exit_code(),
            Checked::Unreadable(_) => UNREADABLE,
        };
        if severity(code) > severity(worst) {
            worst = code;
        }
        match &checked {
            Checked::Unreadable(message) => {
                if args.json || args.ear {
                    objects.push(json!({"file": shown, "error": {
                        "code": UNREADABLE, "kind": "unreadable_evidence", "message": message}}));
                } else {
                    if several {
                        crate::outln!("== {shown}");
                    }
                    crate::outln!("UNREADABLE: {message}");
                    eprintln!("error: {message}");
                }
            }
            Checked::Verified { bytes, evidence } => {
                if matches!(evidence.report.outcome, Outcome::Complete | Outcome::Prefix) {
                    for nonce in &evidence.report.approvals {
                        uses.entry(nonce.clone())
                            .or_default()
                            .push((shown.clone(), evidence.report.run_id.clone()));
                    }
                }
                if args.json {
                    let authority = contract_authority(bytes, &parts_beside(file));
                    objects.push(report_json_of(&shown, evidence, authority.as_ref()));
                } else if args.ear {
                    let mut ear =
                        knox_verify::ear::ear(&evidence.report, now, policy_id.as_deref());
                    if let Some(o) = ear.as_object_mut() {
                        o.insert("file".into(), json!(shown));
                    }
                    objects.push(ear);
                } else {
                    if several {
                        crate::outln!("== {shown}");
                    }
                    crate::out!("{}", render(&evidence.report, evidence.as_read.as_ref()));
                }
                if args.receipt.is_some() {
                    signed = Some((bytes.clone(), evidence.report.clone()));
                }
            }
        }
    };
    check_each(&args.bundles, jobs, &check, &mut print);
    for (nonce, runs) in uses.iter().filter(|(_, r)| r.len() > 1) {
        let runs: Vec<String> = runs
            .iter()
            .map(|(file, run)| format!("`{file}` (run `{run}`)"))
            .collect();
        eprintln!(
            "incident: approval token {nonce} was used by {} runs: {} — a token is accepted once",
            runs.len(),
            runs.join(", ")
        );
        if severity(INCIDENT) > severity(worst) {
            worst = INCIDENT;
        }
    }
    if args.json || args.ear {
        let value = match objects.as_slice() {
            [one] if !several => one.clone(),
            _ => json!(objects),
        };
        crate::outln!("{}", serde_json::to_string_pretty(&value)?);
    }
    if let (Some(key), Some(out)) = (&key, &args.receipt) {
        let Some((bytes, report)) = signed else {
            return Ok(worst);
        };
        let receipt =
            knox_verify::receipt::issue(key, &bytes, &report, policy_bytes.as_deref(), now)?;
        crate::files::write_file(out, serde_json::to_vec_pretty(&receipt)?)?;
        eprintln!(
            "receipt by key {} written to {}",
            key.key_id(),
            out.display()
        );
    }
    Ok(worst)
}

/// `check` of every file of `files`, handed to `emit` in their order, on up to `jobs`
/// threads: each takes the next file not yet taken, at most `2 × jobs` files ahead of
/// the last one emitted (so at most that many are held at once).
fn check_each<F>(files: &[PathBuf], jobs: usize, check: &F, mut emit: impl FnMut(&PathBuf, Checked))
where
    F: Fn(&PathBuf) -> Checked + Sync,
{
    use std::collections::BTreeMap;
    use std::sync::{Condvar, Mutex, PoisonError};
    /// Where the threads stand.
    struct State {
        /// The next file to take.
        next: usize,
        /// Files emitted so far.
        emitted: usize,
        /// Verified (or panicked), not yet emitted, by position.
        ready: BTreeMap<usize, std::thread::Result<Checked>>,
    }
    /// Stops the threads taking files when dropped: at the end, or when this thread
    /// unwinds (a worker's panic resumed, or `emit`'s own), so none waits forever.
    struct Stop<'a> {
        state: &'a Mutex<State>,
        changed: &'a Condvar,
        len: usize,
    }
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next = self.len;
            self.changed.notify_all();
        }
    }
    if jobs <= 1 || files.len() <= 1 {
        for file in files {
            emit(file, check(file));
        }
        return;
    }
    let ahead = jobs.saturating_mul(2);
    let state = Mutex::new(State {
        next: 0,
        emitted: 0,
        ready: BTreeMap::new(),
    });
    let changed = Condvar::new();
    let lock = || state.lock().unwrap_or_else(PoisonError::into_inner);
    std::thread::scope(|s| {
        let _stop = Stop {
            state: &state,
            changed: &changed,
            len: files.len(),
        };
        for _ in 0..jobs.min(files.len()) {
            s.spawn(|| {
                loop {
                    let i = {
                        let mut st = lock();
                        while st.next < files.len() && st.next >= st.emitted + ahead {
                            st = changed.wait(st).unwrap_or_else(PoisonError::into_inner);
                        }
                        if st.next >= files.len() {
                            return;
                        }
                        st.next += 1;
                        st.next - 1
                    };
                    let Some(file) = files.get(i) else {
                        return;
                    };
                    let checked =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(file)));
                    lock().ready.insert(i, checked);
                    changed.notify_all();
                }
            });
        }
        for (i, file) in files.iter().enumerate() {
            let checked = {
                let mut st = lock();
                loop {
                    match st.ready.remove(&i) {
                        Some(Ok(c)) => {
                            st.emitted = i + 1;
                            break c;
                        }
                        // A panic is a bug: it goes on here, as if this thread had
                        // verified that file itself (`_stop` stops the others).
                        Some(Err(panic)) => {
                            drop(st);
                            std::panic::resume_unwind(panic);
                        }
                        None => {}
                    }
                    st = changed.wait(st).unwrap_or_else(PoisonError::into_inner);
                }
            };
            changed.notify_all();
            emit(file, checked);
        }
    });
}

/// The authority key of the capability contract a bundle (JSON or compact) or a journal
/// (its header, the first line) embeds, if any. Trusted only as far as the verification of the same
/// bytes went: a complete or prefix outcome means it signed the contract the APM names.
/// A compact bundle of a store is read with its shared parts (`parts`).
pub fn contract_authority(
    bytes: &[u8],
    parts: &Parts<'_>,
) -> Option<knox_types::bundle::PublicKey> {
    #[derive(serde::Deserialize)]
    struct Embeds {
        contract: Option<knox_types::bundle::SignedContract>,
    }
    if knox_types::compact::is_compact(bytes) {
        // A compact bundle: the contract of the bundle it expands to.
        let json = knox_types::compact::expand_to_json_in(bytes, parts).ok()?;
        return serde_json::from_slice::<Embeds>(&json)
            .ok()?
            .contract
            .map(|c| c.authority);
    }
    let whole = serde_json::from_slice::<Embeds>(bytes).ok();
    let embeds = whole.or_else(|| {
        let first = bytes.split(|&b| b == b'\n').next()?;
        serde_json::from_slice::<Embeds>(first).ok()
    })?;
    embeds.contract.map(|c| c.authority)
}

/// Where a compact bundle's shared parts are read from: a store's bundle finds them in
/// `parts/` beside its file (§9.5); a bundle read from standard input has none.
pub type Parts<'a> = dyn Fn(&Digest) -> Option<Vec<u8>> + 'a;

pub(crate) fn parts_beside(file: &Path) -> Box<Parts<'static>> {
    if file.as_os_str() == "-" {
        return Box::new(knox_types::compact::no_parts);
    }
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A part that cannot be read, or is over the evidence limit, reads as absent: the
    // bundle is then unreadable, naming it.
    Box::new(move |digest: &Digest| {
        let path = dir.join(knox_types::compact::part_file_name(digest));
        crate::files::read_input(&path, crate::files::EVIDENCE).ok()
    })
}

fn key_id(k: &knox_types::bundle::PublicKey) -> String {
    knox_attest::key::key_id(&k.public_key.0).to_string()
}

/// `--contract-authority`: evidence that verified (complete or prefix) is refused
/// unless the capability contract it embeds is signed by `required`.
fn require_authority(
    e: &mut Evidence,
    bytes: &[u8],
    parts: &Parts<'_>,
    required: &knox_types::bundle::PublicKey,
) {
    if !matches!(e.report.outcome, Outcome::Complete | Outcome::Prefix) {
        return;
    }
    let reason = match contract_authority(bytes, parts) {
        Some(k) if k == *required => return,
        Some(k) => format!(
            "the capability contract is signed by authority {}, not the required {} (--contract-authority)",
            key_id(&k),
            key_id(required)
        ),
        None => format!(
            "the run is not bounded by a capability contract; --contract-authority requires one signed by {}",
            key_id(required)
        ),
    };
    e.report.outcome = Outcome::Refused { reason };
    e.structure_root = None;
}

/// The JSON report of one file: the verifier's report, the file, the signed
/// structure root (`null` unless complete) and, for a run bounded by a capability
/// contract, the key id of the authority that signed it (`contract_authority`).
pub fn report_json(file: &str, e: &Evidence) -> serde_json::Value {
    report_json_of(file, e, None)
}

/// [`report_json`], with the authority of the contract the evidence embeds
/// ([`contract_authority`]).
pub fn report_json_of(
    file: &str,
    e: &Evidence,
    authority: Option<&knox_types::bundle::PublicKey>,
) -> serde_json::Value {
    let mut v = serde_json::to_value(&e.report).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("file".into(), json!(file));
        let verified = !matches!(e.report.outcome, Outcome::Tampered { .. });
        if let Some(k) = authority.filter(|_| verified) {
            o.insert("contract_authority".into(), json!(key_id(k)));
        }
        o.insert(
            "structure_root".into(),
            json!(e.structure_root.map(|d| d.to_hex())),
        );
        if !matches!(e.report.outcome, Outcome::Tampered { .. }) {
            return v;
        }
        // A broken chain vouches for nothing: its counts are what was read.
        for k in ["nodes", "tool_calls", "executed", "blocked", "interrupts"] {
            o.remove(k);
        }
        if let Some(r) = e.as_read {
            o.insert(
                "as_read_unverified".into(),
                json!({"nodes": r.nodes, "tool_calls": r.tool_calls, "blocked_nodes": r.blocked}),
            );
        }
    }
    v
}

/// The report as text. A tampered file's counts are not the verifier's (it stopped at
/// the break): they are left out, and what the file itself says is shown as unverified.
pub fn render(r: &Report, as_read: Option<&AsRead>) -> String {
    let tampered = matches!(r.outcome, Outcome::Tampered { .. });
    if !tampered {
        return r.to_string();
    }
    let mut s = String::new();
    let _ = writeln!(s, "run {}: {}", r.run_id, r.outcome.name().to_uppercase());
    if let Outcome::Tampered { node, reason } = &r.outcome {
        match node {
            Some(n) => {
                let _ = writeln!(s, "  first offending node: {n}: {reason}");
            }
            None => {
                let _ = writeln!(s, "  {reason}");
            }
        }
    }
    let hw = if r.hardware_backed {
        "hardware-backed"
    } else {
        "NOT hardware-backed"
    };
    let _ = writeln!(s, "  platform evidence: {} ({hw})", r.platform);
    for st in &r.steps {
        let _ = writeln!(s, "  [{:<7}] {}: {}", st.result, st.name, st.detail);
    }
    match as_read {
        Some(a) => {
            let _ = writeln!(
                s,
                "  as read, NOT verified (the chain is broken): {} nodes, {} tool calls, {} blocked nodes",
                a.nodes, a.tool_calls, a.blocked
            );
        }
        None => {
            let _ = writeln!(s, "  counts left out: the chain is broken");
        }
    }
    for w in &r.warnings {
        let _ = writeln!(s, "  warning: {w}");
    }
    s
}

/// Shown path of `p` (`<stdin>` for `-`).
pub fn display_name(p: &Path) -> String {
    if p.as_os_str() == "-" {
        "<stdin>".into()
    } else {
        p.display().to_string()
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn the_contract_authority_is_read_from_a_compact_bundle_too() {
        let statement =
            serde_json::json!({"_type": "https://in-toto.io/Statement/v1", "predicate": {}});
        let authority = serde_json::json!({"alg": "ed25519", "public_key": "ab".repeat(32)});
        let bundle = serde_json::json!({
            "nodes": [],
            "contract": {
                "authority": authority,
                "envelope": {
                    "payload": knox_types::dsse::b64(&knox_types::canon::canonical(&statement)),
                    "payloadType": "application/vnd.in-toto+json",
                    "signatures": [{"keyid": "cd".repeat(32), "sig": knox_types::dsse::b64(&[7; 64])}],
                },
            },
        });
        let json = serde_json::to_vec(&bundle).unwrap();
        let compact = knox_types::compact::compact(&bundle).unwrap();
        let want: knox_types::bundle::PublicKey = serde_json::from_value(authority).unwrap();
        let none = knox_types::compact::no_parts;
        assert_eq!(contract_authority(&json, &none).as_ref(), Some(&want));
        assert_eq!(contract_authority(&compact, &none).as_ref(), Some(&want));
    }

    fn files(n: usize) -> Vec<PathBuf> {
        (0..n).map(|i| PathBuf::from(format!("{i}.json"))).collect()
    }

    fn name(c: &Checked) -> String {
        match c {
            Checked::Unreadable(m) => m.clone(),
            Checked::Verified { .. } => "verified".into(),
        }
    }

    #[test]
    fn files_are_emitted_in_order_whatever_order_they_finish_in() {
        let files = files(40);
        // Earlier files take longer: the threads finish them last.
        let check = |p: &PathBuf| {
            let i: u64 = p
                .to_string_lossy()
                .trim_end_matches(".json")
                .parse()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_micros((40 - i) * 200));
            Checked::Unreadable(p.display().to_string())
        };
        for jobs in [1, 2, 3, 8, 64] {
            let mut seen = Vec::new();
            check_each(&files, jobs, &check, |f, c| {
                seen.push((f.clone(), name(&c)))
            });
            let want: Vec<(PathBuf, String)> = files
                .iter()
                .map(|f| (f.clone(), f.display().to_string()))
                .collect();
            assert_eq!(seen, want, "--jobs {jobs}");
        }
    }

    #[test]
    fn a_panicking_check_reaches_the_caller_and_nothing_hangs() {
        let files = files(30);
        let check = |p: &PathBuf| {
            assert!(p != Path::new("7.json"), "a bug verifying {}", p.display());
            Checked::Unreadable(String::new())
        };
        for jobs in [2, 4] {
            let mut emitted = 0;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                check_each(&files, jobs, &check, |_, _| emitted += 1);
            }));
            assert!(r.is_err(), "--jobs {jobs}: the panic was lost");
            assert_eq!(emitted, 7, "--jobs {jobs}: the files before it are emitted");
        }
        // A panic of the caller's own `emit` does not leave the threads waiting.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check_each(
                &files,
                2,
                &|_| Checked::Unreadable(String::new()),
                |f, _| {
                    assert!(f != Path::new("3.json"), "emit failed");
                },
            );
        }));
        assert!(r.is_err());
    }
}
