//! Replaying a journal: a scheduler takes each recorded input again, as the
//! scheduler that recorded it took it, and the trace it produces is compared with the
//! recorded events to find the first divergence.

use super::Scheduler;
use crate::id::RequestKey;
use crate::id::TaskId;
use crate::journal::{Journal, JournalEntry, SavedSubmission};
use crate::registry::TaskRegistry;
use crate::replaying::ReplayGuard;
use crate::request::Response;
use crate::saved::SavedResult;
use crate::snapshot::{Snapshot, SnapshotError};
use crate::task::NewTask;
use crate::time::Time;
use crate::trace::TraceEvent;

impl Journal {
    /// A journal starting from `scheduler` as it is now.
    ///
    /// # Errors
    /// As [`Scheduler::snapshot`].
    pub fn starting_from(scheduler: &Scheduler) -> Result<Journal, SnapshotError> {
        Ok(Journal {
            start: scheduler.snapshot()?.encode()?,
            entries: Vec::new(),
        })
    }
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
                self.replay_submit(entry_index, *at, *id, task, registry)?;
            }
            JournalEntry::SubmitAll { at, first, tasks } => {
                self.replay_submit_all(entry_index, *at, *first, tasks, registry)?;
            }
            JournalEntry::Answer {
                at,
                key,
                result,
                tokens_used,
            } => self.replay_answer(entry_index, *at, *key, result, *tokens_used)?,
            JournalEntry::Unroutable { at, key } => {
                let _ = self.handle_unroutable(*at, *key);
            }
            JournalEntry::Cancel { at, task, reason } => {
                let _ = self.cancel(*at, *task, reason.clone());
            }
            JournalEntry::Timeout { at } => self.handle_timeout(*at),
            JournalEntry::Steps { at, count } => self.replay_steps(*at, *count),
            JournalEntry::Route => self.replay_route(),
            JournalEntry::Taken { requests, cancels } => self.replay_taken(*requests, *cancels),
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
            JournalEntry::Answered {
                at,
                key,
                result,
                tokens_used,
                ..
            } => self.replay_answer(entry_index, *at, *key, result, *tokens_used)?,
            JournalEntry::Fork {
                at,
                id,
                task,
                origin,
                tape,
            } => {
                let fork = crate::history::Fork {
                    submission: task.clone(),
                    origin: *origin,
                    tape: tape.clone(),
                    input: None,
                };
                let got = self
                    .fork(*at, fork, registry)
                    .map_err(|e| ReplayError::Submission {
                        entry: entry_index,
                        reason: e.to_string(),
                    })?
                    .id;
                check_id(entry_index, *id, got)?;
            }
            JournalEntry::Event(_) | JournalEntry::Patched { .. } | JournalEntry::Ended { .. } => {}
            JournalEntry::Usage { key, usage } => self.budgets.announce_usage(*key, usage),
        }
        Ok(())
    }

    /// A `Submit` entry: the task rebuilt through `registry`, given the fingerprint
    /// announced for it, submitted at `at`; it must get the recorded `id`.
    fn replay_submit(
        &mut self,
        entry_index: usize,
        at: Time,
        id: TaskId,
        task: &SavedSubmission,
        registry: &TaskRegistry,
    ) -> Result<(), ReplayError> {
        let mut task = rebuild(entry_index, task, registry)?;
        if let Some(Some(fingerprint)) = self.take_announced_fingerprints().into_iter().next() {
            task = task.fingerprint(fingerprint);
        }
        let got = self
            .submit(at, task)
            .map_err(|e| ReplayError::Submission {
                entry: entry_index,
                reason: e.to_string(),
            })?
            .id;
        check_id(entry_index, id, got)
    }

    /// A `SubmitAll` entry: every task rebuilt (the first that does not rebuild stops
    /// the entry, with none of them submitted), each given its announced fingerprint,
    /// submitted together at `at`; the first must get the recorded id `first`.
    fn replay_submit_all(
        &mut self,
        entry_index: usize,
        at: Time,
        first: TaskId,
        tasks: &[SavedSubmission],
        registry: &TaskRegistry,
    ) -> Result<(), ReplayError> {
        let mut rebuilt = Vec::with_capacity(tasks.len());
        let mut fingerprints = self.take_announced_fingerprints().into_iter();
        for task in tasks {
            let mut task = rebuild(entry_index, task, registry)?;
            if let Some(Some(fingerprint)) = fingerprints.next() {
                task = task.fingerprint(fingerprint);
            }
            rebuilt.push(task);
        }
        let submitted = self
            .submit_all(at, rebuilt)
            .map_err(|e| ReplayError::Submission {
                entry: entry_index,
                reason: e.to_string(),
            })?;
        match submitted.first() {
            Some(submission) => check_id(entry_index, first, submission.id),
            None => Ok(()),
        }
    }

    /// An `Answer` entry: the recorded result, which must read back, handed to the
    /// scheduler as the answer to `key` at `at`.
    fn replay_answer(
        &mut self,
        entry_index: usize,
        at: Time,
        key: RequestKey,
        result: &SavedResult,
        tokens_used: Option<u32>,
    ) -> Result<(), ReplayError> {
        let result = result.to_result().map_err(|reason| ReplayError::Entry {
            entry: entry_index,
            reason: reason.to_string(),
        })?;
        let mut response = Response::new(key, result);
        response.tokens_used = tokens_used;
        response.usage = self.budgets.take_announced_usage(key);
        let _ = self.handle_response(at, response);
        Ok(())
    }

    /// A `Steps` entry: up to `count` steps at `at`, fewer if nothing is left to run.
    fn replay_steps(&mut self, at: Time, count: u32) {
        for _ in 0..count {
            if self.step(at).is_none() {
                break;
            }
        }
    }

    /// A `Route` entry: every request and cancel out is taken.
    fn replay_route(&mut self) {
        while self.poll_request().is_some() {}
        while self.poll_cancel().is_some() {}
    }

    /// A `Taken` entry: `requests` requests out taken, then `cancels` cancels.
    fn replay_taken(&mut self, requests: u32, cancels: u32) {
        for _ in 0..requests {
            let _ = self.poll_request();
        }
        for _ in 0..cancels {
            let _ = self.poll_cancel();
        }
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
        let start =
            Snapshot::decode(&journal.start).map_err(|e| ReplayError::Start(e.to_string()))?;
        let mut scheduler = Scheduler::restore(&start, registry).map_err(ReplayError::restoring)?;
        setup(&mut scheduler);
        scheduler.record_trace(true);
        // The tasks take the branches of code changes the recorded run took.
        let _replaying = ReplayGuard::begin(super::patches::recorded_in(journal));
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

impl ReplayError {
    /// The error of a journal whose starting snapshot does not restore.
    pub(crate) fn restoring(error: crate::snapshot::RestoreError) -> ReplayError {
        match error {
            crate::snapshot::RestoreError::Nondeterminism(n) => ReplayError::Nondeterminism(n),
            other => ReplayError::Start(other.to_string()),
        }
    }
}

/// The task of entry `entry_index` rebuilt through `registry`.
fn rebuild(
    entry_index: usize,
    task: &SavedSubmission,
    registry: &TaskRegistry,
) -> Result<NewTask, ReplayError> {
    task.restore(registry)
        .map_err(|error| ReplayError::Submission {
            entry: entry_index,
            reason: error.to_string(),
        })
}

/// Checks that the task of entry `entry_index` got the recorded id `expected`.
fn check_id(entry_index: usize, expected: TaskId, got: TaskId) -> Result<(), ReplayError> {
    if got == expected {
        return Ok(());
    }
    Err(ReplayError::Id {
        entry: entry_index,
        expected,
        got,
    })
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

/// Why a journal entry could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// The starting snapshot could not be read or restored.
    #[error("the journal's starting snapshot: {0}")]
    Start(String),
    /// An async task in the starting snapshot, made again by today's code, asked for
    /// something other than what it recorded: the code changed, or it is not
    /// deterministic.
    #[error("the journal's starting snapshot: {0}")]
    Nondeterminism(crate::async_task::Nondeterminism),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::saved::{SavedTask, StateError};
    use crate::scheduler::Config;
    use crate::task::{AgentTask, Step, TaskContext};

    /// Yields forever; registered under `idle`, or not registered at all as `other`.
    #[derive(Debug, Serialize, Deserialize)]
    struct Idle(&'static str);

    impl AgentTask for Idle {
        fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
            Step::Yield
        }
        fn type_name(&self) -> &'static str {
            self.0
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(&())
        }
    }

    fn known() -> SavedSubmission {
        NewTask::new(Idle("idle")).save().unwrap()
    }

    fn unknown() -> SavedSubmission {
        NewTask::new(Idle("other")).save().unwrap()
    }

    /// Each entry that cannot be applied names itself and says why: a task that does
    /// not rebuild (alone or in a group: then none of the group is submitted), an id
    /// other than the recorded one (the task is submitted all the same), an answer
    /// that is not JSON.
    #[test]
    fn apply_says_which_entry_failed_and_why() {
        let registry = TaskRegistry::new().with("idle", |_| Ok(Box::new(Idle("idle"))));
        let mut scheduler = Scheduler::new(Config::new());
        let at = Time::ZERO;
        let mut apply = |index, entry: JournalEntry| scheduler.apply(index, &entry, &registry);
        let not_rebuilt = |entry| {
            Err(ReplayError::Submission {
                entry,
                reason: "the registry does not know the type `other`".to_owned(),
            })
        };
        let submit = |id, task| JournalEntry::Submit {
            at,
            id: TaskId(id),
            task,
        };
        let submit_all = |first, tasks| JournalEntry::SubmitAll {
            at,
            first: TaskId(first),
            tasks,
        };
        assert_eq!(apply(0, submit(0, unknown())), not_rebuilt(0));
        assert_eq!(
            apply(1, submit(5, known())),
            Err(ReplayError::Id {
                entry: 1,
                expected: TaskId(5),
                got: TaskId(1)
            })
        );
        assert_eq!(
            apply(2, submit_all(2, vec![known(), unknown()])),
            not_rebuilt(2)
        );
        assert_eq!(
            apply(3, submit_all(7, vec![known(), known()])),
            Err(ReplayError::Id {
                entry: 3,
                expected: TaskId(7),
                got: TaskId(2)
            })
        );
        let answer = JournalEntry::Answer {
            at,
            key: RequestKey::new(TaskId(1), 1, 0),
            result: SavedResult::Ok("{".to_owned()),
            tokens_used: None,
        };
        assert_eq!(
            apply(4, answer),
            Err(ReplayError::Entry {
                entry: 4,
                reason: "an answer in the journal is not JSON: EOF while parsing an object at line 1 column 1".to_owned()
            })
        );
        assert_eq!(apply(5, submit(4, known())), Ok(()));
        assert_eq!(apply(6, submit_all(5, Vec::new())), Ok(()));
    }
}
