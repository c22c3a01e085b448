//! InjecAgent test cases as flows: one user case whose tool output carries one attacker
//! case's instruction.

use crate::cases::Dataset;

/// One flow: a user task whose tool output is injected with an attacker instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow {
    /// `u03-ds-12`.
    pub id: String,
    /// Index into [`Dataset::user_cases`].
    pub user_case: usize,
    /// Index into [`Dataset::attacker_cases`].
    pub attacker_case: usize,
}

/// Stride through the user × attacker cross product: prime, so coprime with the size
/// of the product, so the first `n` flows are distinct and spread over both axes.
const STRIDE: usize = 7919;

/// The first `count` flows of a deterministic walk through all user × attacker pairs
/// (at most the size of the cross product, 17 × 62 = 1054 for InjecAgent).
pub fn injecagent_flows(data: &Dataset, count: usize) -> Vec<Flow> {
    let users = data.user_cases.len();
    let attackers = data.attacker_cases.len();
    let total = users * attackers;
    if total == 0 {
        return Vec::new();
    }
    (0..count.min(total))
        .map(|k| {
            let idx = (k * STRIDE) % total;
            let (u, a) = (idx / attackers, idx % attackers);
            let aid = data.attacker_cases.get(a).map_or("", |c| c.id.as_str());
            Flow {
                id: format!("u{u:02}-{aid}"),
                user_case: u,
                attacker_case: a,
            }
        })
        .collect()
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn flows_are_distinct_and_cover_every_case() {
        let d = Dataset::embedded().unwrap();
        let all = injecagent_flows(&d, usize::MAX);
        assert_eq!(all.len(), 17 * 62);
        let mut ids: Vec<_> = all.iter().map(|f| f.id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), all.len());
        let first = injecagent_flows(&d, 62);
        let users: std::collections::BTreeSet<_> = first.iter().map(|f| f.user_case).collect();
        assert_eq!(users.len(), 17);
    }
}
