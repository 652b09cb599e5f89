//! How a scheduler is set up ([`Config`]), and what a submission or a cancellation
//! returns ([`Submission`], [`SubmitError`], [`CancelError`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::admission::{Admission, TaskLimits};
use crate::id::TaskId;
use crate::limiter::RequestLimits;
use crate::policy::PolicyChoice;
use crate::state::TaskState;

/// How long an ended task's key is remembered by default: a day.
pub const DEFAULT_IDEMPOTENCY_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

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
    /// results until [`Scheduler::forget`](crate::Scheduler::forget).
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
    /// How much a schedule's session keeps; over it, the oldest turns are dropped
    /// ([`SessionLimits`](crate::SessionLimits): 200 messages, 1 MiB by default).
    pub session_limits: crate::schedule::SessionLimits,
    /// The id of the first task the scheduler makes; the next ones follow in order
    /// (1 by default; 0 is taken as 1). Schedulers that share one id space (the shards of a cluster)
    /// each start from their own range. A snapshot keeps the scheduler's next id, so a
    /// restored or replayed scheduler goes on from where it was, whatever this says.
    pub first_task_id: u64,
    /// Token and cost budgets on LLM requests, with the prices by model; `None` (the
    /// default) counts no spend.
    pub budgets: Option<crate::budget::Budgets>,
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
            session_limits: crate::schedule::SessionLimits::default(),
            first_task_id: 1,
            budgets: None,
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

    /// Sets how much a schedule's session keeps.
    #[must_use]
    pub fn session_limits(mut self, limits: crate::schedule::SessionLimits) -> Config {
        self.session_limits = limits;
        self
    }

    /// Numbers tasks from `first` (0 is taken as 1: no task has id 0): the first task
    /// made gets `first`, the next `first + 1`, and so on.
    #[must_use]
    pub fn first_task_id(mut self, first: u64) -> Config {
        self.first_task_id = first.max(1);
        self
    }

    /// Sets the budgets on LLM requests (see [`Budgets`](crate::Budgets)).
    #[must_use]
    pub fn budgets(mut self, budgets: crate::budget::Budgets) -> Config {
        self.budgets = Some(budgets);
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
    /// The task table holds as many tasks as its index numbers can address (2³²).
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
    /// A fork's task could not be made: its type is not registered, or refused the
    /// saved state or the new input it was to be made from.
    #[error("a task of type `{type_name}` could not be made: {reason}")]
    NotMade {
        /// The task's type.
        type_name: String,
        /// What the registry or the type said.
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
