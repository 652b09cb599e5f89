//! The journal the scheduler records of itself: every input method notes what it took
//! in, and [`Scheduler::poll_journal`] hands the entries out, in order, so that a
//! driver only forwards them (see the [`journal`](crate::journal) module for why each
//! entry is there).

use std::collections::VecDeque;

use super::{Scheduler, SubmitError};
use crate::id::{RequestKey, TaskId};
use crate::journal::{JournalEntry, SavedSubmission};
use crate::request::Response;
use crate::saved::SavedResult;
use crate::state::CancelReason;
use crate::task::NewTask;
use crate::time::Time;

/// Entries not yet taken by the driver, and the run of steps or drains being counted.
#[derive(Debug, Default)]
pub(super) struct Recorder {
    entries: VecDeque<JournalEntry>,
    run: Run,
    /// Outputs of the steps of the open run (tasks that ended, changes decided): after
    /// the run's entry, so that they neither split it nor come before it.
    outputs: Vec<JournalEntry>,
}

/// Calls that repeat many times in a row are counted, not journaled one by one: a run
/// ends (and becomes one entry) at the next input of another kind, or when the driver
/// polls the journal.
#[derive(Debug, Default)]
enum Run {
    #[default]
    None,
    /// `step(at)` called `count` times with nothing else in between.
    Steps { at: Time, count: u32 },
}

impl Recorder {
    /// Ends the current run: it becomes an entry.
    fn close_run(&mut self) {
        match std::mem::take(&mut self.run) {
            Run::None => {}
            Run::Steps { at, count } => self.entries.push_back(JournalEntry::Steps { at, count }),
        }
        self.entries.extend(self.outputs.drain(..));
    }

    /// Journals an output of the input being taken: after the input's entry.
    pub(super) fn push_output(&mut self, entry: JournalEntry) {
        match self.run {
            Run::None => self.entries.push_back(entry),
            Run::Steps { .. } => self.outputs.push(entry),
        }
    }

    /// Journals an input that is not part of a run.
    pub(super) fn push(&mut self, entry: JournalEntry) {
        self.close_run();
        self.entries.push_back(entry);
    }
}

impl Scheduler {
    /// Starts or stops recording the journal: every input the scheduler takes from now
    /// on (submissions, answers, unroutable requests, cancellations, deadlines set,
    /// results forgotten, requests sent again, time through `handle_timeout` and
    /// `step`, and the driver taking requests and cancel signals out) is noted, in
    /// order, for
    /// [`poll_journal`](Scheduler::poll_journal). Off by default; stopping drops the
    /// entries not yet polled.
    ///
    /// A journal is replayable from a snapshot taken when recording starts (see
    /// [`Journal::starting_from`](crate::Journal::starting_from)). While it records,
    /// a task that cannot be saved is refused by `submit` with
    /// [`SubmitError::NotSaveable`].
    ///
    /// # Example
    /// ```
    /// use spool_core::{task_fn, Journal, JournalEntry, NewTask, Scheduler, Step, Time};
    ///
    /// let mut scheduler = Scheduler::new(Default::default());
    /// let mut journal = Journal::starting_from(&scheduler).unwrap();
    /// scheduler.record_journal(true);
    /// let task = NewTask::new(task_fn("noop", |_cx| Step::done(1)));
    /// assert!(scheduler.submit(Time::ZERO, task).is_err(), "a task_fn cannot be saved");
    /// scheduler.handle_timeout(Time::ZERO);
    /// while scheduler.step(Time::ZERO).is_some() {}
    /// while let Some(entry) = scheduler.poll_journal() {
    ///     journal.entries.push(entry);
    /// }
    /// assert_eq!(journal.entries, [JournalEntry::Timeout { at: Time::ZERO }]);
    /// ```
    pub fn record_journal(&mut self, record: bool) {
        match (record, self.journal.is_some()) {
            (true, false) => self.journal = Some(Box::default()),
            (false, true) => self.journal = None,
            _ => {}
        }
        self.set_observed();
    }

    /// Whether the scheduler records its journal.
    pub fn is_recording_journal(&self) -> bool {
        self.journal.is_some()
    }

    /// Takes the next journal entry, in the order the inputs came (`None` when every
    /// entry so far was taken, or the journal is not recorded).
    ///
    /// A driver forwards every entry to its [`JournalSink`](crate::JournalSink) before
    /// it acts on what the input caused: after `submit` and before it reports the id;
    /// after `handle_response` and before the next `step`; after its steps and before
    /// it routes the requests they made; and before it checkpoints, so that a
    /// checkpoint comes after every entry whose effect it holds.
    #[must_use]
    pub fn poll_journal(&mut self) -> Option<JournalEntry> {
        let recorder = self.journal.as_deref_mut()?;
        if recorder.entries.is_empty() {
            recorder.close_run();
        }
        recorder.entries.pop_front()
    }

    /// The journal's copy of a task about to be submitted (`None` when not recording).
    pub(super) fn journal_save(
        &self,
        task: &NewTask,
    ) -> Result<Option<SavedSubmission>, SubmitError> {
        if self.journal.is_none() {
            return Ok(None);
        }
        task.save()
            .map(Some)
            .map_err(|error| SubmitError::NotSaveable {
                type_name: error.type_name,
                reason: error.reason,
            })
    }

    /// Journals a submission that was accepted.
    pub(super) fn journal_submit(&mut self, at: Time, id: TaskId, task: Option<SavedSubmission>) {
        if let (Some(recorder), Some(task)) = (self.journal.as_deref_mut(), task) {
            recorder.push(JournalEntry::Submit { at, id, task });
        }
    }

    /// The journal's copies of a batch about to be submitted.
    pub(super) fn journal_save_all(
        &self,
        tasks: &[NewTask],
    ) -> Result<Option<Vec<SavedSubmission>>, SubmitError> {
        if self.journal.is_none() {
            return Ok(None);
        }
        let mut saved = Vec::with_capacity(tasks.len());
        for task in tasks {
            saved.extend(self.journal_save(task)?);
        }
        Ok(Some(saved))
    }

    /// Journals a batch that was accepted; `first` is the id its first task got.
    pub(super) fn journal_submit_all(
        &mut self,
        at: Time,
        first: TaskId,
        tasks: Option<Vec<SavedSubmission>>,
    ) {
        if let (Some(recorder), Some(tasks)) = (self.journal.as_deref_mut(), tasks) {
            recorder.push(JournalEntry::SubmitAll { at, first, tasks });
        }
    }

    /// Journals an answer as it arrives.
    #[inline]
    pub(super) fn journal_answer(&mut self, at: Time, response: &Response) {
        if self.journal.is_none() {
            return;
        }
        let asked = self.asked_digest(response.key);
        if let Some(recorder) = self.journal.as_deref_mut() {
            if let Some(usage) = &response.usage {
                recorder.push(JournalEntry::Usage {
                    key: response.key,
                    usage: usage.clone(),
                });
            }
            recorder.push(JournalEntry::Answered {
                at,
                key: response.key,
                asked,
                result: SavedResult::of(&response.result),
                tokens_used: response.tokens_used,
            });
        }
    }

    /// The digest of the request `key` names, while its task holds it in flight.
    fn asked_digest(&self, key: RequestKey) -> Option<u64> {
        let key = self.locate(key);
        let task = self.tasks.entries().get(key.index() as usize)?;
        if task.id != key.task() {
            return None;
        }
        let pending = task
            .pending
            .as_slice()
            .iter()
            .find(|p| p.number == key.number())?;
        Some(crate::tape::request_digest(
            &pending.kind,
            pending.payload()?.value(),
        ))
    }

    /// Journals a request no executor serves.
    pub(super) fn journal_unroutable(&mut self, at: Time, key: RequestKey) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Unroutable { at, key });
        }
    }

    /// Journals a cancellation that was accepted.
    pub(super) fn journal_cancel(&mut self, at: Time, task: TaskId, reason: &CancelReason) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Cancel {
                at,
                task,
                reason: reason.clone(),
            });
        }
    }

    /// Journals a call of `handle_timeout`.
    #[inline]
    pub(super) fn journal_timeout(&mut self, at: Time) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Timeout { at });
        }
    }

    /// Journals a deadline that was set.
    pub(super) fn journal_deadline(&mut self, task: TaskId, deadline: Time) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::SetDeadline { task, deadline });
        }
    }

    /// Journals an ended task that was forgotten.
    pub(super) fn journal_forget(&mut self, task: TaskId) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Forget { task });
        }
    }

    /// Journals a schedule operation.
    pub(super) fn journal_schedule(&mut self, at: Time, op: crate::journal::ScheduleOp) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Schedule { at, op });
        }
    }

    /// Journals a call of `resend_in_flight`.
    pub(super) fn journal_resend(&mut self) {
        if let Some(recorder) = self.journal.as_deref_mut() {
            recorder.push(JournalEntry::Resend);
        }
    }

    /// Counts a call of `step(now)`, before it runs. A call that will poll nothing and
    /// does not move the clock changes nothing, and is not counted.
    #[inline(always)]
    pub(super) fn journal_step(&mut self, now: Time) {
        if self.journal.is_some() {
            self.count_step(now);
        }
    }

    #[inline(never)]
    fn count_step(&mut self, now: Time) {
        let idle = self.ready.len == 0 && now <= self.now;
        let Some(recorder) = self.journal.as_deref_mut() else {
            return;
        };
        if idle {
            return;
        }
        match &mut recorder.run {
            Run::Steps { at, count } if *at == now => *count += 1,
            _ => {
                recorder.close_run();
                recorder.run = Run::Steps { at: now, count: 1 };
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use crate::{
        CancelReason, Config, JournalEntry, NewTask, Response, Scheduler, Step, TaskState, Time,
        task_fn,
    };

    fn entries(scheduler: &mut Scheduler) -> Vec<JournalEntry> {
        std::iter::from_fn(|| scheduler.poll_journal()).collect()
    }

    /// A task that asks the LLM once and finishes with the answer.
    fn asker() -> NewTask {
        let mut asked = false;
        NewTask::new(task_fn("ask", move |cx| {
            if !asked {
                asked = true;
                cx.llm(json!("?"));
                return Step::Wait;
            }
            Step::done(1)
        }))
    }

    /// Steps are counted into one entry; a step that can change nothing is left out,
    /// one that only moves the clock is not; taking requests and cancel signals out is
    /// not an input and is not journaled.
    #[test]
    fn runs_of_calls_become_one_entry() {
        let mut s = Scheduler::new(Config::new());
        // Tasks that cannot be saved go in before the journal is recorded.
        s.submit(Time::ZERO, asker()).unwrap();
        s.submit(Time::ZERO, asker()).unwrap();
        s.record_journal(true);
        assert_eq!(s.step(Time::ZERO).map(|id| id.get()), Some(1));
        assert_eq!(s.step(Time::ZERO).map(|id| id.get()), Some(2));
        assert_eq!(s.step(Time::ZERO), None);
        assert_eq!(s.step(Time::ZERO), None);
        let first = s.poll_request().unwrap();
        let _ = s.poll_request().unwrap();
        assert!(s.poll_request().is_none());
        s.cancel(Time::ZERO, first.key.task(), CancelReason::Requested)
            .unwrap();
        assert!(s.poll_cancel().is_some());
        assert!(s.poll_cancel().is_none());
        let second = Time::from_duration(Duration::from_secs(1));
        assert_eq!(s.step(second), None);
        assert_eq!(s.step(second), None);
        assert_eq!(
            entries(&mut s),
            [
                JournalEntry::Steps {
                    at: Time::ZERO,
                    count: 2
                },
                JournalEntry::Cancel {
                    at: Time::ZERO,
                    task: first.key.task(),
                    reason: CancelReason::Requested
                },
                // An output of the cancellation: after it, before the next input.
                JournalEntry::Ended {
                    task: first.key.task(),
                    digest: crate::tape::ending_digest(&TaskState::Canceled(
                        CancelReason::Requested
                    ))
                    .unwrap()
                    .0,
                    preview: "canceled: canceled on request".into(),
                },
                JournalEntry::Steps {
                    at: second,
                    count: 1
                },
            ]
        );
    }

    /// Polling the journal in the middle of a run ends it there; answers and
    /// timeouts are one entry each; stopping the recording drops what was not taken.
    #[test]
    fn polling_closes_the_run_and_stopping_drops_the_rest() {
        let mut s = Scheduler::new(Config::new());
        s.submit(Time::ZERO, asker()).unwrap();
        s.record_journal(true);
        assert!(s.is_recording_journal());
        assert!(s.step(Time::ZERO).is_some());
        assert_eq!(
            s.poll_journal(),
            Some(JournalEntry::Steps {
                at: Time::ZERO,
                count: 1
            })
        );
        assert_eq!(s.poll_journal(), None);
        let out = s.poll_request().unwrap();
        let digest = crate::tape::request_digest(&out.request.kind, out.request.payload.value());
        let answer = Response::ok(out.key, json!(5));
        let _ = s.handle_response(Time::ZERO, answer.clone());
        s.handle_timeout(Time::ZERO);
        // An answer is journaled with the digest of the request it answers.
        assert_eq!(
            entries(&mut s),
            [
                JournalEntry::Answered {
                    at: Time::ZERO,
                    key: out.key,
                    asked: Some(digest),
                    result: crate::saved::SavedResult::Ok("5".into()),
                    tokens_used: None,
                },
                JournalEntry::Timeout { at: Time::ZERO },
            ]
        );
        s.handle_timeout(Time::ZERO);
        s.record_journal(false);
        assert!(!s.is_recording_journal());
        s.record_journal(true);
        assert_eq!(s.poll_journal(), None);
    }

    /// Sending requests again (after a restore) is an input: journaled, and applied
    /// it puts the same request back to go with the same key.
    #[test]
    fn sending_again_is_journaled_and_applied() {
        let sent = || {
            let mut s = Scheduler::new(Config::new());
            s.submit(Time::ZERO, asker()).unwrap();
            assert!(s.step(Time::ZERO).is_some());
            let key = s.poll_request().unwrap().key;
            (s, key)
        };
        let (mut recorded, key) = sent();
        recorded.record_journal(true);
        assert_eq!(recorded.resend_in_flight(), 1);
        let journal = entries(&mut recorded);
        assert_eq!(journal, [JournalEntry::Resend]);
        let (mut replayed, _) = sent();
        replayed
            .apply(0, &journal[0], &crate::TaskRegistry::new())
            .unwrap();
        assert_eq!(replayed.poll_request().map(|out| out.key), Some(key));
        assert_eq!(recorded.poll_request().map(|out| out.key), Some(key));
    }

    /// While recording, a task that cannot be saved is refused, and nothing of it
    /// is journaled or admitted.
    #[test]
    fn an_unsaveable_task_is_refused_while_recording() {
        let mut s = Scheduler::new(Config::new());
        s.record_journal(true);
        let error = s.submit(Time::ZERO, asker()).unwrap_err();
        assert!(
            matches!(&error, crate::SubmitError::NotSaveable { type_name, .. } if type_name == "ask"),
            "{error}"
        );
        assert_eq!(s.len(), 0);
        assert_eq!(s.poll_journal(), None);
    }
}
