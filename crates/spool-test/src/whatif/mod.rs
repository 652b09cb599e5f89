//! What-if runs: a recorded workload — when each task arrived, and how long each answer
//! took — run again under other scheduling rules in virtual time, with the same figures
//! for both runs.
//!
//! [`Workload::from_journal`] replays a journal exactly, input by input with
//! [`Scheduler::apply`](spool_core::Scheduler::apply), taking the requests the scheduler
//! lets go after every input to note when each went out. From that it keeps:
//! - the **arrivals**: every submission (a `Submit` or `SubmitAll` entry) with its time,
//!   and the cancellations and deadline changes that came from outside; children a
//!   task spawned are not arrivals (the task spawns them again);
//! - for each request (task, request number), its **answers** in order — a 429 and then
//!   a value are two answers — each with its **latency**: the time it arrived less the
//!   time the request last went out;
//! - the recorded run's figures ([`RunStats`]).
//!
//! [`Workload::run_under`] then submits the same arrivals at the same times to a fresh
//! [`Scheduler`](spool_core::Scheduler) set up by the [`Config`] it is given, and plays
//! the executors: each request that goes out is answered after its recorded latency
//! with its recorded result. A request asked again after its recorded answers ran out
//! (it was retried more often) gets the last one again; a request the recorded run
//! never sent (the run took another path) is *unmatched*: it is answered at once with
//! [`RequestError::Failed`](spool_core::RequestError::Failed) and listed in
//! [`RunStats::unmatched`]. A request the recorded run sent but never saw answered
//! stays unanswered. Polling a task takes no virtual time.
//!
//! Tasks are matched between the two runs by where they come from, not by id: the
//! `n`th arrival is the `n`th arrival, and the `k`th child a task spawns is its `k`th
//! child; so a child keeps its recorded answers when it gets another id. Everything
//! that happens at one instant happens in the order of a sequence number (arrivals in
//! journal order, then answers in the order their requests went out): the same
//! workload and configuration give the same figures on every run.
//!
//! # Example
//! ```
//! use std::time::Duration;
//! use spool_core::{Config, Kind, PolicyChoice, RequestLimits, TaskRegistry};
//! use spool_test::{TestScheduler, Workload};
//!
//! # use spool_core::{AgentTask, NewTask, SavedTask, Step, TaskContext};
//! # #[derive(Debug, serde::Serialize, serde::Deserialize)]
//! # struct Ask { asked: bool }
//! # impl AgentTask for Ask {
//! #     fn poll(&mut self, cx: &mut TaskContext<'_>) -> Step {
//! #         if self.asked { return Step::done("ok") }
//! #         self.asked = true;
//! #         cx.llm(serde_json::json!("hello"));
//! #         Step::Wait
//! #     }
//! #     fn type_name(&self) -> &'static str { "ask" }
//! #     fn save(&self) -> Result<SavedTask, spool_core::StateError> { SavedTask::serde(self) }
//! # }
//! // Record a run: three tasks, answers after 10 ms each.
//! let mut test = TestScheduler::with_config(Config::new());
//! test.record_journal().unwrap();
//! test.mock_with_latency(Kind::Llm, spool_test::Mock::Fixed("hi".into()), Duration::from_millis(10));
//! for _ in 0..3 {
//!     test.submit(NewTask::new(Ask { asked: false }));
//! }
//! test.run_until_quiet();
//! let journal = test.journal().unwrap();
//!
//! // Run it again with one LLM call at a time.
//! let registry = TaskRegistry::new().with_serde::<Ask>("ask");
//! let workload = Workload::from_journal(&journal, &registry).unwrap();
//! assert_eq!(workload.recorded().makespan, Duration::from_millis(10));
//! let one_at_a_time = Config::new()
//!     .policy(PolicyChoice::Fifo)
//!     .requests(RequestLimits::new().max_in_flight(Kind::Llm, 1));
//! let what_if = workload.run_under(one_at_a_time);
//! assert_eq!(what_if.makespan, Duration::from_millis(30));
//! assert_eq!(what_if.peak_in_flight, 1);
//! ```

mod record;
mod run;
mod stats;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use spool_core::{
    CancelReason, Config, Fingerprint, Journal, RequestError, RequestLimits, SavedSubmission,
    TaskId, TaskLimits, TaskRegistry, Time, Value,
};

pub use stats::{RunStats, UnmatchedRequest, Waits};

/// A recorded workload: its arrivals and its answers with their latencies, and the
/// recorded run's figures. Made by [`Workload::from_journal`]; run under other rules by
/// [`Workload::run_under`], as many times as wanted.
pub struct Workload {
    /// Submissions, cancellations and deadline changes from outside, in journal order.
    inputs: Vec<Input>,
    /// Each request's recorded answers, in order, by (recorded task, request number);
    /// an empty list for a request that went out and was never answered.
    answers: BTreeMap<(TaskId, u32), Vec<RecordedAnswer>>,
    /// The children each recorded task spawned, in the order it spawned them.
    children: BTreeMap<TaskId, Vec<TaskId>>,
    /// Rebuilds the submitted tasks for each run.
    registry: TaskRegistry,
    /// The recorded run's figures.
    recorded: RunStats,
    /// The recorded run's task limits.
    task_limits: TaskLimits,
    /// The recorded run's request limits.
    request_limits: RequestLimits,
}

impl fmt::Debug for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workload")
            .field("inputs", &self.inputs.len())
            .field("requests", &self.answers.len())
            .field("recorded", &self.recorded)
            .finish_non_exhaustive()
    }
}

/// An input from outside the recorded scheduler, at its time.
#[derive(Clone, Debug)]
struct Input {
    /// When (never earlier than the input before it).
    at: Time,
    /// What.
    what: InputKind,
}

/// What came from outside.
#[derive(Clone, Debug)]
enum InputKind {
    /// Tasks submitted (`batch`: together, by `submit_all`); the first got the id
    /// `first` in the recorded run, the others the ids after it.
    Submit {
        first: TaskId,
        tasks: Vec<SavedSubmission>,
        fingerprints: Vec<Option<Fingerprint>>,
        batch: bool,
    },
    /// The recorded task `task` was canceled.
    Cancel { task: TaskId, reason: CancelReason },
    /// The recorded task `task` was given the deadline `deadline`.
    Deadline { task: TaskId, deadline: Time },
}

/// One recorded answer to a request.
#[derive(Clone, Debug)]
struct RecordedAnswer {
    /// How long after the request went out it came.
    latency: Duration,
    /// What it was.
    answer: Answered,
}

/// A recorded answer's content.
#[derive(Clone, Debug)]
enum Answered {
    /// An executor's result, and the tokens it reported.
    Result(Result<Value, RequestError>, Option<u32>),
    /// No executor served the request.
    Unroutable,
}

impl Answered {
    /// Whether it is a 429.
    fn is_rate_limited(&self) -> bool {
        matches!(
            self,
            Answered::Result(Err(RequestError::RateLimited { .. }), _)
        )
    }
}

impl Workload {
    /// The workload of `journal`, replayed exactly with `registry` to rebuild its tasks.
    ///
    /// # Errors
    /// [`WhatIfError::Start`] if the journal's starting snapshot cannot be read or
    /// restored; [`WhatIfError::NotEmpty`] if it holds tasks (their arrivals are not in
    /// the journal); [`WhatIfError::Replay`] if an entry cannot be applied (a task type
    /// `registry` does not know, an answer that is not JSON).
    pub fn from_journal(
        journal: &Journal,
        registry: &TaskRegistry,
    ) -> Result<Workload, WhatIfError> {
        record::record(journal, registry)
    }

    /// The recorded run's figures.
    pub fn recorded(&self) -> &RunStats {
        &self.recorded
    }

    /// The task limits the recorded run ran under.
    pub fn task_limits(&self) -> &TaskLimits {
        &self.task_limits
    }

    /// The request limits (and 429 back-off) the recorded run ran under.
    pub fn request_limits(&self) -> &RequestLimits {
        &self.request_limits
    }

    /// Tasks submitted from outside (each task of a `submit_all` counted).
    pub fn arrivals(&self) -> usize {
        self.inputs
            .iter()
            .map(|input| match &input.what {
                InputKind::Submit { tasks, .. } => tasks.len(),
                _ => 0,
            })
            .sum()
    }

    /// Runs the workload on a fresh scheduler set up by `config`, in virtual time, and
    /// returns its figures. The trace is recorded whatever `config` says (the figures
    /// come from it).
    pub fn run_under(&self, config: Config) -> RunStats {
        run::run(self, config)
    }
}

/// Why a journal's workload could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WhatIfError {
    /// The journal's starting snapshot could not be read or restored.
    #[error("the journal's starting snapshot: {0}")]
    Start(String),
    /// The journal starts from a scheduler that already holds tasks: their arrivals
    /// are not in it, so its workload is not whole.
    #[error(
        "the journal starts from a snapshot holding {tasks} tasks, whose arrivals it does not \
         have: a what-if run needs a journal that starts from an empty scheduler (as `spool \
         demo --journal` records)"
    )]
    NotEmpty {
        /// The tasks the start holds.
        tasks: usize,
    },
    /// An entry could not be applied as recorded.
    #[error("{0}")]
    Replay(#[from] spool_core::ReplayError),
}
