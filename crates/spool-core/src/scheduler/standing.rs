//! Whether a timer still stands: the one rule for every kind of timer, which reads the
//! owner of what each is for (the task table, the keys, the request gates, the
//! schedules). The timer queue ([`Timers`](super::timers::Timers)) deletes lazily and
//! asks this rule of each entry it comes to.

use super::Scheduler;
use super::gates::RequestGates;
use super::keys::IdempotencyKeys;
use super::table::{TaskPhase, TaskTable};
use super::timers::{Timer, TimerKind, Wake};
use crate::schedule::Schedules;
use crate::time::Time;

impl Scheduler {
    /// Whether `timer` still stands: the one rule, [`standing`].
    pub(super) fn stands(&self, timer: &Timer) -> bool {
        let (tasks, keys, gates, schedules) =
            (&self.tasks, &self.keys, &self.requests, &self.schedules);
        standing(timer, tasks, keys, gates, schedules, self.now)
    }
}

/// Whether `timer` still stands at `now` — the one rule, kind by kind:
/// - a sleep: its task is at its index and still sleeps until the timer's time;
/// - a deadline: its task is at its index, has not ended, and its deadline is the
///   timer's time;
/// - a back-off end: its gate still backs off until the timer's time, and that is
///   still to come (a back-off that has ended wakes no one);
/// - a retention: its task is in the table and has ended (it was not forgotten);
/// - a key: its task still holds its key, let go at the timer's time;
/// - a schedule's: the schedule is at its index, with its number, and its timer is set
///   for the timer's time.
pub(super) fn standing(
    timer: &Timer,
    tasks: &TaskTable,
    keys: &IdempotencyKeys,
    gates: &RequestGates,
    schedules: &Schedules,
    now: Time,
) -> bool {
    match timer.kind {
        TimerKind::Sleep => tasks
            .entries()
            .get(timer.index as usize)
            .is_some_and(|t| t.id == timer.task && t.timer == timer.at),
        TimerKind::Deadline => tasks.entries().get(timer.index as usize).is_some_and(|t| {
            t.id == timer.task
                && t.phase != TaskPhase::Done
                && t.family.as_ref().and_then(|f| f.deadline) == Some(timer.at)
        }),
        TimerKind::Backoff => timer.at > now && gates.backoff_until(timer.index) == Some(timer.at),
        TimerKind::Retention => tasks
            .find(timer.task)
            .is_some_and(|(_, t)| t.phase == TaskPhase::Done),
        TimerKind::Key => keys.lets_go_at(timer.task, timer.at),
        TimerKind::Schedule => schedules
            .get_uid(timer.index, timer.task.0)
            .is_some_and(|e| e.timer == timer.at),
    }
}

/// Whether wake-up `timer` decides when the scheduler wakes: [`standing`], and for a
/// back-off end, [`RequestGates::backoff_decides`].
pub(super) fn wakes(
    timer: &Timer,
    tasks: &TaskTable,
    keys: &IdempotencyKeys,
    gates: &mut RequestGates,
    schedules: &Schedules,
    now: Time,
) -> Wake {
    if !standing(timer, tasks, keys, gates, schedules, now) {
        return Wake::Gone;
    }
    if timer.kind == TimerKind::Backoff
        && !gates.backoff_decides(timer.index, timer.at, now, tasks.entries())
    {
        return Wake::NotNow;
    }
    Wake::At
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::Gate;
    use crate::pending::PendingSet;
    use crate::scheduler::table::{Body, TaskEntry};
    use crate::scheduler::timers::{NO_INDEX, NO_TASK, Timers};
    use crate::task::Family;
    use crate::{Kind, Priority, RequestKey, RequestLimits, TaskId};

    fn at(secs: u64) -> Time {
        Time::ZERO + Duration::from_secs(secs)
    }

    /// A task with id `id`, sleeping until `sleep`, with deadline `deadline`.
    fn entry(id: u64, sleep: Time, deadline: Option<Time>, phase: TaskPhase) -> TaskEntry {
        TaskEntry {
            id: TaskId(id),
            body: Body::Live(Box::new(crate::task_fn("t", |_| crate::Step::Wait))),
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

    /// A table of `entries`, the first at index 0.
    fn table(entries: Vec<TaskEntry>) -> TaskTable {
        let mut tasks = TaskTable::new(1);
        tasks.restore(entries, 10);
        tasks
    }

    /// A sleeping task 1 at index 0, with deadline `deadline`.
    fn sleeper(sleep: Time, deadline: Option<Time>) -> TaskTable {
        table(vec![entry(1, sleep, deadline, TaskPhase::Waiting)])
    }

    /// The owners the rule reads, with nothing in them.
    fn owners() -> (IdempotencyKeys, RequestGates) {
        (
            IdempotencyKeys::new(None),
            RequestGates::new(RequestLimits::new()),
        )
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
            entry(2, Time::MAX, None, TaskPhase::Done),
            entry(3, Time::MAX, None, TaskPhase::Done),
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
        let mut keys = IdempotencyKeys::new(Some(Duration::from_secs(100)));
        keys.claim("a".into(), TaskId(1));
        keys.claim("b".into(), TaskId(2));
        let until = keys.ended("a", TaskId(1), at(10));
        assert_eq!(until, Some(at(110)));
        let mut timers = Timers::new(None);
        timers.set(TimerKind::Key, at(110), NO_INDEX, TaskId(1));
        // A key entry for a task whose key is live, or at another time: stale.
        timers.set(TimerKind::Key, at(110), NO_INDEX, TaskId(2));
        timers.set(TimerKind::Key, at(50), NO_INDEX, TaskId(1));
        let tasks = table(Vec::new());
        let gates = RequestGates::new(RequestLimits::new());
        assert_eq!(timers.next(|_| Wake::At), None);
        let stands = |t: &Timer, keys: &IdempotencyKeys| {
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
        let keys = IdempotencyKeys::new(None);
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
        let keys = IdempotencyKeys::new(None);
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
            (next, gates.free_at(now, tasks.entries()))
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
}
