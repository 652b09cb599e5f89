//! Forks: a task started again from another's submission with a tape of its recorded
//! answers (see [`history`](crate::history)), and the playback of that tape after each
//! of its polls.

use super::{Body, Scheduler, Submission, SubmitError, TaskEntry};
use crate::history::Fork;
use crate::id::TaskId;
use crate::journal::JournalEntry;
use crate::pending::Status;
use crate::registry::TaskRegistry;
use crate::snapshot::RestoreError;
use crate::snapshot::codec::ForkRecord;
use crate::tape::{ForkOrigin, ForkState, Playback, Tape, payload_digest};
use crate::time::Time;

impl Scheduler {
    /// Submits `fork`: a new task (a new id) of its origin's type, agent and priority,
    /// its body rebuilt through `registry`. Each request its code makes that the tape
    /// holds an answer for is answered from the tape when the poll that made it ends —
    /// never sent, never counted against a limit; a request it does not hold goes out
    /// live; the first whose kind or payload differs from the recorded one goes out
    /// live and the rest of the tape is dropped. Admission is as for any submission.
    ///
    /// # Errors
    /// [`SubmitError::NotSaveable`] naming the type when its body cannot be rebuilt
    /// (the registry does not know it, or its decoder refuses the input), and as
    /// [`submit`](Scheduler::submit).
    pub fn fork(
        &mut self,
        now: Time,
        fork: Fork,
        registry: &TaskRegistry,
    ) -> Result<Submission, SubmitError> {
        let out = self.fork_one(now, fork, registry);
        self.end_input();
        out
    }

    fn fork_one(
        &mut self,
        now: Time,
        fork: Fork,
        registry: &TaskRegistry,
    ) -> Result<Submission, SubmitError> {
        let Fork {
            submission,
            origin,
            tape,
        } = fork;
        let task = submission
            .restore(registry)
            .map_err(|error| SubmitError::NotSaveable {
                type_name: submission.type_name().to_owned(),
                reason: error.to_string(),
            })?;
        self.advance(now);
        self.check_room(1)?;
        let id = TaskId(self.tasks.take_ids(1));
        let submitted = self.insert(id, task, None, &[]);
        self.attach_fork(id, origin, tape.clone());
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Fork {
                at: now,
                id,
                task: submission,
                origin,
                tape,
            });
        }
        Ok(submitted)
    }

    /// Gives task `id` (just inserted) its origin and tape.
    pub(super) fn attach_fork(&mut self, id: TaskId, origin: ForkOrigin, tape: Tape) {
        let Some(&index) = self.tasks.by_id.get(&id) else {
            return;
        };
        let Some(task) = self.tasks.get_mut(index) else {
            return;
        };
        task.family.get_or_insert_with(Default::default).fork = Some(Box::new(ForkState {
            origin,
            tape,
            playback: Playback::default(),
        }));
    }

    /// The snapshot's records of the forks in the table, live and ended, by task id.
    pub(super) fn fork_records(&self) -> Vec<ForkRecord> {
        let mut records: Vec<ForkRecord> = self
            .tasks
            .entries()
            .iter()
            .filter_map(|(_, task)| {
                let fork = fork_of(task)?;
                Some(ForkRecord {
                    task: task.id,
                    origin: fork.origin,
                    tape: fork.tape.clone(),
                    playback: fork.playback.clone(),
                })
            })
            .collect();
        records.sort_by_key(|r| r.task);
        records
    }

    /// Gives the restored forks their origins and tapes.
    ///
    /// # Errors
    /// [`RestoreError::Invalid`] for a record of a task not in the table, or records
    /// out of task order.
    pub(super) fn restore_forks(&mut self, records: &[ForkRecord]) -> Result<(), RestoreError> {
        let mut last = None;
        for record in records {
            if last.is_some_and(|last| last >= record.task) {
                return Err(RestoreError::Invalid(format!(
                    "the fork records are not in task order at task {}",
                    record.task
                )));
            }
            last = Some(record.task);
            let Some(task) = self
                .tasks
                .by_id
                .get(&record.task)
                .copied()
                .and_then(|index| self.tasks.get_mut(index))
            else {
                return Err(RestoreError::Invalid(format!(
                    "a fork record names task {}, which is not in the table",
                    record.task
                )));
            };
            let state = Some(Box::new(ForkState {
                origin: record.origin,
                tape: record.tape.clone(),
                playback: record.playback.clone(),
            }));
            match &mut task.body {
                Body::Ended(ended) => ended.fork = state,
                Body::Live(_) => task.family.get_or_insert_with(Default::default).fork = state,
            }
        }
        Ok(())
    }

    /// Where task `id` was forked from, and how its playback went; `None` for a task
    /// that is not a fork (or is no longer in the table).
    pub fn fork_origin(&self, id: TaskId) -> Option<(ForkOrigin, Playback)> {
        let index = *self.tasks.by_id.get(&id)?;
        let fork = fork_of(self.tasks.entries().get(index as usize)?)?;
        Some((fork.origin, fork.playback.clone()))
    }
}

/// The fork state of `task`, live or ended.
fn fork_of(task: &TaskEntry) -> Option<&ForkState> {
    match &task.body {
        Body::Ended(ended) => ended.fork.as_deref(),
        Body::Live(_) => task.family.as_ref()?.fork.as_deref(),
    }
}

/// After a poll of the forked `task` that made `issued` requests (the last `issued`
/// keys of `outbox`): those its tape answers are taken back from the outbox and
/// answered, in the order they were made; one it does not hold goes out; at the first
/// it holds for another request the tape is dropped. Gives the number of requests
/// still going out, and how many were answered with the number of the last.
pub(super) fn play_tape(
    task: &mut TaskEntry,
    outbox: &mut std::collections::VecDeque<crate::id::RequestKey>,
    issued: u32,
) -> (u32, u32, u32) {
    let Some(fork) = task.family.as_mut().and_then(|f| f.fork.as_mut()) else {
        return (issued, 0, 0);
    };
    if fork.tape.is_empty() || issued == 0 {
        return (issued, 0, 0);
    }
    let start = outbox.len().saturating_sub(issued as usize);
    let made: Vec<_> = outbox.drain(start..).collect();
    let (mut answered, mut last) = (0, 0);
    for key in made {
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            outbox.push_back(key);
            continue;
        };
        let Some(answer) = fork.tape.take(key.number()) else {
            // Not recorded (answered after the fork's step): it goes out live.
            outbox.push_back(key);
            continue;
        };
        let same = answer.asked.as_ref().is_none_or(|asked| {
            asked.kind == pending.kind
                && pending
                    .payload()
                    .is_some_and(|p| payload_digest(p.value()) == asked.digest)
        });
        match (same, answer.result.to_result()) {
            (true, Ok(result)) => {
                pending.status = Status::Answered(result.map_err(Box::new));
                task.in_flight -= 1;
                fork.playback.played += 1;
                answered += 1;
                last = key.number();
            }
            _ => {
                fork.playback.diverged_at.get_or_insert(key.number());
                fork.tape.clear();
                outbox.push_back(key);
            }
        }
    }
    (issued - answered, answered, last)
}
