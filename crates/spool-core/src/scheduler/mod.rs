//! The scheduler state machine: the task table, the run queue, timers, and the
//! outboxes of requests and cancel signals.
//!
//! It is sans-IO in the quinn-proto shape: time comes in as `now`, answers through
//! `handle_*`, and work goes out through `#[must_use] poll_*`. A driver calls, in a loop:
//! [`Scheduler::step`] until it returns `None`; then drains
//! [`poll_request`](Scheduler::poll_request) and [`poll_cancel`](Scheduler::poll_cancel)
//! to its executors; feeds answers back with [`handle_response`](Scheduler::handle_response);
//! and, when nothing is ready, waits until [`poll_timeout`](Scheduler::poll_timeout) or
//! the next answer, then calls [`handle_timeout`](Scheduler::handle_timeout).
//!
//! The state is split among owners, each with its data, its counters, its snapshot
//! record and its unit tests in one file; `Scheduler` holds one of each and
//! orchestrates:
//! - `table.rs` (`TaskTable`): task entries, their indexes by id, ids, live count, agents;
//! - `ready.rs` (`TaskQueue`): the run queue and the way into it (`wake`, and the
//!   inputs that bring answers);
//! - `slots.rs` (`Slots`): task limits, queued/blocked counts, the slot queue;
//! - `gates.rs` (`RequestGates`): per-kind gates, per-agent caps, parked requests,
//!   429 retries;
//! - `outbox.rs` (`Outbox`): requests to send, cancel signals, requests in flight;
//! - `timers.rs` (`Timers`): every moment the scheduler acts on in one `(time, seq)`
//!   queue — sleeps, deadlines, back-off ends, retention and key expiries;
//! - `keys.rs` (`IdempotencyKeys`): idempotency keys;
//! - `ending.rs` (`Cascade`): how a task ends and what it takes with it.
//!
//! `submit.rs` is submission and admission, `snapshot.rs` the snapshot frame,
//! `changes.rs` which tasks changed since the last checkpoint in parts,
//! `view.rs` the dashboards, `config.rs` the configuration.

mod budgets;
mod changes;
mod check;
mod config;
mod counts;
mod ending;
#[cfg(test)]
mod first_task_id;
mod fork;
mod gates;
mod history;
mod invariants;
mod keys;
mod outbox;
mod patches;
mod ready;
mod recorder;
mod replay;
mod round_trip;
mod schedules;
mod slots;
mod snapshot;
mod standing;
mod submit;
mod table;
mod timers;
mod view;

use std::borrow::Cow;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::admission::TaskLimits;
use crate::id::{AgentId, RequestKey, TaskId};
use crate::limiter::RequestLimits;
use crate::policy::PolicyChoice;
use crate::priority::Priority;
use crate::state::{CancelReason, Outcome, TaskError, TaskState};
use crate::stats::Stats;
use crate::task::{Family, NewTask, Step, TaskContext};
use crate::time::Time;
use crate::trace::{Cause, Phase, Trace};

pub use check::{CheckReport, StepDivergence};
pub use config::{CancelError, Config, DEFAULT_IDEMPOTENCY_WINDOW, Submission, SubmitError};
pub use invariants::InvariantError;
pub use keys::{KeyRecord, KeyedSubmission};
pub use replay::{Divergence, Replay, ReplayError};
pub use view::{GateView, KindRequests, QueueDetail, QueueState, WaitCounts};

use ending::Cascade;
use gates::RequestGates;
use keys::IdempotencyKeys;
use outbox::Outbox;
use ready::{TaskQueue, wake};
use slots::Slots;
use table::{Body, Ended, Ending, TaskEntry, TaskPhase, TaskTable};
use timers::{Timer, TimerKind, Timers};

/// One row of [`Scheduler::tasks`].
#[derive(Clone, Debug, PartialEq)]
pub struct TaskInfo {
    /// The task.
    pub id: TaskId,
    /// Its type name: as the task's code spells it, or as a snapshot it was restored
    /// from recorded it, for a result whose type the registry did not know.
    pub type_name: Cow<'static, str>,
    /// Its agent's name.
    pub agent: String,
    /// Its priority level.
    pub priority: Priority,
    /// Its state.
    pub state: TaskState,
    /// When it was submitted.
    pub created_at: Time,
    /// Requests it has in flight: sent (let go by their kind's gate, if it has one) and
    /// not answered. A request held at its gate is not counted.
    pub in_flight: u32,
}

/// A pending confirmation or other request, as [`Scheduler::in_flight`] lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlightRequest {
    /// The request's key.
    pub key: RequestKey,
    /// The request.
    pub request: crate::request::Request,
}

/// The scheduler state machine: the task table, the run queue, timers, and the outboxes
/// of requests and cancel signals. Sans-IO: time comes in as `now`, answers through
/// `handle_*`, work goes out through `poll_*`.
///
/// A driver calls, in a loop:
/// 1. [`step`](Scheduler::step) until it returns `None` (each call polls one ready task);
/// 2. [`poll_request`](Scheduler::poll_request) and [`poll_cancel`](Scheduler::poll_cancel)
///    until `None`, routing each to its executor (or
///    [`handle_unroutable`](Scheduler::handle_unroutable) when none serves the kind);
/// 3. [`handle_response`](Scheduler::handle_response) for each answer that came back;
/// 4. when nothing is ready, waits for the next answer or until
///    [`poll_timeout`](Scheduler::poll_timeout), then calls
///    [`handle_timeout`](Scheduler::handle_timeout).
///
/// [`submit`](Scheduler::submit) and [`cancel`](Scheduler::cancel) may come at any point.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_core::{task_fn, Config, NewTask, Response, Scheduler, Step, Time, TaskState};
///
/// let mut s = Scheduler::new(Config::new());
/// let mut asked = false;
/// let id = s.submit(Time::ZERO, NewTask::new(task_fn("ls-once", move |cx| {
///     if !asked {
///         asked = true;
///         cx.tool("ls", json!({}));
///         return Step::Wait;
///     }
///     Step::Done(Ok(cx.take_answer().unwrap().result.unwrap()))
/// }))).unwrap().id;
///
/// while s.step(Time::ZERO).is_some() {}
/// let out = s.poll_request().unwrap();            // route it to an executor...
/// let _ = s.handle_response(Time::ZERO, Response::ok(out.key, json!("a b c")));
/// while s.step(Time::ZERO).is_some() {}
/// assert_eq!(s.task_state(id), Some(TaskState::Completed(Ok(json!("a b c")))));
/// ```
#[derive(Debug)]
pub struct Scheduler {
    now: Time,
    /// The task table: entries, ids, agents.
    tasks: TaskTable,
    ready: TaskQueue,
    /// Requests and cancel signals for the driver to take.
    outbox: Outbox,
    /// Every timer: sleeps, deadlines, back-off ends; results and keys waiting to go.
    timers: Timers,
    /// Children spawned during the current poll (reused between polls).
    spawned: Vec<(TaskId, NewTask)>,
    trace: Trace,
    stats: Stats,
    /// Slots: the task limits, the counts of queued and blocked tasks, the slot
    /// queue.
    slots: Slots,
    /// Keys of live tasks, and of ended ones within the idempotency window.
    keys: IdempotencyKeys,
    /// The tasks an ending takes with it, canceled once it is over.
    cascade: Cascade,
    /// The policy it was built with (snapshots name it).
    policy: PolicyChoice,
    /// Request gates: limits per kind and per agent, held and parked requests, 429
    /// back-off and retries.
    requests: RequestGates,
    /// The journal being recorded, if one is (see `recorder`).
    journal: Option<Box<recorder::Recorder>>,
    /// Recurring runs and sessions.
    schedules: crate::schedule::Schedules,
    /// The task types schedules make their runs of.
    registry: Option<crate::registry::TaskRegistry>,
    /// Whether a journal is recorded, changes are tracked or a task is watched (see
    /// `observed`).
    observed: bool,
    /// The task whose polls are noted for its history, if one is.
    watch: Option<Box<history::Watch>>,
    /// Budgets and spend, if the scheduler has budgets.
    budgets: budgets::Budgeting,
}

impl Scheduler {
    /// A scheduler set up by `config`.
    pub fn new(config: Config) -> Scheduler {
        let mut scheduler = Scheduler {
            now: Time::ZERO,
            tasks: TaskTable::new(config.first_task_id.max(1)),
            ready: TaskQueue::new(config.policy.build()),
            outbox: Outbox::default(),
            timers: Timers::new(config.retention),
            spawned: Vec::new(),
            trace: Trace::new(config.record_trace),
            stats: Stats::default(),
            slots: Slots::new(config.limits, &config.policy),
            keys: IdempotencyKeys::new(config.idempotency_window),
            cascade: Cascade::default(),
            policy: config.policy.clone(),
            requests: RequestGates::new(config.requests),
            journal: None,
            schedules: crate::schedule::Schedules::with_limits(config.session_limits),
            registry: None,
            observed: false,
            watch: None,
            budgets: budgets::Budgeting::new(config.budgets.clone()),
        };
        // Budgets check requests at the end of each input, on the gates' path.
        scheduler.requests.gating |= scheduler.budgets.on();
        for (name, weight) in config.agent_weights {
            let agent = scheduler.agent_id(Some(Cow::Owned(name)));
            scheduler.set_weight(agent, weight);
        }
        // Sessions made without a name are numbered from the first task id too, so
        // that schedulers numbering their tasks apart (a cluster's shards) name their
        // sessions apart.
        scheduler.schedules.sessions.last = config.first_task_id.max(1) - 1;
        scheduler
    }

    fn set_weight(&mut self, agent: AgentId, weight: u32) {
        let at = agent.0 as usize;
        for weights in std::iter::once(&mut self.ready.weights)
            .chain(self.slots.queue.as_mut().map(|a| &mut a.order.weights))
        {
            if weights.len() <= at {
                weights.resize(at + 1, 1);
            }
            weights[at] = weight.max(1);
        }
    }

    /// Whether a journal is recorded or the task table tracks changes. `step` and
    /// `handle_response`, the inputs of the hot loop, test this once and otherwise run
    /// a copy of themselves that neither journals nor notes changes.
    #[inline(always)]
    fn observed(&self) -> bool {
        debug_assert_eq!(
            self.observed,
            self.journal.is_some() || self.tasks.tracking() || self.watch.is_some(),
            "the journal, change tracking or a watch started or stopped without set_observed"
        );
        self.observed
    }

    /// Sets [`observed`](Scheduler::observed) again: called by whatever starts or
    /// stops the journal or change tracking.
    fn set_observed(&mut self) {
        self.observed = self.journal.is_some() || self.tasks.tracking() || self.watch.is_some();
    }

    /// Moves the clock; time never goes back, so an earlier `now` leaves it as it is.
    /// Results whose retention has run out are evicted, and keys whose window has.
    #[inline]
    fn advance(&mut self, now: Time) {
        if now > self.now {
            self.advance_to(now);
        }
    }

    /// `advance` when time moved: kept out of line, so that the calls on the hot path,
    /// where it mostly does not, stay a compare.
    #[inline(never)]
    fn advance_to(&mut self, now: Time) {
        self.now = now;
        if self.timers.expiring(now) {
            self.expire_due();
        }
    }

    /// The scheduler's time: the latest `now` it was given.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The name of the run-queue policy.
    pub fn policy_name(&self) -> &'static str {
        self.ready.policy.name()
    }

    /// The task limits it admits by.
    pub fn task_limits(&self) -> &TaskLimits {
        self.slots.limits()
    }

    /// The request limits it gates requests by.
    pub fn request_limits(&self) -> &RequestLimits {
        &self.requests.limits
    }

    /// The agent named `name`; a new one takes the limits set for its name.
    fn agent_id(&mut self, name: Option<Cow<'static, str>>) -> AgentId {
        let known = self.tasks.agent_count();
        let agent = self.tasks.agent(name);
        if agent.0 as usize >= known {
            let name = self.tasks.agent_name(agent);
            self.slots.name_agent(agent, name);
            self.requests.name_agent(agent, name);
        }
        agent
    }

    /// An agent's name.
    pub fn agent_name(&self, agent: AgentId) -> &str {
        self.tasks.agent_name(agent)
    }

    /// Starts the children the task at `index` spawned during its poll (most polls
    /// spawn none: that check stays on the hot path, the rest off it).
    #[inline(always)]
    fn start_children(&mut self, parent_index: u32, parent: TaskId) {
        if !self.spawned.is_empty() {
            self.start_spawned(parent_index, parent);
        }
    }

    #[inline(never)]
    fn start_spawned(&mut self, parent_index: u32, parent: TaskId) {
        let mut spawned = std::mem::take(&mut self.spawned);
        for (id, task) in spawned.drain(..) {
            if self.tasks.entries().len() >= u32::MAX as usize {
                // No room: the child ends before it starts, and its parent is told.
                let error =
                    TaskError::failed(format!("task {id} could not start: the task table is full"));
                self.child_ended(parent_index, parent, id, Err(error));
                continue;
            }
            let _ = self.insert(id, task, Some((parent, parent_index)), &[]);
        }
        self.spawned = spawned;
    }

    /// Polls the next ready task once. Returns the task polled, or `None` when no task
    /// is ready.
    pub fn step(&mut self, now: Time) -> Option<TaskId> {
        let out = if self.observed() {
            self.step_observed(now)
        } else {
            self.step_one::<false>(now)
        };
        self.end_input();
        out
    }

    /// `step` with a journal recorded or changes tracked.
    #[inline(never)]
    fn step_observed(&mut self, now: Time) -> Option<TaskId> {
        self.step_one::<true>(now)
    }

    /// A step; with `OBSERVED` false only when neither a journal is recorded nor
    /// changes are tracked. The next ready task runs once, then ends (it returned or
    /// panicked) or goes on ([`after_poll`](Scheduler::after_poll)).
    #[inline(always)]
    fn step_one<const OBSERVED: bool>(&mut self, now: Time) -> Option<TaskId> {
        if OBSERVED {
            self.journal_step(now);
        }
        self.advance(now);
        let now = self.now;
        let (index, task, next_task) = loop {
            let next = self.ready.policy.pop(now)?;
            match self.tasks.get_mut_with_ids::<OBSERVED>(next.index) {
                Some((t, ids)) if t.id == next.task && t.phase == TaskPhase::Ready => {
                    break (next.index, t, ids);
                }
                // Canceled while queued: skipped here rather than searched for there.
                _ => continue,
            }
        };
        let id = task.id;
        self.ready.len -= 1;
        let tracing = self.trace.active();
        if tracing {
            self.trace
                .push(now, id, Phase::Ready, Phase::Running, Cause::Scheduled);
        }
        task.transition_to_running();
        let timer_before = task.timer;
        let watched = OBSERVED && self.watch.as_ref().is_some_and(|w| w.watches(id));
        let received = watched.then(|| history::received(task));
        let TaskEntry {
            body,
            pending,
            next_request,
            in_flight,
            timer,
            timer_fired,
            family,
            ..
        } = task;
        let Body::Live(body) = body else {
            return Some(id);
        };
        let mut cx = TaskContext {
            task: id,
            index,
            now,
            pending,
            next_request,
            in_flight,
            timer,
            timer_fired,
            outbox: &mut self.outbox.requests,
            issued: 0,
            family,
            spawned: &mut self.spawned,
            next_task,
        };
        let result = catch_unwind(AssertUnwindSafe(|| body.poll(&mut cx)));
        let issued = cx.issued;
        self.stats.polls += 1;
        if OBSERVED {
            self.journal_patches(index);
        }
        if let Some(received) = received {
            let step = match &result {
                Ok(step) => Ok(step),
                Err(panic) => Err(panic_message(panic.as_ref())),
            };
            self.note_step(now, index, received, step);
        }
        match result {
            Ok(Step::Done(outcome)) => self.ended_in_poll(index, issued, outcome, Cause::Returned),
            Ok(step) => self.after_poll(index, id, step, issued, timer_before, tracing),
            Err(panic) => {
                let message = panic_message(panic.as_ref());
                let error = TaskError::Panicked { task: id, message };
                self.ended_in_poll(index, issued, Err(error), Cause::Panicked);
            }
        }
        Some(id)
    }

    /// Ends the task at `index` with the `outcome` of the poll that made `issued`
    /// requests: they are taken back first, for they never go out.
    fn ended_in_poll(&mut self, index: u32, issued: u32, outcome: Outcome, cause: Cause) {
        self.retract(index, issued);
        self.finish(index, outcome, cause);
    }

    /// After a poll of task `id` that did not end it: a sleep it set becomes a timer
    /// and its requests are counted (with the peak of those sent); then it goes back
    /// on the run queue (it yielded, or a child it joined had already ended), or
    /// waits, or — waiting on nothing — ends stalled. The children it spawned start
    /// last.
    #[inline(always)]
    fn after_poll(
        &mut self,
        index: u32,
        id: TaskId,
        step: Step,
        issued: u32,
        timer_before: Time,
        tracing: bool,
    ) {
        let now = self.now;
        // Noted (if changes are tracked) when it was taken from the ready queue.
        let task = self.tasks.entry_mut_noted(index);
        task.pending.drop_answers();
        let timer_set = task.timer != timer_before && task.timer != Time::MAX;
        if timer_set {
            self.timers.set(TimerKind::Sleep, task.timer, index, id);
        }
        let in_flight = self.outbox.issued(issued);
        self.stats.requests += u64::from(issued);
        // Without gates the requests a poll makes go out at once and none is held, so
        // all in flight are sent. With gates they go, or are held, at the end of this
        // input, where the peak is taken of those sent. (Fewer in flight than the peak
        // cannot raise it: the common case tests that alone.)
        if in_flight as u64 > self.stats.peak_in_flight && !self.requests.gating {
            debug_assert_eq!(self.outbox.held, 0, "a request held without gates");
            self.stats.peak_in_flight = in_flight as u64;
        }
        let joined_ended = task.family.as_mut().and_then(|f| f.joined_ended.take());
        if let Step::Yield = step {
            task.transition_to_ready();
            self.stats.yields += 1;
            if tracing {
                self.trace
                    .push(now, id, Phase::Running, Phase::Ready, Cause::Yielded);
            }
            self.ready.push(&mut self.stats, now, index, task);
        } else if let Some(child) = joined_ended {
            // A child joined in this poll had already ended: the task goes on at once.
            task.transition_to_ready();
            if tracing {
                let cause = Cause::ChildEnded(child);
                self.trace
                    .push(now, id, Phase::Running, Phase::Ready, cause);
            }
            self.ready.push(&mut self.stats, now, index, task);
        } else if task.in_flight == 0 && task.timer == Time::MAX && task.joined() == 0 {
            return self.stalled(index, id);
        } else {
            task.transition_to_waiting();
            task.wait_any = matches!(step, Step::WaitAny);
            if tracing {
                let cause = if issued > 0 {
                    Cause::Requested(issued)
                } else if timer_set {
                    Cause::Sleeping
                } else {
                    Cause::Waiting
                };
                let to = task.trace_phase();
                self.trace.push(now, id, Phase::Running, to, cause);
            }
        }
        self.start_children(index, id);
    }

    /// Ends task `id`, which waits with nothing that could wake it: its children
    /// spawned in that poll never start.
    fn stalled(&mut self, index: u32, id: TaskId) {
        self.spawned.clear();
        let hint = "it waits with no request in flight, no timer set and no child joined \
                    (an async task that awaits something other than a spool request does \
                    this)";
        let error = TaskError::Stalled {
            task: id,
            hint: hint.to_owned(),
        };
        self.finish(index, Err(error), Cause::Stalled);
    }

    /// When the scheduler next needs [`handle_timeout`](Scheduler::handle_timeout): the
    /// earliest timer, task deadline, or moment a limit lets a held request or a queued
    /// task go, if any.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Time> {
        // Sleeps, deadlines and back-off ends are timers; retention and key expiries
        // are not wake-ups (the next clock move acts on them).
        let (now, tasks, keys, gates) = (self.now, &self.tasks, &self.keys, &mut self.requests);
        let schedules = &self.schedules;
        let mut next = self
            .timers
            .next(|timer| standing::wakes(timer, tasks, keys, gates, schedules, now));
        // The rate windows' moments move with every request sent: derived from the
        // gates, not queued.
        if self.requests.gating {
            next = earliest(next, self.requests.free_at(self.now, self.tasks.entries()));
        }
        if self.slots.queue.is_some() {
            next = earliest(next, self.slots.start_window_free_at(self.now));
        }
        if self.budgets.on() {
            next = earliest(next, self.budget_wake());
        }
        next
    }

    /// Fires every timer due at or before `now`, in deadline order; fails tasks whose
    /// deadline has passed; lets queued tasks start if the start window has room.
    pub fn handle_timeout(&mut self, now: Time) {
        self.journal_timeout(now);
        self.advance(now);
        let due = self.timers.take_due(self.now);
        // Deadlines first: a task whose deadline and sleep both passed fails.
        for timer in due.iter().filter(|t| t.kind == TimerKind::Deadline) {
            self.fire_deadline(timer);
        }
        if self.slots.waiting() > 0 {
            self.fill_slots();
        }
        for timer in due.iter().filter(|t| t.kind == TimerKind::Sleep) {
            self.fire_sleep(timer);
        }
        // Schedules last: a run they start is admitted after the tasks woken.
        for timer in due.iter().filter(|t| t.kind == TimerKind::Schedule) {
            if self.stands(timer) {
                self.fire_schedule(timer.index);
            }
        }
        // A back-off that ended needs nothing done: its gate sends at the next
        // `poll_request`.
        self.timers.done(due);
        self.end_input();
    }

    /// A task's sleep ended: it may wake.
    fn fire_sleep(&mut self, timer: &Timer) {
        if !self.stands(timer) {
            return;
        }
        let task = self.tasks.entry_mut(timer.index);
        let tracing = self.trace.active();
        let from = (tracing && task.phase == TaskPhase::Waiting).then(|| task.trace_phase());
        task.timer = Time::MAX;
        task.timer_fired = true;
        if task.phase == TaskPhase::Waiting {
            let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
            let cause = Cause::TimerFired;
            wake(
                task,
                timer.index,
                cause,
                from,
                self.now,
                ready,
                trace,
                stats,
            );
        }
    }

    /// Cancels a live task: it ends [`TaskState::Canceled`], and each of its requests
    /// out with an executor gets a cancel signal.
    ///
    /// # Errors
    /// [`CancelError::UnknownTask`] for an id not in the table;
    /// [`CancelError::AlreadyEnded`] for a task that has ended.
    pub fn cancel(
        &mut self,
        now: Time,
        id: TaskId,
        reason: CancelReason,
    ) -> Result<(), CancelError> {
        let out = self.cancel_at(now, id, reason);
        self.end_input();
        out
    }

    fn cancel_at(
        &mut self,
        now: Time,
        id: TaskId,
        reason: CancelReason,
    ) -> Result<(), CancelError> {
        // A cancel that fails is not journaled, so it changes nothing, not even the
        // clock (moved, it could let a held request go at a back-off's end).
        let index = *self
            .tasks
            .by_id
            .get(&id)
            .ok_or(CancelError::UnknownTask(id))?;
        let task = &self.tasks.entries()[index as usize];
        if task.phase == TaskPhase::Done {
            return Err(CancelError::AlreadyEnded {
                id,
                state: task.state(),
            });
        }
        self.journal_cancel(now, id, &reason);
        self.advance(now);
        self.cancel_at_index(index, reason);
        Ok(())
    }

    /// The state of a task, if it is in the table.
    pub fn task_state(&self, id: TaskId) -> Option<TaskState> {
        Some(self.tasks.find(id)?.1.state())
    }

    /// Removes an ended task from the table and returns how it ended; its index is
    /// reused, its id never is. Live tasks stay (returns `None`).
    pub fn forget(&mut self, id: TaskId) -> Option<TaskState> {
        let state = self.tasks.remove_ended(id)?.state();
        self.budget_task_removed(id);
        self.journal_forget(id);
        Some(state)
    }

    /// Starts (`true`) or stops logging the ids of tasks removed from the table
    /// (forgotten, or evicted when their retention ran out), for a reader that keeps
    /// its own copy of the table and changes only what changed: the trace shows every
    /// other change, removals it does not. Off by default; the log is taken with
    /// [`take_removed`](Scheduler::take_removed). Restarting it empties it.
    ///
    /// # Example
    /// ```
    /// use spool_core::{NewTask, Scheduler, Step, Time, task_fn};
    ///
    /// let mut scheduler = Scheduler::new(Default::default());
    /// scheduler.log_removals(true);
    /// let id = scheduler.submit(Time::ZERO, NewTask::new(task_fn("t", |_cx| Step::done(1)))).unwrap().id;
    /// while scheduler.step(Time::ZERO).is_some() {}
    /// scheduler.forget(id);
    /// assert_eq!(scheduler.take_removed(), [id]);
    /// assert!(scheduler.take_removed().is_empty());
    /// ```
    pub fn log_removals(&mut self, on: bool) {
        self.tasks.removals = on.then(Vec::new);
    }

    /// The ids of the tasks removed from the table since the last call (or since
    /// [`log_removals`](Scheduler::log_removals) started), oldest first; empty when
    /// removals are not logged.
    pub fn take_removed(&mut self) -> Vec<TaskId> {
        self.tasks
            .removals
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Who holds the idempotency `key`: a live task, or one that ended within the
    /// [idempotency window](Config::idempotency_window), even if its result was
    /// evicted. A driver resuming a run asks this before submitting again.
    ///
    /// # Example
    /// ```
    /// use spool_core::{NewTask, Scheduler, Step, Time, task_fn};
    ///
    /// let mut scheduler = Scheduler::new(Default::default());
    /// let task = NewTask::new(task_fn("report", |_cx| Step::done(1))).key("report-2027-01");
    /// let first = scheduler.submit(Time::ZERO, task).unwrap();
    /// while scheduler.step(Time::ZERO).is_some() {}
    /// let held = scheduler.key("report-2027-01").unwrap();
    /// assert_eq!((held.task, held.ended_at), (first.id, Some(Time::ZERO)));
    /// ```
    pub fn key(&self, key: &str) -> Option<KeyRecord> {
        self.keys.get(key)
    }
}

/// The earlier of two optional times.
fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a payload that is not text".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hot entry is what a million waiting tasks pay for; keep it from creeping up.
    #[test]
    fn entry_stays_small() {
        // Slab stores `enum Entry { Vacant(usize), Occupied(T) }`, which fits in `T`'s
        // niche or adds a word.
        let size = std::mem::size_of::<TaskEntry>();
        // 144 for the single-request hot path, 8 for the out-of-line family pointer.
        let parts = (
            std::mem::size_of::<Body>(),
            std::mem::size_of::<crate::pending::PendingSet>(),
            std::mem::size_of::<crate::pending::PendingRequest>(),
            std::mem::size_of::<crate::Kind>(),
            std::mem::size_of::<crate::Payload>(),
            std::mem::size_of::<crate::pending::Status>(),
        );
        assert!(size <= 152, "a task entry takes {size} bytes: {parts:?}");
    }
}
