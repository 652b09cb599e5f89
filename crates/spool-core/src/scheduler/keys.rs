//! Idempotency keys: which task holds a caller's key, while it lives and for a window
//! after it ends, so that a key runs at most once whatever the result retention says.
//! The ended part is kept in snapshots, so a store remembers it across restarts.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{TaskId, Time};

/// How long an ended task's key is remembered by default: a day.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// Who holds a key ([`Scheduler::key`](crate::Scheduler::key)).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyRecord {
    /// The task submitted with the key.
    pub task: TaskId,
    /// When it ended; `None` while it is live.
    pub ended_at: Option<Time>,
}

/// The keys held by live tasks and, within the window, by ended ones.
#[derive(Clone, Debug)]
pub(super) struct KeyIndex {
    /// How long an ended task's key is kept; `None`: as long as the scheduler (and the
    /// store it is journaled to) lives.
    window: Option<Duration>,
    keys: BTreeMap<String, KeyRecord>,
    /// Ended tasks' keys by when they are let go (task ids make the order total).
    expiry: BTreeMap<(Time, TaskId), String>,
}

impl KeyIndex {
    pub(super) fn new(window: Option<Duration>) -> KeyIndex {
        KeyIndex {
            window,
            keys: BTreeMap::new(),
            expiry: BTreeMap::new(),
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

    /// `task` takes `key`, unless another task holds it (a spawned child never takes
    /// over another task's key; a submission with a held key was refused before).
    pub(super) fn claim(&mut self, key: String, task: TaskId) {
        self.keys.entry(key).or_insert(KeyRecord {
            task,
            ended_at: None,
        });
    }

    /// `task`, which may hold `key`, ended at `now`: the key is kept for the window.
    pub(super) fn ended(&mut self, key: &str, task: TaskId, now: Time) {
        let Some(record) = self.keys.get_mut(key) else {
            return;
        };
        if record.task != task || record.ended_at.is_some() {
            return;
        }
        match self.window {
            Some(window) if window.is_zero() => {
                self.keys.remove(key);
            }
            Some(window) => {
                record.ended_at = Some(now);
                self.expiry.insert((now + window, task), key.to_owned());
            }
            None => record.ended_at = Some(now),
        }
    }

    /// Lets go of the ended tasks' keys whose window has run out by `now`.
    pub(super) fn expire(&mut self, now: Time) {
        while let Some(entry) = self.expiry.first_entry() {
            if entry.key().0 > now {
                return;
            }
            let ((_, task), key) = entry.remove_entry();
            if self.keys.get(&key).is_some_and(|r| r.task == task) {
                self.keys.remove(&key);
            }
        }
    }

    /// When the next ended key is let go, if any is waiting to be.
    pub(super) fn next_expiry(&self) -> Option<Time> {
        self.expiry.keys().next().map(|(at, _)| *at)
    }

    /// The ended tasks' keys, for a snapshot (live tasks' keys are in their records):
    /// `(key, task, ended at)`, by key.
    pub(super) fn ended_records(&self) -> Vec<(String, TaskId, Time)> {
        self.keys
            .iter()
            .filter_map(|(key, r)| Some((key.clone(), r.task, r.ended_at?)))
            .collect()
    }

    /// Restores an ended task's key from a snapshot; its expiry follows from this
    /// index's window. A key that has run out by `now` is not kept.
    pub(super) fn restore_ended(&mut self, key: String, task: TaskId, ended_at: Time, now: Time) {
        if let Some(window) = self.window {
            let until = ended_at + window;
            if until <= now {
                return;
            }
            self.expiry.insert((until, task), key.clone());
        }
        self.keys.insert(
            key,
            KeyRecord {
                task,
                ended_at: Some(ended_at),
            },
        );
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
        let mut keys = KeyIndex::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        assert_eq!(
            keys.get("a"),
            Some(KeyRecord {
                task: TaskId(1),
                ended_at: None
            })
        );
        keys.ended("a", TaskId(1), at(10));
        assert_eq!(keys.next_expiry(), Some(at(110)));
        keys.expire(at(109));
        assert_eq!(
            keys.get("a"),
            Some(KeyRecord {
                task: TaskId(1),
                ended_at: Some(at(10))
            })
        );
        keys.expire(at(110));
        assert_eq!(keys.get("a"), None);
        assert_eq!(keys.next_expiry(), None);
        assert!(keys.ended_records().is_empty());
    }

    #[test]
    fn a_child_never_takes_over_a_key_and_its_end_leaves_it() {
        let mut keys = KeyIndex::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        keys.claim("a".into(), TaskId(2));
        keys.ended("a", TaskId(2), at(5));
        assert_eq!(
            keys.get("a").map(|r| (r.task, r.ended_at)),
            Some((TaskId(1), None))
        );
        assert_eq!(keys.next_expiry(), None);
    }

    #[test]
    fn a_zero_window_forgets_at_once_and_no_window_never_does() {
        let mut zero = KeyIndex::new(Some(Duration::ZERO));
        zero.claim("a".into(), TaskId(1));
        zero.ended("a", TaskId(1), at(1));
        assert_eq!(zero.get("a"), None);

        let mut forever = KeyIndex::new(None);
        forever.claim("a".into(), TaskId(1));
        forever.ended("a", TaskId(1), at(1));
        forever.expire(Time::MAX);
        assert_eq!(forever.get("a").and_then(|r| r.ended_at), Some(at(1)));
        assert_eq!(forever.next_expiry(), None);
    }

    #[test]
    fn restored_keys_expire_by_the_window_and_run_out_ones_are_dropped() {
        let mut keys = KeyIndex::new(Some(Duration::from_secs(100)));
        keys.restore_ended("old".into(), TaskId(1), at(0), at(150));
        keys.restore_ended("new".into(), TaskId(2), at(100), at(150));
        assert_eq!(keys.get("old"), None);
        assert_eq!(keys.next_expiry(), Some(at(200)));
        assert_eq!(
            keys.ended_records(),
            vec![("new".to_owned(), TaskId(2), at(100))]
        );
    }
}
