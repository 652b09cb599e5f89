//! The timer queue: every moment the scheduler acts on, in one `(time, seq)` order with
//! one sequence counter — task sleeps, task deadlines, the ends of kinds' 429
//! back-offs, the eviction of ended tasks' results when their retention runs out, and
//! the release of ended tasks' idempotency keys when their window does.
//!
//! The entries are kept in two heaps of the same [`Timer`]s, by who reads them:
//! - wake-ups (sleeps, deadlines, back-off ends): what
//!   [`poll_timeout`](super::Scheduler::poll_timeout) answers and
//!   [`handle_timeout`](super::Scheduler::handle_timeout) fires;
//! - expiries (retention, keys): acted on by the next clock move, whatever call brings
//!   it, and never a reason to wake — a driver that runs until nothing is left to wake
//!   for must not move time a retention period (or a day's key window) ahead.
//!
//! One heap for both would have `poll_timeout` look past every pending expiry to find
//! the next wake-up.
//!
//! Entries are deleted lazily: a task that sleeps again, gets a new deadline, is
//! forgotten, or a back-off that is lengthened leaves its old entry behind, and whoever
//! reads the queue checks the entry still stands (the one rule for every kind,
//! [`standing`](super::standing::standing), which reads the owners of what the timers
//! are for) before acting on it. The queue itself reads nothing but its entries.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use crate::id::TaskId;
use crate::time::Time;

/// The index of an entry that is not a task's sleep or deadline (an ended task's result
/// or key is found by its id, which is never reused).
pub(super) const NO_INDEX: u32 = u32::MAX;

/// The task of an entry that is for a gate, not a task (task ids start at 1).
pub(super) const NO_TASK: TaskId = TaskId(0);

/// What a timer is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// A task's sleep ends: it may wake.
    Sleep,
    /// A task's deadline passes: it fails if it has not ended.
    Deadline,
    /// A kind's 429 back-off ends: its gate may send again (`index` is the gate's number,
    /// [`RequestGates::gate_number`](super::gates::RequestGates::gate_number)).
    Backoff,
    /// An ended task's retention runs out: its result is evicted.
    Retention,
    /// An ended task's idempotency window runs out: its key is let go.
    Key,
    /// A schedule has something to do: a fire, a busy run's retry, a buffered run's
    /// turn (`index` is the schedule's index, `task` its number).
    Schedule,
}

impl TimerKind {
    /// Whether the scheduler wakes for it (otherwise the next clock move acts on it).
    #[inline]
    fn wakes(self) -> bool {
        matches!(
            self,
            TimerKind::Sleep | TimerKind::Deadline | TimerKind::Backoff | TimerKind::Schedule
        )
    }
}

/// One timer: when, its place among timers of the same time, what it is for (the task
/// at `index` with id `task`; for a back-off end, the gate numbered `index`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: Time,
    pub(super) seq: u64,
    pub(super) index: u32,
    pub(super) task: TaskId,
    pub(super) kind: TimerKind,
}

/// What a wake-up entry says when the next wake-up is looked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// It stands, and the scheduler wakes at its time.
    At,
    /// It stands, but does not decide a wake-up now: a back-off end while its gate holds
    /// no request, is at its cap of requests in flight, or has a rate window that holds
    /// its next request longer. It stays, for when that changes.
    NotNow,
    /// It no longer stands: dropped.
    Gone,
}

/// Every timer, and how long ended tasks' results are kept.
#[derive(Debug)]
pub(super) struct Timers {
    /// The last sequence number given (snapshots keep it).
    seq: u64,
    /// Sleeps, deadlines and back-off ends.
    wake: BinaryHeap<Reverse<Timer>>,
    /// Retention and key expiries.
    expire: BinaryHeap<Reverse<Timer>>,
    /// The due timers being handled (kept to reuse its memory).
    due: Vec<Timer>,
    /// Wake-ups that stand but do not decide the next one, while it is looked for.
    aside: Vec<Timer>,
    /// During a restore: the last number given to an entry rebuilt from its owner.
    rebuilt: u64,
    /// How long an ended task's result is kept; `None`: until it is forgotten.
    retention: Option<Duration>,
}

impl Timers {
    pub(super) fn new(retention: Option<Duration>) -> Timers {
        Timers {
            seq: 0,
            wake: BinaryHeap::new(),
            expire: BinaryHeap::new(),
            due: Vec::new(),
            aside: Vec::new(),
            rebuilt: 0,
            retention,
        }
    }

    /// The heap entries of `kind` go in.
    #[inline]
    fn heap(&mut self, kind: TimerKind) -> &mut BinaryHeap<Reverse<Timer>> {
        if kind.wakes() {
            &mut self.wake
        } else {
            &mut self.expire
        }
    }

    /// Sets a timer of `kind` at `at` for the task at `index` (or the gate numbered
    /// `index`).
    #[inline]
    pub(super) fn set(&mut self, kind: TimerKind, at: Time, index: u32, task: TaskId) {
        self.seq += 1;
        self.push(kind, at, self.seq, index, task);
    }

    /// Queues a timer numbered `seq` in the heap its kind goes in.
    fn push(&mut self, kind: TimerKind, at: Time, seq: u64, index: u32, task: TaskId) {
        self.heap(kind).push(Reverse(Timer {
            at,
            seq,
            index,
            task,
            kind,
        }));
    }

    /// The time of the earliest wake-up that decides one ([`wakes`](super::standing::wakes), given as
    /// `wake`);
    /// those that no longer stand are dropped on the way.
    pub(super) fn next(&mut self, mut wake: impl FnMut(&Timer) -> Wake) -> Option<Time> {
        let mut next = None;
        while let Some(Reverse(timer)) = self.wake.peek() {
            match wake(timer) {
                Wake::At => {
                    next = Some(timer.at);
                    break;
                }
                Wake::NotNow => self.aside.push(*timer),
                Wake::Gone => {}
            }
            self.wake.pop();
        }
        // Back-off ends only, so at most one per gate.
        for timer in self.aside.drain(..) {
            self.wake.push(Reverse(timer));
        }
        next
    }

    /// Takes every wake-up due at or before `now`, in `(time, seq)` order, stale ones
    /// included. Give the list back with [`done`](Timers::done).
    pub(super) fn take_due(&mut self, now: Time) -> Vec<Timer> {
        let mut due = std::mem::take(&mut self.due);
        while let Some(Reverse(timer)) = self.wake.peek() {
            if timer.at > now {
                break;
            }
            due.push(*timer);
            self.wake.pop();
        }
        due
    }

    /// The list [`take_due`](Timers::take_due) lent, handled.
    pub(super) fn done(&mut self, mut due: Vec<Timer>) {
        due.clear();
        self.due = due;
    }

    /// How long ended tasks' results are kept.
    pub(super) fn retention(&self) -> Option<Duration> {
        self.retention
    }

    /// Task `id` ended at `now`: its result is evicted when retention runs out.
    pub(super) fn retain(&mut self, id: TaskId, now: Time) {
        if let Some(ttl) = self.retention {
            self.set(TimerKind::Retention, now + ttl, NO_INDEX, id);
        }
    }

    /// Whether an expiry is due at `now`.
    #[inline]
    pub(super) fn expiring(&self, now: Time) -> bool {
        self.expire.peek().is_some_and(|Reverse(t)| t.at <= now)
    }

    /// The next expiry due at `now`, in `(time, seq)` order (stale ones included): a
    /// fixed retention makes results go in the order their tasks ended.
    pub(super) fn expired(&mut self, now: Time) -> Option<Timer> {
        if !self.expiring(now) {
            return None;
        }
        self.expire.pop().map(|Reverse(t)| t)
    }

    /// The last sequence number given (for a snapshot).
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// The standing timers of `kind` (`stands` is
    /// [`standing`](super::standing::standing)), by `(time, seq)` (for a
    /// snapshot).
    pub(super) fn standing(&self, kind: TimerKind, stands: impl Fn(&Timer) -> bool) -> Vec<Timer> {
        let heap = if kind.wakes() {
            &self.wake
        } else {
            &self.expire
        };
        let mut out: Vec<Timer> = heap
            .iter()
            .map(|Reverse(t)| *t)
            .filter(|t| t.kind == kind && stands(t))
            .collect();
        out.sort_unstable();
        out
    }

    /// Puts back the last sequence number a snapshot recorded.
    pub(super) fn restore_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// Puts back a timer a snapshot recorded, with its sequence number.
    pub(super) fn restore(&mut self, timer: Timer) {
        self.heap(timer.kind).push(Reverse(timer));
    }

    /// Puts back a timer a snapshot does not record but its owner's data implies (a
    /// retention from the recorded queue of results, a key from its record, a back-off
    /// end from its gate), numbered in the order given, below the recorded counter:
    /// the counter stays as recorded, so the restored scheduler numbers what comes next
    /// as the snapshotted one does. Every one of these stood for an entry numbered at
    /// most the counter, so there are no more of them than it; call
    /// [`rebuilt`](Timers::rebuilt) after the last.
    pub(super) fn restore_derived(&mut self, kind: TimerKind, at: Time, index: u32, task: TaskId) {
        self.rebuilt += 1;
        self.push(kind, at, self.rebuilt, index, task);
    }

    /// The derived timers are back. A snapshot from before they were counted may hold
    /// more of them than its counter: the counter then moves past them, so that what
    /// comes next still sorts after them.
    pub(super) fn rebuilt(&mut self) {
        self.seq = self.seq.max(self.rebuilt);
        self.rebuilt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    #[test]
    fn timers_come_due_by_time_then_by_the_order_set() {
        let mut timers = Timers::new(None);
        timers.set(TimerKind::Deadline, at(5), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(2), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(5), 0, TaskId(2));
        timers.set(TimerKind::Backoff, at(5), 0, NO_TASK);
        let due = timers.take_due(at(5));
        let order: Vec<(u64, TimerKind)> = due
            .iter()
            .map(|t| (t.at.as_duration().as_secs(), t.kind))
            .collect();
        assert_eq!(
            order,
            [
                (2, TimerKind::Sleep),
                (5, TimerKind::Deadline),
                (5, TimerKind::Sleep),
                (5, TimerKind::Backoff)
            ]
        );
        timers.done(due);
        assert!(timers.take_due(Time::MAX).is_empty());
        assert_eq!(timers.seq(), 4);
    }

    #[test]
    fn entries_rebuilt_on_restore_keep_their_order_and_sort_before_new_ones() {
        let mut timers = Timers::new(Some(Duration::from_secs(10)));
        timers.restore_seq(2);
        timers.restore_derived(TimerKind::Retention, at(10), NO_INDEX, TaskId(7));
        timers.restore_derived(TimerKind::Retention, at(10), NO_INDEX, TaskId(4));
        timers.rebuilt();
        assert_eq!(timers.seq(), 2);
        timers.retain(TaskId(1), at(0));
        let order: Vec<TaskId> = std::iter::from_fn(|| timers.expired(at(10)))
            .map(|t| t.task)
            .collect();
        assert_eq!(order, [TaskId(7), TaskId(4), TaskId(1)]);

        // A snapshot from before every entry was numbered: the counter moves past them.
        let mut old = Timers::new(None);
        old.restore_seq(1);
        for task in [1, 2, 3] {
            old.restore_derived(TimerKind::Key, at(5), NO_INDEX, TaskId(task));
        }
        old.rebuilt();
        assert_eq!(old.seq(), 3);
    }
}
