//! Saving async tasks by journal replay.
//!
//! A future cannot be serialized, but it can be made again and fed the same inputs.
//! A task made with [`AsyncTask::replayable`](crate::AsyncTask::replayable) keeps its input and, for each poll, what
//! the poll received (the time, the answers, the children's outcomes) and what it asked
//! for (each request's kind and a hash of its payload, and the children it spawned). On
//! restore the task is made again from its registered constructor and polled once per
//! recorded poll with the recorded inputs; each poll must ask for what it asked for
//! then, or the restore fails with [`Nondeterminism`], showing both side by side. After
//! the last recorded poll the task goes on live.

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::{RequestKey, TaskId};
use crate::kind::Kind;
use crate::pending::{PendingSet, Status};
use crate::replaying::{Recorded, ReplayGuard};
use crate::saved::{OutcomeRecord, SavedResult, SavedTask, StateError};
use crate::state::Outcome;
use crate::task::{Family, NewTask, Step, TaskContext};
use crate::time::Time;

/// How much of a payload a recorded request keeps to show in a [`Nondeterminism`].
const PREVIEW: usize = 120;

/// A replayable task's input and the record of its polls.
#[derive(Debug)]
pub(crate) struct ReplayLog {
    input: Value,
    polls: Vec<PollRecord>,
    /// The code changes whose new branch its polls took
    /// ([`Cx::patched`](crate::Cx::patched)): a replay of the polls takes them again,
    /// and the old branch of any other.
    patches: Vec<String>,
}

/// One poll: what it received and what it asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct PollRecord {
    now: Time,
    answers: Vec<(u32, SavedResult)>,
    children: Vec<(TaskId, OutcomeRecord)>,
    requests: Vec<RequestRecord>,
    spawns: Vec<TaskId>,
}

/// A request as recorded: enough to know it again and to show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RequestRecord {
    number: u32,
    kind: Kind,
    hash: u64,
    preview: String,
}

impl fmt::Display for RequestRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request {} {} {}", self.number, self.kind, self.preview)
    }
}

/// What a replayable task saves: its input (as JSON text) and its polls.
#[derive(Serialize, Deserialize)]
struct SavedLog {
    input: String,
    polls: Vec<PollRecord>,
}

/// [`SavedLog`] with the code changes whose new branch it took, written only when it
/// took one (so a task that never asks saves as it always did).
#[derive(Serialize, Deserialize)]
struct SavedPatchedLog {
    input: String,
    polls: Vec<PollRecord>,
    patches: Vec<String>,
}

/// The input of a saved replay log, if it reads.
pub(crate) fn log_input(bytes: &[u8]) -> Option<Value> {
    let saved: SavedLog = crate::bounded::from_postcard(bytes).ok()?;
    serde_json::from_str(&saved.input).ok()
}

/// A restored async task asked for something other than what its journal recorded at
/// that point: the code changed, or it is not deterministic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("task {task} does not replay: at poll {step} it {}", self.sides())]
pub struct Nondeterminism {
    /// The task.
    pub task: TaskId,
    /// The poll (from 0) at which it differs.
    pub step: usize,
    /// What the journal recorded (requests, or spawned children).
    pub recorded: Vec<String>,
    /// What the rebuilt task did instead.
    pub got: Vec<String>,
}

impl Nondeterminism {
    fn sides(&self) -> String {
        let show = |v: &[String]| {
            if v.is_empty() {
                "nothing".to_owned()
            } else {
                v.join("; ")
            }
        };
        format!(
            "differs from its journal:\n  recorded: {}\n  now:      {}",
            show(&self.recorded),
            show(&self.got)
        )
    }
}

/// FNV-1a over a payload's JSON text: the same payload hashes the same on any machine.
fn payload_hash(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

fn preview(text: &str) -> String {
    match text.char_indices().nth(PREVIEW) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// The requests numbered from `from` in `pending`, as recorded.
fn requests_from(pending: &PendingSet, from: u32) -> Vec<RequestRecord> {
    pending
        .as_slice()
        .iter()
        .filter(|p| p.number >= from)
        .filter_map(|p| {
            let request = p.request()?;
            let text = serde_json::to_string(request.payload.value()).unwrap_or_default();
            Some(RequestRecord {
                number: p.number,
                kind: p.kind.clone(),
                hash: payload_hash(&text),
                preview: preview(&text),
            })
        })
        .collect()
}

fn outcome_record(outcome: &Outcome) -> OutcomeRecord {
    match outcome {
        Ok(value) => OutcomeRecord::Ok(serde_json::to_string(value).unwrap_or_default()),
        Err(error) => OutcomeRecord::Err(error.clone()),
    }
}

fn outcome_of(record: &OutcomeRecord) -> Outcome {
    match record {
        OutcomeRecord::Ok(text) => Ok(serde_json::from_str(text).unwrap_or(Value::Null)),
        OutcomeRecord::Err(error) => Err(error.clone()),
    }
}

impl ReplayLog {
    /// The log of a task made from `input` that has not been polled yet.
    pub(super) fn new(input: Value) -> ReplayLog {
        ReplayLog {
            input,
            polls: Vec::new(),
            patches: Vec::new(),
        }
    }

    /// The input the task was made from.
    pub(super) fn input(&self) -> &Value {
        &self.input
    }

    /// Polls the task with `poll` and records what the poll received and asked for.
    pub(super) fn record(
        &mut self,
        cx: &mut TaskContext<'_>,
        poll: impl FnOnce(&mut TaskContext<'_>) -> Step,
    ) -> Step {
        let now = cx.now;
        let answers = cx
            .pending
            .as_slice()
            .iter()
            .filter_map(|p| match &p.status {
                Status::Answered(result) => {
                    Some((p.number, SavedResult::of(&result.clone().map_err(|e| *e))))
                }
                Status::InFlight(..) => None,
            })
            .collect();
        let children = cx
            .family
            .as_ref()
            .map(|f| {
                f.results
                    .iter()
                    .map(|(id, outcome)| (*id, outcome_record(outcome)))
                    .collect()
            })
            .unwrap_or_default();
        let first_request = *cx.next_request;
        let first_child = *cx.next_task;
        let step = poll(cx);
        if let Some(family) = cx.family.as_ref() {
            for (name, taken) in &family.patches.decided {
                if *taken && !self.patches.contains(name) {
                    self.patches.push(name.clone());
                }
            }
        }
        let requests = requests_from(cx.pending, first_request);
        let spawns = (first_child..*cx.next_task).map(TaskId).collect();
        self.polls.push(PollRecord {
            now,
            answers,
            children,
            requests,
            spawns,
        });
        step
    }

    /// What a snapshot keeps of the task.
    pub(super) fn save(&self) -> Result<SavedTask, StateError> {
        let input =
            serde_json::to_string(&self.input).map_err(|e| StateError::Encode(e.to_string()))?;
        let polls = self.polls.clone();
        let bytes = if self.patches.is_empty() {
            postcard::to_allocvec(&SavedLog { input, polls })
        } else {
            postcard::to_allocvec(&SavedPatchedLog {
                input,
                polls,
                patches: self.patches.clone(),
            })
        };
        bytes
            .map(SavedTask::Replay)
            .map_err(|e| StateError::Encode(e.to_string()))
    }

    /// Reads back what [`save`](ReplayLog::save) wrote.
    pub(super) fn decode(bytes: &[u8]) -> Result<ReplayLog, RemakeError> {
        let saved = match crate::bounded::take_from_postcard::<SavedLog>(bytes) {
            Ok((saved, [])) => SavedPatchedLog {
                input: saved.input,
                polls: saved.polls,
                patches: Vec::new(),
            },
            _ => {
                crate::bounded::from_postcard(bytes).map_err(|e| RemakeError::Bad(e.to_string()))?
            }
        };
        let input: Value =
            serde_json::from_str(&saved.input).map_err(|e| RemakeError::Bad(e.to_string()))?;
        Ok(ReplayLog {
            input,
            polls: saved.polls,
            patches: saved.patches,
        })
    }

    /// Polls a task made again from [`input`](ReplayLog::input) with `poll`, once per
    /// recorded poll, with the recorded inputs, as task `task`, and checks it asks for
    /// what was recorded.
    pub(super) fn replay(
        &self,
        task: TaskId,
        mut poll: impl FnMut(&mut TaskContext<'_>) -> Step,
    ) -> Result<(), RemakeError> {
        let mut rerun = Rerun::new(task);
        // Its polls take the new branch of the changes they took, the old of others.
        let mut recorded = Recorded::default();
        for name in &self.patches {
            recorded.took(task, name);
        }
        let _replaying = ReplayGuard::begin(recorded);
        for (step, record) in self.polls.iter().enumerate() {
            rerun.receive(step, record)?;
            let (made, children) = rerun.poll_once(step, record, &mut poll)?;
            if made != record.requests || children != record.spawns {
                return Err(RemakeError::Nondeterminism(Nondeterminism {
                    task,
                    step,
                    recorded: show(&record.requests, &record.spawns),
                    got: show(&made, &children),
                }));
            }
            rerun.end_poll();
        }
        Ok(())
    }
}

/// What a task being replayed holds between its polls, kept as the scheduler keeps it
/// for a live task.
struct Rerun {
    task: TaskId,
    pending: PendingSet,
    next_request: u32,
    in_flight: u32,
    timer: Time,
    timer_fired: bool,
    outbox: VecDeque<RequestKey>,
    family: Option<Box<Family>>,
    spawned: Vec<(TaskId, NewTask)>,
    next_task: u64,
}

impl Rerun {
    /// Task `task` before its first poll.
    fn new(task: TaskId) -> Rerun {
        Rerun {
            task,
            pending: PendingSet::Empty,
            next_request: 1,
            in_flight: 0,
            timer: Time::MAX,
            timer_fired: false,
            outbox: VecDeque::new(),
            family: None,
            spawned: Vec::new(),
            next_task: 0,
        }
    }

    /// Gives the task what poll `step` received: each answer, to a request it has in
    /// flight; its children's outcomes; and the id its first spawn gets.
    fn receive(&mut self, step: usize, record: &PollRecord) -> Result<(), RemakeError> {
        for (number, result) in &record.answers {
            let Some(p) = self.pending.in_flight_mut(*number) else {
                return Err(RemakeError::Nondeterminism(Nondeterminism {
                    task: self.task,
                    step,
                    recorded: vec![format!("an answer to request {number}")],
                    got: vec![format!("no request {number} in flight")],
                }));
            };
            let result = result.to_result().map_err(RemakeError::Bad)?;
            p.status = Status::Answered(result.map_err(Box::new));
            self.in_flight -= 1;
        }
        if !record.children.is_empty() {
            let f = self.family.get_or_insert_with(Default::default);
            for (child, outcome) in &record.children {
                f.children.retain(|c| c != child);
                f.joined.retain(|c| c != child);
                f.results.push((*child, outcome_of(outcome)));
            }
        }
        if let Some(first) = record.spawns.first() {
            self.next_task = first.0;
        }
        Ok(())
    }

    /// Polls the task once, at the time of poll `step`, and gives what it asked for:
    /// the requests it made and the children it spawned.
    fn poll_once(
        &mut self,
        step: usize,
        record: &PollRecord,
        poll: &mut impl FnMut(&mut TaskContext<'_>) -> Step,
    ) -> Result<(Vec<RequestRecord>, Vec<TaskId>), RemakeError> {
        let first_request = self.next_request;
        let first_child = self.next_task;
        let mut cx = TaskContext {
            task: self.task,
            index: 0,
            now: record.now,
            pending: &mut self.pending,
            next_request: &mut self.next_request,
            in_flight: &mut self.in_flight,
            timer: &mut self.timer,
            timer_fired: &mut self.timer_fired,
            outbox: &mut self.outbox,
            issued: 0,
            family: &mut self.family,
            spawned: &mut self.spawned,
            next_task: &mut self.next_task,
        };
        let polled = catch_unwind(AssertUnwindSafe(|| poll(&mut cx)));
        if polled.is_err() {
            return Err(RemakeError::Bad(format!(
                "task {} panicked while replaying poll {step}",
                self.task
            )));
        }
        let made = requests_from(&self.pending, first_request);
        let children = (first_child..self.next_task).map(TaskId).collect();
        Ok((made, children))
    }

    /// Drops what the poll left for the scheduler: the answers it took, the requests
    /// it sent, the children it spawned.
    fn end_poll(&mut self) {
        self.pending.drop_answers();
        self.outbox.clear();
        self.spawned.clear();
    }
}

/// Requests and spawned children as a [`Nondeterminism`] shows them.
fn show(requests: &[RequestRecord], children: &[TaskId]) -> Vec<String> {
    requests
        .iter()
        .map(ToString::to_string)
        .chain(children.iter().map(|c| format!("spawn task {c}")))
        .collect()
}

/// Why an async task could not be made again from its saved replay log: the log
/// does not read back, the task panicked while replaying it, or it asked for other
/// things than the log recorded.
#[derive(Debug)]
pub(crate) enum RemakeError {
    /// The log is damaged, or a poll panicked: what went wrong.
    Bad(String),
    /// A replayed poll asked for something other than what was recorded.
    Nondeterminism(Nondeterminism),
}

impl fmt::Display for RemakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemakeError::Bad(reason) => f.write_str(reason),
            RemakeError::Nondeterminism(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::Request;

    /// A poll at time 0 that received `answers` and asked for `requests` and `spawns`.
    fn poll_record(
        answers: Vec<(u32, SavedResult)>,
        requests: Vec<RequestRecord>,
        spawns: Vec<TaskId>,
    ) -> PollRecord {
        PollRecord {
            now: Time::ZERO,
            answers,
            children: Vec::new(),
            requests,
            spawns,
        }
    }

    /// The record of request 1, an LLM request of `"q"`.
    fn asked() -> RequestRecord {
        let text = "\"q\"";
        RequestRecord {
            number: 1,
            kind: Kind::Llm,
            hash: payload_hash(text),
            preview: preview(text),
        }
    }

    /// Asks `"q"` at its first poll; panics at any later one.
    fn ask_then_panic() -> impl FnMut(&mut TaskContext<'_>) -> Step {
        let mut polls = 0;
        move |cx| {
            polls += 1;
            assert!(polls == 1, "polled again");
            cx.request(Request::llm(json!("q")));
            Step::Wait
        }
    }

    fn nondeterminism(result: Result<(), RemakeError>) -> Nondeterminism {
        match result {
            Err(RemakeError::Nondeterminism(n)) => n,
            other => panic!("{other:?}"),
        }
    }

    /// The log replays when the task asks for what was recorded.
    #[test]
    fn a_task_that_asks_the_same_replays() {
        let log = ReplayLog {
            input: Value::Null,
            polls: vec![poll_record(Vec::new(), vec![asked()], Vec::new())],
            patches: Vec::new(),
        };
        assert!(log.replay(TaskId(7), ask_then_panic()).is_ok());
    }

    /// An answer recorded to a request not in flight is refused before the poll it
    /// comes to (which here would panic).
    #[test]
    fn an_answer_to_no_request_in_flight_is_nondeterminism() {
        let answer = (2, SavedResult::Ok("1".to_owned()));
        let log = ReplayLog {
            input: Value::Null,
            polls: vec![
                poll_record(Vec::new(), vec![asked()], Vec::new()),
                poll_record(vec![answer], Vec::new(), Vec::new()),
            ],
            patches: Vec::new(),
        };
        assert_eq!(
            nondeterminism(log.replay(TaskId(7), ask_then_panic())),
            Nondeterminism {
                task: TaskId(7),
                step: 1,
                recorded: vec!["an answer to request 2".to_owned()],
                got: vec!["no request 2 in flight".to_owned()],
            }
        );
    }

    /// A poll that panics fails the replay, naming the task and the poll.
    #[test]
    fn a_poll_that_panics_is_bad() {
        let answer = (1, SavedResult::Ok("1".to_owned()));
        let log = ReplayLog {
            input: Value::Null,
            polls: vec![
                poll_record(Vec::new(), vec![asked()], Vec::new()),
                poll_record(vec![answer], Vec::new(), Vec::new()),
            ],
            patches: Vec::new(),
        };
        match log.replay(TaskId(7), ask_then_panic()) {
            Err(RemakeError::Bad(reason)) => {
                assert_eq!(reason, "task 7 panicked while replaying poll 1");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A poll that asks for other things than recorded shows both, requests then
    /// spawned children, each side as a list.
    #[test]
    fn a_poll_that_asks_otherwise_shows_both_sides() {
        let log = ReplayLog {
            input: Value::Null,
            polls: vec![poll_record(Vec::new(), Vec::new(), vec![TaskId(5)])],
            patches: Vec::new(),
        };
        assert_eq!(
            nondeterminism(log.replay(TaskId(7), ask_then_panic())),
            Nondeterminism {
                task: TaskId(7),
                step: 0,
                recorded: vec!["spawn task 5".to_owned()],
                got: vec!["request 1 llm \"q\"".to_owned()],
            }
        );
    }
}
