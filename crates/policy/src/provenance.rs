//! Flow control by provenance (issue 36, items 1 and 2): a parameter of a planned call
//! that the executor composed carries every output its agent's model read before it —
//! whatever the parameter's text looks like, since a model that has read a secret can
//! write it in any encoding — and may go only where the plan clears it for all of
//! them. Every call is such a sink, not only a disclosure: a search's query reaches
//! the search service, and what a write stores a later share sends. Nothing here reads the parameter's content: what decides is where data came
//! from ([`Source`]) and what the plan declares ([`ParamConstraint::Carries`],
//! [`ParamConstraint::FromOutput`]).
//!
//! Per parameter of the call as it would run:
//!
//! - **Clean** (no entry): a value the plan fixes — the call matched its step by hash,
//!   or the parameter's constraint is `exact`, `one_of`, `text` or `set` (the value is
//!   then the plan's own, [`crate::trajectory::as_planned`]), or an `omittable` one at
//!   its default. (A composed value that happens to be text of the user's prompt is not
//!   clean: which part of the prompt the executor picks is itself a choice that carries
//!   bits.)
//! - **Linked** (`from_output` of call `k`): the value is a field of `k`'s output; it
//!   carries that output only, and the link clears it.
//! - **Composed** (every other constraint: `length`, `carries`, `pattern`, `range`,
//!   `any`, `schema`): it carries every source of the context; a `carries` constraint
//!   clears the outputs of the calls it names.
//!
//! A parameter whose sources are all cleared runs as composed. Otherwise it runs as the
//! plan wrote it — the expected call's own value, written from the user's prompt before
//! any tool ran — and, when the plan has none, the call is withheld (blocked). A
//! parameter the manifest lists as a sink (a recipient, a URL, an amount) is never
//! replaced — a planned example is no address to send to — but withheld, unless every
//! scalar of its value is a token of the user's prompt (the user named it; which of the
//! prompt's tokens is picked is a choice of a few bits, and the sink check decides the
//! rest). So a
//! secret read in one step never leaves in a later step's free text unless the plan
//! said that text is made of that step's output; an honest paraphrase still runs, as
//! the plan's words.

use knox_types::apm::{ExpectedCall, ParamConstraint};
use knox_types::canon;
use knox_types::payload::ArgFlow;
use serde_json::{Map, Value};

use crate::dataflow::{contains_token, scalars};
use crate::manifest::{Effect, InfoType, ToolEntry};

/// An output whose data the executor's model read: a `tool_output` of its agent (or,
/// when the APM shares the run's outputs, of the run), or a `heard` node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Source {
    /// The node.
    pub node: u64,
    /// Its trajectory position in the deciding agent's plan, when that agent produced
    /// it (only then can the plan clear it).
    pub step: Option<u32>,
}

/// Whether an output of `entry` (of an unknown tool: `None`) holds data a flow must be
/// cleared for: anything but an output the manifest declares public (`returns` with
/// only the `public` information type), or the status a tool that only changes or sends
/// returns (`write` or `disclose` without `returns`). A read or a command that declares
/// nothing is taken to return data.
pub fn holds_data(entry: Option<&ToolEntry>) -> bool {
    let Some(t) = entry else {
        return true;
    };
    match &t.annotations.returns {
        Some(r) => r.info_types.iter().any(|i| *i != InfoType::Public) || r.info_types.is_empty(),
        None => matches!(t.effect(), Effect::Read | Effect::Execute),
    }
}

/// What the provenance stage decided for one call.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    /// One entry per parameter that is not clean, in name order.
    pub flows: Vec<ArgFlow>,
    /// The parameters as they run, when the plan's values replace some: composed
    /// values whose sources are all cleared, the plan's values in place of the others.
    /// `None`: they run as given.
    pub params: Option<Map<String, Value>>,
}

impl Decided {
    /// Whether the call may run: no parameter withheld.
    pub fn passed(&self) -> bool {
        passes(&self.flows)
    }
}

/// Whether no parameter of `flows` was withheld (or left uncleared).
pub fn passes(flows: &[ArgFlow]) -> bool {
    flows
        .iter()
        .all(|f| f.ran != WITHHELD && f.ran != UNCLEARED)
}

/// `ran` of a parameter that runs as the executor composed it.
pub const COMPOSED: &str = "composed";
/// `ran` of a parameter replaced by the plan's value.
pub const PLANNED: &str = "planned";
/// `ran` of a parameter neither cleared nor planned: the call is blocked.
pub const WITHHELD: &str = "withheld";
/// `ran` of a parameter of an unplanned call (a run bounded by a contract alone) whose
/// sink the contract does not clear for all it carries: the call is blocked.
pub const UNCLEARED: &str = "uncleared";

/// Decides the parameters `params` of a call no plan matched, under a contract that
/// bounds the run alone: every parameter is the executor's, so each carries every
/// source of `sources` (the outputs holding data its model read, in commit order, each
/// with whether the contract clears this call's sink for it). One entry per parameter,
/// in name order: `composed` when every source is cleared, `uncleared` otherwise — no
/// plan holds a value to run in its place. Nothing read: no entry.
pub fn decide_unplanned(params: &Map<String, Value>, sources: &[(u64, bool)]) -> Vec<ArgFlow> {
    if sources.is_empty() {
        return Vec::new();
    }
    let all: Vec<u64> = sources.iter().map(|(n, _)| *n).collect();
    let cleared: Vec<u64> = sources
        .iter()
        .filter(|(_, c)| *c)
        .map(|(n, _)| *n)
        .collect();
    let ran = if cleared.len() == all.len() {
        COMPOSED
    } else {
        UNCLEARED
    };
    let mut names: Vec<&String> = params.keys().collect();
    names.sort();
    names
        .into_iter()
        .map(|p| ArgFlow {
            param: p.clone(),
            sources: all.clone(),
            cleared: cleared.clone(),
            ran: ran.into(),
        })
        .collect()
}

/// Decides the parameters `params` (the call as it would run) of a call of `entry`
/// matched to plan step `expected`, its agent's model having read what `context` gives
/// (in commit order; asked at most once, and only when a parameter is not clean);
/// `prompt` holds the task instructions.
pub fn decide(
    entry: &ToolEntry,
    expected: &ExpectedCall,
    params: &Map<String, Value>,
    prompt: &[&str],
    context: &dyn Fn() -> Vec<Source>,
) -> Decided {
    let mut out = Decided {
        flows: Vec::new(),
        params: None,
    };
    // A call matched by its hash is the plan's call itself.
    let Some(constraints) = &expected.constraints else {
        return out;
    };
    let mut names: Vec<&String> = params.keys().collect();
    names.sort();
    let mut read: Option<Vec<Source>> = None;
    for name in names {
        let Some(value) = params.get(name) else {
            continue;
        };
        let c = constraints.get(name);
        if matches!(carried(c, value, &[]), Carried::Clean) {
            continue;
        }
        let context = read.get_or_insert_with(context).as_slice();
        let (sources, cleared) = match carried(c, value, context) {
            Carried::Clean => continue,
            Carried::From(s) => (s.clone(), s),
            Carried::Composed { clears } => {
                let sources: Vec<u64> = context.iter().map(|s| s.node).collect();
                let cleared = context
                    .iter()
                    .filter(|s| s.step.is_some_and(|k| clears.contains(&k)))
                    .map(|s| s.node)
                    .collect();
                (sources, cleared)
            }
        };
        let sink = entry.annotations.sinks.iter().any(|k| k == name);
        let ran = if sources.iter().all(|s| cleared.contains(s)) {
            COMPOSED
        } else if sink {
            if held_by_prompt(value, prompt) {
                continue;
            }
            WITHHELD
        } else if let Some(planned) = expected.params.get(name) {
            out.params
                .get_or_insert_with(|| params.clone())
                .insert(name.clone(), planned.clone());
            PLANNED
        } else {
            WITHHELD
        };
        out.flows.push(ArgFlow {
            param: name.clone(),
            sources,
            cleared,
            ran: ran.into(),
        });
    }
    out
}

/// What a parameter's value carries, by its constraint.
enum Carried<'a> {
    /// A value of the plan's.
    Clean,
    /// A field of a linked output: these sources (one, or none when the output is not
    /// in the context), cleared by the link.
    From(Vec<u64>),
    /// Composed by the executor: every source of the context; the calls whose outputs
    /// the plan clears it for.
    Composed { clears: &'a [u32] },
}

fn carried<'a>(c: Option<&'a ParamConstraint>, value: &Value, context: &[Source]) -> Carried<'a> {
    match c {
        // A parameter the plan does not constrain cannot have matched; as composed.
        None => Carried::Composed { clears: &[] },
        Some(ParamConstraint::Omittable { default, inner }) => {
            if canon::canonical(value) == canon::canonical(default) {
                Carried::Clean
            } else {
                carried(Some(inner), value, context)
            }
        }
        Some(
            ParamConstraint::Exact { .. }
            | ParamConstraint::OneOf { .. }
            | ParamConstraint::Text { .. }
            | ParamConstraint::Set { .. },
        ) => Carried::Clean,
        Some(ParamConstraint::FromOutput { call, .. } | ParamConstraint::Extract { call, .. }) => {
            Carried::From(
                context
                    .iter()
                    .find(|s| s.step == Some(*call))
                    .map(|s| s.node)
                    .into_iter()
                    .collect(),
            )
        }
        Some(ParamConstraint::Carries { calls, .. }) => Carried::Composed { clears: calls },
        Some(
            ParamConstraint::Length { .. }
            | ParamConstraint::Pattern { .. }
            | ParamConstraint::Range { .. }
            | ParamConstraint::Any
            | ParamConstraint::Schema { .. },
        ) => Carried::Composed { clears: &[] },
    }
}

/// Whether every scalar of `value` (at least one) occurs as a token in a task
/// instruction: a recipient, URL or amount the user named.
fn held_by_prompt(value: &Value, prompt: &[&str]) -> bool {
    let mut values = Vec::new();
    scalars(value, &mut values);
    !values.is_empty()
        && values
            .iter()
            .all(|v| !v.is_empty() && prompt.iter().any(|p| contains_token(p, v)))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use serde_json::json;

    fn manifest() -> crate::ToolkitManifest {
        crate::shipped::current().unwrap()
    }

    fn email(body: ParamConstraint) -> ExpectedCall {
        let mut c = BTreeMap::new();
        c.insert(
            "to".to_string(),
            ParamConstraint::Exact {
                value: json!("bob@example.com"),
            },
        );
        c.insert(
            "subject".to_string(),
            ParamConstraint::Length { min: 0, max: 200 },
        );
        c.insert("body".to_string(), body);
        ExpectedCall::constrained(
            0,
            "GmailSendEmail",
            json!({"to": "bob@example.com", "subject": "Hello", "body": "Hello from me."})
                .as_object()
                .unwrap()
                .clone(),
            c,
        )
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    /// The parameters that run.
    fn ran(d: &Decided, given: &Map<String, Value>) -> Map<String, Value> {
        d.params.clone().unwrap_or_else(|| given.clone())
    }

    const READ: [Source; 1] = [Source {
        node: 7,
        step: Some(0),
    }];

    /// Whatever the text looks like — plain, encoded, or a paraphrase with no trace of
    /// the note — composed after the read it carries the read, and a plan that does
    /// not clear it runs its own words instead.
    #[test]
    fn composed_text_carries_every_read_whatever_it_looks_like() {
        let m = manifest();
        let entry = m.tool("GmailSendEmail").unwrap();
        let e = email(ParamConstraint::Length { min: 1, max: 5000 });
        for body in [
            "bank login: hunter2",
            "aHVudGVyMg==",
            "h.u.n.t.e.r.2",
            "Hi Bob, just saying hello!",
        ] {
            let p = params(json!({"to": "bob@example.com", "subject": "Hi", "body": body}));
            let d = decide(entry, &e, &p, &[], &|| READ.to_vec());
            assert!(d.passed());
            let r = ran(&d, &p);
            assert_eq!(r["body"], "Hello from me.", "{body}");
            assert_eq!(r["subject"], "Hello");
            assert_eq!(r["to"], "bob@example.com");
            assert_eq!(
                d.flows,
                vec![
                    ArgFlow {
                        param: "body".into(),
                        sources: vec![7],
                        cleared: vec![],
                        ran: PLANNED.into()
                    },
                    ArgFlow {
                        param: "subject".into(),
                        sources: vec![7],
                        cleared: vec![],
                        ran: PLANNED.into()
                    },
                ]
            );
        }
        // Nothing read: the executor's words run.
        let p = params(json!({"to": "bob@example.com", "subject": "Hi", "body": "Hey"}));
        let d = decide(entry, &e, &p, &[], &Vec::new);
        assert_eq!(d.params, None);
        assert!(
            d.flows
                .iter()
                .all(|f| f.ran == COMPOSED && f.sources.is_empty())
        );
    }

    #[test]
    fn a_plan_that_clears_the_read_lets_the_composed_text_run() {
        let m = manifest();
        let entry = m.tool("GmailSendEmail").unwrap();
        let e = email(ParamConstraint::Carries {
            calls: vec![0],
            min: 1,
            max: 5000,
        });
        let p = params(json!({"to": "bob@example.com", "subject": "Hello",
            "body": "Summary: the patient is stable."}));
        let d = decide(entry, &e, &p, &[], &|| READ.to_vec());
        assert_eq!(ran(&d, &p)["body"], "Summary: the patient is stable.");
        // An output the plan does not name (another agent's, heard elsewhere, another
        // step) is not cleared: the plan's words run.
        let more = [
            READ[0],
            Source {
                node: 9,
                step: None,
            },
        ];
        let d = decide(entry, &e, &p, &[], &|| more.to_vec());
        assert_eq!(ran(&d, &p)["body"], "Hello from me.");
        assert_eq!(d.flows[0].cleared, vec![7]);
        assert_eq!(d.flows[0].sources, vec![7, 9]);
    }

    #[test]
    fn with_no_planned_value_the_call_is_withheld() {
        let m = manifest();
        let entry = m.tool("GmailSendEmail").unwrap();
        let mut e = email(ParamConstraint::Length { min: 1, max: 5000 });
        e.params.remove("body");
        let p = params(json!({"to": "bob@example.com", "subject": "Hello", "body": "x"}));
        let d = decide(entry, &e, &p, &[], &|| READ.to_vec());
        assert!(!d.passed());
        assert_eq!(d.flows[0].ran, WITHHELD);
    }

    #[test]
    fn outputs_declared_public_and_status_carry_nothing() {
        let m = manifest();
        assert!(holds_data(m.tool("GmailReadEmail")));
        assert!(holds_data(None));
        assert!(!holds_data(m.tool("GmailSendEmail")));
    }

    /// A recipient is never replaced by a planned example: composed after a read, it
    /// runs only when the user named it, and is withheld otherwise.
    #[test]
    fn a_composed_recipient_runs_only_when_the_user_named_it() {
        let m = manifest();
        let entry = m.tool("GmailSendEmail").unwrap();
        let mut e = email(ParamConstraint::Length { min: 1, max: 5000 });
        e.constraints.as_mut().unwrap().insert(
            "to".into(),
            ParamConstraint::Pattern {
                regex: ".+@.+".into(),
            },
        );
        let prompt = ["Forward email e1 to bob@example.com"];
        for (to, ok) in [
            ("bob@example.com", true),
            ("bob+c2VjcmV0@example.com", false),
            ("amy@evil.example", false),
        ] {
            let p = params(json!({"to": to, "subject": "Fwd", "body": "see below"}));
            let d = decide(entry, &e, &p, &prompt, &|| READ.to_vec());
            assert_eq!(d.passed(), ok, "{to}");
            assert_eq!(ran(&d, &p)["to"], to, "never replaced");
        }
    }
}
