//! `knox run --manifest M --prompt "…"`: a user's prompt (or `--tasks FILE.jsonl`, one
//! run per line) over a user's toolkit manifest, planned by a model (`--planner SPEC`)
//! or by the user (`--plan PLAN.json`), run through [`knox_engine::Session`] into one
//! verified bundle per run.
//!
//! Tools: until a real tool host serves the manifest, `--responses FILE.json` answers
//! allowed calls in process from a file the user writes ([`ResponsesFile`]: canned
//! outputs, clearly not the tools themselves).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Result;
use knox_agent::{ExecutorFactory, Planner, Prompt, ToolResult, ToolRunner};
use knox_engine::Session;
use knox_models::tools::MAX_USER_PLAN_CALLS;
use knox_models::{ChatExecutor, ChatPlanner, ModelSpec, UserPlans};
use knox_policy::ToolkitManifest;
use knox_types::Action;
use knox_types::grant::Grant;
use serde_json::{Value, json};

use super::run::RunArgs;
use crate::error::{Kind, fail};

/// An in-process tool runner answering from a user-supplied responses file — canned
/// outputs, not the tools: `{"TOOL": OUTPUT}` answers every call of `TOOL` with
/// `OUTPUT`; `{"TOOL": {"responses": [O1, O2, …]}}` answers its calls in turn (the last
/// repeats). A tool without a response answers `{"error": …}`. Outputs are untrusted
/// tool output like any other (recorded, labelled, checked by the data-flow guard).
#[derive(Debug)]
pub struct ResponsesFile {
    by_tool: BTreeMap<String, Vec<Value>>,
    served: Mutex<BTreeMap<String, usize>>,
}

impl ResponsesFile {
    /// Parses a responses file.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let Value::Object(o) = v else {
            return Err("expected a JSON object {\"TOOL\": OUTPUT, …}".into());
        };
        let by_tool = o
            .into_iter()
            .map(|(tool, out)| {
                let list = match out {
                    Value::Object(mut m) if m.len() == 1 && m.contains_key("responses") => {
                        match m.remove("responses") {
                            Some(Value::Array(a)) if !a.is_empty() => a,
                            _ => {
                                return Err(format!(
                                    "`{tool}`: `responses` must be a non-empty array"
                                ));
                            }
                        }
                    }
                    other => vec![other],
                };
                Ok((tool, list))
            })
            .collect::<std::result::Result<_, String>>()?;
        Ok(Self {
            by_tool,
            served: Mutex::new(BTreeMap::new()),
        })
    }
}

impl ToolRunner for ResponsesFile {
    fn run(&self, action: &Action, _: Option<&Grant>) -> ToolResult {
        let Some(list) = self.by_tool.get(&action.tool) else {
            return ToolResult::from(
                json!({"error": format!("the responses file has no response for `{}`", action.tool)}),
            );
        };
        let n = self.served.lock().map_or(0, |mut s| {
            let k = s.entry(action.tool.clone()).or_insert(0);
            *k += 1;
            *k - 1
        });
        let out = list
            .get(n)
            .or_else(|| list.last())
            .cloned()
            .unwrap_or(Value::Null);
        ToolResult::from(out)
    }
}

/// One run's prompt and, when the user wrote it, its plan.
struct Job {
    prompt: Prompt,
    plan: Option<Value>,
}

/// The runs `--prompt`/`--tasks` ask for.
fn jobs(args: &RunArgs) -> Result<Vec<Job>> {
    let plan = args
        .plan
        .as_deref()
        .map(|p| read_json(p, "a plan (JSON)"))
        .transpose()?;
    if !args.prompt.is_empty() {
        return Ok(vec![Job {
            prompt: Prompt {
                tasks: args.prompt.clone(),
            },
            plan,
        }]);
    }
    let Some(file) = &args.tasks else {
        return Err(super::usage(
            "--manifest (or --contract) needs --prompt TEXT or --tasks FILE.jsonl",
        ));
    };
    let text = super::read_text(file, super::MANIFEST)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| {
            super::bad_input(file, "tasks (JSON lines)", format!("line {}: {why}", i + 1))
        };
        let v: Value = serde_json::from_str(line).map_err(|e| bad(&e.to_string()))?;
        let tasks = match (&v, v.get("prompt"), v.get("tasks")) {
            (Value::String(s), _, _) => vec![s.clone()],
            (_, Some(Value::String(s)), None) => vec![s.clone()],
            (_, None, Some(Value::Array(t))) => t
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| bad("`tasks` must be strings"))?,
            _ => {
                return Err(bad(
                    "expected \"TEXT\", {\"prompt\": TEXT} or {\"tasks\": [TEXT, …]}",
                ));
            }
        };
        if tasks.is_empty() {
            return Err(bad("no task"));
        }
        out.push(Job {
            prompt: Prompt { tasks },
            plan: v.get("plan").cloned().or_else(|| plan.clone()),
        });
    }
    if out.is_empty() {
        return Err(super::usage("--tasks: the file holds no task"));
    }
    Ok(out)
}

fn read_json(p: &Path, what: &str) -> Result<Value> {
    let text = super::read_text(p, super::MANIFEST)?;
    serde_json::from_str(&text).map_err(|e| super::bad_input(p, what, e))
}

/// Runs the user's prompts over the user's manifest; prints one line per run.
pub fn run(args: &RunArgs, manifest_path: &Path) -> Result<i32> {
    let manifest = super::toolkit::load(manifest_path)?;
    run_over(args, manifest, None)
}

/// `knox run --contract`: the user's prompts over the contract's four tools
/// (`knox_engine::contract::manifest`), every run bounded by the signed contract and
/// its tools executed by the broker's `ContractExecutor`.
pub fn run_contract(args: &RunArgs, contract: super::contract::RunContract) -> Result<i32> {
    let manifest =
        knox_engine::contract::manifest().map_err(|e| fail(Kind::Software, e.to_string()))?;
    run_over(args, manifest, Some(contract))
}

fn run_over(
    args: &RunArgs,
    manifest: ToolkitManifest,
    contract: Option<super::contract::RunContract>,
) -> Result<i32> {
    let nonce =
        hex::decode(&args.nonce).map_err(|e| super::usage(format!("--nonce must be hex: {e}")))?;
    let jobs = jobs(args)?;
    let user_plans = jobs.iter().any(|j| j.plan.is_some());
    if user_plans && jobs.iter().any(|j| j.plan.is_none()) {
        return Err(super::usage(
            "every run needs a plan when one has one: give --plan, or a `plan` on every --tasks line",
        ));
    }
    if user_plans == args.models.planner.is_model() {
        return Err(super::usage(
            "with --manifest or --contract, plan with a model (--planner local:…|openai:…) or give the plan (--plan PLAN.json), one of the two",
        ));
    }
    let _out = super::out_dir(&args.out, args.force)?;
    let mut stream = super::run::stream(args)?;
    let manifest = std::sync::Arc::new(manifest);
    let cache_dir = super::absolute_cache_dir(args.models.cache.cache_dir.as_deref())?;
    let mut locals = Vec::new();
    let planner: Box<dyn Planner> = if user_plans {
        // Each plan is checked before anything runs: a bad one is the user's to fix.
        for (i, j) in jobs.iter().enumerate() {
            if let Some(p) = &j.plan {
                UserPlans::validate(p, &j.prompt, &manifest, MAX_USER_PLAN_CALLS)
                    .map_err(|e| super::usage(format!("run {i}: the plan is refused: {e}")))?;
            }
        }
        Box::new(UserPlans::new(
            jobs.iter().filter_map(|j| j.plan.clone()),
            MAX_USER_PLAN_CALLS,
        ))
    } else {
        let chat = super::model::open(&args.models.planner, cache_dir.as_deref(), &mut locals)?
            .ok_or_else(|| super::usage("--planner must name a model"))?;
        Box::new(ChatPlanner::new(chat).with_max_calls(args.max_calls))
    };
    let regulation = args
        .regulation
        .setup_judged(cache_dir.as_deref(), &mut locals)?;
    let norms = regulation.as_ref().map(|r| std::sync::Arc::clone(&r.norms));
    let executor_spec = args.models.executor.clone().unwrap_or(ModelSpec::Benign);
    let executor: Box<dyn ExecutorFactory> = match &executor_spec {
        ModelSpec::Benign => Box::new(knox_harness::BenignFactory),
        ModelSpec::Injected => {
            return Err(super::usage(
                "--executor injected replays InjecAgent's attacks: it runs with the InjecAgent suite, not a user manifest",
            ));
        }
        spec => {
            let chat = super::model::open(spec, cache_dir.as_deref(), &mut locals)?
                .ok_or_else(|| super::usage("--executor must name a model"))?;
            Box::new(ChatExecutor::new(chat, std::sync::Arc::clone(&manifest)))
        }
    };
    // The plan followed in `--trajectory` mode: tolerant unless told otherwise, since
    // a real agent repeats and reorders its reads.
    let mode = args
        .trajectory
        .unwrap_or_else(knox_types::apm::TrajectoryMode::tolerant);
    let planner = knox_agent::Following::new(planner, mode);
    let backend = crate::session::backend(&args.platform)?;
    let mut signal = knox_monitor::guard::stop::StopSignal::from_flag(crate::signals::stop_flag());
    if let Some(f) = &args.stop_file {
        signal = signal.with_file(f.clone());
    }
    let stop = knox_types::apm::StopPolicy {
        timeout_ms: args.timeout_ms,
        max_actions: args.max_actions,
        budget: args.budget,
        external: args.stop_file.is_some() || cfg!(unix),
    };
    let mut builder = Session::builder()
        .platform(backend)
        .nonce(nonce)
        .manifest(ToolkitManifest::clone(&manifest))
        .planner(planner)
        .executor(executor);
    builder = match (contract, &args.mcp, &args.responses) {
        (Some(c), _, _) => {
            let b = builder.contract(c.verified).host(c.host);
            match c.approvals {
                Some(a) => b.approvals(a),
                None => b,
            }
        }
        (None, Some(servers), _) => {
            let host = super::mcp::host(servers, args.out.join("mcp"))?;
            // Every server starts and lists its tools before any run: one that never
            // starts is a clear failure (69), not calls recorded as answered with errors.
            for s in host.servers() {
                host.list_tools(s).map_err(|e| {
                    fail(
                        Kind::Unavailable,
                        format!(
                            "MCP server `{}` of `{}` does not start: {e}",
                            s.name,
                            servers.display()
                        ),
                    )
                })?;
            }
            builder.host(host)
        }
        (None, None, Some(responses)) => builder.tools(
            ResponsesFile::parse(&super::read_text(responses, super::MANIFEST)?)
                .map_err(|e| super::bad_input(responses, "a responses file", e))?,
        ),
        (None, None, None) => {
            return Err(super::usage(
                "--manifest needs its tools: --mcp SERVERS.toml (real MCP servers) or --responses FILE.json (canned outputs, in process)",
            ));
        }
    };
    // Checked before each run: a stop signal ends the whole `--tasks` run, not only the
    // run it arrives in (the runs not started are not started).
    let stopping = signal.clone();
    builder = builder
        .stop(stop)
        .signal(signal)
        .output(&args.out)
        .encoding(args.evidence.into())
        .refresh(args.refresh)
        .checkpoints(knox_monitor::aeg::Checkpoints {
            every_nodes: args.checkpoint_every_nodes,
            every_ms: args.checkpoint_every_ms,
        });
    if let Some(r) = regulation {
        builder = builder.regulations(r);
    }
    if args.journal || stream.is_some() {
        builder = builder.journal_dir(&args.out);
    }
    let session = builder
        .build()
        .map_err(|e| fail(Kind::Unavailable, e.to_string()))?;
    if let Some(s) = stream.as_mut() {
        // Before any run: a process whose runs are all withheld still shows.
        s.announce(&crate::session::announcement(session.runtime())?, &args.out)?;
    }
    let (mut complete, mut rows) = (0usize, Vec::new());
    for job in &jobs {
        if stopping.is_set() && !rows.is_empty() {
            break;
        }
        let out = session
            .run_prompt(&job.prompt)
            .map_err(super::engine_failure)?;
        // Self-check as a verifier handed nothing would: the bundle alone suffices.
        let report = knox_verify::verify_bundle(
            &out.bundle,
            &knox_verify::manifests::Manifests::new(),
            knox_verify::Options {
                norms: norms.as_deref(),
                ..knox_verify::Options::DANGEROUS_SIMULATED
            },
        );
        let ok = report.outcome == knox_verify::Outcome::Complete;
        complete += usize::from(ok);
        let blocked: BTreeMap<&str, u64> = out
            .stats
            .blocked_by
            .iter()
            .map(|(g, n)| (g.as_str(), *n))
            .collect();
        let encoding = knox_engine::Encoding::from(args.evidence);
        let bundle = args
            .out
            .join(format!("{}.{}", out.bundle.run_id, encoding.extension()));
        if let Some(s) = stream.as_mut() {
            // The bytes as written (as JSON), which the live run's sealed copy must
            // agree with.
            let bytes = match encoding {
                knox_engine::Encoding::Json => std::fs::read(&bundle)
                    .map_err(|e| fail(Kind::IoErr, format!("{}: {e}", bundle.display())))?,
                knox_engine::Encoding::Compact | knox_engine::Encoding::Store => {
                    knox_engine::bundle_bytes(&out.bundle)?
                }
            };
            s.seal(&bytes);
        }
        if !args.json {
            crate::outln!(
                "{}: {} proposals, {} executed, blocked {:?}, {} plan failure(s); verified {} — {}",
                out.bundle.run_id,
                out.stats.proposals,
                out.bundle.summary.counts.executed,
                blocked,
                out.stats.plan_failures,
                report.outcome.name(),
                bundle.display()
            );
        }
        rows.push(json!({
            "run": out.bundle.run_id,
            "bundle": bundle.display().to_string(),
            "proposals": out.stats.proposals,
            "executed": out.bundle.summary.counts.executed,
            "blocked_by": blocked,
            "plan_failures": out.stats.plan_failures,
            "verified": report.outcome.name(),
        }));
    }
    if let Some(s) = stream {
        s.finish();
    }
    let summary = json!({
        "manifest": manifest.hash().to_string(),
        "planner": if user_plans { "user-plan".to_string() } else { args.models.planner.to_string() },
        "executor": executor_spec.to_string(),
        "runs": rows,
        "verified_complete": complete,
        "not_started": jobs.len() - rows.len(),
        "stopped_by_signal": crate::signals::received(),
    });
    super::write_file(
        &args.out.join("summary.json"),
        serde_json::to_vec_pretty(&summary)?,
    )?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        crate::outln!(
            "{complete}/{} verified complete; manifest {}: `knox verify BUNDLE` needs no other file",
            rows.len(),
            manifest.hash()
        );
    }
    Ok(if complete == rows.len() { 0 } else { 1 })
}
