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

fn config(data: &[u8]) {
    knox_mcp::fuzz::servers_file(data);
    knox_server::fuzz::access(data);
}

fn openai_upstream(data: &[u8]) {
    if let Some(m) = knox_policy::fuzz::manifest() {
        knox_gateway::openai::fuzz::upstream(data, m);
    }
}

fn mcp_message(data: &[u8]) {
    if let Some(m) = knox_policy::fuzz::manifest() {
        knox_gateway::mcp::fuzz::message(data, m);
    }
}

#[test]
fn seed_corpora_never_panic() {
    assert!(replay("proposal", knox_policy::fuzz::proposal) >= 5);
    assert!(replay("evidence", knox_verify::fuzz::evidence) >= 3);
    assert!(replay("store", knox_verify::fuzz::store) >= 1);
    assert!(replay("pylit", knox_dataset::fuzz::pylit) >= 2);
    assert!(replay("contract", knox_contract::fuzz::contract) >= 5);
    assert!(replay("manifest", knox_policy::fuzz::toolkit_manifest) >= 2);
    assert!(replay("tdx_quote", knox_hw::fuzz::tdx_quote) >= 3);
    assert!(replay("gpu_evidence", knox_hw::fuzz::gpu_evidence) >= 4);
    assert!(replay("hw_policy", knox_hw::fuzz::hw_policy) >= 2);
    assert!(replay("config", config) >= 2);
    assert!(replay("live_delivery", knox_server::fuzz::live_delivery) >= 3);
    assert!(replay("openai_request", knox_gateway::openai::fuzz::request) >= 4);
    assert!(replay("openai_upstream", openai_upstream) >= 5);
    assert!(replay("mcp_message", mcp_message) >= 4);
}
