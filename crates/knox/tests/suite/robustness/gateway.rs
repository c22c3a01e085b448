//! The MCP gateway in the robustness campaign: `knox gateway mcp --http 127.0.0.1:0`
//! (the real CLI) in front of npm's filesystem server, confined in the kernel sandbox
//! (`suite::gateway_mcp`'s fixture, installed by `scripts/mcp-servers`), with several
//! sessions opened at once by the user (`POST /knox/sessions` with a plan) and driven
//! by scripted agents speaking Streamable HTTP.
//!
//! - **kill -9 mid-sessions**: each agent makes rounds of calls — the planned read
//!   (allowed, served upstream), the injected write (blocked by `trajectory`), another
//!   server's tool (blocked by `input`) and the planned read of a file outside the
//!   server's needs (allowed by Knox, refused by the kernel) — and the gateway is
//!   killed at a random moment of that work. Every evidence file left verifies
//!   `complete` or `prefix`; no process of the killed gateway outlives it; no cgroup
//!   pool of it is left once the next gateway has started.
//! - **a server that ignores the end of its input** (a Python SDK server kept alive
//!   by a thread of its own): killed with the gateway by the kernel, with no later
//!   start — the leak this probe found (the filesystem server above only ends because
//!   it reads the end of its input), fixed in `knox-sandbox`.
//! - **concurrent sessions**: sessions reading files of their own through one
//!   gateway: each bundle verifies `complete`, names its own run, holds exactly its
//!   own calls and no node of another session, and its journal holds its nodes.
//!
//! Without the MCP servers the tests fail under `CI` and are skipped, loudly, otherwise.
//!
//! How the processes of a killed gateway are found: at the kill moment the gateway is
//! stopped (`SIGSTOP`, so it can start nothing more), then every process descending
//! from it (`/proc/*/stat` parent links) and every process in its cgroup pools
//! (`cgroup.procs` of each slot under Knox's cgroup parent) is noted with its start
//! time, and only then is it sent `SIGKILL`. A noted process still running (same pid,
//! same start time, not a zombie) after [`GRACE`] has survived its gateway.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use knox_types::apm::TrajectoryMode;
use serde_json::{Value, json};

use super::super::gateway_mcp::{CANARY, Fixture};
use super::super::mcp_http::{ANSWER, McpClient, User};
use super::super::support::knox;
use super::{Found, Moments, first_journal, kills_per_mode, pools_of, wait_bounded};

/// Sessions open at once in each killed gateway.
const SESSIONS: usize = 3;
/// Rounds of four calls each agent makes in the timed run (the window is how long
/// they take).
const ROUNDS: usize = 3;
/// Most rounds an agent makes in a killed gateway: it works until the kill (far
/// longer than the window), bounded.
const MAX_ROUNDS: usize = 200;
/// How long the processes of a killed gateway get to end.
const GRACE: Duration = Duration::from_secs(10);

/// The installed servers, or `None` (skipped, loudly) outside CI.
fn servers() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.mcp-servers");
    if p.join(".installed").exists() {
        return Some(std::fs::canonicalize(p).unwrap());
    }
    let msg = "the MCP servers of the gateway kill mode are missing: run scripts/mcp-servers";
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("\n!!!!!!!!!! SKIPPED: {msg} !!!!!!!!!!\n");
    None
}

/// A running `knox gateway mcp --http` and what it announced.
struct Gateway {
    child: Child,
    user: User,
    /// Its standard output after the first line (one line per sealed session), read
    /// on a thread so that the pipe never fills.
    _lines: mpsc::Receiver<String>,
}

impl Gateway {
    /// Starts the gateway over `fx` into `out`; `None` (skipped) when the kernel
    /// sandbox cannot start here, outside CI.
    fn start(fx: &Fixture, out: &Path) -> Option<Self> {
        Self::start_in(fx.path(), "fs.toml", out)
    }

    /// Starts the gateway in `dir` with its `manifest` and `servers.toml`.
    fn start_in(dir: &Path, manifest: &str, out: &Path) -> Option<Self> {
        let log = std::fs::File::create(out.with_extension("stderr")).unwrap();
        let mut child = knox()
            .current_dir(dir)
            .args(["gateway", "mcp", "--manifest", manifest])
            .args(["--mcp", "servers.toml", "--http", "127.0.0.1:0", "--out"])
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        let Ok(first) = lines.recv_timeout(ANSWER) else {
            let _ = child.kill();
            let _ = child.wait();
            let err = std::fs::read_to_string(out.with_extension("stderr")).unwrap_or_default();
            if err.contains("kernel sandbox") && std::env::var_os("CI").is_none() {
                eprintln!("skipping: kernel sandbox unavailable here: {err}");
                return None;
            }
            panic!("the gateway did not start: {err}");
        };
        let first: Value = serde_json::from_str(&first).unwrap();
        let addr = first["listening"]
            .as_str()
            .and_then(|u| u.strip_prefix("http://"))
            .unwrap()
            .to_owned();
        let token = std::fs::read_to_string(out.join("session-token")).unwrap();
        Some(Self {
            child,
            user: User { addr, token },
            _lines: lines,
        })
    }

    /// SIGUSR1: every session sealed, then the gateway ends; its status.
    fn stop(mut self) -> std::process::ExitStatus {
        signal(self.child.id(), "-USR1");
        wait_bounded(&mut self.child, "the stopped gateway")
    }
}

/// What one scripted agent did before it stopped.
#[derive(Debug, Default)]
struct Agent {
    run_id: String,
    session: String,
    calls: u64,
    /// An error that ended it early (the gateway was killed, or a real failure).
    error: Option<String>,
    /// An answer that contradicts the policy (a blocked call served, a canary read).
    wrong: Vec<String>,
}

/// One agent of the kill mode: opens its session and makes `rounds` rounds of the
/// four calls, checking each answer it gets.
fn agent(user: &User, dir: &Path, rounds: usize) -> Agent {
    let mut a = Agent::default();
    if let Err(e) = agent_rounds(user, dir, rounds, &mut a) {
        a.error = Some(e.to_string());
    }
    a
}

fn agent_rounds(user: &User, dir: &Path, rounds: usize, a: &mut Agent) -> std::io::Result<()> {
    let opened = user.open(&Fixture::plan_of(dir))?;
    a.run_id = opened["run_id"].as_str().unwrap_or_default().to_owned();
    a.session = opened["session"].as_str().unwrap_or_default().to_owned();
    let mut c = McpClient::connect(opened["mcp_url"].as_str().unwrap_or_default())?;
    let notes = dir.join("docs/notes.txt");
    let report = dir.join("reports/q3.txt");
    let secrets = dir.join("docs/secrets.txt");
    // The gateway's tolerant trajectory runs a planned read its planned once and a
    // bounded number of times more; past that the trajectory guard blocks it.
    let runs = 1 + TrajectoryMode::DEFAULT_READ_REPEATS as usize;
    for round in 0..rounds {
        let r = c.call("fs.read_text_file", json!({"path": notes}))?;
        a.calls += 1;
        let served = r["isError"] != true && r.to_string().contains("IMPORTANT SYSTEM NOTE");
        let refused = r["structuredContent"]["knox"]["guard"] == "trajectory";
        if (round < runs && !served) || (round >= runs && !refused) {
            a.wrong
                .push(format!("the planned read, run {}: {r}", round + 1));
        }
        let r = c.call(
            "fs.write_file",
            json!({"path": secrets, "content": "pwned"}),
        )?;
        a.calls += 1;
        if r["structuredContent"]["knox"]["guard"] != "trajectory" {
            a.wrong
                .push(format!("the injected write was not blocked: {r}"));
        }
        let r = c.call("memory.read_graph", json!({}))?;
        a.calls += 1;
        if r["structuredContent"]["knox"]["guard"] != "input" {
            a.wrong
                .push(format!("another server's tool was not blocked: {r}"));
        }
        let r = c.call("fs.read_text_file", json!({"path": report}))?;
        a.calls += 1;
        if r["isError"] != true || r.to_string().contains(CANARY) {
            a.wrong
                .push(format!("the kernel did not keep the server out: {r}"));
        }
    }
    Ok(())
}

/// `(parent pid, start time, state)` of every process, from `/proc`.
fn processes() -> HashMap<u32, (u32, u64, char)> {
    let mut all = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return all;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(stat) = stat_of(pid) {
            all.insert(pid, stat);
        }
    }
    all
}

/// `(parent pid, start time, state)` of `pid`: fields 4, 22 and 3 of its stat line
/// (after the command name's last `)`).
fn stat_of(pid: u32) -> Option<(u32, u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some((
        f.get(1)?.parse().ok()?,
        f.get(19)?.parse().ok()?,
        f.first()?.chars().next()?,
    ))
}

/// The processes of the gateway `pid` (stopped): its descendants and every process
/// in its cgroup pools, as `(pid, start time)`.
fn processes_of(pid: u32) -> BTreeSet<(u32, u64)> {
    let all = processes();
    let mut found = BTreeSet::new();
    let mut parents = vec![pid];
    while let Some(p) = parents.pop() {
        for (child, (ppid, start, _)) in &all {
            if *ppid == p && found.insert((*child, *start)) {
                parents.push(*child);
            }
        }
    }
    for pool in pools_of(pid) {
        let mut dirs = vec![pool];
        while let Some(d) = dirs.pop() {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            for p in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
                if let Some((_, start, _)) = all.get(&p).or(stat_of(p).as_ref()) {
                    found.insert((p, *start));
                }
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                dirs.extend(rd.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()));
            }
        }
    }
    found
}

/// Whether the noted process still runs (not a zombie, not a reused pid).
fn running((pid, start): (u32, u64)) -> bool {
    stat_of(pid).is_some_and(|(_, s, state)| s == start && !matches!(state, 'Z' | 'X' | 'x'))
}

/// Sends `signal` to `pid` with `kill(1)`.
fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status();
}

/// One gateway with `SESSIONS` agents at work: the agents' threads.
fn start_agents(gw: &Gateway, fx: &Fixture, rounds: usize) -> Vec<std::thread::JoinHandle<Agent>> {
    (0..SESSIONS)
        .map(|_| {
            let (user, dir) = (gw.user.clone(), fx.path().to_owned());
            std::thread::spawn(move || agent(&user, &dir, rounds))
        })
        .collect()
}

#[test]
fn kill_9_of_the_mcp_gateway_mid_sessions_leaves_verifiable_evidence_and_no_process() {
    let Some(servers) = servers() else { return };
    let fx = Fixture::new(&servers);
    let manifest = fx.path().join("fs.toml");
    let verify_args = [std::ffi::OsStr::new("--manifest"), manifest.as_os_str()];
    let per_mode = kills_per_mode();
    let mut moments = Moments::new("kill gateway-sessions");
    let mut found = Found::default();
    let mut wrong = Vec::new();

    // The window: how long the agents' work takes from the first journal, measured
    // on one whole run (sealed by SIGUSR1; every bundle complete).
    let out = fx.path().join("timed");
    let Some(mut gw) = Gateway::start(&fx, &out) else {
        return;
    };
    let agents = start_agents(&gw, &fx, ROUNDS);
    first_journal(&out, &mut gw.child);
    let from = Instant::now();
    for a in agents {
        let a = a.join().unwrap();
        assert!(a.error.is_none() && a.wrong.is_empty(), "{a:?}");
        assert_eq!(a.calls, 4 * ROUNDS as u64, "{a:?}");
    }
    let window = from.elapsed();
    assert!(
        gw.stop().success(),
        "the timed gateway's sessions did not all verify"
    );
    found.add_with(&out, &verify_args);
    assert_eq!(found.complete, SESSIONS as u64, "{found:?}");

    let (mut tried, mut cut, mut calls, mut noted) = (0u64, 0u64, 0u64, 0usize);
    // The longest a killed gateway's processes took to end (all of them, or GRACE).
    let mut gone = Duration::ZERO;
    let mut killed = Vec::new();
    let mut survived = Vec::new();
    for i in 0..per_mode * 3 {
        if tried == per_mode {
            break;
        }
        let out = fx.path().join(format!("kill-{i}"));
        let Some(mut gw) = Gateway::start(&fx, &out) else {
            return;
        };
        let agents = start_agents(&gw, &fx, MAX_ROUNDS);
        first_journal(&out, &mut gw.child);
        std::thread::sleep(moments.below(window));
        let pid = gw.child.id();
        if gw.child.try_wait().unwrap().is_some() {
            // It ended on its own before the moment: not a kill.
            for a in agents {
                let _ = a.join();
            }
            continue;
        }
        // Stopped first, so that it starts nothing while its processes are noted.
        signal(pid, "-STOP");
        let procs = processes_of(pid);
        let _ = gw.child.kill();
        let killed_at = Instant::now();
        let _ = gw.child.wait();
        let deadline = Instant::now() + GRACE;
        while procs.iter().any(|p| running(*p)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        gone = gone.max(killed_at.elapsed());
        tried += 1;
        killed.push(pid);
        noted += procs.len();
        survived.extend(procs.into_iter().filter(|p| running(*p)));
        for a in agents {
            let a = a.join().unwrap();
            calls += a.calls;
            cut += u64::from(a.error.is_some());
            wrong.extend(a.wrong);
        }
        found.add_with(&out, &verify_args);
    }
    assert!(
        per_mode == 0 || (tried > 0 && noted > 0),
        "no kill found a process of the gateway to watch ({tried} kills): the probe is vacuous"
    );
    // The next confined start reclaims the pools of dead owners.
    let mut leaked: Vec<PathBuf> = Vec::new();
    if !killed.is_empty() {
        let out = fx.path().join("after");
        let gw = Gateway::start(&fx, &out).unwrap();
        for pid in &killed {
            leaked.extend(pools_of(*pid));
        }
        assert!(gw.stop().success());
    }
    assert!(
        !fx.docs().join("secrets.txt").exists(),
        "the injected write ran"
    );
    eprintln!(
        "robustness: kill gateway-sessions tried={tried} window_ms={} sessions={} calls={calls} cut={cut} files={} complete={} prefix={} tampered={} unreadable={} empty={} processes={noted} gone_ms={} survived={} leaked={}",
        window.as_millis(),
        tried * SESSIONS as u64,
        found.files,
        found.complete,
        found.prefix,
        found.tampered.len(),
        found.unreadable.len(),
        found.empty.len(),
        gone.as_millis(),
        survived.len(),
        leaked.len()
    );
    assert!(
        found.tampered.is_empty()
            && found.unreadable.is_empty()
            && found.empty.is_empty()
            && survived.is_empty()
            && leaked.is_empty()
            && wrong.is_empty(),
        "{found:?}\nsurvived {survived:?}\nleaked {leaked:?}\nwrong answers {wrong:?}"
    );
}

/// Sessions at once through one CLI gateway, each reading a file of its own: nothing
/// lost, nothing mixed.
#[test]
fn concurrent_gateway_sessions_each_hold_only_their_own_calls() {
    use std::os::unix::fs::PermissionsExt as _;
    let Some(servers) = servers() else { return };
    let fx = Fixture::new(&servers);
    let n = 4;
    let reads = 3;
    let own = |i: usize| fx.docs().join(format!("s{i}.txt"));
    for i in 0..n {
        std::fs::write(own(i), format!("secret-of-session-{i}")).unwrap();
        std::fs::set_permissions(own(i), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = fx.path().join("out");
    let Some(gw) = Gateway::start(&fx, &out) else {
        return;
    };
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let (user, file) = (gw.user.clone(), own(i));
            std::thread::spawn(move || {
                let plan =
                    json!({"calls": [{"tool": "fs.read_text_file", "params": {"path": file}}]});
                let opened = user.open(&plan).unwrap();
                let mut c = McpClient::connect(opened["mcp_url"].as_str().unwrap()).unwrap();
                let mut texts = Vec::new();
                for _ in 0..reads {
                    let r = c.call("fs.read_text_file", json!({"path": file})).unwrap();
                    texts.push(r.to_string());
                }
                let r = c
                    .call(
                        "fs.write_file",
                        json!({"path": file, "content": format!("written-by-session-{i}")}),
                    )
                    .unwrap();
                (opened, texts, r)
            })
        })
        .collect();
    let mut sessions = Vec::new();
    for (i, t) in threads.into_iter().enumerate() {
        let (opened, texts, write) = t.join().unwrap();
        for t in &texts {
            assert!(t.contains(&format!("secret-of-session-{i}")), "{i}: {t}");
        }
        assert_eq!(write["structuredContent"]["knox"]["guard"], "trajectory");
        sessions.push(opened);
    }
    let ends: Vec<Value> = sessions
        .iter()
        .map(|s| gw.user.close(s["session"].as_str().unwrap()))
        .collect();
    assert!(gw.stop().success());
    let mut found = Found::default();
    let manifest = fx.path().join("fs.toml");
    found.add_with(
        &out,
        &[std::ffi::OsStr::new("--manifest"), manifest.as_os_str()],
    );
    let mut mixed = Vec::new();
    for (i, (opened, end)) in sessions.iter().zip(&ends).enumerate() {
        let run = opened["run_id"].as_str().unwrap();
        assert_eq!(end["run_id"], run, "{end}");
        assert_eq!(end["verified"], "complete", "{end}");
        assert_eq!(end["calls"], reads + 1, "{end}");
        assert_eq!(end["blocked"], 1, "{end}");
        let bundle = super::super::support::read_json(&out.join(format!("{run}.json")));
        assert_eq!(bundle["run_id"], run);
        let nodes = bundle["nodes"].as_array().unwrap();
        let calls: Vec<&Value> = nodes.iter().filter(|n| n["kind"] == "tool_call").collect();
        let outputs: Vec<&Value> = nodes
            .iter()
            .filter(|n| n["kind"] == "tool_output")
            .collect();
        assert_eq!(calls.len(), reads + 1, "{run}: its calls, all of them");
        assert_eq!(outputs.len(), reads, "{run}: its reads' outputs");
        for o in &outputs {
            assert!(
                o.to_string().contains(&format!("secret-of-session-{i}")),
                "{o}"
            );
        }
        // No node of another session.
        for node in nodes {
            let text = node.to_string();
            for j in (0..n).filter(|j| *j != i) {
                if text.contains(&format!("s{j}.txt")) || text.contains(&format!("session-{j}")) {
                    mixed.push(format!("{run}: a node of session {j}: {text}"));
                }
            }
        }
        // The journal holds the bundle's nodes, in order.
        let journal = std::fs::read_to_string(out.join(format!("{run}.journal.jsonl"))).unwrap();
        let header: Value = serde_json::from_str(journal.lines().next().unwrap()).unwrap();
        assert_eq!(header["run_id"], run);
        let lines: Vec<Value> = journal
            .lines()
            .skip(1)
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|l: &Value| l.get("seq").is_some())
            .collect();
        assert_eq!(&lines, nodes, "{run}: the journal's nodes are the bundle's");
    }
    eprintln!(
        "robustness: concurrent gateway-sessions sessions={n} calls={} bundles={} files={} complete={} prefix={} tampered={} unreadable={} mixed={}",
        n * (reads + 1),
        sessions.len(),
        found.files,
        found.complete,
        found.prefix,
        found.tampered.len(),
        found.unreadable.len(),
        mixed.len()
    );
    assert!(mixed.is_empty(), "{mixed:#?}");
    assert!(
        found.tampered.is_empty() && found.unreadable.is_empty() && found.empty.is_empty(),
        "{found:?}"
    );
    // Every session's bundle and journal, and nothing else; every bundle complete.
    assert_eq!(found.files, 2 * n as u64, "{found:?}");
    assert_eq!(found.complete, n as u64, "{found:?}");
}

/// A Python SDK (FastMCP) server that does not end when its input does: a thread of
/// its own (bounded) keeps the interpreter alive after the end of standard input.
const LINGERING_SERVER: &str = r#"
import threading, time
from mcp.server.fastmcp import FastMCP
mcp = FastMCP("py")

@mcp.tool()
def echo(text: str) -> str:
    """Echo the text."""
    return text

threading.Thread(target=lambda: time.sleep(120)).start()
mcp.run()
"#;

/// Its manifest (`py.echo`).
const LINGERING_MANIFEST: &str = r#"format = "knox-toolkit/1"
description = "echo"
[runtime]
syscalls = ["read", "write", "exit_group"]
paths = []
limits = { max_processes = 64, max_file_bytes = 1048576, max_memory_bytes = 1073741824, cpu_seconds = 60, max_open_files = 1024 }
[[servers]]
name = "py"
needs = { profile = "offline" }
cost = 1
[[servers.tools]]
name = "py.echo"
description = "Echo the text"
effect = "read"
[servers.tools.inputSchema]
type = "object"
required = ["text"]
[servers.tools.inputSchema.properties]
text = { type = "string" }
"#;

/// The leak this probe found: a confined server that does not end with its input
/// outlived a SIGKILLed gateway (until a later confined start reclaimed its pool, if
/// one ever came). Now the kernel kills it with the gateway (the sandbox's
/// parent-death signal), with no later start.
#[test]
fn a_killed_gateway_takes_a_server_that_ignores_the_end_of_its_input_with_it() {
    let Some(servers) = servers() else { return };
    let dir = tempfile::tempdir().unwrap();
    super::super::gateway_mcp::python_server(
        &servers,
        dir.path(),
        "py",
        LINGERING_SERVER,
        LINGERING_MANIFEST,
    );
    let out = dir.path().join("out");
    let Some(mut gw) = Gateway::start_in(dir.path(), "py.toml", &out) else {
        return;
    };
    let plan = json!({"calls": [{"tool": "py.echo", "params": {"text": "hi"}}]});
    let opened = gw.user.open(&plan).unwrap();
    let mut c = McpClient::connect(opened["mcp_url"].as_str().unwrap()).unwrap();
    let r = c.call("py.echo", json!({"text": "hi"})).unwrap();
    assert_eq!(r["isError"], false, "{r}");
    let pid = gw.child.id();
    signal(pid, "-STOP");
    let procs = processes_of(pid);
    let _ = gw.child.kill();
    let _ = gw.child.wait();
    assert!(!procs.is_empty(), "the server's process was not found");
    let deadline = Instant::now() + GRACE;
    while procs.iter().any(|p| running(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let survived: Vec<(u32, u64)> = procs.into_iter().filter(|p| running(*p)).collect();
    for (p, _) in &survived {
        signal(*p, "-KILL"); // the test's own leftovers
    }
    assert!(
        survived.is_empty(),
        "the server outlived the killed gateway: {survived:?}"
    );
    // The next start reclaims the dead gateway's pool.
    let after = dir.path().join("after");
    let gw = Gateway::start_in(dir.path(), "py.toml", &after).unwrap();
    assert!(pools_of(pid).is_empty(), "{:?}", pools_of(pid));
    assert!(gw.stop().success());
}
