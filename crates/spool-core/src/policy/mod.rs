//! Run-queue policies: which queued task goes next.
//!
//! A policy only orders tasks. The scheduler owns their states, so a policy never needs
//! to find or delete an entry: a task canceled while queued is skipped when it comes out
//! (lazy deletion), which keeps every policy's operations to a push and a pop.
//!
//! The scheduler keeps two queues of the same policy: the run queue of tasks ready to be
//! polled, and, when task concurrency is limited, the queue of tasks waiting for a slot.
//! Built in: [`Fifo`], [`PriorityLevels`], [`ComputedPriority`] and [`FairShare`]; an
//! embedder plugs in its own by implementing [`Policy`] (see [`PolicyChoice::custom`]).

mod computed;
mod fair;
mod fifo;
mod levels;

use std::fmt;
use std::sync::Arc;

pub use computed::{ComputedConfig, ComputedPriority};
pub use fair::FairShare;
pub use fifo::{Fifo, OrderedFifo};
pub use levels::PriorityLevels;

use crate::id::{AgentId, TaskId};
use crate::priority::Priority;
use crate::time::Time;

/// A queued task as a policy stores and returns it: 16 bytes, `Copy`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskRef {
    pub(crate) task: TaskId,
    pub(crate) index: u32,
}

impl TaskRef {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task
    }
}

/// What a policy is told about a task that became ready (or started to wait for a slot).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueEntry {
    /// The task, to store and hand back from [`Policy::pop`].
    pub task: TaskRef,
    /// Monotonic across the run: the tie-breaker for equal keys (earlier first).
    pub seq: u64,
    /// The task's priority level.
    pub priority: Priority,
    /// The task's agent.
    pub agent: AgentId,
    /// The agent's weight for fair share (1 unless configured).
    pub weight: u32,
    /// When the task entered this queue.
    pub enqueued_at: Time,
    /// When the task was submitted.
    pub created_at: Time,
    /// The task's type name.
    pub type_name: &'static str,
    /// How many ancestors the task has (0 for a task submitted without a parent).
    pub depth: u32,
    /// The task's iteration, from 1; each retry adds one.
    pub iteration: u32,
}

/// Orders queued tasks. Implement it to plug in an embedder's own policy.
///
/// Every queue must break ties by [`QueueEntry::seq`], so that equal keys come out in
/// the order they went in and runs are reproducible.
pub trait Policy: Send + fmt::Debug {
    /// Adds a task.
    fn push(&mut self, entry: &QueueEntry);
    /// Removes and returns the task to go next, given the time now.
    fn pop(&mut self, now: Time) -> Option<TaskRef>;
    /// How many tasks are queued (including ones the scheduler will skip).
    fn len(&self) -> usize;
    /// Whether no task is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A short name for tables and logs.
    fn name(&self) -> &'static str;
    /// A task of `agent` started (took a slot): for policies that share by agent.
    fn task_started(&mut self, agent: AgentId) {
        let _ = agent;
    }
    /// A started task of `agent` ended.
    fn task_ended(&mut self, agent: AgentId) {
        let _ = agent;
    }
    /// The task's score at `now`, for policies that compute one (shown in tables).
    fn score(&self, entry: &QueueEntry, now: Time) -> Option<i64> {
        let _ = (entry, now);
        None
    }
    /// Every queued task with the sequence number it was pushed with, for a snapshot
    /// (entries the scheduler will skip may be among them; order does not matter).
    /// Pushing the same entries again in sequence order must rebuild the same order.
    /// `None`, the default, if the policy cannot list them: a scheduler using it cannot
    /// be snapshotted.
    fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        None
    }
    /// A queued task ended before it came out. Policies that order by more than the
    /// order of entries (fair share: an agent's place is its oldest live task's) take
    /// it out; the default leaves it, and the scheduler skips it when it comes out.
    fn forget(&mut self, task: TaskRef) {
        let _ = task;
    }
}

/// Makes the policy for a queue; called once per queue.
pub type PolicyFactory = Arc<dyn Fn() -> Box<dyn Policy> + Send + Sync>;

/// Which run-queue policy a scheduler uses.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum PolicyChoice {
    /// First in, first out.
    #[default]
    Fifo,
    /// Priority levels, FIFO within a level.
    Priority,
    /// The computed score: type base, age, depth, retries.
    Computed(ComputedConfig),
    /// Weighted fair share across agents, priority levels within an agent.
    FairShare,
    /// An embedder's own policy.
    Custom(PolicyFactory),
}

impl PolicyChoice {
    /// An embedder's own policy, made by `factory` for each queue.
    pub fn custom<F>(factory: F) -> PolicyChoice
    where
        F: Fn() -> Box<dyn Policy> + Send + Sync + 'static,
    {
        PolicyChoice::Custom(Arc::new(factory))
    }

    /// The queue of tasks waiting for a slot: the same order, and entries pushed back
    /// with their old sequence number go back to their place.
    pub(crate) fn build_slot_queue(&self) -> PolicyQueue {
        match self {
            PolicyChoice::Fifo => PolicyQueue::Other(Box::new(OrderedFifo::new())),
            other => other.build(),
        }
    }

    pub(crate) fn build(&self) -> PolicyQueue {
        match self {
            PolicyChoice::Fifo => PolicyQueue::Fifo(Fifo::new()),
            PolicyChoice::Priority => PolicyQueue::Levels(PriorityLevels::new()),
            PolicyChoice::Computed(config) => {
                PolicyQueue::Other(Box::new(ComputedPriority::new(config.clone())))
            }
            PolicyChoice::FairShare => PolicyQueue::Other(Box::new(FairShare::new())),
            PolicyChoice::Custom(factory) => PolicyQueue::Other(factory()),
        }
    }
}

impl fmt::Debug for PolicyChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyChoice::Fifo => f.write_str("Fifo"),
            PolicyChoice::Priority => f.write_str("Priority"),
            PolicyChoice::Computed(c) => f.debug_tuple("Computed").field(c).finish(),
            PolicyChoice::FairShare => f.write_str("FairShare"),
            PolicyChoice::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// A policy as a queue of the scheduler (the run queue's or the slot queue's order): the
/// two simplest policies without dynamic dispatch (they need only the task reference),
/// any other behind the trait.
#[derive(Debug)]
pub(crate) enum PolicyQueue {
    Fifo(Fifo),
    Levels(PriorityLevels),
    Other(Box<dyn Policy>),
}

impl PolicyQueue {
    /// Whether the policy needs the full entry (type name, depth...), not just the
    /// task and its priority.
    #[inline]
    pub(crate) fn needs_entry(&self) -> bool {
        matches!(self, PolicyQueue::Other(_))
    }

    #[inline(always)]
    pub(crate) fn push_ref(&mut self, task: TaskRef, seq: u64, priority: Priority) {
        match self {
            PolicyQueue::Fifo(q) => q.push_ref(task),
            PolicyQueue::Levels(q) => q.push_ref(task, seq, priority),
            PolicyQueue::Other(_) => {}
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, entry: &QueueEntry) {
        match self {
            PolicyQueue::Fifo(q) => q.push(entry),
            PolicyQueue::Levels(q) => q.push(entry),
            PolicyQueue::Other(q) => q.push(entry),
        }
    }

    #[inline(always)]
    pub(crate) fn pop(&mut self, now: Time) -> Option<TaskRef> {
        match self {
            PolicyQueue::Fifo(q) => q.pop(now),
            PolicyQueue::Levels(q) => q.pop(now),
            PolicyQueue::Other(q) => q.pop(now),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            PolicyQueue::Fifo(q) => q.name(),
            PolicyQueue::Levels(q) => q.name(),
            PolicyQueue::Other(q) => q.name(),
        }
    }

    pub(crate) fn task_started(&mut self, agent: AgentId) {
        if let PolicyQueue::Other(q) = self {
            q.task_started(agent);
        }
    }

    pub(crate) fn task_ended(&mut self, agent: AgentId) {
        if let PolicyQueue::Other(q) = self {
            q.task_ended(agent);
        }
    }

    pub(crate) fn forget(&mut self, task: TaskRef) {
        if let PolicyQueue::Other(q) = self {
            q.forget(task);
        }
    }

    pub(crate) fn queued(&self) -> Option<Vec<(u64, TaskRef)>> {
        match self {
            PolicyQueue::Fifo(q) => q.queued(),
            PolicyQueue::Levels(q) => q.queued(),
            PolicyQueue::Other(q) => q.queued(),
        }
    }

    pub(crate) fn score(&self, entry: &QueueEntry, now: Time) -> Option<i64> {
        match self {
            PolicyQueue::Other(q) => q.score(entry, now),
            _ => None,
        }
    }
}
