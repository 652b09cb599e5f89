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
//! reads the queue checks the entry still stands ([`standing`], the one rule for every
//! kind) before acting on it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use super::gates::RequestGates;
use super::keys::KeyIndex;
use super::{SlotPhase, TaskTable};
use crate::schedule::Schedules;
use crate::{TaskId, Time};

/// The slot of an entry that is not a task's sleep or deadline (an ended task's result
/// or key is found by its id, which is never reused).
pub(super) const NO_SLOT: u32 = u32::MAX;

/// The task of an entry that is for a gate, not a task (task ids start at 1).
pub(super) const NO_TASK: TaskId = TaskId(0);

/// What a timer is for.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// A task's sleep ends: it may wake.
    Sleep,
    /// A task's deadline passes: it fails if it has not ended.
    Deadline,
    /// A kind's 429 back-off ends: its gate may send again (`slot` is the gate's number,
    /// [`RequestGates::gate_number`]).
    Backoff,
    /// An ended task's retention runs out: its result is evicted.
    Retention,
    /// An ended task's idempotency window runs out: its key is let go.
    Key,
    /// A schedule has something to do: a fire, a busy run's retry, a buffered run's
    /// turn (`slot` is the schedule's slot, `task` its number).
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
/// in `slot` with id `task`; for a back-off end, the gate numbered `slot`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Timer {
    pub(super) at: Time,
    pub(super) seq: u64,
    pub(super) slot: u32,
    pub(super) task: TaskId,
    pub(super) kind: TimerKind,
}

/// Whether `timer` still stands at `now` — the one rule, kind by kind:
/// - a sleep: its task is in its slot and still sleeps until the timer's time;
/// - a deadline: its task is in its slot, has not ended, and its deadline is the
///   timer's time;
/// - a back-off end: its gate still backs off until the timer's time, and that is
///   still to come (a back-off that has ended wakes no one);
/// - a retention: its task is in the table and has ended (it was not forgotten);
/// - a key: its task still holds its key, let go at the timer's time;
/// - a schedule's: the schedule is in its slot, with its number, and its timer is set
///   for the timer's time.
pub(super) fn standing(
    timer: &Timer,
    tasks: &TaskTable,
    keys: &KeyIndex,
    gates: &RequestGates,
    schedules: &Schedules,
    now: Time,
) -> bool {
    match timer.kind {
        TimerKind::Sleep => tasks
            .slots()
            .get(timer.slot as usize)
            .is_some_and(|t| t.id == timer.task && t.timer == timer.at),
        TimerKind::Deadline => tasks.slots().get(timer.slot as usize).is_some_and(|t| {
            t.id == timer.task
                && t.phase != SlotPhase::Done
                && t.family.as_ref().and_then(|f| f.deadline) == Some(timer.at)
        }),
        TimerKind::Backoff => timer.at > now && gates.backoff_until(timer.slot) == Some(timer.at),
        TimerKind::Retention => tasks
            .find(timer.task)
            .is_some_and(|(_, t)| t.phase == SlotPhase::Done),
        TimerKind::Key => keys.lets_go_at(timer.task, timer.at),
        TimerKind::Schedule => schedules
            .get_uid(timer.slot, timer.task.0)
            .is_some_and(|e| e.timer == timer.at),
    }
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

/// Whether wake-up `timer` decides when the scheduler wakes: [`standing`], and for a
/// back-off end, [`RequestGates::backoff_decides`].
pub(super) fn wakes(
    timer: &Timer,
    tasks: &TaskTable,
    keys: &KeyIndex,
    gates: &mut RequestGates,
    schedules: &Schedules,
    now: Time,
) -> Wake {
    if !standing(timer, tasks, keys, gates, schedules, now) {
        return Wake::Gone;
    }
    if timer.kind == TimerKind::Backoff
        && !gates.backoff_decides(timer.slot, timer.at, now, tasks.slots())
    {
        return Wake::NotNow;
    }
    Wake::At
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

    /// Sets a timer of `kind` at `at` for the task in `slot` (or the gate numbered
    /// `slot`).
    #[inline]
    pub(super) fn set(&mut self, kind: TimerKind, at: Time, slot: u32, task: TaskId) {
        self.seq += 1;
        self.push(kind, at, self.seq, slot, task);
    }

    /// Queues a timer numbered `seq` in the heap its kind goes in.
    fn push(&mut self, kind: TimerKind, at: Time, seq: u64, slot: u32, task: TaskId) {
        self.heap(kind).push(Reverse(Timer {
            at,
            seq,
            slot,
            task,
            kind,
        }));
    }

    /// The time of the earliest wake-up that decides one ([`wakes`], given as `wake`);
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
            self.set(TimerKind::Retention, now + ttl, NO_SLOT, id);
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

    /// The standing timers of `kind` (`stands` is [`standing`]), by `(time, seq)` (for a
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
    pub(super) fn restore_derived(&mut self, kind: TimerKind, at: Time, slot: u32, task: TaskId) {
        self.rebuilt += 1;
        self.push(kind, at, self.rebuilt, slot, task);
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
    use crate::limiter::Gate;
    use crate::pending::PendingSet;
    use crate::task::Family;
    use crate::{Kind, Priority, RequestKey, RequestLimits};

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    /// A task with id `id`, sleeping until `sleep`, with deadline `deadline`.
    fn slot(
        id: u64,
        sleep: Time,
        deadline: Option<Time>,
        phase: SlotPhase,
    ) -> super::super::TaskSlot {
        super::super::TaskSlot {
            id: TaskId(id),
            body: super::super::Body::Live(Box::new(crate::task_fn("t", |_| crate::Step::Wait))),
            timer: sleep,
            created_at: Time::ZERO,
            next_request: 1,
            in_flight: 0,
            agent: crate::AgentId::DEFAULT,
            phase,
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
        }
    }

    /// A table of `slots`, the first in slot 0.
    fn table(slots: Vec<super::super::TaskSlot>) -> TaskTable {
        let mut tasks = TaskTable::new();
        tasks.restore(slots, 10);
        tasks
    }

    /// A sleeping task 1 in slot 0, with deadline `deadline`.
    fn sleeper(sleep: Time, deadline: Option<Time>) -> TaskTable {
        table(vec![slot(1, sleep, deadline, SlotPhase::Waiting)])
    }

    /// The owners the rule reads, with nothing in them.
    fn owners() -> (KeyIndex, RequestGates) {
        (KeyIndex::new(None), RequestGates::new(RequestLimits::new()))
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
    fn the_next_timer_skips_what_no_longer_stands() {
        let tasks = sleeper(at(7), Some(at(9)));
        let (keys, mut gates) = owners();
        let mut timers = Timers::new(None);
        // A sleep the task replaced, a deadline it replaced, one for a task gone.
        timers.set(TimerKind::Sleep, at(3), 0, TaskId(1));
        timers.set(TimerKind::Deadline, at(4), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(5), 0, TaskId(2));
        timers.set(TimerKind::Deadline, at(9), 0, TaskId(1));
        timers.set(TimerKind::Sleep, at(7), 0, TaskId(1));
        let now = Time::ZERO;
        let schedules = Schedules::default();
        let next = timers.next(|t| wakes(t, &tasks, &keys, &mut gates, &schedules, now));
        assert_eq!(next, Some(at(7)));
        let stands = |t: &Timer| standing(t, &tasks, &keys, &gates, &Schedules::default(), now);
        let sleeps = timers.standing(TimerKind::Sleep, stands);
        let deadlines = timers.standing(TimerKind::Deadline, stands);
        assert_eq!((sleeps.len(), sleeps[0].at), (1, at(7)));
        assert_eq!((deadlines.len(), deadlines[0].at), (1, at(9)));
        let none = sleeper(Time::MAX, None);
        assert_eq!(
            timers.next(|t| wakes(t, &none, &keys, &mut gates, &Schedules::default(), now)),
            None
        );
    }

    #[test]
    fn results_are_evicted_when_retention_runs_out_in_the_order_they_ended() {
        let mut timers = Timers::new(Some(Duration::from_secs(10)));
        // Tasks 3, 1 and 2 end in that order, 3 and 1 at the same time; 1 is forgotten.
        timers.retain(TaskId(3), at(0));
        timers.retain(TaskId(1), at(0));
        timers.retain(TaskId(2), at(1));
        let tasks = table(vec![
            slot(2, Time::MAX, None, SlotPhase::Done),
            slot(3, Time::MAX, None, SlotPhase::Done),
        ]);
        let (keys, gates) = owners();
        let stands = |t: &Timer| standing(t, &tasks, &keys, &gates, &Schedules::default(), at(11));
        assert_eq!(timers.standing(TimerKind::Retention, stands).len(), 2);
        // Expiries are no wake-ups.
        assert_eq!(timers.next(|_| Wake::At), None);
        assert!(!timers.expiring(at(9)));
        assert_eq!(timers.expired(at(9)), None);
        assert!(timers.expiring(at(10)));
        let due: Vec<(TaskId, bool)> = std::iter::from_fn(|| timers.expired(at(11)))
            .map(|t| (t.task, stands(&t)))
            .collect();
        assert_eq!(
            due,
            [(TaskId(3), true), (TaskId(1), false), (TaskId(2), true)]
        );
        assert!(!timers.expiring(Time::MAX));

        let mut forever = Timers::new(None);
        forever.retain(TaskId(1), at(0));
        assert!(!forever.expiring(Time::MAX));
    }

    #[test]
    fn a_key_is_let_go_when_its_window_runs_out_and_not_after_it_was_dropped() {
        let mut keys = KeyIndex::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        keys.claim("b".into(), TaskId(2));
        let until = keys.ended("a", TaskId(1), at(10));
        assert_eq!(until, Some(at(110)));
        let mut timers = Timers::new(None);
        timers.set(TimerKind::Key, at(110), NO_SLOT, TaskId(1));
        // A key entry for a task whose key is live, or at another time: stale.
        timers.set(TimerKind::Key, at(110), NO_SLOT, TaskId(2));
        timers.set(TimerKind::Key, at(50), NO_SLOT, TaskId(1));
        let tasks = table(Vec::new());
        let gates = RequestGates::new(RequestLimits::new());
        assert_eq!(timers.next(|_| Wake::At), None);
        let stands = |t: &Timer, keys: &KeyIndex| {
            standing(t, &tasks, keys, &gates, &Schedules::default(), at(110))
        };
        let stale = timers.expired(at(109)).expect("the one at 50 is due");
        assert!(!stands(&stale, &keys));
        assert_eq!(timers.expired(at(109)), None);
        let due = timers.expired(at(110)).expect("due at 110");
        assert_eq!((due.task, due.kind), (TaskId(1), TimerKind::Key));
        assert!(stands(&due, &keys));
        keys.expire(due.task);
        assert_eq!(keys.get("a"), None);
        assert!(!stands(&due, &keys));
        let other = timers.expired(at(110)).expect("task 2's");
        assert!(!stands(&other, &keys));
        assert!(keys.get("b").is_some());
    }

    #[test]
    fn a_back_off_end_wakes_while_its_gate_holds_a_request_and_a_longer_one_replaces_it() {
        let tasks = table(Vec::new());
        let keys = KeyIndex::new(None);
        let mut gates = RequestGates::new(RequestLimits::new());
        let number = gates.gate_number(&Kind::Llm);
        let back_off_until = |gates: &mut RequestGates, until| {
            let gate = gates
                .gates
                .entry(Kind::Llm)
                .or_insert_with(|| Gate::new(None));
            gate.backoff.until = until;
        };
        back_off_until(&mut gates, at(5));
        let mut timers = Timers::new(None);
        timers.set(TimerKind::Backoff, at(5), number, NO_TASK);
        let now = at(1);
        let next = |timers: &mut Timers, gates: &mut RequestGates, now| {
            timers.next(|t| wakes(t, &tasks, &keys, gates, &Schedules::default(), now))
        };
        // Nothing held: no wake-up, but the entry stays for when something is.
        assert_eq!(next(&mut timers, &mut gates, now), None);
        gates.hold(
            &Kind::Llm,
            Priority::Normal,
            RequestKey::new(TaskId(1), 1, 0),
        );
        assert_eq!(next(&mut timers, &mut gates, now), Some(at(5)));
        // Lengthened: the old end no longer stands.
        back_off_until(&mut gates, at(8));
        timers.set(TimerKind::Backoff, at(8), number, NO_TASK);
        assert_eq!(next(&mut timers, &mut gates, now), Some(at(8)));
        assert_eq!(timers.standing(TimerKind::Backoff, |_| true).len(), 1);
        // Once it has ended it wakes no one.
        assert_eq!(next(&mut timers, &mut gates, at(8)), None);
    }

    #[test]
    fn a_back_off_end_gives_way_to_a_rate_window_that_frees_later_or_a_full_cap() {
        let tasks = table(Vec::new());
        let keys = KeyIndex::new(None);
        let limits = RequestLimits::new()
            .window(Kind::Llm, 1, Duration::from_secs(10))
            .max_in_flight(Kind::Llm, 2);
        let mut gates = RequestGates::new(limits);
        let number = gates.gate_number(&Kind::Llm);
        let held = RequestKey::new(TaskId(1), 2, 0);
        gates.hold(&Kind::Llm, Priority::Normal, held);
        fn gate(gates: &mut RequestGates) -> &mut Gate {
            gates
                .gates
                .get_mut(&Kind::Llm)
                .expect("holding made the gate")
        }
        // One request sent at 0 fills the window until 10.
        gate(&mut gates).record_send(at(0), RequestKey::new(TaskId(1), 1, 0), 0);
        let mut timers = Timers::new(None);
        let now = at(1);
        let poll = |timers: &mut Timers, gates: &mut RequestGates| {
            let next = timers.next(|t| wakes(t, &tasks, &keys, gates, &Schedules::default(), now));
            (next, gates.free_at(now, tasks.slots()))
        };
        // Backed off until 5: the window, free at 10, decides; the end waits.
        gate(&mut gates).backoff.until = at(5);
        timers.set(TimerKind::Backoff, at(5), number, NO_TASK);
        assert_eq!(poll(&mut timers, &mut gates), (None, Some(at(10))));
        // Until 15: the back-off's end decides, the window gives nothing.
        gate(&mut gates).backoff.until = at(15);
        timers.set(TimerKind::Backoff, at(15), number, NO_TASK);
        assert_eq!(poll(&mut timers, &mut gates), (Some(at(15)), None));
        // At the cap of requests in flight, only an answer frees room.
        gate(&mut gates).in_flight = 2;
        assert_eq!(poll(&mut timers, &mut gates), (None, None));
        gate(&mut gates).in_flight = 1;
        assert_eq!(poll(&mut timers, &mut gates), (Some(at(15)), None));
    }

    #[test]
    fn entries_rebuilt_on_restore_keep_their_order_and_sort_before_new_ones() {
        let mut timers = Timers::new(Some(Duration::from_secs(10)));
        timers.restore_seq(2);
        timers.restore_derived(TimerKind::Retention, at(10), NO_SLOT, TaskId(7));
        timers.restore_derived(TimerKind::Retention, at(10), NO_SLOT, TaskId(4));
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
            old.restore_derived(TimerKind::Key, at(5), NO_SLOT, TaskId(task));
        }
        old.rebuilt();
        assert_eq!(old.seq(), 3);
    }
}
