//! The model executor, written once over [`Chat`]: an agent loop under the reference
//! monitor that proposes one tool call at a time as untrusted bytes, hears a blocked
//! call back as a tool error, and stops on a final answer, when it repeats the call
//! just refused, or at its step cap (the monitor's stop guard stops it too).

use std::sync::Arc;

use knox_agent::{AgentTask, Executor, ExecutorFactory, Label, Observation, Step};
use knox_policy::ToolkitManifest;
use knox_types::bundle::{ModelInfo, ModelRole};
use serde_json::{Value, json};

use crate::chat::{Chat, Format, Message, Reply, Role, ToolCall, ToolDef};
use crate::latency::Latency;
use crate::tools::{rank, tool_defs};

/// Model turns one sub-agent may take.
pub const MAX_STEPS: u32 = 8;

/// Characters of one tool output shown to the model (the evidence keeps all of it).
pub const MAX_RESULT_CHARS: usize = 4000;

const SYSTEM: &str = "You are an agent that completes the user's tasks by calling the tools provided. \
Call one tool at a time and wait for its result. \
When the tasks are done, reply with a short final answer and no tool call.";

/// Model-driven executors on any chat backend.
#[derive(Debug)]
pub struct ChatExecutor {
    chat: Arc<dyn Chat>,
    manifest: Arc<ToolkitManifest>,
    max_steps: u32,
    latency: Arc<Latency>,
}

impl ChatExecutor {
    /// Executors asking `chat`, offering the tools the APM authorizes, described by
    /// `manifest`.
    pub fn new(chat: Arc<dyn Chat>, manifest: Arc<ToolkitManifest>) -> Self {
        Self {
            chat,
            manifest,
            max_steps: MAX_STEPS,
            latency: Arc::default(),
        }
    }

    /// The same with another step cap.
    pub fn with_max_steps(self, max_steps: u32) -> Self {
        Self { max_steps, ..self }
    }

    /// Time spent per model turn, over every sub-agent so far.
    pub fn latency(&self) -> &Latency {
        &self.latency
    }
}

impl ExecutorFactory for ChatExecutor {
    fn build(&self, task: AgentTask) -> Box<dyn Executor> {
        let instructions = task.instructions.join("\n");
        let tools = rank(&self.manifest, &task.tools, &instructions);
        Box::new(Loop {
            chat: self.chat.clone(),
            tools: tool_defs(&self.manifest, &tools),
            messages: vec![
                Message::new(Role::System, SYSTEM),
                Message::new(Role::User, instructions),
            ],
            pending: None,
            sent: Vec::new(),
            refused: None,
            steps: 0,
            max_steps: self.max_steps,
            latency: self.latency.clone(),
            done: false,
        })
    }

    fn model(&self) -> ModelInfo {
        self.chat.info(ModelRole::Executor)
    }
}

/// What the model's last turn was waiting on.
enum Pending {
    /// A call, whose result (or refusal) goes back as a tool message.
    Call(ToolCall),
    /// Output that was no call; the monitor saw it verbatim and refused it.
    Malformed,
}

struct Loop {
    chat: Arc<dyn Chat>,
    tools: Vec<ToolDef>,
    messages: Vec<Message>,
    pending: Option<Pending>,
    /// The last proposal sent.
    sent: Vec<u8>,
    /// The proposal the monitor just refused, if it did.
    refused: Option<Vec<u8>>,
    steps: u32,
    max_steps: u32,
    latency: Arc<Latency>,
    done: bool,
}

/// What the model hears about its last call.
fn observation_text(last: Option<&Observation>) -> String {
    match last {
        Some(Observation::Output(v)) => {
            let text = v.to_string();
            match text.char_indices().nth(MAX_RESULT_CHARS) {
                Some((cut, _)) => format!("{}… (truncated)", text.get(..cut).unwrap_or_default()),
                None => text,
            }
        }
        Some(Observation::Blocked(r)) => {
            format!("error: the call was blocked by the monitor: {r}")
        }
        None => "error: no result".into(),
    }
}

/// The proposal for a call: `{"tool", "params"}` with the arguments as the model wrote
/// them — parsed when they are JSON, otherwise the raw text, which the monitor refuses.
fn proposal(call: &ToolCall) -> Vec<u8> {
    let params: Value =
        serde_json::from_str(&call.arguments).unwrap_or(Value::String(call.arguments.clone()));
    serde_json::to_vec(&json!({"tool": call.name, "params": params})).unwrap_or_default()
}

impl Loop {
    fn hear(&mut self, last: Option<&Observation>) {
        if matches!(last, Some(Observation::Blocked(_))) {
            self.refused = Some(std::mem::take(&mut self.sent));
        }
        match self.pending.take() {
            Some(Pending::Call(call)) => self
                .messages
                .push(Message::result(&call, observation_text(last))),
            Some(Pending::Malformed) => self.messages.push(Message::new(
                Role::User,
                format!(
                    "{} Reply with one tool call or a final answer.",
                    observation_text(last)
                ),
            )),
            None => {}
        }
    }
}

impl Executor for Loop {
    fn next(&mut self, last: Option<&Observation>) -> Step {
        if self.done || self.steps >= self.max_steps {
            return Step::Finish;
        }
        self.hear(last);
        self.steps += 1;
        let format = Format::Tools(self.tools.clone());
        let reply = self
            .latency
            .time(|| self.chat.complete(&self.messages, &format));
        let refused = self.refused.take();
        match reply {
            // Greedy decoding that repeats a refused call would repeat it to the cap.
            Ok(Reply::Call(call)) if refused.as_deref() == Some(&proposal(&call)[..]) => {
                self.done = true;
                Step::Finish
            }
            Ok(Reply::Call(call)) => {
                let raw = proposal(&call);
                self.sent = raw.clone();
                self.messages.push(Message::call(call.clone()));
                self.pending = Some(Pending::Call(call));
                Step::Propose(raw, Label::NONE)
            }
            Ok(Reply::Malformed(text)) if refused.as_deref() == Some(text.as_bytes()) => {
                self.done = true;
                Step::Finish
            }
            Ok(Reply::Malformed(text)) => {
                // Proposed verbatim: the evidence shows what the model wrote, and the
                // monitor refuses it as malformed.
                self.messages
                    .push(Message::new(Role::Assistant, text.clone()));
                self.pending = Some(Pending::Malformed);
                self.sent = text.clone().into_bytes();
                Step::Propose(text.into_bytes(), Label::NONE)
            }
            Ok(Reply::Text(_)) | Err(_) => {
                self.done = true;
                Step::Finish
            }
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, clippy::indexing_slicing, reason = "tests")]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Replays canned replies and records what it was asked.
    #[derive(Debug, Default)]
    struct Canned {
        replies: Mutex<Vec<Reply>>,
        asked: Mutex<Vec<Vec<Message>>>,
    }

    impl Chat for Canned {
        fn complete(
            &self,
            messages: &[Message],
            _: &Format,
        ) -> Result<Reply, crate::chat::ModelError> {
            self.asked.lock().unwrap().push(messages.to_vec());
            let mut r = self.replies.lock().unwrap();
            Ok(if r.is_empty() {
                Reply::Text("done".into())
            } else {
                r.remove(0)
            })
        }
        fn info(&self, role: ModelRole) -> ModelInfo {
            ModelInfo {
                role,
                name: "canned".into(),
                weights_hash: None,
                declared: true,
            }
        }
    }

    #[test]
    fn proposals_are_raw_and_refusals_come_back_as_errors() {
        let chat = Arc::new(Canned::default());
        *chat.replies.lock().unwrap() = vec![
            Reply::Call(ToolCall {
                id: "a".into(),
                name: "T".into(),
                arguments: "{\"x\":1}".into(),
            }),
            Reply::Malformed("{\"tool\": \"T\", \"par".into()),
            Reply::Call(ToolCall {
                id: "b".into(),
                name: "T".into(),
                arguments: "not json".into(),
            }),
        ];
        let mut l = Loop {
            chat: chat.clone(),
            tools: vec![],
            messages: vec![Message::new(Role::User, "go")],
            pending: None,
            sent: Vec::new(),
            refused: None,
            steps: 0,
            max_steps: 4,
            latency: Arc::default(),
            done: false,
        };
        let Step::Propose(raw, Label::NONE) = l.next(None) else {
            unreachable!()
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&raw).unwrap(),
            json!({"tool": "T", "params": {"x": 1}})
        );
        let Step::Propose(raw, _) = l.next(Some(&Observation::Blocked("off plan".into()))) else {
            unreachable!()
        };
        assert_eq!(raw, b"{\"tool\": \"T\", \"par");
        let Step::Propose(raw, _) = l.next(Some(&Observation::Blocked("malformed".into()))) else {
            unreachable!()
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&raw).unwrap()["params"],
            "not json"
        );
        assert_eq!(
            l.next(Some(&Observation::Output(json!({"ok": true})))),
            Step::Finish,
            "a final answer"
        );
        let asked = chat.asked.lock().unwrap();
        let second = &asked[1];
        assert_eq!(second.last().unwrap().role, Role::Tool);
        assert!(
            second
                .last()
                .unwrap()
                .content
                .contains("blocked by the monitor")
        );
        assert_eq!(asked[2].last().unwrap().role, Role::User);
    }

    #[test]
    fn a_refused_call_repeated_ends_the_loop_and_the_cap_holds() {
        let call = Reply::Call(ToolCall {
            id: "a".into(),
            name: "T".into(),
            arguments: "{}".into(),
        });
        let chat = Arc::new(Canned::default());
        *chat.replies.lock().unwrap() = vec![call.clone(), call.clone()];
        let m = knox_policy::shipped::current().unwrap();
        let mut l = ChatExecutor::new(chat, Arc::new(m.clone())).build(AgentTask::default());
        assert!(matches!(l.next(None), Step::Propose(..)));
        assert_eq!(
            l.next(Some(&Observation::Blocked("no".into()))),
            Step::Finish
        );

        let chat = Arc::new(Canned::default());
        *chat.replies.lock().unwrap() = vec![call.clone(), call.clone(), call];
        let mut l = ChatExecutor::new(chat, Arc::new(m.clone()))
            .with_max_steps(2)
            .build(AgentTask::default());
        let ok = Observation::Output(json!({}));
        assert!(matches!(l.next(None), Step::Propose(..)));
        assert!(
            matches!(l.next(Some(&ok)), Step::Propose(..)),
            "allowed: may repeat"
        );
        assert_eq!(l.next(Some(&ok)), Step::Finish, "step cap");
    }

    #[test]
    fn long_outputs_are_cut_for_the_model() {
        let long = Observation::Output(Value::String("x".repeat(10_000)));
        let text = observation_text(Some(&long));
        assert!(text.chars().count() < MAX_RESULT_CHARS + 20 && text.ends_with("(truncated)"));
    }
}
