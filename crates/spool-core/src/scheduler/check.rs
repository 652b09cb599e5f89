//! Checking a recorded run against today's code: the journal's inputs are taken again
//! with the recorded answers, and each answer's request is compared with the one the
//! code makes now; the first that differs is reported as a step of its task.

use super::Scheduler;
use super::replay::ReplayError;
use crate::id::{RequestKey, TaskId};
use crate::journal::{Journal, JournalEntry};
use crate::registry::TaskRegistry;
use crate::replaying::ReplayGuard;
use crate::saved::SavedResult;
use crate::snapshot::Snapshot;
use crate::state::{TaskError, TaskState};
use crate::tape::request_digest;

/// How much of a payload or answer a [`StepDivergence`] quotes.
const QUOTE: usize = 160;

/// Where today's code first asked for something other than the recorded run did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct StepDivergence {
    /// The journal entry (the recorded answer) at which it shows, from 0.
    pub entry: usize,
    /// The task.
    pub task: TaskId,
    /// The task's step (poll, from 0) that made the request today, or — when today's
    /// code made no such request — the number of steps it had taken.
    pub step: u32,
    /// Whether the task was live at the journal's start: its steps are then counted
    /// from the journal's start, not from its submission.
    pub since_start: bool,
    /// The request's number within the task; `None` when what differs is how (or
    /// whether) the task ended.
    pub request: Option<u32>,
    /// What the recorded run asked, and the answer it got.
    pub recorded: String,
    /// What today's code asks (or did instead).
    pub got: String,
}

impl std::fmt::Display for StepDivergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = if self.since_start {
            " of the journal"
        } else {
            ""
        };
        let what = match self.request {
            Some(request) => format!("request {request}"),
            None => "its ending".to_owned(),
        };
        write!(
            f,
            "task {} diverges at step {}{since} ({what}, journal entry {}):\n  recorded: {}\n  got:      {}",
            self.task, self.step, self.entry, self.recorded, self.got
        )
    }
}

/// What a check of a journal found.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CheckReport {
    /// Entries applied.
    pub entries: usize,
    /// Recorded answers whose request was compared.
    pub compared: u64,
    /// Recorded answers without a request digest (journals written before answers
    /// carried one), taken without a comparison.
    pub unchecked: u64,
    /// Recorded task endings compared (journals written before endings were
    /// journaled have none; their endings are not compared).
    pub endings: u64,
    /// The first divergence, if any.
    pub divergence: Option<StepDivergence>,
}

impl Scheduler {
    /// Checks `journal` against the task types in `registry` — today's code: its
    /// inputs are taken again with the recorded answers as the cassette, and before
    /// each recorded answer the request it answered (kind and payload, by digest) is
    /// compared with the request the task makes now. Stops at the first that differs.
    ///
    /// # Errors
    /// A [`ReplayError`] when the journal's start does not restore or an entry cannot be
    /// applied (a task type the registry does not know, an answer that does not read).
    pub fn check_journal(
        journal: &Journal,
        registry: &TaskRegistry,
    ) -> Result<CheckReport, ReplayError> {
        let start =
            Snapshot::decode(&journal.start).map_err(|e| ReplayError::Start(e.to_string()))?;
        let mut scheduler = Scheduler::restore(&start, registry).map_err(ReplayError::restoring)?;
        let _replaying = ReplayGuard::begin(super::patches::recorded_in(journal));
        // Tasks live at the start: their steps are counted from there.
        let live_at_start: Vec<TaskId> = scheduler
            .tasks
            .by_id
            .iter()
            .filter(|(_, index)| {
                scheduler
                    .tasks
                    .entries()
                    .get(**index as usize)
                    .is_some_and(|t| matches!(t.body, super::Body::Live(_)))
            })
            .map(|(id, _)| *id)
            .collect();
        scheduler.count_steps();
        let mut report = CheckReport {
            entries: 0,
            compared: 0,
            unchecked: 0,
            endings: 0,
            divergence: None,
        };
        let mut ended: Vec<TaskId> = Vec::new();
        for (i, entry) in journal.entries.iter().enumerate() {
            match entry {
                JournalEntry::Answered {
                    key,
                    asked: Some(digest),
                    result,
                    ..
                } => {
                    report.compared += 1;
                    if let Some(got) = scheduler.differs(*key, *digest) {
                        report.divergence = Some(StepDivergence {
                            entry: i,
                            task: key.task(),
                            step: scheduler.step_of(*key),
                            since_start: live_at_start.contains(&key.task()),
                            request: Some(key.number()),
                            recorded: format!(
                                "request {} (digest {digest:016x}) answered with {}",
                                key.number(),
                                quote_result(result)
                            ),
                            got,
                        });
                        return Ok(report);
                    }
                }
                JournalEntry::Answered { asked: None, .. } | JournalEntry::Answer { .. } => {
                    report.unchecked += 1;
                }
                JournalEntry::Ended {
                    task,
                    digest,
                    preview,
                } => {
                    report.endings += 1;
                    ended.push(*task);
                    let today = scheduler.task_state(*task);
                    let now = today.as_ref().and_then(crate::tape::ending_digest);
                    if now.as_ref().is_none_or(|(d, _)| d != digest) {
                        let got = match (now, today) {
                            (Some((_, words)), _) => format!("ended: {words}"),
                            (None, Some(state)) => {
                                format!("not ended: {}", quote(&format!("{state:?}")))
                            }
                            (None, None) => "not in the table".to_owned(),
                        };
                        report.divergence = Some(StepDivergence {
                            entry: i,
                            task: *task,
                            step: scheduler.steps_of(*task),
                            since_start: live_at_start.contains(task),
                            request: None,
                            recorded: format!("ended: {preview}"),
                            got,
                        });
                        return Ok(report);
                    }
                }
                _ => {}
            }
            scheduler.apply(i, entry, registry)?;
            report.entries = i + 1;
        }
        if report.endings > 0 {
            // A task the recording did not see end must not have ended today.
            report.divergence = scheduler.ended_unrecorded(&ended, &live_at_start, journal);
        }
        Ok(report)
    }

    /// The step of its task request `key` was made in, counted since the journal's
    /// start; the steps its task had taken when it made no such request.
    fn step_of(&self, key: RequestKey) -> u32 {
        let Some(watch) = self.watch.as_deref() else {
            return 0;
        };
        watch
            .made_in
            .get(&(key.task(), key.number()))
            .copied()
            .unwrap_or_else(|| watch.polls.get(&key.task()).copied().unwrap_or(0))
    }

    /// The steps task `task` took, counted since the journal's start.
    fn steps_of(&self, task: TaskId) -> u32 {
        self.watch
            .as_deref()
            .and_then(|w| w.polls.get(&task).copied())
            .unwrap_or(0)
    }

    /// The first task (by id) that ended today and not in the recording (whose
    /// endings are `recorded`), leaving out tasks rejected at submission (their
    /// ending is the submission's).
    fn ended_unrecorded(
        &self,
        recorded: &[TaskId],
        live_at_start: &[TaskId],
        journal: &Journal,
    ) -> Option<StepDivergence> {
        self.tasks.by_id.keys().find_map(|task| {
            if recorded.contains(task) {
                return None;
            }
            let state = self.task_state(*task)?;
            if matches!(state, TaskState::Completed(Err(TaskError::Rejected { .. }))) {
                return None;
            }
            let (_, words) = crate::tape::ending_digest(&state)?;
            if !self.ended_in_journal(*task, live_at_start) {
                return None;
            }
            Some(StepDivergence {
                entry: journal.entries.len(),
                task: *task,
                step: self.steps_of(*task),
                since_start: live_at_start.contains(task),
                request: None,
                recorded: "not ended when the journal ends".to_owned(),
                got: format!("ended: {words}"),
            })
        })
    }

    /// Whether task `task` took a step in the journal (it ended there, not before it).
    fn ended_in_journal(&self, task: TaskId, live_at_start: &[TaskId]) -> bool {
        live_at_start.contains(&task) || self.steps_of(task) > 0
    }

    /// What differs between the request `key` names, as the task holds it now, and
    /// the recorded `digest`: `None` when they are the same.
    fn differs(&self, key: RequestKey, digest: u64) -> Option<String> {
        let located = self.locate(key);
        let Some(task) = self
            .tasks
            .entries()
            .get(located.index() as usize)
            .filter(|t| t.id == key.task())
        else {
            return Some(format!("task {} is not in the table", key.task()));
        };
        let Some(pending) = task
            .pending
            .as_slice()
            .iter()
            .find(|p| p.number == key.number())
        else {
            let state = self
                .task_state(key.task())
                .map_or_else(|| "gone".to_owned(), |s| format!("{s:?}"));
            return Some(format!(
                "no request {} in flight (the task is {})",
                key.number(),
                quote(&state)
            ));
        };
        let payload = pending.payload()?.value();
        let now = request_digest(&pending.kind, payload);
        (now != digest).then(|| {
            format!(
                "{} request {} (digest {now:016x}) {}",
                pending.kind,
                key.number(),
                quote(&payload.to_string())
            )
        })
    }
}

fn quote_result(result: &SavedResult) -> String {
    match result {
        SavedResult::Ok(text) => quote(text),
        SavedResult::Err(error) => format!("error: {}", quote(&error.to_string())),
    }
}

fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}
