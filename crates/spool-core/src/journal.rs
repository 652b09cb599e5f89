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
//! ([`Scheduler::record_journal`], [`Scheduler::poll_journal`]): each input method notes
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

use crate::saved::{SavedResult, SavedTask};
use crate::snapshot::codec;
use crate::task::{Deadline, Dep, Extra};
use crate::{
    CancelReason, DecodeError, NewTask, Priority, RequestKey, Response, Scheduler, TaskId,
    TaskRegistry, Time, TraceEvent,
};

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
    Fingerprints(Vec<Option<crate::Fingerprint>>),
}

/// A schedule operation as the journal keeps it: each is an input, replayed as given
/// (a schedule's fires are not entries: they follow from the clock, as sleeps do).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ScheduleOp {
    /// [`Scheduler::set_wall_clock`].
    WallClock(jiff::Timestamp),
    /// [`Scheduler::put_schedule`].
    Put(crate::ScheduleDef),
    /// [`Scheduler::patch_schedule`] (pause and resume are patches).
    Patch {
        /// The schedule.
        slug: String,
        /// The change.
        patch: crate::SchedulePatch,
    },
    /// [`Scheduler::delete_schedule`].
    Delete(String),
    /// [`Scheduler::trigger_schedule`].
    Trigger(String),
    /// [`Scheduler::delete_session`].
    DeleteSession(String),
}

impl JournalEntry {
    /// The entry alone as bytes (postcard, no envelope): what a store writes per entry.
    ///
    /// # Errors
    /// [`JournalError::Encode`](crate::JournalError::Encode) if serde cannot encode it (a bug).
    pub fn to_bytes(&self) -> Result<Vec<u8>, crate::JournalError> {
        postcard::to_allocvec(self).map_err(|e| crate::JournalError::Encode(e.to_string()))
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
    /// A journal starting from `scheduler` as it is now.
    ///
    /// # Errors
    /// As [`Scheduler::snapshot`].
    pub fn starting_from(scheduler: &Scheduler) -> Result<Journal, crate::SnapshotError> {
        Ok(Journal {
            start: scheduler.snapshot()?.encode()?,
            entries: Vec::new(),
        })
    }

    /// The journal as bytes, in the snapshot envelope with its own magic.
    ///
    /// # Errors
    /// [`JournalError::Encode`](crate::JournalError::Encode) if serde cannot encode an
    /// entry (a bug).
    pub fn encode(&self) -> Result<Vec<u8>, crate::JournalError> {
        let mut bytes = codec::encode(self).map_err(crate::JournalError::Encode)?;
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

/// Where a replay first did something other than the recorded run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Divergence {
    /// The trace event's number (`#seq`).
    pub event: u64,
    /// What the recorded run did (`None`: it had no such event).
    pub expected: Option<String>,
    /// What the replay did (`None`: it produced no such event).
    pub got: Option<String>,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |e: &Option<String>| e.clone().unwrap_or_else(|| "(nothing)".to_owned());
        write!(
            f,
            "the replay diverges at event #{}:\n  expected: {}\n  got:      {}",
            self.event,
            show(&self.expected),
            show(&self.got)
        )
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

/// Why a journal entry could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The starting snapshot could not be read or restored.
    #[error("the journal's starting snapshot: {0}")]
    Start(String),
    /// A submission could not be rebuilt.
    #[error("entry {entry}: the submitted task could not be rebuilt: {reason}")]
    Submission {
        /// The entry's index.
        entry: usize,
        /// Why.
        reason: String,
    },
    /// A submission got another id than it did in the recorded run.
    #[error("entry {entry}: the task got id {got}, not {expected} as recorded")]
    Id {
        /// The entry's index.
        entry: usize,
        /// The recorded id.
        expected: TaskId,
        /// The id it got.
        got: TaskId,
    },
    /// An answer in the journal is not valid.
    #[error("entry {entry}: {reason}")]
    Entry {
        /// The entry's index.
        entry: usize,
        /// What was wrong.
        reason: String,
    },
}

impl Scheduler {
    /// Applies one journal entry, as the scheduler that recorded it took it. `Event` entries
    /// are not inputs and change nothing. `entry_index` names the entry in errors.
    ///
    /// # Errors
    /// A [`ReplayError`] for a submission that cannot be rebuilt or gets another id,
    /// or an answer that is not valid.
    pub fn apply(
        &mut self,
        entry_index: usize,
        entry: &JournalEntry,
        registry: &TaskRegistry,
    ) -> Result<(), ReplayError> {
        match entry {
            JournalEntry::Submit { at, id, task } => {
                let mut task = task
                    .restore(registry)
                    .map_err(|error| ReplayError::Submission {
                        entry: entry_index,
                        reason: error.to_string(),
                    })?;
                if let Some(Some(fingerprint)) =
                    self.take_announced_fingerprints().into_iter().next()
                {
                    task = task.fingerprint(fingerprint);
                }
                let got = self
                    .submit(*at, task)
                    .map_err(|e| ReplayError::Submission {
                        entry: entry_index,
                        reason: e.to_string(),
                    })?
                    .id;
                if got != *id {
                    return Err(ReplayError::Id {
                        entry: entry_index,
                        expected: *id,
                        got,
                    });
                }
            }
            JournalEntry::SubmitAll { at, first, tasks } => {
                let mut rebuilt = Vec::with_capacity(tasks.len());
                let mut fingerprints = self.take_announced_fingerprints().into_iter();
                for task in tasks {
                    let mut task =
                        task.restore(registry)
                            .map_err(|error| ReplayError::Submission {
                                entry: entry_index,
                                reason: error.to_string(),
                            })?;
                    if let Some(Some(fingerprint)) = fingerprints.next() {
                        task = task.fingerprint(fingerprint);
                    }
                    rebuilt.push(task);
                }
                let submitted =
                    self.submit_all(*at, rebuilt)
                        .map_err(|e| ReplayError::Submission {
                            entry: entry_index,
                            reason: e.to_string(),
                        })?;
                if let Some(got) = submitted.first().map(|s| s.id) {
                    if got != *first {
                        return Err(ReplayError::Id {
                            entry: entry_index,
                            expected: *first,
                            got,
                        });
                    }
                }
            }
            JournalEntry::Answer {
                at,
                key,
                result,
                tokens_used,
            } => {
                let result = result.to_result().map_err(|reason| ReplayError::Entry {
                    entry: entry_index,
                    reason: reason.to_string(),
                })?;
                let mut response = Response::new(*key, result);
                response.tokens_used = *tokens_used;
                let _ = self.handle_response(*at, response);
            }
            JournalEntry::Unroutable { at, key } => {
                let _ = self.handle_unroutable(*at, *key);
            }
            JournalEntry::Cancel { at, task, reason } => {
                let _ = self.cancel(*at, *task, reason.clone());
            }
            JournalEntry::Timeout { at } => self.handle_timeout(*at),
            JournalEntry::Steps { at, count } => {
                for _ in 0..*count {
                    if self.step(*at).is_none() {
                        break;
                    }
                }
            }
            JournalEntry::Route => {
                while self.poll_request().is_some() {}
                while self.poll_cancel().is_some() {}
            }
            JournalEntry::Taken { requests, cancels } => {
                for _ in 0..*requests {
                    let _ = self.poll_request();
                }
                for _ in 0..*cancels {
                    let _ = self.poll_cancel();
                }
            }
            JournalEntry::SetDeadline { task, deadline } => {
                let _ = self.set_deadline(*task, *deadline);
            }
            JournalEntry::Forget { task } => {
                let _ = self.forget(*task);
            }
            JournalEntry::Resend => {
                let _ = self.resend_in_flight();
            }
            JournalEntry::Schedule { at, op } => self.apply_schedule_op(*at, op),
            JournalEntry::Fingerprints(fingerprints) => {
                self.announce_fingerprints(fingerprints.clone());
            }
            JournalEntry::Event(_) => {}
        }
        Ok(())
    }

    /// Replays `journal`: restores its start, applies every entry, and compares the
    /// trace it produces with the recorded events, if the journal has them. The
    /// replayed scheduler records its trace.
    ///
    /// # Errors
    /// A [`ReplayError`] if the start cannot be restored or an entry cannot be applied.
    pub fn replay(journal: &Journal, registry: &TaskRegistry) -> Result<Replay, ReplayError> {
        Scheduler::replay_with(journal, registry, |_| {})
    }

    /// As [`replay`](Scheduler::replay), with `setup` called on the restored start
    /// before any entry is applied: to give it what a snapshot does not keep, as a
    /// [`SessionTrimmer`](crate::SessionTrimmer)
    /// ([`set_session_trimmer`](Scheduler::set_session_trimmer)).
    ///
    /// # Errors
    /// As [`replay`](Scheduler::replay).
    pub fn replay_with(
        journal: &Journal,
        registry: &TaskRegistry,
        setup: impl FnOnce(&mut Scheduler),
    ) -> Result<Replay, ReplayError> {
        let start = crate::Snapshot::decode(&journal.start)
            .map_err(|e| ReplayError::Start(e.to_string()))?;
        let mut scheduler =
            Scheduler::restore(&start, registry).map_err(|e| ReplayError::Start(e.to_string()))?;
        setup(&mut scheduler);
        scheduler.record_trace(true);
        let mut expected: Vec<&TraceEvent> = Vec::new();
        for (i, entry) in journal.entries.iter().enumerate() {
            if let JournalEntry::Event(event) = entry {
                expected.push(event);
            }
            scheduler.apply(i, entry, registry)?;
        }
        let got = scheduler.trace().events();
        let recorded = !expected.is_empty();
        let mut divergence = None;
        if recorded {
            let n = expected.len().max(got.len());
            for i in 0..n {
                let e = expected.get(i).map(|e| e.to_string());
                let g = got.get(i).map(|e| e.to_string());
                if e != g {
                    let event = expected
                        .get(i)
                        .map(|e| e.seq)
                        .or_else(|| got.get(i).map(|e| e.seq))
                        .unwrap_or_default();
                    divergence = Some(Divergence {
                        event,
                        expected: e,
                        got: g,
                    });
                    break;
                }
            }
        }
        Ok(Replay {
            trace_hash: scheduler.trace().hash(),
            events: got.len() as u64,
            divergence,
            scheduler,
        })
    }
}

/// What a replay gives.
#[derive(Debug)]
#[non_exhaustive]
pub struct Replay {
    /// The hash of the trace (numbering and hash go on from the starting snapshot).
    pub trace_hash: u64,
    /// Events the replay produced.
    pub events: u64,
    /// The first event that differs from the recorded run's, if the journal has its
    /// events and one differs.
    pub divergence: Option<Divergence>,
    /// The scheduler at the end of the journal.
    pub scheduler: Scheduler,
}
