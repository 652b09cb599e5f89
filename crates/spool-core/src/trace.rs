//! The trace: one event per state transition, in order, for tests and for `tracing`.
//!
//! Recording into memory is a configuration choice (on in `TestScheduler`, off by
//! default in the runtime); events also go to `tracing` at TRACE level under the
//! target `spool::trace` whenever a subscriber wants them.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::TaskId;
use crate::kind::Kind;
use crate::state::{CancelReason, WaitReason};
use crate::time::Time;

/// A task's state as a trace shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// Not yet in the table (the `from` of a submission).
    New,
    /// In the run queue.
    Ready,
    /// Being polled.
    Running,
    /// Waiting, and for what.
    Waiting(WaitReason),
    /// Finished with a value: `TaskState::Completed(Ok(_))`, shown as `Completed(ok)`.
    Completed,
    /// Finished with an error: `TaskState::Completed(Err(_))`, shown as
    /// `Completed(error)` (the same words as the state's; the error is in the cause).
    Failed,
    /// Canceled.
    Canceled,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::New => f.write_str("New"),
            Phase::Ready => f.write_str("Ready"),
            Phase::Running => f.write_str("Running"),
            Phase::Waiting(reason) => write!(f, "Waiting({reason})"),
            Phase::Completed => f.write_str("Completed(ok)"),
            Phase::Failed => f.write_str("Completed(error)"),
            Phase::Canceled => f.write_str("Canceled"),
        }
    }
}

/// Why a transition happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Cause {
    /// The task was submitted.
    Submitted,
    /// The task was spawned by this parent.
    Spawned(TaskId),
    /// A child it joined, this one, ended.
    ChildEnded(TaskId),
    /// The run-queue policy picked it.
    Scheduled,
    /// It yielded this many new requests and waits.
    Requested(u32),
    /// It set a timer and waits.
    Sleeping,
    /// It waits again for requests already in flight (after a `WaitAny` woke it).
    Waiting,
    /// It gave way voluntarily.
    Yielded,
    /// The answer to its request with this number arrived.
    Answered(u32),
    /// Its timer fired.
    TimerFired,
    /// Its poll returned an outcome.
    Returned,
    /// Its poll panicked.
    Panicked,
    /// It made a request no executor serves.
    NoExecutor,
    /// It waited with nothing to wake it.
    Stalled,
    /// It was canceled.
    Canceled(CancelReason),
    /// It got a slot.
    Admitted,
    /// It was not admitted.
    Rejected,
    /// Its deadline passed.
    DeadlineExceeded,
    /// A task it depended on, this one, completed.
    DependencyDone(TaskId),
    /// Its request with this number was answered 429; the kind backs off until then and
    /// the request goes again.
    BackedOff {
        /// The request.
        number: u32,
        /// The end of the back-off.
        until: Time,
    },
    /// Its request with this number, of this kind, is held at its kind's gate: a
    /// window, token or in-flight limit, or its agent's cap, keeps it from going now.
    /// (A request the gate lets go at once shows no event.)
    Held {
        /// The request.
        number: u32,
        /// Its kind.
        kind: Kind,
    },
    /// Its request with this number, held at its kind's gate (or backed off after a
    /// 429), was let go to its executor.
    Released {
        /// The request.
        number: u32,
        /// Its kind.
        kind: Kind,
    },
    /// Its LLM request with this number is held: the day's budget is spent, and the
    /// request waits for the next day's (see [`Budgets`](crate::Budgets)).
    OverBudget {
        /// The request.
        number: u32,
        /// The budget spent.
        scope: crate::budget::BudgetScope,
    },
    /// Its LLM request with this number was not sent: a budget is spent, and the task
    /// gets [`RequestError::BudgetSpent`](crate::RequestError::BudgetSpent) as the answer.
    BudgetSpent {
        /// The request.
        number: u32,
        /// The budget spent.
        scope: crate::budget::BudgetScope,
    },
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Submitted => f.write_str("submitted"),
            Cause::Spawned(parent) => write!(f, "spawned by task {parent}"),
            Cause::ChildEnded(child) => write!(f, "child task {child} ended"),
            Cause::Scheduled => f.write_str("scheduled"),
            Cause::Requested(1) => f.write_str("1 request"),
            Cause::Requested(n) => write!(f, "{n} requests"),
            Cause::Sleeping => f.write_str("sleeping"),
            Cause::Waiting => f.write_str("waiting"),
            Cause::Yielded => f.write_str("yielded"),
            Cause::Answered(n) => write!(f, "answer to request {n}"),
            Cause::TimerFired => f.write_str("timer fired"),
            Cause::Returned => f.write_str("returned"),
            Cause::Panicked => f.write_str("panicked"),
            Cause::NoExecutor => f.write_str("no executor"),
            Cause::Stalled => f.write_str("stalled"),
            Cause::Canceled(reason) => write!(f, "{reason}"),
            Cause::Admitted => f.write_str("admitted"),
            Cause::Rejected => f.write_str("rejected"),
            Cause::DeadlineExceeded => f.write_str("deadline exceeded"),
            Cause::DependencyDone(task) => write!(f, "dependency task {task} completed"),
            Cause::BackedOff { number, until } => {
                write!(f, "request {number} rate limited, back off until {until}")
            }
            Cause::Held { number, kind } => write!(f, "request {number} ({kind}) held at its gate"),
            Cause::Released { number, kind } => {
                write!(f, "request {number} ({kind}) let through its gate")
            }
            Cause::OverBudget { number, scope } => {
                write!(
                    f,
                    "request {number} held until the next day: the {scope}'s budget is spent"
                )
            }
            Cause::BudgetSpent { number, scope } => {
                write!(
                    f,
                    "request {number} not sent: the {scope}'s budget is spent"
                )
            }
        }
    }
}

/// One state transition: `(seq, time, task, from → to, cause)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// Position in the trace, from 1.
    pub seq: u64,
    /// The scheduler's time.
    pub time: Time,
    /// The task.
    pub task: TaskId,
    /// The state before.
    pub from: Phase,
    /// The state after.
    pub to: Phase,
    /// Why.
    pub cause: Cause,
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} task {}: {} -> {} ({})",
            self.seq, self.time, self.task, self.from, self.to, self.cause
        )
    }
}

/// The trace of a run: its events, if recording, and a running hash of them.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    record: bool,
    events: Vec<TraceEvent>,
    next_seq: u64,
    hash: u64,
    answers: BTreeMap<Kind, AnswerCounts>,
}

/// Answers to one kind of request while the trace recorded: an answer's success or
/// error is not in its event (`Answered(n)`), so the trace counts them beside.
///
/// ```
/// use spool_core::AnswerCounts;
///
/// let counts = AnswerCounts::default();
/// assert_eq!((counts.ok, counts.error, counts.backed_off), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnswerCounts {
    /// Answers with a value, delivered to their task.
    pub ok: u64,
    /// Answers with an error, delivered to their task (a 429 not retried any more, its
    /// retries spent or its back-off given up, reaches it and is counted here).
    pub error: u64,
    /// 429 answers that sent the request back to its gate to go again after a back-off
    /// (not delivered: the task sees the answer of the retry).
    pub backed_off: u64,
}

/// What became of an answer, for [`AnswerCounts`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum AnswerOutcome {
    Ok,
    Error,
    BackedOff,
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

impl Trace {
    pub(crate) fn new(record: bool) -> Trace {
        Trace {
            record,
            events: Vec::new(),
            next_seq: 1,
            hash: FNV_OFFSET,
            answers: BTreeMap::new(),
        }
    }

    /// A trace that goes on from a snapshot: numbering and hash continue.
    pub(crate) fn resume(record: bool, next_seq: u64, hash: u64) -> Trace {
        Trace {
            record,
            events: Vec::new(),
            next_seq,
            hash,
            answers: BTreeMap::new(),
        }
    }

    /// Whether events are kept in memory.
    pub(crate) fn recording(&self) -> bool {
        self.record
    }

    pub(crate) fn set_recording(&mut self, record: bool) {
        self.record = record;
    }

    /// The number the next event will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Whether events are wanted at all (recorded, or a `tracing` subscriber at TRACE).
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.record || tracing::level_enabled!(tracing::Level::TRACE)
    }

    pub(crate) fn push(&mut self, time: Time, task: TaskId, from: Phase, to: Phase, cause: Cause) {
        let event = TraceEvent {
            seq: self.next_seq,
            time,
            task,
            from,
            to,
            cause,
        };
        self.next_seq += 1;
        tracing::trace!(
            target: "spool::trace",
            seq = event.seq,
            time = %event.time,
            task = event.task.get(),
            from = %event.from,
            to = %event.to,
            cause = %event.cause,
        );
        if self.record {
            self.hash = fnv1a(self.hash, event.to_string().as_bytes());
            self.hash = fnv1a(self.hash, b"\n");
            self.events.push(event);
        }
    }

    /// Counts an answer to a request of `kind`, if the trace records.
    #[inline]
    pub(crate) fn count_answer(&mut self, kind: &Kind, outcome: AnswerOutcome) {
        if !self.record {
            return;
        }
        let counts = match self.answers.get_mut(kind) {
            Some(counts) => counts,
            None => self.answers.entry(kind.clone()).or_default(),
        };
        match outcome {
            AnswerOutcome::Ok => counts.ok += 1,
            AnswerOutcome::Error => counts.error += 1,
            AnswerOutcome::BackedOff => counts.backed_off += 1,
        }
    }

    /// The answers taken while the trace recorded, by the kind of request answered
    /// (since this scheduler was made or restored: like the events, not saved in a
    /// snapshot). Taking the events leaves them.
    pub fn answers(&self) -> &BTreeMap<Kind, AnswerCounts> {
        &self.answers
    }

    /// Takes the answer counts, leaving them at zero: a runtime that goes on from a
    /// replayed journal counts the answers it takes from then on, not those replayed.
    pub fn take_answers(&mut self) -> BTreeMap<Kind, AnswerCounts> {
        std::mem::take(&mut self.answers)
    }

    /// Whether events are kept in memory.
    pub fn is_recording(&self) -> bool {
        self.record
    }

    /// The recorded events, oldest first.
    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    /// Takes the recorded events, leaving the trace empty (the hash and numbering go on).
    pub fn take_events(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.events)
    }

    /// A 64-bit FNV-1a hash of every recorded event's text, one per line: equal hashes
    /// mean equal traces, on any machine.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// The events as text, one per line, as `insta` snapshots show them.
    pub fn render(events: &[TraceEvent]) -> String {
        let mut out = String::new();
        for event in events {
            out.push_str(&event.to_string());
            out.push('\n');
        }
        out
    }
}

fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}
