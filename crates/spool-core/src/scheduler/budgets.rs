//! Budgets in the scheduler: LLM answers' usage is counted as it arrives, and a new
//! LLM request is checked at the end of the input that made it — it goes, fails at
//! once with [`RequestError::BudgetSpent`], or (the day's budget spent, with
//! [`OnSpent::Wait`](crate::OnSpent::Wait)) is held until the next day.
//!
//! A scheduler with budgets runs its requests through the gates' path (`gating`), so
//! the check costs a scheduler without budgets nothing. The day is the UTC calendar
//! day of the wall clock the scheduler was told (`set_wall_clock`); a scheduler never
//! told one counts days of 24 hours from its time zero.

use std::collections::BTreeSet;
use std::time::Duration;

use super::ready::record_answer;
use super::{Scheduler, TaskPhase};
use crate::budget::{Book, BudgetRecord, Budgets, DAY_SECS, Spend, SpendReport, Usage, Verdict};
use crate::id::{RequestKey, TaskId};
use crate::kind::Kind;
use crate::pending::Out;
use crate::request::{RequestError, Response};
use crate::snapshot::SnapshotData;
use crate::time::Time;
use crate::trace::Cause;

/// The scheduler's budgets and spend, if it has budgets: boxed, so that a scheduler
/// without them pays one word.
#[derive(Debug, Default)]
pub(super) struct Budgeting {
    book: Option<Box<Book>>,
    /// Set by a resend: the requests it puts back were checked when they were made,
    /// and are not checked again.
    pub(super) resending: bool,
}

impl Budgeting {
    /// Budgeting by `budgets`; none counts nothing.
    pub(super) fn new(budgets: Option<Budgets>) -> Budgeting {
        Budgeting {
            book: budgets.map(|b| Box::new(Book::new(b))),
            resending: false,
        }
    }

    /// Whether the scheduler has budgets.
    #[inline(always)]
    pub(super) fn on(&self) -> bool {
        self.book.is_some()
    }

    /// A replay's `Usage` entry: the usage of the answer to `key` that comes next.
    pub(super) fn announce_usage(&mut self, key: RequestKey, usage: &crate::budget::Usage) {
        if let Some(book) = self.book.as_deref_mut() {
            book.announced = Some((key, usage.clone()));
        }
    }

    /// The usage announced for the answer to `key`, taken.
    pub(super) fn take_announced_usage(&mut self, key: RequestKey) -> Option<Usage> {
        let book = self.book.as_deref_mut()?;
        match book.announced.take() {
            Some((k, usage)) if (k.task(), k.number()) == (key.task(), key.number()) => Some(usage),
            _ => None,
        }
    }
}

impl Scheduler {
    /// The budgets the scheduler checks LLM requests against, if it has any.
    pub fn budgets(&self) -> Option<&Budgets> {
        self.budgets.book.as_deref().map(|b| &b.budgets)
    }

    /// Checks LLM requests against `budgets` from now on, keeping what was spent (a
    /// scheduler without budgets starts counting); `None` stops checking and counting.
    /// Not journaled: a driver that starts again under other budgets calls it before
    /// its journal starts, so that the journal starts from a snapshot under them.
    pub fn set_budgets(&mut self, budgets: Option<Budgets>) {
        match (budgets, self.budgets.book.as_deref_mut()) {
            (Some(budgets), Some(book)) => book.budgets = budgets,
            (Some(budgets), None) => self.budgets.book = Some(Box::new(Book::new(budgets))),
            (None, book) => {
                // Requests held for the day's budget go now.
                let held = book
                    .map(|b| std::mem::take(&mut b.held))
                    .unwrap_or_default();
                self.release_held(held);
                self.budgets.book = None;
                self.end_input();
            }
        }
        // Budgets check requests at the end of each input, on the gates' path.
        self.requests.gating |= self.budgets.on();
    }

    /// What task `id` has spent on LLM answers, if the scheduler has budgets and the
    /// task spent anything.
    pub fn task_spend(&self, id: TaskId) -> Option<Spend> {
        self.budgets.book.as_deref()?.tasks.get(&id).copied()
    }

    /// Task `id` ended: its requests held for the next day's budget will never go,
    /// and are no longer counted as held.
    #[inline]
    pub(super) fn budget_task_ended(&mut self, id: TaskId) {
        if let Some(book) = self.budgets.book.as_deref_mut()
            && !book.held.is_empty()
        {
            book.held.retain(|key| key.task() != id);
        }
    }

    /// Task `id` left the table (forgotten, or evicted when its retention ran out):
    /// its spend goes with it; its agent's and the day's keep it.
    pub(super) fn budget_task_removed(&mut self, id: TaskId) {
        if let Some(book) = self.budgets.book.as_deref_mut() {
            book.tasks.remove(&id);
        }
    }

    /// Spend by agent and for the current day, and the requests waiting for the next
    /// day's budget, if the scheduler has budgets.
    pub fn spend(&self) -> Option<SpendReport> {
        let book = self.budgets.book.as_deref()?;
        let day = self.budget_day();
        let agents = self
            .tasks
            .agents()
            .enumerate()
            .map(|(i, name)| {
                let spend = book.agents.get(i).copied().unwrap_or_default();
                (name.to_string(), spend)
            })
            .collect();
        let date = self.schedules.anchor.map(|a| {
            a.wall(self.now)
                .to_zoned_datetime(jiff::tz::TimeZone::UTC)
                .date()
        });
        Some(SpendReport {
            agents,
            date,
            today: book.day_spend(day),
            held: book.held.len(),
            held_until: (!book.held.is_empty())
                .then(|| self.day_start(book.held_day.saturating_add(1))),
        })
    }

    /// The budget day now: days since the Unix epoch by the wall clock (UTC), or days
    /// since time zero without one.
    fn budget_day(&self) -> i64 {
        match self.schedules.anchor {
            Some(anchor) => anchor.wall(self.now).as_second().div_euclid(DAY_SECS),
            None => (self.now.as_duration().as_secs() / DAY_SECS as u64) as i64,
        }
    }

    /// The scheduler's time when budget day `day` begins (now, if it has begun).
    fn day_start(&self, day: i64) -> Time {
        let seconds = day.saturating_mul(DAY_SECS);
        match self.schedules.anchor {
            Some(anchor) => match jiff::Timestamp::from_second(seconds) {
                Ok(wall) => anchor.time(wall, self.now),
                Err(_) => Time::MAX,
            },
            None => {
                let at = Time::ZERO + Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
                at.max(self.now)
            }
        }
    }

    /// When requests held for the day's budget may go: the start of the next day.
    pub(super) fn budget_wake(&self) -> Option<Time> {
        let book = self.budgets.book.as_deref()?;
        (!book.held.is_empty()).then(|| self.day_start(book.held_day.saturating_add(1)))
    }

    /// Counts the usage of an answer to `key` (its task's index now), whether or not
    /// the answer reaches its task: the provider charged for it.
    #[inline(never)]
    pub(super) fn charge_answer(&mut self, key: RequestKey, response: &Response) {
        let Some(usage) = &response.usage else {
            return;
        };
        let day = self.budget_day();
        let task = self
            .tasks
            .entries()
            .get(key.index() as usize)
            .filter(|t| t.id == key.task())
            .map(|t| (t.id, t.agent));
        if let Some(book) = self.budgets.book.as_deref_mut() {
            book.charge(task, usage, day);
        }
    }

    /// At the end of an input: lets the requests held for the day's budget go if a new
    /// day has begun, then checks each new LLM request against the budgets.
    #[inline(never)]
    pub(super) fn check_budgets(&mut self) {
        let resending = std::mem::take(&mut self.budgets.resending);
        let day = self.budget_day();
        let Some(book) = self.budgets.book.as_deref_mut() else {
            return;
        };
        if !book.held.is_empty() && day > book.held_day {
            let held = std::mem::take(&mut book.held);
            self.release_held(held);
        }
        if resending || !self.budgets.book.as_deref().is_some_and(Book::caps) {
            return;
        }
        let mut i = 0;
        while let Some(key) = self.outbox.requests.get(i).copied() {
            match self.verdict(key, day) {
                Verdict::Go => i += 1,
                verdict => {
                    self.outbox.requests.remove(i);
                    self.over_budget(key, verdict, day);
                }
            }
        }
    }

    /// What new request `key` meets: a request of another kind than `llm`, or no
    /// longer waiting to go, goes.
    fn verdict(&self, key: RequestKey, day: i64) -> Verdict {
        let Some(task) = self.tasks.entries().get(key.index() as usize) else {
            return Verdict::Go;
        };
        if task.id != key.task() || task.phase == TaskPhase::Done {
            return Verdict::Go;
        }
        let fresh =
            task.pending.as_slice().iter().any(|p| {
                p.number == key.number() && p.kind == Kind::Llm && p.sent() && !p.counted()
            });
        match self.budgets.book.as_deref() {
            Some(book) if fresh => book.verdict(task.id, task.agent, day),
            _ => Verdict::Go,
        }
    }

    /// Request `key` is over a budget: it fails at once (the task takes the error as
    /// its answer), or is held until the next day.
    fn over_budget(&mut self, key: RequestKey, verdict: Verdict, day: i64) {
        let now = self.now;
        let tracing = self.trace.active();
        let Some(task) = self.tasks.get_mut(key.index()) else {
            return;
        };
        let from = tracing.then(|| task.trace_phase());
        match verdict {
            Verdict::Go => {}
            Verdict::Fail(scope, budget, spend) => {
                let error = RequestError::BudgetSpent {
                    scope,
                    spent: spend.measured(budget),
                    budget: budget.limit,
                };
                let waiting = task.phase == TaskPhase::Waiting;
                if let Some(phase) = &from {
                    let cause = Cause::BudgetSpent {
                        number: key.number(),
                        scope,
                    };
                    self.trace
                        .push(now, task.id, phase.clone(), phase.clone(), cause);
                }
                let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
                let sinks = (&mut self.outbox.in_flight, ready, trace, stats);
                let _ = record_answer(task, key, Err(error), from, waiting, now, sinks);
            }
            Verdict::Wait => {
                let id = task.id;
                let Some(p) = task.pending.in_flight_mut(key.number()) else {
                    return;
                };
                self.outbox.set_out(p, Out::Unsent);
                if let Some(book) = self.budgets.book.as_deref_mut() {
                    book.held.push(key);
                    book.held_day = day;
                }
                if let Some(phase) = from {
                    let cause = Cause::OverBudget {
                        number: key.number(),
                        scope: crate::budget::BudgetScope::Day,
                    };
                    self.trace.push(now, id, phase.clone(), phase, cause);
                }
            }
        }
    }

    /// Lets the `held` requests go, in the order they were held, ahead of the requests
    /// made in this input: each is checked again (the new day's budget may be spent
    /// already). Those whose task ended since are skipped.
    fn release_held(&mut self, held: Vec<RequestKey>) {
        let tracing = self.trace.active();
        let mut released = Vec::with_capacity(held.len());
        for key in held {
            let key = self.locate(key);
            let Some(task) = self.tasks.get_mut(key.index()) else {
                continue;
            };
            if task.id != key.task() || task.phase == TaskPhase::Done {
                continue;
            }
            let (id, phase) = (task.id, tracing.then(|| task.trace_phase()));
            let Some(p) = task.pending.in_flight_mut(key.number()) else {
                continue;
            };
            if !p.unsent() {
                continue;
            }
            self.outbox.set_out(p, Out::Sent);
            if let Some(phase) = phase {
                let cause = Cause::Released {
                    number: key.number(),
                    kind: Kind::Llm,
                };
                self.trace.push(self.now, id, phase.clone(), phase, cause);
            }
            released.push(key);
        }
        for key in released.into_iter().rev() {
            self.outbox.requests.push_front(key);
        }
    }

    /// The budgets and spend as a snapshot keeps them: the spend of tasks in the
    /// table, and the requests still held (keys naming no index).
    pub(super) fn budget_record(&self) -> BudgetRecord {
        let Some(book) = self.budgets.book.as_deref() else {
            return BudgetRecord::default();
        };
        let mut record = book.record(|id| self.tasks.by_id.contains_key(&id));
        record.held.retain(|key| {
            self.tasks.find(key.task()).is_some_and(|(_, t)| {
                t.phase != TaskPhase::Done
                    && t.pending
                        .as_slice()
                        .iter()
                        .any(|p| p.number == key.number() && p.unsent())
            })
        });
        record
    }

    /// Puts back the spend and held requests of the snapshot `d`'s budget record (its
    /// budgets are in the configuration the scheduler was made with); `index_of` gives
    /// a task's index. Called once the tasks and gates are back.
    ///
    /// # Errors
    /// What does not hang together: a day out of the range of wall-clock time, or a
    /// held request named twice, also held at a gate or parked, or not an unsent LLM
    /// request of a live task (letting it go would send it twice, or send nothing).
    pub(super) fn restore_budgets(
        &mut self,
        d: &SnapshotData,
        index_of: &impl Fn(&TaskId) -> Option<u32>,
    ) -> Result<(), String> {
        let record = &d.addenda.v6.budgets;
        let Some(mut book) = Book::from_record(record) else {
            return Ok(());
        };
        // The days wall-clock time has: the day after any of them is a time.
        let days = jiff::Timestamp::MIN.as_second().div_euclid(DAY_SECS)
            ..=jiff::Timestamp::MAX.as_second().div_euclid(DAY_SECS);
        for (what, day) in [("spend", book.day), ("held requests", book.held_day)] {
            if !days.contains(&day) {
                return Err(format!(
                    "the budgets' day of {what}, {day}, is out of the range of time"
                ));
            }
        }
        let elsewhere = d.waiting_requests();
        let mut seen = BTreeSet::new();
        let mut held = Vec::with_capacity(book.held.len());
        for key in &book.held {
            let (id, number) = (key.task(), key.number());
            let named = format!("request {number} of task {id}, held for the day's budget,");
            if !seen.insert((id, number)) {
                return Err(format!("{named} is held twice"));
            }
            if elsewhere.contains(&(id, number)) {
                return Err(format!("{named} is also held at a gate"));
            }
            let index = index_of(&id);
            let waits = index
                .and_then(|i| self.tasks.entries().get(i as usize))
                .is_some_and(|t| {
                    t.id == id
                        && t.phase != TaskPhase::Done
                        && t.pending
                            .as_slice()
                            .iter()
                            .any(|p| p.number == number && p.kind == Kind::Llm && p.unsent())
                });
            match index {
                Some(index) if waits => held.push(RequestKey::new(id, number, index)),
                _ => {
                    return Err(format!(
                        "{named} is not an unsent LLM request of a live task"
                    ));
                }
            }
        }
        book.held = held;
        self.budgets.book = Some(Box::new(book));
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use crate::budget::{Budget, BudgetRecord, Budgets, OnSpent, Usage};
    use crate::snapshot::Snapshot;
    use crate::{
        AgentTask, Config, NewTask, Request, Response, RestoreError, SavedTask, Scheduler,
        StateError, Step, TaskContext, TaskRegistry, Time,
    };

    /// Asks one LLM question, then finishes.
    #[derive(Debug, Serialize, Deserialize)]
    struct Ask {
        asked: bool,
    }

    impl AgentTask for Ask {
        fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
            if self.asked {
                return Step::done(1);
            }
            self.asked = true;
            cx.request(Request::llm(json!("question")));
            Step::Wait
        }
        fn type_name(&self) -> &'static str {
            "ask"
        }
        fn save(&self) -> Result<SavedTask, StateError> {
            SavedTask::serde(self)
        }
    }

    /// A day budget of 40 tokens that waits: task 1 spent it, so task 2's question is
    /// held until day 1.
    fn held() -> Snapshot {
        let budgets = Budgets::new()
            .per_day(Budget::tokens(40))
            .on_day_spent(OnSpent::Wait);
        let mut s = Scheduler::new(Config::new().budgets(budgets));
        s.submit(Time::ZERO, NewTask::new(Ask { asked: false }))
            .unwrap();
        while s.step(Time::ZERO).is_some() {}
        let key = s.poll_request().unwrap().key;
        let answer = Response::ok(key, json!(1)).with_usage(Usage::new(30, 10, "m"));
        let _ = s.handle_response(Time::ZERO, answer);
        s.submit(Time::ZERO, NewTask::new(Ask { asked: false }))
            .unwrap();
        while s.step(Time::ZERO).is_some() {}
        assert!(s.poll_request().is_none());
        s.snapshot().unwrap()
    }

    /// A change that breaks a budget record.
    type Fault = fn(&mut BudgetRecord);

    fn restore(snapshot: &Snapshot) -> Result<(), RestoreError> {
        let registry = TaskRegistry::new().with_serde::<Ask>("ask");
        Scheduler::restore(snapshot, &registry).map(|_| ())
    }

    /// A budget record that does not hang together is refused with what is wrong;
    /// letting it in would overflow the day after, or send a request twice or never.
    #[test]
    fn a_restored_budget_record_is_checked() {
        let snapshot = held();
        assert_eq!(restore(&snapshot), Ok(()));
        let faults: [(Fault, &str); 4] = [
            (
                |r| r.held_day = i64::MAX,
                "the budgets' day of held requests, 9223372036854775807, is out of the range of time",
            ),
            (
                |r| r.held.push(r.held[0]),
                "request 1 of task 2, held for the day's budget, is held twice",
            ),
            (
                |r| r.held[0] = crate::RequestKey::new(crate::TaskId(1), 1, u32::MAX),
                "request 1 of task 1, held for the day's budget, is not an unsent LLM request of a live task",
            ),
            (
                |r| r.held[0] = crate::RequestKey::new(crate::TaskId(2), 7, u32::MAX),
                "request 7 of task 2, held for the day's budget, is not an unsent LLM request of a live task",
            ),
        ];
        // Held at the LLM gate too.
        let mut broken = snapshot.clone();
        let key = crate::RequestKey::new(crate::TaskId(2), 1, 1);
        broken.data.gates.push(crate::snapshot::GateRecord {
            kind: crate::Kind::Llm,
            window: Vec::new(),
            tokens: Vec::new(),
            backoff_until: Time::ZERO,
            hits: 0,
            epoch: 0,
            held: vec![(crate::Priority::default(), 0, key)],
        });
        assert_eq!(
            restore(&broken),
            Err(RestoreError::Invalid(
                "request 1 of task 2, held for the day's budget, is also held at a gate".to_owned()
            ))
        );
        for (fault, error) in faults {
            let mut broken = snapshot.clone();
            fault(&mut broken.data.addenda.v6.budgets);
            assert_eq!(
                restore(&broken),
                Err(RestoreError::Invalid(error.to_owned())),
                "{error}"
            );
        }
    }
}
