//! Journals: every input the scheduler took, in order, with its time — so a run can be
//! replayed exactly, and a store can recover a scheduler as its last snapshot plus the
//! journal since.
//!
//! A journal starts from a snapshot (of a fresh scheduler, or the last checkpoint) and
//! lists what happened after it: submissions, answers, unroutable requests,
//! cancellations, deadlines set, results forgotten, requests sent again, timeouts, the
//! driver's steps, and, if the driver asks for them, the trace events the run produced,
//! which a replay compares against to find the first divergence.
//!
//! # Who writes it
//! The scheduler records its own journal
//! ([`Scheduler::record_journal`](crate::Scheduler::record_journal),
//! [`Scheduler::poll_journal`](crate::Scheduler::poll_journal)): each input method notes
//! what it took in, so a driver (the runtime, `TestScheduler`, a server) only forwards
//! the entries to its [`JournalSink`](crate::JournalSink) and never writes one by hand.
//! Trace events ([`JournalEntry::Event`]) are the exception: they are outputs, not
//! inputs, so a driver appends them if it wants a journal that checks its own replay.
//!
//! # Why steps are in it, and drains are not
//! `step` polls one task; how many tasks a driver polls between two answers (the
//! runtime polls at most `flush_at` before it routes, a test one per `step`) decides
//! which task sees which answer first, so the scheduler journals its steps too:
//! consecutive `step` calls at one time become one [`JournalEntry::Steps`]. A call that
//! polls nothing and does not move the clock changes nothing and is left out.
//!
//! Taking requests and cancel signals out (`poll_request`, `poll_cancel`) is not an
//! input: a request is out — sorted to its gate, let go by it, counted, owed a cancel
//! signal if its task ends — from the end of the input that let it go, whenever the
//! driver takes it. So a journal holds no entry of the driver's order, and one
//! recorded by any driver replays in any other.
//!
//! The entries `Route` and `Taken` of earlier journals (the driver took requests out)
//! are kept so that they still read and replay; they are no longer written. `poll_timeout` is a
//! question (it only drops stale timer entries), so it is not journaled.

use serde::{Deserialize, Serialize};

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::fingerprint::Fingerprint;
use crate::id::{RequestKey, TaskId};
use crate::priority::Priority;
use crate::registry::TaskRegistry;
use crate::request::Response;
use crate::saved::{SavedResult, SavedTask};
use crate::schedule::{ScheduleDef, SchedulePatch};
use crate::snapshot::SnapshotError;
use crate::snapshot::codec::{self, DecodeError};
use crate::state::CancelReason;
use crate::tape::{ForkOrigin, Tape};
use crate::task::{Deadline, Dep, Extra, NewTask};
use crate::time::Time;
use crate::trace::TraceEvent;

/// The first bytes of an encoded journal.
pub const JOURNAL_MAGIC: [u8; 8] = *b"SPOOLJNL";

/// A task as submitted, saved so a replay can submit it again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedSubmission {
    type_name: String,
    body: Vec<u8>,
    /// Whether the body is an async task's replay log.
    replay: bool,
    agent: Option<String>,
    priority: Option<Priority>,
    deps: Vec<SavedDep>,
    parent: Option<TaskId>,
    deadline: Option<SavedDeadline>,
    key: Option<String>,
    iteration: u32,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum SavedDep {
    Task(TaskId),
    Batch(usize),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum SavedDeadline {
    After(std::time::Duration),
    At(Time),
}

impl NewTask {
    /// The task as a journal keeps it: its body saved with
    /// [`AgentTask::save`](crate::AgentTask::save), and how it is to be scheduled.
    ///
    /// # Errors
    /// A [`SaveError`] naming the task's type and what its body's `save` said, if it
    /// cannot be saved.
    pub fn save(&self) -> Result<SavedSubmission, SaveError> {
        let saved = self.body.save().map_err(|reason| SaveError {
            type_name: self.body.type_name().to_owned(),
            reason: reason.to_string(),
        })?;
        let (body, replay) = match saved {
            SavedTask::State(body) => (body, false),
            SavedTask::Replay(body) => (body, true),
        };
        let extra = self.extra.as_deref();
        Ok(SavedSubmission {
            type_name: self.body.type_name().to_owned(),
            body,
            replay,
            agent: self.agent.as_ref().map(|a| a.to_string()),
            priority: self.priority,
            deps: extra
                .map(|e| {
                    e.deps
                        .iter()
                        .map(|d| match d {
                            Dep::Task(id) => SavedDep::Task(*id),
                            Dep::Batch(i) => SavedDep::Batch(*i),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            parent: extra.and_then(|e| e.parent),
            deadline: extra.and_then(|e| e.deadline).map(|d| match d {
                Deadline::After(within) => SavedDeadline::After(within),
                Deadline::At(at) => SavedDeadline::At(at),
            }),
            key: extra.and_then(|e| e.key.clone()),
            iteration: extra.map_or(0, |e| e.iteration),
        })
    }
}

impl SavedSubmission {
    /// The task again, its body rebuilt through `registry`.
    ///
    /// # Errors
    /// [`RebuildError::UnknownType`] if the type is not registered,
    /// [`RebuildError::Refused`] if its decoder refused the body.
    pub fn restore(&self, registry: &TaskRegistry) -> Result<NewTask, RebuildError> {
        let decoded = if self.replay {
            registry
                .rebuild_async(&self.type_name, TaskId(0), &self.body)
                .map(|r| r.map_err(|e| e.to_string()))
        } else {
            registry.decode(&self.type_name, &self.body)
        };
        let body = match decoded {
            None => {
                return Err(RebuildError::UnknownType {
                    type_name: self.type_name.clone(),
                });
            }
            Some(body) => body.map_err(|reason| RebuildError::Refused {
                type_name: self.type_name.clone(),
                reason: reason.to_string(),
            })?,
        };
        let mut task = NewTask::boxed(body);
        task.agent = self.agent.clone().map(Into::into);
        task.priority = self.priority;
        let plain = self.deps.is_empty()
            && self.parent.is_none()
            && self.deadline.is_none()
            && self.key.is_none()
            && self.iteration == 0;
        if !plain {
            task.extra = Some(Box::new(Extra {
                deps: self
                    .deps
                    .iter()
                    .map(|d| match d {
                        SavedDep::Task(id) => Dep::Task(*id),
                        SavedDep::Batch(i) => Dep::Batch(*i),
                    })
                    .collect(),
                parent: self.parent,
                deadline: self.deadline.map(|d| match d {
                    SavedDeadline::After(within) => Deadline::After(within),
                    SavedDeadline::At(at) => Deadline::At(at),
                }),
                key: self.key.clone(),
                fingerprint: None,
                iteration: self.iteration,
            }));
        }
        Ok(task)
    }

    /// The task's type.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The input the task was submitted with, as JSON: an async task's input, or an
    /// explicit task's saved state when it is JSON (`None` for a binary state).
    pub fn input(&self) -> Option<serde_json::Value> {
        if self.replay {
            crate::async_task::log_input(&self.body)
        } else {
            serde_json::from_slice(&self.body).ok()
        }
    }

    /// The submission a fork makes of it: the same type, body, agent and priority, on
    /// its own — no dependencies, parent, deadline or idempotency key (those belong to
    /// the original run).
    pub(crate) fn for_fork(self) -> SavedSubmission {
        SavedSubmission {
            deps: Vec::new(),
            parent: None,
            deadline: None,
            key: None,
            iteration: 0,
            ..self
        }
    }

    /// The task's agent, if it has one.
    pub fn agent(&self) -> Option<&str> {
        self.agent.as_deref()
    }
}

/// One thing that happened to a scheduler, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum JournalEntry {
    /// A task was submitted and got the id `id`.
    Submit {
        /// When.
        at: Time,
        /// The id it got.
        id: TaskId,
        /// The task.
        task: SavedSubmission,
    },
    /// Tasks were submitted together (`submit_all`); the first got `first`.
    SubmitAll {
        /// When.
        at: Time,
        /// The id of the first.
        first: TaskId,
        /// The tasks.
        tasks: Vec<SavedSubmission>,
    },
    /// An answer arrived.
    Answer {
        /// When.
        at: Time,
        /// The request it answers.
        key: RequestKey,
        /// The result.
        result: SavedResult,
        /// Tokens the provider reported.
        tokens_used: Option<u32>,
    },
    /// No executor served a request.
    Unroutable {
        /// When.
        at: Time,
        /// The request.
        key: RequestKey,
    },
    /// A task was canceled from outside.
    Cancel {
        /// When.
        at: Time,
        /// The task.
        task: TaskId,
        /// Why.
        reason: CancelReason,
    },
    /// The driver called `handle_timeout`.
    Timeout {
        /// The time it passed.
        at: Time,
    },
    /// The driver called `step(at)` this many times in a row; a replay calls it as many
    /// times, stopping at the first that polls nothing (the last of a run may be one
    /// that only moved the clock).
    Steps {
        /// The time it passed.
        at: Time,
        /// How many times it was called.
        count: u32,
    },
    /// Written by drivers before the scheduler recorded its own journal: the driver
    /// took every request and cancel signal out (`poll_request`, `poll_cancel`) to
    /// route them. No longer written; replayed as it was.
    Route,
    /// A trace event the recorded run produced: what a replay must produce too.
    Event(TraceEvent),
    /// Written by drivers of an earlier version: the driver called `poll_request`
    /// `requests` times and took `cancels` cancel signals, with no other input in
    /// between. No longer written (taking is not an input); replayed as it was.
    Taken {
        /// Calls of `poll_request` (those that returned `None` included).
        requests: u32,
        /// Cancel signals taken.
        cancels: u32,
    },
    /// A task's deadline was set (`set_deadline`).
    SetDeadline {
        /// The task.
        task: TaskId,
        /// Its new deadline.
        deadline: Time,
    },
    /// An ended task was forgotten (`forget`).
    Forget {
        /// The task.
        task: TaskId,
    },
    /// Every request that was with an executor was put back to go again
    /// (`resend_in_flight`).
    Resend,
    /// A schedule operation, or the wall clock (see [`ScheduleOp`]).
    Schedule {
        /// When.
        at: Time,
        /// What.
        op: ScheduleOp,
    },
    /// The [fingerprints](crate::NewTask::fingerprint) of the submission in the next
    /// entry (a `Submit`, or a `SubmitAll`'s tasks in order; `None` for a task without
    /// one): written before it when any of its tasks has one, so that a replay keeps
    /// each key with its fingerprint.
    Fingerprints(Vec<Option<Fingerprint>>),
    /// A fork was submitted (see [`Scheduler::fork`](crate::Scheduler::fork)) and got
    /// the id `id`.
    Fork {
        /// When.
        at: Time,
        /// The id it got.
        id: TaskId,
        /// The task.
        task: SavedSubmission,
        /// The task and step it was forked from.
        origin: ForkOrigin,
        /// The recorded answers it reuses.
        tape: Tape,
    },
    /// An answer arrived, with the digest of the request it answers (what an answer is
    /// journaled as; [`Answer`](JournalEntry::Answer) is what journals without the
    /// digest hold). A check against recorded answers compares the digest with the
    /// request the code makes now.
    Answered {
        /// When.
        at: Time,
        /// The request it answers.
        key: RequestKey,
        /// [`request_digest`](crate::request_digest) of the request it answers, if
        /// the scheduler still held the request.
        asked: Option<u64>,
        /// The result.
        result: SavedResult,
        /// Tokens the provider reported.
        tokens_used: Option<u32>,
    },
    /// Task `task` took the new branch of the code change `name`
    /// ([`TaskContext::patched`](crate::TaskContext::patched)): an output, like
    /// `Event`; a replay gives the task the same branch.
    Patched {
        /// The task.
        task: TaskId,
        /// The change's name.
        name: String,
    },
    /// Task `task` ended (an output, like `Event`, written after the entry of the
    /// input that ended it): what a check against today's code compares its ending
    /// with.
    Ended {
        /// The task.
        task: TaskId,
        /// A digest of how it ended (see [`ending_digest`](crate::ending_digest)).
        digest: u64,
        /// How it ended, in words, cut to 120 characters.
        preview: String,
    },
    /// What the answer in the next entry used, as its provider reported it (written
    /// before the answer when it carries a [`Usage`](crate::Usage)): a replay gives the
    /// answer the same usage, so budgets count the same spend.
    Usage {
        /// The request the answer is to.
        key: RequestKey,
        /// What it used.
        usage: crate::budget::Usage,
    },
}

/// A schedule operation as the journal keeps it: each is an input, replayed as given
/// (a schedule's fires are not entries: they follow from the clock, as sleeps do).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ScheduleOp {
    /// [`Scheduler::set_wall_clock`](crate::Scheduler::set_wall_clock).
    WallClock(jiff::Timestamp),
    /// [`Scheduler::put_schedule`](crate::Scheduler::put_schedule).
    Put(ScheduleDef),
    /// [`Scheduler::patch_schedule`](crate::Scheduler::patch_schedule) (pause and resume
    /// are patches).
    Patch {
        /// The schedule.
        slug: String,
        /// The change.
        patch: SchedulePatch,
    },
    /// [`Scheduler::delete_schedule`](crate::Scheduler::delete_schedule).
    Delete(String),
    /// [`Scheduler::trigger_schedule`](crate::Scheduler::trigger_schedule).
    Trigger(String),
    /// [`Scheduler::delete_session`](crate::Scheduler::delete_session).
    DeleteSession(String),
}

impl JournalEntry {
    /// The entry alone as bytes (postcard, no envelope): what a store writes per entry.
    ///
    /// # Errors
    /// [`JournalError::Encode`] if serde cannot encode it (a bug).
    pub fn to_bytes(&self) -> Result<Vec<u8>, JournalError> {
        postcard::to_allocvec(self).map_err(|e| JournalError::Encode(e.to_string()))
    }

    /// An entry from [`to_bytes`](JournalEntry::to_bytes)'s output.
    ///
    /// # Errors
    /// [`DecodeError::Malformed`] for bytes that are not an entry.
    pub fn from_bytes(bytes: &[u8]) -> Result<JournalEntry, DecodeError> {
        crate::bounded::from_postcard(bytes).map_err(|e| DecodeError::Malformed(e.to_string()))
    }

    /// The entry for an answer.
    pub fn answer(at: Time, response: &Response) -> JournalEntry {
        JournalEntry::Answer {
            at,
            key: response.key,
            result: SavedResult::of(&response.result),
            tokens_used: response.tokens_used,
        }
    }
}

/// A recorded run: the snapshot it starts from, then what happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    /// The encoded snapshot the run starts from.
    pub start: Vec<u8>,
    /// What happened, in order.
    pub entries: Vec<JournalEntry>,
}

impl Journal {
    /// The journal as bytes, in the snapshot envelope with its own magic.
    ///
    /// # Errors
    /// [`JournalError::Encode`] if serde cannot encode an
    /// entry (a bug).
    pub fn encode(&self) -> Result<Vec<u8>, JournalError> {
        // Usage entries are new in format version 6: a journal without them is labeled
        // version 5, as before.
        let newest = self
            .entries
            .iter()
            .any(|e| matches!(e, JournalEntry::Usage { .. }));
        let mut bytes = codec::encode(self, newest).map_err(JournalError::Encode)?;
        bytes[..8].copy_from_slice(&JOURNAL_MAGIC);
        Ok(bytes)
    }

    /// Reads a journal, checking it as a snapshot is checked.
    ///
    /// # Errors
    /// A [`DecodeError`].
    pub fn decode(bytes: &[u8]) -> Result<Journal, DecodeError> {
        if bytes.len() >= 8 && bytes[..8] == JOURNAL_MAGIC {
            return codec::decode_with_magic(bytes, &JOURNAL_MAGIC);
        }
        Err(DecodeError::BadMagic)
    }
}

/// Why a task could not be saved for a journal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error("a task of type `{type_name}` cannot be saved: {reason}")]
pub struct SaveError {
    /// The task's type.
    pub type_name: String,
    /// What its [`AgentTask::save`](crate::AgentTask::save) said.
    pub reason: String,
}

/// Why a saved submission could not be made into a task again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RebuildError {
    /// The registry has no decoder (or async constructor) for the task's type:
    /// register it with the [`TaskRegistry`] before replaying.
    #[error("the registry does not know the type `{type_name}`")]
    UnknownType {
        /// The task's type.
        type_name: String,
    },
    /// The registered decoder refused the saved body (saved by another version of
    /// the type, or damaged), or an async task's replay of it failed.
    #[error("`{type_name}` could not be rebuilt from its saved state: {reason}")]
    Refused {
        /// The task's type.
        type_name: String,
        /// What the decoder (or the replay) said.
        reason: String,
    },
}

/// Why a journal could not be written (or encoded).
///
/// A sink's own error (a store's) is kept as the [`source`](StdError::source), so a
/// caller can downcast it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum JournalError {
    /// An entry or checkpoint came before the journal's starting snapshot: the driver
    /// must call [`JournalSink::start`](crate::JournalSink::start) first.
    NotStarted,
    /// The scheduler could not be snapshotted for the journal's start or a checkpoint
    /// (a live task that cannot be saved, or a snapshot that cannot be encoded).
    Snapshot(SnapshotError),
    /// The journal (or one entry) could not be encoded: a value serde cannot write.
    Encode(String),
    /// The sink's storage failed; the error says how (a store's own error: damaged,
    /// full, read-only).
    Sink(Arc<dyn StdError + Send + Sync>),
}

impl JournalError {
    /// A sink's own error, kept as the source.
    pub fn sink(error: impl StdError + Send + Sync + 'static) -> JournalError {
        JournalError::Sink(Arc::new(error))
    }
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::NotStarted => {
                f.write_str("an entry was recorded before the journal started (call `start` first)")
            }
            JournalError::Snapshot(error) => {
                write!(
                    f,
                    "the scheduler could not be snapshotted for the journal: {error}"
                )
            }
            JournalError::Encode(message) => {
                write!(f, "the journal could not be encoded: {message}")
            }
            JournalError::Sink(error) => write!(f, "the journal's sink failed: {error}"),
        }
    }
}

impl StdError for JournalError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            JournalError::Snapshot(error) => Some(error),
            // The sink's error itself, not the `Arc` around it, so that it downcasts.
            JournalError::Sink(error) => Some(&**error),
            JournalError::NotStarted | JournalError::Encode(_) => None,
        }
    }
}

impl From<SnapshotError> for JournalError {
    fn from(error: SnapshotError) -> JournalError {
        JournalError::Snapshot(error)
    }
}

/// Two journal errors are equal when they are the same variant saying the same thing
/// (a sink's error is compared by its message: it need not be comparable itself).
impl PartialEq for JournalError {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (JournalError::NotStarted, JournalError::NotStarted) => true,
            (JournalError::Snapshot(a), JournalError::Snapshot(b)) => a == b,
            (JournalError::Encode(a), JournalError::Encode(b)) => a == b,
            (JournalError::Sink(a), JournalError::Sink(b)) => a.to_string() == b.to_string(),
            _ => false,
        }
    }
}
