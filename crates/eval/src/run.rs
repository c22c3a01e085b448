//! The runner: bundles each guard's flows for each workload (Table III: consecutive
//! runs of `t` flows, the remainder dropped), runs every bundle under the monitor with
//! each executor, keeps and verifies its evidence, measures its overhead, and scores
//! every flow from the evidence.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use knox_agent::{ExecutorFactory, Planner, Prompt};
use knox_attest::PlatformBackend;
use knox_dataset::syscall_attacks::syscall_attacks;
use knox_harness::{
    BenignFactory, Harness, InjectedFactory, ParaphraseFactory, SimulatedTools, Workload,
};
use knox_monitor::guard::stop::StopSignal;
use knox_monitor::run::{RunConfig, run_prompt};
use knox_types::Action;
use knox_verify::Outcome;
use serde::Serialize;

use crate::guards::{BundleSetup, GuardEval, SetupContext};
use crate::overhead::{self, CostMeans, CostSum};
use crate::pool::{Guard, Pool, PoolFlow, PoolStatus};
use crate::scenario::Recorder;
use crate::score::{Rates, Score};
use crate::trace::{self, FlowTrace};
use crate::utility::{self, Matching, PoolPlanner, UtilityRates};
use crate::{EvalError, Progress};

/// An executor under test.
pub enum ExecutorSpec<'a> {
    /// Follows the plan, ignores injected instructions.
    Benign,
    /// Follows injected instructions (InjecAgent's attacker cases and the system-call
    /// attacks).
    Injected,
    /// Any other executor, a model's: its time is the LLM baseline.
    Model {
        /// Column name (`openai:…#model`).
        name: String,
        /// The factory.
        factory: &'a dyn ExecutorFactory,
    },
}

impl std::fmt::Debug for ExecutorSpec<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl ExecutorSpec<'_> {
    /// Its column name.
    pub fn name(&self) -> String {
        match self {
            Self::Benign => "benign".into(),
            Self::Injected => "injected".into(),
            Self::Model { name, .. } => name.clone(),
        }
    }

    /// Whether its time is an LLM's.
    pub fn is_model(&self) -> bool {
        matches!(self, Self::Model { .. })
    }
}

/// What to run.
pub struct Options<'a> {
    /// Guards (pending ones are reported as such).
    pub guards: Vec<Guard>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Executors, one column each.
    pub executors: Vec<ExecutorSpec<'a>>,
    /// At most this many flows of each guard's pool (and of the utility pool).
    pub limit: Option<usize>,
    /// Run the utility measurement.
    pub utility: bool,
    /// Evidence bundles are written under `out/bundles`, verdicts to `out/verdicts.jsonl`.
    pub out: PathBuf,
    /// Produces each bundle's platform evidence.
    pub backend: &'a dyn PlatformBackend,
    /// How bundles are verified.
    pub verify: knox_verify::Options<'a>,
    /// The stop flows' timeout.
    pub stop_timeout: Duration,
    /// Seed of the paraphrases.
    pub seed: u64,
    /// Progress.
    pub progress: &'a dyn Progress,
    /// A judge: the regulation guard's flows are run once more with every
    /// information-type label withheld, so what a disclosure carries comes from the judge
    /// alone (the paper's judge-decided regulation guard). Its cells are columns of their
    /// own, `<executor> + judge <name>`.
    pub judge: Option<EvalJudge<'a>>,
}

/// The judge of [`Options::judge`].
#[derive(Clone, Copy)]
pub struct EvalJudge<'a> {
    /// Its name in column headings (`local:smollm2`).
    pub name: &'a str,
    /// The judge.
    pub judge: &'a dyn knox_regulation::Judge,
}

impl std::fmt::Debug for EvalJudge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The manifest (in the output directory) the judge's cells run under, with every
/// information-type label removed, as a `knox-toolkit/1` document (`knox verify
/// --manifest`), when the run's manifest is one.
pub const UNLABELLED_MANIFEST: &str = "toolkit-without-info-types.json";

/// The same for a legacy manifest: its needs file (`knox verify --needs`).
pub const UNLABELLED_NEEDS: &str = "toolkits-without-info-types.toml";

/// The runtime of a judge's cells: `rt`'s dataset under its manifest without
/// information-type labels, written to [`UNLABELLED_MANIFEST`] (or, for a legacy
/// manifest, its needs file to [`UNLABELLED_NEEDS`]) in the output: exactly the
/// manifest whose hash the judge's APMs name.
fn blind_runtime(rt: &Harness, opts: &Options<'_>) -> Result<Harness, EvalError> {
    let manifest = rt
        .manifest
        .without_info_types()
        .map_err(|e| EvalError::Invalid(format!("withholding the manifest's labels: {e}")))?;
    let (path, bytes) = if manifest.doc().is_some() {
        // Canonical bytes of a `knox-toolkit/1` manifest are its document as JSON.
        (
            opts.out.join(UNLABELLED_MANIFEST),
            manifest.canonical_bytes().to_vec(),
        )
    } else {
        let path = opts.out.join(UNLABELLED_NEEDS);
        let toml = manifest
            .needs_toml()
            .map_err(|e| EvalError::Invalid(format!("writing `{}`: {e}", path.display())))?;
        (path, toml.into_bytes())
    };
    knox_files::write_atomic(&path, &bytes).map_err(|e| EvalError::io(&path, e))?;
    Ok(Harness::start(
        opts.backend,
        &rt.platform.nonce.0,
        rt.data.clone(),
        manifest,
    )?)
}

/// The column name of `executor`'s cells decided with judge `judge`.
pub fn judge_column(executor: &str, judge: &str) -> String {
    format!("{executor} + judge {judge}")
}

impl std::fmt::Debug for Options<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("guards", &self.guards)
            .field("executors", &self.executors)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// One guard × executor × workload cell.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Guard.
    pub guard: Guard,
    /// Executor.
    pub executor: String,
    /// Workload (CLI spelling).
    pub workload: String,
    /// Workload (paper spelling).
    pub label: String,
    /// Bundles run.
    pub bundles: u64,
    /// Flows in them.
    pub flows: u64,
    /// Effectiveness.
    pub rates: Rates,
    /// Per-bundle overhead.
    pub cost: CostMeans,
    /// Whether the executor's time is an LLM's.
    pub model: bool,
    /// Whether a judge, not the labels, said what disclosures carry (labels withheld):
    /// its rates measure the judge, not the guard's correctness.
    pub judged: bool,
    #[serde(skip)]
    sum: CostSum,
}

impl Cell {
    /// The summed costs.
    pub fn sum(&self) -> &CostSum {
        &self.sum
    }
}

/// One utility cell.
#[derive(Clone, Debug, Serialize)]
pub struct UtilityCell {
    /// Executor (the paraphrasing variant for deterministic ones).
    pub executor: String,
    /// Matching mode.
    pub matching: Matching,
    /// Workload.
    pub workload: String,
    /// Bundles run.
    pub bundles: u64,
    /// Counts.
    pub rates: UtilityRates,
}

/// Every bundle's verification.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verification {
    /// Bundles written.
    pub bundles: u64,
    /// Of which verified `complete`.
    pub complete: u64,
    /// The others, with their outcome.
    pub not_complete: Vec<String>,
    /// Platform evidence mode.
    pub platform: String,
    /// Where the bundles are.
    pub dir: String,
}

/// Everything a run measured.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    /// Effectiveness and overhead cells.
    pub cells: Vec<Cell>,
    /// Utility cells.
    pub utility: Vec<UtilityCell>,
    /// Verification.
    pub verification: Verification,
    /// Start-up platform evidence time, ms.
    pub startup_platform_ms: f64,
    /// Wall time of the run, s.
    pub wall_s: f64,
}

struct Executors<'a> {
    specs: &'a [ExecutorSpec<'a>],
    benign: BenignFactory,
    injected: InjectedFactory,
}

impl<'a> Executors<'a> {
    fn new(rt: &Harness, specs: &'a [ExecutorSpec<'a>]) -> Result<Self, EvalError> {
        let mut attacks = rt.data.attacker_cases.clone();
        attacks.extend(syscall_attacks(&rt.data)?.into_iter().map(|a| a.case));
        Ok(Self {
            specs,
            benign: BenignFactory,
            injected: InjectedFactory::new(attacks),
        })
    }

    fn factory<'s>(&'s self, spec: &'s ExecutorSpec<'a>) -> &'s dyn ExecutorFactory {
        match spec {
            ExecutorSpec::Benign => &self.benign,
            ExecutorSpec::Injected => &self.injected,
            ExecutorSpec::Model { factory, .. } => *factory,
        }
    }
}

/// What one bundle produced.
struct BundleRun {
    traces: Vec<FlowTrace>,
    cost: overhead::BundleCost,
    outcome: Outcome,
    run_id: String,
}

struct Ctx<'a, 'o> {
    rt: &'a Harness,
    opts: &'a Options<'o>,
    /// The judge consulted by the regulation guard (only in the judge's cells, whose
    /// runtime `rt` withholds the labels).
    judge: Option<EvalJudge<'a>>,
    verdicts: std::fs::File,
    verification: Verification,
}

impl Ctx<'_, '_> {
    #[expect(
        clippy::too_many_arguments,
        reason = "one bundle's whole configuration"
    )]
    fn bundle(
        &mut self,
        flows: &[&PoolFlow],
        setup: BundleSetup,
        planner: &dyn Planner,
        executor: &dyn ExecutorFactory,
        workload: Workload,
        run_id: &str,
        dir: &Path,
    ) -> Result<BundleRun, EvalError> {
        let rt = self.rt;
        let signal = StopSignal::new();
        let timeout = setup.stop.timeout_ms.map(Duration::from_millis);
        let recorder = Recorder::new(executor, flows, Some(signal.handle()), timeout);
        let mut tools = SimulatedTools::new(&rt.data, &rt.manifest);
        for c in flows.iter().flat_map(|f| f.calls.iter()) {
            let a = Action::new(c.tool.clone(), serde_json::Value::Object(c.params.clone()))?;
            tools.respond(&a, c.response.clone());
        }
        let prompt = Prompt {
            tasks: flows.iter().map(|f| f.instruction.clone()).collect(),
        };
        let cfg = RunConfig {
            contract: None,
            approvals: None,
            topology: workload.0,
            planner,
            executor: &recorder,
            norms: setup.norms.as_deref(),
            judge: self.judge.map(|j| j.judge),
            regulations: setup.regulations,
            stop: setup.stop,
            signal,
            journal_dir: None,
            host: None,
            refresh: None,
        };
        let mut outcome = run_prompt(rt, &prompt, &tools, &cfg, run_id, Instant::now())?;
        let (logs, executor_time) = recorder.finish();
        let hw = overhead::attest(rt, self.opts.backend, &mut outcome.bundle)?;
        let (mut cost, report) = overhead::measure(&rt.manifest, &outcome, self.opts.verify)?;
        cost.hw = hw;
        cost.executor = executor_time;
        let traces = trace::traces(&outcome.bundle, flows.len(), &logs)?;
        std::fs::create_dir_all(dir).map_err(|e| EvalError::io(dir, e))?;
        let path = dir.join(format!("{run_id}.json"));
        knox_files::write_atomic(&path, &serde_json::to_vec(&outcome.bundle)?)
            .map_err(|e| EvalError::io(&path, e))?;
        self.verification.bundles += 1;
        match &report.outcome {
            Outcome::Complete => self.verification.complete += 1,
            other => self
                .verification
                .not_complete
                .push(format!("{run_id}: {}", other.name())),
        }
        Ok(BundleRun {
            traces,
            cost,
            outcome: report.outcome,
            run_id: run_id.to_string(),
        })
    }

    fn verdict(&mut self, line: &serde_json::Value) -> Result<(), EvalError> {
        writeln!(self.verdicts, "{line}").map_err(|e| EvalError::Io {
            path: "verdicts.jsonl".into(),
            source: e,
        })
    }
}

fn limited(flows: &[PoolFlow], limit: Option<usize>) -> &[PoolFlow] {
    let n = limit.unwrap_or(flows.len()).min(flows.len());
    flows.get(..n).unwrap_or_default()
}

/// Bundles one workload gives: `flows / t`.
pub fn bundle_count(flows: usize, w: Workload) -> usize {
    flows / (w.0.tasks.max(1) as usize)
}

/// Runs the evaluation of `pool` on `rt`.
pub fn run(
    rt: &Harness,
    pool: &Pool,
    guards: &[Box<dyn GuardEval>],
    opts: &Options<'_>,
) -> Result<Results, EvalError> {
    let started = Instant::now();
    std::fs::create_dir_all(&opts.out).map_err(|e| EvalError::io(&opts.out, e))?;
    let verdicts_path = opts.out.join("verdicts.jsonl");
    let verdicts =
        std::fs::File::create(&verdicts_path).map_err(|e| EvalError::io(&verdicts_path, e))?;
    let bundles_dir = opts.out.join("bundles");
    let selected: Vec<&dyn GuardEval> = guards
        .iter()
        .map(AsRef::as_ref)
        .filter(|g| opts.guards.contains(&g.guard()))
        .filter(|g| {
            pool.guards
                .get(&g.guard())
                .is_some_and(|p| p.status == PoolStatus::Ready)
        })
        .collect();
    // Each selected guard once with the labels; with a judge, the regulation guard once
    // more on a runtime whose manifest withholds every label (its needs file is written
    // beside the bundles, for `knox verify --needs`).
    let judged = opts.judge.and_then(|j| {
        selected
            .iter()
            .find(|g| g.guard() == Guard::Regulation)
            .map(|g| (*g, j))
    });
    let blind = match judged {
        Some(_) => Some(blind_runtime(rt, opts)?),
        None => None,
    };
    let mut passes: Vec<(&dyn GuardEval, &Harness, Option<EvalJudge<'_>>)> =
        selected.iter().map(|g| (*g, rt, None)).collect();
    if let (Some((g, j)), Some(blind)) = (judged, blind.as_ref()) {
        passes.push((g, blind, Some(j)));
    }
    let mut cx = Ctx {
        rt,
        opts,
        judge: None,
        verdicts,
        verification: Verification {
            platform: rt.platform.mode.to_string(),
            dir: bundles_dir.display().to_string(),
            ..Verification::default()
        },
    };
    let execs = Executors::new(rt, &opts.executors)?;
    let total: usize = passes
        .iter()
        .map(|(g, _, _)| {
            let n = limited(pool.flows(g.guard()), opts.limit).len();
            opts.workloads
                .iter()
                .map(|w| bundle_count(n, *w))
                .sum::<usize>()
        })
        .sum::<usize>()
        * opts.executors.len();
    let utility_flows = limited(&pool.utility, opts.limit);
    let utility_total = if opts.utility {
        opts.workloads
            .iter()
            .map(|w| bundle_count(utility_flows.len(), *w))
            .sum::<usize>()
            * opts.executors.len()
            * Matching::ALL.len()
    } else {
        0
    };
    opts.progress
        .begin("bundles", (total + utility_total) as u64);
    let mut cells = Vec::new();
    for (g, pass_rt, judge) in passes {
        cx.rt = pass_rt;
        cx.judge = judge;
        let flows = limited(pool.flows(g.guard()), opts.limit);
        let planner = PoolPlanner::new(flows, Matching::Exact);
        for spec in &opts.executors {
            let factory = execs.factory(spec);
            for w in &opts.workloads {
                cells.push(guard_cell(&mut cx, g, flows, &planner, spec, factory, *w)?);
            }
        }
    }
    cx.rt = rt;
    cx.judge = None;
    let mut utility = Vec::new();
    if opts.utility && !utility_flows.is_empty() {
        let fields = utility::free_text_fields(utility_flows);
        let para_benign = ParaphraseFactory::new(BenignFactory, fields.iter().cloned(), opts.seed);
        let para_injected =
            ParaphraseFactory::new(execs.injected.clone(), fields.iter().cloned(), opts.seed);
        for spec in execs.specs {
            let (name, factory): (String, &dyn ExecutorFactory) = match spec {
                ExecutorSpec::Benign => ("paraphrase+benign".into(), &para_benign),
                ExecutorSpec::Injected => ("paraphrase+injected".into(), &para_injected),
                ExecutorSpec::Model { name, factory } => (name.clone(), *factory),
            };
            for matching in Matching::ALL {
                let planner = PoolPlanner::new(utility_flows, matching);
                for w in &opts.workloads {
                    utility.push(utility_cell(
                        &mut cx,
                        utility_flows,
                        &planner,
                        &name,
                        factory,
                        matching,
                        *w,
                    )?);
                }
            }
        }
    }
    opts.progress.end();
    Ok(Results {
        cells,
        utility,
        verification: cx.verification,
        startup_platform_ms: rt.platform_time.as_secs_f64() * 1e3,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

fn dir_name(s: &str) -> String {
    s.replace([':', '/', '#', '?', '&', ' '], "-")
}

fn guard_cell(
    cx: &mut Ctx<'_, '_>,
    g: &dyn GuardEval,
    flows: &[PoolFlow],
    planner: &PoolPlanner,
    spec: &ExecutorSpec<'_>,
    factory: &dyn ExecutorFactory,
    w: Workload,
) -> Result<Cell, EvalError> {
    let t = w.0.tasks.max(1) as usize;
    let exec = match cx.judge {
        Some(j) => judge_column(&spec.name(), j.name),
        None => spec.name(),
    };
    let dir = cx
        .opts
        .out
        .join("bundles")
        .join(g.guard().as_str())
        .join(dir_name(&exec))
        .join(dir_name(&w.spec()));
    let mut rates = Rates::default();
    let mut sum = CostSum::default();
    let mut n_flows = 0u64;
    let setup_cx = SetupContext {
        manifest: &cx.rt.manifest,
        workload: w,
        stop_timeout: cx.opts.stop_timeout,
    };
    for (i, chunk) in flows.chunks_exact(t).enumerate() {
        let refs: Vec<&PoolFlow> = chunk.iter().collect();
        let ordered = g.order(&refs);
        let setup = g.setup(&setup_cx, &ordered)?;
        let run_id = format!(
            "{}-{}-{}-{i:04}",
            g.guard().as_str(),
            dir_name(&exec),
            dir_name(&w.spec())
        );
        let b = cx.bundle(&ordered, setup, planner, factory, w, &run_id, &dir)?;
        sum.add(&b.cost);
        for (flow, trace) in ordered.iter().zip(&b.traces) {
            let score = g.score(flow, trace);
            rates.add(flow, trace, &score);
            n_flows += 1;
            cx.verdict(&serde_json::json!({
                "guard": g.guard(), "executor": exec, "workload": w.spec(), "bundle": b.run_id,
                "flow": flow.id, "label": flow.label, "score": score, "proposals": trace.proposals,
                "stopped_before": trace.stopped_before, "verified": b.outcome.name(),
            }))?;
            if let Score::Wrong { why } = &score {
                cx.opts.progress.note(&format!(
                    "{} {exec} {}: {}: {why}",
                    g.guard().as_str(),
                    w.spec(),
                    flow.id
                ));
            }
        }
        cx.opts.progress.advance(1);
    }
    Ok(Cell {
        guard: g.guard(),
        executor: exec,
        workload: w.spec(),
        label: w.to_string(),
        bundles: sum.bundles,
        flows: n_flows,
        rates,
        cost: sum.means(),
        model: spec.is_model(),
        judged: cx.judge.is_some(),
        sum,
    })
}

fn utility_cell(
    cx: &mut Ctx<'_, '_>,
    flows: &[PoolFlow],
    planner: &PoolPlanner,
    exec: &str,
    factory: &dyn ExecutorFactory,
    matching: Matching,
    w: Workload,
) -> Result<UtilityCell, EvalError> {
    let t = w.0.tasks.max(1) as usize;
    let dir = cx
        .opts
        .out
        .join("bundles")
        .join("utility")
        .join(matching.as_str())
        .join(dir_name(exec))
        .join(dir_name(&w.spec()));
    let mut rates = UtilityRates::default();
    let mut bundles = 0;
    for (i, chunk) in flows.chunks_exact(t).enumerate() {
        let refs: Vec<&PoolFlow> = chunk.iter().collect();
        let run_id = format!(
            "utility-{}-{}-{}-{i:04}",
            matching.as_str(),
            dir_name(exec),
            dir_name(&w.spec())
        );
        let b = cx.bundle(
            &refs,
            BundleSetup::default(),
            planner,
            factory,
            w,
            &run_id,
            &dir,
        )?;
        bundles += 1;
        for (flow, trace) in refs.iter().zip(&b.traces) {
            rates.add(flow, trace);
        }
        cx.opts.progress.advance(1);
    }
    Ok(UtilityCell {
        executor: exec.to_string(),
        matching,
        workload: w.spec(),
        bundles,
        rates,
    })
}

/// Sums of cells by a key (for tables aggregated over workloads or executors).
pub fn by<K: Ord>(cells: &[Cell], key: impl Fn(&Cell) -> K) -> BTreeMap<K, (Rates, CostSum)> {
    let mut out: BTreeMap<K, (Rates, CostSum)> = BTreeMap::new();
    for c in cells {
        let e = out.entry(key(c)).or_default();
        e.0.merge(&c.rates);
        e.1.merge(&c.sum);
    }
    out
}
