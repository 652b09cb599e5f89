//! Identifiers: tasks, agents, and the idempotency key of every request.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

/// A task's identity: assigned by the scheduler at submission, monotonic, never reused.
///
/// Ids are not slab keys: a finished task's index is reused, its id is not, so a stale
/// id can never reach another task. `Display` is the number (`12`); `Debug` marks it as
/// a task's (`#12`), so a failed assertion reads.
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TaskId(pub(crate) u64);

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl TaskId {
    /// The numeric value (1 for the first task of a run).
    pub const fn get(self) -> u64 {
        self.0
    }

    /// An id from its numeric value, as read back from a trace, a journal or an API.
    pub const fn from_raw(raw: u64) -> TaskId {
        TaskId(raw)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// An agent: the unit of fairness and of per-agent limits. Interned by the scheduler;
/// [`AgentId::DEFAULT`] is the agent of tasks submitted without one.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AgentId(pub(crate) u32);

impl AgentId {
    /// The agent of tasks submitted without one (named `default`).
    pub const DEFAULT: AgentId = AgentId(0);

    /// The numeric value, dense from 0 in order of first use.
    pub const fn get(self) -> u32 {
        self.0
    }
}

/// The idempotency key of a request: `(task id, request number)`.
///
/// Request numbers count from 1 within a task. Executors may use the key to
/// de-duplicate work: after a restore, requests that were in flight are sent again with
/// the same key. Equality, ordering and hashing look only at `(task, number)`; the key
/// also carries the task's index so that an answer finds its task without a lookup.
#[derive(Copy, Clone, Debug, Serialize, Deserialize)]
pub struct RequestKey {
    task: TaskId,
    number: u32,
    /// Named `slot` when serialized: journal entries and keys embedders stored carry it
    /// under that name.
    #[serde(rename = "slot")]
    index: u32,
}

impl RequestKey {
    pub(crate) const fn new(task: TaskId, number: u32, index: u32) -> RequestKey {
        RequestKey {
            task,
            number,
            index,
        }
    }

    /// The task that made the request.
    pub const fn task(&self) -> TaskId {
        self.task
    }

    /// The request's number within its task, from 1.
    pub const fn number(&self) -> u32 {
        self.number
    }

    pub(crate) const fn index(&self) -> u32 {
        self.index
    }
}

impl PartialEq for RequestKey {
    fn eq(&self, other: &Self) -> bool {
        self.task == other.task && self.number == other.number
    }
}

impl Eq for RequestKey {}

impl Hash for RequestKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.task.hash(state);
        self.number.hash(state);
    }
}

impl PartialOrd for RequestKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RequestKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.task, self.number).cmp(&(other.task, other.number))
    }
}

impl fmt::Display for RequestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.task, self.number)
    }
}
