//! Reading a workload out of a journal: the journal replayed exactly, entry by entry,
//! with the requests the scheduler lets go taken after each entry, so that each answer's
//! latency is known, and the recorded run's figures taken from its trace.

use std::collections::BTreeMap;

use spool_core::{
    Fingerprint, Journal, JournalEntry, Scheduler, Snapshot, TaskId, TaskRegistry, Time, Value,
};

use super::stats::{Counts, Observer};
use super::{Answered, Input, InputKind, RecordedAnswer, WhatIfError, Workload};

/// What the recording pass keeps as it goes.
struct Recording {
    inputs: Vec<Input>,
    answers: BTreeMap<(TaskId, u32), Vec<RecordedAnswer>>,
    children: BTreeMap<TaskId, Vec<TaskId>>,
    /// When each request last went out.
    sent: BTreeMap<(TaskId, u32), Time>,
    /// The fingerprints announced for the next submission.
    fingerprints: Vec<Option<Fingerprint>>,
    /// The time of the latest input: inputs keep journal order in virtual time.
    last_at: Time,
    observer: Observer,
    counts: Counts,
}

/// The workload of `journal` (see [`Workload::from_journal`]).
pub(super) fn record(journal: &Journal, registry: &TaskRegistry) -> Result<Workload, WhatIfError> {
    let start = Snapshot::decode(&journal.start).map_err(|e| WhatIfError::Start(e.to_string()))?;
    let mut scheduler =
        Scheduler::restore(&start, registry).map_err(|e| WhatIfError::Start(e.to_string()))?;
    if !scheduler.is_empty() {
        return Err(WhatIfError::NotEmpty {
            tasks: scheduler.len(),
        });
    }
    scheduler.record_trace(true);
    let mut recording = Recording {
        inputs: Vec::new(),
        answers: BTreeMap::new(),
        children: BTreeMap::new(),
        sent: BTreeMap::new(),
        fingerprints: Vec::new(),
        last_at: scheduler.now(),
        observer: Observer::default(),
        counts: Counts::default(),
    };
    for (index, entry) in journal.entries.iter().enumerate() {
        recording.note(&scheduler, entry);
        scheduler.apply(index, entry, registry)?;
        recording.settle(&mut scheduler);
    }
    let recorded = recording.observer.finish(
        &scheduler,
        recording.counts,
        scheduler.policy_name(),
        Vec::new(),
    );
    Ok(Workload {
        inputs: recording.inputs,
        answers: recording.answers,
        children: recording.children,
        registry: registry.clone(),
        recorded,
        task_limits: scheduler.task_limits().clone(),
        request_limits: scheduler.request_limits().clone(),
    })
}

impl Recording {
    /// Notes what `entry` brings before it is applied: an arrival, a change from
    /// outside, or an answer with its latency.
    fn note(&mut self, scheduler: &Scheduler, entry: &JournalEntry) {
        match entry {
            JournalEntry::Submit { at, id, task } => {
                let fingerprints = self.take_fps();
                self.input(
                    *at,
                    submission(*id, vec![task.clone()], fingerprints, false),
                );
            }
            JournalEntry::SubmitAll { at, first, tasks } => {
                let fingerprints = self.take_fps();
                self.input(*at, submission(*first, tasks.clone(), fingerprints, true));
            }
            JournalEntry::Fingerprints(fingerprints) => {
                self.fingerprints.clone_from(fingerprints);
            }
            JournalEntry::Cancel { at, task, reason } => {
                let (task, reason) = (*task, reason.clone());
                self.input(*at, InputKind::Cancel { task, reason });
            }
            JournalEntry::SetDeadline { task, deadline } => {
                let (task, deadline) = (*task, *deadline);
                self.input(scheduler.now(), InputKind::Deadline { task, deadline });
            }
            JournalEntry::Answer {
                at,
                key,
                result,
                tokens_used,
            }
            | JournalEntry::Answered {
                at,
                key,
                result,
                tokens_used,
                ..
            } => {
                // An answer that is not JSON fails the entry when it is applied.
                if let Some(result) = read_result(result) {
                    self.answer(*at, (key.task(), key.number()), result, *tokens_used);
                }
            }
            JournalEntry::Unroutable { at, key } => {
                self.answered(*at, (key.task(), key.number()), Answered::Unroutable);
            }
            _ => {}
        }
    }

    /// The fingerprints announced for the submission at hand, taken.
    fn take_fps(&mut self) -> Vec<Option<Fingerprint>> {
        std::mem::take(&mut self.fingerprints)
    }

    /// An input from outside at `at` (or at the latest input's time, if earlier).
    fn input(&mut self, at: Time, what: InputKind) {
        self.last_at = self.last_at.max(at);
        self.inputs.push(Input {
            at: self.last_at,
            what,
        });
    }

    /// An executor's answer to `key` at `at`.
    fn answer(
        &mut self,
        at: Time,
        key: (TaskId, u32),
        result: Result<Value, spool_core::RequestError>,
        tokens: Option<u32>,
    ) {
        let answer = Answered::Result(result, tokens);
        if answer.is_rate_limited() {
            self.counts.rate_limited += 1;
        }
        self.answered(at, key, answer);
    }

    /// `answer` to `key` at `at`, its latency counted from when the request last went
    /// out (none, if it never did).
    fn answered(&mut self, at: Time, key: (TaskId, u32), answer: Answered) {
        let latency = self
            .sent
            .get(&key)
            .map_or(std::time::Duration::ZERO, |sent| at.saturating_since(*sent));
        self.answers
            .entry(key)
            .or_default()
            .push(RecordedAnswer { latency, answer });
    }

    /// After an entry: the trace it produced (new tasks, spawns, ends), and the
    /// requests it let go, noted as sent now; cancel signals are taken and dropped.
    fn settle(&mut self, scheduler: &mut Scheduler) {
        for (child, parent) in self.observer.take(scheduler) {
            self.children.entry(parent).or_default().push(child);
        }
        let now = scheduler.now();
        while let Some(out) = scheduler.poll_request() {
            let key = (out.key.task(), out.key.number());
            self.sent.insert(key, now);
            self.answers.entry(key).or_default();
            self.counts.requests += 1;
        }
        while scheduler.poll_cancel().is_some() {}
    }
}

/// A submission input.
fn submission(
    first: TaskId,
    tasks: Vec<spool_core::SavedSubmission>,
    fingerprints: Vec<Option<Fingerprint>>,
    batch: bool,
) -> InputKind {
    InputKind::Submit {
        first,
        tasks,
        fingerprints,
        batch,
    }
}

/// A recorded result as the executor gave it; `None` for a value that is not JSON.
fn read_result(
    result: &spool_core::SavedResult,
) -> Option<Result<Value, spool_core::RequestError>> {
    match result {
        spool_core::SavedResult::Ok(text) => serde_json::from_str(text).ok().map(Ok),
        spool_core::SavedResult::Err(error) => Some(Err(error.clone())),
    }
}
