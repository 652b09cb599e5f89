//! The agent of the durable and cluster benchmarks: [`STEPS`] LLM requests one after
//! another, and the LLM that answers them at once.

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::{AgentTask, SavedTask, Step, TaskContext, TaskRegistry, Value};

/// LLM requests (steps) per agent.
pub(crate) const STEPS: usize = 5;

/// The task type's stable name.
pub(crate) const TYPE_NAME: &str = "agent";

/// Makes [`STEPS`] LLM requests one after another, keeping each answer; ends with the
/// number of answers kept.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Agent {
    /// Its number, in every request.
    n: u64,
    /// The answers so far.
    answers: Vec<String>,
    /// Whether a request is out.
    waiting: bool,
}

impl Agent {
    /// Agent number `n`, before its first request.
    pub(crate) fn new(n: u64) -> Agent {
        Agent {
            n,
            ..Agent::default()
        }
    }
}

impl AgentTask for Agent {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.waiting {
            let Some(answer) = cx.take_answer() else {
                return Step::fail("resumed without an answer");
            };
            match answer.result {
                Ok(Value::String(text)) => self.answers.push(text),
                other => return Step::fail(format!("agent {}: unexpected {other:?}", self.n)),
            }
            self.waiting = false;
        }
        if self.answers.len() == STEPS {
            return Step::done(self.answers.len() as u64);
        }
        cx.llm(json!({"agent": self.n, "step": self.answers.len()}));
        self.waiting = true;
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        TYPE_NAME
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::binary(self)
    }
}

/// The registry that restores [`Agent`]s.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Agent>(TYPE_NAME)
}

/// The LLM that answers at once: a short line naming the request.
pub(crate) fn answer(payload: &Value) -> Value {
    json!(format!(
        "agent {} step {}: done, next.",
        payload["agent"], payload["step"]
    ))
}
