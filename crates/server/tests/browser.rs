//! The web UI in a real headless Chromium (Debian's `chromium`; `KNOX_TEST_CHROMIUM`
//! names another binary): the runs list, and a tampered run with its offending node
//! marked and, clicked through its `#node-N` link, its canonical JSON and inclusion
//! proof shown by the page's script. Skipped loudly without Chromium; a failure under
//! `CI=true`.
#![expect(clippy::unwrap_used, clippy::panic, reason = "tests")]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{BUNDLE, Served, serve, tampered};
use knox_attest::TeeKey;
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
    let c = Client::new(&s.base, TeeKey::from_seed(s.people.cnil.0.seed())).unwrap();
    let link = c.login().unwrap();
    let next = next.replace('#', "%23");
    format!("{link}&next={next}")
}

#[test]
fn the_runs_list_and_a_tampered_runs_offending_node_in_a_real_browser() {
    let Some(browser) = chromium() else { return };
    let s = serve(&common::sqlite_url());
    let acme = Client::new(&s.base, TeeKey::from_seed(s.people.acme.0.seed())).unwrap();
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
