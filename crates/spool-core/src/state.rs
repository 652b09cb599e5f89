//! Task states, the reasons a task waits, and how a task ends.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::admission::RejectReason;
use crate::id::TaskId;
use crate::kind::Kind;
use crate::request::RequestError;
use crate::time::Time;

/// Where a task is in its life. Exactly five states; the last two are terminal.
#[derive(Clone, Debug, PartialEq)]
pub enum TaskState {
    /// In the run queue, to be polled.
    Ready,
    /// Being polled (one task at a time).
    Running,
    /// Yielded and waiting for the reason given.
    Waiting(WaitReason),
    /// Finished with a value or an error.
    Completed(Outcome),
    /// Stopped from outside, by a deadline, or with its parent.
    Canceled(CancelReason),
}

impl TaskState {
    /// Whether the task has ended (completed or canceled).
    pub fn is_terminal(&self) -> bool {
        matches!(self, TaskState::Completed(_) | TaskState::Canceled(_))
    }

    /// Whether the task completed successfully.
    pub fn is_ok(&self) -> bool {
        matches!(self, TaskState::Completed(Ok(_)))
    }
}

impl fmt::Display for TaskState {
    /// `Ready`, `Running`, `Waiting(tool:ls)`, `Completed(ok: "value")`,
    /// `Completed(error: <message>)` or `Canceled(<reason>)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskState::Ready => f.write_str("Ready"),
            TaskState::Running => f.write_str("Running"),
            TaskState::Waiting(reason) => write!(f, "Waiting({reason})"),
            TaskState::Completed(Ok(value)) => write!(f, "Completed(ok: {value})"),
            TaskState::Completed(Err(error)) => write!(f, "Completed(error: {error})"),
            TaskState::Canceled(reason) => write!(f, "Canceled({reason})"),
        }
    }
}

/// How a task ended: its value, or the error it failed with.
pub type Outcome = Result<Value, TaskError>;

/// What a waiting task waits for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitReason {
    /// One request of this kind is in flight.
    Request(Kind),
    /// Several requests are in flight (a parallel fan-out).
    Requests(u32),
    /// A timer (`sleep`).
    Timer,
    /// Children it joined (this many) to end.
    Children(u32),
    /// A slot: a task concurrency limit or the start window holds it back.
    Slot,
    /// Tasks it depends on (this many) to complete successfully.
    Dependencies(u32),
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitReason::Request(kind) => write!(f, "{kind}"),
            WaitReason::Requests(n) => write!(f, "{n} requests"),
            WaitReason::Timer => f.write_str("timer"),
            WaitReason::Children(1) => f.write_str("1 child"),
            WaitReason::Children(n) => write!(f, "{n} children"),
            WaitReason::Slot => f.write_str("slot"),
            WaitReason::Dependencies(1) => f.write_str("1 dependency"),
            WaitReason::Dependencies(n) => write!(f, "{n} dependencies"),
        }
    }
}

/// Why a task was canceled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CancelReason {
    /// The embedder canceled it.
    Requested,
    /// The run shut down before it finished.
    Shutdown,
    /// Its parent ended (completed, failed or was canceled) while it was still live:
    /// a child never outlives its parent.
    ParentEnded(TaskId),
    /// A task it depends on failed, was canceled or was rejected, so it can never run
    /// (its dependents are canceled in turn).
    DependencyFailed(TaskId),
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelReason::Requested => f.write_str("canceled on request"),
            CancelReason::Shutdown => f.write_str("canceled at shutdown"),
            CancelReason::ParentEnded(parent) => {
                write!(f, "canceled with its parent, task {parent}")
            }
            CancelReason::DependencyFailed(dependency) => {
                write!(
                    f,
                    "canceled: its dependency, task {dependency}, did not complete"
                )
            }
        }
    }
}

/// Why a task failed. Every variant names what went wrong and, where it helps, the task.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum TaskError {
    /// The task reported its own failure.
    #[error("{message}")]
    Failed {
        /// The task's words.
        message: String,
    },
    /// A request failed and the task passed the error on.
    #[error("request {number} failed: {error}")]
    Request {
        /// The request's number within the task.
        number: u32,
        /// The executor's error.
        error: RequestError,
    },
    /// A request failed and an async task passed the error on with `?`.
    #[error("a request failed: {error}")]
    RequestFailed {
        /// The executor's error.
        error: RequestError,
    },
    /// The task's `poll` panicked; the loop went on without it.
    #[error("task {task} panicked: {message}")]
    Panicked {
        /// The task.
        task: TaskId,
        /// The panic message.
        message: String,
    },
    /// The task asked for a kind that no executor serves.
    #[error("task {task} made a `{kind}` request, and no executor serves that kind")]
    NoExecutor {
        /// The task.
        task: TaskId,
        /// The kind nobody serves.
        kind: Kind,
    },
    /// A child the task waited for was canceled.
    #[error("task {task} was canceled: {reason}")]
    Canceled {
        /// The canceled task.
        task: TaskId,
        /// Why.
        reason: CancelReason,
    },
    /// The task was not admitted.
    #[error("task {task} was rejected: {reason}")]
    Rejected {
        /// The task.
        task: TaskId,
        /// Why.
        reason: RejectReason,
    },
    /// The task's deadline passed before it finished; its requests in flight were
    /// canceled. Its text names no time: the deadline is a time of the scheduler's
    /// own clock, which no one can read; [`TaskError::describe`] says it in the words
    /// a person reads (how long after the submission, and the wall-clock time).
    #[error("task {task} missed its deadline {}", if *.while_queued { "while queued" } else { "while running" })]
    DeadlineExceeded {
        /// The task.
        task: TaskId,
        /// The deadline, in the scheduler's time.
        deadline: Time,
        /// Whether it had not started yet.
        while_queued: bool,
    },
    /// The task said it would wait, but nothing it waits for can wake it (no request
    /// in flight, no timer): waiting would hang forever.
    #[error("task {task} waits with nothing to wake it: {hint}")]
    Stalled {
        /// The task.
        task: TaskId,
        /// What the task probably did.
        hint: String,
    },
}

impl From<RequestError> for TaskError {
    fn from(error: RequestError) -> TaskError {
        TaskError::RequestFailed { error }
    }
}

impl TaskError {
    /// A task's own failure with a message.
    pub fn failed(message: impl Into<String>) -> TaskError {
        TaskError::Failed {
            message: message.into(),
        }
    }

    /// The error as a person reads it, for a task submitted at `submitted` (the
    /// scheduler's time): as its `Display`, but a missed deadline says when it was —
    /// the wall-clock time `wall` gives for the deadline (in UTC, to the second; left
    /// out when `wall` gives none) and how long after the submission it came:
    /// `task 7 missed its deadline (2026-11-26T22:41:05Z, 30 s after it was
    /// submitted) while running`. The runtime knows the wall clock
    /// (`Runtime::wall_time`); the core does not read one.
    ///
    /// # Example
    /// ```
    /// use std::time::Duration;
    /// use spool_core::{TaskError, TaskId, Time};
    ///
    /// let submitted = Time::ZERO + Duration::from_secs(100);
    /// let error = TaskError::DeadlineExceeded {
    ///     task: TaskId::from_raw(7),
    ///     deadline: submitted + Duration::from_secs(30),
    ///     while_queued: false,
    /// };
    /// let start: jiff::Timestamp = "2026-11-26T22:39:15Z".parse().unwrap();
    /// let wall = |t: Time| start.checked_add(t.as_duration()).ok();
    /// assert_eq!(
    ///     error.describe(submitted, wall),
    ///     "task 7 missed its deadline (2026-11-26T22:41:25Z, 30 s after it was submitted) while running"
    /// );
    /// assert_eq!(
    ///     error.describe(submitted, |_| None),
    ///     "task 7 missed its deadline (30 s after it was submitted) while running"
    /// );
    /// ```
    pub fn describe(
        &self,
        submitted: Time,
        wall: impl Fn(Time) -> Option<jiff::Timestamp>,
    ) -> String {
        let TaskError::DeadlineExceeded {
            task,
            deadline,
            while_queued,
        } = self
        else {
            return self.to_string();
        };
        let after = human_duration(deadline.saturating_since(submitted));
        let when = match wall(*deadline).and_then(|t| t.round(jiff::Unit::Second).ok()) {
            Some(at) => format!("{at}, {after} after it was submitted"),
            None => format!("{after} after it was submitted"),
        };
        let how = if *while_queued {
            "while queued"
        } else {
            "while running"
        };
        format!("task {task} missed its deadline ({when}) {how}")
    }
}

/// A duration as a person reads it: `250 ms` under a second, else seconds with at
/// most three decimals and no trailing zeros (`30 s`, `1.5 s`).
fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let (secs, rest) = (ms / 1_000, ms % 1_000);
    if rest == 0 {
        return format!("{secs} s");
    }
    let decimals = format!("{rest:03}");
    format!("{secs}.{} s", decimals.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_milliseconds_below_a_second_and_seconds_above() {
        let text = |ms| human_duration(Duration::from_millis(ms));
        assert_eq!(
            [
                text(0),
                text(250),
                text(1_000),
                text(1_500),
                text(30_000),
                text(61_005)
            ],
            ["0 ms", "250 ms", "1 s", "1.5 s", "30 s", "61.005 s"]
        );
    }

    #[test]
    fn a_missed_deadline_reads_in_wall_clock_time_and_from_the_submission() {
        let submitted = Time::ZERO + Duration::from_millis(278_798);
        let error = TaskError::DeadlineExceeded {
            task: TaskId::from_raw(3),
            deadline: submitted + Duration::from_millis(1_500),
            while_queued: true,
        };
        let start: jiff::Timestamp = "2026-11-26T22:00:00Z".parse().unwrap_or_default();
        let wall = |t: Time| start.checked_add(t.as_duration()).ok();
        assert_eq!(
            error.describe(submitted, wall),
            "task 3 missed its deadline (2026-11-26T22:04:40Z, 1.5 s after it was submitted) while queued"
        );
        assert_eq!(error.to_string(), "task 3 missed its deadline while queued");
        let other = TaskError::failed("no");
        assert_eq!(other.describe(submitted, wall), "no");
    }
}
