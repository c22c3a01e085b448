//! A model-driven executor over the OpenAI-compatible protocol, against a real HTTP
//! server in the test: whatever the model proposes, the monitor's decisions hold and the
//! evidence verifies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use knox::session::{ExecutorKind, WorkloadRun};
use knox_models::{Endpoint, OpenAiExecutor};
use knox_types::aeg::NodeKind;
use knox_verify::Outcome;
use serde_json::{Value, json};

use super::support::{runtime, verify};

/// A chat-completions server scripted like an injected model: it calls the tool the user
/// asked for, then obeys an instruction it finds in the tool's output, then answers.
fn serve(script: Vec<Value>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for (turn, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            reader.read_exact(&mut body).unwrap();
            log.lock()
                .unwrap()
                .push(serde_json::from_slice::<Value>(&body).unwrap());
            let reply = script
                .get(turn)
                .cloned()
                .unwrap_or_else(|| json!({"content": "done"}));
            let text = json!({"choices": [{"message": reply}]}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (url, seen)
}

fn call(name: &str, args: &Value) -> Value {
    json!({"role": "assistant", "tool_calls": [{"id": format!("c-{name}"), "type": "function",
        "function": {"name": name, "arguments": args.to_string()}}]})
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
    let model = OpenAiExecutor::new(endpoint, &rt.manifest);
    let w = WorkloadRun {
        model: Some(&model),
        ..WorkloadRun::new("st-sa".parse().unwrap(), ExecutorKind::Benign, 1)
    };
    let b = &super::support::outcomes(&w)[0].bundle;
    let r = verify(b);
    assert_eq!(r.outcome, Outcome::Complete, "{r}");
    let calls: Vec<&knox_types::aeg::Node> = b
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::ToolCall)
        .collect();
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
    let poi = b
        .nodes
        .iter()
        .find(|n| n.kind == NodeKind::ProofOfInference && n.payload["role"] == "executor")
        .unwrap();
    assert_eq!(poi.payload["declared"], true);
    assert!(
        poi.payload["model"]
            .as_str()
            .unwrap()
            .ends_with("#scripted-model")
    );
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
    let planner = knox_models::OpenAiPlanner::new(
        Endpoint::parse(&format!("openai:{url}#planner-model")).unwrap(),
    );
    let w = WorkloadRun {
        planner: Some(&planner),
        ..WorkloadRun::new("st-sa".parse().unwrap(), ExecutorKind::Benign, 1)
    };
    let b = &super::support::outcomes(&w)[0].bundle;
    assert_eq!(verify(b).outcome, Outcome::Complete);
    assert_eq!(
        b.apm.agents[0].trajectory[0].tool, user.tool,
        "the corrected plan is the APM's trajectory"
    );
    let requests = seen.lock().unwrap();
    assert_eq!(requests.len(), 2, "one retry");
    let retry = requests[1]["messages"].as_array().unwrap();
    assert!(
        retry.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("unknown tool `RootShellExecute`")
    );
    assert!(
        b.models
            .iter()
            .any(|m| m.role == "planner" && m.declared && m.name.ends_with("#planner-model"))
    );
}
