//! Task types that can be saved, and the registry that rebuilds them.
//!
//! Every type here is an explicit state machine whose fields are its whole state: it
//! derives serde, saves itself with `SavedTask::serde(self)` and has a stable
//! `type_name`. (No async task is here: they are saved by journal replay, which these
//! tests do not cover.)

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::json;
use spool::{
    AgentTask, Kind, NewTask, Request, SavedTask, Step, TaskContext, TaskId, TaskRegistry,
};

/// Asks `left` LLM questions one after another, adding up the answers, then finishes
/// with the sum: a task whose state is its fields.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Asker {
    pub(crate) left: u32,
    pub(crate) sum: i64,
    pub(crate) asked: bool,
}

impl Asker {
    pub(crate) fn new(questions: u32) -> Asker {
        Asker {
            left: questions,
            sum: 0,
            asked: false,
        }
    }
}

impl AgentTask for Asker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asked {
            match cx.take_answer() {
                Some(answer) => match answer.result {
                    Ok(value) => self.sum += value.as_i64().unwrap_or(0),
                    Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
                },
                None => return Step::fail("resumed without an answer"),
            }
            self.left -= 1;
        }
        if self.left == 0 {
            return Step::done(self.sum);
        }
        self.asked = true;
        cx.request(Request::llm(json!({"left": self.left})).with_tokens(10));
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "asker"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// Sleeps its naps one after another (milliseconds of virtual time), then finishes
/// with how many it slept: a task waiting on its timer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Sleeper {
    pub(crate) naps_ms: Vec<u64>,
    pub(crate) slept: usize,
    pub(crate) asleep: bool,
}

impl Sleeper {
    pub(crate) fn new(naps_ms: &[u64]) -> Sleeper {
        Sleeper {
            naps_ms: naps_ms.to_vec(),
            slept: 0,
            asleep: false,
        }
    }
}

impl AgentTask for Sleeper {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asleep {
            if !cx.take_timer_fired() {
                return Step::fail("woken before its timer fired");
            }
            self.asleep = false;
            self.slept += 1;
        }
        match self.naps_ms.get(self.slept) {
            Some(ms) => {
                cx.sleep(Duration::from_millis(*ms));
                self.asleep = true;
                Step::Wait
            }
            None => Step::done(self.slept as u64),
        }
    }

    fn type_name(&self) -> &'static str {
        "sleeper"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// Asks `asks` LLM questions, then fails with a message (or panics, if told to): a task
/// that ends badly on purpose. With no questions it fails on its first poll.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Failer {
    pub(crate) asks: u32,
    pub(crate) asked: u32,
    pub(crate) panic: bool,
}

impl Failer {
    pub(crate) fn new(asks: u32) -> Failer {
        Failer {
            asks,
            asked: 0,
            panic: false,
        }
    }

    pub(crate) fn panicking() -> Failer {
        Failer {
            asks: 0,
            asked: 0,
            panic: true,
        }
    }
}

impl AgentTask for Failer {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asked > 0 {
            let _ = cx.take_answer();
        }
        if self.asked < self.asks {
            self.asked += 1;
            cx.llm(json!({"failer": self.asked}));
            return Step::Wait;
        }
        if self.panic {
            panic!("a failer panics on purpose");
        }
        Step::fail(format!("failed on purpose after {} questions", self.asked))
    }

    fn type_name(&self) -> &'static str {
        "failer"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// Makes one request of any kind and finishes with the answer: confirmations (held
/// by the test scheduler), tools, custom kinds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Caller {
    /// The kind, as `Kind::custom` reads it (`confirm`, `tool:ls`, `my-kind`, ...).
    pub(crate) kind: String,
    /// The payload as JSON text: postcard cannot read a `serde_json::Value` back (a
    /// task holding one saves, and then fails to restore with `BadBody`).
    pub(crate) payload: String,
    pub(crate) tokens: u32,
    pub(crate) asked: bool,
}

impl Caller {
    pub(crate) fn new(kind: &str, payload: serde_json::Value) -> Caller {
        Caller {
            kind: kind.to_owned(),
            payload: payload.to_string(),
            tokens: 0,
            asked: false,
        }
    }

    pub(crate) fn tokens(mut self, tokens: u32) -> Caller {
        self.tokens = tokens;
        self
    }
}

impl AgentTask for Caller {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.asked {
            return match cx.take_answer() {
                Some(answer) => {
                    Step::Done(answer.result.map_err(|e| e.into_task_error(answer.number)))
                }
                None => Step::fail("resumed without an answer"),
            };
        }
        let kind = Kind::custom(self.kind.clone());
        let payload: serde_json::Value = match serde_json::from_str(&self.payload) {
            Ok(payload) => payload,
            Err(e) => return Step::fail(e.to_string()),
        };
        self.asked = true;
        cx.request(Request::new(kind, payload).with_tokens(self.tokens));
        Step::Wait
    }

    fn type_name(&self) -> &'static str {
        "caller"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// Holds a float in its fields, asks one LLM question and finishes with the float
/// plus the answer: a task whose saved state has a float in it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Scorer {
    pub(crate) score: f64,
    pub(crate) asked: bool,
}

impl AgentTask for Scorer {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if !self.asked {
            self.asked = true;
            cx.llm(json!({"score": self.score}));
            return Step::Wait;
        }
        let answer = cx
            .take_answer()
            .and_then(|a| a.result.ok())
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        Step::done(self.score + answer)
    }

    fn type_name(&self) -> &'static str {
        "scorer"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// A child a [`Parent`] spawns.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) enum Kid {
    /// An [`Asker`] of that many questions.
    Ask(u32),
    /// A [`Sleeper`] of one nap (milliseconds).
    Sleep(u64),
    /// A [`Failer`] of that many questions.
    Fail(u32),
    /// A [`Caller`] of that kind.
    Call(String),
    /// A [`Parent`] of its own.
    Parent(Vec<Kid>),
}

impl Kid {
    fn new_task(&self) -> NewTask {
        match self {
            Kid::Ask(n) => NewTask::new(Asker::new(*n)),
            Kid::Sleep(ms) => NewTask::new(Sleeper::new(&[*ms])),
            Kid::Fail(n) => NewTask::new(Failer::new(*n)),
            Kid::Call(kind) => NewTask::new(Caller::new(kind, json!("from a parent"))),
            Kid::Parent(kids) => NewTask::new(Parent::new(kids.clone())),
        }
    }
}

/// Spawns its kids with `cx.spawn`, joins them and finishes with what each ended with,
/// in spawn order. With `first_only`, waits for any one child (`WaitAny`) and finishes
/// with the first result, which cancels the others.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Parent {
    pub(crate) kids: Vec<Kid>,
    pub(crate) children: Vec<TaskId>,
    pub(crate) first_only: bool,
}

impl Parent {
    pub(crate) fn new(kids: Vec<Kid>) -> Parent {
        Parent {
            kids,
            children: Vec::new(),
            first_only: false,
        }
    }

    pub(crate) fn first_only(kids: Vec<Kid>) -> Parent {
        Parent {
            first_only: true,
            ..Parent::new(kids)
        }
    }
}

impl AgentTask for Parent {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.children.is_empty() {
            if self.kids.is_empty() {
                return Step::done(json!([]));
            }
            for kid in &self.kids {
                let id = cx.spawn(kid.new_task());
                self.children.push(id);
            }
            cx.join_all();
            return if self.first_only {
                Step::WaitAny
            } else {
                Step::Wait
            };
        }
        let text = |outcome: spool::Outcome| match outcome {
            Ok(value) => format!("ok: {value}"),
            Err(error) => format!("error: {error}"),
        };
        if self.first_only {
            return match cx.take_any_child_result() {
                Some((id, outcome)) => Step::done(format!("task {id} {}", text(outcome))),
                None => Step::fail("woken with no child ended"),
            };
        }
        let results: Vec<String> = self
            .children
            .iter()
            .map(|id| cx.take_child_result(*id).map_or("missing".to_owned(), text))
            .collect();
        Step::done(results)
    }

    fn type_name(&self) -> &'static str {
        "parent"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// One thing a [`Worker`] does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) enum Op {
    /// One LLM request with a token estimate; waits for it.
    Llm(u32),
    /// One call of the tool; waits for it.
    Tool(String),
    /// That many LLM requests at once; waits for all.
    FanOut(u32),
    /// That many LLM requests at once; `WaitAny` until all have come.
    Race(u32),
    /// Sleeps that many milliseconds.
    Sleep(u64),
    /// Gives way once.
    Yield,
    /// Spawns a child worker per script, joins them all and waits.
    Spawn(Vec<Vec<Op>>),
    /// Fails.
    Fail,
}

/// Runs a script of [`Op`]s, adding up the answers (and its children's results); a
/// request that fails fails it. The workload of the resume tests.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Worker {
    pub(crate) ops: Vec<Op>,
    pub(crate) pc: usize,
    pub(crate) waiting: bool,
    pub(crate) acc: i64,
    pub(crate) children: Vec<TaskId>,
}

impl Worker {
    pub(crate) fn new(ops: Vec<Op>) -> Worker {
        Worker {
            ops,
            pc: 0,
            waiting: false,
            acc: 0,
            children: Vec::new(),
        }
    }

    fn payload(&self, cx: &TaskContext<'_>, i: u32) -> serde_json::Value {
        json!({"task": cx.task_id().get(), "pc": self.pc, "i": i})
    }
}

impl AgentTask for Worker {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        if self.waiting {
            while let Some(answer) = cx.take_answer() {
                match answer.result {
                    Ok(value) => self.acc = self.acc.wrapping_add(value.as_i64().unwrap_or(1)),
                    Err(error) => return Step::Done(Err(error.into_task_error(answer.number))),
                }
            }
            if matches!(self.ops.get(self.pc), Some(Op::Race(_))) && cx.in_flight() > 0 {
                return Step::WaitAny;
            }
            for id in std::mem::take(&mut self.children) {
                match cx.take_child_result(id) {
                    Some(Ok(value)) => {
                        self.acc = self.acc.wrapping_add(value.as_i64().unwrap_or(0));
                    }
                    Some(Err(_)) => self.acc = self.acc.wrapping_sub(1000),
                    None => return Step::fail(format!("child {id} has no result")),
                }
            }
            self.waiting = false;
            self.pc += 1;
        }
        let Some(op) = self.ops.get(self.pc).cloned() else {
            return Step::done(self.acc);
        };
        let race = matches!(op, Op::Race(_));
        match op {
            Op::Llm(tokens) => {
                cx.request(Request::llm(self.payload(cx, 0)).with_tokens(tokens));
            }
            Op::Tool(name) => {
                cx.tool(name, self.payload(cx, 0));
            }
            Op::FanOut(n) | Op::Race(n) => {
                for i in 0..n.max(1) {
                    cx.request(Request::llm(self.payload(cx, i)).with_tokens(5));
                }
            }
            Op::Sleep(ms) => cx.sleep(Duration::from_millis(ms)),
            Op::Yield => {
                self.pc += 1;
                return Step::Yield;
            }
            Op::Spawn(scripts) => {
                for script in scripts {
                    let id = cx.spawn(NewTask::new(Worker::new(script)));
                    self.children.push(id);
                }
                cx.join_all();
                if self.children.is_empty() {
                    self.pc += 1;
                    return Step::Yield;
                }
            }
            Op::Fail => return Step::fail(format!("script failed at op {}", self.pc)),
        }
        self.waiting = true;
        if race { Step::WaitAny } else { Step::Wait }
    }

    fn type_name(&self) -> &'static str {
        "worker"
    }

    fn save(&self) -> Result<SavedTask, spool::StateError> {
        SavedTask::serde(self)
    }
}

/// The registry of the types above.
pub(crate) fn registry() -> TaskRegistry {
    TaskRegistry::new()
        .with_serde::<Asker>("asker")
        .with_serde::<Sleeper>("sleeper")
        .with_serde::<Failer>("failer")
        .with_serde::<Caller>("caller")
        .with_serde::<Parent>("parent")
        .with_serde::<Worker>("worker")
        .with_serde::<Scorer>("scorer")
}
