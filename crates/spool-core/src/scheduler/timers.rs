//! The timer queue: task sleeps and task deadlines in one heap ordered by
//! `(time, seq)`, each entry saying what it is for; and the retention queue of ended
//! tasks' results, due in the order they ended.
//!
//! Entries are deleted lazily: a task that sleeps again or gets a new deadline leaves
//! its old entry behind, and whoever reads the queue checks an entry still stands
//! ([`standing`]) before acting on it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use slab::Slab;

use super::{SlotPhase, TaskSlot};
use crate::{TaskId, Time};

/// What a timer is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// A task's sleep ends: it may wake.
    Sleep,
    /// A task's deadline passes: it fails if it has not ended.
    Deadline,
}

/// One timer: when, its place among timers of the same time, the task it is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: Time,
    pub(super) seq: u64,
    pub(super) slot: u32,
    pub(super) task: TaskId,
    pub(super) kind: TimerKind,
}

/// Whether `timer` still stands: its task is in its slot and still sleeps until, or
/// has its deadline at, the timer's time.
pub(super) fn standing(timer: &Timer, tasks: &Slab<TaskSlot>) -> bool {
    tasks.get(timer.slot as usize).is_some_and(|t| {
        t.id == timer.task
            && match timer.kind {
                TimerKind::Sleep => t.timer == timer.at,
                TimerKind::Deadline => {
                    t.phase != SlotPhase::Done
                        && t.family.as_ref().and_then(|f| f.deadline) == Some(timer.at)
                }
            }
    })
}

/// Sleeps and deadlines, and results waiting to be evicted.
#[derive(Debug)]
pub(super) struct Timers {
    /// The last sequence number given (snapshots keep it).
    seq: u64,
    queue: BinaryHeap<Reverse<Timer>>,
    /// The due timers being handled (kept to reuse its memory).
    due: Vec<Timer>,
    /// How long an ended task's result is kept; `None`: until it is forgotten.
    retention: Option<Duration>,
    /// Ended tasks to evict, in the order they are due (a fixed retention keeps the
    /// order of ending).
    expiry: VecDeque<(Time, TaskId)>,
}

impl Timers {
    pub(super) fn new(retention: Option<Duration>) -> Timers {
        Timers {
            seq: 0,
            queue: BinaryHeap::new(),
            due: Vec::new(),
            retention,
            expiry: VecDeque::new(),
        }
    }

    /// Sets a timer of `kind` at `at` for the task in `slot`.
    #[inline]
    pub(super) fn set(&mut self, kind: TimerKind, at: Time, slot: u32, task: TaskId) {
        self.seq += 1;
        let seq = self.seq;
        self.queue.push(Reverse(Timer {
            at,
            seq,
            slot,
            task,
            kind,
        }));
    }

    /// The time of the earliest timer still standing; stale ones in front are dropped.
    pub(super) fn next(&mut self, tasks: &Slab<TaskSlot>) -> Option<Time> {
        while let Some(Reverse(timer)) = self.queue.peek() {
            if standing(timer, tasks) {
                return Some(timer.at);
            }
            self.queue.pop();
        }
        None
    }

    /// Takes every timer due at or before `now`, in `(time, seq)` order, stale ones
    /// included. Give the list back with [`done`](Timers::done).
    pub(super) fn take_due(&mut self, now: Time) -> Vec<Timer> {
        let mut due = std::mem::take(&mut self.due);
        while let Some(Reverse(timer)) = self.queue.peek() {
            if timer.at > now {
                break;
            }
            due.push(*timer);
            self.queue.pop();
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
            self.expiry.push_back((now + ttl, id));
        }
    }

    /// Whether a result waits to be evicted.
    #[inline]
    pub(super) fn retaining(&self) -> bool {
        !self.expiry.is_empty()
    }

    /// The next result due for eviction at `now`, if one is.
    pub(super) fn expired(&mut self, now: Time) -> Option<TaskId> {
        let &(at, id) = self.expiry.front()?;
        if at > now {
            return None;
        }
        self.expiry.pop_front();
        Some(id)
    }

    /// For a snapshot: the last sequence number, the standing timers of `kind` by
    /// `(time, seq)`, and the results waiting for eviction.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// The standing timers of `kind`, by `(time, seq)` (for a snapshot).
    pub(super) fn standing(&self, kind: TimerKind, tasks: &Slab<TaskSlot>) -> Vec<Timer> {
        let mut out: Vec<Timer> = self
            .queue
            .iter()
            .map(|Reverse(t)| *t)
            .filter(|t| t.kind == kind && standing(t, tasks))
            .collect();
        out.sort_unstable();
        out
    }

    /// The results waiting for eviction, in order (for a snapshot).
    pub(super) fn expiry(&self) -> impl Iterator<Item = &(Time, TaskId)> {
        self.expiry.iter()
    }

    /// Puts back what a snapshot recorded: the sequence number, a timer, the queue of
    /// results to evict.
    pub(super) fn restore_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    /// Puts back a timer a snapshot recorded, with its sequence number.
    pub(super) fn restore(&mut self, timer: Timer) {
        self.queue.push(Reverse(timer));
    }

    /// Puts back the results to evict a snapshot recorded.
    pub(super) fn restore_expiry(&mut self, expiry: impl IntoIterator<Item = (Time, TaskId)>) {
        self.expiry = expiry.into_iter().collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pending::PendingSet;
    use crate::task::Family;

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    /// A table with task 1 in slot 0, sleeping until `sleep`, with deadline `deadline`.
    fn table(sleep: Time, deadline: Option<Time>) -> Slab<TaskSlot> {
        let mut tasks = Slab::new();
        tasks.insert(TaskSlot {
            id: TaskId(1),
            body: super::super::Body::Live(Box::new(crate::task_fn("t", |_| crate::Step::Wait))),
            timer: sleep,
            created_at: Time::ZERO,
            next_request: 1,
            in_flight: 0,
            agent: crate::AgentId::DEFAULT,
            phase: SlotPhase::Waiting,
            wait_any: false,
            timer_fired: false,
            holds_slot: false,
            priority: crate::Priority::Normal,
            pending: PendingSet::Empty,
            family: deadline.map(|deadline| {
                Box::new(Family {
                    deadline: Some(deadline),
                    ..Family::default()
                })
            }),
        });
        tasks
    }

    #[test]
    fn timers_come_due_by_time_then_by_the_order_set() {
        let mut timers = Timers::new(None);
        timers.set(TimerKind::Deadline, at(5), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(2), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(5), 0, TaskId(2));
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
                (5, TimerKind::Sleep)
            ]
        );
        timers.done(due);
        assert!(timers.take_due(Time::MAX).is_empty());
        assert_eq!(timers.seq(), 3);
    }

    #[test]
    fn the_next_timer_skips_what_no_longer_stands() {
        let tasks = table(at(7), Some(at(9)));
        let mut timers = Timers::new(None);
        // A sleep the task replaced, a deadline it replaced, one for a task gone.
        timers.set(TimerKind::Sleep, at(3), 0, TaskId(1));
        timers.set(TimerKind::Deadline, at(4), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(5), 0, TaskId(2));
        timers.set(TimerKind::Deadline, at(9), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(7), 0, TaskId(1));
        assert_eq!(timers.next(&tasks), Some(at(7)));
        let sleeps = timers.standing(TimerKind::Sleep, &tasks);
        let deadlines = timers.standing(TimerKind::Deadline, &tasks);
        assert_eq!((sleeps.len(), sleeps[0].at), (1, at(7)));
        assert_eq!((deadlines.len(), deadlines[0].at), (1, at(9)));
        assert_eq!(timers.next(&table(Time::MAX, None)), None);
    }

    #[test]
    fn results_are_evicted_when_retention_runs_out_in_the_order_they_ended() {
        let mut timers = Timers::new(Some(Duration::from_secs(10)));
        timers.retain(TaskId(1), at(0));
        timers.retain(TaskId(2), at(1));
        assert!(timers.retaining());
        assert_eq!(timers.expired(at(9)), None);
        assert_eq!(timers.expired(at(11)), Some(TaskId(1)));
        assert_eq!(timers.expired(at(11)), Some(TaskId(2)));
        assert!(!timers.retaining());

        let mut forever = Timers::new(None);
        forever.retain(TaskId(1), at(0));
        assert!(!forever.retaining());
    }
}
