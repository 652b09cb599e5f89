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

mod admit;
mod gates;
mod keys;
mod recorder;
mod snapshot;
mod view;

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use slab::Slab;

use crate::limiter::Gate;
use crate::pending::{PendingSet, Status};
use crate::policy::{PolicyChoice, QueueEntry, RunQueue, TaskRef};
use crate::task::Family;
use crate::trace::{Cause, Phase, Trace};
use crate::{
    Admission, AgentId, CancelReason, CancelSignal, Delivery, DropReason, Kind, NewTask,
    OutboundRequest, Outcome, Priority, RequestKey, RequestLimits, Response, Stats, Step,
    TaskContext, TaskError, TaskId, TaskLimits, TaskState, Time, WaitReason,
};

pub use keys::{DEFAULT_IDEMPOTENCY_WINDOW, KeyRecord};
pub use view::{QueueDetail, QueueState, WaitCounts};

use admit::Admit;
use keys::KeyIndex;

/// How a scheduler is set up.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::{Config, Kind, PolicyChoice, RequestLimits, Scheduler, TaskLimits};
///
/// let scheduler = Scheduler::new(
///     Config::new()
///         .policy(PolicyChoice::FairShare)
///         .agent_weight("interactive", 3)
///         .limits(TaskLimits::new().max_running(50))
///         .requests(RequestLimits::new().max_in_flight(Kind::Llm, 10))
///         .retention(Duration::from_secs(600)),
/// );
/// assert_eq!(scheduler.policy_name(), "fair-share");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    /// Keep every trace event in memory (tests); off, events go only to `tracing`.
    pub record_trace: bool,
    /// The run-queue policy (FIFO by default).
    pub policy: PolicyChoice,
    /// Limits on tasks: concurrency, start window, queue caps.
    pub limits: TaskLimits,
    /// Limits on requests: per kind, per agent, 429 back-off.
    pub requests: RequestLimits,
    /// How long an ended task's result is kept before it is evicted; `None` keeps
    /// results until [`Scheduler::forget`].
    pub retention: Option<Duration>,
    /// Fair-share weights by agent name (1 when not set).
    pub agent_weights: BTreeMap<String, u32>,
    /// How long an ended task's [key](crate::NewTask::key) is remembered, so that a
    /// submission with it is refused ([`RejectReason::AlreadyEnded`]) even after the
    /// result was evicted; `None`: for as long as the scheduler lives (and, journaled,
    /// its store). [`DEFAULT_IDEMPOTENCY_WINDOW`] (a day) by default.
    ///
    /// [`RejectReason::AlreadyEnded`]: crate::RejectReason::AlreadyEnded
    pub idempotency_window: Option<Duration>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            record_trace: false,
            policy: PolicyChoice::default(),
            limits: TaskLimits::default(),
            requests: RequestLimits::default(),
            retention: None,
            agent_weights: BTreeMap::new(),
            idempotency_window: Some(DEFAULT_IDEMPOTENCY_WINDOW),
        }
    }
}

impl Config {
    /// The default configuration: FIFO, no limits but 429 back-off, results kept until
    /// forgotten, no trace recording.
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets whether trace events are kept in memory.
    #[must_use]
    pub fn record_trace(mut self, record: bool) -> Config {
        self.record_trace = record;
        self
    }

    /// Sets the run-queue policy.
    #[must_use]
    pub fn policy(mut self, policy: PolicyChoice) -> Config {
        self.policy = policy;
        self
    }

    /// Sets the limits on tasks.
    #[must_use]
    pub fn limits(mut self, limits: TaskLimits) -> Config {
        self.limits = limits;
        self
    }

    /// Sets the limits on requests.
    #[must_use]
    pub fn requests(mut self, limits: RequestLimits) -> Config {
        self.requests = limits;
        self
    }

    /// Keeps ended tasks' results for `ttl`, then evicts them.
    #[must_use]
    pub fn retention(mut self, ttl: Duration) -> Config {
        self.retention = Some(ttl);
        self
    }

    /// Remembers an ended task's key for `window` (`None`: for good), so that a
    /// resubmission with it is refused even after its result was evicted.
    #[must_use]
    pub fn idempotency_window(mut self, window: Option<Duration>) -> Config {
        self.idempotency_window = window;
        self
    }

    /// Gives `agent` a fair-share weight: it may have `weight` times as many tasks
    /// running as an agent of weight 1.
    #[must_use]
    pub fn agent_weight(mut self, agent: impl Into<String>, weight: u32) -> Config {
        self.agent_weights.insert(agent.into(), weight.max(1));
        self
    }
}

/// What became of a submission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submission {
    /// The task's id.
    pub id: TaskId,
    /// How it was admitted.
    pub admission: Admission,
}

/// Why a submission failed outright (nothing of it was accepted).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The task table holds as many tasks as its slot numbers can address (2³²).
    #[error("the task table is full ({live} tasks); let some finish or forget finished ones")]
    TableFull {
        /// Tasks in the table.
        live: usize,
    },
    /// A journaling driver was given a task it cannot save for its journal.
    #[error("a `{type_name}` task cannot be journaled: {reason}")]
    NotSaveable {
        /// The task's type.
        type_name: String,
        /// What its `save` said.
        reason: String,
    },
    /// A dependency names a task that is not in the table (never submitted, or ended
    /// and evicted).
    #[error(
        "task {index} of the submission depends on task {dependency}, which is not in the table"
    )]
    UnknownDependency {
        /// The task's index in the submission (0 for `submit`).
        index: usize,
        /// The missing task.
        dependency: TaskId,
    },
    /// A parent names a task that is not in the table.
    #[error(
        "task {index} of the submission names task {parent} as its parent, which is not in the table"
    )]
    UnknownParent {
        /// The task's index in the submission.
        index: usize,
        /// The missing parent.
        parent: TaskId,
    },
    /// A batch dependency points outside the batch.
    #[error(
        "task {index} of the submission depends on batch entry {dependency}, and the batch has {len}"
    )]
    BadBatchIndex {
        /// The task's index in the submission.
        index: usize,
        /// The index it named.
        dependency: usize,
        /// The batch's length.
        len: usize,
    },
    /// The dependencies form a cycle: these batch entries, each depending on the next
    /// and the last on the first.
    #[error("the dependencies form a cycle: {}", cycle_text(.cycle))]
    Cycle {
        /// The entries on the cycle, by index in the submission.
        cycle: Vec<usize>,
    },
}

fn cycle_text(cycle: &[usize]) -> String {
    let mut text: Vec<String> = cycle.iter().map(|i| format!("#{i}")).collect();
    if let Some(first) = cycle.first() {
        text.push(format!("#{first}"));
    }
    text.join(" -> ")
}

/// Why a task could not be canceled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CancelError {
    /// No task has that id (never submitted, or finished and forgotten).
    #[error("no task {0}")]
    UnknownTask(TaskId),
    /// The task has already ended.
    #[error("task {id} has already ended: {state}")]
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
    /// Waiting for a slot (in the admission queue, or parked behind a per-agent or
    /// per-type cap).
    Queued,
    /// Waiting for dependencies.
    Blocked,
    Done,
}

#[derive(Debug)]
enum Body {
    Live(Box<dyn crate::AgentTask>),
    Ended(Box<Ended>),
}

/// What is left of a task that ended: its final state, and its type for listings.
#[derive(Debug)]
struct Ended {
    state: TaskState,
    /// Its body's name, or, restored from a snapshot, the registered spelling or (for a
    /// type the registry does not know) the name read, owned by this task.
    type_name: Cow<'static, str>,
    /// Its depth, for tasks submitted under it later.
    depth: u32,
}

/// How a live task ends: the two terminal states, and nothing else.
#[derive(Debug)]
enum Ending {
    Completed(Outcome),
    Canceled(CancelReason),
}

impl Ending {
    /// What the task's parent receives.
    fn parent_outcome(&self, task: TaskId) -> Outcome {
        match self {
            Ending::Completed(outcome) => outcome.clone(),
            Ending::Canceled(reason) => Err(TaskError::Canceled {
                task,
                reason: reason.clone(),
            }),
        }
    }

    fn into_state(self) -> TaskState {
        match self {
            Ending::Completed(outcome) => TaskState::Completed(outcome),
            Ending::Canceled(reason) => TaskState::Canceled(reason),
        }
    }
}

/// The hot part of a task: what every step and every answer touches, kept small
/// (see `slot_stays_small`). What an ended task keeps is boxed out of line.
#[derive(Debug)]
struct TaskSlot {
    id: TaskId,
    body: Body,
    /// `Time::MAX` when no timer is set.
    timer: Time,
    created_at: Time,
    next_request: u32,
    /// Requests made and not answered (sent or still in the outbox).
    in_flight: u32,
    agent: AgentId,
    phase: SlotPhase,
    wait_any: bool,
    timer_fired: bool,
    /// Whether the task was admitted as a task of its own (not a spawned child): it
    /// counts as running for limits and fair share until it ends.
    holds_slot: bool,
    priority: Priority,
    pending: PendingSet,
    /// Parent, children, joins: cold, allocated only in task graphs.
    family: Option<Box<Family>>,
}

impl TaskSlot {
    fn wait_reason(&self) -> WaitReason {
        match self.phase {
            SlotPhase::Queued => return WaitReason::Slot,
            SlotPhase::Blocked => {
                return WaitReason::Dependencies(self.family.as_ref().map_or(0, |f| f.unmet));
            }
            _ => {}
        }
        let mut in_flight = self.pending.as_slice().iter().filter(|p| p.in_flight());
        match (in_flight.next(), self.in_flight) {
            (None, _) if self.joined() > 0 => WaitReason::Children(self.joined()),
            (None, _) => WaitReason::Timer,
            (Some(p), 1) => WaitReason::Request(p.kind.clone()),
            (Some(_), n) => WaitReason::Requests(n),
        }
    }

    fn phase(&self) -> Phase {
        match self.phase {
            SlotPhase::Ready => Phase::Ready,
            SlotPhase::Running => Phase::Running,
            SlotPhase::Waiting | SlotPhase::Queued | SlotPhase::Blocked => {
                Phase::Waiting(self.wait_reason())
            }
            SlotPhase::Done => match &self.body {
                Body::Ended(ended) => match &ended.state {
                    TaskState::Completed(Ok(_)) => Phase::Completed,
                    TaskState::Canceled(_) => Phase::Canceled,
                    _ => Phase::Failed,
                },
                Body::Live(_) => Phase::Running,
            },
        }
    }

    fn state(&self) -> TaskState {
        match self.phase {
            SlotPhase::Ready => TaskState::Ready,
            SlotPhase::Running => TaskState::Running,
            SlotPhase::Waiting | SlotPhase::Queued | SlotPhase::Blocked => {
                TaskState::Waiting(self.wait_reason())
            }
            SlotPhase::Done => match &self.body {
                Body::Ended(ended) => ended.state.clone(),
                Body::Live(_) => TaskState::Running,
            },
        }
    }

    /// The task's type name, live or ended.
    fn type_name(&self) -> &str {
        match &self.body {
            Body::Live(body) => body.type_name(),
            Body::Ended(ended) => &ended.type_name,
        }
    }

    /// The type name of a live task — the only kind that is queued, holds a slot or is
    /// parked behind a cap — as its body spells it. An ended task restored with a type
    /// the registry does not know has no `'static` name: the empty string then.
    fn live_type_name(&self) -> &'static str {
        match &self.body {
            Body::Live(body) => body.type_name(),
            Body::Ended(ended) => match ended.type_name {
                Cow::Borrowed(name) => name,
                Cow::Owned(_) => "",
            },
        }
    }

    /// Whether what the task waits for has all arrived.
    #[inline]
    fn should_wake(&self) -> bool {
        self.wait_any || (self.in_flight == 0 && self.timer == Time::MAX && self.joined() == 0)
    }

    /// How many children the task waits for.
    #[inline]
    fn joined(&self) -> u32 {
        self.family.as_ref().map_or(0, |f| f.joined.len() as u32)
    }

    fn depth(&self) -> u32 {
        match (&self.family, &self.body) {
            (Some(family), _) => family.depth,
            (None, Body::Ended(ended)) => ended.depth,
            (None, Body::Live(_)) => 0,
        }
    }

    fn iteration(&self) -> u32 {
        self.family
            .as_ref()
            .map_or(1, |f| f.retries.saturating_add(1))
    }

    /// The task as a queue entry.
    fn entry(&self, slot: u32, seq: u64, now: Time, weight: u32) -> QueueEntry {
        QueueEntry {
            task: TaskRef {
                task: self.id,
                slot,
            },
            seq,
            priority: self.priority,
            agent: self.agent,
            weight,
            enqueued_at: now,
            created_at: self.created_at,
            type_name: self.live_type_name(),
            depth: self.depth(),
            iteration: self.iteration(),
        }
    }
}

/// The run queue with its bookkeeping: the policy, the sequence number that breaks
/// ties, and how many tasks are ready (the policy may hold skipped entries too).
#[derive(Debug)]
struct ReadyQueue {
    policy: RunQueue,
    seq: u64,
    len: usize,
    /// Fair-share weights by agent id.
    weights: Vec<u32>,
}

impl ReadyQueue {
    fn new(policy: RunQueue) -> ReadyQueue {
        ReadyQueue {
            policy,
            seq: 0,
            len: 0,
            weights: vec![1],
        }
    }

    /// Hands a task to the policy: just its reference to the simple ones.
    #[inline(always)]
    fn enqueue(&mut self, now: Time, slot: u32, task: &TaskSlot) {
        self.seq += 1;
        if self.policy.needs_entry() {
            self.enqueue_entry(now, slot, task);
        } else {
            let task_ref = TaskRef {
                task: task.id,
                slot,
            };
            self.policy.push_ref(task_ref, self.seq, task.priority);
        }
    }

    /// Hands the whole entry to a policy that orders by more than the level.
    #[inline(never)]
    fn enqueue_entry(&mut self, now: Time, slot: u32, task: &TaskSlot) {
        let weight = self
            .weights
            .get(task.agent.0 as usize)
            .copied()
            .unwrap_or(1);
        self.policy.push(&task.entry(slot, self.seq, now, weight));
    }

    /// Puts a task in the run queue.
    #[inline(always)]
    fn push(&mut self, stats: &mut Stats, now: Time, slot: u32, task: &TaskSlot) {
        self.enqueue(now, slot, task);
        self.len += 1;
        if self.len as u64 > stats.peak_ready {
            stats.peak_ready = self.len as u64;
        }
    }
}

/// Makes a waiting task ready if all it waits for has come, and traces what changed.
/// `from` is its phase before the answer or timer (taken only when tracing). A free
/// function so that callers holding the task's slot can call it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn wake(
    task: &mut TaskSlot,
    slot: u32,
    cause: Cause,
    from: Option<Phase>,
    now: Time,
    ready: &mut ReadyQueue,
    trace: &mut Trace,
    stats: &mut Stats,
) {
    if task.should_wake() {
        task.phase = SlotPhase::Ready;
        if let Some(from) = from {
            trace.push(now, task.id, from, Phase::Ready, cause);
        }
        ready.push(stats, now, slot, task);
    } else if let Some(from) = from {
        let to = task.phase();
        trace.push(now, task.id, from, to, cause);
    }
}

/// Where an answer's effects go: requests in flight overall, the run queue, the trace
/// and the counters.
type Sinks<'a> = (
    &'a mut usize,
    &'a mut ReadyQueue,
    &'a mut Trace,
    &'a mut Stats,
);

/// Records an answer in the task waiting for it (its request `key` is in flight) and
/// wakes the task if that was all it waited for. `from` is its phase (when tracing).
#[inline(always)]
fn record_answer(
    task: &mut TaskSlot,
    key: RequestKey,
    result: Result<serde_json::Value, crate::RequestError>,
    from: Option<Phase>,
    waiting: bool,
    now: Time,
    (in_flight, ready, trace, stats): Sinks<'_>,
) -> Delivery {
    let Some(pending) = task.pending.in_flight_mut(key.number()) else {
        stats.dropped_answers += 1;
        return Delivery::Dropped(DropReason::UnknownRequest);
    };
    pending.status = Status::Answered(result.map_err(Box::new));
    task.in_flight -= 1;
    *in_flight -= 1;
    stats.answers += 1;
    let cause = Cause::Answered(key.number());
    if waiting {
        wake(task, key.slot(), cause, from, now, ready, trace, stats);
    } else if let Some(from) = from {
        trace.push(now, key.task(), from, Phase::Ready, cause);
    }
    Delivery::Delivered
}

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
    tasks: Slab<TaskSlot>,
    index: BTreeMap<TaskId, u32>,
    next_task: u64,
    /// Sequence numbers for timers (the run queue keeps its own).
    next_seq: u64,
    ready: ReadyQueue,
    live: usize,
    in_flight: usize,
    /// Keys of requests made and not yet taken by the driver. The key's task id guards
    /// against a slot reused after its task ended and was forgotten.
    outbox: VecDeque<RequestKey>,
    cancels: VecDeque<CancelSignal>,
    timers: BinaryHeap<Reverse<(Time, u64, u32, TaskId)>>,
    /// Children spawned during the current poll (reused between polls).
    spawned: Vec<(TaskId, NewTask)>,
    agents: Vec<Cow<'static, str>>,
    agent_index: BTreeMap<Cow<'static, str>, AgentId>,
    trace: Trace,
    stats: Stats,
    /// Slot accounting and the queue of tasks waiting for a slot; only when a limit
    /// gates the start of tasks.
    admit: Option<Box<Admit>>,
    limits: TaskLimits,
    /// Tasks waiting for a slot, and waiting for dependencies.
    waiting_for_slot: usize,
    blocked: usize,
    /// Tasks waiting for a slot, by priority level (for queue positions).
    slot_wait_by_level: [usize; 4],
    /// Queued tasks (waiting for a slot or dependencies) by agent.
    queued_per_agent: Vec<u32>,
    /// Keys of live tasks, and of ended ones within the idempotency window.
    keys: KeyIndex,
    /// Task deadlines: `(deadline, seq, slot, id)`.
    deadlines: BinaryHeap<Reverse<(Time, u64, u32, TaskId)>>,
    retention: Option<Duration>,
    /// Ended tasks to evict, in the order they are due.
    expiry: VecDeque<(Time, TaskId)>,
    /// Dependents and children to cancel, drained by the outermost `end`.
    cascade: VecDeque<(u32, TaskId, CancelReason)>,
    /// Set while a task ends (and while a batch is submitted): tasks that enter
    /// admission meanwhile only queue, and slots are filled once at the end, so they go
    /// to the best of all the tasks released, not to the first.
    cascading: bool,
    request_limits: RequestLimits,
    /// The policy it was built with (snapshots name it).
    policy: PolicyChoice,
    /// Whether requests go through gates (some kind has one, or agents are capped).
    gating: bool,
    gates: BTreeMap<Kind, Gate>,
    /// Requests of ungated kinds, taken from the outbox while sorting it.
    direct: VecDeque<RequestKey>,
    /// Requests sent through gates and not answered, by agent.
    agent_in_flight: Vec<u32>,
    /// Requests held back by their agent's cap, by agent, as they were held.
    parked_requests: BTreeMap<AgentId, VecDeque<crate::limiter::Held>>,
    hold_seq: u64,
    /// How many times each request was sent again after a 429, and how long it waited.
    retries: BTreeMap<RequestKey, crate::limiter::Retried>,
    /// The journal being recorded, if one is (see `recorder`).
    journal: Option<Box<recorder::Recorder>>,
}

impl Scheduler {
    /// A scheduler set up by `config`.
    pub fn new(config: Config) -> Scheduler {
        let default_agent: Cow<'static, str> = Cow::Borrowed("default");
        let admit = config
            .limits
            .gates_starts()
            .then(|| Box::new(Admit::new(&config.limits, config.policy.build_admission())));
        let gating =
            !config.requests.kinds.is_empty() || config.requests.per_agent_in_flight.is_some();
        let gates = config
            .requests
            .kinds
            .iter()
            .map(|(kind, limits)| (kind.clone(), Gate::new(Some(limits))))
            .collect();
        let mut scheduler = Scheduler {
            now: Time::ZERO,
            tasks: Slab::new(),
            index: BTreeMap::new(),
            next_task: 1,
            next_seq: 0,
            ready: ReadyQueue::new(config.policy.build()),
            live: 0,
            in_flight: 0,
            outbox: VecDeque::new(),
            cancels: VecDeque::new(),
            timers: BinaryHeap::new(),
            spawned: Vec::new(),
            agents: vec![default_agent.clone()],
            agent_index: BTreeMap::from([(default_agent, AgentId::DEFAULT)]),
            trace: Trace::new(config.record_trace),
            stats: Stats::default(),
            admit,
            limits: config.limits,
            waiting_for_slot: 0,
            blocked: 0,
            slot_wait_by_level: [0; 4],
            queued_per_agent: vec![0],
            keys: KeyIndex::new(config.idempotency_window),
            deadlines: BinaryHeap::new(),
            retention: config.retention,
            expiry: VecDeque::new(),
            cascade: VecDeque::new(),
            cascading: false,
            request_limits: config.requests,
            policy: config.policy.clone(),
            gating,
            gates,
            direct: VecDeque::new(),
            agent_in_flight: vec![0],
            parked_requests: BTreeMap::new(),
            hold_seq: 0,
            retries: BTreeMap::new(),
            journal: None,
        };
        for (name, weight) in config.agent_weights {
            let agent = scheduler.agent_id(Some(Cow::Owned(name)));
            scheduler.set_weight(agent, weight);
        }
        scheduler
    }

    fn set_weight(&mut self, agent: AgentId, weight: u32) {
        let index = agent.0 as usize;
        for weights in std::iter::once(&mut self.ready.weights)
            .chain(self.admit.as_mut().map(|a| &mut a.queue.weights))
        {
            if weights.len() <= index {
                weights.resize(index + 1, 1);
            }
            weights[index] = weight.max(1);
        }
    }

    /// Moves the clock; time never goes back, so an earlier `now` leaves it as it is.
    /// Results whose retention has run out are evicted.
    #[inline]
    fn advance(&mut self, now: Time) {
        if now > self.now {
            self.now = now;
            if !self.expiry.is_empty() {
                self.evict_expired();
            }
            if self.keys.next_expiry().is_some_and(|at| at <= now) {
                self.keys.expire(now);
            }
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
        self.queued_per_agent.push(0);
        self.agent_in_flight.push(0);
        id
    }

    /// An agent's name.
    pub fn agent_name(&self, agent: AgentId) -> &str {
        self.agents
            .get(agent.0 as usize)
            .map_or("?", |name| name.as_ref())
    }

    /// Starts the children the task in `slot` spawned during its poll (most polls
    /// spawn none: that check stays on the hot path, the rest off it).
    #[inline(always)]
    fn start_children(&mut self, parent_slot: u32, parent: TaskId) {
        if !self.spawned.is_empty() {
            self.start_spawned(parent_slot, parent);
        }
    }

    #[inline(never)]
    fn start_spawned(&mut self, parent_slot: u32, parent: TaskId) {
        let mut spawned = std::mem::take(&mut self.spawned);
        for (id, task) in spawned.drain(..) {
            if self.tasks.len() >= u32::MAX as usize {
                // No room: the child ends before it starts, and its parent is told.
                let error =
                    TaskError::failed(format!("task {id} could not start: the task table is full"));
                self.child_ended(parent_slot, parent, id, Err(error));
                continue;
            }
            let _ = self.insert(id, task, Some((parent, parent_slot)), &[]);
        }
        self.spawned = spawned;
    }

    /// Tells a live parent that its child ended: the outcome waits for it to take, and
    /// if it joined the child it may wake.
    fn child_ended(&mut self, parent_slot: u32, parent: TaskId, child: TaskId, outcome: Outcome) {
        let tracing = self.trace.active();
        let Some(task) = self.tasks.get_mut(parent_slot as usize) else {
            return;
        };
        if task.id != parent || task.phase == SlotPhase::Done {
            return;
        }
        let from = (tracing && task.phase == SlotPhase::Waiting).then(|| task.phase());
        let family = task.family.get_or_insert_with(Default::default);
        family.children.retain(|c| *c != child);
        let joined = family
            .joined
            .iter()
            .position(|c| *c == child)
            .map(|i| family.joined.remove(i));
        family.results.push((child, outcome));
        if joined.is_some() && task.phase == SlotPhase::Waiting {
            let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
            wake(
                task,
                parent_slot,
                Cause::ChildEnded(child),
                from,
                self.now,
                ready,
                trace,
                stats,
            );
        } else if tracing && task.phase == SlotPhase::Ready {
            // Like an answer to a ready task: every child's end is in its parent's trace.
            let cause = Cause::ChildEnded(child);
            self.trace
                .push(self.now, parent, Phase::Ready, Phase::Ready, cause);
        }
    }

    /// Polls the next ready task once. Returns the task polled, or `None` when no task
    /// is ready.
    pub fn step(&mut self, now: Time) -> Option<TaskId> {
        self.journal_step(now);
        self.advance(now);
        let now = self.now;
        let (slot, task) = loop {
            let next = self.ready.policy.pop(now)?;
            match self.tasks.get_mut(next.slot as usize) {
                Some(t) if t.id == next.task && t.phase == SlotPhase::Ready => {
                    break (next.slot, t);
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
        task.phase = SlotPhase::Running;
        let timer_before = task.timer;
        let TaskSlot {
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
            slot,
            now,
            pending,
            next_request,
            in_flight,
            timer,
            timer_fired,
            outbox: &mut self.outbox,
            issued: 0,
            family,
            spawned: &mut self.spawned,
            next_task: &mut self.next_task,
        };
        let result = catch_unwind(AssertUnwindSafe(|| body.poll(&mut cx)));
        let issued = cx.issued;
        self.stats.polls += 1;
        let step = match result {
            Ok(Step::Done(outcome)) => {
                self.retract(slot, issued);
                self.finish(slot, outcome, Cause::Returned);
                return Some(id);
            }
            Ok(step) => step,
            Err(panic) => {
                self.retract(slot, issued);
                let message = panic_message(panic.as_ref());
                self.finish(
                    slot,
                    Err(TaskError::Panicked { task: id, message }),
                    Cause::Panicked,
                );
                return Some(id);
            }
        };
        let task = &mut self.tasks[slot as usize];
        task.pending.drop_answers();
        let timer_set = task.timer != timer_before && task.timer != Time::MAX;
        if timer_set {
            self.next_seq += 1;
            self.timers
                .push(Reverse((task.timer, self.next_seq, slot, id)));
        }
        self.in_flight += issued as usize;
        self.stats.requests += u64::from(issued);
        if self.in_flight as u64 > self.stats.peak_in_flight {
            self.stats.peak_in_flight = self.in_flight as u64;
        }
        let joined_ended = task.family.as_mut().and_then(|f| f.joined_ended.take());
        if let Step::Yield = step {
            task.phase = SlotPhase::Ready;
            self.stats.yields += 1;
            if tracing {
                self.trace
                    .push(now, id, Phase::Running, Phase::Ready, Cause::Yielded);
            }
            self.ready.push(&mut self.stats, now, slot, task);
            self.start_children(slot, id);
            return Some(id);
        }
        // A child joined in this poll had already ended: the task goes on at once.
        if let Some(child) = joined_ended {
            task.phase = SlotPhase::Ready;
            if tracing {
                let cause = Cause::ChildEnded(child);
                self.trace
                    .push(now, id, Phase::Running, Phase::Ready, cause);
            }
            self.ready.push(&mut self.stats, now, slot, task);
            self.start_children(slot, id);
            return Some(id);
        }
        if task.in_flight == 0 && task.timer == Time::MAX && task.joined() == 0 {
            self.spawned.clear();
            let hint = "it waits with no request in flight, no timer set and no child joined \
                        (an async task that awaits something other than a spool request does \
                        this)";
            let error = TaskError::Stalled {
                task: id,
                hint: hint.to_owned(),
            };
            self.finish(slot, Err(error), Cause::Stalled);
            return Some(id);
        }
        task.phase = SlotPhase::Waiting;
        task.wait_any = matches!(step, Step::WaitAny);
        if tracing {
            let cause = if issued > 0 {
                Cause::Requested(issued)
            } else if timer_set {
                Cause::Sleeping
            } else {
                Cause::Waiting
            };
            let to = task.phase();
            self.trace.push(now, id, Phase::Running, to, cause);
        }
        self.start_children(slot, id);
        Some(id)
    }

    /// Takes back the requests the task just polled put in the outbox: it ended in the
    /// same poll, so they never go out.
    fn retract(&mut self, slot: u32, issued: u32) {
        for _ in 0..issued {
            self.outbox.pop_back();
        }
        // Children spawned in the same poll are never started.
        self.spawned.clear();
        // They were counted on the task as they were made, but never in the global
        // count (that happens after a poll that goes on waiting): take them off the task
        // so that ending it subtracts only what was counted.
        if let Some(task) = self.tasks.get_mut(slot as usize) {
            task.in_flight -= issued;
        }
    }

    /// Ends a live task with `outcome`.
    fn finish(&mut self, slot: u32, outcome: Outcome, cause: Cause) {
        let ok = outcome.is_ok();
        self.end(slot, Ending::Completed(outcome), cause, None);
        if ok {
            self.stats.completed += 1;
        } else {
            self.stats.failed += 1;
        }
    }

    /// Ends a live task: each request it has out with an executor gets a cancel
    /// signal; requests still in the outbox are skipped by `poll_request`; its body is
    /// dropped and its final state kept. `from` is its phase before whatever ended it,
    /// if the caller already changed it (taken only when tracing).
    fn end(&mut self, slot: u32, ending: Ending, cause: Cause, from: Option<Phase>) {
        let tracing = self.trace.active();
        let Some(task) = self.tasks.get_mut(slot as usize) else {
            return;
        };
        // The outermost `end` finishes the cascade and fills the freed slots, once.
        let outermost = !self.cascading;
        self.cascading = true;
        let from = if tracing {
            Some(from.unwrap_or_else(|| task.phase()))
        } else {
            None
        };
        let agent = task.agent;
        let queued = TaskRef {
            task: task.id,
            slot,
        };
        match task.phase {
            SlotPhase::Ready => {
                self.ready.len -= 1;
                self.ready.policy.forget(queued);
            }
            SlotPhase::Queued => {
                if let Some(admit) = self.admit.as_mut() {
                    admit.forget_queued(task.id);
                    admit.queue.policy.forget(queued);
                }
                self.waiting_for_slot -= 1;
                self.slot_wait_by_level[task.priority as usize] -= 1;
                self.queued_per_agent[agent.0 as usize] -= 1;
            }
            SlotPhase::Blocked => {
                self.blocked -= 1;
                self.queued_per_agent[agent.0 as usize] -= 1;
            }
            _ => {}
        }
        let mut agent_freed = false;
        for p in task.pending.take_all() {
            if !p.in_flight() {
                continue;
            }
            if !self.retries.is_empty() {
                // A request that ended mid-back-off is not sent again.
                self.retries
                    .remove(&RequestKey::new(task.id, p.number, slot));
            }
            if p.counted() {
                if let Some(gate) = self.gates.get_mut(&p.kind) {
                    gate.in_flight -= 1;
                }
                self.agent_in_flight[agent.0 as usize] -= 1;
                agent_freed = true;
            }
            if p.sent() {
                self.cancels.push_back(CancelSignal {
                    key: RequestKey::new(task.id, p.number, slot),
                    kind: p.kind,
                });
            }
        }
        self.in_flight -= task.in_flight as usize;
        task.in_flight = 0;
        task.timer = Time::MAX;
        task.phase = SlotPhase::Done;
        let held_slot = std::mem::take(&mut task.holds_slot);
        let type_name = task.live_type_name();
        let depth = task.depth();
        let family = task.family.take();
        let id = task.id;
        let ok = matches!(ending, Ending::Completed(Ok(_)));
        // What its parent, if it has one, receives.
        let outcome = family
            .as_ref()
            .and_then(|f| f.parent)
            .map(|parent| (parent, ending.parent_outcome(id)));
        let state = ending.into_state();
        task.body = Body::Ended(Box::new(Ended {
            state,
            type_name: Cow::Borrowed(type_name),
            depth,
        }));
        self.live -= 1;
        if let Some(from) = from {
            let to = task.phase();
            self.trace.push(self.now, id, from, to, cause);
        }
        if let Some(ttl) = self.retention {
            self.expiry.push_back((self.now + ttl, id));
        }
        if let Some(((parent, parent_slot), outcome)) = outcome {
            self.child_ended(parent_slot, parent, id, outcome);
        }
        if held_slot {
            self.release_slot(id, agent, type_name);
        }
        if agent_freed {
            self.unpark_requests(agent);
        }
        if let Some(family) = family {
            if let Some(key) = &family.key {
                self.keys.ended(key, id, self.now);
            }
            // A child never outlives its parent: cancel the live ones, transitively —
            // depth first, in spawn order (a stack, so long chains need no recursion).
            for child in family.children.iter().rev() {
                if let Some(&child_slot) = self.index.get(child) {
                    self.cascade
                        .push_front((child_slot, *child, CancelReason::ParentEnded(id)));
                }
            }
            // Its dependents go on if it completed well; otherwise they never can.
            if ok {
                for (dependent, dependent_slot) in &family.dependents {
                    self.dependency_done(*dependent_slot, *dependent, id);
                }
            } else {
                for (dependent, dependent_slot) in family.dependents.iter().rev() {
                    self.cascade.push_front((
                        *dependent_slot,
                        *dependent,
                        CancelReason::DependencyFailed(id),
                    ));
                }
            }
        }
        if outermost {
            while let Some((slot, id, reason)) = self.cascade.pop_front() {
                let live = self
                    .tasks
                    .get(slot as usize)
                    .is_some_and(|t| t.id == id && t.phase != SlotPhase::Done);
                if live {
                    self.cancel_slot(slot, reason);
                }
            }
            self.cascading = false;
            self.fill_slots();
        }
    }

    /// Ends a live task `Canceled` for `reason`, and counts it.
    fn cancel_slot(&mut self, slot: u32, reason: CancelReason) {
        let cause = Cause::Canceled(reason.clone());
        self.end(slot, Ending::Canceled(reason), cause, None);
        self.stats.canceled += 1;
    }

    /// Takes the next request to send to an executor: in the order tasks made them,
    /// except that requests of a kind with limits wait at its gate and go in the order
    /// of their tasks' priority when the limits let them.
    #[must_use]
    pub fn poll_request(&mut self) -> Option<OutboundRequest> {
        self.journal_take(true);
        if self.gating {
            return self.poll_gated();
        }
        loop {
            let Some(key) = self.outbox.pop_front() else {
                if self.outbox.capacity() > OUTBOX_KEEP {
                    self.outbox.shrink_to(OUTBOX_KEEP);
                }
                return None;
            };
            if let Some(out) = self.send(key) {
                return Some(out);
            }
        }
    }

    /// Marks request `key` sent and returns it, unless its task ended before it left.
    #[inline(always)]
    fn send(&mut self, key: RequestKey) -> Option<OutboundRequest> {
        let task = self.tasks.get_mut(key.slot() as usize)?;
        if task.id != key.task() || task.phase == SlotPhase::Done {
            return None;
        }
        let request = task.pending.send(key.number())?;
        Some(OutboundRequest { key, request })
    }

    /// Takes the next cancel signal for an executor: a request whose task ended.
    #[must_use]
    pub fn poll_cancel(&mut self) -> Option<CancelSignal> {
        if !self.cancels.is_empty() {
            self.journal_take(false);
        }
        self.cancels.pop_front()
    }

    /// When the scheduler next needs [`handle_timeout`](Scheduler::handle_timeout): the
    /// earliest timer, task deadline, or moment a limit lets a held request or a queued
    /// task go, if any.
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Time> {
        let mut next = None;
        while let Some(Reverse((deadline, _, slot, id))) = self.timers.peek().copied() {
            match self.tasks.get(slot as usize) {
                Some(t) if t.id == id && t.timer == deadline => {
                    next = Some(deadline);
                    break;
                }
                _ => {
                    self.timers.pop();
                }
            }
        }
        if !self.deadlines.is_empty() {
            next = earliest(next, self.next_deadline());
        }
        if self.gating {
            next = earliest(next, self.gates_free_at());
        }
        if self.admit.is_some() {
            next = earliest(next, self.start_window_free_at());
        }
        next
    }

    /// Fires every timer due at or before `now`, in deadline order; fails tasks whose
    /// deadline has passed; lets queued tasks start if the start window has room.
    pub fn handle_timeout(&mut self, now: Time) {
        self.journal_timeout(now);
        self.advance(now);
        if !self.deadlines.is_empty() {
            self.fire_deadlines();
        }
        if self.waiting_for_slot > 0 {
            self.fill_slots();
        }
        let tracing = self.trace.active();
        while let Some(Reverse((deadline, _, slot, id))) = self.timers.peek().copied() {
            if deadline > self.now {
                break;
            }
            self.timers.pop();
            let Some(task) = self.tasks.get_mut(slot as usize) else {
                continue;
            };
            if task.id != id || task.timer != deadline {
                continue;
            }
            let from = (tracing && task.phase == SlotPhase::Waiting).then(|| task.phase());
            task.timer = Time::MAX;
            task.timer_fired = true;
            if task.phase == SlotPhase::Waiting {
                let now = self.now;
                let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
                wake(
                    task,
                    slot,
                    Cause::TimerFired,
                    from,
                    now,
                    ready,
                    trace,
                    stats,
                );
            }
        }
    }

    /// Takes an executor's answer. It reaches its task if the task is alive and the
    /// request is in flight; otherwise it is counted in [`Stats::dropped_answers`] and
    /// dropped — a late answer never resurrects a task.
    pub fn handle_response(&mut self, now: Time, response: Response) -> Delivery {
        self.journal_answer(now, &response);
        self.advance(now);
        let key = self.locate(response.key);
        let task = match answered_task(&mut self.tasks, key) {
            Ok(task) => task,
            Err(reason) => return self.drop_answer(reason),
        };
        let waiting = task.phase == SlotPhase::Waiting;
        // Every delivered answer is in the trace, in arrival order: a waiting task's
        // through `wake`, a ready one's (it yielded with requests out) as Ready -> Ready.
        let from = self.trace.active().then(|| task.phase());
        if self.gating || response.result.is_err() {
            if task.pending.in_flight_mut(key.number()).is_none() {
                return self.drop_answer(DropReason::UnknownRequest);
            }
            // The gates' side first: a 429 goes back to its gate instead of the task, or
            // reaches it as the error of a back-off given up.
            let result = match self.gate_answer(key, &response) {
                Err(delivery) => return delivery,
                Ok(Some(error)) => Err(error),
                Ok(None) => response.result,
            };
            let Some(task) = self.tasks.get_mut(key.slot() as usize) else {
                return self.drop_answer(DropReason::UnknownTask);
            };
            let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
            let sinks = (&mut self.in_flight, ready, trace, stats);
            return record_answer(task, key, result, from, waiting, self.now, sinks);
        }
        let (ready, trace, stats) = (&mut self.ready, &mut self.trace, &mut self.stats);
        let sinks = (&mut self.in_flight, ready, trace, stats);
        record_answer(task, key, response.result, from, waiting, self.now, sinks)
    }

    /// `key` with its task's slot now. Keys carry the slot their task had when they were
    /// made; after a restore (slots are renumbered) an answer to a request sent before
    /// it finds its task by id instead.
    #[inline]
    fn locate(&self, key: RequestKey) -> RequestKey {
        match self.tasks.get(key.slot() as usize) {
            Some(task) if task.id == key.task() => key,
            _ => match self.index.get(&key.task()) {
                Some(slot) => RequestKey::new(key.task(), key.number(), *slot),
                None => key,
            },
        }
    }

    fn drop_answer(&mut self, reason: DropReason) -> Delivery {
        self.stats.dropped_answers += 1;
        Delivery::Dropped(reason)
    }

    /// Ends the task whose request `key` no executor serves, with
    /// [`TaskError::NoExecutor`]. Drivers call it when routing finds no executor.
    pub fn handle_unroutable(&mut self, now: Time, key: RequestKey) -> Delivery {
        self.journal_unroutable(now, key);
        self.advance(now);
        let key = self.locate(key);
        let task = match answered_task(&mut self.tasks, key) {
            Ok(task) => task,
            Err(reason) => return self.drop_answer(reason),
        };
        let from = self.trace.active().then(|| task.phase());
        let Some(pending) = task.pending.in_flight_mut(key.number()) else {
            return self.drop_answer(DropReason::UnknownRequest);
        };
        let kind = pending.kind.clone();
        let agent = task.agent;
        let counted = pending.counted();
        if counted {
            // It was counted against its gate and agent when taken: give the room back.
            if let Some(gate) = self.gates.get_mut(&kind) {
                gate.in_flight -= 1;
            }
            self.agent_in_flight[agent.0 as usize] -= 1;
        }
        // The request never reached an executor: it is no longer in flight, so ending the
        // task sends no cancel signal for it (its other sent requests still get theirs).
        pending.status = Status::Answered(Err(Box::new(crate::RequestError::Canceled)));
        task.in_flight -= 1;
        self.in_flight -= 1;
        let error = TaskError::NoExecutor {
            task: key.task(),
            kind,
        };
        self.end(
            key.slot(),
            Ending::Completed(Err(error)),
            Cause::NoExecutor,
            from,
        );
        self.stats.failed += 1;
        if counted {
            // Requests its agent's cap held back can go now.
            self.unpark_requests(agent);
        }
        Delivery::Delivered
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
        self.advance(now);
        let slot = *self.index.get(&id).ok_or(CancelError::UnknownTask(id))?;
        let task = &self.tasks[slot as usize];
        if task.phase == SlotPhase::Done {
            return Err(CancelError::AlreadyEnded {
                id,
                state: task.state(),
            });
        }
        self.journal_cancel(now, id, &reason);
        self.cancel_slot(slot, reason);
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
        self.journal_forget(id);
        self.index.remove(&id);
        Some(self.tasks.remove(slot as usize).state())
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

    /// Every task in the table, by id.
    pub fn tasks(&self) -> impl Iterator<Item = TaskInfo> + '_ {
        self.index.iter().map(move |(id, slot)| {
            let t = &self.tasks[*slot as usize];
            TaskInfo {
                id: *id,
                type_name: match &t.body {
                    Body::Live(body) => Cow::Borrowed(body.type_name()),
                    Body::Ended(ended) => ended.type_name.clone(),
                },
                agent: self.agent_name(t.agent).to_owned(),
                priority: t.priority,
                state: t.state(),
                created_at: t.created_at,
                in_flight: t.in_flight,
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
        self.ready.len
    }

    /// Requests made and not yet answered (in the outbox or with an executor).
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

    /// Starts or stops keeping trace events in memory (numbering and hash go on).
    pub fn record_trace(&mut self, record: bool) {
        self.trace.set_recording(record);
    }
}

/// Capacity the outbox keeps when it drains, so a burst does not pin its memory.
const OUTBOX_KEEP: usize = 4096;

/// The earlier of two optional times.
fn earliest(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The live task an answer for `key` is for, or why there is none.
#[inline]
fn answered_task(tasks: &mut Slab<TaskSlot>, key: RequestKey) -> Result<&mut TaskSlot, DropReason> {
    let task = tasks
        .get_mut(key.slot() as usize)
        .filter(|t| t.id == key.task())
        .ok_or(DropReason::UnknownTask)?;
    if task.phase == SlotPhase::Done {
        return Err(DropReason::TaskFinished);
    }
    Ok(task)
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

    /// The hot slot is what a million waiting tasks pay for; keep it from creeping up.
    #[test]
    fn slot_stays_small() {
        // Slab stores `enum Entry { Vacant(usize), Occupied(T) }`, which fits in `T`'s
        // niche or adds a word.
        let size = std::mem::size_of::<TaskSlot>();
        // 144 for the single-request hot path, 8 for the out-of-line family pointer.
        let parts = (
            std::mem::size_of::<Body>(),
            std::mem::size_of::<PendingSet>(),
            std::mem::size_of::<crate::pending::PendingRequest>(),
            std::mem::size_of::<crate::Kind>(),
            std::mem::size_of::<crate::Payload>(),
            std::mem::size_of::<Status>(),
        );
        assert!(size <= 152, "a task slot takes {size} bytes: {parts:?}");
    }
}
