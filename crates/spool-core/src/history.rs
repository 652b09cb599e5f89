//! A task's history: each of its polls (steps) with what it received, what it asked
//! for and how the poll ended, read back from a journal; and forks made from it.
//!
//! A history is made by replaying a journal that holds the task's submission
//! ([`TaskHistory::from_journal`]): the scheduler watches the task and notes each
//! poll. No executor is asked anything; the answers are the recorded ones.
//!
//! A fork ([`TaskHistory::fork`]) is a new task of the same type, agent and
//! priority, started from the task's submission (or another input) with a
//! [`Tape`] of the answers it received before the step it is forked at: its code
//! runs again, each of those requests is answered from the tape, and it goes on live
//! from there — with one answer edited, if asked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::TaskId;
use crate::journal::SavedSubmission;
use crate::kind::Kind;
use crate::request::RequestError;
use crate::saved::SavedResult;
use crate::state::TaskError;
use crate::tape::{Asked, ForkOrigin, Tape, TapeAnswer, payload_digest};
use crate::time::Time;

/// A request a step made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRequest {
    /// Its number within the task, from 1.
    pub number: u32,
    /// Its kind.
    pub kind: Kind,
    /// Its payload.
    pub payload: Value,
}

/// An answer a step received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepAnswer {
    /// The request it answers.
    pub request: u32,
    /// The answer: a value, or the executor's error.
    pub result: Result<Value, RequestError>,
}

/// How a step (one poll) ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum StepEnd {
    /// It yielded, to be polled again.
    Yielded,
    /// It waits for its requests, timer or children.
    Waiting,
    /// It returned a value: the task completed.
    Returned(Value),
    /// It failed, or panicked: the task ended with this error.
    Failed(TaskError),
}

/// One poll of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryStep {
    /// The step's number within the task, from 0.
    pub step: u32,
    /// When it ran.
    pub at: Time,
    /// Answers that had arrived for it (each delivered to the step after it
    /// arrived).
    pub answers: Vec<StepAnswer>,
    /// Children whose outcome had arrived.
    pub children_ended: Vec<TaskId>,
    /// The requests it made.
    pub requests: Vec<StepRequest>,
    /// Children it spawned.
    pub spawned: Vec<TaskId>,
    /// How the poll ended.
    pub end: StepEnd,
}

/// How a task's history ended, or that it had not when the journal ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum HistoryEnd {
    /// Still live at the end of the journal.
    Live,
    /// Completed with a value.
    Completed(Value),
    /// Ended with an error (failed, deadline, stalled...).
    Failed(TaskError),
    /// Canceled, for the reason given.
    Canceled(String),
}

/// A task's steps, read from a journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskHistory {
    /// The task.
    pub task: TaskId,
    /// Its type.
    pub type_name: String,
    /// Its agent.
    pub agent: String,
    /// When it was submitted.
    pub submitted_at: Time,
    /// What it was submitted with (for a fork, the input).
    pub input: Option<Value>,
    /// The task it was forked from, if it is a fork.
    pub origin: Option<ForkOrigin>,
    /// Its steps, in order.
    pub steps: Vec<HistoryStep>,
    /// How it ended.
    pub end: HistoryEnd,
    /// The submission, to fork from.
    #[serde(skip)]
    pub(crate) submission: Option<SavedSubmission>,
    /// The code changes whose new branch it took, which its forks take while they
    /// replay it.
    #[serde(skip)]
    pub(crate) patches: Vec<String>,
}

/// The change a fork makes to what its origin received.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Edit {
    /// Nothing changed: the requests answered at the fork's step and after go out
    /// live again (another sample of the model).
    None,
    /// Another answer to request `request`, which must have been made before the
    /// fork's step; requests made after it go out live.
    Answer {
        /// The request's number.
        request: u32,
        /// The answer to give it.
        result: Result<Value, RequestError>,
    },
    /// Another input: the task starts from this instead of what it was submitted
    /// with. Recorded answers are played back while its code asks what it asked; the
    /// first request that differs goes out live.
    Input(Value),
}

/// A fork, ready for [`Scheduler::fork`](crate::Scheduler::fork): the task to
/// submit, where it comes from, and the answers it starts with.
#[derive(Clone, Debug, PartialEq)]
pub struct Fork {
    /// The task, as a journal saves a submission.
    pub submission: SavedSubmission,
    /// The task and step it is forked from.
    pub origin: ForkOrigin,
    /// The recorded answers it reuses.
    pub tape: Tape,
    /// Another input to make the task from (through the registry, as a submission
    /// with that input is made), instead of its origin's submission.
    pub input: Option<Value>,
}

/// Why a history could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The journal does not hold the task's submission (a task submitted before the
    /// journal's start, or not at all).
    #[error(
        "task {task} was not submitted in this journal (its history starts before the oldest kept checkpoint, or it does not exist)"
    )]
    NotFound {
        /// The task.
        task: TaskId,
    },
    /// The task was spawned by another task: its history is its parent's to fork.
    #[error("task {task} was spawned by another task: fork the task that spawned it instead")]
    Spawned {
        /// The task.
        task: TaskId,
    },
    /// No journal was recorded to read it from (a run without a store or a
    /// recorded journal keeps no history).
    #[error("no journal was recorded, so no history is kept")]
    NotRecorded,
    /// The journal could not be replayed.
    #[error("the journal could not be replayed: {0}")]
    Replay(String),
}

/// Why a fork could not be made from a history.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ForkError {
    /// The step is past the task's history.
    #[error("task {task} has {steps} steps: there is no step {at}")]
    NoSuchStep {
        /// The task.
        task: TaskId,
        /// Its steps.
        steps: u32,
        /// The step asked for.
        at: u32,
    },
    /// The edited request was not made before the fork's step.
    #[error("task {task} had not made request {request} before step {at}")]
    NoSuchRequest {
        /// The task.
        task: TaskId,
        /// The request asked for.
        request: u32,
        /// The fork's step.
        at: u32,
    },
    /// The history has no submission to start from (a fork of a spawned child).
    #[error("task {task} has no submission in its history to start a fork from")]
    NoSubmission {
        /// The task.
        task: TaskId,
    },
}

impl TaskHistory {
    /// A fork of the task from step `at` (`0..=steps`; `steps` forks after the last
    /// step), with `edit`: the answers the task had received before step `at` are on
    /// its tape, the edit applied.
    ///
    /// # Errors
    /// A [`ForkError`] for a step past the history, an edited request not made before
    /// step `at`, or a history without its submission.
    pub fn fork(&self, at: u32, edit: Edit) -> Result<Fork, ForkError> {
        let steps = self.steps.len() as u32;
        if at > steps {
            return Err(ForkError::NoSuchStep {
                task: self.task,
                steps,
                at,
            });
        }
        let Some(submission) = &self.submission else {
            return Err(ForkError::NoSubmission { task: self.task });
        };
        let before = &self.steps[..at as usize];
        let asked = |number: u32| {
            before
                .iter()
                .flat_map(|s| &s.requests)
                .find(|r| r.number == number)
        };
        let mut tape = Tape::new(before.iter().flat_map(|s| &s.answers).map(|a| TapeAnswer {
            request: a.request,
            asked: asked(a.request).map(|r| Asked {
                kind: r.kind.clone(),
                digest: payload_digest(&r.payload),
            }),
            result: SavedResult::of(&a.result),
            tokens_used: None,
        }))
        .with_patches(self.patches.clone());
        let mut input = None;
        match edit {
            Edit::None => {}
            Edit::Answer { request, result } => {
                let Some(made) = asked(request) else {
                    return Err(ForkError::NoSuchRequest {
                        task: self.task,
                        request,
                        at,
                    });
                };
                tape.put(TapeAnswer {
                    request,
                    asked: Some(Asked {
                        kind: made.kind.clone(),
                        digest: payload_digest(&made.payload),
                    }),
                    result: SavedResult::of(&result),
                    tokens_used: None,
                });
            }
            Edit::Input(value) => input = Some(value),
        }
        Ok(Fork {
            submission: submission.clone().for_fork(),
            origin: ForkOrigin {
                task: self.task,
                step: at,
            },
            tape,
            input,
        })
    }
}
