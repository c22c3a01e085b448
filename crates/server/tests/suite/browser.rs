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

use std::path::PathBuf;
use std::process::Command;

use common::{BUNDLE, JOURNAL, LIVE_BUNDLE, Served, serve, tampered};
use knox_attest::PartyKey;
use knox_server::client::Client;

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
    // The page's script saw the status change: complete, all 64 nodes, the bundle linked.
    assert!(dom.contains("data-status=\"complete\""), "{dom}");
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
