//! The built-in agent, which `spool demo` runs as its agents and `spool run`, `spool serve`
//! and `spool schedule` as task type `agent`: a ReAct loop (LLM → tools → LLM → … → answer) written as an
//! explicit `AgentTask` state machine. It speaks the OpenAI chat format — it sends
//! `{"messages", "tools"}` and reads the normalized answer `{"content", "tool_calls"}`
//! — so the same agent runs against the built-in scripted model and a real endpoint.
//! It knows nothing of the script: it does what the LLM's replies say and reports back
//! what the tools answered.

pub(crate) mod conversation;
pub(crate) mod seed;
pub(crate) mod tools;

use std::borrow::Cow;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_core::{AgentTask, SavedTask, Step, TaskContext, TaskRegistry};

use conversation::{system_prompt, tool_message_content};

/// Turns after which an agent gives up rather than loop forever on a confused LLM.
const MAX_TURNS: u32 = 8;

/// The tools offered to the LLM, in the OpenAI `tools` format: the definitions of the
/// demo's function tools, then those given to [`offer_tools`] (MCP servers' tools).
/// Made at the agent's first request, and the same for the rest of the process.
static DEFINITIONS: OnceLock<Value> = OnceLock::new();

/// Tools offered besides the demo's, set before any agent asks its LLM.
static MORE_TOOLS: OnceLock<Vec<Value>> = OnceLock::new();

/// The tools the agent offers (see [`DEFINITIONS`]).
fn definitions() -> &'static Value {
    DEFINITIONS.get_or_init(|| {
        let mut definitions = tools::function_tools().definitions();
        if let (Value::Array(all), Some(more)) = (&mut definitions, MORE_TOOLS.get()) {
            all.extend(more.iter().cloned());
        }
        definitions
    })
}

/// Offers `definitions` (OpenAI `tools` entries, e.g. MCP servers' tools) to the model
/// besides the demo's tools, for the rest of the process.
///
/// # Errors
/// If tools were offered already, or an agent already asked its LLM with the tools as
/// they were.
#[cfg(feature = "mcp")]
pub(crate) fn offer_tools(definitions: Vec<Value>) -> Result<(), String> {
    if DEFINITIONS.get().is_some() {
        return Err("the agent's tools were already offered".to_owned());
    }
    MORE_TOOLS
        .set(definitions)
        .map_err(|_| "more tools were already offered".to_owned())
}

/// Where the agent is in its loop.
#[derive(Debug, Serialize, Deserialize)]
enum Stage {
    /// Not polled yet: ask the LLM.
    Start,
    /// Waiting for the LLM's reply.
    AwaitLlm,
    /// Waiting for every tool call of this round.
    AwaitTools(Vec<PendingCall>),
}

/// One tool call of a round: the request that carries it (none if the LLM named a tool
/// that does not exist), and what to answer the LLM with once it is known.
#[derive(Debug, Serialize, Deserialize)]
struct PendingCall {
    number: Option<u32>,
    id: String,
    content: Option<String>,
}

/// A ReAct agent: asks the LLM, runs the tools it asks for (several at once when it
/// asks for several), feeds the results back, and finishes with the LLM's answer. Its
/// fields are its state, saved as they are in snapshots and journals.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReactAgent {
    name: String,
    question: String,
    stage: Stage,
    /// LLM calls made so far.
    turns: u32,
    /// Tool calls made so far.
    tool_calls: u32,
    /// The conversation after the system prompt and the question: the LLM's tool
    /// calls and the tools' answers, in the OpenAI chat format.
    transcript: Vec<Value>,
    /// A scheduled run's earlier conversation (its session's messages), sent between
    /// the system prompt and the question. (Defaults keep older saved states valid.)
    #[serde(default)]
    history: Vec<Value>,
    /// A scheduled run's `{"slug", "fire"}`, never `Some(null)`: JSON writes `None`
    /// and `Some(null)` alike, so a saved `Some(null)` would read back as `None`.
    #[serde(default)]
    schedule: Option<Value>,
    /// Made from an input ([`AGENT_TYPE`]): it ends with the messages its run adds to
    /// a session and the fire it ran for (`null` outside a schedule), not only its
    /// answer. (A saved state without it is of a scheduled run if it has a schedule.)
    #[serde(default)]
    reports_messages: bool,
}

impl ReactAgent {
    /// An agent called `name` that works on `question`.
    pub(crate) fn new(name: String, question: String) -> ReactAgent {
        ReactAgent {
            name,
            question,
            stage: Stage::Start,
            turns: 0,
            tool_calls: 0,
            transcript: Vec::new(),
            history: Vec::new(),
            schedule: None,
            reports_messages: false,
        }
    }

    /// The built-in agent as the task type [`AGENT_TYPE`], from a schedule's run input:
    /// `{"prompt": text}`, with the `"schedule": {"slug", "fire"}` and, with a session,
    /// `"session": {"id", "messages"}` members the scheduler adds. It goes on from the
    /// session's messages and ends with `{"answer", "messages", "schedule"}`, the
    /// messages being the prompt and its replies, which the session keeps.
    ///
    /// # Errors
    /// A message saying what the input lacks.
    pub(crate) fn from_input(input: &Value) -> Result<ReactAgent, String> {
        let prompt = match input.get("prompt") {
            Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
            Some(Value::String(_)) => return Err("the prompt is empty".to_owned()),
            Some(other) => return Err(format!("the prompt is not a string: {other}")),
            None => return Err("the input has no \"prompt\"".to_owned()),
        };
        let schedule = input.get("schedule").filter(|s| !s.is_null()).cloned();
        let name = schedule
            .as_ref()
            .and_then(|s| s["slug"].as_str())
            .unwrap_or("agent")
            .to_owned();
        let history = input
            .pointer("/session/messages")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut agent = ReactAgent::new(name, prompt);
        agent.history = history;
        agent.schedule = schedule;
        agent.reports_messages = true;
        Ok(agent)
    }

    /// Asks the LLM for the next step, with the whole conversation so far.
    fn ask_llm(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.turns >= MAX_TURNS {
            return Step::fail(format!(
                "{}: no answer after {MAX_TURNS} LLM turns",
                self.name
            ));
        }
        let mut messages = Vec::with_capacity(self.history.len() + self.transcript.len() + 2);
        messages.push(json!({"role": "system", "content": system_prompt(&self.name)}));
        messages.extend(self.history.iter().cloned());
        messages.push(json!({"role": "user", "content": self.question}));
        messages.extend(self.transcript.iter().cloned());
        cx.llm(json!({"messages": messages, "tools": definitions()}));
        self.turns += 1;
        self.stage = Stage::AwaitLlm;
        Step::Wait
    }

    /// Acts on the LLM's reply: calls the tools it asks for, or finishes with its answer.
    fn on_llm_reply(&mut self, cx: &mut TaskContext<'_>) -> Step {
        let Some(answer) = cx.take_answer() else {
            return Step::fail(format!("{}: resumed without the LLM's reply", self.name));
        };
        let reply = match answer.result {
            Ok(reply) => reply,
            Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
        };
        let calls = reply["tool_calls"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        if calls.is_empty() {
            return self.finish(&reply);
        }
        self.call_tools(cx, &reply, calls)
    }

    /// Ends with the LLM's answer (and, for a run that reports them, the messages it
    /// adds to its session); fails if the reply holds no answer either.
    fn finish(&mut self, reply: &Value) -> Step {
        match reply["content"].as_str() {
            Some(text) if self.reports_messages || self.schedule.is_some() => {
                // The run's part of the conversation, for its session.
                let mut messages = Vec::with_capacity(self.transcript.len() + 2);
                messages.push(json!({"role": "user", "content": self.question}));
                messages.append(&mut self.transcript);
                messages.push(json!({"role": "assistant", "content": text}));
                Step::done(json!({
                    "agent": self.name,
                    "answer": text,
                    "turns": self.turns,
                    "tool_calls": self.tool_calls,
                    "schedule": self.schedule,
                    "messages": messages,
                }))
            }
            Some(text) => Step::done(json!({
                "agent": self.name,
                "answer": text,
                "turns": self.turns,
                "tool_calls": self.tool_calls,
            })),
            None => Step::fail(format!(
                "{}: the LLM replied with neither tool calls nor an answer: {reply}",
                self.name
            )),
        }
    }

    /// Sends the round's tool calls, in the order the LLM gave them, records them in
    /// the transcript, and waits for their answers (or, if none went out, answers the
    /// LLM at once).
    fn call_tools(&mut self, cx: &mut TaskContext<'_>, reply: &Value, calls: &[Value]) -> Step {
        let mut asked = Vec::with_capacity(calls.len());
        let mut pending = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let Some(tool) = call["name"].as_str() else {
                return Step::fail(format!("{}: a tool call without a name: {call}", self.name));
            };
            let id = call["id"]
                .as_str()
                .map_or_else(|| format!("call_{}_{i}", self.turns), str::to_owned);
            asked.push(asked_call(&id, tool, &call["arguments"]));
            pending.push(start_call(cx, tool, id, call));
        }
        self.transcript.push(json!({
            "role": "assistant",
            "content": reply["content"],
            "tool_calls": asked,
        }));
        let sent = pending.iter().filter(|call| call.number.is_some()).count();
        self.tool_calls += sent as u32;
        if sent == 0 {
            // Nothing to wait for: the LLM hears at once that its tools do not exist.
            return self.record_round(cx, pending);
        }
        self.stage = Stage::AwaitTools(pending);
        Step::Wait
    }

    /// Records what every tool of the round answered, then asks the LLM again.
    fn on_tool_results(&mut self, cx: &mut TaskContext<'_>, mut pending: Vec<PendingCall>) -> Step {
        while let Some(answer) = cx.take_answer() {
            let Some(call) = pending
                .iter_mut()
                .find(|call| call.number == Some(answer.number))
            else {
                return Step::fail(format!(
                    "{}: an answer to request {} it did not make",
                    self.name, answer.number
                ));
            };
            // A tool error goes back to the LLM as what the tool said, as in ReAct.
            call.content = Some(tool_message_content(
                answer.result.map_err(|error| error.to_string()),
            ));
        }
        self.record_round(cx, pending)
    }

    /// Adds the round's tool answers to the transcript and asks the LLM again.
    fn record_round(&mut self, cx: &mut TaskContext<'_>, pending: Vec<PendingCall>) -> Step {
        let answered = pending.iter().filter(|call| call.content.is_some()).count();
        if answered != pending.len() {
            return Step::fail(format!(
                "{}: resumed with {answered} of {} tool answers",
                self.name,
                pending.len()
            ));
        }
        for call in pending {
            self.transcript.push(json!({
                "role": "tool",
                "tool_call_id": call.id,
                "content": call.content,
            }));
        }
        self.ask_llm(cx)
    }
}

/// A tool call as the assistant's message in the transcript gives it, in the OpenAI
/// chat format: its `id`, the `tool` and the `arguments` as text.
fn asked_call(id: &str, tool: &str, arguments: &Value) -> Value {
    // The provider gives the arguments parsed when they parse, else as text.
    let arguments = match arguments {
        Value::String(text) => text.clone(),
        parsed => parsed.to_string(),
    };
    json!({
        "id": id,
        "type": "function",
        "function": {"name": tool, "arguments": arguments},
    })
}

/// Sends the tool `call` names, if it is one of the tools offered; if not, its answer
/// is known at once: that there is no such tool.
fn start_call(cx: &mut TaskContext<'_>, tool: &str, id: String, call: &Value) -> PendingCall {
    let known = definitions()
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["function"]["name"] == tool));
    if known {
        // Several calls in one poll go out together; `Wait` resumes when all are
        // answered.
        let key = cx.tool(Cow::Owned(tool.to_owned()), call["arguments"].clone());
        PendingCall {
            number: Some(key.number()),
            id,
            content: None,
        }
    } else {
        PendingCall {
            number: None,
            id,
            content: Some(tool_message_content(Err(format!(
                "there is no tool named `{tool}`"
            )))),
        }
    }
}

impl AgentTask for ReactAgent {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        match std::mem::replace(&mut self.stage, Stage::Start) {
            Stage::Start => self.ask_llm(cx),
            Stage::AwaitLlm => self.on_llm_reply(cx),
            Stage::AwaitTools(pending) => self.on_tool_results(cx, pending),
        }
    }

    fn type_name(&self) -> &'static str {
        TYPE_NAME
    }

    fn save(&self) -> Result<SavedTask, spool_core::StateError> {
        SavedTask::serde(self)
    }
}

/// The agent's type name in tables, snapshots and journals.
pub(crate) const TYPE_NAME: &str = "react-agent";

/// The built-in agent's task type for schedules (`spool schedule add` makes schedules
/// of it): input `{"prompt": text}`.
pub(crate) const AGENT_TYPE: &str = "agent";

/// The task types of the demo and of `spool run`, to restore snapshots, replay
/// journals, and make schedules' runs: the agent, and the agent made from a prompt
/// ([`AGENT_TYPE`]).
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_serde::<ReactAgent>(TYPE_NAME)
        .with_input(AGENT_TYPE, |input| {
            ReactAgent::from_input(input).map(|agent| Box::new(agent) as Box<dyn AgentTask>)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduled_agent_is_made_from_its_prompt_and_session() {
        let input = json!({
            "prompt": "Summarise the notes",
            "schedule": {"slug": "daily", "fire": "2027-01-01T09:00:00Z"},
            "session": {"id": "s-1", "messages": [{"role": "user", "content": "before"}]},
        });
        let agent = ReactAgent::from_input(&input).expect("a good input");
        assert_eq!(agent.name, "daily");
        assert_eq!(agent.question, "Summarise the notes");
        assert_eq!(agent.history.len(), 1);
        assert_eq!(agent.schedule, Some(input["schedule"].clone()));
        assert!(agent.reports_messages);
        for (bad, why) in [
            (json!({}), "the input has no \"prompt\""),
            (json!({"prompt": " "}), "the prompt is empty"),
            (json!({"prompt": 3}), "the prompt is not a string: 3"),
        ] {
            assert_eq!(ReactAgent::from_input(&bad).err().as_deref(), Some(why));
        }
    }

    /// Runs the agent made from `{"prompt": "standup"}` to its end, the LLM answering
    /// at once; with `restart`, the scheduler is snapshotted while the LLM works and
    /// the snapshot restored, as after a restart.
    fn standup(restart: bool) -> Option<spool_core::TaskState> {
        use spool_core::{NewTask, Response, Scheduler, Time};
        let registry = registry();
        let agent = registry
            .make(AGENT_TYPE, &json!({"prompt": "standup"}))
            .expect("a good input");
        let mut scheduler = Scheduler::new(Default::default());
        let id = scheduler
            .submit(Time::ZERO, NewTask::boxed(agent))
            .expect("admitted")
            .id;
        while scheduler.step(Time::ZERO).is_some() {}
        let asked = scheduler.poll_request().expect("the LLM is asked");
        if restart {
            let snapshot = scheduler.snapshot().expect("saveable");
            scheduler = Scheduler::restore(&snapshot, &registry).expect("restorable");
        }
        let reply = json!({"content": "All green.", "tool_calls": []});
        let _ = scheduler.handle_response(Time::ZERO, Response::ok(asked.key, reply));
        while scheduler.step(Time::ZERO).is_some() {}
        scheduler.task_state(id)
    }

    /// The agent made from a prompt ends with the messages of its run and its
    /// schedule (`null`: none), and the same after a restart: its state round-trips.
    #[test]
    fn an_agent_made_from_a_prompt_ends_the_same_after_a_restart() {
        let expected = spool_core::TaskState::Completed(Ok(json!({
            "agent": "agent",
            "answer": "All green.",
            "turns": 1,
            "tool_calls": 0,
            "schedule": null,
            "messages": [
                {"role": "user", "content": "standup"},
                {"role": "assistant", "content": "All green."},
            ],
        })));
        assert_eq!(standup(false), Some(expected.clone()));
        assert_eq!(standup(true), Some(expected));
    }

    /// Every kind of the built-in agent — made from a prompt, with a schedule and a
    /// session, with an explicit `null` schedule, made directly — round-trips at every
    /// stage of its loop: before its first poll, waiting for the LLM, waiting for tools
    /// (one of them unknown, answered at once).
    #[test]
    fn the_built_in_agent_round_trips_at_every_stage() {
        use spool_core::{Kind, NewTask, Response, Scheduler, TaskState, Time};
        let registry = registry();
        let mut scheduler = Scheduler::new(Default::default());
        let inputs = [
            json!({"prompt": "standup"}),
            json!({
                "prompt": "notes",
                "schedule": {"slug": "daily", "fire": "2027-01-01T09:00:00Z"},
                "session": {"id": "s-1", "messages": [{"role": "user", "content": "before"}]},
            }),
            json!({"prompt": "notes", "schedule": null}),
        ];
        let mut ids = Vec::new();
        for input in &inputs {
            let agent = registry.make(AGENT_TYPE, input).expect("a good input");
            ids.push(
                scheduler
                    .submit(Time::ZERO, NewTask::boxed(agent))
                    .expect("admitted")
                    .id,
            );
        }
        let plain = ReactAgent::new("plain".to_owned(), "question".to_owned());
        ids.push(
            scheduler
                .submit(Time::ZERO, NewTask::new(plain))
                .expect("admitted")
                .id,
        );
        let mut checks = 0;
        let mut check = |scheduler: &Scheduler| {
            if let Err(error) = scheduler.check_round_trip(Some(&registry)) {
                panic!("{error}");
            }
            checks += 1;
        };
        check(&scheduler);
        loop {
            while scheduler.step(Time::ZERO).is_some() {
                check(&scheduler);
            }
            let Some(asked) = scheduler.poll_request() else {
                break;
            };
            let payload = asked.request.payload.value();
            let reply = match &asked.request.kind {
                // The first turn calls a tool and one that does not exist; the next ends.
                Kind::Llm if payload["messages"].as_array().map(Vec::len) <= Some(3) => json!({
                    "content": null,
                    "tool_calls": [
                        {"id": "c1", "name": "calc", "arguments": {"expression": "1+1"}},
                        {"id": "c2", "name": "nope", "arguments": {}},
                    ],
                }),
                Kind::Llm => json!({"content": "done", "tool_calls": []}),
                _ => json!("2"),
            };
            let _ = scheduler.handle_response(Time::ZERO, Response::ok(asked.key, reply));
            check(&scheduler);
        }
        for id in ids {
            let state = scheduler.task_state(id);
            assert!(
                matches!(&state, Some(TaskState::Completed(Ok(v))) if v["answer"] == "done" && v["turns"] == 2),
                "{state:?}"
            );
        }
        assert!(checks > 8, "{checks} checks");
    }

    #[test]
    fn every_demo_tool_is_offered() {
        let names: Vec<&Value> = definitions()
            .as_array()
            .map(|tools| tools.iter().map(|t| &t["function"]["name"]).collect())
            .unwrap_or_default();
        assert_eq!(
            names,
            [&json!("search"), &json!("read_file"), &json!("calc")]
        );
    }
}
