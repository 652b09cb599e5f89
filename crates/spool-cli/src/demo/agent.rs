//! The demo's agent: a ReAct loop (LLM → tools → LLM → … → answer) written as an
//! explicit `AgentTask` state machine. It knows nothing of the script: it does what
//! the LLM's replies say and reports back what the tools answered.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_core::{AgentTask, SavedTask, Step, TaskContext, TaskRegistry};

/// Turns after which an agent gives up rather than loop forever on a confused LLM.
const MAX_TURNS: u32 = 8;

/// Where the agent is in its loop.
#[derive(Debug, Serialize, Deserialize)]
enum Stage {
    /// Not polled yet: ask the LLM.
    Start,
    /// Waiting for the LLM's reply.
    AwaitLlm,
    /// Waiting for every tool call of this round: (request number, tool, args).
    AwaitTools(Vec<(u32, String, Value)>),
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
    /// One array of observations per round of tool use.
    observations: Vec<Value>,
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
            observations: Vec::new(),
        }
    }

    /// Asks the LLM for the next step, with everything observed so far.
    fn ask_llm(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.turns >= MAX_TURNS {
            return Step::fail(format!(
                "{}: no answer after {MAX_TURNS} LLM turns",
                self.name
            ));
        }
        cx.llm(json!({
            "agent": self.name,
            "turn": self.observations.len(),
            "question": self.question,
            "observations": self.observations,
        }));
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
        if let Some(text) = reply["answer"].as_str() {
            return Step::done(json!({
                "agent": self.name,
                "answer": text,
                "turns": self.turns,
                "tool_calls": self.tool_calls,
            }));
        }
        let calls = match reply["tool_calls"].as_array() {
            Some(calls) if !calls.is_empty() => calls,
            _ => {
                return Step::fail(format!(
                    "{}: the LLM replied with neither tool calls nor an answer",
                    self.name
                ));
            }
        };
        let mut pending = Vec::with_capacity(calls.len());
        for call in calls {
            let Some(tool) = call["name"].as_str() else {
                return Step::fail(format!("{}: a tool call without a name: {call}", self.name));
            };
            // Several calls in one poll go out together; `Wait` resumes when all are answered.
            let key = cx.tool(Cow::Owned(tool.to_owned()), call["args"].clone());
            pending.push((key.number(), tool.to_owned(), call["args"].clone()));
        }
        self.tool_calls += pending.len() as u32;
        self.stage = Stage::AwaitTools(pending);
        Step::Wait
    }

    /// Records what every tool of the round answered, then asks the LLM again.
    fn on_tool_results(
        &mut self,
        cx: &mut TaskContext<'_>,
        pending: Vec<(u32, String, Value)>,
    ) -> Step {
        let mut round = Vec::with_capacity(pending.len());
        while let Some(answer) = cx.take_answer() {
            let Some((_, tool, args)) =
                pending.iter().find(|(number, ..)| *number == answer.number)
            else {
                return Step::fail(format!(
                    "{}: an answer to request {} it did not make",
                    self.name, answer.number
                ));
            };
            // A tool error goes back to the LLM as an observation, as in ReAct.
            round.push(match answer.result {
                Ok(result) => json!({"tool": tool, "args": args, "result": result}),
                Err(error) => json!({"tool": tool, "args": args, "error": error.to_string()}),
            });
        }
        if round.len() != pending.len() {
            return Step::fail(format!(
                "{}: resumed with {} of {} tool answers",
                self.name,
                round.len(),
                pending.len()
            ));
        }
        self.observations.push(Value::Array(round));
        self.ask_llm(cx)
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

    fn save(&self) -> Result<SavedTask, String> {
        SavedTask::serde(self)
    }
}

/// The agent's type name in tables, snapshots and journals.
const TYPE_NAME: &str = "react-agent";

/// The task types of the demo, to restore its snapshots and replay its journals.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<ReactAgent>(TYPE_NAME)
}
