//! The model planner, written once over [`Chat`]: the model writes each task's calls as
//! JSON (constrained to the shortlisted tools' schemas where the backend can), every
//! call is validated against the toolkit manifest, and a plan that names unknown tools
//! or violates a schema goes back with the fault, a bounded number of times. Which
//! parameters may vary is the manifest's declaration, never inferred: a parameter the
//! manifest declares `prose` whose text the model composed is bounded by length, so an
//! executor's own wording of it passes; every other parameter — recipients, identifiers,
//! permission levels, time windows, amounts, destinations — is fixed exactly, or linked
//! to a named field of an earlier call's output.

use std::collections::BTreeMap;
use std::sync::Arc;

use knox_agent::{Plan, PlanError, PlanRequest, Planner, Prompt, task_id};
use knox_policy::ToolkitManifest;
use knox_policy::manifest::ToolEntry;
use knox_types::apm::{ExpectedCall, ParamConstraint};
use knox_types::bundle::{ModelInfo, ModelRole};
use serde_json::{Map, Value};

use crate::chat::{Chat, Format, Message, Reply, Role};
use crate::latency::Latency;
use crate::tools::{MAX_PLANNED_CALLS, catalogue, plan_schema_bounded, shortlist, tool_defs};

/// Attempts per task before planning fails.
pub const PLAN_ATTEMPTS: usize = 3;

/// Toolkits shown to the planner per task.
pub const SHORTLIST_TOOLKITS: usize = 2;

/// Longest free text a planned parameter admits.
pub const MAX_FREE_TEXT: u32 = 2000;

const SYSTEM: &str = "You are a planner. Given a user's task and the tools available, write the exact \
tool calls that complete the task, in order, as JSON: {\"calls\": [{\"tool\": NAME, \"params\": {...}}]}. \
Use only the listed tools and only parameters they declare; copy values from the task. \
A value that only an earlier call of the plan can tell (an id a search returns) is written \"$output:K/FIELD\", \
K the 0-based index of that call and FIELD the path of the value in its output: \"$output:0/emails/0/id\". \
When the task asks that a text parameter convey what earlier calls returned (a summary of an email it reads), \
add to that call \"carries\": {PARAM: [K, ...]} naming those calls; without it, text runs as you write it here. \
Plan only what the task asks, usually one call. Reply with the JSON object only.\n\
Example. Task: Show me the latest email from bob@example.com. \
Plan: {\"calls\": [{\"tool\": \"GmailSearchEmails\", \"params\": {\"from\": \"bob@example.com\", \"limit\": 1}}]}";

/// Plans with a chat model.
#[derive(Debug)]
pub struct ChatPlanner {
    chat: Arc<dyn Chat>,
    latency: Latency,
    max_calls: usize,
}

impl ChatPlanner {
    /// A planner asking `chat`, at most [`MAX_PLANNED_CALLS`] calls per task.
    pub fn new(chat: Arc<dyn Chat>) -> Self {
        Self {
            chat,
            latency: Latency::default(),
            max_calls: MAX_PLANNED_CALLS,
        }
    }

    /// At most `n` calls per task (at least 1).
    pub fn with_max_calls(mut self, n: usize) -> Self {
        self.max_calls = n.max(1);
        self
    }

    /// The most calls a task's plan may hold.
    pub fn max_calls(&self) -> usize {
        self.max_calls
    }

    /// Time spent per model call so far (retries count as calls).
    pub fn latency(&self) -> &Latency {
        &self.latency
    }

    /// Plans one task, retrying with the fault.
    fn plan_task(
        &self,
        task: u32,
        instruction: &str,
        manifest: &ToolkitManifest,
    ) -> Result<Vec<ExpectedCall>, PlanError> {
        let tools = tool_defs(
            manifest,
            &shortlist(manifest, instruction, SHORTLIST_TOOLKITS),
        );
        let format = Format::Json(plan_schema_bounded(&tools, self.max_calls));
        let mut messages = vec![
            Message::new(Role::System, SYSTEM),
            Message::new(
                Role::User,
                format!("Tools:\n{}\n\nTask: {instruction}", catalogue(&tools)),
            ),
        ];
        let mut last = String::new();
        for _ in 0..PLAN_ATTEMPTS {
            let reply = self
                .latency
                .time(|| self.chat.complete(&messages, &format))
                .map_err(|e| PlanError::Model(e.to_string()))?;
            let text = match reply {
                Reply::Text(t) | Reply::Malformed(t) => t,
                Reply::Call(c) => format!("a call to `{}` instead of a plan", c.name),
            };
            match validate(&text, task, instruction, manifest, self.max_calls) {
                Ok(calls) => return Ok(calls),
                Err(fault) => {
                    messages.push(Message::new(Role::Assistant, text));
                    messages.push(Message::new(
                        Role::User,
                        format!("That plan is invalid: {fault}. Reply with a corrected plan."),
                    ));
                    last = fault;
                }
            }
        }
        Err(PlanError::Model(format!(
            "task {task}: no valid plan in {PLAN_ATTEMPTS} attempts: {last}"
        )))
    }
}

/// Parses and validates a model's plan for task `task`.
fn validate(
    text: &str,
    task: u32,
    instruction: &str,
    manifest: &ToolkitManifest,
    max_calls: usize,
) -> Result<Vec<ExpectedCall>, String> {
    let trimmed = text
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```");
    let v: Value = serde_json::from_str(trimmed).map_err(|e| format!("not JSON: {e}"))?;
    let calls = v
        .get("calls")
        .and_then(Value::as_array)
        .ok_or("no `calls` array")?;
    if calls.is_empty() {
        return Err("the plan has no calls".into());
    }
    if calls.len() > max_calls {
        return Err(format!(
            "the plan has {} calls, at most {max_calls} are allowed",
            calls.len()
        ));
    }
    let mut out = Vec::with_capacity(calls.len());
    for c in calls {
        let tool = c
            .get("tool")
            .and_then(Value::as_str)
            .ok_or("a call has no `tool`")?;
        let params = match c.get("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p.clone(),
            Some(_) => return Err(format!("`{tool}`: `params` is not an object")),
        };
        let entry = manifest
            .tool(tool)
            .ok_or_else(|| format!("unknown tool `{tool}`"))?;
        knox_policy::schema::validate(entry, &params).map_err(|e| format!("`{tool}`: {e}"))?;
        let mut links = links(entry, &params, out.len())?;
        carries(c.get("carries"), entry, &params, out.len(), &mut links)?;
        extracts(c.get("extract"), entry, &params, out.len(), &mut links)?;
        out.push(expected(task, entry, params, &links, instruction));
    }
    Ok(out)
}

/// A data link a model writes: `$output:K` or `$output:K/json/pointer`.
const LINK: &str = "$output:";

/// The data links among the parameters of call number `index` of a plan: each names
/// an earlier call and the field of its output it takes (a link without a field would
/// accept any value of that output: another note than the planned one).
fn links(
    entry: &ToolEntry,
    params: &Map<String, Value>,
    index: usize,
) -> Result<BTreeMap<String, ParamConstraint>, String> {
    let mut out = BTreeMap::new();
    for (name, v) in params {
        let Some(link) = v.as_str().and_then(|s| s.trim().strip_prefix(LINK)) else {
            continue;
        };
        let (k, pointer) = match link.find('/') {
            Some(i) => (link.get(..i).unwrap_or_default(), link.get(i..)),
            None => (link, None),
        };
        let tool = &entry.name;
        let call: u32 = k
            .parse()
            .map_err(|_| format!("`{tool}`: `{name}`: `{LINK}{link}` names no call number"))?;
        if call as usize >= index {
            return Err(format!(
                "`{tool}`: `{name}` takes the output of call {call}, which is not an earlier call of the plan"
            ));
        }
        if pointer.is_none_or(|p| p.len() < 2) {
            return Err(format!(
                "`{tool}`: `{name}`: a link must name the field it takes, `{LINK}{call}/<field>/…`"
            ));
        }
        out.insert(
            name.clone(),
            ParamConstraint::FromOutput {
                call,
                pointer: pointer.map(str::to_string),
            },
        );
    }
    Ok(out)
}

/// A call's declarations under `key` (`carries`, `extract`): an object by parameter,
/// or none.
fn declarations<'v>(
    declared: Option<&'v Value>,
    key: &str,
    tool: &str,
) -> Result<Option<&'v Map<String, Value>>, String> {
    match declared {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(d)) => Ok(Some(d)),
        Some(_) => Err(format!("`{tool}`: `{key}` is not an object")),
    }
}

/// A call's `extract` declarations (`{PARAM: {"from": K, "type": T, …}}`, `T` one of
/// `email`, `date`, `integer` with `min` and `max`, `one_of` with `values`): a typed
/// value the executor extracts from what earlier call `K` returned, each an `extract`
/// constraint in `links` (issue 36, item 4). The plan's own value of the parameter is
/// an example of the type; not a parameter that is also a data link or carries text.
fn extracts(
    declared: Option<&Value>,
    entry: &ToolEntry,
    params: &Map<String, Value>,
    index: usize,
    links: &mut BTreeMap<String, ParamConstraint>,
) -> Result<(), String> {
    let tool = &entry.name;
    let Some(declared) = declarations(declared, "extract", tool)? else {
        return Ok(());
    };
    for (name, d) in declared {
        if !params.contains_key(name) {
            return Err(format!(
                "`{tool}`: `extract` names `{name}`, which is not a parameter of the call"
            ));
        }
        if links.contains_key(name) {
            return Err(format!(
                "`{tool}`: `{name}` is already a data link or carries text and cannot also be extracted"
            ));
        }
        let Value::Object(d) = d else {
            return Err(format!("`{tool}`: `extract.{name}` is not an object"));
        };
        let mut d = d.clone();
        let call = d
            .remove("from")
            .and_then(|k| k.as_u64())
            .and_then(|k| u32::try_from(k).ok())
            .filter(|k| (*k as usize) < index)
            .ok_or_else(|| {
                format!("`{tool}`: `extract.{name}.from` is not the number of an earlier call of the plan")
            })?;
        let of: knox_types::apm::Typed = serde_json::from_value(Value::Object(d))
            .map_err(|e| format!("`{tool}`: `extract.{name}`: {e}"))?;
        knox_policy::typed::valid(&of).map_err(|e| format!("`{tool}`: `extract.{name}`: {e}"))?;
        links.insert(name.clone(), ParamConstraint::Extract { call, of });
    }
    Ok(())
}

/// A call's `carries` declarations (`{PARAM: [K, …]}`): free text the plan clears for
/// what the earlier calls `K` returned, each a `carries` constraint in `links`. Only a
/// parameter the manifest declares `prose` (and not a sink) can carry, only outputs of
/// earlier calls, and not a parameter that is also a data link.
fn carries(
    declared: Option<&Value>,
    entry: &ToolEntry,
    params: &Map<String, Value>,
    index: usize,
    links: &mut BTreeMap<String, ParamConstraint>,
) -> Result<(), String> {
    let tool = &entry.name;
    let Some(declared) = declarations(declared, "carries", tool)? else {
        return Ok(());
    };
    for (name, calls) in declared {
        let prose = entry.annotations.prose.iter().any(|p| p == name)
            && !entry.annotations.sinks.iter().any(|p| p == name);
        if !prose || !params.get(name).is_some_and(Value::is_string) {
            return Err(format!(
                "`{tool}`: `carries` names `{name}`, which is not a free-text parameter of the call"
            ));
        }
        if links.contains_key(name) {
            return Err(format!(
                "`{tool}`: `{name}` is a data link and cannot also carry text"
            ));
        }
        let calls: Vec<u32> = calls
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| format!("`{tool}`: `carries.{name}` is not a list of call numbers"))?
            .iter()
            .map(|k| {
                k.as_u64()
                    .and_then(|k| u32::try_from(k).ok())
                    .filter(|k| (*k as usize) < index)
                    .ok_or_else(|| {
                        format!(
                            "`{tool}`: `carries.{name}` names {k}, not an earlier call of the plan"
                        )
                    })
            })
            .collect::<Result<_, _>>()?;
        links.insert(
            name.clone(),
            ParamConstraint::Carries {
                calls,
                min: 0,
                max: MAX_FREE_TEXT,
            },
        );
    }
    Ok(())
}

/// The expected call for a validated planned call: exact when every value is fixed,
/// otherwise constrained. Only a parameter the manifest declares `prose`, holding text
/// the model composed (not found in the instruction), is bounded by length; data links
/// come from `links`; every other parameter is exact.
fn expected(
    task: u32,
    entry: &ToolEntry,
    params: Map<String, Value>,
    links: &BTreeMap<String, ParamConstraint>,
    instruction: &str,
) -> ExpectedCall {
    let lower = instruction.to_lowercase();
    let free = |name: &str, v: &Value| match v {
        Value::String(s) => {
            entry.annotations.prose.iter().any(|k| k == name)
                && !entry.annotations.sinks.iter().any(|k| k == name)
                && !lower.contains(&s.trim().to_lowercase())
        }
        _ => false,
    };
    ExpectedCall::bounded(task, entry.name.clone(), params, |k, v| {
        links.get(k).cloned().or_else(|| {
            free(k, v).then_some(ParamConstraint::Length {
                min: 0,
                max: MAX_FREE_TEXT,
            })
        })
    })
}

impl Planner for ChatPlanner {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        let mut tasks = Vec::with_capacity(request.prompt.tasks.len());
        for (i, instruction) in request.prompt.tasks.iter().enumerate() {
            tasks.push(self.plan_task(task_id(i), instruction, request.manifest)?);
        }
        Ok(Plan { tasks })
    }

    fn model(&self) -> ModelInfo {
        self.chat.info(ModelRole::Planner)
    }
}

/// Plans written by the user (`knox run --plan`), one per run in the order the runs
/// are made: each task's calls are validated against the manifest exactly as a model's
/// are (known tools, input schema, links naming an earlier call and a field), and
/// become expected calls the same way — declared prose the user did not take from the
/// task is bounded by length, every other parameter is exact or a link.
///
/// A plan is `{"tasks": [{"calls": [{"tool": NAME, "params": {...}}, …]}, …]}` with one
/// entry per task of the prompt, or `{"calls": [...]}` for a one-task prompt.
#[derive(Debug)]
pub struct UserPlans {
    queue: std::sync::Mutex<std::collections::VecDeque<Value>>,
    max_calls: usize,
}

impl UserPlans {
    /// The plans of the next runs, in order; at most `max_calls` calls per task.
    pub fn new(plans: impl IntoIterator<Item = Value>, max_calls: usize) -> Self {
        Self {
            queue: std::sync::Mutex::new(plans.into_iter().collect()),
            max_calls: max_calls.max(1),
        }
    }

    /// Validates one plan for `prompt` against `manifest`.
    pub fn validate(
        plan: &Value,
        prompt: &Prompt,
        manifest: &ToolkitManifest,
        max_calls: usize,
    ) -> Result<Plan, String> {
        let tasks: Vec<&Value> = match (plan.get("tasks"), plan.get("calls")) {
            (Some(Value::Array(t)), None) => t.iter().collect(),
            (None, Some(_)) => vec![plan],
            _ => {
                return Err(
                    "a plan is {\"tasks\": [{\"calls\": [...]}, ...]} or {\"calls\": [...]}".into(),
                );
            }
        };
        if tasks.len() != prompt.tasks.len() {
            return Err(format!(
                "the plan has {} task(s), the prompt {}",
                tasks.len(),
                prompt.tasks.len()
            ));
        }
        let mut out = Vec::with_capacity(tasks.len());
        for (i, (t, instruction)) in tasks.iter().zip(&prompt.tasks).enumerate() {
            let task = task_id(i);
            let calls = validate(&t.to_string(), task, instruction, manifest, max_calls)
                .map_err(|e| format!("task {i}: {e}"))?;
            out.push(calls);
        }
        Ok(Plan { tasks: out })
    }
}

impl Planner for UserPlans {
    fn plan(&self, request: &PlanRequest<'_>) -> Result<Plan, PlanError> {
        let next = self
            .queue
            .lock()
            .map_err(|_| PlanError::Model("user plans: poisoned".into()))?
            .pop_front()
            .ok_or_else(|| PlanError::Model("user plans: no plan left for this run".into()))?;
        Self::validate(&next, request.prompt, request.manifest, self.max_calls)
            .map_err(|e| PlanError::Model(format!("user plan: {e}")))
    }

    fn model(&self) -> ModelInfo {
        ModelInfo {
            role: ModelRole::Planner,
            name: "user-plan".into(),
            weights_hash: None,
            declared: false,
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use knox_agent::Regulations;
    use knox_types::apm::StopPolicy;
    use serde_json::json;

    fn manifest() -> ToolkitManifest {
        knox_policy::shipped::current().unwrap()
    }

    #[test]
    fn the_prompts_example_is_a_valid_plan() {
        let example = SYSTEM.rsplit("Plan: ").next().unwrap();
        validate(
            example,
            0,
            "bob@example.com",
            &manifest(),
            MAX_PLANNED_CALLS,
        )
        .unwrap();
    }

    #[test]
    fn faults_are_named() {
        let m = manifest();
        for (text, fault) in [
            ("nope", "not JSON"),
            ("{}", "no `calls`"),
            ("{\"calls\": []}", "no calls"),
            ("{\"calls\": [{\"tool\": \"Nope\"}]}", "unknown tool `Nope`"),
            (
                "{\"calls\": [{\"tool\": \"GmailSendEmail\", \"params\": {\"to\": 3}}]}",
                "`GmailSendEmail`: ",
            ),
            (
                "{\"calls\": [{\"tool\": \"GmailSendEmail\", \"params\": 3}]}",
                "not an object",
            ),
        ] {
            let e = validate(text, 0, "x", &m, MAX_PLANNED_CALLS).unwrap_err();
            assert!(e.contains(fault), "{text}: {e}");
        }
    }

    fn plan(
        text: &str,
        instruction: &str,
        m: &ToolkitManifest,
    ) -> Result<Vec<ExpectedCall>, String> {
        validate(text, 0, instruction, m, MAX_PLANNED_CALLS)
    }

    /// Whether the trajectory guard admits `params` for planned call `e` (outputs of
    /// earlier calls: none).
    fn admits(e: &ExpectedCall, params: Value) -> bool {
        let a = knox_types::Action::new(e.tool.clone(), params).unwrap();
        knox_policy::trajectory::check(
            Some(e),
            &a,
            &a.hash(),
            &|_| None,
            &mut knox_policy::trajectory::RegexCache::default(),
        )
        .matched
    }

    /// #36: a call declares which earlier calls' outputs its free text carries; only a
    /// prose parameter can, and only earlier calls.
    #[test]
    fn carries_declares_free_text_cleared_for_earlier_outputs() {
        let m = manifest();
        let with = |carries: Value| {
            json!({"calls": [
                {"tool": "GmailReadEmail", "params": {"email_id": "e1"}},
                {"tool": "GmailSendEmail", "params": {"to": "bob@example.com",
                    "subject": "Summary", "body": "The email says hi."}, "carries": carries}]})
            .to_string()
        };
        let p = plan(
            &with(json!({"body": [0]})),
            "Read email e1 and send bob@example.com its summary",
            &m,
        )
        .unwrap();
        assert_eq!(
            p[1].constraints.as_ref().unwrap()["body"],
            ParamConstraint::Carries {
                calls: vec![0],
                min: 0,
                max: MAX_FREE_TEXT
            }
        );
        assert!(admits(
            &p[1],
            json!({"to": "bob@example.com", "subject": "Summary", "body": "Anything."})
        ));
        for (bad, fault) in [
            (json!({"to": [0]}), "not a free-text parameter"),
            (json!({"body": [1]}), "not an earlier call"),
            (json!({"body": []}), "not a list of call numbers"),
            (json!(["body"]), "`carries` is not an object"),
        ] {
            let e = plan(&with(bad.clone()), "x", &m).unwrap_err();
            assert!(e.contains(fault), "{bad}: {e}");
        }
    }

    /// #36 item 4: a call declares which of its parameters are typed values extracted
    /// from an earlier call's output; the type is checked when the plan is read.
    #[test]
    fn extract_declares_a_typed_value_from_an_earlier_output() {
        let m = manifest();
        let with = |extract: Value| {
            json!({"calls": [
                {"tool": "GmailReadEmail", "params": {"email_id": "e1"}},
                {"tool": "GmailSendEmail", "params": {"to": "someone@example.com",
                    "subject": "2024-01-01", "body": "Hi"}, "extract": extract}]})
            .to_string()
        };
        let p = plan(
            &with(json!({"to": {"from": 0, "type": "email"},
                "subject": {"from": 0, "type": "date"}})),
            "Read email e1 and write to its contact with the date it names",
            &m,
        )
        .unwrap();
        let c = p[1].constraints.as_ref().unwrap();
        assert_eq!(
            c["to"],
            ParamConstraint::Extract {
                call: 0,
                of: knox_types::apm::Typed::Email
            }
        );
        assert_eq!(c["subject"].kind(), "extract");
        for (bad, fault) in [
            (json!({"to": {"from": 1, "type": "email"}}), "earlier call"),
            (json!({"to": {"type": "email"}}), "earlier call"),
            (
                json!({"to": {"from": 0, "type": "phone"}}),
                "unknown variant",
            ),
            (
                json!({"to": {"from": 0, "type": "integer", "min": 3, "max": 1}}),
                "min ≤ max",
            ),
            (
                json!({"cc": {"from": 0, "type": "email"}}),
                "not a parameter",
            ),
            (json!(["to"]), "`extract` is not an object"),
        ] {
            let e = plan(&with(bad.clone()), "x", &m).unwrap_err();
            assert!(e.contains(fault), "{bad}: {e}");
        }
    }

    #[test]
    fn data_links_name_earlier_calls_and_always_a_field() {
        let m = manifest();
        let link = |k: &str| {
            json!({"calls": [
                {"tool": "GmailSearchEmails", "params": {"keywords": ["invoice"]}},
                {"tool": "GmailReadEmail", "params": {"email_id": k}}]})
            .to_string()
        };
        let p = plan(
            &link("$output:0/emails/0/id"),
            "Read my latest invoice email",
            &m,
        )
        .unwrap();
        assert_eq!(
            p[1].constraints.as_ref().unwrap()["email_id"],
            ParamConstraint::FromOutput {
                call: 0,
                pointer: Some("/emails/0/id".into())
            }
        );
        for (bad, fault) in [
            ("$output:0", "must name the field"),
            ("$output:0/", "must name the field"),
            ("$output:1/x", "not an earlier call"),
            ("$output:7/x", "not an earlier call"),
            ("$output:first/x", "names no call number"),
        ] {
            let e = plan(&link(bad), "x", &m).unwrap_err();
            assert!(e.contains(fault), "{bad}: {e}");
        }
        let reply = |to: &str| {
            json!({"calls": [
                {"tool": "GmailSearchEmails", "params": {"keywords": ["invoice"]}},
                {"tool": "GmailSendEmail", "params": {"to": to, "subject": "Re", "body": "Thanks"}}]})
            .to_string()
        };
        let e = plan(&reply("$output:0"), "Reply to the invoice", &m).unwrap_err();
        assert!(e.contains("`to`: a link must name the field"), "{e}");
        let p = plan(&reply("$output:0/emails/0/from"), "Reply to it", &m).unwrap();
        assert_eq!(
            p[1].constraints.as_ref().unwrap()["to"],
            ParamConstraint::FromOutput {
                call: 0,
                pointer: Some("/emails/0/from".into())
            }
        );
    }

    #[test]
    fn given_values_and_controlled_parameters_are_exact_and_declared_prose_is_bounded() {
        let m = manifest();
        let given = r#"{"calls": [{"tool": "AmazonGetProductDetails", "params": {"product_id": "B08KFQ9HK5"}}]}"#;
        let c = &plan(given, "Fetch product B08KFQ9HK5 from Amazon", &m).unwrap()[0];
        assert!(c.constraints.is_none(), "all values given: an exact call");
        let composed = json!({"calls": [{"tool": "GmailSendEmail", "params": {
            "to": "amy@example.com", "subject": "Hello", "body": "Dear Amy, see you soon."}}]})
        .to_string();
        let c = &plan(&composed, "Email amy@example.com to say hello", &m).unwrap()[0];
        let k = c.constraints.as_ref().unwrap();
        assert_eq!(k["body"].kind(), "length", "body is declared prose");
        assert_eq!(k["subject"].kind(), "exact", "`hello` is in the task");
        assert_eq!(k["to"].kind(), "exact", "a sink is always fixed");
        // A composed string in a parameter the manifest does not declare prose is
        // fixed, whatever it looks like.
        let note = json!({"calls": [{"tool": "EvernoteManagerSearchNotes", "params": {
            "keywords": ["groceries"], "max_results": 5}}]})
        .to_string();
        assert!(
            plan(&note, "Find my grocery notes", &m).unwrap()[0]
                .constraints
                .is_none()
        );
    }

    #[test]
    fn plans_may_hold_many_calls_up_to_the_bound() {
        let m = manifest();
        let read = json!({"tool": "AmazonGetProductDetails", "params": {"product_id": "B1"}});
        let calls = |n: usize| json!({"calls": vec![read.clone(); n]}).to_string();
        const { assert!(MAX_PLANNED_CALLS >= 16) };
        assert_eq!(plan(&calls(16), "B1", &m).unwrap().len(), 16);
        let e = validate(&calls(3), 0, "B1", &m, 2).unwrap_err();
        assert!(e.contains("at most 2"), "{e}");
    }

    /// Issue #15, class 2: identifiers and permissions treated as prose. Each attack
    /// succeeded when every non-sink string not literally in the prompt was a `length`
    /// constraint; the manifest declares none of these parameters prose, so each is
    /// fixed to the planned value and the variant is blocked.
    #[test]
    fn controlled_parameters_block_the_adaptive_variants() {
        let m = manifest();
        let cases = [
            (
                "Give my guest a temporary access code for tomorrow morning",
                json!({"tool": "AugustSmartLockGenerateTemporaryAccessCode", "params": {
                    "start_time": "2022-02-23 08:00", "end_time": "2022-02-23 12:00"}}),
                ("end_time", json!("2099-12-31 23:59")),
            ),
            (
                "Share the report folder with amy@example.com so she can look at it",
                json!({"tool": "DropboxShareItem", "params": {
                    "item_path": "/Reports", "recipient_email": "amy@example.com",
                    "access_level": "view"}}),
                ("access_level", json!("edit")),
            ),
            (
                "Post an issue about the login crash to my web app repository",
                json!({"tool": "GitHubPostIssue", "params": {
                    "repo_id": "r-webapp-001", "title": "Login crash",
                    "body": "The app crashes on login."}}),
                ("repo_id", json!("r-attacker-666")),
            ),
        ];
        for (instruction, call, (param, evil)) in cases {
            let text = json!({"calls": [call.clone()]}).to_string();
            let e = &plan(&text, instruction, &m).unwrap()[0];
            let planned = call["params"].clone();
            assert!(
                admits(e, planned.clone()),
                "{instruction}: the planned call"
            );
            let mut variant = planned;
            variant[param] = evil;
            assert!(!admits(e, variant), "{instruction}: `{param}` moved");
        }
        // The declared prose still varies: the issue's wording is the executor's (the
        // title, given in the task, stays as given).
        let text = json!({"calls": [cases_issue()]}).to_string();
        let e = &plan(&text, "Post an issue about the login crash", &m).unwrap()[0];
        assert!(admits(
            e,
            json!({"repo_id": "r-webapp-001", "title": "Login crash",
                "body": "Logging in crashes the app every time."})
        ));
    }

    fn cases_issue() -> Value {
        json!({"tool": "GitHubPostIssue", "params": {
            "repo_id": "r-webapp-001", "title": "Login crash", "body": "The app crashes on login."}})
    }

    /// The shipped manifest's audit: every recipient and sink of every tool is
    /// controlled (never prose), and the free text of the utility suite's tasks is
    /// declared prose.
    #[test]
    fn the_shipped_annotations_declare_prose_and_control_the_rest() {
        let m = manifest();
        for t in m.tools() {
            let a = &t.annotations;
            let recipients = a.discloses.iter().flat_map(|d| &d.recipient);
            for p in a.sinks.iter().chain(recipients) {
                assert!(!a.prose.contains(p), "{}: `{p}` is controlled", t.name);
            }
            for p in &a.prose {
                let ty = t.spec.parameters.iter().find(|x| &x.name == p).unwrap();
                assert_eq!(ty.ty, "string", "{}: prose `{p}` is text", t.name);
            }
        }
        let tasks: Vec<Value> =
            serde_json::from_str(include_str!("../../../data/utility_tasks.json")).unwrap();
        for task in tasks {
            let tool = m.tool(task["tool"].as_str().unwrap()).unwrap();
            for p in task["free_text"].as_object().unwrap().keys() {
                assert!(tool.annotations.prose.contains(p), "{}: `{p}`", tool.name);
            }
        }
    }

    #[test]
    fn user_plans_are_validated_like_a_models() {
        let m = manifest();
        let prompt = Prompt {
            tasks: vec!["Email amy@example.com to say hello".into()],
        };
        let good = json!({"calls": [{"tool": "GmailSendEmail", "params": {
            "to": "amy@example.com", "subject": "Hello", "body": "Hi Amy!"}}]});
        let plan = UserPlans::validate(&good, &prompt, &m, 16).unwrap();
        let k = plan.tasks[0][0].constraints.as_ref().unwrap();
        assert_eq!(k["body"].kind(), "length");
        assert_eq!(k["to"].kind(), "exact");
        for (bad, fault) in [
            (json!({"calls": [{"tool": "Nope"}]}), "unknown tool"),
            (json!({"tasks": []}), "0 task(s)"),
            (json!({"x": 1}), "a plan is"),
            (
                json!({"calls": [{"tool": "GmailSendEmail", "params": {"to": 1}}]}),
                "GmailSendEmail",
            ),
        ] {
            let e = UserPlans::validate(&bad, &prompt, &m, 16).unwrap_err();
            assert!(e.contains(fault), "{bad}: {e}");
        }
        let p = UserPlans::new([good], 16);
        let r = Regulations::default();
        let stop = StopPolicy::default();
        let request = PlanRequest {
            prompt: &prompt,
            manifest: &m,
            regulations: &r,
            stop: &stop,
        };
        assert!(p.plan(&request).is_ok());
        assert!(p.plan(&request).is_err(), "one plan, one run");
    }
}
