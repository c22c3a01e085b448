//! The stop guard `Γ_int`: a static predicate over the run state `σ`.

use knox_types::apm::{StopCause, StopPolicy};

/// The run state the stop guard tests, as seen by one agent before a proposal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunState {
    /// Proposals this agent made before.
    pub actions: u32,
    /// Cost units this agent spent on executed actions.
    pub spent: u64,
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
    /// Whether an external stop signal is present.
    pub signal: bool,
    /// Cost of the proposed call, when it is counted against the budget before it runs
    /// (`None`: only what was spent is compared, as APMs before the budget channel was
    /// closed did; a budget of 1 could then be overshot by a call costing 5).
    pub cost: Option<u64>,
}

/// What fires, in priority order: external signal, timeout, action cap, budget. The
/// budget fires when what was spent reaches it, or when the proposed call's cost would
/// take the spending past it.
pub fn evaluate(policy: &StopPolicy, s: &RunState) -> Option<StopCause> {
    if policy.external && s.signal {
        return Some(StopCause::Signal);
    }
    if policy.timeout_ms.is_some_and(|t| s.elapsed_ms >= t) {
        return Some(StopCause::Timeout);
    }
    if policy.max_actions.is_some_and(|m| s.actions >= m) {
        return Some(StopCause::ActionCap);
    }
    let after = s.spent.saturating_add(s.cost.unwrap_or(0));
    if policy
        .budget
        .is_some_and(|b| s.spent >= b || (s.cost.is_some() && after > b))
    {
        return Some(StopCause::Budget);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_thresholds() {
        let p = StopPolicy {
            timeout_ms: Some(100),
            max_actions: Some(3),
            budget: Some(10),
            external: true,
        };
        let s = RunState::default();
        assert_eq!(evaluate(&p, &s), None);
        assert_eq!(
            evaluate(&p, &RunState { actions: 3, ..s }),
            Some(StopCause::ActionCap)
        );
        assert_eq!(
            evaluate(&p, &RunState { spent: 10, ..s }),
            Some(StopCause::Budget)
        );
        assert_eq!(
            evaluate(
                &p,
                &RunState {
                    elapsed_ms: 100,
                    actions: 9,
                    ..s
                }
            ),
            Some(StopCause::Timeout)
        );
        assert_eq!(
            evaluate(
                &p,
                &RunState {
                    signal: true,
                    elapsed_ms: 100,
                    ..s
                }
            ),
            Some(StopCause::Signal)
        );
        let no_ext = StopPolicy {
            external: false,
            ..p
        };
        assert_eq!(evaluate(&no_ext, &RunState { signal: true, ..s }), None);
    }

    #[test]
    fn the_proposed_calls_cost_counts_against_the_budget() {
        let p = StopPolicy {
            budget: Some(1),
            ..StopPolicy::default()
        };
        let s = RunState::default();
        // Without the cost (APMs before): a call costing 5 with budget 1 passes.
        assert_eq!(evaluate(&p, &s), None);
        // With it: spent 0 + cost 5 > 1 fires; a call that fits does not.
        let costly = RunState { cost: Some(5), ..s };
        assert_eq!(evaluate(&p, &costly), Some(StopCause::Budget));
        assert_eq!(evaluate(&p, &RunState { cost: Some(1), ..s }), None);
        assert_eq!(
            evaluate(
                &p,
                &RunState {
                    spent: 1,
                    cost: Some(0),
                    ..s
                }
            ),
            Some(StopCause::Budget)
        );
        // No overflow on absurd costs.
        let huge = RunState {
            spent: u64::MAX,
            cost: Some(u64::MAX),
            ..s
        };
        assert_eq!(evaluate(&p, &huge), Some(StopCause::Budget));
    }
}
