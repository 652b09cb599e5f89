//! The simulated agent: a task that plays its script step by step — LLM and tool
//! requests, sleeps, children, yields, failures — and can be saved and rebuilt, so that
//! a crashed run is restored with it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool_core::{
    AgentTask, NewTask, Request, SavedTask, StateError, Step, TaskContext, TaskId, TaskRegistry,
};

use super::workload::Op;

/// The type name simulated agents are registered under.
pub(crate) const TYPE_NAME: &str = "sim-agent";

/// A task playing a script.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SimAgent {
    /// The script.
    script: Vec<Op>,
    /// The step it is at.
    at: usize,
    /// Whether the step at `at` has begun (its requests made, its child spawned, its
    /// sleep set).
    begun: bool,
    /// The child it joined, if its step spawned one.
    child: Option<TaskId>,
}

impl SimAgent {
    /// An agent at the start of `script`.
    pub(crate) fn new(script: Vec<Op>) -> SimAgent {
        SimAgent {
            script,
            at: 0,
            begun: false,
            child: None,
        }
    }

    /// Begins the step at `at`: `Some` with what the poll returns, or `None` when the
    /// step is over at once (a yield that was taken, a failure has its own `Some`).
    fn begin(&mut self, cx: &mut TaskContext<'_>) -> Option<Step> {
        self.begun = true;
        let step = self.script.get(self.at)?.clone();
        match step {
            Op::Llm(tokens) => {
                cx.request(Request::llm(json!({ "step": self.at })).with_tokens(tokens));
                Some(Step::Wait)
            }
            Op::Tool => {
                cx.tool("search", json!({ "step": self.at }));
                Some(Step::Wait)
            }
            Op::Both(tokens) => {
                cx.request(Request::llm(json!({ "step": self.at })).with_tokens(tokens));
                cx.tool("search", json!({ "step": self.at }));
                Some(Step::Wait)
            }
            Op::Sleep(ms) => {
                cx.sleep(Duration::from_millis(ms));
                Some(Step::Wait)
            }
            Op::Spawn(script) => {
                let child = cx.spawn(NewTask::new(SimAgent::new(script)));
                self.child = Some(child);
                let _ = cx.join(child);
                Some(Step::Wait)
            }
            Op::Yield => Some(Step::Yield),
            Op::Fail => Some(Step::fail(format!("step {} fails", self.at))),
        }
    }

    /// Goes on with the step at `at`, begun: `None` when it is over, `Some` with what
    /// the poll returns while it is not (or when it ends the task).
    fn resume(&mut self, cx: &mut TaskContext<'_>) -> Option<Step> {
        let step = self.script.get(self.at)?;
        match step {
            Op::Llm(_) | Op::Tool | Op::Both(_) => {
                while let Some(answer) = cx.take_answer() {
                    match answer.result {
                        Ok(value) if value.get("answer").is_some() => {}
                        Ok(value) => {
                            return Some(Step::fail(format!(
                                "request {} was answered with something malformed: {value}",
                                answer.number
                            )));
                        }
                        Err(error) => {
                            return Some(Step::Done(Err(error.into_task_error(answer.number))));
                        }
                    }
                }
                (cx.in_flight() > 0).then_some(Step::Wait)
            }
            Op::Sleep(_) => {
                if cx.take_timer_fired() {
                    None
                } else {
                    Some(Step::Wait)
                }
            }
            Op::Spawn(_) => {
                let child = self.child?;
                match cx.take_child_result(child) {
                    Some(Ok(_)) => None,
                    Some(Err(error)) => Some(Step::fail(format!("child {child} failed: {error}"))),
                    None => Some(Step::Wait),
                }
            }
            Op::Yield | Op::Fail => None,
        }
    }
}

impl AgentTask for SimAgent {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        loop {
            if self.at >= self.script.len() {
                return Step::done(json!({ "steps": self.at }));
            }
            if !self.begun {
                if let Some(step) = self.begin(cx) {
                    return step;
                }
            } else if let Some(step) = self.resume(cx) {
                return step;
            }
            self.at += 1;
            self.begun = false;
            self.child = None;
        }
    }

    fn type_name(&self) -> &'static str {
        TYPE_NAME
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        SavedTask::serde(self)
    }
}

/// The registry a crashed run is restored with.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new().with_serde::<SimAgent>(TYPE_NAME)
}
