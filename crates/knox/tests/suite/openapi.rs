//! `knox serve`'s OpenAPI 3.1 document, checked by tools that never saw Knox: the
//! document served at `/api/openapi.json` validates with `openapi-spec-validator`, the
//! bodies real requests return validate against its schemas with `jsonschema`, and the
//! Python client example of docs/server.md, run as written with `requests` and
//! `cryptography`, signs its requests and pages through the runs.

use std::path::Path;
use std::process::Command;

use knox_server::client::Client;

use super::gateway_mcp::installed;
use super::server::{acme_and_cnil, knox_in, start_with};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../verify/tests/fixtures/topologies/st-sa.json"
);

/// Fetches the document from the server (argv 1, unsigned) and validates it, then
/// each `METHOD PATH STATUS FILE` (argv 2…): the JSON in FILE against the schema the
/// document gives that operation's answer.
const CHECK: &str = r#"
import json, sys, urllib.request
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

with urllib.request.urlopen(sys.argv[1] + "/api/openapi.json") as answer:
    assert answer.headers["content-type"] == "application/json"
    doc = json.load(answer)
validate(doc)
for arg in sys.argv[2:]:
    method, path, status, file = arg.split(" ", 3)
    media = doc["paths"][path][method]["responses"][status]["content"]["application/json"]
    schema = dict(media["schema"], components=doc["components"])
    Draft202012Validator(schema).validate(json.load(open(file)))
print("valid", doc["openapi"], len(doc["paths"]), len(sys.argv) - 2)
"#;

/// The first ```python block after `heading` in docs/server.md.
fn python_block(heading: &str) -> String {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/server.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let after = text.split_once(heading).unwrap().1;
    after
        .split_once("```python\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .unwrap_or_else(|| panic!("no python block after `{heading}`"))
        .0
        .to_owned()
}

/// `python` with `args`: whether it exited 0, and what it printed.
fn python(py: &Path, dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(py)
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_openapi_document_validates_and_the_python_client_example_pages_through_the_runs() {
    let py = installed().join("venv/bin/python");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    acme_and_cnil(d);
    let (_server, url, _) = start_with(d, &[]);

    // Three runs, distinct by trailing whitespace, submitted by the provider.
    let good = std::fs::read_to_string(FIXTURE).unwrap();
    let mut args = vec!["submit".to_owned()];
    for i in 0..3 {
        let name = format!("run-{i}.json");
        std::fs::write(d.join(&name), format!("{good}\n{}", " ".repeat(i))).unwrap();
        args.push(name);
    }
    args.extend(["--to", &url, "--key", "acme.key"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = knox_in(d, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Real answers to signed requests.
    let key = |name: &str| {
        let pem = std::fs::read(d.join(name)).unwrap();
        knox_attest::keyfile::decode(&pem).unwrap()
    };
    let cnil = Client::new(&url, key("cnil.key")).unwrap();
    let (status, runs) = cnil.request("GET", "/api/runs", b"").unwrap();
    assert_eq!(status, 200);
    let list: serde_json::Value = serde_json::from_slice(&runs).unwrap();
    let digest = list[0]["digest"].as_str().unwrap().to_owned();
    let mut checks = Vec::new();
    for (i, (path, spec_path)) in [
        ("/api/runs".to_owned(), "/api/runs"),
        (format!("/api/runs/{digest}"), "/api/runs/{digest}"),
        ("/api/log/head".to_owned(), "/api/log/head"),
        (
            format!("/api/log/inclusion/{digest}"),
            "/api/log/inclusion/{digest}",
        ),
        (
            "/api/log/consistency?from=1".to_owned(),
            "/api/log/consistency",
        ),
        ("/api/access-log".to_owned(), "/api/access-log"),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, body) = cnil.request("GET", &path, b"").unwrap();
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        let file = format!("answer-{i}.json");
        std::fs::write(d.join(&file), body).unwrap();
        checks.push(format!("get {spec_path} 200 {file}"));
    }
    let (status, body) = cnil.request("POST", "/api/session", b"").unwrap();
    assert_eq!(status, 200);
    std::fs::write(d.join("session.json"), body).unwrap();
    checks.push("post /api/session 200 session.json".to_owned());
    std::fs::write(d.join("check.py"), CHECK).unwrap();
    let mut argv = vec!["check.py", &url];
    argv.extend(checks.iter().map(String::as_str));
    let (ok, text) = python(&py, d, &argv);
    assert!(ok, "{text}");
    assert!(text.starts_with("valid 3.1.0 "), "{text}");
    assert!(text.trim_end().ends_with(" 7"), "{text}");

    // The checks can fail: a body missing a required field does not validate.
    std::fs::write(d.join("broken.json"), r#"{"login": "/login?token=x"}"#).unwrap();
    let (ok, text) = python(
        &py,
        d,
        &["check.py", &url, "post /api/session 200 broken.json"],
    );
    assert!(!ok && text.contains("expires"), "{text}");

    // The example, as docs/server.md writes it, as the regulator and as the provider:
    // three runs in two pages of two.
    std::fs::write(d.join("list_runs.py"), python_block("### A Python client")).unwrap();
    for who in ["cnil.key", "acme.key"] {
        let (ok, text) = python(&py, d, &["list_runs.py", &url, who]);
        assert!(ok, "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[3], "3 runs in 2 pages", "{text}");
        assert!(lines[0].starts_with(&digest), "{text}");
        assert!(
            lines[..3].iter().all(|l| l.contains(" complete acme ")),
            "{text}"
        );
    }
}
