//! Task states, the reasons a task waits, and how a task ends.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Kind, RejectReason, RequestError, TaskId, Time};

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
    /// canceled.
    #[error("task {task} missed its deadline at {deadline} {}", if *.while_queued { "while queued" } else { "while running" })]
    DeadlineExceeded {
        /// The task.
        task: TaskId,
        /// The deadline.
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
}
