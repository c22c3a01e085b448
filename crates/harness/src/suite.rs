//! The paper's workloads over the embedded suites, run through a [`Session`]: InjecAgent
//! flows bundled by a workload's task count, and the reviewed terminal tasks.
//!
//! The harness drives the engine, never the other way round: a [`SuiteRun`] gives the
//! session builder the suite's manifest, planner, executor and topology
//! ([`SuiteRun::session`]); the caller adds what it wants of the rest (platform,
//! regulations, stop policy, journal, tool host, output, a model planner or executor
//! in place of the deterministic ones) and [`SuiteRun::run`] runs every bundle through
//! [`Session::run_prompt_with`], each with the simulated tools of its own flows.

use knox_agent::{ExecutorFactory, Prompt};
use knox_dataset::Dataset;
use knox_dataset::flows::injecagent_flows;
use knox_engine::{RunOutcome, Session, SessionBuilder};
use knox_policy::ToolkitManifest;

use crate::executor::{BenignFactory, InjectedFactory};
use crate::planner::DatasetPlanner;
use crate::run::{HarnessError, bundle_tools};
use crate::tools::SimulatedTools;
use crate::workload::Workload;

/// The executors the deterministic runs offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ExecutorKind {
    /// Follows the plan, ignores injected instructions.
    Benign,
    /// Follows injected instructions found in tool outputs (as InjecAgent's attacked agent).
    Injected,
}

impl ExecutorKind {
    /// The executor's name (in run ids and reports).
    pub fn name(self) -> &'static str {
        match self {
            Self::Benign => "benign",
            Self::Injected => "injected",
        }
    }

    /// The executor factory for this kind over `data`'s attacker cases.
    pub fn factory(self, data: &Dataset) -> Box<dyn ExecutorFactory> {
        match self {
            Self::Benign => Box::new(BenignFactory),
            Self::Injected => Box::new(InjectedFactory::new(data.attacker_cases.clone())),
        }
    }

    /// The kind whose executor calls itself `name`, if any.
    fn named(name: &str) -> Option<Self> {
        [Self::Benign, Self::Injected]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// Which embedded suite a [`SuiteRun`] runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Suite {
    /// InjecAgent flows: user cases whose tool outputs carry an attacker's instruction.
    Injecagent,
    /// The reviewed terminal tasks (real commands through the session's tool host).
    Terminal,
}

impl Suite {
    /// The suite's shipped manifest, which its APMs name: InjecAgent's toolkits, or the
    /// terminal suite's one tool `TerminalExecute`.
    pub fn manifest(self) -> Result<ToolkitManifest, HarnessError> {
        Ok(match self {
            Self::Injecagent => knox_policy::shipped::current()?,
            Self::Terminal => knox_policy::shipped::terminal()?,
        })
    }
}

/// One task of the terminal suite: an instruction the planner serves with one
/// `TerminalExecute` call.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalTask {
    /// The user's instruction.
    pub instruction: String,
    /// The planned command.
    pub command: String,
    /// What to expect, for readers.
    pub note: String,
}

/// The reviewed terminal tasks (`data/terminal_tasks.json`).
pub fn terminal_tasks() -> Result<Vec<TerminalTask>, HarnessError> {
    serde_json::from_str(include_str!("../../../data/terminal_tasks.json"))
        .map_err(HarnessError::TerminalTasks)
}

/// A workload over one embedded suite: what the session runs and how its bundles are
/// cut.
#[derive(Debug, Clone, Copy)]
pub struct SuiteRun<'d> {
    /// The suite.
    pub suite: Suite,
    /// The InjecAgent data (user cases, attacker cases, tool responses).
    pub data: &'d Dataset,
    /// The shape: tasks per bundle and sub-agents.
    pub workload: Workload,
    /// InjecAgent flows to draw, bundled by the workload's task count (the remainder
    /// is dropped); the terminal suite runs all its tasks.
    pub flows: usize,
    /// The terminal suite's tasks, when not the reviewed ones ([`terminal_tasks`]).
    pub tasks: Option<&'d [TerminalTask]>,
}

impl<'d> SuiteRun<'d> {
    /// `workload` over `suite`: `flows` InjecAgent flows, or the reviewed terminal
    /// tasks.
    pub fn new(suite: Suite, data: &'d Dataset, workload: Workload, flows: usize) -> Self {
        Self {
            suite,
            data,
            workload,
            flows,
            tasks: None,
        }
    }

    /// The same run over the terminal suite's `tasks` instead of the reviewed ones.
    pub fn with_tasks(self, tasks: &'d [TerminalTask]) -> Self {
        Self {
            tasks: Some(tasks),
            ..self
        }
    }

    /// The terminal tasks this run serves.
    fn terminal(&self) -> Result<std::borrow::Cow<'d, [TerminalTask]>, HarnessError> {
        Ok(match self.tasks {
            Some(t) => std::borrow::Cow::Borrowed(t),
            None => std::borrow::Cow::Owned(terminal_tasks()?),
        })
    }

    /// A session builder for this run: the suite's manifest, the dataset planner (the
    /// terminal suite's reviewed commands), `executor`'s factory (the terminal suite
    /// runs the benign one) and the workload's topology. Add the platform and whatever
    /// else the run needs; a model planner or executor set afterwards replaces these.
    pub fn session(&self, executor: ExecutorKind) -> Result<SessionBuilder, HarnessError> {
        let (planner, executor) = match self.suite {
            Suite::Injecagent => (DatasetPlanner::new(self.data), executor),
            Suite::Terminal => (terminal_planner(&self.terminal()?), ExecutorKind::Benign),
        };
        Ok(Session::builder()
            .manifest(self.suite.manifest()?)
            .planner(planner)
            .executor(executor.factory(self.data))
            .topology(self.workload.0))
    }

    /// Runs every bundle of the workload through `session` (built from
    /// [`session`](Self::session)); `each` sees every outcome as it is produced, and
    /// an external stop ends the run after the bundle it interrupted. Returns the
    /// number of bundles run.
    pub fn run<E: From<HarnessError>>(
        &self,
        session: &Session,
        mut each: impl FnMut(&RunOutcome) -> Result<(), E>,
    ) -> Result<usize, E> {
        let mut n = 0;
        let mut one = |prompt: &Prompt, tools: &SimulatedTools<'_>| -> Result<bool, E> {
            let run_id = self.run_id(session, n);
            let outcome = session
                .run_prompt_with(prompt, &run_id, tools)
                .map_err(HarnessError::from)?;
            each(&outcome)?;
            n += 1;
            Ok(!session.stopped())
        };
        match self.suite {
            Suite::Injecagent => {
                let flows = injecagent_flows(self.data, self.flows);
                let need = self.workload.0.tasks as usize;
                if flows.len() < need {
                    return Err(HarnessError::TooFewFlows {
                        workload: self.workload.spec(),
                        need,
                        got: flows.len(),
                    }
                    .into());
                }
                for bundle in crate::run::bundles(&flows, self.workload) {
                    let (prompt, tools) = bundle_tools(self.data, session.manifest(), bundle)?;
                    if !one(&prompt, &tools)? {
                        break;
                    }
                }
            }
            Suite::Terminal => {
                let tasks = self.terminal()?;
                let tools = SimulatedTools::new(self.data, session.manifest());
                for chunk in tasks.chunks_exact(self.workload.0.tasks.max(1) as usize) {
                    let prompt = Prompt {
                        tasks: chunk.iter().map(|t| t.instruction.clone()).collect(),
                    };
                    if !one(&prompt, &tools)? {
                        break;
                    }
                }
            }
        }
        Ok(n)
    }

    /// The identifier of the run's `i`-th bundle: the workload, the executor (`model`
    /// for a model's) and the bundle's number.
    fn run_id(&self, session: &Session, i: usize) -> String {
        let spec = self.workload.spec().replace(':', "-");
        match self.suite {
            Suite::Injecagent => {
                let name = session.executor_model().map(|m| m.name).unwrap_or_default();
                let executor = ExecutorKind::named(&name).map_or("model", ExecutorKind::name);
                format!("{spec}-{executor}-{i:04}")
            }
            Suite::Terminal => format!("terminal-{spec}-{i:04}"),
        }
    }
}

/// The dataset planner serving each terminal task with its reviewed command.
fn terminal_planner(tasks: &[TerminalTask]) -> DatasetPlanner {
    let mut planner = DatasetPlanner::default();
    for t in tasks {
        let mut params = serde_json::Map::new();
        params.insert("command".into(), t.command.clone().into());
        planner.insert(
            t.instruction.clone(),
            vec![("TerminalExecute".to_string(), params)],
        );
    }
    planner
}
