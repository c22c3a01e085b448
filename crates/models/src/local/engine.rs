//! The llama.cpp engine (`llama-cpp-2`): greedy decoding constrained by a grammar built
//! from the reply's JSON schema, so even a small model emits well-formed tool calls and
//! plans. One inference thread per loaded model owns the model and its context;
//! requests from every sub-agent queue there. Each request is evaluated from an empty
//! context, so a reply depends only on its prompt: output is bit-for-bit reproducible
//! for one build, whatever the order sub-agents ask in.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use knox_types::bundle::{ModelInfo, ModelRole};
use knox_types::digest::Digest;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaChatTemplate, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use serde_json::Value;

use super::{InferenceStats, LocalOptions};
use crate::chat::{Chat, Format, Message, ModelError, Reply, Role, ToolCall};
use crate::tools::{catalogue, step_schema};

/// The llama.cpp backend, initialised once per process.
fn backend() -> Result<&'static LlamaBackend, ModelError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let mut b = LlamaBackend::init().map_err(|e| e.to_string())?;
            b.void_logs();
            Ok(b)
        })
        .as_ref()
        .map_err(|e| ModelError::Local(e.clone()))
}

/// A rendered request: chat messages (role, text) and an optional GBNF grammar.
struct Job {
    messages: Vec<(String, String)>,
    grammar: Option<String>,
    reply: Sender<Result<String, ModelError>>,
}

/// A GGUF model served by its own inference thread.
#[derive(Debug)]
pub struct LocalModel {
    name: String,
    path: PathBuf,
    weights: Digest,
    jobs: Mutex<Option<Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    stats: Arc<Mutex<InferenceStats>>,
    calls: Mutex<u64>,
}

impl LocalModel {
    /// Loads the model at `path`, named `name` in the evidence (`local:smollm2`); its
    /// weights are hashed first (SHA-256, cached by path, size and mtime).
    pub fn load(name: &str, path: &Path, options: LocalOptions) -> Result<Self, ModelError> {
        let weights = knox_attest::weights::hash_file(path)
            .map_err(|e| ModelError::Local(format!("hashing `{}`: {e}", path.display())))?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::channel::<Result<(), ModelError>>();
        let stats = Arc::new(Mutex::new(InferenceStats::default()));
        let worker_stats = stats.clone();
        let worker_path = path.to_path_buf();
        let worker = std::thread::Builder::new()
            .name("knox-llama".into())
            .spawn(move || serve(&worker_path, options, &queue, &ready_tx, &worker_stats))
            .map_err(|e| ModelError::Local(format!("starting the inference thread: {e}")))?;
        ready
            .recv()
            .map_err(|_| ModelError::Local("the inference thread ended while loading".into()))??;
        Ok(Self {
            name: name.to_string(),
            path: path.to_path_buf(),
            weights,
            jobs: Mutex::new(Some(jobs)),
            worker: Mutex::new(Some(worker)),
            stats,
            calls: Mutex::new(0),
        })
    }

    /// The weights file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the weights file.
    pub fn weights(&self) -> Digest {
        self.weights
    }

    /// Inference figures so far.
    pub fn stats(&self) -> InferenceStats {
        *self.stats.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Generates a reply to `messages`, constrained by `grammar` when given.
    pub fn generate(
        &self,
        messages: Vec<(String, String)>,
        grammar: Option<String>,
    ) -> Result<String, ModelError> {
        let (reply, answer) = mpsc::channel();
        let job = Job {
            messages,
            grammar,
            reply,
        };
        let sent = self
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|q| q.send(job).is_ok())
            .unwrap_or(false);
        if !sent {
            return Err(ModelError::Local("the inference thread has ended".into()));
        }
        answer
            .recv()
            .map_err(|_| ModelError::Local("the inference thread ended mid-request".into()))?
    }

    fn next_call_id(&self) -> String {
        let mut n = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        format!("call_{n}")
    }
}

impl Drop for LocalModel {
    fn drop(&mut self) {
        // Closing the queue ends the thread, which frees the context and the model.
        self.jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = self
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = w.join();
        }
    }
}

const TOOLS_NOTE: &str = "Reply with one JSON object and nothing else: \
{\"tool\": NAME, \"params\": {...}} to call a tool, or {\"final\": ANSWER} when the tasks are done.";

/// The conversation as the chat template sees it: tools are described in the system
/// message, calls are the JSON the model wrote, results are user turns.
fn render(messages: &[Message], format: &Format) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(messages.len() + 1);
    for m in messages {
        let (role, text) = match (m.role, &m.call, &m.result_of) {
            (_, Some(c), _) => ("assistant", call_json(c)),
            (Role::Tool, _, Some((_, name))) => {
                ("user", format!("Result of {name}:\n{}", m.content))
            }
            (Role::System, _, _) => ("system", system_text(&m.content, format)),
            (r, _, _) => (r.as_str(), m.content.clone()),
        };
        out.push((role.to_string(), text));
    }
    // Always a system message: some models' templates (Gemma's) have none built in,
    // and the tools must be described somewhere.
    if !out.iter().any(|(r, _)| r == "system") {
        out.insert(0, ("system".into(), system_text("", format)));
    }
    out
}

fn system_text(base: &str, format: &Format) -> String {
    match format {
        Format::Tools(tools) => format!("{base}\n\nTools:\n{}\n\n{TOOLS_NOTE}", catalogue(tools))
            .trim_start()
            .to_string(),
        Format::Json(_) | Format::Text => {
            if base.is_empty() {
                "You are a helpful assistant.".into()
            } else {
                base.to_string()
            }
        }
    }
}

fn call_json(c: &ToolCall) -> String {
    let params = serde_json::from_str::<Value>(&c.arguments)
        .map_or_else(|_| c.arguments.clone(), |v| v.to_string());
    format!(
        "{{\"tool\": {}, \"params\": {params}}}",
        Value::String(c.name.clone())
    )
}

/// A JSON schema serialized with `tool` first and `final` ahead of other keys: the
/// grammar follows the key order, and a model should name the tool before its
/// parameters (serde_json sorts keys).
fn ordered(schema: &Value) -> String {
    match schema {
        Value::Object(o) => {
            let rank = |k: &str| match k {
                "tool" => 0,
                "final" => 1,
                _ => 2,
            };
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by_key(|k| rank(k));
            let fields: Vec<String> = keys
                .into_iter()
                .filter_map(|k| {
                    o.get(k)
                        .map(|v| format!("{}:{}", Value::String(k.clone()), ordered(v)))
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(ordered).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// The grammar a reply in `format` must follow.
fn grammar(format: &Format) -> Result<Option<String>, ModelError> {
    let schema = match format {
        Format::Text => return Ok(None),
        Format::Tools(tools) if tools.is_empty() => return Ok(None),
        Format::Tools(tools) => step_schema(tools),
        Format::Json(schema) => schema.clone(),
    };
    let grammar = llama_cpp_2::json_schema_to_grammar(&ordered(&schema))
        .map_err(|e| ModelError::Local(format!("schema to grammar: {e}")))?;
    Ok(Some(compact(&grammar)))
}

/// The grammar with whitespace between JSON tokens reduced to one optional space: a
/// small model otherwise spends its token budget pretty-printing.
fn compact(grammar: &str) -> String {
    grammar
        .lines()
        .map(|l| {
            if l.starts_with("space ::=") {
                "space ::= | \" \""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads the model's text as the format asks. Never fails: what is not a call is kept
/// verbatim for the monitor to refuse.
fn interpret(text: String, format: &Format, id: impl FnOnce() -> String) -> Reply {
    let Format::Tools(_) = format else {
        return Reply::Text(text);
    };
    let Ok(Value::Object(o)) = serde_json::from_str::<Value>(text.trim()) else {
        return Reply::Malformed(text);
    };
    match (o.get("tool"), o.get("params"), o.get("final")) {
        (Some(Value::String(name)), Some(params), _) => Reply::Call(ToolCall {
            id: id(),
            name: name.clone(),
            arguments: params.to_string(),
        }),
        (None, None, Some(Value::String(answer))) => Reply::Text(answer.clone()),
        _ => Reply::Malformed(text),
    }
}

impl Chat for LocalModel {
    fn complete(&self, messages: &[Message], format: &Format) -> Result<Reply, ModelError> {
        let text = self.generate(render(messages, format), grammar(format)?)?;
        Ok(interpret(text, format, || self.next_call_id()))
    }

    fn info(&self, role: ModelRole) -> ModelInfo {
        ModelInfo {
            role,
            name: self.name.clone(),
            weights_hash: Some(self.weights),
            declared: false,
        }
    }
}

/// The inference thread: loads the model, reports readiness, serves jobs until the
/// queue closes.
fn serve(
    path: &Path,
    options: LocalOptions,
    queue: &Receiver<Job>,
    ready: &Sender<Result<(), ModelError>>,
    stats: &Mutex<InferenceStats>,
) {
    let loaded = Engine::load(path, options);
    let engine = match loaded {
        Ok(e) => e,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut ctx = match engine.context() {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut cache = PromptCache::default();
    for job in queue {
        let result = engine.run(&mut ctx, &mut cache, &job, stats);
        let _ = job.reply.send(result);
    }
}

struct Engine {
    model: LlamaModel,
    template: LlamaChatTemplate,
    options: LocalOptions,
}

fn local(what: &str) -> impl FnOnce(String) -> ModelError + '_ {
    move |e| ModelError::Local(format!("{what}: {e}"))
}

impl Engine {
    fn load(path: &Path, options: LocalOptions) -> Result<Self, ModelError> {
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| local("loading the model")(format!("`{}`: {e}", path.display())))?;
        // The template in the GGUF metadata; a model without one gets its family's
        // (Gemma's GGUF carries none), else ChatML.
        let template = match model.chat_template(None) {
            Ok(t) => t,
            Err(_) => {
                let arch = model
                    .meta_val_str("general.architecture")
                    .unwrap_or_default();
                let name = if arch.starts_with("gemma") {
                    "gemma"
                } else {
                    "chatml"
                };
                LlamaChatTemplate::new(name).map_err(|e| local("chat template")(e.to_string()))?
            }
        };
        Ok(Self {
            model,
            template,
            options,
        })
    }

    fn context(&self) -> Result<LlamaContext<'_>, ModelError> {
        let n_ctx = self.options.context.min(self.model.n_ctx_train().max(512));
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(n_ctx))
            .with_n_batch(CHUNK as u32)
            .with_n_threads(self.options.threads)
            .with_n_threads_batch(self.options.threads);
        self.model
            .new_context(backend()?, params)
            .map_err(|e| local("creating the context")(e.to_string()))
    }

    /// One request, from an empty context. A long function: it is the decode loop.
    fn run(
        &self,
        ctx: &mut LlamaContext<'_>,
        cache: &mut PromptCache,
        job: &Job,
        stats: &Mutex<InferenceStats>,
    ) -> Result<String, ModelError> {
        let chat = job
            .messages
            .iter()
            .map(|(r, c)| LlamaChatMessage::new(r.clone(), c.replace('\0', "")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| local("message")(e.to_string()))?;
        let prompt = self
            .model
            .apply_chat_template(&self.template, &chat, true)
            .map_err(|e| local("applying the chat template")(e.to_string()))?;
        let vocab = self.model.vocab();
        let tokens = vocab.tokenize(prompt.as_bytes(), true, true);
        let n_ctx = ctx.n_ctx() as usize;
        let limit = n_ctx.saturating_sub(self.options.max_tokens);
        if tokens.is_empty() || tokens.len() > limit {
            return Err(ModelError::Context {
                tokens: tokens.len(),
                limit,
            });
        }
        let mut grammar = match &job.grammar {
            Some(g) => Some(
                LlamaSampler::grammar(&self.model, g, "root")
                    .map_err(|e| local("grammar")(e.to_string()))?,
            ),
            None => None,
        };
        let t = Instant::now();
        let mut batch = LlamaBatch::new(CHUNK, 1);
        let evaluated = cache.evaluate(ctx, &mut batch, &tokens);
        let prompt_time = t.elapsed();
        let evaluated = evaluated?;
        let t = Instant::now();
        let mut out = Vec::new();
        let mut generated = 0u64;
        let mut idx = batch.n_tokens() - 1;
        for pos in tokens.len()..tokens.len() + self.options.max_tokens {
            let Some(tok) = pick(ctx, idx, grammar.as_mut()) else {
                break;
            };
            if vocab.is_eog(tok) {
                break;
            }
            if let Some(g) = grammar.as_mut()
                && g.try_accept(tok).is_err()
            {
                break;
            }
            generated += 1;
            out.extend(vocab.token_to_piece(tok, false, None));
            batch.clear();
            batch
                .add(tok, position(pos)?, &[0], true)
                .map_err(|e| local("batch")(e.to_string()))?;
            ctx.decode(&mut batch)
                .map_err(|e| local("generation")(e.to_string()))?;
            idx = 0;
        }
        let mut s = stats.lock().unwrap_or_else(PoisonError::into_inner);
        s.requests += 1;
        s.prompt_tokens += evaluated as u64;
        s.reused_tokens += (tokens.len() - evaluated) as u64;
        s.prompt_time += prompt_time;
        s.generated_tokens += generated;
        s.generation_time += t.elapsed();
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// Prompt tokens are evaluated in batches of this many, at positions aligned to it.
const CHUNK: usize = 64;

/// What the context holds from the previous request. Only whole aligned chunks are
/// reused: position `[k·CHUNK, (k+1)·CHUNK)` is always computed by the same batch over
/// the same history, whether it is reused or evaluated afresh, so reuse changes no
/// number and output stays a function of the prompt alone. An agent's next turn
/// extends its previous prompt, so only its new tokens are evaluated.
#[derive(Debug, Default)]
struct PromptCache {
    /// The previous prompt's tokens.
    tokens: Vec<LlamaToken>,
    /// How many of them sit in whole chunks, evaluated as such.
    whole: usize,
}

impl PromptCache {
    /// Evaluates `tokens`, reusing what the context holds; the logits of the last token
    /// are left in the last batch. Returns how many tokens were evaluated.
    fn evaluate(
        &mut self,
        ctx: &mut LlamaContext<'_>,
        batch: &mut LlamaBatch<'_>,
        tokens: &[LlamaToken],
    ) -> Result<usize, ModelError> {
        let common = self
            .tokens
            .iter()
            .take(self.whole)
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        // Whole chunks only, and never all of the prompt: its last token's logits are
        // needed.
        let reuse = (common.min(tokens.len().saturating_sub(1)) / CHUNK) * CHUNK;
        // Forget first: a failure below leaves nothing stale behind.
        self.tokens.clear();
        self.whole = 0;
        let kept = match reuse {
            0 => {
                ctx.clear_kv_cache();
                true
            }
            p => ctx
                .clear_kv_cache_seq(Some(0), u32::try_from(p).ok(), None)
                .unwrap_or(false),
        };
        let reuse = if kept {
            reuse
        } else {
            ctx.clear_kv_cache();
            0
        };
        let last = tokens.len().saturating_sub(1);
        for start in (reuse..tokens.len()).step_by(CHUNK) {
            batch.clear();
            for (pos, tok) in tokens.iter().enumerate().skip(start).take(CHUNK) {
                batch
                    .add(*tok, position(pos)?, &[0], pos == last)
                    .map_err(|e| local("batch")(e.to_string()))?;
            }
            ctx.decode(batch)
                .map_err(|e| local("prompt evaluation")(e.to_string()))?;
        }
        self.tokens = tokens.to_vec();
        self.whole = (tokens.len() / CHUNK) * CHUNK;
        Ok(tokens.len() - reuse)
    }
}

fn position(pos: usize) -> Result<i32, ModelError> {
    i32::try_from(pos).map_err(|_| ModelError::Local("position out of range".into()))
}

/// The greedy token at output `idx`, constrained by `grammar`: the unconstrained
/// argmax when the grammar admits it (the common case, and cheap), otherwise the
/// argmax of what the grammar admits; `None` when it admits nothing.
fn pick(
    ctx: &LlamaContext<'_>,
    idx: i32,
    grammar: Option<&mut LlamaSampler>,
) -> Option<LlamaToken> {
    let logits = ctx.get_logits_ith(idx);
    let best = argmax(logits.iter().copied().enumerate())?;
    let Some(g) = grammar else {
        return Some(token(best.0));
    };
    let mut one =
        LlamaTokenDataArray::new(vec![LlamaTokenData::new(token(best.0), best.1, 0.0)], false);
    one.apply_sampler(g);
    if one.data.first().is_some_and(|d| d.logit().is_finite()) {
        return Some(token(best.0));
    }
    let mut all = ctx.token_data_array_ith(idx);
    all.apply_sampler(g);
    argmax(
        all.data
            .iter()
            .map(|d| (usize::try_from(d.id().0).unwrap_or(usize::MAX), d.logit())),
    )
    .map(|(i, _)| token(i))
}

fn argmax(items: impl Iterator<Item = (usize, f32)>) -> Option<(usize, f32)> {
    items
        .filter(|(_, l)| l.is_finite())
        .fold(None, |best, (i, l)| match best {
            Some((_, b)) if b >= l => best,
            _ => Some((i, l)),
        })
}

fn token(i: usize) -> LlamaToken {
    LlamaToken(i32::try_from(i).unwrap_or(i32::MAX))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use crate::chat::ToolDef;
    use serde_json::json;

    fn tools() -> Vec<ToolDef> {
        vec![ToolDef {
            name: "T".into(),
            description: "does t".into(),
            parameters: json!({"type": "object", "properties": {"x": {"type": "string"}},
                "required": ["x"], "additionalProperties": false}),
        }]
    }

    #[test]
    fn replies_are_read_without_trusting_them() {
        let f = Format::Tools(tools());
        let id = || "c".to_string();
        assert!(matches!(
            interpret(r#"{"tool": "T", "params": {"x": "1"}}"#.into(), &f, id),
            Reply::Call(c) if c.name == "T" && c.arguments == r#"{"x":"1"}"#
        ));
        assert_eq!(
            interpret(r#"{"final": "ok"}"#.into(), &f, id),
            Reply::Text("ok".into())
        );
        for bad in [
            r#"{"tool": "T", "par"#,
            "[]",
            r#"{"tool": 3, "params": {}}"#,
            "",
        ] {
            assert_eq!(interpret(bad.into(), &f, id), Reply::Malformed(bad.into()));
        }
        assert_eq!(
            interpret("free".into(), &Format::Text, id),
            Reply::Text("free".into())
        );
    }

    #[test]
    fn the_grammar_names_the_tool_first() {
        let s = ordered(&step_schema(&tools()));
        let tool = s.find("\"tool\"").unwrap();
        let params = s.find("\"params\"").unwrap();
        assert!(tool < params, "{s}");
        let g = grammar(&Format::Tools(tools())).unwrap().unwrap();
        assert!(g.contains("root"), "{g}");
        assert!(g.lines().any(|l| l == "space ::= | \" \""), "{g}");
        assert!(grammar(&Format::Text).unwrap().is_none());
    }

    #[test]
    fn conversations_render_with_a_system_message_and_results_as_user_turns() {
        let call = ToolCall {
            id: "c".into(),
            name: "T".into(),
            arguments: "{\"x\": \"1\"}".into(),
        };
        let msgs = [
            Message::new(Role::User, "do t"),
            Message::call(call.clone()),
            Message::result(&call, "{\"ok\":true}"),
        ];
        let r = render(&msgs, &Format::Tools(tools()));
        assert_eq!(r[0].0, "system");
        assert!(r[0].1.contains("T(x: string) — does t"));
        assert_eq!(
            r[2],
            (
                "assistant".into(),
                r#"{"tool": "T", "params": {"x":"1"}}"#.into()
            )
        );
        assert_eq!(r[3].0, "user");
        assert!(r[3].1.starts_with("Result of T:"));
    }

    #[test]
    fn argmax_skips_masked_tokens_and_keeps_the_first_maximum() {
        let l = [1.0, f32::NEG_INFINITY, 3.0, 3.0];
        assert_eq!(argmax(l.iter().copied().enumerate()), Some((2, 3.0)));
        assert_eq!(argmax([f32::NEG_INFINITY].into_iter().enumerate()), None);
    }
}
