//! The HTTP API and UI over a real loopback server, on SQLite and PostgreSQL: signed
//! submission with an inclusion proof, replayed/forged/stale/unknown requests, who
//! sees what, injection and traversal in every parameter — refused, logged, nothing
//! leaked.
#![expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]

use super::common;

use common::{BUNDLE, BUNDLE2, CHAIN, CHAIN_FORK, Served, log_key, serve, tampered};
use knox_attest::PartyKey;
use knox_server::auth::{self, Signed};
use knox_server::client::Client;
use knox_server::tlog;
use serde_json::Value;

macro_rules! on_both_engines_sync {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                super::$name(&super::serve(&crate::suite::common::sqlite_url()));
            }
            #[test]
            fn postgres() {
                if let Some(url) = crate::suite::common::postgres_url_blocking() {
                    super::$name(&super::serve(&url));
                }
            }
        }
    )*};
}

on_both_engines_sync!(
    a_provider_submits_and_gets_a_proof,
    replayed_forged_stale_and_unknown_requests_are_refused_and_logged,
    a_provider_or_regulator_outside_the_run_learns_nothing,
    injection_and_traversal_in_every_parameter_are_refused,
    the_ui_needs_a_session_and_shows_only_what_the_principal_may_see,
    a_run_left_out_shows_on_the_dashboard_the_run_page_and_the_exit_report,
    a_compact_file_is_read_and_a_store_file_without_its_part_is_refused,
);

fn client(s: &Served, key: &PartyKey) -> Client {
    Client::new(&s.base, PartyKey::from_seed(key.seed())).unwrap()
}

fn body(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or(Value::Null)
}

fn refused_reasons(s: &Served) -> Vec<String> {
    s.rt.block_on(s.store.access_log(1000))
        .unwrap()
        .into_iter()
        .filter(|e| e.decision == "refused")
        .map(|e| format!("{} {} {}", e.method, e.target, e.reason))
        .collect()
}

fn a_provider_submits_and_gets_a_proof(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    let r = acme.submit(BUNDLE).unwrap();
    assert_eq!((r.outcome.as_str(), r.duplicate), ("complete", false));
    tlog::check_inclusion(&r.inclusion, &log_key().public_key()).unwrap();
    let again = acme.submit(BUNDLE).unwrap();
    assert!(again.duplicate);
    assert_eq!(again.digest, r.digest);
    let t = acme.submit(&tampered()).unwrap();
    assert_eq!(t.outcome, "tampered");
    assert!(t.reason.is_some());
    tlog::check_inclusion(&t.inclusion, &log_key().public_key()).unwrap();
    // The log's head now extends the one the first submission got.
    let c: tlog::Consistency = acme
        .ok(
            "GET",
            &format!("/api/log/consistency?from={}", r.inclusion.head.tree_size),
            b"",
        )
        .unwrap();
    tlog::check_consistency(&c, &log_key().public_key()).unwrap();
    assert_eq!(c.to.tree_size, 2);
    // Not evidence: refused, nothing stored.
    let (status, _) = acme
        .request("POST", "/api/runs", b"{\"not\": \"a bundle\"}")
        .unwrap();
    assert_eq!(status, 400);
    // A regulator does not submit.
    let (status, _) = client(s, &s.people.cnil.0)
        .request("POST", "/api/runs", BUNDLE2)
        .unwrap();
    assert_eq!(status, 403);
    assert_eq!(s.rt.block_on(s.store.tree_size()).unwrap(), 2);
}

/// Uploads are read as they come: a self-contained compact file (`knox run --evidence
/// compact`) is evidence like its JSON; a file of a store (`--evidence store`) names a
/// shared part the upload does not carry, so it is refused, naming the part, and
/// nothing is stored or logged for it.
fn a_compact_file_is_read_and_a_store_file_without_its_part_is_refused(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    let value: Value = serde_json::from_slice(BUNDLE).unwrap();
    let compact = knox_types::compact::compact(&value).unwrap();
    let r = acme.submit(&compact).unwrap();
    assert_eq!((r.outcome.as_str(), r.duplicate), ("complete", false));
    tlog::check_inclusion(&r.inclusion, &log_key().public_key()).unwrap();
    let (file, parts) = knox_types::compact::compact_in_store(&value).unwrap();
    assert_eq!(parts.len(), 1, "one shared part: the guards");
    let part = &parts[0];
    let (status, body) = acme.request("POST", "/api/runs", &file).unwrap();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains(&part.digest.to_hex()), "{text}");
    assert_eq!(s.rt.block_on(s.store.tree_size()).unwrap(), 1);
}

fn replayed_forged_stale_and_unknown_requests_are_refused_and_logged(s: &Served) {
    let key = &s.people.acme.0;
    let acme = client(s, key);
    let nonce = "0123456789abcdef0123456789abcdef";
    let signed = Signed::with(key, "GET", "/api/runs", b"", auth::now(), nonce);
    assert_eq!(acme.send("GET", "/api/runs", b"", &signed).unwrap().0, 200);
    let (status, b) = acme.send("GET", "/api/runs", b"", &signed).unwrap();
    assert_eq!(status, 401);
    assert!(body(&b)["error"].as_str().unwrap().contains("replayed"));
    // Signed by globex, claiming acme's key.
    let mut forged = Signed::new(&s.people.globex.0, "GET", "/api/runs", b"").unwrap();
    forged.key = signed.key.clone();
    assert_eq!(acme.send("GET", "/api/runs", b"", &forged).unwrap().0, 401);
    // A body other than the one signed.
    let other = Signed::new(key, "POST", "/api/runs", BUNDLE2).unwrap();
    assert_eq!(
        acme.send("POST", "/api/runs", BUNDLE, &other).unwrap().0,
        401
    );
    // Another path than the one signed.
    let other = Signed::new(key, "GET", "/api/access-log", b"").unwrap();
    assert_eq!(acme.send("GET", "/api/runs", b"", &other).unwrap().0, 401);
    // Stale.
    let stale = Signed::with(
        key,
        "GET",
        "/api/runs",
        b"",
        auth::now() - 3600,
        "ab".repeat(16).as_str(),
    );
    assert_eq!(acme.send("GET", "/api/runs", b"", &stale).unwrap().0, 401);
    // Unknown key.
    let stranger = Client::new(&s.base, PartyKey::from_seed([77; 32])).unwrap();
    assert_eq!(stranger.request("GET", "/api/runs", b"").unwrap().0, 401);
    // No signature at all.
    let (status, _) = acme
        .send(
            "GET",
            "/api/runs",
            b"",
            &Signed {
                key: String::new(),
                time: String::new(),
                nonce: String::new(),
                signature: String::new(),
            },
        )
        .unwrap();
    assert_eq!(status, 401);
    let log = refused_reasons(s);
    for why in [
        "replayed",
        "signature does not verify",
        "outside the accepted window",
        "unknown key",
        "malformed header",
    ] {
        assert!(
            log.iter().any(|l| l.contains(why)),
            "no `{why}` in {log:#?}"
        );
    }
    // Nothing was stored by any of them.
    assert_eq!(s.rt.block_on(s.store.tree_size()).unwrap(), 0);
}

fn a_provider_or_regulator_outside_the_run_learns_nothing(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    let d = acme.submit(BUNDLE).unwrap().digest;
    let globex = client(s, &s.people.globex.0);
    let ico = client(s, &s.people.ico.0);
    let cnil = client(s, &s.people.cnil.0);
    let missing = "0".repeat(64);
    for path in [format!("/api/runs/{d}"), format!("/api/runs/{d}/evidence")] {
        let (st_other, b_other) = globex.request("GET", &path, b"").unwrap();
        let (st_reg, b_reg) = ico.request("GET", &path, b"").unwrap();
        let (st_none, b_none) = globex
            .request("GET", &path.replace(&d, &missing), b"")
            .unwrap();
        assert_eq!((st_other, st_reg, st_none), (404, 404, 404), "{path}");
        // Not visible and not there read the same.
        assert_eq!(b_other, b_none);
        assert_eq!(b_reg, b_none);
        assert_eq!(cnil.request("GET", &path, b"").unwrap().0, 200, "{path}");
        assert_eq!(acme.request("GET", &path, b"").unwrap().0, 200, "{path}");
    }
    let (_, listed) = globex.request("GET", "/api/runs", b"").unwrap();
    assert_eq!(body(&listed), serde_json::json!([]));
    let (_, listed) = ico.request("GET", "/api/runs?provider=acme", b"").unwrap();
    assert_eq!(body(&listed), serde_json::json!([]));
    let (_, listed) = cnil.request("GET", "/api/runs", b"").unwrap();
    assert_eq!(body(&listed).as_array().unwrap().len(), 1);
    // Receipts: only an assigned regulator, only with its own key.
    let report = common::verifier().check(BUNDLE).unwrap().report;
    let receipt = |k: &PartyKey| {
        serde_json::to_vec(
            &knox_verify::receipt::issue(k, BUNDLE, &report, None, auth::now()).unwrap(),
        )
        .unwrap()
    };
    let path = format!("/api/runs/{d}/receipts");
    assert_eq!(
        ico.request("POST", &path, &receipt(&s.people.ico.0))
            .unwrap()
            .0,
        404
    );
    assert_eq!(
        acme.request("POST", &path, &receipt(&s.people.acme.0))
            .unwrap()
            .0,
        403
    );
    assert_eq!(
        cnil.request("POST", &path, &receipt(&s.people.ico.0))
            .unwrap()
            .0,
        400
    );
    assert_eq!(
        cnil.request("POST", &path, b"not a receipt").unwrap().0,
        400
    );
    let (st, b) = cnil
        .request("POST", &path, &receipt(&s.people.cnil.0))
        .unwrap();
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&b));
    let (_, run) = acme.request("GET", &format!("/api/runs/{d}"), b"").unwrap();
    assert_eq!(body(&run)["receipts"][0]["regulator"], "cnil");
    // The access log is a regulator's to read.
    assert_eq!(acme.request("GET", "/api/access-log", b"").unwrap().0, 403);
    let (st, log) = cnil.request("GET", "/api/access-log", b"").unwrap();
    assert_eq!(st, 200);
    let log = body(&log);
    let refused = log
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["decision"] == "refused")
        .count();
    assert!(refused >= 10, "{log:#}");
}

fn injection_and_traversal_in_every_parameter_are_refused(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    acme.submit(BUNDLE).unwrap();
    let globex = client(s, &s.people.globex.0);
    let evils = [
        "%27%20OR%20%271%27%3D%271",
        "x%27%20OR%201%3D1%20--",
        "%27%3B%20DROP%20TABLE%20runs%3B%20--",
        "%25",
        "..%2F..%2Fetc%2Fpasswd",
        "1)%20OR%20(1%3D1",
    ];
    for e in evils {
        for param in [
            "provider",
            "outcome",
            "tool",
            "guard",
            "verdict",
            "provision",
            "model",
            "q",
        ] {
            let (st, b) = globex
                .request("GET", &format!("/api/runs?{param}={e}"), b"")
                .unwrap();
            assert_eq!((st, body(&b)), (200, serde_json::json!([])), "{param}={e}");
        }
        for param in ["from", "to"] {
            let (st, _) = acme
                .request("GET", &format!("/api/runs?{param}={e}"), b"")
                .unwrap();
            assert_eq!(st, 400, "{param}={e}");
        }
        for path in [
            format!("/api/runs/{e}"),
            format!("/api/runs/{e}/evidence"),
            format!("/api/log/inclusion/{e}"),
            format!("/api/log/consistency?from={e}"),
        ] {
            let (st, b) = acme.request("GET", &path, b"").unwrap();
            assert!(st == 400 || st == 404, "{path}: {st}");
            assert!(!String::from_utf8_lossy(&b).contains("root:"), "{path}");
        }
        let (st, _) = client(s, &s.people.cnil.0)
            .request("POST", &format!("/api/runs/{e}/receipts"), b"{}")
            .unwrap();
        assert_eq!(st, 400);
    }
    for path in [
        "/../../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/runs/..%2F..%2F..%2Fetc%2Fpasswd/download",
    ] {
        let (st, b) = acme.request("GET", path, b"").unwrap();
        assert!(st == 400 || st == 401 || st == 404, "{path}: {st}");
        assert!(!String::from_utf8_lossy(&b).contains("root:"), "{path}");
    }
    // Everything is still there, and every refusal was logged.
    let (_, mine) = acme.request("GET", "/api/runs", b"").unwrap();
    assert_eq!(body(&mine).as_array().unwrap().len(), 1);
    assert!(refused_reasons(s).len() >= evils.len() * 7);
}

fn get_with_cookie(s: &Served, path: &str, token: Option<&str>) -> (u16, String) {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build(),
    );
    let mut r = agent.get(&format!("{}{path}", s.base));
    if let Some(t) = token {
        r = r.header("cookie", &format!("{}={t}", auth::SESSION_COOKIE));
    }
    let mut resp = r.call().unwrap();
    let st = resp.status().as_u16();
    (st, resp.body_mut().read_to_string().unwrap_or_default())
}

fn token(s: &Served, key: &PartyKey) -> String {
    let link = client(s, key).login().unwrap();
    link.split_once("token=").unwrap().1.to_owned()
}

fn the_ui_needs_a_session_and_shows_only_what_the_principal_may_see(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    let good = acme.submit(BUNDLE).unwrap();
    let bad = acme.submit(&tampered()).unwrap();
    assert_eq!(get_with_cookie(s, "/runs", None).0, 401);
    assert_eq!(get_with_cookie(s, "/runs", Some(&"ab".repeat(32))).0, 401);
    let t = token(s, &s.people.acme.0);
    let (st, page) = get_with_cookie(s, "/runs", Some(&t));
    assert_eq!(st, 200);
    assert!(page.contains(&good.digest) && page.contains(&bad.digest));
    assert!(page.contains("hardware") || page.contains("simulated"));
    let (st, page) = get_with_cookie(s, &format!("/runs/{}", bad.digest), Some(&t));
    assert_eq!(st, 200);
    assert!(page.contains("node offending"), "no offending node drawn");
    assert!(page.contains("node blocked"));
    let (st, node) = get_with_cookie(s, &format!("/runs/{}/nodes/2", good.digest), Some(&t));
    assert_eq!(st, 200);
    let node = body(node.as_bytes());
    assert_eq!(node["node"]["seq"], 2);
    assert!(node["structure_root"].is_string());
    for p in [
        format!("/runs/{}/nodes/2;DROP", good.digest),
        format!("/runs/{}/nodes/-1", good.digest),
    ] {
        assert_eq!(get_with_cookie(s, &p, Some(&t)).0, 400, "{p}");
    }
    assert_eq!(
        get_with_cookie(s, &format!("/runs/{}/nodes/99999", good.digest), Some(&t)).0,
        404
    );
    let (st, dl) = get_with_cookie(s, &format!("/runs/{}/download", good.digest), Some(&t));
    assert_eq!((st, dl.as_bytes()), (200, BUNDLE));
    for p in ["/", "/report", "/log"] {
        assert_eq!(get_with_cookie(s, p, Some(&t)).0, 200, "{p}");
    }
    // One run per page: the count of all, a link to the next page, which holds the
    // other run and links nowhere further. A day range without runs shows "none".
    let (_, first) = get_with_cookie(s, "/runs?limit=1", Some(&t));
    assert!(first.contains("1 of 2 run(s)"), "{first}");
    let next = first
        .split_once("id=\"next\" href=\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(href, _)| href.replace("&amp;", "&"))
        .unwrap();
    assert!(
        next.contains("after=") && next.contains("limit=1"),
        "{next}"
    );
    let (st, second) = get_with_cookie(s, &next, Some(&t));
    assert_eq!(st, 200);
    let shown = |page: &str| [&good.digest, &bad.digest].map(|d| page.contains(d.as_str()));
    assert_eq!(shown(&first), [false, true], "newest first");
    assert_eq!(shown(&second), [true, false]);
    assert!(!second.contains("id=\"next\""));
    let (_, none) = get_with_cookie(s, "/runs?since=1970-01-01&until=1970-01-01", Some(&t));
    assert!(none.contains("<p id=\"count\">none</p>"), "{none}");
    assert_eq!(
        get_with_cookie(s, "/runs?since=1970-13-01", Some(&t)).0,
        400
    );
    assert_eq!(get_with_cookie(s, "/runs?after=x", Some(&t)).0, 400);
    // Globex's session sees none of it; ico's neither; cnil's does.
    let g = token(s, &s.people.globex.0);
    let (_, page) = get_with_cookie(s, "/runs", Some(&g));
    assert!(!page.contains(&good.digest));
    assert_eq!(
        get_with_cookie(s, &format!("/runs/{}", good.digest), Some(&g)).0,
        404
    );
    assert_eq!(get_with_cookie(s, "/report?provider=acme", Some(&g)).0, 404);
    let i = token(s, &s.people.ico.0);
    assert_eq!(
        get_with_cookie(s, &format!("/runs/{}/download", good.digest), Some(&i)).0,
        404
    );
    let c = token(s, &s.people.cnil.0);
    let (st, report) = get_with_cookie(s, "/report?provider=acme", Some(&c));
    assert_eq!(st, 200);
    assert!(report.contains("1 tampered") && report.contains(&bad.digest));
    assert_eq!(get_with_cookie(s, "/access", Some(&c)).0, 200);
    assert_eq!(get_with_cookie(s, "/access", Some(&t)).0, 403);
    // Login sets the cookie and goes only to a local path.
    let (st, _) = get_with_cookie(s, &format!("/login?token={t}&next=//evil.example/"), None);
    assert_eq!(st, 303);
}

/// The `.gap` list items of a page (the chains with something wrong).
fn gaps(page: &str) -> Vec<String> {
    page.split("<li class=\"gap\"")
        .skip(1)
        .map(|li| li.split("</li>").next().unwrap_or_default().to_owned())
        .collect()
}

fn a_run_left_out_shows_on_the_dashboard_the_run_page_and_the_exit_report(s: &Served) {
    let acme = client(s, &s.people.acme.0);
    let t = token(s, &s.people.acme.0);
    let c = token(s, &s.people.cnil.0);
    // Runs 0, 1 and 3 of one key handed over; run 2 withheld.
    let runs: Vec<_> = [CHAIN[0], CHAIN[1], CHAIN[3]]
        .iter()
        .map(|b| acme.submit(b).unwrap())
        .collect();
    let (st, dash) = get_with_cookie(s, "/", Some(&t));
    assert_eq!(st, 200);
    let g = gaps(&dash);
    assert_eq!(g.len(), 1, "{dash}");
    assert!(g[0].contains("1 missing: 2"), "{}", g[0]);
    // The run after the gap says where it stands; so does the regulator's exit report.
    let (_, page) = get_with_cookie(s, &format!("/runs/{}", runs[2].digest), Some(&t));
    assert!(
        page.contains("Run 3 of its key&#39;s chain of runs")
            || page.contains("Run 3 of its key's chain of runs"),
        "{page}"
    );
    assert!(page.contains("1 missing: 2"));
    let (st, report) = get_with_cookie(s, "/report?provider=acme", Some(&c));
    assert_eq!(st, 200);
    assert!(
        gaps(&report).iter().any(|g| g.contains("1 missing: 2")),
        "{report}"
    );
    let (st, pdf) = {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build(),
        );
        let mut r = agent
            .get(&format!("{}/report?provider=acme&format=pdf", s.base))
            .header("cookie", &format!("{}={c}", auth::SESSION_COOKIE))
            .call()
            .unwrap();
        (r.status().as_u16(), r.body_mut().read_to_vec().unwrap())
    };
    assert_eq!(st, 200);
    if let Some(text) = common::pdftotext(&pdf) {
        assert!(
            text.contains("GAP:") && text.contains("1 missing: 2"),
            "{text}"
        );
    }
    // Run 2 handed over late, then a fork of run 1: both show.
    acme.submit(CHAIN[2]).unwrap();
    acme.submit(CHAIN_FORK).unwrap();
    let (_, dash) = get_with_cookie(s, "/", Some(&t));
    let g = gaps(&dash);
    assert_eq!(g.len(), 1);
    assert!(!g[0].contains("missing"), "{}", g[0]);
    // Run 2 arrived after run 3; so did the second run 1.
    assert!(
        g[0].contains("handed over late: 1 (after 3), 2 (after 3)"),
        "{}",
        g[0]
    );
    assert!(g[0].contains("forked (two runs signed) at 1"), "{}", g[0]);
    // Globex sees no chain of acme's.
    let gx = token(s, &s.people.globex.0);
    let (_, dash) = get_with_cookie(s, "/", Some(&gx));
    assert!(gaps(&dash).is_empty());
}

/// A request with no signature and no session: its status.
fn unsigned(s: &Served, method: &str, path: &str) -> u16 {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build(),
    );
    let url = format!("{}{path}", s.base);
    let resp = if method == "post" {
        agent.post(&url).send(&b""[..])
    } else {
        agent.get(&url).call()
    };
    resp.unwrap().status().as_u16()
}

/// The OpenAPI document served is the one the handlers generate; it documents every
/// API path, each signed operation requires the four signature headers together, and
/// every documented operation is served: a signed one refuses an unsigned request
/// (401, where an unrouted path would answer 404), a public one answers.
#[test]
fn every_documented_operation_is_served_and_the_signed_ones_refuse_an_unsigned_request() {
    let s = serve(&common::sqlite_url());
    let (status, text) = get_with_cookie(&s, "/api/openapi.json", None);
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        doc,
        serde_json::to_value(knox_server::http::openapi()).unwrap()
    );
    assert_eq!(doc["openapi"], "3.1.0");
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    for name in knox_server::api::SIGNED {
        assert_eq!(schemes[name]["in"], "header", "{name}");
    }
    let paths = doc["paths"].as_object().unwrap();
    let documented: Vec<&str> = paths.keys().map(String::as_str).collect();
    let mut expected = vec![
        "/api/access-log",
        "/api/live",
        "/api/live/{id}",
        "/api/log/consistency",
        "/api/log/cosignatures",
        "/api/log/head",
        "/api/log/inclusion/{digest}",
        "/api/report",
        "/api/runs",
        "/api/runs/{digest}",
        "/api/runs/{digest}/evidence",
        "/api/runs/{digest}/receipts",
        "/api/session",
        "/tlog/checkpoint",
    ];
    expected.sort_unstable();
    let mut sorted = documented.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, expected);
    let mut signed_ops = 0;
    let zeros = "0".repeat(64);
    for (path, item) in paths {
        let concrete = path.replace("{digest}", &zeros).replace("{id}", &zeros);
        for (method, op) in item.as_object().unwrap() {
            let status = unsigned(&s, method, &concrete);
            let mut needs: Vec<&str> = op["security"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r.as_object().unwrap().keys().map(String::as_str))
                .collect();
            needs.sort_unstable();
            if needs.is_empty() {
                assert!(
                    [200, 400, 404].contains(&status),
                    "{method} {path}: {status}"
                );
            } else {
                let mut all = knox_server::api::SIGNED.to_vec();
                all.sort_unstable();
                assert_eq!(needs, all, "{method} {path}");
                assert_eq!(status, 401, "{method} {path} unsigned");
                signed_ops += 1;
            }
            assert!(
                op["responses"].as_object().is_some_and(|r| !r.is_empty()),
                "{method} {path}"
            );
        }
    }
    assert_eq!(signed_ops, 10);
    assert_eq!(unsigned(&s, "get", "/api/log/head"), 200);
    assert_eq!(unsigned(&s, "get", "/tlog/checkpoint"), 200);
}
