//! Mediate-level access for hosts that drive their own agent loop (a gateway proposing
//! calls from outside): no executor trait, no tool runner — the host proposes raw
//! bytes, runs what is allowed itself and records the result.
//!
//! ```text
//! let mut open = session.open(&prompt)?;      // plan, APM, attestation
//! let live = open.live()?;                    // the monitor starts
//! match live.propose("agent-0", raw) {        // any bytes: malformed ones are blocked
//!     Verdict::Allow(ticket) => live.record(ticket, run_the_tool(&ticket.action)),
//!     verdict => tell_the_agent(verdict),
//! }
//! let bundle = live.finish()?;                // sealed, verifiable evidence
//! ```

use knox_agent::{Plan, PlanError, PlanRequest, Planner, Prompt, ToolResult, plan_from_table};
use knox_monitor::aeg::Journal;
use knox_monitor::monitor::{Monitor, Ticket, Verdict};
use knox_monitor::run::{self, Guarding, PlanSpec, Planned};
use knox_types::apm::Apm;
use knox_types::bundle::{Bundle, ModelInfo, ModelRole};
use knox_types::payload::HeardPayload;

use crate::error::EngineError;
use crate::session::Session;

/// A plan the host brought, served for the prompt it was opened with.
#[derive(Debug)]
struct HostPlan(Plan);

impl Planner for HostPlan {
    /// The host's plan, checked as any planner's: one list of calls per task of the
    /// prompt, every tool in the manifest, every exact call within its tool's schema.
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        let (planned, prompt) = (self.0.tasks.len(), request.prompt.tasks.len());
        if planned != prompt {
            return Err(PlanError::Tasks { planned, prompt });
        }
        plan_from_table(
            request,
            |i, _| self.0.tasks.get(i).map(Vec::as_slice),
            |_, e| e.clone(),
        )
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Planner,
            name: "host-plan".into(),
            weights_hash: None,
            declared: false,
        }
    }
}

/// A planned run not yet mediating: its APM is derived and attested (and its journal
/// opened). [`OpenRun::live`] starts the monitor on it.
#[derive(Debug)]
pub struct OpenRun<'s> {
    session: &'s Session,
    planned: Planned,
    journal: Option<Journal>,
    started: bool,
}

impl Session {
    /// Plans `prompt` for a host that drives its own agent loop: the APM derived by the
    /// session's planner and attested; the bundle will list the planner (and the judge)
    /// and, as the executor, `executor` (the host's agent model, when it has one).
    pub fn open(
        &self,
        prompt: &Prompt,
        executor: Option<ModelInfo>,
    ) -> Result<OpenRun<'_>, EngineError> {
        let planner = self
            .planner
            .as_deref()
            .ok_or(EngineError::Missing("planner"))?;
        self.open_with(prompt, planner, executor)
    }

    /// [`open`](Self::open) with the host's own `plan` for the prompt's tasks instead of
    /// the session's planner (the bundle lists the planner as `host-plan`, with no
    /// weights hash). A plan that does not fit the prompt or the manifest still
    /// opens: the run then holds one attested `plan_failed` interrupt.
    pub fn open_plan(
        &self,
        prompt: &Prompt,
        plan: Plan,
        executor: Option<ModelInfo>,
    ) -> Result<OpenRun<'_>, EngineError> {
        self.open_with(prompt, &HostPlan(plan), executor)
    }

    fn open_with(
        &self,
        prompt: &Prompt,
        planner: &dyn Planner,
        executor: Option<ModelInfo>,
    ) -> Result<OpenRun<'_>, EngineError> {
        let run_id = self.next_run_id();
        let mut models = vec![planner.model()];
        models.extend(executor);
        if let Some(j) = self.regulation.as_ref().and_then(|r| r.judge.as_deref()) {
            models.push(j.model());
        }
        let regulations = self.regulations();
        let spec = PlanSpec {
            topology: self.topology_for(prompt),
            planner,
            regulations: &regulations,
            stop: &self.stop,
            models,
            journal_dir: self.journal_dir.as_deref(),
            contract: self.contract.as_ref(),
        };
        let (planned, journal) = run::plan(self.runtime(), prompt, &spec, &run_id)
            .map_err(|e| EngineError::bundle(&run_id, e))?;
        Ok(OpenRun {
            session: self,
            planned,
            journal,
            started: false,
        })
    }
}

impl<'s> OpenRun<'s> {
    /// The run's APM: its agents, their expected trajectories, the guards in force.
    pub fn apm(&self) -> &Apm {
        &self.planned.apm
    }

    /// The run's identifier.
    pub fn run_id(&self) -> &str {
        &self.planned.run_id
    }

    /// The agents that may propose, by the identifier [`LiveRun::propose`] takes.
    pub fn agents(&self) -> Vec<&str> {
        self.planned
            .apm
            .agents
            .iter()
            .map(|a| a.id.as_str())
            .collect()
    }

    /// Whether the planner gave no valid plan: the run then holds one attested
    /// `plan_failed` interrupt and every proposal is refused.
    pub fn plan_failed(&self) -> bool {
        self.planned.plan_failed()
    }

    /// Starts the monitor. A run starts once; allowed calls carry signed grants when
    /// the session has a tool host.
    pub fn live(&mut self) -> Result<LiveRun<'_>, EngineError> {
        if self.started {
            return Err(EngineError::AlreadyStarted);
        }
        self.started = true;
        let journal = self.journal.take();
        let this: &Self = self;
        let session = this.session;
        let guarding = Guarding {
            norms: session.regulation.as_ref().map(|r| &*r.norms),
            judge: session.regulation.as_ref().and_then(|r| r.judge.as_deref()),
            signal: session.signal.clone(),
            grants: session.host.is_some(),
            approvals: session.approvals.as_deref(),
        };
        let monitor = run::start(session.runtime(), &this.planned, journal, guarding)
            .map_err(|e| EngineError::bundle(&this.planned.run_id, e))?;
        Ok(LiveRun {
            session,
            planned: &this.planned,
            monitor,
        })
    }
}

/// A run under the monitor, driven from outside: every proposal is mediated and
/// recorded, allowed ones carry a [`Ticket`] the host hands back with the tool's
/// result, and [`finish`](Self::finish) seals the evidence.
#[derive(Debug)]
pub struct LiveRun<'r> {
    session: &'r Session,
    planned: &'r Planned,
    monitor: Monitor<'r>,
}

impl LiveRun<'_> {
    /// Mediates one proposal of `agent`: `raw` is whatever the agent produced (a JSON
    /// action `{"tool", "params"}`); malformed bytes are blocked, never a panic. On
    /// `Allow`, run `ticket.action` (under `ticket.grant` in a host) and [`record`]
    /// the result.
    ///
    /// [`record`]: Self::record
    pub fn propose(&self, agent: &str, raw: &[u8]) -> Verdict {
        self.monitor.mediate(agent, raw)
    }

    /// Records the result of an allowed call, consuming its ticket: the sequence
    /// number of its `tool_output` node ([`EngineError::UnknownTicket`] for a ticket of
    /// no agent of this run: nothing is recorded).
    pub fn record(&self, ticket: Box<Ticket>, result: ToolResult) -> Result<u64, EngineError> {
        self.monitor
            .record_result(ticket, result)
            .ok_or(EngineError::UnknownTicket)
    }

    /// Records that the run's remote model heard labelled data in another run through
    /// the same endpoint ([`Monitor::heard`]): from here on, content the model
    /// composes into a disclosure carries that data's labels.
    ///
    /// [`Monitor::heard`]: knox_monitor::monitor::Monitor::heard
    pub fn heard(&self, heard: HeardPayload) -> Result<u64, EngineError> {
        self.monitor.heard(heard).map_err(EngineError::Heard)
    }

    /// The run's APM.
    pub fn apm(&self) -> &Apm {
        &self.planned.apm
    }

    /// Ends the run and seals its evidence (written to the session's output directory
    /// when one is set).
    pub fn finish(self) -> Result<Bundle, EngineError> {
        let aeg = self.monitor.finish();
        let refresh = self
            .session
            .refresh
            .then_some(self.session.platform.as_ref());
        let bundle = run::seal_planned(self.session.runtime(), self.planned.clone(), aeg, refresh)
            .map_err(|e| EngineError::bundle(&self.planned.run_id, e))?;
        self.session.write(&bundle)?;
        Ok(bundle)
    }
}
