//! Executors: the agents whose proposals the monitor mediates. Every proposal leaves
//! an executor as raw bytes, exactly as an untrusted model's output would.

use knox_types::Action;
use knox_types::bundle::ModelInfo;
use serde_json::Value;

/// What the executor learns about its previous proposal.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// The tool ran and returned this.
    Output(Value),
    /// The monitor blocked the call.
    Blocked(String),
}

/// A neutral tag an executor attaches to a proposal. The monitor never sees it; the
/// run loop only counts allowed and blocked proposals per label
/// (`knox_monitor::run::RunStats::labels`), so that whoever built the executor (an
/// evaluation harness scoring the monitor against its ground truth) can interpret the
/// counts. Executors with nothing to say use [`Label::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label(pub &'static str);

impl Label {
    /// No label (a model's own choice).
    pub const NONE: Self = Self("none");

    /// The label's text.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// An executor's next move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Propose a tool call (raw JSON), with its label.
    Propose(Vec<u8>, Label),
    /// Done.
    Finish,
}

/// An agent proposing one tool call at a time.
pub trait Executor: Send {
    /// The next step, given what happened to the previous proposal.
    fn next(&mut self, last: Option<&Observation>) -> Step;
}

/// What one sub-agent is given to work on.
#[derive(Clone, Debug, Default)]
pub struct AgentTask {
    /// The user's instructions for this sub-agent's tasks.
    pub instructions: Vec<String>,
    /// The calls the planner expects, in order (deterministic executors follow them).
    pub plan: Vec<Action>,
    /// The tools offered to a model-driven executor (full names).
    pub tools: Vec<String>,
}

/// Builds the executor for one sub-agent.
pub trait ExecutorFactory: Send + Sync {
    /// A fresh executor for `task`.
    fn build(&self, task: AgentTask) -> Box<dyn Executor>;
    /// Identifies the executor for proof of inference.
    fn model(&self) -> ModelInfo;
}

/// A factory behind a pointer builds as the one it points to (a session takes a boxed
/// factory, or one shared with other sessions, where it takes a factory).
macro_rules! forward_factory {
    ($($ptr:ty),*) => {$(
        impl<F: ExecutorFactory + ?Sized> ExecutorFactory for $ptr {
            fn build(&self, task: AgentTask) -> Box<dyn Executor> {
                (**self).build(task)
            }

            fn model(&self) -> ModelInfo {
                (**self).model()
            }
        }
    )*};
}

forward_factory!(Box<F>, std::sync::Arc<F>);
