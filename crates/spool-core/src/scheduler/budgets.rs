//! Budgets in the scheduler: LLM answers' usage is counted as it arrives, and a new
//! LLM request is checked at the end of the input that made it — it goes, fails at
//! once with [`RequestError::BudgetSpent`], or (the day's budget spent, with
//! [`OnSpent::Wait`](crate::OnSpent::Wait)) is held until the next day.
//!
//! A scheduler with budgets runs its requests through the gates' path (`gating`), so
//! the check costs a scheduler without budgets nothing. The day is the UTC calendar
//! day of the wall clock the scheduler was told (`set_wall_clock`); a scheduler never
//! told one counts days of 24 hours from its time zero.

use std::time::Duration;

use super::ready::record_answer;
use super::{Scheduler, TaskPhase};
use crate::budget::{Book, BudgetRecord, Budgets, DAY_SECS, Spend, SpendReport, Usage, Verdict};
use crate::id::{RequestKey, TaskId};
use crate::kind::Kind;
use crate::pending::Out;
use crate::request::{RequestError, Response};
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
        if let Some(book) = self.budgets.book.as_deref_mut() {
            if !book.held.is_empty() {
                book.held.retain(|key| key.task() != id);
            }
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
            held_until: (!book.held.is_empty()).then(|| self.day_start(book.held_day + 1)),
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
        (!book.held.is_empty()).then(|| self.day_start(book.held_day + 1))
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

    /// Puts back the spend and held requests of a snapshot's `record` (its budgets are
    /// in the configuration the scheduler was made with); `index_of` gives a task's
    /// index.
    pub(super) fn restore_budgets(
        &mut self,
        record: &BudgetRecord,
        index_of: &impl Fn(&TaskId) -> Option<u32>,
    ) {
        let Some(mut book) = Book::from_record(record) else {
            return;
        };
        book.held = book
            .held
            .iter()
            .filter_map(|k| Some(RequestKey::new(k.task(), k.number(), index_of(&k.task())?)))
            .collect();
        self.budgets.book = Some(Box::new(book));
    }
}
