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

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};

use slab::Slab;

use crate::pending::{PendingSet, Status};
use crate::policy::{Fifo, Policy, QueueEntry, RunQueue};
use crate::trace::{Cause, Phase, Trace};
use crate::{
    AgentId, CancelReason, CancelSignal, Delivery, DropReason, NewTask, OutboundRequest, Outcome,
    Priority, RequestKey, Response, Stats, Step, TaskContext, TaskError, TaskId, TaskState, Time,
    WaitReason,
};

/// How a scheduler is set up.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Config {
    /// Keep every trace event in memory (tests); off, events go only to `tracing`.
    pub record_trace: bool,
}

impl Config {
    /// The default configuration: FIFO, no trace recording.
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets whether trace events are kept in memory.
    #[must_use]
    pub fn record_trace(mut self, record: bool) -> Config {
        self.record_trace = record;
        self
    }
}

/// What became of a submission.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The task's id.
    pub id: TaskId,
    /// How it was admitted.
    pub admission: Admission,
}

/// How a submitted task was admitted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// In the run queue.
    Ready,
}

/// Why a submission failed outright.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The task table holds as many tasks as its slot numbers can address (2³²).
    #[error("the task table is full ({live} tasks); let some finish or forget finished ones")]
    TableFull {
        /// Tasks in the table.
        live: usize,
    },
}

/// Why a task could not be canceled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// No task has that id (never submitted, or finished and forgotten).
    #[error("no task {0}")]
    UnknownTask(TaskId),
    /// The task has already ended.
    #[error("task {id} has already ended: {state:?}")]
    AlreadyEnded {
        /// The task.
        id: TaskId,
        /// How it ended.
        state: TaskState,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum SlotPhase {
    Ready,
    Running,
    Waiting,
    Done,
}

#[derive(Debug)]
enum Body {
    Live(Box<dyn crate::AgentTask>),
    Finished(Box<Outcome>),
    Canceled(CancelReason),
}

/// The hot part of a task: what every step touches. Cold data goes elsewhere.
#[derive(Debug)]
struct TaskSlot {
    id: TaskId,
    body: Body,
    phase: SlotPhase,
    wait_any: bool,
    timer_fired: bool,
    priority: Priority,
    agent: AgentId,
    next_request: u32,
    timer: Option<Time>,
    pending: PendingSet,
    type_name: &'static str,
    created_at: Time,
}

impl TaskSlot {
    fn wait_reason(&self) -> WaitReason {
        let mut in_flight = self.pending.as_slice().iter().filter(|p| p.in_flight());
        match (in_flight.next(), in_flight.count()) {
            (None, _) => WaitReason::Timer,
            (Some(p), 0) => WaitReason::Request(p.kind.clone()),
            (Some(_), more) => WaitReason::Requests(more as u32 + 1),
        }
    }

    fn phase(&self) -> Phase {
        match self.phase {
            SlotPhase::Ready => Phase::Ready,
            SlotPhase::Running => Phase::Running,
            SlotPhase::Waiting => Phase::Waiting(self.wait_reason()),
            SlotPhase::Done => match &self.body {
                Body::Finished(outcome) if outcome.is_ok() => Phase::Completed,
                Body::Canceled(_) => Phase::Canceled,
                _ => Phase::Failed,
            },
        }
    }

    fn state(&self) -> TaskState {
        match self.phase {
            SlotPhase::Ready => TaskState::Ready,
            SlotPhase::Running => TaskState::Running,
            SlotPhase::Waiting => TaskState::Waiting(self.wait_reason()),
            SlotPhase::Done => match &self.body {
                Body::Finished(outcome) => TaskState::Completed((**outcome).clone()),
                Body::Canceled(reason) => TaskState::Canceled(reason.clone()),
                Body::Live(_) => TaskState::Running,
            },
        }
    }

    /// Whether what the task waits for has all arrived.
    fn should_wake(&self) -> bool {
        self.wait_any || (self.timer.is_none() && self.pending.in_flight_count() == 0)
    }
}

/// One row of [`Scheduler::tasks`].
#[derive(Clone, Debug, PartialEq)]
pub struct TaskInfo {
    /// The task.
    pub id: TaskId,
    /// Its type name.
    pub type_name: &'static str,
    /// Its agent's name.
    pub agent: String,
    /// Its priority level.
    pub priority: Priority,
    /// Its state.
    pub state: TaskState,
    /// When it was submitted.
    pub created_at: Time,
    /// Requests it has in flight.
    pub in_flight: u32,
}

/// A pending confirmation or other request, as [`Scheduler::in_flight`] lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct InFlightRequest {
    /// The request's key.
    pub key: RequestKey,
    /// The request.
    pub request: crate::Request,
}

/// The scheduler state machine. See the [module docs](self) for the calling order.
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
    tasks: Slab<TaskSlot>,
    index: BTreeMap<TaskId, u32>,
    next_task: u64,
    next_seq: u64,
    run_queue: RunQueue,
    ready: usize,
    live: usize,
    in_flight: usize,
    outbox: VecDeque<OutboundRequest>,
    cancels: VecDeque<CancelSignal>,
    timers: BinaryHeap<Reverse<(Time, u64, u32, TaskId)>>,
    agents: Vec<Cow<'static, str>>,
    agent_index: BTreeMap<Cow<'static, str>, AgentId>,
    trace: Trace,
    stats: Stats,
}

impl Scheduler {
    /// A scheduler with the FIFO policy.
    pub fn new(config: Config) -> Scheduler {
        Scheduler::build(config, RunQueue::Fifo(Fifo::new()))
    }

    /// A scheduler with an embedder's own run-queue policy.
    pub fn with_policy(config: Config, policy: Box<dyn Policy>) -> Scheduler {
        Scheduler::build(config, RunQueue::Custom(policy))
    }

    fn build(config: Config, run_queue: RunQueue) -> Scheduler {
        let default_agent: Cow<'static, str> = Cow::Borrowed("default");
        Scheduler {
            now: Time::ZERO,
            tasks: Slab::new(),
            index: BTreeMap::new(),
            next_task: 1,
            next_seq: 0,
            run_queue,
            ready: 0,
            live: 0,
            in_flight: 0,
            outbox: VecDeque::new(),
            cancels: VecDeque::new(),
            timers: BinaryHeap::new(),
            agents: vec![default_agent.clone()],
            agent_index: BTreeMap::from([(default_agent, AgentId::DEFAULT)]),
            trace: Trace::new(config.record_trace),
            stats: Stats::default(),
        }
    }

    /// Moves the clock; time never goes back, so an earlier `now` leaves it as it is.
    fn advance(&mut self, now: Time) {
        if now > self.now {
            self.now = now;
        }
    }

    /// The scheduler's time: the latest `now` it was given.
    pub fn now(&self) -> Time {
        self.now
    }

    /// The name of the run-queue policy.
    pub fn policy_name(&self) -> &'static str {
        self.run_queue.name()
    }

    fn agent_id(&mut self, name: Option<Cow<'static, str>>) -> AgentId {
        let Some(name) = name else {
            return AgentId::DEFAULT;
        };
        if let Some(id) = self.agent_index.get(name.as_ref()) {
            return *id;
        }
        let id = AgentId(self.agents.len() as u32);
        self.agents.push(name.clone());
        self.agent_index.insert(name, id);
        id
    }

    /// An agent's name.
    pub fn agent_name(&self, agent: AgentId) -> &str {
        self.agents
            .get(agent.0 as usize)
            .map_or("?", |name| name.as_ref())
    }

    /// Adds a task; it is ready at once.
    ///
    /// # Errors
    /// [`SubmitError::TableFull`] when 2³² tasks are in the table.
    pub fn submit(&mut self, now: Time, task: NewTask) -> Result<Submission, SubmitError> {
        self.advance(now);
        if self.tasks.len() >= u32::MAX as usize {
            return Err(SubmitError::TableFull {
                live: self.tasks.len(),
            });
        }
        let agent = self.agent_id(task.agent);
        let id = TaskId(self.next_task);
        self.next_task += 1;
        let type_name = task.body.type_name();
        let slot = self.tasks.insert(TaskSlot {
            id,
            body: Body::Live(task.body),
            phase: SlotPhase::Ready,
            wait_any: false,
            timer_fired: false,
            priority: task.priority,
            agent,
            next_request: 1,
            timer: None,
            pending: PendingSet::Empty,
            type_name,
            created_at: self.now,
        }) as u32;
        self.index.insert(id, slot);
        self.live += 1;
        self.stats.submitted += 1;
        if self.trace.active() {
            self.trace
                .push(self.now, id, Phase::New, Phase::Ready, Cause::Submitted);
        }
        self.enqueue(slot);
        Ok(Submission {
            id,
            admission: Admission::Ready,
        })
    }

    fn enqueue(&mut self, slot: u32) {
        let Some(task) = self.tasks.get(slot as usize) else {
            return;
        };
        self.next_seq += 1;
        self.run_queue.push(QueueEntry {
            task: task.id,
            slot,
            seq: self.next_seq,
            priority: task.priority,
            agent: task.agent,
            enqueued_at: self.now,
        });
        self.ready += 1;
        if self.ready as u64 > self.stats.peak_ready {
            self.stats.peak_ready = self.ready as u64;
        }
    }

    /// Polls the next ready task once. Returns the task polled, or `None` when no task
    /// is ready.
    pub fn step(&mut self, now: Time) -> Option<TaskId> {
        self.advance(now);
        let now = self.now;
        let (slot_key, id) = loop {
            let entry = self.run_queue.pop(now)?;
            match self.tasks.get(entry.slot as usize) {
                Some(t) if t.id == entry.task && t.phase == SlotPhase::Ready => {
                    break (entry.slot, entry.task);
                }
                // Canceled while queued: skipped here rather than searched for there.
                _ => continue,
            }
        };
        self.ready -= 1;
        let tracing = self.trace.active();
        if tracing {
            self.trace
                .push(now, id, Phase::Ready, Phase::Running, Cause::Scheduled);
        }
        let Some(task) = self.tasks.get_mut(slot_key as usize) else {
            return Some(id);
        };
        task.phase = SlotPhase::Running;
        let first_new = task.next_request;
        let timer_before = task.timer;
        let TaskSlot {
            body,
            pending,
            next_request,
            timer,
            timer_fired,
            ..
        } = task;
        let Body::Live(body) = body else {
            return Some(id);
        };
        let mut cx = TaskContext {
            task: id,
            slot: slot_key,
            now,
            pending,
            next_request,
            timer,
            timer_fired,
        };
        let step = match catch_unwind(AssertUnwindSafe(|| body.poll(&mut cx))) {
            Ok(step) => step,
            Err(panic) => {
                self.stats.polls += 1;
                let message = panic_message(panic.as_ref());
                self.finish(
                    slot_key,
                    Err(TaskError::Panicked { task: id, message }),
                    Cause::Panicked,
                );
                return Some(id);
            }
        };
        self.stats.polls += 1;
        match step {
            Step::Done(outcome) => {
                self.finish(slot_key, outcome, Cause::Returned);
                return Some(id);
            }
            Step::Yield | Step::Wait | Step::WaitAny => {}
        }
        // Send out what this poll asked for, in the order it asked.
        let task = &mut self.tasks[slot_key as usize];
        let mut issued = 0u32;
        for p in task.pending.as_slice() {
            if p.number >= first_new {
                if let Some(request) = p.request() {
                    self.outbox.push_back(OutboundRequest {
                        key: RequestKey::new(id, p.number, slot_key),
                        request,
                    });
                    issued += 1;
                }
            }
        }
        task.pending.drop_answers();
        if task.timer != timer_before {
            if let Some(deadline) = task.timer {
                self.next_seq += 1;
                self.timers
                    .push(Reverse((deadline, self.next_seq, slot_key, id)));
            }
        }
        self.in_flight += issued as usize;
        self.stats.requests += u64::from(issued);
        if self.in_flight as u64 > self.stats.peak_in_flight {
            self.stats.peak_in_flight = self.in_flight as u64;
        }
        match step {
            Step::Yield => {
                task.phase = SlotPhase::Ready;
                self.stats.yields += 1;
                if tracing {
                    self.trace
                        .push(now, id, Phase::Running, Phase::Ready, Cause::Yielded);
                }
                self.enqueue(slot_key);
            }
            _ => {
                if task.pending.in_flight_count() == 0 && task.timer.is_none() {
                    let hint = if issued == 0 {
                        "it returned Wait without making a request or setting a timer \
                         (an async task awaiting something that is not a spool request does this)"
                    } else {
                        "its requests were answered before it waited"
                    };
                    let error = TaskError::Stalled {
                        task: id,
                        hint: hint.to_owned(),
                    };
                    self.finish(slot_key, Err(error), Cause::Stalled);
                    return Some(id);
                }
                task.phase = SlotPhase::Waiting;
                task.wait_any = matches!(step, Step::WaitAny);
                if tracing {
                    let cause = if issued > 0 {
                        Cause::Requested(issued)
                    } else {
                        Cause::Sleeping
                    };
                    let to = task.phase();
                    self.trace.push(now, id, Phase::Running, to, cause);
                }
            }
        }
        Some(id)
    }

    /// Ends a live task with `outcome`: its in-flight requests get cancel signals, its
    /// body is dropped, its result kept.
    fn finish(&mut self, slot_key: u32, outcome: Outcome, cause: Cause) {
        let ok = outcome.is_ok();
        self.end(slot_key, Body::Finished(Box::new(outcome)), cause);
        if ok {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
    }

    fn end(&mut self, slot_key: u32, body: Body, cause: Cause) {
        let Some(task) = self.tasks.get_mut(slot_key as usize) else {
            return;
        };
        let from = if self.trace.active() {
            Some(task.phase())
        } else {
            None
        };
        if task.phase == SlotPhase::Ready {
            self.ready -= 1;
        }
        for p in task.pending.take_all() {
            if p.in_flight() {
                self.in_flight -= 1;
                self.cancels.push_back(CancelSignal {
                    key: RequestKey::new(task.id, p.number, slot_key),
                    kind: p.kind,
                });
            }
        }
        task.timer = None;
        task.phase = SlotPhase::Done;
        task.body = body;
        self.live -= 1;
        if let Some(from) = from {
            let (id, to) = (task.id, task.phase());
            self.trace.push(self.now, id, from, to, cause);
        }
    }

    /// Takes the next request to send to an executor, in the order tasks made them.
    #[must_use]
    pub fn poll_request(&mut self) -> Option<OutboundRequest> {
        self.outbox.pop_front()
    }

    /// Takes the next cancel signal for an executor: a request whose task ended.
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<CancelSignal> {
        self.cancels.pop_front()
    }

    /// When the earliest timer fires, if any is set.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Time> {
        while let Some(Reverse((deadline, _, slot, id))) = self.timers.peek().copied() {
            match self.tasks.get(slot as usize) {
                Some(t) if t.id == id && t.timer == Some(deadline) => return Some(deadline),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    /// Fires every timer due at or before `now`, in deadline order.
    pub fn handle_timeout(&mut self, now: Time) {
        self.advance(now);
        while let Some(Reverse((deadline, _, slot, id))) = self.timers.peek().copied() {
            if deadline > self.now {
                break;
            }
            self.timers.pop();
            let Some(task) = self.tasks.get_mut(slot as usize) else {
                continue;
            };
            if task.id != id || task.timer != Some(deadline) {
                continue;
            }
            let from =
                (self.trace.active() && task.phase == SlotPhase::Waiting).then(|| task.phase());
            task.timer = None;
            task.timer_fired = true;
            if task.phase == SlotPhase::Waiting {
                self.wake_if_due(slot, Cause::TimerFired, from);
            }
        }
    }

    /// Makes a waiting task ready if all it waits for has come. `from` is its phase
    /// before the answer or timer that may wake it (taken only when tracing).
    fn wake_if_due(&mut self, slot: u32, cause: Cause, from: Option<Phase>) {
        let Some(task) = self.tasks.get_mut(slot as usize) else {
            return;
        };
        if task.should_wake() {
            task.phase = SlotPhase::Ready;
            if let Some(from) = from {
                let id = task.id;
                self.trace.push(self.now, id, from, Phase::Ready, cause);
            }
            self.enqueue(slot);
        } else if let Some(from) = from {
            let (id, to) = (task.id, task.phase());
            self.trace.push(self.now, id, from, to, cause);
        }
    }

    /// Takes an executor's answer. It reaches its task if the task is alive and the
    /// request is in flight; otherwise it is counted in [`Stats::dropped_answers`] and
    /// dropped — a late answer never resurrects a task.
    pub fn handle_response(&mut self, now: Time, response: Response) -> Delivery {
        self.advance(now);
        let key = response.key;
        let Some(task) = self
            .tasks
            .get_mut(key.slot() as usize)
            .filter(|t| t.id == key.task())
        else {
            return self.drop_answer(DropReason::UnknownTask);
        };
        if task.phase == SlotPhase::Done {
            return self.drop_answer(DropReason::TaskFinished);
        }
        let waiting = task.phase == SlotPhase::Waiting;
        let from = (waiting && self.trace.active()).then(|| task.phase());
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            return self.drop_answer(DropReason::UnknownRequest);
        };
        pending.status = Status::Answered(response.result);
        self.in_flight -= 1;
        self.stats.answers += 1;
        if waiting {
            self.wake_if_due(key.slot(), Cause::Answered(key.number()), from);
        }
        Delivery::Delivered
    }

    fn drop_answer(&mut self, reason: DropReason) -> Delivery {
        self.stats.dropped_answers += 1;
        Delivery::Dropped(reason)
    }

    /// Ends the task whose request `key` no executor serves, with
    /// [`TaskError::NoExecutor`]. Drivers call it when routing finds no executor.
    pub fn handle_unroutable(&mut self, now: Time, key: RequestKey) -> Delivery {
        self.advance(now);
        let Some(task) = self
            .tasks
            .get_mut(key.slot() as usize)
            .filter(|t| t.id == key.task())
        else {
            return self.drop_answer(DropReason::UnknownTask);
        };
        if task.phase == SlotPhase::Done {
            return self.drop_answer(DropReason::TaskFinished);
        }
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            return self.drop_answer(DropReason::UnknownRequest);
        };
        let kind = pending.kind.clone();
        // The request never left: it gets no cancel signal.
        pending.status = Status::Answered(Err(crate::RequestError::Canceled));
        self.in_flight -= 1;
        let error = TaskError::NoExecutor {
            task: key.task(),
            kind,
        };
        self.finish(key.slot(), Err(error), Cause::NoExecutor);
        Delivery::Delivered
    }

    /// Cancels a live task: it ends [`TaskState::Canceled`], and each of its requests
    /// in flight gets a cancel signal.
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
        self.advance(now);
        let slot = *self.index.get(&id).ok_or(CancelError::UnknownTask(id))?;
        let task = &self.tasks[slot as usize];
        if task.phase == SlotPhase::Done {
            return Err(CancelError::AlreadyEnded {
                id,
                state: task.state(),
            });
        }
        self.end(
            slot,
            Body::Canceled(reason.clone()),
            Cause::Canceled(reason),
        );
        self.stats.canceled += 1;
        Ok(())
    }

    /// The state of a task, if it is in the table.
    pub fn task_state(&self, id: TaskId) -> Option<TaskState> {
        let slot = self.index.get(&id)?;
        Some(self.tasks[*slot as usize].state())
    }

    /// Removes an ended task from the table and returns how it ended; its slot is
    /// reused, its id never is. Live tasks stay (returns `None`).
    pub fn forget(&mut self, id: TaskId) -> Option<TaskState> {
        let slot = *self.index.get(&id)?;
        if self.tasks[slot as usize].phase != SlotPhase::Done {
            return None;
        }
        self.index.remove(&id);
        Some(self.tasks.remove(slot as usize).state())
    }

    /// Every task in the table, by id.
    pub fn tasks(&self) -> impl Iterator<Item = TaskInfo> + '_ {
        self.index.iter().map(move |(id, slot)| {
            let t = &self.tasks[*slot as usize];
            TaskInfo {
                id: *id,
                type_name: t.type_name,
                agent: self.agent_name(t.agent).to_owned(),
                priority: t.priority,
                state: t.state(),
                created_at: t.created_at,
                in_flight: t.pending.in_flight_count(),
            }
        })
    }

    /// Every request in flight, by key: what executors (or a human, for confirmations)
    /// still owe an answer to.
    pub fn in_flight(&self) -> Vec<InFlightRequest> {
        let mut out = Vec::new();
        for slot in self.index.values() {
            let t = &self.tasks[*slot as usize];
            for p in t.pending.as_slice() {
                if let Some(request) = p.request() {
                    out.push(InFlightRequest {
                        key: RequestKey::new(t.id, p.number, *slot),
                        request,
                    });
                }
            }
        }
        out
    }

    /// Tasks ready to be polled.
    pub fn ready_len(&self) -> usize {
        self.ready
    }

    /// Requests sent out and not yet answered.
    pub fn in_flight_len(&self) -> usize {
        self.in_flight
    }

    /// Tasks that have not ended.
    pub fn live_len(&self) -> usize {
        self.live
    }

    /// Tasks in the table, ended ones included.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Whether requests or cancel signals wait to be taken by `poll_*`.
    pub fn has_outbound(&self) -> bool {
        !self.outbox.is_empty() || !self.cancels.is_empty()
    }

    /// The counters so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The trace.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The trace, to take its events.
    pub fn trace_mut(&mut self) -> &mut Trace {
        &mut self.trace
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
