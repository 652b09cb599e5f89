//! Idempotency keys: which task holds a caller's key, while it lives and for a window
//! after it ends, so that a key runs at most once whatever the result retention says.
//! The ended part is kept in snapshots, so a store remembers it across restarts.
//!
//! When an ended task's key is let go is a timer ([`TimerKind::Key`](super::timers::TimerKind)):
//! [`ended`](IdempotencyKeys::ended) says when, the scheduler queues it with its other timers,
//! and [`expire`](IdempotencyKeys::expire) lets the key go when it comes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Submission, SubmitError};
use crate::fingerprint::Fingerprint;
use crate::id::TaskId;
use crate::task::NewTask;
use crate::time::Time;

/// Who holds a key ([`Scheduler::key`](crate::Scheduler::key)).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRecord {
    /// The task submitted with the key.
    pub task: TaskId,
    /// When it ended; `None` while it is live.
    pub ended_at: Option<Time>,
    /// The fingerprint of the request the key was first used for; `None` when it was
    /// given none (or it was kept by a snapshot of format version 3 or older, which
    /// had none): then any submission with the key is a repeat.
    pub fingerprint: Option<Fingerprint>,
}

impl KeyRecord {
    /// Whether a submission with `fingerprint` is the request the key was first used
    /// for: unless both have a fingerprint and they differ.
    pub fn matches(&self, fingerprint: Option<Fingerprint>) -> bool {
        match (self.fingerprint, fingerprint) {
            (Some(kept), Some(given)) => kept == given,
            _ => true,
        }
    }
}

/// What [`Scheduler::submit_keyed`](crate::Scheduler::submit_keyed) came to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedSubmission {
    /// The key was free (or the task has none): the task was submitted.
    Submitted(Submission),
    /// The key is held by the task the same request made (equal fingerprints, or one
    /// of them has none): nothing was submitted.
    Existing {
        /// The key.
        key: String,
        /// Who holds it.
        record: KeyRecord,
    },
    /// The key is held by a task a different request made: nothing was submitted.
    Reused {
        /// The key.
        key: String,
        /// Who holds it, and the fingerprint it was kept with.
        record: KeyRecord,
    },
}

/// The keys held by live tasks and, within the window, by ended ones.
#[derive(Clone, Debug)]
pub(super) struct IdempotencyKeys {
    /// How long an ended task's key is kept; `None`: as long as the scheduler (and the
    /// store it is journaled to) lives.
    window: Option<Duration>,
    keys: BTreeMap<String, KeyRecord>,
    /// The keys of ended tasks waiting to be let go, by task (their timers name the
    /// task).
    ended: BTreeMap<TaskId, String>,
    /// The fingerprints a journal entry gave for the submission replayed next, one
    /// per task (see [`announce`](IdempotencyKeys::announce)).
    announced: Vec<Option<Fingerprint>>,
}

impl IdempotencyKeys {
    pub(super) fn new(window: Option<Duration>) -> IdempotencyKeys {
        IdempotencyKeys {
            window,
            keys: BTreeMap::new(),
            ended: BTreeMap::new(),
            announced: Vec::new(),
        }
    }

    /// How long an ended task's key is kept (`None`: for good).
    pub(super) fn window(&self) -> Option<Duration> {
        self.window
    }

    /// Who holds `key`, if anyone does.
    pub(super) fn get(&self, key: &str) -> Option<KeyRecord> {
        self.keys.get(key).copied()
    }

    /// Who holds `key` at `now`: as [`get`](IdempotencyKeys::get), less an ended task's key
    /// whose window has run out by `now` (its timer, due at or before `now`, lets it go
    /// when the clock is next advanced).
    pub(super) fn get_at(&self, key: &str, now: Time) -> Option<KeyRecord> {
        self.get(key).filter(|r| match (r.ended_at, self.window) {
            (Some(ended_at), Some(window)) => ended_at + window > now,
            _ => true,
        })
    }

    /// `task` takes `key`, unless another task holds it (a spawned child never takes
    /// over another task's key; a submission with a held key was refused before).
    #[cfg(test)]
    pub(super) fn claim(&mut self, key: String, task: TaskId) {
        self.claim_with(key, task, None);
    }

    /// `task` takes `key`, kept with the request's `fingerprint`, unless another task
    /// holds it (see [`claim`](IdempotencyKeys::claim)).
    pub(super) fn claim_with(
        &mut self,
        key: String,
        task: TaskId,
        fingerprint: Option<Fingerprint>,
    ) {
        self.keys.entry(key).or_insert(KeyRecord {
            task,
            ended_at: None,
            fingerprint,
        });
    }

    /// Gives `key`'s record the fingerprint a snapshot kept for it.
    pub(super) fn set_fingerprint(&mut self, key: &str, fingerprint: Fingerprint) {
        if let Some(record) = self.keys.get_mut(key) {
            record.fingerprint = Some(fingerprint);
        }
    }

    /// Every key's fingerprint, for a snapshot: `(key, fingerprint)`, by key (keys
    /// without one are left out).
    pub(super) fn fingerprints(&self) -> Vec<(String, Fingerprint)> {
        self.keys
            .iter()
            .filter_map(|(key, r)| Some((key.clone(), r.fingerprint?)))
            .collect()
    }

    /// A journal entry gave the fingerprints of the submission that follows it (a
    /// replay takes them with [`take_announced`](IdempotencyKeys::take_announced)).
    pub(super) fn announce(&mut self, fingerprints: Vec<Option<Fingerprint>>) {
        self.announced = fingerprints;
    }

    /// The fingerprints announced for the submission being replayed (empty if none
    /// were).
    pub(super) fn take_announced(&mut self) -> Vec<Option<Fingerprint>> {
        std::mem::take(&mut self.announced)
    }

    /// `task`, which may hold `key`, ended at `now`: the key is kept for the window.
    /// Returns when it is to be let go ([`expire`](IdempotencyKeys::expire)), if it is.
    pub(super) fn ended(&mut self, key: &str, task: TaskId, now: Time) -> Option<Time> {
        let record = self.keys.get_mut(key)?;
        if record.task != task || record.ended_at.is_some() {
            return None;
        }
        match self.window {
            Some(window) if window.is_zero() => {
                self.keys.remove(key);
                None
            }
            Some(window) => {
                record.ended_at = Some(now);
                self.ended.insert(task, key.to_owned());
                Some(now + window)
            }
            None => {
                record.ended_at = Some(now);
                None
            }
        }
    }

    /// Whether ended `task` still holds its key, to be let go at `at` (the rule a key's
    /// timer stands by).
    pub(super) fn lets_go_at(&self, task: TaskId, at: Time) -> bool {
        let Some(window) = self.window else {
            return false;
        };
        self.ended
            .get(&task)
            .and_then(|key| self.keys.get(key))
            .is_some_and(|r| r.task == task && r.ended_at.map(|e| e + window) == Some(at))
    }

    /// Lets go of ended `task`'s key: its window has run out.
    pub(super) fn expire(&mut self, task: TaskId) {
        let Some(key) = self.ended.remove(&task) else {
            return;
        };
        if self.keys.get(&key).is_some_and(|r| r.task == task) {
            self.keys.remove(&key);
        }
    }

    /// The ended tasks' keys, for a snapshot (live tasks' keys are in their records):
    /// `(key, task, ended at)`, by key.
    pub(super) fn ended_records(&self) -> Vec<(String, TaskId, Time)> {
        self.keys
            .iter()
            .filter_map(|(key, r)| Some((key.clone(), r.task, r.ended_at?)))
            .collect()
    }

    /// Restores an ended task's key from a snapshot; its expiry follows from the
    /// keys' window, and is returned to be queued. A key that has run out by `now` is
    /// not kept.
    pub(super) fn restore_ended(
        &mut self,
        key: String,
        task: TaskId,
        ended_at: Time,
        now: Time,
    ) -> Option<Time> {
        let mut until = None;
        if let Some(window) = self.window {
            let at = ended_at + window;
            if at <= now {
                return None;
            }
            self.ended.insert(task, key.clone());
            until = Some(at);
        }
        self.keys.insert(
            key,
            KeyRecord {
                task,
                ended_at: Some(ended_at),
                fingerprint: None,
            },
        );
        until
    }
}

impl super::Scheduler {
    /// Submits `task` unless its [key](NewTask::key) is held, in one step: a caller
    /// that repeats a request with its idempotency key asks once, and no two repeats
    /// can both find the key free. A held key is not an input (nothing changes, and
    /// nothing is journaled); it comes back as [`KeyedSubmission::Existing`] if the
    /// task's [fingerprint](NewTask::fingerprint) matches the one the key was kept
    /// with, [`KeyedSubmission::Reused`] if not. Unlike
    /// [`submit`](crate::Scheduler::submit), a repeat leaves no rejected task behind.
    ///
    /// A key is held as `submit` at `now` would see it: an ended task's key whose
    /// window has run out by `now` is free, though its timer has not fired yet.
    ///
    /// # Errors
    /// As [`submit`](crate::Scheduler::submit).
    pub fn submit_keyed(
        &mut self,
        now: Time,
        task: NewTask,
    ) -> Result<KeyedSubmission, SubmitError> {
        if let Some(extra) = task.extra.as_deref()
            && let Some((key, record)) = extra
                .key
                .as_ref()
                .and_then(|key| Some((key, self.keys.get_at(key, now)?)))
        {
            let key = key.clone();
            return Ok(if record.matches(extra.fingerprint) {
                KeyedSubmission::Existing { key, record }
            } else {
                KeyedSubmission::Reused { key, record }
            });
        }
        self.submit(now, task).map(KeyedSubmission::Submitted)
    }

    /// A journal's [`Fingerprints`](crate::JournalEntry::Fingerprints) entry: the
    /// fingerprints of the submission replayed next.
    pub(crate) fn announce_fingerprints(&mut self, fingerprints: Vec<Option<Fingerprint>>) {
        self.keys.announce(fingerprints);
    }

    /// The fingerprints announced for the submission being replayed, one per task
    /// (empty if none were).
    pub(crate) fn take_announced_fingerprints(&mut self) -> Vec<Option<Fingerprint>> {
        self.keys.take_announced()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    #[test]
    fn an_ended_key_is_held_for_the_window_then_let_go() {
        let mut keys = IdempotencyKeys::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        assert_eq!(
            keys.get("a"),
            Some(KeyRecord {
                task: TaskId(1),
                ended_at: None,
                fingerprint: None
            })
        );
        assert_eq!(keys.ended("a", TaskId(1), at(10)), Some(at(110)));
        assert!(!keys.lets_go_at(TaskId(1), at(109)));
        assert!(keys.lets_go_at(TaskId(1), at(110)));
        assert_eq!(
            keys.get("a"),
            Some(KeyRecord {
                task: TaskId(1),
                ended_at: Some(at(10)),
                fingerprint: None
            })
        );
        keys.expire(TaskId(1));
        assert_eq!(keys.get("a"), None);
        assert!(!keys.lets_go_at(TaskId(1), at(110)));
        assert!(keys.ended_records().is_empty());
    }

    #[test]
    fn a_child_never_takes_over_a_key_and_its_end_leaves_it() {
        let mut keys = IdempotencyKeys::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        keys.claim("a".into(), TaskId(2));
        assert_eq!(keys.ended("a", TaskId(2), at(5)), None);
        assert_eq!(
            keys.get("a").map(|r| (r.task, r.ended_at)),
            Some((TaskId(1), None))
        );
        keys.expire(TaskId(2));
        assert!(keys.get("a").is_some());
    }

    #[test]
    fn a_zero_window_forgets_at_once_and_no_window_never_does() {
        let mut zero = IdempotencyKeys::new(Some(Duration::ZERO));
        zero.claim("a".into(), TaskId(1));
        assert_eq!(zero.ended("a", TaskId(1), at(1)), None);
        assert_eq!(zero.get("a"), None);

        let mut forever = IdempotencyKeys::new(None);
        forever.claim("a".into(), TaskId(1));
        assert_eq!(forever.ended("a", TaskId(1), at(1)), None);
        assert!(!forever.lets_go_at(TaskId(1), Time::MAX));
        assert_eq!(forever.get("a").and_then(|r| r.ended_at), Some(at(1)));
    }

    #[test]
    fn restored_keys_expire_by_the_window_and_run_out_ones_are_dropped() {
        let mut keys = IdempotencyKeys::new(Some(Duration::from_secs(100)));
        assert_eq!(
            keys.restore_ended("old".into(), TaskId(1), at(0), at(150)),
            None
        );
        assert_eq!(
            keys.restore_ended("new".into(), TaskId(2), at(100), at(150)),
            Some(at(200))
        );
        assert_eq!(keys.get("old"), None);
        assert!(keys.lets_go_at(TaskId(2), at(200)));
        assert_eq!(
            keys.ended_records(),
            vec![("new".to_owned(), TaskId(2), at(100))]
        );
    }
}
