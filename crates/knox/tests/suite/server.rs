//! `knox serve` with no set-up (SQLite under the XDG data folder, a log key created on
//! first start), `knox submit` (signed, each inclusion proof checked, exit 1 for a
//! tampered run), `knox login`, `knox report` (HTML and PDF); `knox run --stream-to`
//! and `knox gateway … --stream-to` (each run live in the store, then complete).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Stdio};

use super::support::knox;

/// Kills the server when the test ends, pass or fail.
pub(super) struct Server(pub(super) Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `knox` in `d`, with its data under `d/data`.
pub(super) fn knox_in(d: &std::path::Path, args: &[&str]) -> std::process::Output {
    knox()
        .current_dir(d)
        .env("XDG_DATA_HOME", d.join("data"))
        .args(args)
        .output()
        .unwrap()
}

/// The keys of a provider (acme) and a regulator (cnil) assigned to it, and
/// `access.toml` naming them, in `d`.
pub(super) fn acme_and_cnil(d: &std::path::Path) {
    assert!(knox_in(d, &["keygen", "--out", "acme"]).status.success());
    assert!(knox_in(d, &["keygen", "--out", "cnil"]).status.success());
    std::fs::write(
        d.join("access.toml"),
        "[[provider]]\nname = \"acme\"\nkey = \"acme.pub\"\n\n[[regulator]]\nname = \"cnil\"\nkey = \"cnil.pub\"\nproviders = [\"acme\"]\n",
    )
    .unwrap();
}

/// `knox serve` in `d` with `access.toml`: the server, its URL and the line that
/// announced it.
fn start(d: &std::path::Path) -> (Server, String, String) {
    start_with(d, &[])
}

/// [`start`] with more options.
pub(super) fn start_with(d: &std::path::Path, more: &[&str]) -> (Server, String, String) {
    let mut child = knox()
        .current_dir(d)
        .env("XDG_DATA_HOME", d.join("data"))
        .args([
            "serve",
            "--access",
            "access.toml",
            "--allow-simulated",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(more)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_owned();
    (Server(child), url, line)
}

/// `knox report` of acme's runs as the regulator cnil, as HTML.
fn exit_report(d: &std::path::Path, url: &str) -> String {
    let out = knox_in(
        d,
        &[
            "report",
            "--provider",
            "acme",
            "--to",
            url,
            "--key",
            "cnil.key",
            "--out",
            "exit.html",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(d.join("exit.html")).unwrap()
}

/// The bundles one `knox run` seals are one chain of its in-TEE key: a provider who
/// submits all but one leaves a gap the regulator's exit report names; the run handed
/// over afterwards shows as late.
#[test]
fn a_run_withheld_from_a_knox_run_shows_in_the_exit_report() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| knox_in(d, args);
    acme_and_cnil(d);
    let (_server, url, _) = start(d);
    let out = run(&["run", "--workload", "st-sa", "--flows", "3", "--out", "out"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The bundles by their number in the key's chain.
    let mut by_seq: Vec<(u64, String)> = std::fs::read_dir(d.join("out"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let b: knox_types::bundle::Bundle =
                serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            Some((b.summary.key_chain?.seq, format!("out/{name}")))
        })
        .collect();
    by_seq.sort();
    let seqs: Vec<u64> = by_seq.iter().map(|(n, _)| *n).collect();
    assert_eq!(seqs, (0..by_seq.len() as u64).collect::<Vec<_>>());
    assert!(by_seq.len() >= 3, "{by_seq:?}");
    let submit = |file: &str| {
        let out = run(&["submit", file, "--to", &url, "--key", "acme.key"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let report = || exit_report(d, &url);
    // Run 1 withheld.
    for (n, f) in &by_seq {
        if *n != 1 {
            submit(f);
        }
    }
    let html = report();
    assert!(html.contains("class=\"gap\""), "{html}");
    assert!(
        html.contains("1 missing: 1;") || html.contains("1 missing: 1<"),
        "{html}"
    );
    // Handed over afterwards: no number missing, but late.
    submit(&by_seq[1].1);
    let html = report();
    assert!(!html.contains("missing: 1"), "{html}");
    assert!(html.contains("handed over late: 1 (after"), "{html}");
}

#[test]
fn run_streams_each_run_live_then_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| knox_in(d, args);
    acme_and_cnil(d);
    let (_server, url, _) = start(d);
    let out = run(&[
        "run",
        "--workload",
        "mt-sa-seq:2",
        "--flows",
        "4",
        "--out",
        "out",
        "--stream-to",
        &url,
        "--stream-key",
        "acme.key",
    ]);
    submitted_all(&out, 2);
    // Each run is a live run of the store, complete, every node streamed and verified.
    assert_eq!(streamed_complete(d, &d.join("out"), &url), 2);
    // The process's key was announced before its first run (the file kept in --out),
    // and its runs follow the announcement, numbered from 1.
    assert_eq!(announcements(&d.join("out")), 1);
    let html = exit_report(d, &url);
    assert!(
        html.contains("announced; 2 runs handed over, numbered 1–2; no gap"),
        "{html}"
    );
    assert!(html.contains("2 runs; 2 complete"), "{html}");
}

/// The key announcements (`key-*.announcement.json`) written in `out`.
fn announcements(out: &std::path::Path) -> usize {
    std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("key-") && name.ends_with(".announcement.json")
        })
        .count()
}

/// A run over the user's own manifest streams like a workload's: live, then sealed.
#[test]
fn a_manifest_run_streams_live_then_sealed() {
    use super::toolkit::{BANK, plan, write};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    acme_and_cnil(d);
    let (_server, url, _) = start(d);
    write(d, "bank.toml", BANK);
    write(d, "plan.json", &plan(20));
    write(
        d,
        "responses.json",
        r#"{"bank.get_balance": {"balance": 120}, "bank.send_money": {"ok": true}}"#,
    );
    let out = knox_in(
        d,
        &[
            "run",
            "--manifest",
            "bank.toml",
            "--prompt",
            "Check my main balance and send 20 to DE001",
            "--plan",
            "plan.json",
            "--responses",
            "responses.json",
            "--out",
            "out",
            "--stream-to",
            &url,
            "--stream-key",
            "acme.key",
        ],
    );
    submitted_all(&out, 1);
    assert_eq!(streamed_complete(d, &d.join("out"), &url), 1);
}

/// A streaming command ended well, having announced its key and submitted `n` sealed
/// bundles, and failed none.
fn submitted_all(out: &std::process::Output, n: usize) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && err.contains("1 key announcement,")
            && err.contains(&format!("{n} sealed bundles submitted"))
            && !err.contains("failed"),
        "{err}{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Checks every journal in `out` against the store at `url` (as the regulator `cnil`):
/// its live run — named by the provider, the run id and the run's own key — is
/// complete, every node line received and verified. Returns how many runs it checked.
fn streamed_complete(d: &std::path::Path, out: &std::path::Path, url: &str) -> usize {
    let mut runs = 0;
    for e in std::fs::read_dir(out).unwrap().flatten() {
        if !e.file_name().to_string_lossy().ends_with(".journal.jsonl") {
            continue;
        }
        runs += 1;
        let (v, nodes) = live(d, &e.path(), url).unwrap();
        assert_eq!(v["status"], "complete", "{v}");
        assert_eq!(v["run"]["received"], nodes, "{v}");
        assert_eq!(v["run"]["verified"], nodes, "{v}");
        assert_eq!(v["run"]["conflicts"], 0, "{v}");
    }
    runs
}

/// The live run of `journal` as the store at `url` shows it to the regulator `cnil`,
/// and the node lines the journal holds now (its header and signed checkpoints aside:
/// the live store does not keep checkpoints); an error while the store has none.
fn live(
    d: &std::path::Path,
    journal: &std::path::Path,
    url: &str,
) -> Result<(serde_json::Value, usize), String> {
    let key = knox_attest::keyfile::decode(&std::fs::read(d.join("cnil.key")).unwrap()).unwrap();
    let cnil = knox_server::client::Client::new(url, key).unwrap();
    let acme = knox_attest::keyfile::decode(&std::fs::read(d.join("acme.key")).unwrap()).unwrap();
    let acme_id = knox_attest::key::key_id(&acme.public_bytes()).to_hex();
    let name = journal.file_name().unwrap().to_string_lossy().into_owned();
    let run_id = name.strip_suffix(".journal.jsonl").unwrap();
    let text = std::fs::read_to_string(journal).map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    let header: knox_types::bundle::JournalHeader =
        serde_json::from_str(lines.next().ok_or("no header yet")?).map_err(|e| e.to_string())?;
    let nodes = lines
        .filter(|l| serde_json::from_str::<knox_types::checkpoint::Checkpoint>(l).is_err())
        .count();
    let id =
        knox_server::live::live_id(&acme_id, run_id, &knox_server::ingest::run_key(&header.key));
    let v = cnil
        .ok("GET", &format!("/api/live/{id}"), b"")
        .map_err(|e| e.to_string())?;
    Ok((v, nodes))
}

/// Polls the live run of `journal` in the store at `url` until `done` holds of it and
/// the journal's node count (30 s at most); returns what the store showed.
fn live_until(
    d: &std::path::Path,
    journal: &std::path::Path,
    url: &str,
    done: impl Fn(&serde_json::Value, usize) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        if let Ok((v, nodes)) = live(d, journal, url)
            && done(&v, nodes)
        {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the store never showed the run so: {:?}",
            live(d, journal, url)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The MCP gateway's filesystem fixture (its folder holds acme's and cnil's keys) and
/// a `knox serve` there: the fixture, the server and its URL.
fn mcp_fixture_and_store() -> (super::gateway_mcp::Fixture, Server, String) {
    let fx = super::gateway_mcp::Fixture::new(&super::gateway_mcp::installed());
    acme_and_cnil(fx.path());
    let (server, url, _) = start(fx.path());
    (fx, server, url)
}

/// `knox gateway mcp` in front of the filesystem fixture in `d` (`fs.toml`,
/// `servers.toml`), with `args`, into `out`, streaming to `url` signed by acme.
fn mcp_gateway(d: &std::path::Path, out: &std::path::Path, url: &str, args: &[&str]) -> Server {
    Server(
        knox()
            .current_dir(d)
            .env("XDG_DATA_HOME", d.join("data"))
            .args([
                "gateway",
                "mcp",
                "--manifest",
                "fs.toml",
                "--mcp",
                "servers.toml",
            ])
            .args(args)
            .arg("--out")
            .arg(out)
            .args(["--stream-to", url, "--stream-key", "acme.key"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Stops a serving gateway with SIGUSR1: see [`ended_having_submitted`].
fn stopped_having_submitted(gw: &mut Server, err: impl std::io::Read, n: usize) {
    assert!(
        gw.0.try_wait().unwrap().is_none(),
        "the gateway still serves"
    );
    let pid = gw.0.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-USR1", &pid])
            .status()
            .unwrap()
            .success()
    );
    ended_having_submitted(gw, err, n);
}

/// Waits for a gateway to end and checks it ended well, having announced one key and
/// submitted `n` sealed bundles, and failed none (what is left of its standard error
/// is read from `err`).
fn ended_having_submitted(gw: &mut Server, mut err: impl std::io::Read, n: usize) {
    let status = super::gateway_mcp::wait(&mut gw.0, std::time::Duration::from_secs(60));
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(
        status.success()
            && rest.contains("1 key announcement,")
            && rest.contains(&format!("{n} sealed bundles submitted"))
            && !rest.contains("failed"),
        "{rest}"
    );
}

/// `knox gateway mcp --stream-to`, a stdio session in front of npm's filesystem
/// server: while the client works the session is in the store *in progress*, every
/// node so far received and verified; the client's off-plan write is blocked; when the
/// client hangs up the session is sealed, its bundle submitted at once, and the live
/// run is complete.
#[test]
fn an_mcp_gateway_session_streams_live_then_sealed() {
    use std::io::Write as _;
    let (fx, _server, url) = mcp_fixture_and_store();
    let d = fx.path();
    let out = d.join("out");
    let mut gw = mcp_gateway(
        d,
        &out,
        &url,
        &["--prompt", "Read my notes", "--plan", "plan.json"],
    );
    let mut stdin = gw.0.stdin.take().unwrap();
    let mut lines = BufReader::new(gw.0.stdout.take().unwrap()).lines();
    let mut send = |v: &str| {
        stdin.write_all(v.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"scripted","version":"1"}}}"#,
    );
    let Some(Ok(init)) = lines.next() else {
        let mut err = String::new();
        std::io::Read::read_to_string(gw.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        if err.contains("kernel sandbox") && std::env::var_os("CI").is_none() {
            eprintln!("skipping: kernel sandbox unavailable here: {err}");
            return;
        }
        panic!("the gateway did not answer: {err}");
    };
    assert!(init.contains("knox-gateway"), "{init}");
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let notes = d.join("docs/notes.txt");
    send(
        &serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "fs.read_text_file", "arguments": {"path": notes}}})
        .to_string(),
    );
    let read: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_ne!(read["result"]["isError"], true, "{read}");
    // Live: the session is in the store while it runs, every node so far verified.
    let journal = super::support::run_file(&out, "mcp-stdio", 0, ".journal.jsonl");
    let seen = live_until(d, &journal, &url, |v, nodes| {
        v["status"] == "in progress" && nodes > 0 && v["run"]["received"] == nodes
    });
    assert_eq!(seen["run"]["verified"], seen["run"]["received"], "{seen}");
    send(
        &serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
            "params": {"name": "fs.write_file",
                       "arguments": {"path": d.join("docs/secrets.txt"), "content": "pwned"}}})
        .to_string(),
    );
    let write: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(write["result"]["isError"], true, "{write}");
    // The client hangs up: the session is sealed and its bundle submitted.
    drop(stdin);
    let err = gw.0.stderr.take().unwrap();
    ended_having_submitted(&mut gw, err, 1);
    assert!(!d.join("docs/secrets.txt").exists());
    assert_eq!(streamed_complete(d, &out, &url), 1);
}

/// #35: a gateway killed while its session runs never seals it, yet the store shows
/// the session: its key was announced when the session opened, and the regulator's
/// exit report names the key announced with no run handed over. The announcement kept
/// in `--out` verifies on its own, and submitting it again changes nothing.
#[test]
fn a_gateway_killed_mid_session_shows_as_a_key_announced_and_never_followed() {
    use std::io::Write as _;
    let (fx, _server, url) = mcp_fixture_and_store();
    let d = fx.path();
    let out = d.join("out");
    let mut gw = mcp_gateway(
        d,
        &out,
        &url,
        &["--prompt", "Read my notes", "--plan", "plan.json"],
    );
    let mut stdin = gw.0.stdin.take().unwrap();
    let mut lines = BufReader::new(gw.0.stdout.take().unwrap()).lines();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"scripted","version":"1"}}}"#)
        .unwrap();
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let Some(Ok(init)) = lines.next() else {
        let mut err = String::new();
        std::io::Read::read_to_string(gw.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        if err.contains("kernel sandbox") && std::env::var_os("CI").is_none() {
            eprintln!("skipping: kernel sandbox unavailable here: {err}");
            return;
        }
        panic!("the gateway did not answer: {err}");
    };
    assert!(init.contains("knox-gateway"), "{init}");
    // The session is open: its key announced. Killed before anything is sealed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let unfollowed = "announced, and no run of it handed over";
    let html = loop {
        let html = exit_report(d, &url);
        if html.contains(unfollowed) || std::time::Instant::now() > deadline {
            break html;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    gw.0.kill().unwrap();
    gw.0.wait().unwrap();
    assert!(html.contains(unfollowed), "{html}");
    let html = exit_report(d, &url);
    assert!(
        html.contains(unfollowed) && html.contains("class=\"gap\""),
        "{html}"
    );
    assert!(html.contains("0 runs;"), "{html}");
    assert_eq!(announcements(&out), 1);
    let file = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".announcement.json"))
        .unwrap();
    let verified = knox()
        .arg("verify")
        .arg(&file)
        .arg("--allow-simulated")
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    let again = knox_in(
        d,
        &[
            "submit",
            file.to_str().unwrap(),
            "--to",
            &url,
            "--key",
            "acme.key",
        ],
    );
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success() && text.contains("key-announcement COMPLETE (already stored)"),
        "{text}{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

/// `knox gateway mcp --http --stream-to`: a session the user opens and closes over
/// HTTP is submitted as soon as it is sealed, while the gateway goes on serving.
#[test]
fn an_http_mcp_gateway_submits_each_session_as_it_is_sealed() {
    let (fx, _server, url) = mcp_fixture_and_store();
    let d = fx.path();
    let out = d.join("out");
    let mut gw = mcp_gateway(d, &out, &url, &["--http", "127.0.0.1:0"]);
    let mut lines = BufReader::new(gw.0.stdout.take().unwrap()).lines();
    let listening: serde_json::Value =
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    let sessions = listening["open_sessions"].as_str().unwrap().to_owned();
    // The user opens a session with the plan, then closes it (no call made).
    let user = r#"
import json, sys, urllib.request
url, token, plan = sys.argv[1], open(sys.argv[2]).read().strip(), json.load(open(sys.argv[3]))
def call(method, u, body=None):
    r = urllib.request.Request(u, method=method, data=json.dumps(body).encode() if body else None,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + token})
    with urllib.request.urlopen(r) as resp:
        return json.loads(resp.read())
opened = call("POST", url, {"prompt": "Read my notes", "plan": plan})
print(json.dumps(call("DELETE", url + "/" + opened["session"])))
"#;
    let o = std::process::Command::new(super::gateway_mcp::installed().join("venv/bin/python"))
        .args(["-c", user, &sessions])
        .arg(listening["token_file"].as_str().unwrap())
        .arg(d.join("plan.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let end: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(end["verified"], "complete", "{end}");
    let journal = out.join(format!("{}.journal.jsonl", end["run_id"].as_str().unwrap()));
    live_until(d, &journal, &url, |v, _| v["status"] == "complete");
    let err = gw.0.stderr.take().unwrap();
    stopped_having_submitted(&mut gw, err, 1);
    assert_eq!(streamed_complete(d, &out, &url), 1);
}

/// `knox gateway openai --stream-to`: the `openai` client's conversation through the
/// proxy to a scripted upstream streams into the store; once idle the conversation is
/// sealed and its bundle submitted while the proxy still serves (the live run is
/// complete before the proxy is stopped).
#[test]
fn an_openai_gateway_conversation_is_submitted_as_soon_as_it_is_sealed() {
    use super::gateway_openai as oa;
    let py = oa::python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    acme_and_cnil(d);
    let (_server, url, _) = start(d);
    oa::bank(d);
    let (_up, upstream) = oa::upstream(&py, d);
    let out = d.join("out");
    let mut gw = Server(
        knox()
            .current_dir(d)
            .env("XDG_DATA_HOME", d.join("data"))
            .args([
                "gateway",
                "openai",
                "--manifest",
                "bank.toml",
                "--plan",
                "plan.json",
            ])
            .args(["--upstream", &upstream])
            .args(["--listen", "127.0.0.1:0", "--idle-secs", "1", "--out"])
            .arg(&out)
            .args(["--stream-to", &url, "--stream-key", "acme.key"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Standard error stays open to the end: the stream's summary is written there.
    let mut err = BufReader::new(gw.0.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let base = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let r = oa::client(&py, "openai_sdk.py", &base, "sdk", false);
    assert_eq!(r["final"], "Paid DE001 20.", "{r}");
    let journal = super::support::run_file(&out, "conv", 0, ".journal.jsonl");
    live_until(d, &journal, &url, |v, _| v["status"] == "complete");
    stopped_having_submitted(&mut gw, err, 1);
    assert_eq!(streamed_complete(d, &out, &url), 1);
}

/// `knox demo --stream-to`, twice into one store: the second demo reuses the first's
/// run ids (the same workload, the same executors), yet each execution is its own live
/// run (its own key), complete, with no line of one taken for a contradiction of the
/// other's.
#[test]
fn the_demo_streams_live_twice_and_each_execution_is_its_own_complete_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| knox_in(d, args);
    acme_and_cnil(d);
    let (_server, url, _) = start(d);
    for out in ["demo1", "demo2"] {
        let o = run(&[
            "demo",
            "--out",
            out,
            "--stream-to",
            &url,
            "--stream-key",
            "acme.key",
        ]);
        submitted_all(&o, 2);
    }
    assert_eq!(streamed_complete(d, &d.join("demo1"), &url), 2);
    assert_eq!(streamed_complete(d, &d.join("demo2"), &url), 2);
}

#[test]
fn serve_submit_login_and_report_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| knox_in(d, args);
    acme_and_cnil(d);
    let (_server, url, line) = start(d);
    assert!(line.contains("sqlite store"), "{line}");
    let server_dir = d.join("data/knox/server");
    assert!(
        server_dir.join("store.db").is_file()
            && server_dir.join("log.key").is_file()
            && server_dir.join("log.pub").is_file()
    );

    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../verify/tests/fixtures/topologies/st-sa.json"
    );
    let good = std::fs::read_to_string(fixture).unwrap();
    std::fs::write(d.join("good.json"), &good).unwrap();
    std::fs::write(
        d.join("bad.json"),
        good.replacen("\"agent\":\"agent-0\"", "\"agent\":\"agent-9\"", 1),
    )
    .unwrap();
    let out = run(&[
        "submit",
        "good.json",
        "--to",
        &url,
        "--key",
        "acme.key",
        "--log-key",
        "data/knox/server/log.pub",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("COMPLETE") && text.contains("inclusion proof checked"),
        "{text}"
    );
    let out = run(&[
        "submit", "bad.json", "--to", &url, "--key", "acme.key", "--json",
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["outcome"], "tampered");
    // A regulator's key does not submit; an unknown key is refused.
    let out = run(&["submit", "good.json", "--to", &url, "--key", "cnil.key"]);
    assert_eq!(out.status.code(), Some(69));
    assert!(run(&["keygen", "--out", "stranger"]).status.success());
    let out = run(&["submit", "good.json", "--to", &url, "--key", "stranger.key"]);
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown key"));

    let out = run(&["login", "--to", &url, "--key", "cnil.key"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("{url}/login?token=")));
    let html = exit_report(d, &url);
    assert!(
        html.contains("2 runs; 1 complete, 0 prefix, 1 tampered"),
        "{html}"
    );
    let out = run(&[
        "report",
        "--provider",
        "acme",
        "--to",
        &url,
        "--key",
        "cnil.key",
        "--pdf",
        "--out",
        "exit.pdf",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pdf = std::fs::read(d.join("exit.pdf")).unwrap();
    assert!(pdf.starts_with(b"%PDF-"));
    match std::process::Command::new("pdftotext")
        .arg(d.join("exit.pdf"))
        .arg("-")
        .output()
    {
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("2 runs; 1 complete, 0 prefix, 1 tampered"),
                "{text}"
            );
        }
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("no pdftotext under CI=true ({e}): install poppler-utils")
        }
        Err(e) => eprintln!("SKIPPED the PDF's text: no pdftotext ({e})"),
    }
    for cmd in ["serve", "submit", "login", "report"] {
        let out = knox().args([cmd, "--help"]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Exit codes:"),
            "{cmd}"
        );
    }
}
