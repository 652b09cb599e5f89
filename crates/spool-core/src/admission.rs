//! Admission: what a submission is told (`ScheduleResult`), and the limits
//! on tasks — how many may run at once, overall, per agent and per type; how many may
//! start in a window; how many may wait.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::id::TaskId;

/// Limits on tasks. A task *runs* from the moment it gets a slot until it ends; while
/// it waits for one it is queued (`Waiting(Slot)`). Children spawned by a running task
/// run within its slot (they are part of its work), so a parent waiting for its
/// children can never deadlock against them. A limit of 0 on running or starting tasks
/// is taken as 1: none would hold every task back forever.
///
/// # Example
/// ```
/// use std::time::Duration;
/// use spool_core::TaskLimits;
///
/// let limits = TaskLimits::new()
///     .max_running(50)                           // max_loops
///     .max_running_per_type("plan", 2)           // per-type limits
///     .max_running_per_agent(8)                  // per-agent in flight
///     .max_queued(10_000)                        // admission
///     .start_window(50, Duration::from_secs(60)); // rate window
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct TaskLimits {
    /// At most this many tasks running at once.
    pub max_running: Option<usize>,
    /// At most this many tasks of one agent running at once.
    pub max_running_per_agent: Option<usize>,
    /// At most this many tasks of a type running at once, by type name.
    pub max_running_per_type: BTreeMap<String, usize>,
    /// At most `.0` tasks started in any window of `.1`.
    pub start_window: Option<(u32, Duration)>,
    /// At most this many tasks queued (waiting for a slot or for dependencies);
    /// more are rejected.
    pub max_queued: Option<usize>,
    /// At most this many tasks of one agent queued; more are rejected.
    pub max_queued_per_agent: Option<usize>,
    /// Limits for one agent, by name, in place of the per-agent limits above.
    pub agents: BTreeMap<String, AgentTaskLimits>,
}

/// The limits on one agent's tasks ([`TaskLimits::agent`]). A limit left `None` is the
/// one [`TaskLimits`] sets for every agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct AgentTaskLimits {
    /// At most this many of the agent's tasks running at once, in place of
    /// [`TaskLimits::max_running_per_agent`].
    pub max_running: Option<usize>,
    /// At most this many of the agent's tasks queued, in place of
    /// [`TaskLimits::max_queued_per_agent`].
    pub max_queued: Option<usize>,
}

impl AgentTaskLimits {
    /// No limits of the agent's own.
    pub fn new() -> AgentTaskLimits {
        AgentTaskLimits::default()
    }

    /// At most `max` of the agent's tasks running at once.
    #[must_use]
    pub fn max_running(mut self, max: usize) -> AgentTaskLimits {
        self.max_running = Some(max);
        self
    }

    /// At most `max` of the agent's tasks queued; more are rejected.
    #[must_use]
    pub fn max_queued(mut self, max: usize) -> AgentTaskLimits {
        self.max_queued = Some(max);
        self
    }
}

impl TaskLimits {
    /// No limits.
    pub fn new() -> TaskLimits {
        TaskLimits::default()
    }

    /// At most `max` tasks running at once.
    #[must_use]
    pub fn max_running(mut self, max: usize) -> TaskLimits {
        self.max_running = Some(max);
        self
    }

    /// At most `max` tasks of one agent running at once.
    #[must_use]
    pub fn max_running_per_agent(mut self, max: usize) -> TaskLimits {
        self.max_running_per_agent = Some(max);
        self
    }

    /// At most `max` tasks of type `name` running at once.
    #[must_use]
    pub fn max_running_per_type(mut self, name: impl Into<String>, max: usize) -> TaskLimits {
        self.max_running_per_type.insert(name.into(), max);
        self
    }

    /// At most `max` tasks started in any window of `per`.
    #[must_use]
    pub fn start_window(mut self, max: u32, per: Duration) -> TaskLimits {
        self.start_window = Some((max, per));
        self
    }

    /// At most `max` tasks queued; more are rejected.
    #[must_use]
    pub fn max_queued(mut self, max: usize) -> TaskLimits {
        self.max_queued = Some(max);
        self
    }

    /// At most `max` tasks of one agent queued; more are rejected.
    #[must_use]
    pub fn max_queued_per_agent(mut self, max: usize) -> TaskLimits {
        self.max_queued_per_agent = Some(max);
        self
    }

    /// Limits for the agent named `agent`, in place of the per-agent limits that
    /// apply to every other agent.
    ///
    /// # Example
    /// ```
    /// use spool_core::{AgentTaskLimits, TaskLimits};
    ///
    /// // Every agent may run 4 tasks; "batch" only 1, and may queue at most 100.
    /// let limits = TaskLimits::new()
    ///     .max_running_per_agent(4)
    ///     .agent("batch", AgentTaskLimits::new().max_running(1).max_queued(100));
    /// assert_eq!(limits.agents["batch"].max_running, Some(1));
    /// ```
    #[must_use]
    pub fn agent(mut self, agent: impl Into<String>, limits: AgentTaskLimits) -> TaskLimits {
        self.agents.insert(agent.into(), limits);
        self
    }

    /// Whether any limit holds back the start of a task.
    pub(crate) fn limits_starts(&self) -> bool {
        self.max_running.is_some()
            || self.max_running_per_agent.is_some()
            || self.agents.values().any(|a| a.max_running.is_some())
            || !self.max_running_per_type.is_empty()
            || self.start_window.is_some()
    }
}

/// How a submitted task was admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// It has a slot and is in the run queue.
    Ready,
    /// It waits for a slot: `position` tasks (itself included) are ahead of or level
    /// with it, and one is expected in about `estimated_wait` (from the average time a
    /// task has held a slot so far; 30 s before any task has ended).
    Queued {
        /// Its place in the queue, from 1.
        position: usize,
        /// The expected wait.
        estimated_wait: Duration,
    },
    /// A slot is free but the start window is full: it starts, by itself, when the
    /// window lets it — after `retry_after` if nothing is ahead of it. It need not be
    /// submitted again.
    RateLimited {
        /// When the window has room.
        retry_after: Duration,
    },
    /// It waits for tasks it depends on (this many) to complete.
    Blocked {
        /// Unmet dependencies.
        dependencies: u32,
    },
    /// It was not accepted. It stays visible as a result,
    /// `Completed(Err(TaskError::Rejected))`.
    Rejected {
        /// Why.
        reason: RejectReason,
    },
}

/// Why a submission was rejected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RejectReason {
    /// The queue holds `limit` tasks already.
    QueueFull {
        /// The cap.
        limit: usize,
    },
    /// The agent has `limit` tasks queued already.
    AgentQueueFull {
        /// The agent.
        agent: String,
        /// The cap.
        limit: usize,
    },
    /// A task it depends on has already failed or been canceled, so it could never run.
    DependencyFailed {
        /// The dependency.
        dependency: TaskId,
    },
    /// A live task was submitted with the same key.
    Duplicate {
        /// The key.
        key: String,
        /// The live task that has it.
        existing: TaskId,
    },
    /// A task with the same key has already ended, within the idempotency window
    /// ([`Config::idempotency_window`](crate::Config::idempotency_window)): a key runs
    /// at most once, even after the result was evicted.
    AlreadyEnded {
        /// The key.
        key: String,
        /// The task that ran with it.
        original: TaskId,
        /// When it ended.
        ended_at: crate::time::Time,
    },
    /// The key was used before for a different request: the task it made was given
    /// another [fingerprint](crate::NewTask::fingerprint). A key names one request;
    /// a new request needs a new key.
    KeyReused {
        /// The key.
        key: String,
        /// The task the key was first used for.
        original: TaskId,
    },
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::QueueFull { limit } => write!(f, "the queue is full ({limit} tasks)"),
            RejectReason::AgentQueueFull { agent, limit } => {
                write!(f, "agent `{agent}` has {limit} tasks queued already")
            }
            RejectReason::DependencyFailed { dependency } => {
                write!(f, "its dependency, task {dependency}, did not complete")
            }
            RejectReason::Duplicate { key, existing } => {
                write!(f, "task {existing} with key `{key}` is still live")
            }
            RejectReason::AlreadyEnded {
                key,
                original,
                ended_at,
            } => write!(
                f,
                "task {original} with key `{key}` already ran (it ended at {ended_at}); \
                 a key runs once within the idempotency window"
            ),
            RejectReason::KeyReused { key, original } => write!(
                f,
                "the Idempotency-Key \"{key}\" was used for a different request (task {original})"
            ),
        }
    }
}
