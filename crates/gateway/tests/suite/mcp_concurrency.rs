//! 64 MCP gateway sessions at once over Streamable HTTP, each opened by the user's
//! `POST /knox/sessions`, served to its own rmcp client making 16 calls with markers
//! of its own, and closed by the user: every bundle verifies `complete` and holds
//! exactly its own session's calls — none lost, none mixed up, none of another's.
//! (The bench `--bench mcp` times the same run.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    reason = "a test harness: a failed step is a failed test"
)]

use super::mcp_support;

use mcp_support::Report;

const SESSIONS: usize = 64;
const CALLS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_concurrent_sessions_each_seal_exactly_their_own_calls() {
    let fx = mcp_support::start(CALLS).await;
    let run = mcp_support::concurrent(&fx, SESSIONS, CALLS).await;
    assert_eq!(run.report, Report::default(), "{run:?}");
    assert_eq!(run.bundles.len(), SESSIONS);
    let distinct: std::collections::BTreeSet<_> = run.bundles.iter().collect();
    assert_eq!(distinct.len(), SESSIONS, "one bundle per session");
    // The check catches a mix-up: session 0's bundle read as session 1's has none of
    // session 1's calls and holds session 0's markers.
    let mut swapped = Report::default();
    mcp_support::check(&run.bundles[0], &fx.cfg.manifest, 1, CALLS, &mut swapped);
    assert_eq!(swapped.lost, CALLS, "{swapped:?}");
    assert_eq!(swapped.foreign, CALLS, "{swapped:?}");
    // A tampered bundle is not complete.
    let text = std::fs::read_to_string(&run.bundles[2]).unwrap();
    let forged = fx.dir.path().join("forged.json");
    std::fs::write(
        &forged,
        text.replace(&mcp_support::marker(2, 3), &mcp_support::marker(2, 4)),
    )
    .unwrap();
    let mut tampered = Report::default();
    mcp_support::check(&forged, &fx.cfg.manifest, 2, CALLS, &mut tampered);
    assert_eq!(tampered.incomplete, 1, "{tampered:?}");
    fx.stop.cancel();
}
