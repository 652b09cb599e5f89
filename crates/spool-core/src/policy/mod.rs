//! Run-queue policies: which ready task is polled next.
//!
//! A policy only orders tasks. The scheduler owns their states, so a policy never needs
//! to find or delete an entry: a task canceled while queued is skipped when it comes out
//! (lazy deletion), which keeps every policy's operations to a push and a pop.

mod fifo;

use std::fmt;

pub use fifo::Fifo;

use crate::{AgentId, Priority, TaskId, Time};

/// A queued task as a policy stores and returns it: 16 bytes, `Copy`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaskRef {
    pub(crate) task: TaskId,
    pub(crate) slot: u32,
}

impl TaskRef {
    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task
    }
}

/// What a policy is told about a task that became ready.
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
    /// When the task became ready.
    pub enqueued_at: Time,
    /// When the task was submitted.
    pub created_at: Time,
}

/// Orders ready tasks. Implement it to plug in an embedder's own policy.
///
/// Every queue must break ties by [`QueueEntry::seq`], so that equal keys come out in
/// the order they went in and runs are reproducible.
pub trait Policy: Send + fmt::Debug {
    /// Adds a ready task.
    fn push(&mut self, entry: &QueueEntry);
    /// Removes and returns the task to poll next, given the time now.
    fn pop(&mut self, now: Time) -> Option<TaskRef>;
    /// How many tasks are queued (including ones the scheduler will skip).
    fn len(&self) -> usize;
    /// Whether no task is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A short name for tables and logs.
    fn name(&self) -> &'static str;
}

/// The scheduler's run queue: the built-in policies without dynamic dispatch, or an
/// embedder's own.
#[derive(Debug)]
pub(crate) enum RunQueue {
    Fifo(Fifo),
    Custom(Box<dyn Policy>),
}

impl RunQueue {
    #[inline]
    pub(crate) fn push(&mut self, entry: &QueueEntry) {
        match self {
            RunQueue::Fifo(q) => q.push(entry),
            RunQueue::Custom(q) => q.push(entry),
        }
    }

    #[inline]
    pub(crate) fn pop(&mut self, now: Time) -> Option<TaskRef> {
        match self {
            RunQueue::Fifo(q) => q.pop(now),
            RunQueue::Custom(q) => q.pop(now),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            RunQueue::Fifo(q) => q.name(),
            RunQueue::Custom(q) => q.name(),
        }
    }
}
