//! The data files embedded at build time, so the binary runs on its defaults.

/// InjecAgent `tools.json`.
pub const TOOLS_JSON: &str = include_str!("../../../data/injecagent/tools.json");
/// InjecAgent `user_cases.jsonl`.
pub const USER_CASES: &str = include_str!("../../../data/injecagent/user_cases.jsonl");
/// InjecAgent `attacker_cases_dh.jsonl`.
pub const ATTACKER_CASES_DH: &str =
    include_str!("../../../data/injecagent/attacker_cases_dh.jsonl");
/// InjecAgent `attacker_cases_ds.jsonl`.
pub const ATTACKER_CASES_DS: &str =
    include_str!("../../../data/injecagent/attacker_cases_ds.jsonl");
/// InjecAgent `attacker_simulated_responses.json`.
pub const ATTACKER_RESPONSES: &str =
    include_str!("../../../data/injecagent/attacker_simulated_responses.json");
/// Knox's reviewed attacker tool calls, one entry per attacker case.
pub const ATTACKER_CALLS: &str = include_str!("../../../data/attacker_calls.json");
