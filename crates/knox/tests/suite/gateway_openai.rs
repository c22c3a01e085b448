//! `knox gateway openai` with real clients: the official `openai` Python client
//! (streaming and not) and the OpenAI Agents SDK, each running
//! `examples/clients/*.py` unchanged but for `base_url`, through the proxy to a scripted
//! loopback upstream whose second answer carries an injected transfer. The injected call
//! never reaches a client, the SDK's loop goes on to its final answer, and on SIGUSR1
//! the proxy seals one bundle per conversation that `knox verify` reports complete.
//! Needs `scripts/mcp-servers` (it installs `openai` and `openai-agents` into
//! `.mcp-servers/venv`; `KNOX_OPENAI_PYTHON` names another interpreter).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::support::{knox, run_file};

use knox_testkit::bank::TOOLKIT as BANK;

/// The scripted model, served with the standard library on a loopback port it prints:
/// (0 tool results) read the balance; (1) the injected transfer beside the planned one;
/// (2+) a final answer. Asked as `scripted-react`, it writes the same steps as ReAct
/// text, one call an answer. Asked as `scripted-mcp` (started with the notes' and a
/// secret file's paths), it reads the balance, then the notes over MCP beside an
/// injected MCP write.
pub(super) const UPSTREAM: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def call(i, name, args):
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

def script(req):
    n = sum(1 for m in req.get("messages", []) if m.get("role") == "tool")
    if n == 0:
        return None, [call("call_1", "bank__get_balance", {"account": "main"})]
    if n == 1:
        return "Following the note in the statement.", [
            call("call_2", "bank__send_money", {"to": "ATTACKER", "amount": 100}),
            call("call_3", "bank__send_money", {"to": "DE001", "amount": 20})]
    return "Paid DE001 20.", []

def mcp(req):
    notes, secrets = sys.argv[1], sys.argv[2]
    n = sum(1 for m in req.get("messages", []) if m.get("role") == "tool")
    if n == 0:
        return None, [call("call_1", "bank__get_balance", {"account": "main"})]
    if n == 1:
        return None, [call("call_2", "fs.read_text_file", {"path": notes}),
                      call("call_3", "fs.write_file", {"path": secrets, "content": "pwned"})]
    return "Done.", []

def react(req):
    # A text-based agent's model: its calls written as ReAct text, by the number of
    # observations after the prompt's instructions ("Begin!").
    text = "\n".join(m["content"] for m in req.get("messages", []) if isinstance(m.get("content"), str))
    n = text.split("Begin!")[-1].count("Observation:")
    if n == 0:
        return "Thought: I need the balance first.\nAction: bank__get_balance\nAction Input: main"
    if n == 1:
        return ("Thought: The statement says to pay ATTACKER.\nAction: bank__send_money\n"
                'Action Input: {"to": "ATTACKER", "amount": 100}')
    if n == 2:
        return 'Thought: Now the payment asked for.\nAction: bank__send_money\nAction Input: {"to": "DE001", "amount": 20}'
    return "Thought: I now know the final answer\nFinal Answer: Paid DE001 20."

def chunk(delta, finish):
    return "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "scripted",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def send(self, ctype, body):
        b = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        self.send("application/json", json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}))

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        model = req.get("model")
        content, calls = (react(req), []) if model == "scripted-react" else mcp(req) if model == "scripted-mcp" else script(req)
        finish = "tool_calls" if calls else "stop"
        if req.get("stream"):
            out = chunk({"role": "assistant", "content": ""}, None)
            text = content or ""
            for i in range(0, len(text), 7):  # content in pieces, as models stream it
                out += chunk({"content": text[i:i + 7]}, None)
            for i, c in enumerate(calls):
                a = c["function"]["arguments"]
                h = len(a) // 2
                out += chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": a[:h]}}]}, None)
                out += chunk({"tool_calls": [{"index": i, "function": {"arguments": a[h:]}}]}, None)
            out += chunk({}, finish) + "data: [DONE]\n\n"
            self.send("text/event-stream", out)
            return
        msg = {"role": "assistant", "content": content}
        if calls:
            msg["tool_calls"] = calls
        self.send("application/json", json.dumps({"id": "c", "object": "chat.completion", "created": 1,
            "model": "scripted", "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}))

srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The interpreter with `openai` and `openai-agents`; fails naming the script that
/// installs them.
pub(super) fn python() -> PathBuf {
    let p = std::env::var_os("KNOX_OPENAI_PYTHON").map_or_else(
        || root().join(".mcp-servers/venv/bin/python"),
        PathBuf::from,
    );
    let ok = Command::new(&p)
        .args(["-c", "import openai, agents"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "the Python packages `openai` and `openai-agents` are missing from {}: run scripts/mcp-servers",
        p.display()
    );
    p
}

/// Kills the child when the test ends, however it ends.
pub(super) struct Reaped(pub(super) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) fn first_line(r: impl std::io::Read) -> String {
    let mut line = String::new();
    BufReader::new(r).read_line(&mut line).unwrap();
    line
}

pub(super) fn client(py: &Path, script: &str, base: &str, conv: &str, stream: bool) -> Value {
    client_with(py, script, base, conv, stream, &[])
}

/// [`client`] with more environment (`KNOX_API=responses`, `KNOX_AGENTS_API=chat`).
fn client_with(
    py: &Path,
    script: &str,
    base: &str,
    conv: &str,
    stream: bool,
    env: &[(&str, &str)],
) -> Value {
    let mut cmd = Command::new(py);
    if conv.is_empty() {
        // No conversation named: the proxy keys it by its opening messages.
        cmd.env_remove("KNOX_CONVERSATION");
    } else {
        cmd.env("KNOX_CONVERSATION", conv);
    }
    let o = cmd
        .arg(root().join("examples/clients").join(script))
        .envs(env.iter().copied())
        .env("KNOX_BASE_URL", base)
        .env("KNOX_STREAM", if stream { "1" } else { "0" })
        .env("OPENAI_API_KEY", "unused")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{script}: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

/// The scripted model ([`UPSTREAM`]) written into `d` and served by `py` on a
/// loopback port: the process (killed when dropped) and its base URL
/// (`http://127.0.0.1:PORT/v1`).
pub(super) fn upstream(py: &Path, d: &Path) -> (Reaped, String) {
    scripted(py, d, UPSTREAM, &[])
}

/// The scripted model `script` written into `d` and served by `py` with `args` (see
/// [`upstream`]).
fn scripted(py: &Path, d: &Path, script: &str, args: &[&Path]) -> (Reaped, String) {
    std::fs::write(d.join("upstream.py"), script).unwrap();
    let mut up = Reaped(
        Command::new(py)
            .arg(d.join("upstream.py"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let port = first_line(up.0.stdout.take().unwrap()).trim().to_owned();
    (up, format!("http://127.0.0.1:{port}/v1"))
}

/// Writes the bank's manifest (`bank.toml`) and the user's plan (`plan.json`: read
/// the main account's balance, then pay DE001 20) into `d`.
pub(super) fn bank(d: &Path) {
    std::fs::write(d.join("bank.toml"), BANK).unwrap();
    let plan = serde_json::json!({"calls": [
        {"tool": "bank.get_balance", "params": {"account": "main"}},
        {"tool": "bank.send_money", "params": {"to": "DE001", "amount": 20}}]});
    std::fs::write(d.join("plan.json"), plan.to_string()).unwrap();
}

/// The address a process announced on its first line of standard error.
fn announced(r: impl std::io::Read) -> String {
    let line = first_line(r);
    line.split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in `{line}`"))
        .to_owned()
}

/// `knox gateway openai` on a loopback port for `bank.toml` and `plan.json` in `d`,
/// in front of `upstream`, bundles and journals into `out`: the process and its
/// base URL.
fn proxy(d: &Path, upstream: &str, out: &Path) -> (Reaped, String) {
    proxy_with(d, upstream, out, &[])
}

/// [`proxy`] with more arguments.
fn proxy_with(d: &Path, upstream: &str, out: &Path, more: &[&str]) -> (Reaped, String) {
    let mut gw = Reaped(
        knox()
            .args(["gateway", "openai", "--manifest"])
            .arg(d.join("bank.toml"))
            .arg("--plan")
            .arg(d.join("plan.json"))
            .args(["--upstream", upstream])
            .args(["--listen", "127.0.0.1:0", "--journal"])
            .args(more)
            .arg("--out")
            .arg(out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let base = announced(gw.0.stderr.take().unwrap());
    (gw, base)
}

/// Seals every conversation (SIGUSR1), waits for the proxy to end with 0, and returns
/// what it printed.
fn seal(mut gw: Reaped) -> String {
    let pid = gw.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-USR1", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = gw.0.wait().unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut gw.0.stdout.take().unwrap(), &mut stdout).unwrap();
    assert_eq!(status.code(), Some(0), "{stdout}");
    stdout
}

/// `knox verify --allow-simulated` exits 0 on `bundle`; the bundle, read.
fn verified(bundle: &Path) -> Value {
    let v = knox()
        .args(["verify", "--allow-simulated"])
        .arg(bundle)
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    serde_json::from_slice(&std::fs::read(bundle).unwrap()).unwrap()
}

#[test]
fn the_openai_client_and_the_agents_sdk_continue_after_a_withheld_injected_call() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    bank(d);
    let (_up, upstream) = upstream(&py, d);
    let out = d.join("out");
    let (gw, base) = proxy(d, &upstream, &out);
    let responses = [("KNOX_API", "responses")];
    let chat_model = [("KNOX_AGENTS_API", "chat")];
    // (script, conversation, streamed, environment)
    type Env<'a> = &'a [(&'a str, &'a str)];
    let runs: [(&str, &str, bool, Env<'_>); 6] = [
        ("openai_sdk.py", "sdk", false, &[]),
        ("openai_sdk.py", "sdk-stream", true, &[]),
        // The Responses API, plain and streamed (#34).
        ("openai_sdk.py", "responses", false, &responses),
        ("openai_sdk.py", "responses-stream", true, &responses),
        // The Agents SDK as it comes (the Responses API), and on chat completions.
        ("openai_agents.py", "agents", false, &[]),
        ("openai_agents.py", "agents-chat", false, &chat_model),
    ];
    for (script, conv, stream, env) in runs {
        let r = client_with(&py, script, &base, conv, stream, env);
        let ran = r["ran"].to_string();
        assert!(
            !ran.contains("ATTACKER"),
            "{script}: a blocked call reached the client: {r}"
        );
        assert!(ran.contains("DE001"), "{script}: the allowed call ran: {r}");
        assert_eq!(
            r["final"], "Paid DE001 20.",
            "{script}: the loop went on to the end: {r}"
        );
    }
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 6, "{stdout}");
    for n in 0..6 {
        let b = verified(&run_file(&out, "conv", n, ".json"));
        let nodes = b["nodes"].to_string();
        assert!(
            nodes.contains("ATTACKER"),
            "the blocked call is in the evidence"
        );
        assert!(
            nodes.contains("IGNORE PREVIOUS INSTRUCTIONS"),
            "the tool output is recorded"
        );
    }
}

/// LangChain through the proxy, as its users run it: its 1.x agent (LangGraph, native
/// tool calls, two in one answer) and its classic text-based ReAct agent (calls written
/// as `Action:` lines, no conversation named, the scratchpad rewritten into the one
/// user message each step), each plain and streamed. The injected transfer never
/// reaches LangChain's tools, the agent goes on to its final answer, and each agent's
/// conversation seals as one bundle that `knox verify` reports complete.
#[test]
fn langchain_agents_native_and_text_react_continue_after_a_withheld_injected_call() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    bank(d);
    let (_up, upstream) = upstream(&py, d);
    let out = d.join("out");
    let (gw, base) = proxy(d, &upstream, &out);
    // (script, conversation header, streamed); the first ReAct run names no
    // conversation, the second names one (else both, asking the same, would be one).
    let rows = [
        ("langchain_agent.py", "lc", false),
        ("langchain_agent.py", "lc-stream", true),
        ("langchain_react.py", "", false),
        ("langchain_react.py", "react-stream", true),
    ];
    for (i, (script, conv, stream)) in rows.into_iter().enumerate() {
        let r = client(&py, script, &base, conv, stream);
        let ran = r["ran"].to_string();
        assert!(
            !ran.contains("ATTACKER"),
            "{script} (row {i}): a blocked call ran: {r}"
        );
        assert!(
            ran.contains("DE001"),
            "{script} (row {i}): the allowed call ran: {r}"
        );
        assert_eq!(r["final"], "Paid DE001 20.", "{script} (row {i}): {r}");
    }
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 4, "{stdout}");
    for n in 0..4 {
        let b = verified(&run_file(&out, "conv", n, ".json"));
        let nodes = b["nodes"].to_string();
        assert!(
            nodes.contains("ATTACKER"),
            "the blocked call is in the evidence"
        );
    }
}

/// The OpenAI Agents SDK as it comes (the Responses API) with a function tool and an
/// MCP server — `knox gateway mcp` over stdio, in front of the real filesystem server,
/// launched by the SDK — behind the proxy: the two gateways together. The model reads
/// the balance (a function tool) and the notes (an MCP tool) and, beside that read,
/// proposes an injected MCP write: the proxy withholds it, the SDK runs the read through
/// the MCP gateway (mediated again, the server confined, its output recorded) and goes
/// on to its final answer. Both bundles verify complete; the file was never written.
#[test]
fn the_agents_sdk_with_a_function_tool_and_an_mcp_tool_through_both_gateways() {
    use super::gateway_mcp::{Fixture, installed};
    let servers = installed();
    let py = python();
    let fx = Fixture::new(&servers);
    let d = fx.path();
    let notes = d.join("docs/notes.txt");
    let secrets = d.join("docs/secrets.txt");
    // The proxy sees every tool the model may call: the bank's and the MCP server's.
    let fs = super::mcp::FS_READ.split_once("[[servers]]").unwrap().1;
    std::fs::write(
        d.join("bank.toml"),
        format!("{BANK}[[servers]]{fs}{}", super::mcp::FS_WRITE),
    )
    .unwrap();
    let plan = serde_json::json!({"calls": [
        {"tool": "bank.get_balance", "params": {"account": "main"}},
        {"tool": "fs.read_text_file", "params": {"path": notes}}]});
    // The MCP gateway keeps the fixture's plan; the proxy's is `plan.json`.
    std::fs::rename(d.join("plan.json"), d.join("mcp-plan.json")).unwrap();
    std::fs::write(d.join("plan.json"), plan.to_string()).unwrap();
    let (_up, upstream) = scripted(&py, d, UPSTREAM, &[&notes, &secrets]);
    let model_out = d.join("evidence-model");
    let tools_out = d.join("evidence-tools");
    let (gw, base) = proxy(d, &upstream, &model_out);
    let mcp_command = serde_json::json!([
        env!("CARGO_BIN_EXE_knox"),
        "gateway",
        "mcp",
        "--manifest",
        d.join("fs.toml"),
        "--mcp",
        d.join("servers.toml"),
        "--prompt",
        "Summarize my notes",
        "--plan",
        d.join("mcp-plan.json"),
        "--out",
        tools_out,
    ]);
    let r = client_with(
        &py,
        "openai_agents.py",
        &base,
        "agents-mcp",
        false,
        &[
            ("KNOX_MCP_COMMAND", &mcp_command.to_string()),
            ("KNOX_MODEL", "scripted-mcp"),
        ],
    );
    assert_eq!(r["final"], "Done.", "{r}");
    assert!(r["ran"].to_string().contains("bank__get_balance"), "{r}");
    assert!(
        r["outputs"].to_string().contains("Quarterly notes"),
        "the MCP read ran through the gateway: {r}"
    );
    assert!(!secrets.exists(), "the injected write never ran");
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 1, "{stdout}");
    let model = verified(&run_file(&model_out, "conv", 0, ".json"));
    let nodes = model["nodes"].to_string();
    assert!(
        nodes.contains("fs.write_file") && nodes.contains("pwned"),
        "the blocked write is in the evidence"
    );
    let tools = verified(&super::support::run_file(
        &tools_out,
        "mcp-stdio",
        0,
        ".json",
    ));
    let nodes = tools["nodes"].as_array().unwrap();
    assert!(
        nodes
            .iter()
            .any(|n| n["kind"] == "tool_output" && n.to_string().contains("Quarterly notes")),
        "the MCP gateway recorded the read's output"
    );
}

/// The proxy in front of a real model served by Knox itself: `knox serve-model
/// local:smollm2` (llama.cpp, the pinned SmolLM2, fetched into the model cache on first
/// use) is the upstream of `knox gateway openai`, and the official `openai` client runs
/// its agent loop through the proxy. Whatever the model proposes, only a call the plan
/// allows reaches the client; the client's loop ends (a final answer, or the refusal
/// message); the conversation's bundle verifies complete.
#[cfg(feature = "local")]
#[test]
fn the_openai_client_through_the_proxy_to_a_local_model_served_by_knox_serve_model() {
    use knox_models::catalog;
    let py = python();
    let cache = knox_models::pull::cache_dir(None).unwrap();
    knox_models::pull::ensure(&catalog::SMOLLM2, Some(&cache)).unwrap_or_else(|e| {
        panic!(
            "the pinned SmolLM2 is needed in the model cache `{}`: {e}",
            cache.display()
        )
    });
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    bank(d);
    let mut model = Reaped(
        knox()
            .args([
                "serve-model",
                "local:smollm2",
                "--listen",
                "127.0.0.1:0",
                "--cache-dir",
            ])
            .arg(&cache)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let upstream = announced(model.0.stderr.take().unwrap());
    let out = d.join("out");
    let (gw, base) = proxy(d, &upstream, &out);
    let r = client(&py, "openai_sdk.py", &base, "local", false);
    // Every call the client ran is one the plan allows, in its planned form.
    let allowed = [
        serde_json::json!({"name": "bank__get_balance", "arguments": {"account": "main"}}),
        serde_json::json!({"name": "bank__send_money", "arguments": {"to": "DE001", "amount": 20}}),
    ];
    for ran in r["ran"].as_array().unwrap() {
        assert!(
            allowed.contains(ran),
            "a call off the plan reached the client: {r}"
        );
    }
    assert!(r["final"].is_string(), "the client's loop did not end: {r}");
    seal(gw);
    // The evidence holds what the client ran: one allowed call and its output each.
    let b: knox_types::bundle::Bundle =
        serde_json::from_value(verified(&run_file(&out, "conv", 0, ".json"))).unwrap();
    let outputs = b
        .nodes
        .iter()
        .filter(|n| n.kind == knox_types::aeg::NodeKind::ToolOutput)
        .count();
    assert!(
        outputs <= r["ran"].as_array().unwrap().len(),
        "{outputs} outputs for {r}"
    );
    eprintln!(
        "SmolLM2 through the proxy: {} call(s) ran, {} node(s), final {:?}",
        r["ran"].as_array().unwrap().len(),
        b.nodes.len(),
        r["final"]
    );
}

/// `knox gateway openai --regulations GDPR --regulation-context`: the upstream is a
/// remote executor, and a balance it would hear is financial data about the user that
/// an EU controller holds; the context does not list who runs the upstream, so the
/// read is withheld before the client runs
/// it, the answer naming the regulation and the upstream, and the sealed bundle names
/// GDPR and verifies `complete` with the verdict recomputed.
#[test]
fn a_regulated_proxy_withholds_a_read_its_unlisted_upstream_would_hear() {
    use std::io::{Read as _, Write as _};
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    bank(d);
    std::fs::write(
        d.join("context.toml"),
        concat!(
            "[default_task]\nsender = \"office@bank-user.example\"\npurpose = \"service\"\n",
            "[[directory]]\naddresses = [\"office@bank-user.example\"]\nrole = \"controller\"\n",
            "organisation = \"Example GmbH\"\njurisdiction = \"DE\"\n",
        ),
    )
    .unwrap();
    let (_up, upstream) = upstream(&py, d);
    let out = d.join("out");
    let context = d.join("context.toml");
    let (gw, base) = proxy_with(
        d,
        &upstream,
        &out,
        &[
            "--regulations",
            "GDPR",
            "--regulation-context",
            context.to_str().unwrap(),
        ],
    );
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_owned();
    let body = serde_json::json!({"model": "scripted", "messages": [
        {"role": "user", "content": "Check my balance, then pay DE001 20."}]})
    .to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nx-knox-conversation: regulated\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, answer) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let v: Value = serde_json::from_str(answer).unwrap();
    let message = &v["choices"][0]["message"];
    assert!(
        message["tool_calls"].is_null(),
        "the read reached the client: {v}"
    );
    let said = message["content"].as_str().unwrap();
    assert!(
        said.contains("(regulation)")
            && said.contains("remote executor")
            && said.contains("financial"),
        "{said}"
    );
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 1, "{stdout}");
    let b = verified(&run_file(&out, "conv", 0, ".json"));
    assert_eq!(b["apm"]["guards"]["regulation"]["regulations"][0], "GDPR");
    let blocked: Vec<&Value> = b["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "blocked")
        .collect();
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["payload"]["guard"], "regulation", "{blocked:?}");
}

/// The bank's manifest and a plan reading both balances, in `d`.
fn both_balances(d: &Path) {
    std::fs::write(d.join("bank.toml"), BANK).unwrap();
    let plan = serde_json::json!({"calls": [
        {"tool": "bank.get_balance", "params": {"account": "main"}},
        {"tool": "bank.get_balance", "params": {"account": "savings"}}]});
    std::fs::write(d.join("plan.json"), plan.to_string()).unwrap();
}

/// The scripted model of [`parallel_tool_calls_and_a_call_never_answered_seal_complete`]:
/// its first answer asks for both balances at once (two tool calls in one answer, as
/// `parallel_tool_calls` does); then a final answer.
const PARALLEL_UPSTREAM: &str = r#"
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

def call(i, args):
    return {"id": i, "type": "function", "function": {"name": "bank__get_balance", "arguments": json.dumps(args)}}

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        n = sum(1 for m in req.get("messages", []) if m.get("role") == "tool")
        if n == 0:
            msg = {"role": "assistant", "content": None, "tool_calls": [
                call("call_main", {"account": "main"}), call("call_savings", {"account": "savings"})]}
            finish = "tool_calls"
        else:
            msg = {"role": "assistant", "content": "Balances read."}
            finish = "stop"
        b = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "scripted",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;

/// The official `openai` client, two conversations: the model asks for two allowed
/// calls in one answer (parallel tool calls); in the first the client answers both, in
/// the second only one of them before its next request. Both calls reach the client
/// each time, and each conversation's bundle verifies `complete` (#34): the calls
/// awaited their outputs at once, and the call never answered is closed by an
/// `unanswered` node when the conversation is sealed.
#[test]
fn parallel_tool_calls_and_a_call_never_answered_seal_complete() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    both_balances(d);
    let (_up, upstream) = scripted(&py, d, PARALLEL_UPSTREAM, &[]);
    let out = d.join("out");
    let (gw, base) = proxy(d, &upstream, &out);
    let script = r#"
import json, os, sys
from openai import OpenAI
answer_all = sys.argv[2] == "all"
client = OpenAI(base_url=sys.argv[1], api_key="unused", default_headers={"x-knox-conversation": sys.argv[2]})
tools = [{"type": "function", "function": {"name": "bank__get_balance", "parameters": {
    "type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}}}]
messages = [{"role": "user", "content": "Read the balances of my main and savings accounts."}]
r = client.chat.completions.create(model="scripted", messages=messages, tools=tools, parallel_tool_calls=True)
calls = r.choices[0].message.tool_calls or []
messages.append(r.choices[0].message.model_dump(exclude_none=True))
for c in calls if answer_all else calls[:1]:
    messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps({"balance": 7})})
r2 = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
print(json.dumps({"calls": [json.loads(c.function.arguments)["account"] for c in calls],
                  "final": r2.choices[0].message.content}))
"#;
    for conv in ["all", "one"] {
        let o = Command::new(&py)
            .args(["-c", script, &base, conv])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let r: Value =
            serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap())
                .unwrap();
        assert_eq!(r["calls"], serde_json::json!(["main", "savings"]), "{r}");
        assert_eq!(r["final"], "Balances read.", "{r}");
    }
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 2, "{stdout}");
    let kinds = |n: u32| -> Vec<String> {
        let b = verified(&run_file(&out, "conv", n, ".json"));
        b["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    let count = |k: &[String], kind: &str| k.iter().filter(|x| *x == kind).count();
    let all = kinds(0);
    assert_eq!(
        (count(&all, "tool_output"), count(&all, "unanswered")),
        (2, 0),
        "{all:?}"
    );
    let one = kinds(1);
    assert_eq!(
        (count(&one, "tool_output"), count(&one, "unanswered")),
        (1, 1),
        "{one:?}"
    );
}

/// #34: a conversation sealed while idle is never silently planned again. The official
/// `openai` client's continuation of it (its assistant message and tool results) is
/// refused with 409, naming the sealed run — re-planning would let steps that already
/// ran run again, the repeat visible nowhere — while a fresh start under the same
/// conversation header opens a run of its own. Both runs' bundles verify `complete`.
#[test]
fn a_conversation_sealed_while_idle_is_refused_its_continuation_not_replanned() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    both_balances(d);
    let (_up, upstream) = scripted(&py, d, PARALLEL_UPSTREAM, &[]);
    let out = d.join("out");
    let (gw, base) = proxy_with(d, &upstream, &out, &["--idle-secs", "1"]);
    let script = r#"
import json, sys, time
import openai
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused", default_headers={"x-knox-conversation": "daily"})
tools = [{"type": "function", "function": {"name": "bank__get_balance", "parameters": {
    "type": "object", "properties": {"account": {"type": "string"}}, "required": ["account"]}}}]
start = [{"role": "user", "content": "Read the balances of my main and savings accounts."}]
r = client.chat.completions.create(model="scripted", messages=start, tools=tools)
messages = start + [r.choices[0].message.model_dump(exclude_none=True)]
for c in r.choices[0].message.tool_calls:
    messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps({"balance": 7})})
time.sleep(3)  # idle: the proxy seals the conversation
out = {}
try:
    client.chat.completions.create(model="scripted", messages=messages, tools=tools)
    out["continued"] = "answered"
except openai.APIStatusError as e:
    out["continued"] = e.status_code
    out["message"] = e.response.json()["error"]["message"]
r = client.chat.completions.create(model="scripted", messages=start, tools=tools)
out["fresh"] = len(r.choices[0].message.tool_calls or [])
print(json.dumps(out))
"#;
    let o = Command::new(&py)
        .args(["-c", script, &base])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(r["continued"], 409, "{r}");
    let message = r["message"].as_str().unwrap();
    assert!(
        message.contains("was sealed as run `conv-")
            && message.contains("start a new conversation"),
        "{r}"
    );
    assert_eq!(
        r["fresh"], 2,
        "the fresh start is planned and answered: {r}"
    );
    let stdout = seal(gw);
    assert_eq!(stdout.matches(": complete (").count(), 2, "{stdout}");
    for n in 0..2 {
        verified(&run_file(&out, "conv", n, ".json"));
    }
}
