//! Saveable tasks, the executors that answer them (every answer a function of the
//! request, so a resent request gets the same answer), and runs of them on the
//! threaded runtime: straight through, or stopped and recovered from a store.

use std::sync::{Arc, Condvar, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use spool_core::TaskState;
use spool_core::{AgentTask, Kind, NewTask, SavedTask, Step, TaskContext, TaskId, TaskRegistry};
use spool_runtime::{Runtime, RuntimeBuilder, RuntimeHandle, from_fn};

/// Works `steps` steps, each a request whose answer goes into its log: mostly LLM
/// calls carrying the whole log so far, every third a tool call, and, at step
/// `confirm_at`, a question for a human. Ends with its name and log.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Worker {
    pub(crate) name: String,
    pub(crate) steps: u32,
    pub(crate) confirm_at: Option<u32>,
    pub(crate) log: Vec<String>,
    pub(crate) waiting: bool,
}

impl Worker {
    pub(crate) fn new(name: &str, steps: u32, confirm_at: Option<u32>) -> Worker {
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

/// One agent's conversation: each turn adds a short user line and sends the whole
/// conversation to the LLM, whose answer is added in turn. Ends with the transcript.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Chat {
    pub(crate) turns: u32,
    pub(crate) messages: Vec<String>,
    pub(crate) waiting: bool,
}

impl Chat {
    pub(crate) fn new(turns: u32) -> Chat {
        Chat {
            turns,
            messages: Vec::new(),
            waiting: false,
        }
    }
}

impl AgentTask for Chat {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.waiting {
            let Some(answer) = cx.take_answer() else {
                return Step::fail("resumed without an answer");
            };
            match answer.result {
                Ok(Value::String(text)) => self.messages.push(text),
                Ok(other) => return Step::fail(format!("not text: {other}")),
                Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
            }
            self.waiting = false;
        }
        let turn = self.messages.len() / 2;
        if turn == self.turns as usize {
            return Step::done(json!(self.messages));
        }
        self.messages.push(format!("user {turn}: go on."));
        cx.llm(json!({"messages": self.messages}));
        self.waiting = true;
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "chat"
    }

    fn save(&self) -> Result<SavedTask, spool_core::StateError> {
        SavedTask::serde(self)
    }
}

/// The registry both task types are rebuilt from.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_serde::<Worker>("worker")
        .with_serde::<Chat>("chat")
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
pub(crate) fn prose(seed: u64, len: usize) -> String {
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

/// The LLM's answer to a request: a function of the request alone. A chat turn gets
/// about `answer_len` bytes of new prose; a worker a line naming what it saw.
pub(crate) fn llm_answer(payload: &Value, answer_len: usize) -> Value {
    if let Some(messages) = payload.get("messages").and_then(Value::as_array) {
        return json!(prose(messages.len() as u64, answer_len));
    }
    let worker = payload["worker"].as_str().unwrap_or("?");
    let log = payload["log"].as_array().map_or(0, Vec::len);
    json!(format!("{worker} read {log} lines"))
}

/// A tool's answer: a function of the request alone.
pub(crate) fn tool_answer(payload: &Value) -> Value {
    json!(format!(
        "{} counted {}",
        payload["worker"].as_str().unwrap_or("?"),
        payload["items"]
    ))
}

/// A human's answer to a confirmation.
pub(crate) fn confirm_answer(question: &Value) -> Value {
    json!(format!(
        "yes to {} at {}",
        question["worker"], question["step"]
    ))
}

/// Stops the runtime mid-way, as a crash would, with answers still on their way: once
/// the loop has taken `answers` more answers (read back through the handle, so they are
/// journaled), it is asked to shut down. Until it has been told to, the LLM executor
/// gives no more than those answers (it waits at [`Stopper::gate`]), so a life makes
/// the same small progress however late the watcher thread gets to run on a loaded
/// machine.
#[derive(Clone, Default)]
pub(crate) struct Stopper {
    watcher: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
    budget: Arc<(Mutex<Budget>, Condvar)>,
}

/// What the LLM executor may still answer in this life.
#[derive(Default)]
struct Budget {
    /// Answers left (`None`: no limit, the stopper is not armed).
    left: Option<u32>,
    /// The runtime was told to stop (or is gone): answers go on, to be lost.
    stopped: bool,
}

impl Stopper {
    /// Shut the runtime down after it has taken `answers` more answers.
    pub(crate) fn arm(&self, handle: RuntimeHandle, answers: u32) {
        self.budget.0.lock().unwrap().left = Some(answers);
        let budget = self.budget.clone();
        let watcher = std::thread::spawn(move || {
            // The first reading is answered when the loop runs: what it recovered with.
            if let Ok(first) = handle.stats() {
                loop {
                    let Ok(now) = handle.stats() else { break };
                    if now.answers >= first.answers + u64::from(answers) {
                        let _ = handle.shutdown();
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
            let (lock, turn) = &*budget;
            lock.lock().unwrap().stopped = true;
            turn.notify_all();
        });
        *self.watcher.lock().unwrap() = Some(watcher);
    }

    /// The LLM executor's way in: takes one answer from the budget, waiting while none
    /// is left until the runtime is told to stop, or for at most a second (the loop's
    /// count of answers, which the watcher reads, takes in the tools' answers too and
    /// can lag the LLM's: a life may need more than its budget to reach it).
    fn gate(&self) {
        let (lock, turn) = &*self.budget;
        let mut budget = lock.lock().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while budget.left == Some(0) && !budget.stopped {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            budget = turn.wait_timeout(budget, left).unwrap().0;
        }
        if let Some(left) = &mut budget.left {
            *left = left.saturating_sub(1);
        }
    }
}

/// A builder with the LLM and the tool executors; LLM answers are `answer_len` bytes of
/// prose for chats; `slow` makes every LLM call take a millisecond, so that some are
/// in flight when the runtime stops.
pub(crate) fn builder(stopper: &Stopper, answer_len: usize, slow: bool) -> RuntimeBuilder {
    let stopper = stopper.clone();
    Runtime::builder()
        .executor(
            Kind::Llm,
            from_fn(move |request| {
                stopper.gate();
                if slow {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Ok(llm_answer(&request.request.payload, answer_len))
            }),
        )
        .executor(
            Kind::tool("count"),
            from_fn(|request| Ok(tool_answer(&request.request.payload))),
        )
}

/// Answers every pending confirmation and runs until idle, until no confirmation is
/// left; stops early (returning false) if the run was shut down with work left.
pub(crate) fn finish(runtime: &mut Runtime) -> bool {
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

/// The workers of the recovery tests: three agents, two of which stop for a human.
pub(crate) fn workers() -> Vec<NewTask> {
    vec![
        NewTask::new(Worker::new("ann", 7, Some(3))).agent("ann"),
        NewTask::new(Worker::new("bob", 5, None)).agent("bob"),
        NewTask::new(Worker::new("cy", 9, Some(6))).agent("cy"),
    ]
}

/// A worker submitted later, between the two phases of a run.
pub(crate) fn late_worker() -> NewTask {
    NewTask::new(Worker::new("dee", 4, None)).agent("dee")
}

/// The run straight through, without a store: submit the workers, run until they
/// wait for a human, submit the late worker, then answer every confirmation until
/// the end. Returns every task's final state.
pub(crate) fn straight_run() -> Vec<(TaskId, TaskState)> {
    let mut runtime = builder(&Stopper::default(), 200, false).build();
    let mut ids: Vec<TaskId> = workers()
        .into_iter()
        .map(|task| runtime.submit(task).unwrap().id)
        .collect();
    runtime.run_until_idle();
    ids.push(runtime.submit(late_worker()).unwrap().id);
    assert!(finish(&mut runtime));
    states(&runtime, &ids)
}

/// The states of `ids` in `runtime`.
pub(crate) fn states(runtime: &Runtime, ids: &[TaskId]) -> Vec<(TaskId, TaskState)> {
    ids.iter()
        .map(|id| (*id, runtime.task_state(*id).expect("the task is kept")))
        .collect()
}
