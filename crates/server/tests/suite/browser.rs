//! The web UI in a real headless Chromium (Debian's `chromium`; `KNOX_TEST_CHROMIUM`
//! names another binary): the runs list, and a tampered run with its offending node
//! marked and, clicked through its `#node-N` link, its canonical JSON and inclusion
//! proof shown by the page's script; a live run watched by the page until it
//! completes; the exit report's PDF button and its text (`pdftotext`). Skipped loudly
//! without Chromium (or `pdftotext`); a failure under `CI=true`.
#![expect(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "tests"
)]

use super::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{BUNDLE, JOURNAL, LIVE_BUNDLE, Served, serve, tampered};
use knox_attest::PartyKey;
use knox_server::client::Client;

#[path = "../../benches/common/big_run.rs"]
mod big;

/// A user's manifest run under HIPAA: one disclosure compliant and executed, one
/// non-compliant and blocked (how it was made: tests/fixtures/README.md).
const REGULATED: &[u8] = include_bytes!("../fixtures/regulated-clinic.json");

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KNOX_TEST_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("no Chromium under CI=true: install Debian's `chromium` package");
    }
    eprintln!("SKIPPED: no Chromium (install Debian's `chromium`, or set KNOX_TEST_CHROMIUM)");
    None
}

/// The DOM of `url` after its scripts ran, in a fresh headless profile.
fn dump_dom(browser: &PathBuf, url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn login_to(s: &Served, next: &str) -> String {
    let c = Client::new(&s.base, PartyKey::from_seed(s.people.cnil.0.seed())).unwrap();
    let link = c.login().unwrap();
    let next = next.replace('#', "%23");
    format!("{link}&next={next}")
}

#[test]
fn the_runs_list_and_a_tampered_runs_offending_node_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let s = serve(&common::sqlite_url());
    let acme = Client::new(&s.base, PartyKey::from_seed(s.people.acme.0.seed())).unwrap();
    let good = acme.submit(BUNDLE).unwrap();
    let bad = acme.submit(&tampered()).unwrap();
    let offending =
        s.rt.block_on(s.store.run(&bad.digest))
            .unwrap()
            .unwrap()
            .offending_node
            .unwrap();

    let dom = dump_dom(&browser, &login_to(&s, "/runs"));
    assert!(dom.contains("id=\"runs\""), "{dom}");
    assert!(dom.contains(&format!("data-digest=\"{}\"", good.digest)));
    assert!(dom.contains(&format!("data-digest=\"{}\"", bad.digest)));
    assert!(dom.contains("data-outcome=\"tampered\""));
    assert!(dom.contains("data-outcome=\"complete\""));
    assert!(dom.contains("simulated — no hardware vouches for it"));

    let dom = dump_dom(
        &browser,
        &login_to(&s, &format!("/runs/{}#node-{offending}", bad.digest)),
    );
    let marked = format!("class=\"node offending\" data-seq=\"{offending}\"");
    assert!(
        dom.contains(&marked),
        "offending node {offending} not marked:\n{dom}"
    );
    assert!(dom.contains("first offending node"));
    // The timeline marks the proposal the offending node belongs to, and the graph,
    // where it is ringed, is open.
    assert!(
        dom.contains(&format!("◀ node {offending}: the first offending node")),
        "the timeline does not mark node {offending}"
    );
    assert!(
        dom.contains("<details id=\"graph\" open"),
        "the graph is closed"
    );
    assert!(dom.contains("class=\"node blocked\""));
    // The page's script fetched the clicked node: its canonical JSON and the proof.
    let detail = dom.split("id=\"node-detail\"").nth(1).unwrap_or_default();
    assert!(
        detail.contains("structure_root"),
        "node detail not loaded:\n{detail}"
    );
    assert!(
        detail.contains(&format!("\"seq\": {offending}")),
        "{detail}"
    );
}

#[test]
fn a_live_run_is_watched_until_it_completes_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let s = serve(&common::sqlite_url());
    let acme = Client::new(&s.base, PartyKey::from_seed(s.people.acme.0.seed())).unwrap();
    let lines: Vec<&[u8]> = JOURNAL.split_inclusive(|&b| b == b'\n').collect();
    let first: Vec<u8> = lines[..21].concat();
    let started = acme.deliver(&first).unwrap();
    let id = started.run.live_id.clone();
    let url = login_to(&s, &format!("/live/{id}"));
    let b = browser.clone();
    let page = std::thread::spawn(move || dump_dom(&b, &url));
    // Bounded wait until the browser has the page, drawn while the run was in progress.
    let served = |s: &Served| {
        s.rt.block_on(s.store.access_log(1000))
            .unwrap()
            .iter()
            .any(|e| e.target == format!("/live/{id}") && e.decision == "allowed")
    };
    let mut seen = false;
    for _ in 0..600 {
        if served(&s) {
            seen = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(seen, "the browser never opened the live page");
    let rest: Vec<u8> = [lines[0], &lines[21..].concat()].concat();
    acme.deliver(&rest).unwrap();
    let sealed = acme.submit(LIVE_BUNDLE).unwrap();
    let dom = page.join().unwrap();
    // The page's script saw the status change: complete, all 64 nodes, the bundle linked,
    // and the timeline grew to every proposal of the sealed run (the page was drawn with
    // the first 20 nodes).
    assert!(dom.contains("data-status=\"complete\""), "{dom}");
    let sealed_bundle = knox_verify::parse_bundle(LIVE_BUNDLE).unwrap();
    let proposals = sealed_bundle
        .nodes
        .iter()
        .filter(|n| n.kind == knox_types::aeg::NodeKind::ToolCall)
        .count();
    let timeline = dom.split("id=\"live-timeline\"").nth(1).unwrap_or_default();
    assert!(
        timeline.contains(&format!("{proposals} proposal(s)")),
        "the live timeline did not grow to {proposals} proposals:\n{timeline}"
    );
    assert!(dom.contains("64 nodes verified of 64 received"), "{dom}");
    assert!(
        dom.contains(&format!("href=\"/runs/{}\"", sealed.digest)),
        "{dom}"
    );
    let dom = dump_dom(&browser, &login_to(&s, "/runs"));
    assert!(dom.contains(&format!("data-live=\"{id}\"")), "{dom}");
}

#[test]
fn the_exit_report_pdf_button_gives_the_report_as_pdf() {
    let Some(browser) = chromium() else { return };
    let s = serve(&common::sqlite_url());
    let acme = Client::new(&s.base, PartyKey::from_seed(s.people.acme.0.seed())).unwrap();
    let good = acme.submit(BUNDLE).unwrap();
    let bad = acme.submit(&tampered()).unwrap();
    let dom = dump_dom(&browser, &login_to(&s, "/report?provider=acme"));
    let href = dom
        .split("id=\"pdf\" href=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no PDF button:\n{dom}"))
        .replace("&amp;", "&");
    // The button's link, followed with the regulator's session as the browser would.
    let cnil = Client::new(&s.base, PartyKey::from_seed(s.people.cnil.0.seed())).unwrap();
    let token = cnil.login().unwrap();
    let token = token.split("token=").nth(1).unwrap().to_owned();
    let mut resp = ureq::get(&format!("{}{href}", s.base))
        .header("cookie", &format!("knox_session={token}"))
        .call()
        .unwrap();
    assert_eq!(
        resp.headers().get("content-type").unwrap(),
        "application/pdf"
    );
    let pdf = resp.body_mut().read_to_vec().unwrap();
    let Some(text) = common::pdftotext(&pdf) else {
        return;
    };
    assert!(text.contains("Exit report"), "{text}");
    assert!(
        text.contains("2 runs; 1 complete, 0 prefix, 1 tampered"),
        "{text}"
    );
    assert!(
        text.contains(&format!("bundle sha256:{}", good.digest)),
        "{text}"
    );
    assert!(
        text.contains(&format!("bundle sha256:{}", bad.digest)),
        "{text}"
    );
    assert!(text.contains("Incidents"), "{text}");
}

/// A page as the server serves it to the regulator's session (no browser).
fn served_page(s: &Served, path: &str) -> String {
    let link = Client::new(&s.base, PartyKey::from_seed(s.people.cnil.0.seed()))
        .unwrap()
        .login()
        .unwrap();
    let token = link.split_once("token=").unwrap().1;
    let mut resp = ureq::get(&format!("{}{path}", s.base))
        .header(
            "cookie",
            &format!("{}={token}", knox_server::auth::SESSION_COOKIE),
        )
        .call()
        .unwrap();
    resp.body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_string()
        .unwrap()
}

/// A screenshot of `url` (1280 pixels wide, `height` high) written to `out`: a PNG.
fn screenshot(browser: &PathBuf, url: &str, out: &Path, height: u32) {
    let profile = tempfile::tempdir().unwrap();
    let o = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--hide-scrollbars",
            // Drawn when loaded (the pages are rendered by the server): no virtual
            // time, which a live page's long poll would hold up.
            "--run-all-compositor-stages-before-draw",
        ])
        .arg(format!("--window-size=1280,{height}"))
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", out.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(out).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{}: {} bytes",
        out.display(),
        png.len()
    );
}

/// The run page tells a run's story — the prompt, then each proposal with its tool,
/// arguments, guards and decision, a block's guard and reason, a regulation's verdict
/// — for a blocked attack, a regulated disclosure and a run of 10,000 nodes (its graph
/// folded and drawn in full), and the live page tells it as it grows. Each page is
/// pictured: into `KNOX_SCREENSHOTS` when set (`KNOX_SCREENSHOTS=docs` writes the
/// pictures of docs/server.md), else a temporary folder.
#[test]
fn the_run_and_live_pages_tell_what_happened_and_are_pictured() {
    let Some(browser) = chromium() else { return };
    let kept = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("KNOX_SCREENSHOTS").map_or_else(
        || kept.path().to_owned(),
        |d| Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(d),
    );
    let s = serve(&common::sqlite_url());
    let acme = Client::new(&s.base, PartyKey::from_seed(s.people.acme.0.seed())).unwrap();

    // A live run in progress: the first 21 lines of a journal (its header and 20
    // nodes), its page told from them.
    let lines: Vec<&[u8]> = JOURNAL.split_inclusive(|&b| b == b'\n').collect();
    let started = acme.deliver(&lines[..21].concat()).unwrap();
    let id = started.run.live_id;
    let calls = lines[1..21]
        .iter()
        .filter(|l| {
            serde_json::from_slice::<serde_json::Value>(l).is_ok_and(|n| n["kind"] == "tool_call")
        })
        .count();
    // As served: in a browser its script long-polls for the next line, which a
    // headless dump would wait on.
    let dom = served_page(&s, &format!("/live/{id}"));
    assert!(dom.contains("data-status=\"in progress\""), "{dom}");
    assert!(dom.contains("What the user asked"), "{dom}");
    let timeline = dom.split("id=\"live-timeline\"").nth(1).unwrap_or_default();
    assert_eq!(timeline.matches("id=\"call-").count(), calls, "{timeline}");
    screenshot(
        &browser,
        &login_to(&s, &format!("/live/{id}")),
        &dir.join("server-live.png"),
        900,
    );

    let attack = acme.submit(BUNDLE).unwrap().digest;
    let dom = dump_dom(&browser, &login_to(&s, &format!("/runs/{attack}")));
    assert!(dom.contains("What the user asked"), "{dom}");
    assert!(dom.contains("id=\"timeline\""), "{dom}");
    assert!(dom.contains("blocked by trajectory"), "{dom}");
    assert!(dom.contains("AugustSmartLockGrantGuestAccess"), "{dom}");
    screenshot(
        &browser,
        &login_to(&s, &format!("/runs/{attack}")),
        &dir.join("server-run-attack.png"),
        1250,
    );

    let regulated = acme.submit(REGULATED).unwrap();
    assert_eq!(regulated.outcome, "complete");
    let dom = dump_dom(
        &browser,
        &login_to(&s, &format!("/runs/{}", regulated.digest)),
    );
    assert!(
        dom.contains("Send my record to Dr Okafor and to AdReach"),
        "{dom}"
    );
    assert!(dom.contains("blocked by regulation"), "{dom}");
    assert!(
        dom.contains("regulation: compliant (hipaa-164.506-c2-treatment)"),
        "{dom}"
    );
    assert!(dom.contains("2 proposal(s), 1 blocked"), "{dom}");
    screenshot(
        &browser,
        &login_to(&s, &format!("/runs/{}", regulated.digest)),
        &dir.join("server-run-regulated.png"),
        900,
    );

    let started = std::time::Instant::now();
    let (bytes, nodes) = big::big_run();
    assert!(nodes >= 10_000, "{nodes} nodes");
    let big = acme.submit(&bytes).unwrap().digest;
    eprintln!(
        "the big run: {nodes} nodes, made and submitted in {:?}",
        started.elapsed()
    );
    // The story, as served (the page is the same in a browser: no script builds it).
    let page = served_page(&s, &format!("/runs/{big}"));
    assert!(page.contains("1650 proposal(s), 150 blocked"), "timeline");
    assert_eq!(page.matches("id=\"call-").count(), 1650);
    // The graph alone (`?view=graph`): open, without the timeline; every node but the
    // checks drawn, each check counted on its proposal, none left out.
    let graph = dump_dom(&browser, &login_to(&s, &format!("/runs/{big}?view=graph")));
    assert!(
        !graph.contains("id=\"timeline\""),
        "the timeline is left out"
    );
    assert!(
        graph.contains("<details id=\"graph\" open"),
        "the graph is open"
    );
    let drawn = graph.matches("<g class=\"node").count();
    let checks = graph.matches(" checks)").count();
    assert!(
        drawn > 3_000 && drawn < nodes,
        "{drawn} of {nodes} nodes drawn"
    );
    assert!(checks >= 1_650, "{checks} proposals with folded checks");
    assert!(!graph.contains("Only the first"), "every node is drawn");
    screenshot(
        &browser,
        &login_to(&s, &format!("/runs/{big}?view=graph")),
        &dir.join("server-run-10000.png"),
        1000,
    );
}
