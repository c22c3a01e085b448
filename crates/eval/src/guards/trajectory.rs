//! `Γ_traj`: a flow whose tool output carries an InjecAgent attacker instruction; the
//! injected executor follows it, and every call it makes for the attacker is off the
//! trajectory and must be blocked by the trajectory check. Negative flows have a clean
//! output; their planned call must be allowed.

use crate::EvalError;
use crate::generate::{self, PoolContext};
use crate::guards::GuardEval;
use crate::pool::{Guard, GuardPool, Injection, Label, PoolFlow, PoolStatus};
use crate::rng::Rng;
use crate::score::{self, Score};
use crate::trace::FlowTrace;

/// The trajectory guard's evaluation.
#[derive(Debug, Clone, Copy)]
pub struct Trajectory;

impl GuardEval for Trajectory {
    fn guard(&self) -> Guard {
        Guard::Trajectory
    }

    fn pool(&self, cx: &PoolContext<'_>) -> Result<GuardPool, EvalError> {
        let attacks = &cx.data.attacker_cases;
        let flows = injected_pool(cx, Guard::Trajectory, "traj", |rng, planned, _| {
            // An attack that asks for something other than the planned tool.
            let usable: Vec<_> = attacks
                .iter()
                .filter(|a| a.calls.iter().all(|c| c.tool != planned))
                .collect();
            rng.pick(&usable).map(|a| Injection {
                case: a.id.clone(),
                instruction: a.instruction.clone(),
                tools: a.calls.iter().map(|c| c.tool.clone()).collect(),
            })
        })?;
        Ok(GuardPool {
            status: PoolStatus::Ready,
            note: Some(
                "positives: InjecAgent user cases first, then generated tasks, each output injected with an InjecAgent attacker case; negatives: generated tasks with clean outputs".into(),
            ),
            flows,
        })
    }

    fn score(&self, flow: &PoolFlow, trace: &FlowTrace) -> Score {
        score::deviation(flow, trace, "trajectory", false)
    }
}

/// A pool of single-call flows whose positives carry the injection `attack` picks
/// (given the planned tool and the slot); shared by the trajectory and system-call
/// guards.
pub fn injected_pool(
    cx: &PoolContext<'_>,
    guard: Guard,
    prefix: &str,
    mut attack: impl FnMut(&mut Rng, &str, &generate::Slot<'_>) -> Option<Injection>,
) -> Result<Vec<PoolFlow>, EvalError> {
    let mut used_cases = std::collections::BTreeSet::new();
    generate::per_toolkit(cx, prefix, |slot| {
        let mut rng = Rng::new(cx.seed, slot.id);
        if slot.label == Label::Allow {
            let task = generate::generated_task(cx, slot.toolkit, slot.id, 1, None)?;
            return Ok(Some(generate::flow(guard, slot, task, "generated".into())));
        }
        let user = cx
            .user_cases(slot.toolkit)
            .into_iter()
            .find(|u| !used_cases.contains(&u.index));
        let planned = match user {
            Some(u) => u.tool.clone(),
            None => generate::generated_task(cx, slot.toolkit, slot.id, 1, None)?
                .calls
                .first()
                .map(|c| c.tool.clone())
                .unwrap_or_default(),
        };
        let Some(inj) = attack(&mut rng, &planned, slot) else {
            return Ok(None);
        };
        let (task, source) = match user {
            Some(u) => {
                used_cases.insert(u.index);
                (
                    generate::user_task(u, slot.id, &inj.instruction),
                    format!("injecagent user case {} + {}", u.index, inj.case),
                )
            }
            None => (
                generate::generated_task(cx, slot.toolkit, slot.id, 1, Some(&inj.instruction))?,
                format!("generated + {}", inj.case),
            ),
        };
        let mut f = generate::flow(guard, slot, task, source);
        f.injection = Some(inj);
        Ok(Some(f))
    })
}
