//! Replays the fuzz targets' committed seed corpora (`fuzz/corpus/<target>/`) through
//! the same entry points: none may panic. A crashing input found by fuzzing is added
//! there and stays a regression test.

use std::path::Path;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        f(&data);
        // Every prefix of small inputs too: truncation is the commonest corruption.
        if data.len() <= 4096 {
            for k in 0..data.len() {
                f(&data[..k]);
            }
        }
        n += 1;
    }
    n
}

#[test]
fn seed_corpora_never_panic() {
    assert!(replay("proposal", knox::fuzz::proposal) >= 5);
    assert!(replay("evidence", knox::fuzz::evidence) >= 3);
    assert!(replay("pylit", knox::fuzz::pylit) >= 2);
    assert!(replay("contract", knox::fuzz::contract) >= 5);
    assert!(replay("manifest", knox::fuzz::toolkit_manifest) >= 2);
    assert!(replay("tdx_quote", knox::fuzz::tdx_quote) >= 3);
    assert!(replay("gpu_evidence", knox::fuzz::gpu_evidence) >= 4);
    assert!(replay("hw_policy", knox::fuzz::hw_policy) >= 2);
    assert!(replay("config", knox::fuzz::config) >= 2);
    assert!(replay("live_delivery", knox::fuzz::live_delivery) >= 3);
    assert!(replay("openai_request", knox::fuzz::openai_request) >= 4);
    assert!(replay("openai_upstream", knox::fuzz::openai_upstream) >= 5);
    assert!(replay("mcp_message", knox::fuzz::mcp_message) >= 4);
}
