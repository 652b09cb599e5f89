//! Saveable tasks and the executors that answer them (every answer a function of the
//! request, so a resent request gets the same answer): the suite's agents.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_core::{AgentTask, Kind, SavedTask, Step, TaskContext, TaskRegistry};
use spool_runtime::{Runtime, RuntimeBuilder, from_fn};

/// Works `steps` steps, each a request whose answer goes into its log: mostly LLM
/// calls carrying the whole log so far, every third a tool call, and, at step
/// `confirm_at`, a question for a human. Ends with its name and log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Worker {
    /// Its name, in every request and its result.
    pub name: String,
    /// How many steps it works.
    pub steps: u32,
    /// The step at which it asks a human, if any.
    pub confirm_at: Option<u32>,
    /// The answers so far.
    pub log: Vec<String>,
    /// Whether it waits for an answer.
    pub waiting: bool,
}

impl Worker {
    /// A worker of `steps` steps that asks a human at step `confirm_at`.
    pub fn new(name: &str, steps: u32, confirm_at: Option<u32>) -> Worker {
        Worker {
            name: name.to_owned(),
            steps,
            confirm_at,
            log: Vec::new(),
            waiting: false,
        }
    }
}

impl AgentTask for Worker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.waiting {
            let Some(answer) = cx.take_answer() else {
                return Step::fail("resumed without an answer");
            };
            match answer.result {
                Ok(Value::String(text)) => self.log.push(text),
                Ok(other) => self.log.push(other.to_string()),
                Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
            }
            self.waiting = false;
        }
        let step = self.log.len() as u32;
        if step == self.steps {
            return Step::done(json!({"name": self.name, "log": self.log}));
        }
        self.waiting = true;
        if Some(step) == self.confirm_at {
            cx.confirm(json!({"worker": self.name, "step": step}));
        } else if step % 3 == 2 {
            cx.tool("count", json!({"worker": self.name, "items": step}));
        } else {
            cx.llm(json!({"worker": self.name, "log": self.log}));
        }
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "worker"
    }

    fn save(&self) -> Result<SavedTask, spool_core::StateError> {
        SavedTask::serde(self)
    }
}

/// The registry workers are rebuilt from.
pub fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<Worker>("worker")
}

/// A splitmix64 step.
fn mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const WORDS: [&str; 32] = [
    "the", "agent", "reads", "a", "file", "and", "plans", "next", "step", "while", "model",
    "answers", "with", "code", "tests", "pass", "after", "some", "more", "work", "on", "parser",
    "store", "chunk", "hash", "journal", "replay", "turn", "text", "new", "old", "branch",
];

/// About `len` bytes of words drawn from `seed`: new text that repeats no earlier text.
pub fn prose(seed: u64, len: usize) -> String {
    let mut state = seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x5eed;
    let mut text = String::with_capacity(len + 16);
    while text.len() < len {
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(WORDS[(mix(&mut state) % WORDS.len() as u64) as usize]);
    }
    text
}

/// The LLM's answer to a request: a function of the request alone, a line naming
/// what the worker showed it.
pub fn llm_answer(payload: &Value) -> Value {
    let worker = payload["worker"].as_str().unwrap_or("?");
    let log = payload["log"].as_array().map_or(0, Vec::len);
    json!(format!("{worker} read {log} lines"))
}

/// A tool's answer: a function of the request alone.
pub fn tool_answer(payload: &Value) -> Value {
    json!(format!(
        "{} counted {}",
        payload["worker"].as_str().unwrap_or("?"),
        payload["items"]
    ))
}

/// A human's answer to a confirmation.
pub fn confirm_answer(question: &Value) -> Value {
    json!(format!(
        "yes to {} at {}",
        question["worker"], question["step"]
    ))
}

/// A builder with the LLM and the tool executors, each answering with a function of
/// the request.
pub fn builder() -> RuntimeBuilder {
    Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(|request| Ok(llm_answer(&request.request.payload))),
        )
        .executor(
            Kind::tool("count"),
            from_fn(|request| Ok(tool_answer(&request.request.payload))),
        )
}

/// Answers every pending confirmation and runs until idle, until no confirmation is
/// left; returns whether nothing is left to run (false if the run was shut down with
/// work left).
pub fn finish(runtime: &mut Runtime) -> bool {
    loop {
        runtime.run_until_idle();
        let pending = runtime.pending_confirmations().to_vec();
        if pending.is_empty() {
            return runtime.scheduler().in_flight_len() == 0
                && runtime.scheduler().ready_len() == 0;
        }
        let handle = runtime.handle();
        for confirmation in pending {
            handle
                .answer(confirmation.key, confirm_answer(&confirmation.question))
                .unwrap();
        }
    }
}

/// What a worker `Worker::new(name, steps, confirm_at)` ends with: every answer is a
/// function of its request.
pub fn expected_result(name: &str, steps: u32, confirm_at: Option<u32>) -> Value {
    let mut log: Vec<String> = Vec::new();
    for step in 0..steps {
        let answer = if Some(step) == confirm_at {
            confirm_answer(&json!({"worker": name, "step": step}))
        } else if step % 3 == 2 {
            tool_answer(&json!({"worker": name, "items": step}))
        } else {
            llm_answer(&json!({"worker": name, "log": log}))
        };
        log.push(answer.as_str().unwrap().to_owned());
    }
    json!({"name": name, "log": log})
}
