//! Forks: a task started again from another's submission with a tape of its recorded
//! answers (see [`history`](crate::history)), and the playback of that tape after each
//! of its polls.

use super::{Body, Scheduler, Submission, SubmitError, TaskEntry};
use crate::history::Fork;
use crate::id::TaskId;
use crate::journal::JournalEntry;
use crate::pending::Status;
use crate::registry::TaskRegistry;
use crate::saved::{SavedTask, StateError};
use crate::snapshot::RestoreError;
use crate::snapshot::codec::ForkRecord;
use crate::tape::{ForkOrigin, ForkState, Playback, Tape, payload_digest};
use crate::task::{AgentTask, Step, TaskContext};
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
    /// [`SubmitError::NotMade`] naming the type when its body cannot be made (the
    /// registry does not know it, or it refuses the saved state or the new input),
    /// and as [`submit`](Scheduler::submit).
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
            mut submission,
            origin,
            tape,
            input,
        } = fork;
        let refused = |reason: String| SubmitError::NotMade {
            type_name: submission.type_name().to_owned(),
            reason,
        };
        let mut task = submission
            .restore(registry)
            .map_err(|error| refused(error.to_string()))?;
        if let Some(input) = input {
            // Made from the new input as a submission of it is; journaled as made.
            task.body = registry
                .make(submission.type_name(), &input)
                .map_err(|error| refused(error.to_string()))?;
            submission = task.save().map_err(|error| SubmitError::NotSaveable {
                type_name: error.type_name,
                reason: error.reason,
            })?;
        }
        // Refused for room before the clock moves: a refusal is not journaled.
        self.check_room(1)?;
        self.advance(now);
        let id = TaskId(self.tasks.take_ids(1));
        wrap(&mut task.body);
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
                Body::Live(body) => {
                    if !record.tape.is_empty() {
                        wrap(body);
                    }
                    task.family.get_or_insert_with(Default::default).fork = state;
                }
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

/// A forked task's body: its own, with its tape played after each poll. Only forks
/// carry it, so no other task pays for playback; it saves and names itself as the
/// body it wraps (a restore wraps a fork with a tape left again).
pub(super) struct Taped(pub(super) Box<dyn AgentTask>);

impl std::fmt::Debug for Taped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Taped").field(&self.0).finish()
    }
}

impl AgentTask for Taped {
    /// Polls the task; when its tape answers what the poll asked and the task waits
    /// for nothing else, it takes the answers at once: polled again in the same step,
    /// until it asks for something the tape does not answer.
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
        loop {
            let step = self.0.poll(cx);
            if !play_tape(cx, &step) {
                return step;
            }
        }
    }

    fn type_name(&self) -> &'static str {
        self.0.type_name()
    }

    fn save(&self) -> Result<SavedTask, StateError> {
        self.0.save()
    }
}

/// Stands in for a body while it is taken out to be wrapped.
#[derive(Debug)]
struct Unwrapped;

impl AgentTask for Unwrapped {
    fn poll(&mut self, _cx: &mut TaskContext<'_>) -> Step {
        Step::fail("a forked task's body was lost while it was wrapped")
    }
}

/// Wraps `body` in [`Taped`].
pub(super) fn wrap(body: &mut Box<dyn AgentTask>) {
    let inner = std::mem::replace(body, Box::new(Unwrapped));
    *body = Box::new(Taped(inner));
}

/// After a poll of a forked task that made `cx.issued` requests (the last of `cx`'s
/// outbox) and ended with `step`: when the tape answers them — all the task waits for,
/// or, for a task that waits for any answer, one of them — those are taken back from
/// the outbox and answered, and `true` says the task goes on at once. Otherwise they go
/// out live. At the first request the tape holds for another request (the code asks
/// something else than the origin did) the tape is dropped.
fn play_tape(cx: &mut TaskContext<'_>, step: &Step) -> bool {
    let Some(fork) = cx.family.as_mut().and_then(|f| f.fork.as_mut()) else {
        return false;
    };
    if fork.tape.is_empty() || cx.issued == 0 || !matches!(step, Step::Wait | Step::WaitAny) {
        return false;
    }
    let start = cx.outbox.len().saturating_sub(cx.issued as usize);
    // The requests of this poll the tape answers, in order, until one differs.
    let mut answers = Vec::new();
    for key in cx.outbox.range(start..) {
        let Some(pending) = cx.pending.in_flight_mut(key.number()) else {
            continue;
        };
        let Some(answer) = fork.tape.get(key.number()) else {
            continue;
        };
        let same = answer.asked.as_ref().is_none_or(|asked| {
            asked.kind == pending.kind
                && pending
                    .payload()
                    .is_some_and(|p| payload_digest(p.value()) == asked.digest)
        });
        match answer.result.to_result() {
            Ok(result) if same => answers.push((*key, result)),
            _ => {
                fork.playback.diverged_at.get_or_insert(key.number());
                fork.tape.clear();
                return false;
            }
        }
    }
    let woken = match step {
        Step::Wait => answers.len() as u32 == *cx.in_flight,
        _ => !answers.is_empty(),
    };
    if !woken {
        return false;
    }
    for (key, result) in answers {
        fork.tape.take(key.number());
        if let Some(pending) = cx.pending.in_flight_mut(key.number()) {
            pending.status = Status::Answered(result.map_err(Box::new));
        }
        if let Some(at) = cx.outbox.iter().rposition(|k| *k == key) {
            cx.outbox.remove(at);
        }
        *cx.in_flight -= 1;
        cx.issued -= 1;
        fork.playback.played += 1;
    }
    true
}
