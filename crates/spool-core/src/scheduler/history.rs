//! Watching one task's polls, and reading a task's history from a journal by
//! replaying it with the task watched.

use std::collections::BTreeMap;

use super::{Scheduler, TaskEntry};
use crate::history::{
    HistoryEnd, HistoryError, HistoryStep, StepAnswer, StepEnd, StepRequest, TaskHistory,
};
use crate::id::TaskId;
use crate::journal::{Journal, JournalEntry, SavedSubmission};
use crate::pending::Status;
use crate::registry::TaskRegistry;
use crate::replaying::ReplayGuard;
use crate::snapshot::Snapshot;
use crate::state::{TaskError, TaskState};
use crate::task::Step;
use crate::time::Time;

/// The task being watched and the steps noted so far; or, watching every task, only
/// how many steps each took and the step each request was made in.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// The task watched; `None`: every task, counted.
    pub(super) task: Option<TaskId>,
    pub(super) steps: Vec<HistoryStep>,
    /// Watching every task: the steps each took.
    pub(super) polls: BTreeMap<TaskId, u32>,
    /// Watching every task: the step of its task each request was made in.
    pub(super) made_in: BTreeMap<(TaskId, u32), u32>,
}

impl Watch {
    /// Whether the polls of `task` are noted.
    #[inline]
    pub(super) fn watches(&self, task: TaskId) -> bool {
        self.task.is_none_or(|t| t == task)
    }
}

/// What a watched task had received when its poll began.
pub(super) struct Received {
    answers: Vec<StepAnswer>,
    children_ended: Vec<TaskId>,
    first_new: u32,
}

/// What `task` has received, before its poll.
pub(super) fn received(task: &TaskEntry) -> Received {
    let answers = task
        .pending
        .as_slice()
        .iter()
        .filter_map(|p| match &p.status {
            Status::Answered(result) => Some(StepAnswer {
                request: p.number,
                result: result.clone().map_err(|e| *e),
            }),
            Status::InFlight(..) => None,
        })
        .collect();
    Received {
        answers,
        children_ended: task
            .family
            .as_ref()
            .map(|f| f.results.iter().map(|(id, _)| *id).collect())
            .unwrap_or_default(),
        first_new: task.next_request,
    }
}

impl Scheduler {
    /// Notes the poll of the watched task at `now`: what it had `received`, the
    /// requests it made (numbered from `received.first_new`), the children it
    /// spawned, and how it ended (`result`: the poll's step, or its panic message).
    pub(super) fn note_step(
        &mut self,
        now: Time,
        index: u32,
        received: Received,
        result: Result<&Step, String>,
    ) {
        let Some(task) = self.tasks.entries().get(index as usize) else {
            return;
        };
        if let Some(watch) = self.watch.as_deref_mut().filter(|w| w.task.is_none()) {
            let step = watch.polls.entry(task.id).or_default();
            for p in task.pending.as_slice() {
                if p.number >= received.first_new {
                    watch.made_in.insert((task.id, p.number), *step);
                }
            }
            *step += 1;
            return;
        }
        let requests = task
            .pending
            .as_slice()
            .iter()
            .filter(|p| p.number >= received.first_new)
            .filter_map(|p| {
                Some(StepRequest {
                    number: p.number,
                    kind: p.kind.clone(),
                    payload: p.payload()?.value().clone(),
                })
            })
            .collect();
        let end = match result {
            Ok(Step::Done(Ok(value))) => StepEnd::Returned(value.clone()),
            Ok(Step::Done(Err(error))) => StepEnd::Failed(error.clone()),
            Ok(Step::Yield) => StepEnd::Yielded,
            Ok(_) => StepEnd::Waiting,
            Err(message) => StepEnd::Failed(TaskError::Panicked {
                task: task.id,
                message,
            }),
        };
        let spawned = self.spawned.iter().map(|(id, _)| *id).collect();
        let Some(watch) = self.watch.as_deref_mut() else {
            return;
        };
        let step = watch.steps.len() as u32;
        watch.steps.push(HistoryStep {
            step,
            at: now,
            answers: received.answers,
            children_ended: received.children_ended,
            requests,
            spawned,
            end,
        });
    }

    /// Starts noting every poll of task `task` (one task at a time; `None` stops).
    pub(super) fn watch(&mut self, task: Option<TaskId>) {
        self.watch = task.map(|task| {
            Box::new(Watch {
                task: Some(task),
                ..Watch::default()
            })
        });
        self.set_observed();
    }

    /// Starts counting every task's steps, and noting the step each request is made in.
    pub(super) fn count_steps(&mut self) {
        self.watch = Some(Box::default());
        self.set_observed();
    }
}

impl TaskHistory {
    /// The history of `task` in `journal`, which must hold its submission: the
    /// journal is replayed (with `registry`'s task types; nothing is sent anywhere)
    /// and each poll of the task noted.
    ///
    /// # Errors
    /// [`HistoryError::NotFound`] when the journal does not submit the task,
    /// [`HistoryError::Spawned`] for a child spawned by another task (while it is
    /// still in the table at the journal's end),
    /// [`HistoryError::Replay`] when the journal does not replay.
    pub fn from_journal(
        journal: &Journal,
        task: TaskId,
        registry: &TaskRegistry,
    ) -> Result<TaskHistory, HistoryError> {
        let replay = |e: &dyn std::fmt::Display| HistoryError::Replay(e.to_string());
        let start = Snapshot::decode(&journal.start).map_err(|e| replay(&e))?;
        let mut scheduler = Scheduler::restore(&start, registry).map_err(|e| replay(&e))?;
        if scheduler.tasks.by_id.contains_key(&task) {
            return Err(HistoryError::NotFound { task });
        }
        scheduler.watch(Some(task));
        let _replaying = ReplayGuard::begin(super::patches::recorded_in(journal));
        let mut submitted: Option<(Time, SavedSubmission, Option<crate::tape::ForkOrigin>)> = None;
        for (i, entry) in journal.entries.iter().enumerate() {
            if submitted.is_none() {
                submitted = submission_in(entry, task);
            }
            scheduler
                .apply(i, entry, registry)
                .map_err(|e| replay(&e))?;
        }
        let Some((submitted_at, submission, origin)) = submitted else {
            if scheduler.tasks.by_id.contains_key(&task) {
                return Err(HistoryError::Spawned { task });
            }
            return Err(HistoryError::NotFound { task });
        };
        let end = match scheduler.task_state(task) {
            Some(TaskState::Completed(Ok(value))) => HistoryEnd::Completed(value),
            Some(TaskState::Completed(Err(error))) => HistoryEnd::Failed(error),
            Some(TaskState::Canceled(reason)) => HistoryEnd::Canceled(reason.to_string()),
            _ => HistoryEnd::Live,
        };
        let steps = scheduler.watch.take().map(|w| w.steps).unwrap_or_default();
        Ok(TaskHistory {
            task,
            type_name: submission.type_name().to_owned(),
            agent: submission.agent().unwrap_or("default").to_owned(),
            submitted_at,
            input: submission.input(),
            origin,
            steps,
            end,
            submission: Some(submission),
            patches: journal
                .entries
                .iter()
                .filter_map(|entry| match entry {
                    JournalEntry::Patched { task: t, name } if *t == task => Some(name.clone()),
                    _ => None,
                })
                .collect(),
        })
    }
}

/// The submission of `task` in `entry`, if the entry submits it.
fn submission_in(
    entry: &JournalEntry,
    task: TaskId,
) -> Option<(Time, SavedSubmission, Option<crate::tape::ForkOrigin>)> {
    match entry {
        JournalEntry::Submit {
            at,
            id,
            task: saved,
        } if *id == task => Some((*at, saved.clone(), None)),
        JournalEntry::SubmitAll { at, first, tasks } if task >= *first => {
            let offset = usize::try_from(task.0 - first.0).ok()?;
            tasks.get(offset).map(|saved| (*at, saved.clone(), None))
        }
        JournalEntry::Fork {
            at,
            id,
            task: saved,
            origin,
            ..
        } if *id == task => Some((*at, saved.clone(), Some(*origin))),
        _ => None,
    }
}
