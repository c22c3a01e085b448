//! Entry points shared by the fuzz targets in `fuzz/` and the corpus smoke test: each
//! feeds untrusted bytes to a parser and must never panic.

use std::sync::OnceLock;

use knox_policy::ToolkitManifest;

fn manifest() -> Option<&'static ToolkitManifest> {
    static M: OnceLock<Option<ToolkitManifest>> = OnceLock::new();
    M.get_or_init(|| crate::session::embedded_manifest().ok())
        .as_ref()
}

/// A raw executor proposal, as the monitor parses it.
pub fn proposal(data: &[u8]) {
    if let Some(m) = manifest() {
        let _ = knox_policy::proposal::parse(data, m);
    }
}

/// A bundle or journal, as `knox verify` reads it.
pub fn evidence(data: &[u8]) {
    if let Some(m) = manifest() {
        let opts = knox_verify::Options::DANGEROUS_SIMULATED;
        let _ = crate::cmd::verify::verify_bytes(data, m, opts);
    }
}

/// A Python literal from the dataset.
pub fn pylit(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = knox_dataset::pylit::parse(s);
    }
}

/// A signed contract, a contract, an action and an approval token, as the contract
/// reader and the decision function take them: the bytes are tried as a signed
/// envelope, then as JSON `{"contract", "action", "approval"}` (any part missing: the
/// whole value), decided both under that value as a contract and under a valid one.
pub fn contract(data: &[u8]) {
    use knox_contract::{State, decide, decide_json};
    use serde_json::Value;
    static VALID: OnceLock<(knox_contract::format::Contract, knox_types::digest::Digest)> =
        OnceLock::new();
    static AUTHORITY: OnceLock<knox_types::bundle::PublicKey> = OnceLock::new();
    let authority =
        AUTHORITY.get_or_init(|| knox_attest::PartyKey::from_seed([7; 32]).public_key());
    let _ = knox_contract::signed::verify_bytes(data, authority);
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let c = v.get("contract").unwrap_or(&v);
    let a = v.get("action").unwrap_or(&v);
    let ap = v.get("approval");
    let state = State::default();
    let _ = decide_json(c, a, ap, &state, 1_800_000_000_000);
    let valid = VALID.get_or_init(|| {
        let mut t = knox_contract::example::template(0, 1 << 53, &"0".repeat(64));
        t.approvers.insert(
            "alice".into(),
            hex::encode(knox_attest::PartyKey::from_seed([1; 32]).public_bytes()),
        );
        t.approval_required.insert(knox_contract::Impact::Low);
        let h = t.hash();
        (t, h)
    });
    let _ = decide(&valid.0, &valid.1, a, ap, &state, 1_800_000_000_000);
}

/// A toolkit manifest (`knox-toolkit/1`, JSON or TOML) as `--manifest` reads it, and
/// the canonical form a bundle embeds.
pub fn toolkit_manifest(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = ToolkitManifest::from_toolkit_text(s);
    }
    let _ = ToolkitManifest::from_canonical(data);
}

/// An Intel TDX quote, parsed and then verified against the genuine collateral of the
/// vendored vector (`data/attestation/intel-tdx/dcap-qvl`); and the bytes read as
/// collateral.
pub fn tdx_quote(data: &[u8]) {
    use knox_hw::tdx::{Collateral, parse_unverified, verify};
    static COLLATERAL: OnceLock<Option<Collateral>> = OnceLock::new();
    let _ = parse_unverified(data);
    let _ = Collateral::from_json(data);
    let collateral = COLLATERAL.get_or_init(|| {
        Collateral::from_json(include_bytes!(
            "../../../data/attestation/intel-tdx/dcap-qvl/tdx_quote_collateral.json"
        ))
        .ok()
    });
    if let Some(c) = collateral {
        // The vector's own time, so the chain's validity does not decide first.
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_736_000_000);
        let _ = verify(data, c, at);
    }
}

/// NVIDIA GPU evidence: SPDM evidence verified under the genuine certificate chain of
/// the vendored Hopper vector (so the parser past the chain is reached), the bytes as a
/// certificate chain, as serialized evidence, and as a reference-integrity manifest.
pub fn gpu_evidence(data: &[u8]) {
    use knox_hw::nvidia::{GpuVerifier, parse_serialized, rim};
    const CHAIN: &[u8] =
        include_bytes!("../../../data/attestation/nvidia-gpu/nvtrust/hopperCertChain.txt");
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_736_000_000);
    let gpu = GpuVerifier::nvidia().at(at);
    let _ = gpu.verify(data, CHAIN, None);
    let _ = gpu.verify(&[], data, None);
    let _ = parse_serialized(data);
    let _ = rim::verify(data, at);
}

/// The regulator's hardware acceptance policy (`--policy`, TOML).
pub fn hw_policy(data: &[u8]) {
    let _ = knox_hw::policy::RegulatorPolicy::from_toml(data);
}

/// The configuration files Knox reads from users: MCP servers (`servers.toml`) and a
/// server's access file (`access.toml`).
pub fn config(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = knox_mcp::config::ServersFile::parse(s);
        let _ = knox_server::config::Access::parse(s);
    }
}

/// A live delivery to `knox serve` (`POST /api/live`: a journal fragment), parsed as the
/// server does before it stores anything.
pub fn live_delivery(data: &[u8]) {
    let _ = knox_server::live::Delivery::parse(data);
}

/// A client's chat-completions request to the OpenAI-compatible proxy (`knox gateway
/// openai`): parsed, keyed into a conversation, its prompt and tool results read.
pub fn openai_request(data: &[u8]) {
    knox_gateway::openai::fuzz::request(data);
}

/// An upstream's answer to the OpenAI-compatible proxy, as a whole completion and as an
/// event stream: its `tool_calls` mediated (allowed when the monitor's proposal parser
/// accepts the action the proxy builds); panics if a blocked call would reach the client.
pub fn openai_upstream(data: &[u8]) {
    if let Some(m) = manifest() {
        knox_gateway::openai::fuzz::upstream(data, m);
    }
}

/// What an MCP client sends `knox gateway mcp`: JSON-RPC lines as rmcp's stdio codec
/// decodes them, a Streamable HTTP body, the user's session-opening body; each
/// `tools/call` proposed as the session does and parsed as the monitor does.
pub fn mcp_message(data: &[u8]) {
    if let Some(m) = manifest() {
        knox_gateway::mcp::fuzz::message(data, m);
    }
}
